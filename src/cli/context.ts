/** What every `kvconnect` command gets besides its commander options. */
import type { DottedArg } from '../config/dotted-args.ts';

export interface CliIO {
  out(text: string): void;
  err(text: string): void;
}

export interface CliContext {
  io: CliIO;
  /** `--kv-transfer-config.<path> VALUE` arguments, taken out of argv before commander parses it. */
  dottedKvTransferConfig: DottedArg[];
  /** `--kv-events-config.<field> VALUE` arguments, likewise. */
  dottedKvEventsConfig?: DottedArg[];
  /** Exit code to return; commands set it (0 ok, 2 configuration or usage error). */
  exitCode: number;
}

export const EXIT_OK = 0;
export const EXIT_USAGE = 2;
