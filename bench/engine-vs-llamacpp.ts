/**
 * `npm run bench -- engine-vs-llamacpp`: kvconnect's engine (the in-process LLM API) against
 * llama.cpp (node-llama-cpp's prebuilt CPU libraries, driven by a small C harness compiled
 * at bench time: bench/_llamacpp-harness.ts) with F32 and with F16 weights, on a
 * SmolLM2-135M-shaped checkpoint (its config.json, random weights, made in a temporary
 * directory) and on `kjv-llama`. Both engines get the same prompt ids each round (fresh
 * random ids, so nothing is served from a prefix cache) and decode greedily.
 *
 * Prefill tokens/s = prompt tokens / time to the first generated token; decode tokens/s =
 * the tokens after the first / the time they took (kvconnect: the request's ttft and e2e
 * metrics; llama.cpp: monotonic clock around llama_decode in the harness). llama.cpp runs F32
 * and F16 with its flash attention setting (default auto) and F16 once more with flash
 * attention off, which is faster on small models. kvconnect and llama.cpp alternate which
 * goes first each round, and llama.cpp's runs rotate; the ratios are per round.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { convertCheckpoint, type GgufDtype } from '../scripts/gguf/convert.ts';
import { resolveEngineOptions } from '../src/config/engine-config.ts';
import { ENGINE_OPTIONS } from '../src/config/engine-options.ts';
import type { HFModelConfig } from '../src/config/model-presets.ts';
import { LLM } from '../src/engine/llm.ts';
import { loadModelConfig } from '../src/engine/model/load.ts';
import { mulberry32 } from '../src/util/mulberry32.ts';
import { benchArgs, exitWithUsageError, nonNegativeInteger, positiveInteger, text } from './_args.ts';
import { buildLlamaCppHarness, LlamaCppHarness, type LlamaCppHarnessOptions } from './_llamacpp-harness.ts';
import { alternate, fmt, json, loadAverage, pairwiseRatio, type Summary, summarize } from './_rounds.ts';
import { writeSmolLM2ShapedCheckpoint } from './_smollm2.ts';

const MODELS = ['smollm2-135m-shaped', 'kjv-llama'] as const;
type ModelName = (typeof MODELS)[number];
const KJV_DIR = fileURLToPath(new URL('../models/kjv-llama', import.meta.url));
const CONTENDERS = ['kvconnect', 'llamacpp_f32', 'llamacpp_f16', 'llamacpp_f16_no_fa'] as const;
/** The llama.cpp runs of a round: the GGUF and whether flash attention is forced off. */
const LLAMA_RUNS = [
  ['llamacpp_f32', 'f32'],
  ['llamacpp_f16', 'f16'],
  ['llamacpp_f16_no_fa', 'f16'],
] as const;
type LlamaRun = (typeof LLAMA_RUNS)[number][0];
const RATIOS = ['llamacpp_f32', 'llamacpp_f16', 'llamacpp_f16_no_fa'] as const;
type Contender = (typeof CONTENDERS)[number];

interface Run {
  tokens: number[];
  prefillTokPerS: number;
  decodeTokPerS: number;
}

interface ModelResult {
  model: ModelName;
  prefill: Record<Contender, Summary>;
  decode: Record<Contender, Summary>;
  /** kvconnect / each llama.cpp run, per round. */
  ratios: Record<LlamaRun, { prefill: Summary; decode: Summary }>;
  roundsTokensEqualF32: number;
}

/** Prompt ids: BOS (when the model has one), then ids that are no special token. */
function promptIds(config: HFModelConfig, length: number, rand: () => number): number[] {
  const specials = new Set(
    [config.bos_token_id, config.eos_token_id].flat().filter((x) => typeof x === 'number'),
  );
  const bos = typeof config.bos_token_id === 'number' ? [config.bos_token_id] : [];
  const ids = [...bos];
  while (ids.length < length) {
    const id = Math.floor(rand() * config.vocab_size);
    if (!specials.has(id)) ids.push(id);
  }
  return ids;
}

