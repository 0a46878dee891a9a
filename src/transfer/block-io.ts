/**
 * Moving block runs over a PeerLink: the sending side cuts runs into chunks of at most
 * chunkBytes (several chunks per transfer stay in flight; nothing waits for a reply), with
 * one CRC per block; the receiving side lands each chunk in its own memory and keeps a
 * per-block verdict, so a bad checksum or a missing chunk fails exactly those blocks.
 */
import { blockChecksums } from './checksum.ts';
import type { TransferFailure } from './failure.ts';
import type { DataFrame, Mutable } from './messages.ts';
import type { DataChunk, PeerLink } from './peer-link.ts';
import { ProtocolError } from './protocol-error.ts';
import type { FailedBlocks, MemoryRegion } from './types.ts';

export interface BlockRun {
  readonly region: number;
  readonly first: number;
  readonly count: number;
}

/** What leaves for the blocks of `run` instead of `view` (their checksums are already computed): AgentSeams.outgoing. */
export type OutgoingTransform = (view: Uint8Array, run: BlockRun) => Uint8Array;

/** Null while the blocks may still be sent; else why not (the grant ended). */
export type SendPermission = (run: BlockRun) => TransferFailure | null;

/** A READ's grant ended while its chunks were queued: the rest is not sent. */
export class PermissionEndedError extends Error {
  override readonly name = 'PermissionEndedError';
  readonly refusal: TransferFailure;

  constructor(refusal: TransferFailure) {
    super(refusal.reason);
    this.refusal = refusal;
  }
}

export interface SendOptions {
  readonly transform?: OutgoingTransform | undefined;
  /** A READ's arrival: the time it waited goes in the first frame. */
  readonly heldSince?: number | undefined;
  /** Asked for each chunk just before its blocks are read (see sendRuns). */
  readonly allowed?: SendPermission | undefined;
  /** The checksums recorded for a chunk's blocks when they were granted, if any (never used with a transform). */
  readonly recorded?: ((run: BlockRun) => number[] | null) | undefined;
}

/**
 * Queues the chunks of `runs`; each reads its blocks only when its turn to leave comes
 * (after back-pressure), so `allowed` is asked again then (and, for a chunk a same-host
 * peer copies from our mapped memory, once more right before it is hashed): blocks whose
 * grant has ended may already hold another request's data and are never read or sent.
 */
export function sendRuns(
  link: PeerLink,
  regions: ReadonlyMap<number, MemoryRegion>,
  chunkBytes: number,
  xferId: number,
  runs: readonly BlockRun[],
  { transform, heldSince, allowed, recorded }: SendOptions = {},
): Promise<void> {
  let first = true;
  const sends: Promise<void>[] = [];
  runs.forEach((run, d) => {
    const region = regions.get(run.region)!;
    const bb = region.blockBytes;
    const perChunk = Math.max(1, Math.floor(chunkBytes / bb));
    for (let o = 0; o < run.count; o += perChunk) {
      const n = Math.min(perChunk, run.count - o);
      const start = (run.first + o) * bb;
      const view = region.bytes.subarray(start, start + n * bb);
      const held =
        first && heldSince !== undefined ? Math.round((performance.now() - heldSince) * 1000) : undefined;
      first = false;
      const chunk: BlockRun = { region: run.region, first: run.first + o, count: n };
      const check = (): void => {
        const refusal = allowed?.(chunk);
        if (refusal) throw new PermissionEndedError(refusal);
      };
      const sent = link.sendData(() => {
        check();
        const sums = transform ? undefined : (recorded?.(chunk) ?? undefined);
        // Field by field: object spreads cost microseconds per chunk here.
        const header: Mutable<DataChunk['header']> = {
          type: 'data',
          xfer: xferId,
          run: d,
          block: o,
          count: n,
        };
        if (held !== undefined) header.held = held;
        return {
          header,
          region: run.region,
          offset: start,
          view,
          wire: transform ? transform(view, chunk) : view,
          blockBytes: bb,
          count: n,
          sums,
          check: allowed ? check : undefined,
        };
      });
      sends.push(sent);
    }
  });
  sends.push(link.endData());
  // Rejects with the first chunk that failed (its grant ended).
  return Promise.all(sends).then(() => undefined);
}

/** Appends the checksums of blocks sums.length.. of `view` that lie within its first `upTo` blocks. */
function checksumsFrom(view: Uint8Array, bb: number, upTo: number, sums: number[]): number[] {
  const from = sums.length;
  // One native call for every block that is new here (hashed two at a time, see kvhash.c).
  if (upTo > from) for (const x of blockChecksums(view.subarray(from * bb), bb, upTo - from)) sums.push(x);
  return sums;
}

