/**
 * Where the engine's KV cache events go after every step (vLLM's scheduler publishes the
 * KV cache manager's and the connector's events once per step): converted to vLLM's wire
 * events and handed to the publisher, or dropped. Nothing is kept between steps, so memory
 * stays flat however long the engine runs.
 */
import type { EngineConfig } from '../config/types.ts';
import type { KVCacheConfig, KVCacheEvent } from '../kv/interfaces.ts';
import { createEventPublisher, type EventPublisher } from '../kv-events/publisher.ts';
import type { WireKVEvent } from '../kv-events/wire.ts';

export class KVEventSink {
  readonly publisher: EventPublisher;
  readonly #groups: KVCacheConfig['groups'];
  /** Epoch ms of the engine's clock (emulated time under --speedup). */
  readonly #clock: () => number;

  constructor(publisher: EventPublisher, kvCacheConfig: KVCacheConfig, clock: () => number = Date.now) {
    this.publisher = publisher;
    this.#groups = kvCacheConfig.groups;
    this.#clock = clock;
  }

  static async create(
    config: EngineConfig,
    kvCacheConfig: KVCacheConfig,
    clock: () => number = Date.now,
  ): Promise<KVEventSink> {
    const publisher = await createEventPublisher(config.kvEventsConfig, config.parallel.dataParallelRank);
    return new KVEventSink(publisher, kvCacheConfig, clock);
  }

  /** Publishes this step's events as one batch (nothing when there are none). */
  drain(events: readonly KVCacheEvent[]): void {
    if (events.length === 0) return;
    this.publisher.publish({
      ts: this.#clock() / 1000,
      events: events.map((e) => this.#toWire(e)),
      dataParallelRank: null,
    });
  }

  shutdown(): Promise<void> {
    return this.publisher.shutdown();
  }

  #toWire(e: KVCacheEvent): WireKVEvent {
    if (e.type === 'AllBlocksCleared') return e;
    if (e.type === 'BlockRemoved') {
      return {
        type: 'BlockRemoved',
        blockHashes: e.blockHashes,
        medium: e.medium,
        groupIdx: e.groupIdx,
        locality: e.locality ?? null,
      };
    }
    const spec = this.#groups[e.groupIdx]?.spec;
    return {
      type: 'BlockStored',
      blockHashes: e.blockHashes,
      parentBlockHash: e.parentBlockHash,
      tokenIds: e.tokenIds,
      blockSize: e.blockSize,
      loraId: e.loraId ?? null,
      medium: e.medium,
      loraName: e.loraName ?? null,
      extraKeys: e.extraKeys ?? e.blockHashes.map(() => null),
      groupIdx: e.groupIdx,
      kvCacheSpecKind: spec?.kind ?? null,
      kvCacheSpecSlidingWindow: spec?.kind === 'sliding_window' ? spec.slidingWindow : null,
      locality: e.locality ?? null,
    };
  }
}
