/**
 * The adapters one model rank holds in memory (vLLM's CPU LoRA cache, `max_cpu_loras`):
 * loaded from their directory on first use, least recently used evicted beyond the
 * capacity (an unloaded adapter's weights stay until evicted). An evicted adapter is read
 * again when a request needs it.
 */
import { LruMap } from '../../util/lru-map.ts';
import type { ModelDims, RankShard } from '../model/dims.ts';
import type { LoRARequest } from './lora-request.ts';
import { readPeftAdapter } from './peft-adapter.ts';
import { type RankLora, rankLora } from './rank-lora.ts';

export class LoraAdapterCache {
  readonly #dims: ModelDims;
  readonly #shard: RankShard;
  readonly #entries: LruMap<number, { key: string; lora: RankLora }>;
  /** Adapters with a larger rank are refused (vLLM's max_lora_rank); undefined: no limit. */
  maxLoraRank: number | undefined;

  constructor(dims: ModelDims, shard: RankShard, capacity = 8, maxLoraRank?: number) {
    this.#dims = dims;
    this.#shard = shard;
    this.#entries = new LruMap(capacity);
    this.maxLoraRank = maxLoraRank;
  }

  /** Most adapters held at once (vLLM's max_cpu_loras). */
  get capacity(): number {
    return this.#entries.capacity;
  }

  set capacity(capacity: number) {
    this.#entries.capacity = capacity;
  }

  /** The adapter, read from its directory if this rank does not hold it (or holds another revision). */
  get(request: LoRARequest): RankLora {
    const key = `${request.loraPath}\u0000${request.revision ?? 0}`;
    const held = this.#entries.get(request.loraIntId);
    if (held?.key === key) return held.lora;
    const adapter = readPeftAdapter(request.loraPath, request.loraName, this.#dims, this.maxLoraRank);
    const lora = rankLora(adapter, this.#dims, this.#shard);
    this.#entries.set(request.loraIntId, { key, lora });
    return lora;
  }
}