/** The frame being received: checksums of its blocks are computed as each block lands. */
interface PartialFrame {
  readonly run: number;
  readonly block: number;
  readonly view: Uint8Array;
  readonly blockBytes: number;
  readonly sums: number[];
}

const PENDING = 0;
const OK = 1;
const BAD = 2;

export class IncomingRuns {
  readonly #runs: readonly BlockRun[];
  readonly #regions: ReadonlyMap<number, MemoryRegion>;
  /** Every block's state, run after run (one array: a transfer names up to hundreds of runs). */
  readonly #state: Uint8Array;
  /** Where each run's blocks start in #state. */
  readonly #at: Uint32Array;
  #remaining: number;
  /** Blocks whose state is BAD (so a transfer that went well is answered without a scan). */
  #bad = 0;
  #partial: PartialFrame | null = null;

  constructor(runs: readonly BlockRun[], regions: ReadonlyMap<number, MemoryRegion>) {
    this.#runs = runs;
    this.#regions = regions;
    this.#at = new Uint32Array(runs.length);
    let total = 0;
    for (let i = 0; i < runs.length; i++) {
      this.#at[i] = total;
      total += runs[i]!.count;
    }
    this.#state = new Uint8Array(total);
    this.#remaining = total;
  }

  /** The local view a data frame fills, after checking it names blocks of this transfer. */
  destination(f: DataFrame): Uint8Array {
    const run = this.#runs[f.run];
    if (!run || f.block + f.count > run.count) throw new ProtocolError(`data frame outside run ${f.run}`);
    const region = this.#regions.get(run.region)!;
    const start = (run.first + f.block) * region.blockBytes;
    const view = region.bytes.subarray(start, start + f.count * region.blockBytes);
    this.#partial = { run: f.run, block: f.block, view, blockBytes: region.blockBytes, sums: [] };
    return view;
  }

  /** `filled` bytes of the frame from the last destination() have landed: hash whole blocks now. */
  progress(filled: number): void {
    const p = this.#partial;
    if (p) checksumsFrom(p.view, p.blockBytes, Math.floor(filled / p.blockBytes), p.sums);
  }

  /** Block size of the frame from the last destination() (0 if none). */
  get pieceBytes(): number {
    return this.#partial?.blockBytes ?? 0;
  }

  /**
   * Records the verdict for the blocks of a landed frame (`complete` false = short read).
   * `landedSums` are the checksums of the landed bytes when the caller computed them while
   * copying; otherwise they are computed here.
   */
  landed(f: DataFrame, view: Uint8Array, complete: boolean, landedSums?: readonly number[]): void {
    const bb = this.#regions.get(this.#runs[f.run]!.region)!.blockBytes;
    const p = this.#partial;
    this.#partial = null;
    const early = p !== null && p.run === f.run && p.block === f.block && p.view === view ? p.sums : [];
    const sums = !complete ? null : (landedSums ?? checksumsFrom(view, bb, f.count, early));
    const state = this.#state;
    const at = this.#at[f.run]! + f.block;
    for (let i = 0; i < f.count; i++) {
      const was = state[at + i];
      const now = sums !== null && sums[i] === f.sums[i] ? OK : BAD;
      if (was === PENDING) this.#remaining--;
      this.#bad += (now === BAD ? 1 : 0) - (was === BAD ? 1 : 0);
      state[at + i] = now;
    }
  }

  /** Every block landed and was verified by the caller (a direct read, direct-read.ts). */
  allVerified(): void {
    this.#state.fill(OK);
    this.#remaining = 0;
    this.#bad = 0;
  }

  /** Every block has landed (verified or not). */
  get complete(): boolean {
    return this.#remaining === 0;
  }

  /** Blocks not verified OK (bad or never arrived), per region, as [descIndex, offset] too. */
  failed(): { byRegion: FailedBlocks[]; positions: [number, number][] } {
    if (this.#remaining === 0 && this.#bad === 0) return { byRegion: [], positions: [] };
    const per = new Map<number, number[]>();
    const positions: [number, number][] = [];
    this.#runs.forEach((run, d) => {
      const at = this.#at[d]!;
      for (let i = 0; i < run.count; i++) {
        if (this.#state[at + i] === OK) continue;
        positions.push([d, i]);
        let list = per.get(run.region);
        if (!list) {
          list = [];
          per.set(run.region, list);
        }
        list.push(run.first + i);
      }
    });
    return { byRegion: [...per].map(([region, blockIds]) => ({ region, blockIds })), positions };
  }
}
