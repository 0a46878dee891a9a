/**
 * The adapters one model rank holds in memory (vLLM's CPU LoRA cache, `max_cpu_loras`):
 * loaded from their directory on first use, least recently used evicted beyond the
 * capacity (an unloaded adapter's weights stay until evicted). An evicted adapter is read
 * again when a request needs it.
 */
import type { ModelDims, RankShard } from '../model/dims.ts';
import type { LoRARequest } from './lora-request.ts';
import { readPeftAdapter } from './peft-adapter.ts';
import { type RankLora, rankLora } from './rank-lora.ts';

export class LoraAdapterCache {
  readonly #dims: ModelDims;
  readonly #shard: RankShard;
  readonly #entries = new Map<number, { key: string; lora: RankLora }>();
  /** Most adapters held at once (vLLM's max_cpu_loras). */
  capacity: number;
  /** Adapters with a larger rank are refused (vLLM's max_lora_rank); undefined: no limit. */
  maxLoraRank: number | undefined;

  constructor(dims: ModelDims, shard: RankShard, capacity = 8, maxLoraRank?: number) {
    this.#dims = dims;
    this.#shard = shard;
    this.capacity = capacity;
    this.maxLoraRank = maxLoraRank;
  }

  get size(): number {
    return this.#entries.size;
  }

  has(loraIntId: number): boolean {
    return this.#entries.has(loraIntId);
  }

  /** The adapter, read from its directory if this rank does not hold it. */
  get(request: LoRARequest): RankLora {
    const key = `${request.loraPath}\u0000${request.revision ?? 0}`;
    let entry = this.#entries.get(request.loraIntId);
    this.#entries.delete(request.loraIntId);
    if (entry?.key === key) {
      this.#entries.set(request.loraIntId, entry);
      return entry.lora;
    }
    const adapter = readPeftAdapter(request.loraPath, request.loraName, this.#dims, this.maxLoraRank);
    entry = { key, lora: rankLora(adapter, this.#dims, this.#shard) };
    this.#entries.set(request.loraIntId, entry);
    while (this.#entries.size > Math.max(1, this.capacity)) {
      const oldest = this.#entries.keys().next().value as number;
      this.#entries.delete(oldest);
    }
    return entry.lora;
  }

  remove(loraIntId: number): boolean {
    return this.#entries.delete(loraIntId);
  }
}
