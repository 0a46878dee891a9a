/**
 * `npm run bench -- engine [--prompt 512] [--decode-steps 32] [--rounds 5] [--threads N]`:
 * the matmul kernel's peak (the baseline), the `tiny` model's prefill and its decode
 * throughput through paged KV (against the gathering attention as a decode baseline), on
 * N threads (default: the machine's available parallelism), measured once each per round;
 * then prefill and decode on 1 thread and decode with bfloat16 weights, alternating with the
 * N-thread float32 runs. Ratios (achieved GFLOPS / that round's kernel peak, paged / gather,
 * N threads / 1, bfloat16 / float32) are per round; every figure is the median of the rounds
 * with min–max.
 */
import { availableParallelism } from 'node:os';
import { getModelPreset } from '../src/config/model-presets.ts';
import { matmulImplementation, WasmRuntime } from '../src/engine/model/kernels/wasm-matmul.ts';
import { DECODE_ATTENTION_MAX_TOKENS, type LlamaModel } from '../src/engine/model/llama.ts';
import { loadModel } from '../src/engine/model/load.ts';
import { buildKVCacheConfig } from '../src/kv/kv-cache-config.ts';
import { SharedPagedKVMemory } from '../src/kv/paged-memory.ts';
import { benchArgs, positiveInteger } from './_args.ts';
import { fmt, json, loadAverage, type Summary, summarize } from './_rounds.ts';

/** GFLOPS of repeated m×k · k×n products for `ms` milliseconds. */
function kernelGflops(m: number, n: number, k: number, threads: number, ms = 750): number {
  const rt = new WasmRuntime();
  rt.threads = threads;
  const a = rt.alloc(m * k);
  const b = rt.alloc(k * n);
  const c = rt.alloc(m * n);
  rt.f32.fill(0.01, a, c);
  rt.matmul(m, n, k, a, k, b, n, c, n);
  let iters = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < ms) {
    rt.matmul(m, n, k, a, k, b, n, c, n);
    iters++;
  }
  return (2 * m * n * k * iters) / ((performance.now() - t0) / 1000) / 1e9;
}

