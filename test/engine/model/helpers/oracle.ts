/**
 * The PyTorch oracle's fixtures (written by scripts/train/fixtures.py) and the engine-side
 * runs compared with them: logits through the paged forward, with the prompt fed whole
 * (every prefix) or in chunks through the KV cache, so both attention paths are used.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { HFModelConfig } from '../../../../src/config/model-presets.ts';
import type { LlamaModel } from '../../../../src/engine/model/llama.ts';
import { readSafetensorsFile, tensorToFloat32 } from '../../../../src/engine/model/safetensors.ts';
import { BlockAllocator, makeKV } from './model.ts';

export const FIXTURES = fileURLToPath(new URL('../fixtures/', import.meta.url));

export interface Reference {
  prompts: number[][];
  greedy: number[][];
  min_greedy_margin: number;
  /** Float32 logits [prompt length, vocab] of each prompt, from PyTorch. */
  logits: Float32Array[];
}

export function readReference(dir: string): Reference {
  const meta = JSON.parse(readFileSync(join(dir, 'reference.json'), 'utf8')) as Omit<Reference, 'logits'>;
  const raw = readSafetensorsFile(join(dir, 'reference-logits.safetensors'));
  const logits = meta.prompts.map((_, i) => {
    const t = raw.get(`logits_${i}`);
    if (t === undefined) throw new Error(`${dir}: logits_${i} missing`);
    return tensorToFloat32(t);
  });
  return { ...meta, logits };
}

/** position → logits row, each from the forward whose last token is at that position. */
export type RowsByPosition = Map<number, Float32Array>;

function setup(model: LlamaModel, config: HFModelConfig, numTokens: number) {
  const kv = makeKV(config, { numBlocks: 64, blockSize: 16 });
  const tables = new BlockAllocator(kv.numBlocks, 7).tables(kv.kvCacheConfig.groups.length, numTokens, 16);
  const run = async (tokens: number[], numComputedTokens: number) =>
    model.forward(
      {
        tokenIds: Int32Array.from(tokens),
        sequences: [
          { start: 0, len: tokens.length, numComputedTokens, blockTables: tables, computeLogits: true },
        ],
      },
      kv,
    );
  return run;
}

/** Every prefix of the prompt as a fresh prefill (positions 0..n-1). */
export async function rowsOfPrefixes(
  model: LlamaModel,
  config: HFModelConfig,
  tokens: number[],
): Promise<RowsByPosition> {
  const run = setup(model, config, tokens.length);
  const rows: RowsByPosition = new Map();
  for (let p = 1; p <= tokens.length; p++) rows.set(p - 1, await run(tokens.slice(0, p), 0));
  return rows;
}

/** The prompt fed in chunks of the given sizes (cycled), each chunk attending to the cached ones. */
export async function rowsByChunks(
  model: LlamaModel,
  config: HFModelConfig,
  tokens: number[],
  chunks: number[],
): Promise<RowsByPosition> {
  const run = setup(model, config, tokens.length);
  const rows: RowsByPosition = new Map();
  let done = 0;
  for (let c = 0; done < tokens.length; c++) {
    const size = Math.min(chunks[c % chunks.length] as number, tokens.length - done);
    rows.set(done + size - 1, await run(tokens.slice(done, done + size), done));
    done += size;
  }
  return rows;
}

/** Largest |engine − PyTorch| over the rows, and the largest |logit| (for scale). */
export function compareRows(rows: RowsByPosition, reference: Float32Array, vocab: number) {
  let maxErr = 0;
  let maxLogit = 0;
  for (const [pos, row] of rows) {
    for (let i = 0; i < vocab; i++) {
      const ref = reference[pos * vocab + i] as number;
      maxErr = Math.max(maxErr, Math.abs((row[i] as number) - ref));
      maxLogit = Math.max(maxLogit, Math.abs(ref));
    }
  }
  return { maxErr, maxLogit };
}
