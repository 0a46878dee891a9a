/**
 * The checks and errors both agents (in-thread and threaded) apply on the caller's thread,
 * so the two cannot drift apart: region validation, the peer's protocol version, option
 * ranges, the closed / unknown-handle / unknown-agent errors, and the status of a transfer
 * all of whose blocks failed.
 */
import { availableParallelism } from 'node:os';
import { KVError } from '../errors/index.ts';
import { type EnvName, readEnv } from '../util/envs.ts';
import type { TransferFailure } from './failure.ts';
import { MAX_PAYLOAD_BYTES } from './frame-codec.ts';
import { TRANSFER_PROTOCOL_VERSION } from './messages.ts';
import type { AgentMetadata, DescPair, FailedBlocks, MemoryRegion, TransferStatus } from './types.ts';

/** Throws TRANSFER_BAD_REGION unless every region holds numBlocks × blockBytes bytes with sane sizes. */
export function checkRegions(regions: readonly MemoryRegion[]): void {
  for (const r of regions) {
    const ok =
      Number.isSafeInteger(r.id) &&
      Number.isSafeInteger(r.blockBytes) &&
      r.blockBytes > 0 &&
      r.blockBytes <= MAX_PAYLOAD_BYTES &&
      Number.isSafeInteger(r.numBlocks) &&
      r.numBlocks > 0 &&
      r.bytes.length >= r.blockBytes * r.numBlocks;
    if (!ok) {
      throw new KVError(
        'TRANSFER_BAD_REGION',
        `region ${r.id} is inconsistent: ${r.bytes.length} bytes for ${r.numBlocks} blocks of ${r.blockBytes}`,
        {
          hint: `A region must hold numBlocks × blockBytes bytes, with positive integer sizes (a block ≤ ${MAX_PAYLOAD_BYTES} bytes).`,
          details: { region: r.id, bytes: r.bytes.length, numBlocks: r.numBlocks, blockBytes: r.blockBytes },
        },
      );
    }
  }
}

/** Throws TRANSFER_PROTOCOL_MISMATCH unless the peer speaks this agent's protocol version. */
export function checkProtocol(meta: AgentMetadata): void {
  if (meta.protocolVersion === TRANSFER_PROTOCOL_VERSION) return;
  throw new KVError(
    'TRANSFER_PROTOCOL_MISMATCH',
    `remote agent ${meta.agentName} speaks transfer protocol ${meta.protocolVersion}, this agent ${TRANSFER_PROTOCOL_VERSION}`,
    { hint: 'Run the same kvconnect version on both engines.' },
  );
}

/** Set to a whole number ≥ 1 to let agents created without `copyThreads` use that many copy threads. */
export const COPY_THREADS_ENV = 'KVCONNECT_COPY_THREADS' satisfies EnvName;

/** The most copy threads an agent takes (native/kvhash.c MAX_COPY_THREADS). */
export const MAX_COPY_THREADS = 16;

/** A whole-number agent option that an environment variable sets when the option is absent. */
interface WholeNumberSetting {
  readonly option: number | undefined;
  readonly optionName: string;
  readonly env: typeof COPY_THREADS_ENV | typeof BUSY_POLL_ENV;
  /** The value when neither the option nor the variable is set. */
  readonly fallback: number;
  readonly min: number;
  readonly max: number;
  /** What it counts, said after "a whole number" (e.g. " of microseconds"). */
  readonly unit?: string;
  /** How to fix a bad value. */
  readonly fix: string;
}

/** The option, else the variable (unset or empty: the fallback), checked: a RangeError names the field and the fix. */
function resolveWholeNumber(s: WholeNumberSetting): number {
  const fromEnv = readEnv(s.env);
  const value = s.option ?? (fromEnv === undefined || fromEnv === '' ? s.fallback : Number(fromEnv));
  if (!(Number.isSafeInteger(value) && value >= s.min && value <= s.max)) {
    const field = s.option === undefined ? `${s.env} (environment)` : s.optionName;
    throw new RangeError(
      `${field} must be a whole number${s.unit ?? ''} from ${s.min} to ${s.max}, got ${s.option ?? JSON.stringify(fromEnv)}; ${s.fix}`,
    );
  }
  return value;
}

/** The copy threads an agent uses: the option, else KVCONNECT_COPY_THREADS, else 1 (checked, with the fix). */
export function resolveCopyThreads(option: number | undefined): number {
  return resolveWholeNumber({
    option,
    optionName: 'copyThreads',
    env: COPY_THREADS_ENV,
    fallback: 1,
    min: 1,
    max: MAX_COPY_THREADS,
    fix: 'set it to 1 to copy on one thread, or to the number of cores a same-host transfer may use',
  });
}

