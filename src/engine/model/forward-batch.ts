/**
 * The model's forward contract, as the model runner calls it. Positions are implicit: the
 * i-th new token of a sequence sits at position numComputedTokens + i. New K/V are written
 * into the paged cache before attention reads it.
 */
import type { PagedKVMemory } from '../../kv/interfaces.ts';
import type { LoRARequest } from '../lora/lora-request.ts';

export interface SequenceInBatch {
  /** Offset of this sequence's new tokens in ForwardBatch.tokenIds. */
  start: number;
  /** Number of new tokens this step (chunked prefill: a chunk; decode: 1). */
  len: number;
  /** Tokens already in the KV cache before this step (their positions are 0..n-1). */
  numComputedTokens: number;
  /** One block-id list per KV cache group. */
  blockTables: readonly (readonly number[])[];
  /** True → return logits of this sequence's last new token. */
  computeLogits: boolean;
  /**
   * True → return logits of every new token of this sequence (len rows, in order), whatever
   * computeLogits says: prompt logprobs need the distribution at each prompt position.
   */
  allLogits?: boolean;
  /** The adapter applied to this sequence's projections; absent or null: the base model. */
  lora?: LoRARequest | null;
}

/** How many logits rows a sequence contributes to the forward's output. */
export function logitsRows(s: SequenceInBatch): number {
  if (s.allLogits) return s.len;
  return s.computeLogits ? 1 : 0;
}

export interface ForwardBatch {
  tokenIds: Int32Array;
  sequences: SequenceInBatch[];
}

export interface ForwardHooks {
  /** Called before a layer reads its KV (the connector's waitForLayerLoad). */
  beforeLayer?(layerIndex: number, layerName: string): void | Promise<void>;
  /** Called once this layer's new K/V are in the cache (the connector's saveKvLayer). */
  afterLayer?(layerIndex: number, layerName: string): void | Promise<void>;
  /**
   * Tensor parallelism: sum `x` in place over all ranks. `x` is a view into the model's
   * scratch memory, valid only until the returned promise settles.
   */
  allReduce?(x: Float32Array): void | Promise<void>;
}

export interface ForwardModel {
  /** Logits of shape [sum of logitsRows over the sequences, vocabSize], row-major, in sequence order. */
  forward(batch: ForwardBatch, kv: PagedKVMemory, hooks?: ForwardHooks): Promise<Float32Array>;
}
