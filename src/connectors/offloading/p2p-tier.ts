/**
 * The `p2p` secondary tier as the OffloadingConnector's tier list sees it: a handle on the
 * engine's P2P hub. It stores nothing of its own (write-through skips it: vLLM's P2P tier
 * succeeds a store without a remote decoder at once) and answers a request-less lookup
 * "miss"; loads pull from the request's peer (TierLoadContext.p2p). The scheduler reaches
 * the hub for a request's lookups and parking, the worker for parking and fetches.
 */
import {
  emptyTierStats,
  type KVTier,
  type TierEntry,
  type TierLoadContext,
  type TierStats,
} from './kv-tier.ts';
import { P2PHub, type P2PHubOptions } from './p2p-hub.ts';

export class P2PTier implements KVTier {
  readonly kind = 'p2p';
  /** Chunks come from a peer's CPU tier. */
  readonly medium = 'CPU' as const;
  /** Lookups without a request answer at once; fetches are bounded by the hub's timeout_ms. */
  readonly timeoutMs = 0;
  readonly hub: P2PHub;
  readonly #stats = emptyTierStats();

  constructor(options: P2PHubOptions) {
    this.hub = P2PHub.acquire(options);
  }

  async putMany(_entries: readonly TierEntry[]): Promise<string[]> {
    return [];
  }

  async getMany(keys: readonly string[], ctx?: TierLoadContext): Promise<(Uint8Array | null)[]> {
    this.#stats.gets += keys.length;
    if (!ctx?.p2p) return keys.map(() => null);
    const lengths = ctx.lengths ?? keys.map(() => this.hub.staging.blockLen);
    const values = await this.hub.fetch(ctx.p2p, keys, lengths);
    for (const v of values) {
      if (v) {
        this.#stats.hits++;
        this.#stats.getBytes += v.byteLength;
      }
    }
    if (values.some((v) => v === null)) this.#stats.errors++;
    return values;
  }

  async hasMany(keys: readonly string[]): Promise<boolean[]> {
    return keys.map(() => false);
  }

  async deleteMany(_keys: readonly string[]): Promise<void> {}

  probe(): Promise<void> {
    return this.hub.ready();
  }

  stats(): TierStats {
    return { ...this.#stats };
  }

  takeEvicted(): string[] {
    return [];
  }

  close(): Promise<void> {
    return this.hub.release();
  }
}