/** Set to whole microseconds (0 = off) for agents created without `busyPollUs`. */
export const BUSY_POLL_ENV = 'KVCONNECT_BUSY_POLL_US' satisfies EnvName;

/**
 * The default busy-poll window (µs) after transfer activity of an agent on its caller's loop
 * (busy-poll.ts; docs/transfer.md "Busy polling"). A threaded agent's default is 0: its
 * caller's thread must still be woken for each completion, and on a 2-core machine the
 * polling agent thread and the polling peer leave that thread no core (measured slower:
 * docs/transfer.md "Busy polling").
 */
export const DEFAULT_BUSY_POLL_US = 100;

/** The longest busy-poll window an agent takes (µs). */
export const MAX_BUSY_POLL_US = 100_000;

/**
 * The busy-poll window: the option, else KVCONNECT_BUSY_POLL_US, else the default
 * (DEFAULT_BUSY_POLL_US; 0 for a `threaded` agent), checked, with the fix.
 */
export function resolveBusyPollUs(option: number | undefined, threaded = false): number {
  const fallback = threaded ? 0 : DEFAULT_BUSY_POLL_US;
  return resolveWholeNumber({
    option,
    optionName: 'busyPollUs',
    env: BUSY_POLL_ENV,
    fallback,
    min: 0,
    max: MAX_BUSY_POLL_US,
    unit: ' of microseconds',
    fix: `set it to 0 to let the agent's event loop sleep between frames, or unset it for the default (${fallback})`,
  });
}

/**
 * A connector's thread setting (NIXL's num_threads, MoRIIO's num_workers) as copy threads:
 * at most the machine's cores and MAX_COPY_THREADS, at least 1.
 */
export function copyThreadsUpTo(configured: number): number {
  return Math.max(1, Math.min(configured, availableParallelism(), MAX_COPY_THREADS));
}

/** Checks the numeric options both agents accept (they reach the in-thread agent either way). */
export function checkAgentOptions(opts: {
  readonly grantWaitMs?: number;
  readonly chunkBytes?: number;
}): void {
  const waitMs = opts.grantWaitMs;
  if (waitMs !== undefined && !(Number.isFinite(waitMs) && waitMs >= 0 && waitMs <= 2 ** 31 - 1)) {
    throw new RangeError(`grantWaitMs must be between 0 and ${2 ** 31 - 1}, got ${waitMs}`);
  }
  const chunk = opts.chunkBytes;
  if (chunk !== undefined && !(Number.isSafeInteger(chunk) && chunk > 0 && chunk <= MAX_PAYLOAD_BYTES)) {
    throw new RangeError(`chunkBytes must be an integer between 1 and ${MAX_PAYLOAD_BYTES}, got ${chunk}`);
  }
}

export function closedError(): KVError {
  return new KVError('TRANSFER_CLOSED', 'transfer agent is closed', { hint: 'Create a new agent.' });
}

export function unknownHandle(id: number): KVError {
  return new KVError('TRANSFER_UNKNOWN_HANDLE', `transfer handle ${id} is unknown or was released`, {
    hint: 'Poll only handles returned by read()/write() and not yet released.',
  });
}

export function unreachable(agent: string): KVError {
  return new KVError('TRANSFER_UNKNOWN_AGENT', `remote agent '${agent}' is not known`, {
    hint: 'Call addRemoteAgent(metadata) with the metadata fetched over the side channel first.',
  });
}

/** The local blocks of the given [descriptor, offset] positions (all positions when omitted), per region. */
export function localBlocks(
  descs: readonly DescPair[],
  positions?: readonly (readonly [number, number])[],
): FailedBlocks[] {
  if (positions !== undefined && positions.length === 0) return [];
  const per = new Map<number, number[]>();
  const add = (desc: DescPair, offset: number): void => {
    let list = per.get(desc.localRegion);
    if (!list) {
      list = [];
      per.set(desc.localRegion, list);
    }
    list.push(desc.localFirst + offset);
  };
  if (positions === undefined) {
    for (const d of descs) for (let o = 0; o < d.count; o++) add(d, o);
  } else {
    for (const [i, o] of positions) {
      const d = descs[i];
      if (d && o < d.count) add(d, o);
    }
  }
  return [...per].map(([region, blockIds]) => ({ region, blockIds }));
}

/** An ERR status: `failed` per region, their union sorted, and why. */
export function errStatus(
  failed: readonly FailedBlocks[],
  { cause, reason }: TransferFailure,
): TransferStatus {
  const ids = [...new Set(failed.flatMap((f) => f.blockIds))].sort((a, b) => a - b);
  return { state: 'ERR', failed, failedBlockIds: ids, cause, reason };
}

export const PROC_STATUS: TransferStatus = { state: 'PROC', failed: [], failedBlockIds: [] };
export const DONE_STATUS: TransferStatus = { state: 'DONE', failed: [], failedBlockIds: [] };
