/**
 * Load time, peak memory and prefill / decode speed of one model through the engine:
 *
 *   node --import tsx scripts/measure-checkpoint.ts <model or dir> [--prompt 128] [--decode 16]
 *     [--rounds 5] [--tp 1] [--max-model-len N (default: the model's, at most 2048)]
 *
 * Each round uses fresh random prompt ids (prefix caching off), so every prefill is computed.
 * Prefill = a request with max_tokens 1; decode = (time of 1 + D tokens − time of 1 token) / D.
 * Prints a table of medians (min–max) and, last, one JSON object.
 */
import { resolveMaxModelLen } from '../src/config/model-info.ts';
import { LLM } from '../src/engine/llm.ts';

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
}

const model = process.argv[2];
if (model === undefined || model.startsWith('--')) {
  console.error(
    'usage: measure-checkpoint.ts <model or dir> [--prompt N] [--decode N] [--rounds N] [--tp N]',
  );
  process.exit(2);
}
const promptLen = arg('--prompt', 128);
const decode = arg('--decode', 16);
const rounds = arg('--rounds', 5);
const tp = arg('--tp', 1);
const maxModelLen = arg('--max-model-len', Math.min(2048, resolveMaxModelLen(model, null)));

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
const range = (xs: number[]) => `${Math.min(...xs).toFixed(1)}–${Math.max(...xs).toFixed(1)}`;

const started = performance.now();
const llm = await LLM.create({
  model,
  max_model_len: maxModelLen,
  tensor_parallel_size: tp,
  enable_prefix_caching: false,
  num_gpu_blocks: Math.ceil(maxModelLen / 16) + 2,
});
const loadS = (performance.now() - started) / 1000;
const engine = await llm.engine();
const vocab = engine.tokenizer.vocabSize;
let seed = 12345;
const randomIds = (n: number) =>
  Array.from({ length: n }, () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return 3 + (seed % Math.min(vocab - 3, 30000));
  });
const timed = async (ids: number[], maxTokens: number): Promise<number> => {
  const t0 = performance.now();
  await llm.generate([{ promptTokenIds: ids }], { maxTokens, temperature: 0, ignoreEos: true });
  return (performance.now() - t0) / 1000;
};
await timed(randomIds(8), 2); // warm-up: JIT and first allocations
const prefill: number[] = [];
const decodeRates: number[] = [];
for (let r = 0; r < rounds; r++) {
  prefill.push(promptLen / (await timed(randomIds(promptLen), 1)));
  const ids = randomIds(16);
  const one = await timed(ids, 1);
  const many = await timed(ids, 1 + decode);
  decodeRates.push(decode / Math.max(1e-6, many - one));
}
const peakRssMb = process.resourceUsage().maxRSS / 1024;
await llm.shutdown();
const rows = [
  ['model', model],
  ['tensor parallel', String(tp)],
  ['load', `${loadS.toFixed(1)} s`],
  ['peak RSS', `${peakRssMb.toFixed(0)} MiB`],
  [`prefill (${promptLen} tokens)`, `${median(prefill).toFixed(1)} tok/s (${range(prefill)})`],
  [`decode (batch 1, ${decode} tokens)`, `${median(decodeRates).toFixed(2)} tok/s (${range(decodeRates)})`],
];
for (const [k, v] of rows) console.log(`${(k as string).padEnd(28)} ${v}`);
console.log(
  JSON.stringify({
    model,
    tensor_parallel_size: tp,
    load_s: Number(loadS.toFixed(2)),
    peak_rss_mib: Math.round(peakRssMb),
    prefill_tokens_per_s: Number(median(prefill).toFixed(2)),
    prefill_tokens_per_s_min_max: [Math.min(...prefill), Math.max(...prefill)].map((v) =>
      Number(v.toFixed(2)),
    ),
    decode_tokens_per_s: Number(median(decodeRates).toFixed(3)),
    decode_tokens_per_s_min_max: [Math.min(...decodeRates), Math.max(...decodeRates)].map((v) =>
      Number(v.toFixed(3)),
    ),
    rounds,
  }),
);