export async function main(args: string[]): Promise<void> {
  const o = benchArgs(
    'engine-vs-llamacpp',
    {
      model: text('which checkpoints', { default: 'all', choices: ['all', ...MODELS] }),
      prompt: positiveInteger(256, 'prompt tokens (BOS included)'),
      'decode-steps': positiveInteger(
        128,
        'tokens generated after the first (the decode figure); on kjv-llama a token takes about a millisecond, so fewer steps let one descheduled token move a round',
      ),
      rounds: positiveInteger(5, 'rounds; each figure is their median with min-max'),
      'llama-threads': positiveInteger(2, "llama.cpp's threads"),
      'llama-kv-cache': text("llama.cpp's KV cache type (its default is f16)", {
        default: 'f16',
        choices: ['f16', 'f32'],
      }),
      'llama-flash-attn': text(
        "llama.cpp's flash attention for F32 and F16 (its default is auto); F16 also runs with it off",
        { default: 'auto', choices: ['auto', 'on'] },
      ),
      'kvc-dtype': text(
        "kvconnect's weight dtype, the engine option `dtype` (auto: as the checkpoint stores it)",
        {
          default: 'auto',
          choices: ENGINE_OPTIONS.dtype.choices ?? [],
        },
      ),
      'kvc-threads': nonNegativeInteger(
        2,
        "kvconnect's threads, the engine option `num_threads` (0: the engine's default)",
      ),
      'kvc-engine-args': text(
        'further engine options for kvconnect as a JSON object, e.g. \'{"max_num_batched_tokens":512}\'',
        { default: '{}', value: 'json' },
      ),
    },
    args,
  );
  let extra: Record<string, unknown>;
  try {
    extra = JSON.parse(o['kvc-engine-args']) as Record<string, unknown>;
    if (extra === null || typeof extra !== 'object' || Array.isArray(extra)) throw new Error('not an object');
  } catch (e) {
    exitWithUsageError(
      'engine-vs-llamacpp',
      `--kvc-engine-args expects a JSON object, got '${o['kvc-engine-args']}' (${(e as Error).message})`,
    );
  }
  const kvcOptions = {
    dtype: o['kvc-dtype'],
    ...(o['kvc-threads'] === 0 ? {} : { num_threads: o['kvc-threads'] }),
    ...extra,
  };
  try {
    // Before minutes of setup: kvconnect's options are checked as the engine will check them.
    resolveEngineOptions({ model: KJV_DIR, ...kvcOptions });
  } catch (e) {
    const err = e as Error & { hint?: string };
    exitWithUsageError('engine-vs-llamacpp', `${err.message}${err.hint ? ` (${err.hint})` : ''}`);
  }
  const models = o.model === 'all' ? [...MODELS] : [o.model as ModelName];
  const decodeSteps = o['decode-steps'];
  const contextSize = o.prompt + decodeSteps + 1;
  const loadStart = loadAverage();

  process.stderr.write('compiling the llama.cpp harness ...\n');
  const harness = buildLlamaCppHarness();
  const tmp = mkdtempSync(join(tmpdir(), 'kvc-vs-llamacpp-'));
  const results: ModelResult[] = [];
  try {
    for (const name of models) {
      let dir = KJV_DIR;
      if (name === 'smollm2-135m-shaped') {
        dir = join(tmp, name);
        process.stderr.write(`${name}: writing the checkpoint ...\n`);
        mkdirSync(dir);
        writeSmolLM2ShapedCheckpoint(dir);
      }
      process.stderr.write(`${name}: converting to GGUF F32 and F16 ...\n`);
      const gguf = { f32: join(tmp, `${name}-f32.gguf`), f16: join(tmp, `${name}-f16.gguf`) };
      convertCheckpoint(dir, [
        { file: gguf.f32, dtype: 'f32' },
        { file: gguf.f16, dtype: 'f16' },
      ]);
      results.push(await measure(name, dir, gguf));
      rmSync(join(tmp, name), { recursive: true, force: true });
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
    harness.dispose();
  }

  async function measure(
    name: ModelName,
    dir: string,
    gguf: Record<GgufDtype, string>,
  ): Promise<ModelResult> {
    const config = loadModelConfig(dir);
    const llm = await LLM.create({
      model: dir,
      max_model_len: contextSize,
      num_gpu_blocks: Math.ceil(contextSize / 16) + 2,
      enable_prefix_caching: false,
      ...kvcOptions,
    });
    const engineOptions: LlamaCppHarnessOptions = {
      threads: o['llama-threads'],
      contextSize,
      kvCache: o['llama-kv-cache'] as LlamaCppHarnessOptions['kvCache'],
      flashAttention: o['llama-flash-attn'] as LlamaCppHarnessOptions['flashAttention'],
    };
    const engines = {} as Record<LlamaRun, LlamaCppHarness>;
    for (const [run, file] of LLAMA_RUNS) {
      engines[run] = await LlamaCppHarness.open(harness, gguf[file], {
        ...engineOptions,
        ...(run === 'llamacpp_f16_no_fa' ? { flashAttention: 'off' } : {}),
      });
    }
    try {
      const kvc = async (ids: number[]): Promise<Run> => {
        const [out] = await llm.generate([{ promptTokenIds: ids }], {
          maxTokens: 1 + decodeSteps,
          temperature: 0,
          ignoreEos: true,
        });
        const { ttftMs, e2eMs } = out!.metrics;
        if (out!.tokenIds.length !== 1 + decodeSteps || ttftMs === null || e2eMs === null) {
          throw new Error(
            `kvconnect returned ${out!.tokenIds.length} tokens: ${out!.error?.message ?? out!.finishReason}`,
          );
        }
        return {
          tokens: out!.tokenIds,
          prefillTokPerS: ids.length / (ttftMs / 1000),
          decodeTokPerS: decodeSteps / (Math.max(1, e2eMs - ttftMs) / 1000),
        };
      };
      const cpp = async (engine: LlamaCppHarness, ids: number[]): Promise<Run> => {
        const r = await engine.greedy(ids, 1 + decodeSteps);
        return {
          tokens: r.tokens,
          prefillTokPerS: ids.length / (r.prefillMs / 1000),
          decodeTokPerS: decodeSteps / (r.decodeMs / 1000),
        };
      };
      // Warm-up: JIT, first page faults of the weights, the contexts' first graphs.
      const warm = promptIds(config, 16, mulberry32(1));
      await kvc(warm);
      for (const [run] of LLAMA_RUNS) await cpp(engines[run], warm);

      const rand = mulberry32(2026);
      const prompts = Array.from({ length: o.rounds }, () => promptIds(config, o.prompt, rand));
      const { a: ours, b: theirs } = await alternate(
        o.rounds,
        (r) => {
          process.stderr.write(`${name}: round ${r + 1} of ${o.rounds}\n`);
          return kvc(prompts[r]!);
        },
        async (r) => {
          // The llama.cpp runs rotate which goes first.
          const out = {} as Record<LlamaRun, Run>;
          for (let i = 0; i < LLAMA_RUNS.length; i++) {
            const [run] = LLAMA_RUNS[(r + i) % LLAMA_RUNS.length]!;
            out[run] = await cpp(engines[run], prompts[r]!);
          }
          return out;
        },
      );
      const series = (pick: (r: Run) => number): Record<Contender, number[]> => ({
        kvconnect: ours.map(pick),
        llamacpp_f32: theirs.map((t) => pick(t.llamacpp_f32)),
        llamacpp_f16: theirs.map((t) => pick(t.llamacpp_f16)),
        llamacpp_f16_no_fa: theirs.map((t) => pick(t.llamacpp_f16_no_fa)),
      });
      const prefill = series((r) => r.prefillTokPerS);
      const decode = series((r) => r.decodeTokPerS);
      const summary = (s: Record<Contender, number[]>) =>
        Object.fromEntries(CONTENDERS.map((c) => [c, summarize(s[c])])) as Record<Contender, Summary>;
      return {
        model: name,
        prefill: summary(prefill),
        decode: summary(decode),
        ratios: Object.fromEntries(
          RATIOS.map((run) => [
            run,
            {
              prefill: pairwiseRatio(prefill[run], prefill.kvconnect),
              decode: pairwiseRatio(decode[run], decode.kvconnect),
            },
          ]),
        ) as ModelResult['ratios'],
        roundsTokensEqualF32: ours.filter((r, i) => r.tokens.join() === theirs[i]!.llamacpp_f32.tokens.join())
          .length,
      };
    } finally {
      for (const e of Object.values(engines)) await e.dispose();
      await llm.shutdown();
    }
  }

  const loadEnd = loadAverage();
  console.log(
    `\n${o.rounds} rounds, median (min–max); prompt ${o.prompt} tokens, ${decodeSteps} decode tokens; ` +
      `llama.cpp ${o['llama-threads']} threads, KV cache ${o['llama-kv-cache']}, ` +
      `flash attention ${o['llama-flash-attn']}; ` +
      `kvconnect ${JSON.stringify(kvcOptions)}; load average ${loadStart} → ${loadEnd}`,
  );
  console.log('| model | engine | prefill tokens/s | decode tokens/s |\n|---|---|---|---|');
  const label: Record<Contender, string> = {
    kvconnect: 'kvconnect',
    llamacpp_f32: 'llama.cpp F32',
    llamacpp_f16: 'llama.cpp F16',
    llamacpp_f16_no_fa: 'llama.cpp F16, flash attention off',
  };
  for (const r of results) {
    for (const c of CONTENDERS)
      console.log(`| ${r.model} | ${label[c]} | ${fmt(r.prefill[c], 1)} | ${fmt(r.decode[c], 1)} |`);
    for (const run of RATIOS) {
      const q = r.ratios[run];
      console.log(
        `| ${r.model} | **kvconnect / ${label[run]}** | ${fmt(q.prefill, 2)} | ${fmt(q.decode, 2)} |`,
      );
    }
  }
  for (const r of results) {
    console.log(
      `${r.model}: greedy tokens equal to llama.cpp F32's in ${r.roundsTokensEqualF32} of ${o.rounds} rounds` +
        (o['llama-kv-cache'] === 'f16' ? ' (its KV cache is f16 here: the exact check is the test)' : ''),
    );
  }
  console.log(
    JSON.stringify({
      bench: 'engine-vs-llamacpp',
      rounds: o.rounds,
      load_average_1m: { start: loadStart, end: loadEnd },
      prompt_tokens: o.prompt,
      decode_tokens: decodeSteps,
      llamacpp: {
        threads: o['llama-threads'],
        kv_cache: o['llama-kv-cache'],
        flash_attention: o['llama-flash-attn'],
      },
      kvconnect_engine_options: kvcOptions,
      models: Object.fromEntries(
        results.map((r) => [
          r.model,
          {
            ...Object.fromEntries(
              CONTENDERS.map((c) => [
                c,
                { prefill_tokens_per_s: json(r.prefill[c], 1), decode_tokens_per_s: json(r.decode[c], 1) },
              ]),
            ),
            ...Object.fromEntries(
              RATIOS.map((run) => [
                `kvconnect_over_${run}`,
                { prefill: json(r.ratios[run].prefill), decode: json(r.ratios[run].decode) },
              ]),
            ),
            rounds_greedy_tokens_equal_llamacpp_f32: r.roundsTokensEqualF32,
          },
        ]),
      ),
    }),
  );
}
