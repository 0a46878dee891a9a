/**
 * What a publisher's cache holds right now, kept from the events it publishes, so a snapshot
 * can be served on request: every resident block per (medium, locality, group), with what a BlockStored
 * needs to announce it again (parent, tokens, block size, extra keys, spec) and how many
 * copies are resident (a hash stored twice without a removal). BlockRemoved drops a copy,
 * AllBlocksCleared everything, so the table holds exactly the resident blocks: it is bounded
 * by the capacity of the engine's block pool and its offload tiers, never a log. A hard cap
 * (`maxBlocks`) guards against a stream that never removes what it stores: past it the
 * table is dropped and snapshots are refused until the next AllBlocksCleared.
 *
 * `snapshot()` re-announces the state as vLLM's own events: AllBlocksCleared first, then
 * BlockStored in parent-before-child order, consecutive blocks of a chain in one event,
 * in batches of at most `blocksPerBatch` blocks. Applying it to an empty index gives what
 * applying every event since the start gives.
 */
import type { BlockStoredEvent, WireKVEvent } from './wire.ts';

/** One resident block. */
interface Resident {
  readonly hash: bigint;
  readonly parent: bigint | null;
  readonly tokens: Uint32Array;
  readonly blockSize: number;
  readonly loraName: string | null;
  readonly extraKey: readonly unknown[] | null;
  readonly specKind: string | null;
  readonly slidingWindow: number | null;
  copies: number;
}

/** The blocks of one (medium, locality, group), by hash, in the order they were stored. */
interface Tier {
  readonly medium: string | null;
  readonly locality: string | null;
  readonly groupIdx: number | null;
  readonly blocks: Map<bigint, Resident>;
}

/** Past this many resident blocks the table gives up (no engine of this machine comes near). */
export const DEFAULT_MAX_TRACKED_BLOCKS = 1 << 22;
/** Blocks per snapshot batch: large snapshots go out in many bounded messages. */
export const SNAPSHOT_BLOCKS_PER_BATCH = 1024;

/** Two tiers of one medium (an fs and an obj tier, say) differ by locality: separate buckets. */
const tierKey = (e: { medium: string | null; locality?: string | null; groupIdx?: number | null }) =>
  JSON.stringify([e.medium, e.locality ?? null, e.groupIdx ?? null]);

export class KVCacheState {
  readonly #tiers = new Map<string, Tier>();
  readonly #maxBlocks: number;
  #size = 0;
  #overflowed = false;

  constructor(maxBlocks = DEFAULT_MAX_TRACKED_BLOCKS) {
    this.#maxBlocks = maxBlocks;
  }

  /** Resident blocks (distinct per medium, locality and group). */
  get size(): number {
    return this.#size;
  }

  /** True while the table is over its cap: snapshots are refused until AllBlocksCleared. */
  get overflowed(): boolean {
    return this.#overflowed;
  }

  apply(events: readonly WireKVEvent[]): void {
    for (const e of events) {
      if (e.type === 'AllBlocksCleared') {
        this.#tiers.clear();
        this.#size = 0;
        this.#overflowed = false;
      } else if (this.#overflowed) {
      } else if (e.type === 'BlockRemoved') {
        const tier = this.#tiers.get(tierKey(e));
        if (!tier) continue;
        for (const h of e.blockHashes) {
          const r = tier.blocks.get(h);
          if (!r) continue;
          if (--r.copies === 0) {
            tier.blocks.delete(h);
            this.#size--;
          }
        }
      } else this.#store(e);
    }
  }

