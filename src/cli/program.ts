/**
 * The `kvconnect` program. Each command lives in ./commands/<name>.ts and exports a
 * `register…(program, ctx)` function; add yours to COMMANDS. Heavy modules are imported
 * inside action handlers so `--help` stays fast.
 */
import { Command, CommanderError } from 'commander';
import { extractDottedArgs } from '../config/dotted-args.ts';
import { formatErrorText } from '../errors/format.ts';
import { tuneJit } from '../util/jit-tuning.ts';
import { registerBenchServeCommand } from './commands/bench-serve.ts';
import { registerBenchTraceCommand } from './commands/bench-trace.ts';
import { registerCheckConfig } from './commands/check-config.ts';
import { registerDemoCommand } from './commands/demo.ts';
import { registerProxyCommand } from './commands/proxy.ts';
import { registerServeCommand } from './commands/serve.ts';
import { type CliContext, type CliIO, EXIT_OK, EXIT_USAGE } from './context.ts';

type RegisterCommand = (program: Command, ctx: CliContext) => void;

const COMMANDS: readonly RegisterCommand[] = [
  registerCheckConfig,
  (program, ctx) => void registerServeCommand(program, ctx),
  (program, ctx) => void registerProxyCommand(program, {}, ctx),
  (program) => void registerBenchServeCommand(program),
  (program) => void registerBenchTraceCommand(program),
  registerDemoCommand,
];

const stdio: CliIO = {
  out: (t) => void process.stdout.write(t),
  err: (t) => void process.stderr.write(t),
};

export function buildProgram(ctx: CliContext): Command {
  const program = new Command('kvconnect')
    .description('KV-cache transfer for disaggregated LLM inference (vLLM KV connectors in TypeScript)')
    .version('0.1.0')
    .exitOverride()
    .configureOutput({ writeOut: ctx.io.out, writeErr: ctx.io.err })
    .showHelpAfterError('(run with --help for usage)');
  for (const register of COMMANDS) register(program, ctx);
  return program;
}

/** Runs the CLI on `argv` (without node and script) and returns the exit code. */
export async function runCli(argv: readonly string[], io: CliIO = stdio): Promise<number> {
  const ctx: CliContext = { io, dottedKvTransferConfig: [], exitCode: EXIT_OK };
  try {
    // KVCONNECT_V8_INTERRUPT_BUDGET, when set (src/util/jit-tuning.ts); a bad value is a usage error.
    tuneJit();
    const transfer = extractDottedArgs(argv, '--kv-transfer-config');
    const events = extractDottedArgs(transfer.rest, '--kv-events-config');
    ctx.dottedKvTransferConfig = transfer.dotted;
    ctx.dottedKvEventsConfig = events.dotted;
    await buildProgram(ctx).parseAsync(events.rest, { from: 'user' });
    return ctx.exitCode;
  } catch (e) {
    if (e instanceof CommanderError) return e.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
    io.err(`${formatErrorText(e)}\n`);
    return EXIT_USAGE;
  }
}
