/**
 * A forward pass without weights, for emulated deployments in `--mode random|echo` with a
 * target model (docs/emulation.md#real-kv-at-the-targets-size): it writes every new token's
 * K and V rows of every layer into the paged KV memory, with content that is a pure function
 * of (token id, position, layer, K or V), and runs the connector's per-layer hooks around each
 * layer as a real model does. P/D transfers, offload tiers and checksums therefore move the
 * target's KV byte counts, and two engines given the same tokens hold identical KV.
 * The logits are zeros: the runner takes its tokens from the synthetic token source.
 */
import { attentionLayerName } from '../../config/model-presets.ts';
import type { KVCacheConfig, PagedKVMemory } from '../../kv/interfaces.ts';
import type { ForwardBatch, ForwardHooks, ForwardModel } from './forward-batch.ts';
import { kRowOffset, layerKV } from './paged-kv.ts';

/** 16-bit words of one K (or V) row: a xorshift stream seeded by (token, position, layer, half). */
export function fillSyntheticRow(
  out: Uint16Array | Float32Array,
  offset: number,
  length: number,
  token: number,
  position: number,
  layer: number,
  half: 0 | 1,
): void {
  let x =
    (Math.imul(token + 1, 0x9e3779b1) ^
      Math.imul(position + 1, 0x85ebca6b) ^
      Math.imul(layer * 2 + half + 1, 0xc2b2ae35)) >>>
    0;
  if (x === 0) x = 0x6d2b79f5;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    // float32 caches hold small finite values; 16-bit caches take the raw word.
    out[offset + i] = out instanceof Float32Array ? ((x & 0xffff) - 32768) / 32768 : x & 0xffff;
  }
}

export class SyntheticModel implements ForwardModel {
  readonly vocabSize: number;
  readonly #numLayers: number;

  constructor(kvCacheConfig: KVCacheConfig, vocabSize: number) {
    this.#numLayers = kvCacheConfig.groups.reduce((n, g) => n + g.layerNames.length, 0);
    this.vocabSize = vocabSize;
  }

  async forward(batch: ForwardBatch, kv: PagedKVMemory, hooks: ForwardHooks = {}): Promise<Float32Array> {
    for (let l = 0; l < this.#numLayers; l++) {
      const name = attentionLayerName(l);
      await hooks.beforeLayer?.(l, name);
      const group = kv.groupOfLayer(name);
      const spec = (kv.kvCacheConfig.groups[group] as { spec: { numKvHeads: number; headSize: number } })
        .spec;
      const layer = layerKV(kv, name, spec.numKvHeads * spec.headSize);
      const words = layer.f32 ?? layer.u16;
      if (!words) throw new Error(`layer ${name} has no KV view`);
      const vOffset = layer.blockSize * layer.rowSize;
      for (const seq of batch.sequences) {
        const table = seq.blockTables[layer.group] as readonly number[];
        for (let i = 0; i < seq.len; i++) {
          const position = seq.numComputedTokens + i;
          const token = batch.tokenIds[seq.start + i] as number;
          const k = kRowOffset(layer, table, position);
          fillSyntheticRow(words, k, layer.rowSize, token, position, l, 0);
          fillSyntheticRow(words, k + vOffset, layer.rowSize, token, position, l, 1);
        }
      }
      await hooks.afterLayer?.(l, name);
    }
    const rows = batch.sequences.filter((s) => s.computeLogits).length;
    return new Float32Array(rows * this.vocabSize);
  }
}