  #store(e: BlockStoredEvent): void {
    const key = tierKey(e);
    let tier = this.#tiers.get(key);
    if (!tier) {
      tier = {
        medium: e.medium,
        locality: e.locality ?? null,
        groupIdx: e.groupIdx ?? null,
        blocks: new Map(),
      };
      this.#tiers.set(key, tier);
    }
    const n = e.blockHashes.length;
    // Tokens per block when they line up; otherwise (tokenless tier updates) as they came, on the first.
    const perBlock = e.tokenIds.length === n * e.blockSize;
    for (let i = 0; i < n; i++) {
      const hash = e.blockHashes[i]!;
      const existing = tier.blocks.get(hash);
      if (existing) {
        existing.copies++;
        continue;
      }
      const tokens = perBlock
        ? e.tokenIds.slice(i * e.blockSize, (i + 1) * e.blockSize)
        : i === 0
          ? e.tokenIds
          : [];
      tier.blocks.set(hash, {
        hash,
        parent: i === 0 ? e.parentBlockHash : e.blockHashes[i - 1]!,
        tokens: Uint32Array.from(tokens),
        blockSize: e.blockSize,
        loraName: e.loraName,
        extraKey: e.extraKeys?.[i] ?? null,
        specKind: e.kvCacheSpecKind ?? null,
        slidingWindow: e.kvCacheSpecSlidingWindow ?? null,
        copies: 1,
      });
      if (++this.#size > this.#maxBlocks) {
        this.#tiers.clear();
        this.#size = 0;
        this.#overflowed = true;
        return;
      }
    }
  }

  /**
   * The state as batches of events (AllBlocksCleared, then the stores), or null while the
   * table is over its cap.
   */
  snapshot(blocksPerBatch = SNAPSHOT_BLOCKS_PER_BATCH): WireKVEvent[][] | null {
    if (this.#overflowed) return null;
    const batches: WireKVEvent[][] = [[{ type: 'AllBlocksCleared' }]];
    let room = 0;
    const push = (chain: Resident[], tier: Tier) => {
      for (let from = 0; from < chain.length; ) {
        if (room === 0) {
          batches.push([]);
          room = blocksPerBatch;
        }
        const part = chain.slice(from, from + room);
        batches.at(-1)!.push(storedEvent(part, tier));
        room -= part.length;
        from += part.length;
      }
    };
    for (const tier of this.#tiers.values()) {
      const emitted = new Set<bigint>();
      // Latest first: a chain walked up from a leaf announces its blocks together.
      for (const r of [...tier.blocks.values()].reverse()) {
        if (emitted.has(r.hash)) continue;
        // Walk up to the first ancestor already announced (or not resident), then announce down.
        const chain: Resident[] = [];
        for (let b: Resident | undefined = r; b && !emitted.has(b.hash); ) {
          emitted.add(b.hash);
          chain.push(b);
          b = b.parent === null ? undefined : tier.blocks.get(b.parent);
        }
        chain.reverse();
        // A chain breaks where the fields a BlockStored shares stop agreeing.
        let start = 0;
        for (let i = 1; i <= chain.length; i++) {
          if (i === chain.length || !sameEvent(chain[i - 1]!, chain[i]!)) {
            push(chain.slice(start, i), tier);
            start = i;
          }
        }
      }
      // Further copies of a resident hash, after every parent is announced.
      for (const r of tier.blocks.values()) for (let c = 1; c < r.copies; c++) push([r], tier);
    }
    return batches;
  }
}

function sameEvent(a: Resident, b: Resident): boolean {
  return (
    b.parent === a.hash &&
    a.blockSize === b.blockSize &&
    a.loraName === b.loraName &&
    a.specKind === b.specKind &&
    a.slidingWindow === b.slidingWindow &&
    a.tokens.length === a.blockSize &&
    b.tokens.length === b.blockSize
  );
}

function storedEvent(chain: readonly Resident[], tier: Tier): BlockStoredEvent {
  const first = chain[0]!;
  const tokenIds: number[] = [];
  for (const r of chain) for (const t of r.tokens) tokenIds.push(t);
  const event: BlockStoredEvent = {
    type: 'BlockStored',
    blockHashes: chain.map((r) => r.hash),
    parentBlockHash: first.parent,
    tokenIds,
    blockSize: first.blockSize,
    loraId: null,
    medium: tier.medium,
    loraName: first.loraName,
    extraKeys: chain.map((r) => r.extraKey),
    groupIdx: tier.groupIdx,
    kvCacheSpecKind: first.specKind,
    kvCacheSpecSlidingWindow: first.slidingWindow,
  };
  if (tier.locality !== null) event.locality = tier.locality;
  return event;
}