export async function main(args: string[]): Promise<void> {
  const {
    prompt: promptLen,
    'decode-steps': decodeSteps,
    rounds,
    threads,
  } = benchArgs(
    'engine',
    {
      prompt: positiveInteger(512, 'prompt tokens of the prefill'),
      'decode-steps': positiveInteger(32, 'decode steps per measurement, after the prompt'),
      rounds: positiveInteger(5, 'rounds; each figure is their median with min-max'),
      threads: positiveInteger(availableParallelism(), 'threads of the matmuls (--num-threads)'),
    },
    args,
  );

  const config = getModelPreset('tiny')!.config;
  const model = loadModel('tiny', { threads });
  const halfModel = loadModel('tiny', { threads, dtype: 'bfloat16' });
  const {
    hiddenSize: h,
    intermediateSize: inter,
    numLayers,
    numHeads,
    numKvHeads,
    headDim: hd,
    vocabSize,
  } = model.dims;
  const layerParams = h * (numHeads + 2 * numKvHeads) * hd + numHeads * hd * h + 3 * h * inter;
  const matmulFlopsPerToken = 2 * numLayers * layerParams;
  const headFlops = 2 * h * vocabSize;
  /** QK and PV for one query at `ctx` visible keys, all layers. */
  const attnFlops = (ctx: number) => 4 * numLayers * numHeads * hd * ctx;
  const blockSize = 16;
  const kvc = buildKVCacheConfig({
    hfConfig: config,
    numBlocks: 1 + 9 * Math.ceil((promptLen + decodeSteps) / blockSize),
    blockSize,
    maxModelLen: promptLen + decodeSteps,
  });
  const kv = new SharedPagedKVMemory(kvc, 'float32');
  const blocksPerSeq = Math.ceil((promptLen + decodeSteps) / blockSize);
  const table = (seq: number) => [Array.from({ length: blocksPerSeq }, (_, i) => 1 + seq * blocksPerSeq + i)];
  const prompt = Int32Array.from({ length: promptLen }, (_, i) => (i * 37) % 256);

  const prefill = async (seq: number, m: LlamaModel = model) => {
    const t0 = performance.now();
    await m.forward(
      {
        tokenIds: prompt,
        sequences: [
          { start: 0, len: promptLen, numComputedTokens: 0, blockTables: table(seq), computeLogits: true },
        ],
      },
      kv,
    );
    return (performance.now() - t0) / 1000;
  };
  let prefillFlops = matmulFlopsPerToken * promptLen + headFlops;
  for (let p = 0; p < promptLen; p++) prefillFlops += attnFlops(p + 1);

  const decodeOnce = async (batch: number, maxTokens: number, m: LlamaModel = model) => {
    m.decodeAttentionMaxTokens = maxTokens;
    for (let s = 0; s < batch; s++) await prefill(s, m);
    let flops = 0;
    const t0 = performance.now();
    for (let step = 0; step < decodeSteps; step++) {
      const sequences = Array.from({ length: batch }, (_, s) => ({
        start: s,
        len: 1,
        numComputedTokens: promptLen + step,
        blockTables: table(s),
        computeLogits: true,
      }));
      await m.forward(
        { tokenIds: Int32Array.from({ length: batch }, (_, s) => (step + s) % 256), sequences },
        kv,
      );
      flops += batch * (matmulFlopsPerToken + headFlops + attnFlops(promptLen + step + 1));
    }
    const sec = (performance.now() - t0) / 1000;
    return { tokPerSec: (batch * decodeSteps) / sec, gflops: flops / sec / 1e9 };
  };

  await prefill(8);
  type Round = Record<
    | 'peakSmall'
    | 'peakLarge'
    | 'prefillTok'
    | 'prefillGflops'
    | 'g1'
    | 'g8'
    | 'd1'
    | 'd8'
    | 'd1Gflops'
    | 'd8Gflops'
    | 'prefill1Tok'
    | 'd1OneThread'
    | 'd1Half',
    number
  >;
  const perRound: Round[] = [];
  for (let round = 0; round < rounds; round++) {
    const peakSmall = kernelGflops(256, 768, 768, threads);
    const peakLarge = kernelGflops(1024, 1024, 1024, threads);
    const prefillSec = await prefill(8);
    // The gathering baseline and the paged decode attention swap order every round.
    const pair = async (batch: number) => {
      if (round % 2 === 0) {
        const g = await decodeOnce(batch, 0);
        return { g, d: await decodeOnce(batch, DECODE_ATTENTION_MAX_TOKENS) };
      }
      const d = await decodeOnce(batch, DECODE_ATTENTION_MAX_TOKENS);
      return { g: await decodeOnce(batch, 0), d };
    };
    const b1 = await pair(1);
    const b8 = await pair(8);
    // One thread (the baseline of --threads) and bfloat16 weights, in alternating order.
    const oneThread = async () => {
      model.threads = 1;
      try {
        return {
          prefill: promptLen / (await prefill(8)),
          d1: (await decodeOnce(1, DECODE_ATTENTION_MAX_TOKENS)).tokPerSec,
        };
      } finally {
        model.threads = threads;
      }
    };
    const half = async () => (await decodeOnce(1, DECODE_ATTENTION_MAX_TOKENS, halfModel)).tokPerSec;
    let one: { prefill: number; d1: number };
    let d1Half: number;
    if (round % 2 === 0) {
      one = await oneThread();
      d1Half = await half();
    } else {
      d1Half = await half();
      one = await oneThread();
    }
    perRound.push({
      peakSmall,
      peakLarge,
      prefillTok: promptLen / prefillSec,
      prefillGflops: prefillFlops / prefillSec / 1e9,
      g1: b1.g.tokPerSec,
      g8: b8.g.tokPerSec,
      d1: b1.d.tokPerSec,
      d8: b8.d.tokPerSec,
      d1Gflops: b1.d.gflops,
      d8Gflops: b8.d.gflops,
      prefill1Tok: one.prefill,
      d1OneThread: one.d1,
      d1Half,
    });
  }
  model.decodeAttentionMaxTokens = DECODE_ATTENTION_MAX_TOKENS;

  const of = (f: (r: Round) => number): Summary => summarize(perRound.map(f));
  const peak = (r: Round) => Math.max(r.peakSmall, r.peakLarge);
  const rows: Array<[string, string, string, string]> = [
    [
      'kernel 256×768×768 GFLOPS',
      fmt(
        of((r) => r.peakSmall),
        1,
      ),
      '',
      '',
    ],
    [
      'kernel 1024³ GFLOPS',
      fmt(
        of((r) => r.peakLarge),
        1,
      ),
      '',
      '',
    ],
    [
      `tiny prefill ${promptLen} tok`,
      fmt(of((r) => r.prefillTok)),
      fmt(
        of((r) => r.prefillGflops),
        1,
      ),
      fmt(
        of((r) => r.prefillGflops / peak(r)),
        3,
      ),
    ],
    [`baseline: gather decode b1 (ctx ${promptLen})`, fmt(of((r) => r.g1)), '', ''],
    [`baseline: gather decode b8 (ctx ${promptLen})`, fmt(of((r) => r.g8)), '', ''],
    [
      `tiny decode batch 1 (ctx ${promptLen})`,
      fmt(of((r) => r.d1)),
      fmt(
        of((r) => r.d1Gflops),
        1,
      ),
      fmt(
        of((r) => r.d1Gflops / peak(r)),
        3,
      ),
    ],
    [
      `tiny decode batch 8 (ctx ${promptLen})`,
      fmt(of((r) => r.d8)),
      fmt(
        of((r) => r.d8Gflops),
        1,
      ),
      fmt(
        of((r) => r.d8Gflops / peak(r)),
        3,
      ),
    ],
  ];
  rows.push(
    [`tiny prefill ${promptLen} tok, 1 thread`, fmt(of((r) => r.prefill1Tok)), '', ''],
    [`tiny decode batch 1, 1 thread`, fmt(of((r) => r.d1OneThread)), '', ''],
    [`tiny decode batch 1, bfloat16 weights`, fmt(of((r) => r.d1Half)), '', ''],
  );
  console.log(
    `${rounds} rounds, median (min–max); ${threads} threads (${matmulImplementation} matmul); load average ${loadAverage()}`,
  );
  console.log('| case | tokens/s | GFLOPS | of the round peak |\n|---|---|---|---|');
  for (const row of rows) console.log(`| ${row.join(' | ')} |`);
  console.log(
    `decode b8 paged / gather, per round: ${fmt(
      of((r) => r.d8 / r.g8),
      2,
    )}`,
  );
  console.log(
    `prefill ${threads} threads / 1, per round: ${fmt(
      of((r) => r.prefillTok / r.prefill1Tok),
      2,
    )}`,
  );
  console.log(
    `decode b1 ${threads} threads / 1, per round: ${fmt(
      of((r) => r.d1 / r.d1OneThread),
      2,
    )}`,
  );
  console.log(
    `decode b1 bfloat16 / float32 weights, per round: ${fmt(
      of((r) => r.d1Half / r.d1),
      2,
    )}`,
  );
  console.log(
    `decode b8 / b1 per token, per round: ${fmt(
      of((r) => r.d8 / r.d1),
      2,
    )}`,
  );
  console.log(
    JSON.stringify({
      bench: 'engine',
      rounds,
      threads,
      matmul: matmulImplementation,
      load_average_1m: loadAverage(),
      prefill_tokens: promptLen,
      kernel_gflops_256x768x768: json(
        of((r) => r.peakSmall),
        2,
      ),
      kernel_gflops_1024_cubed: json(
        of((r) => r.peakLarge),
        2,
      ),
      prefill_tokens_per_s: json(
        of((r) => r.prefillTok),
        1,
      ),
      prefill_gflops: json(
        of((r) => r.prefillGflops),
        2,
      ),
      prefill_ratio_to_peak: json(of((r) => r.prefillGflops / peak(r))),
      baseline_gather_decode_b1_tokens_per_s: json(
        of((r) => r.g1),
        1,
      ),
      baseline_gather_decode_b8_tokens_per_s: json(
        of((r) => r.g8),
        1,
      ),
      decode_b1_tokens_per_s: json(
        of((r) => r.d1),
        1,
      ),
      decode_b8_tokens_per_s: json(
        of((r) => r.d8),
        1,
      ),
      decode_b1_ratio_to_peak: json(of((r) => r.d1Gflops / peak(r))),
      decode_b8_ratio_to_peak: json(of((r) => r.d8Gflops / peak(r))),
      decode_b8_speedup_vs_gather: json(
        of((r) => r.d8 / r.g8),
        2,
      ),
      decode_b8_per_token_speedup_vs_b1: json(
        of((r) => r.d8 / r.d1),
        2,
      ),
      prefill_speedup_vs_1_thread: json(
        of((r) => r.prefillTok / r.prefill1Tok),
        2,
      ),
      decode_b1_speedup_vs_1_thread: json(
        of((r) => r.d1 / r.d1OneThread),
        2,
      ),
      decode_b1_bfloat16_vs_float32: json(
        of((r) => r.d1Half / r.d1),
        2,
      ),
    }),
  );
}
