/**
 * The connector conformance suite (docs/architecture.md): one function that registers node:test
 * tests every connector must pass, over the `tiny` and `tiny-hybrid` models with greedy
 * sampling:
 *  - a consumer engine's outputs equal a plain engine's, token for token, and it computes only
 *    the uncached suffix of each prompt (per-request metrics);
 *  - aborting consumer requests while their KV loads leaks no blocks (KV usage returns to 0);
 *  - a corrupt or missing stored block is reported (getBlockIdsWithLoadErrors) and handled by
 *    both kv_load_failure_policy values: `fail` ends the request with an error, `recompute`
 *    still produces the plain engine's tokens.
 *
 * Two shapes of connector fit:
 *  - mode 'storage' (default): the producer engine runs the prompts and is shut down; a fresh
 *    consumer engine then loads them (for a kv_both connector, pass the same config twice).
 *  - mode 'p2p': both engines run at once; `produce` runs the producer request and returns the
 *    kv_transfer_params to hand to the consumer (default: vLLM's flow, do_remote_decode with
 *    max_tokens 1, the params of the final output).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { before, describe, test } from 'node:test';
import type { KVTransferParams } from '../../../src/connector/types.ts';
import type { RequestOutputDelta } from '../../../src/engine/api.ts';
import { AsyncEngine } from '../../../src/engine/async-engine.ts';
import { samplingParams } from '../../../src/engine/llm.ts';

export type ConformanceModel = 'tiny' | 'tiny-hybrid';

export interface ConformanceContext {
  model: ConformanceModel;
  /** A fresh directory for this test (under os.tmpdir()), removed afterwards. */
  dir: string;
  blockSize: number;
  /** True when the engines run the hybrid KV cache manager (tiny-hybrid with HMA: two groups). */
  hybridKvCacheManager: boolean;
  /** Scratch space for the hooks of one test (ports, servers, ...). */
  state: Record<string, unknown>;
}

export type TransferConfigInput = Record<string, unknown>;

export interface CorruptionTarget {
  /** 'corrupt': damage the stored bytes of a block; 'missing': make a stored block unavailable. */
  kind: 'corrupt' | 'missing';
  /** The prompt whose stored KV to damage. Damage a block other than the last loaded one. */
  promptTokenIds: number[];
  /** p2p: the params the consumer will receive; null in storage mode. */
  kvTransferParams: KVTransferParams | null;
  /** p2p: the live producer engine; null in storage mode (it has been shut down). */
  producer: AsyncEngine | null;
}

export interface ConnectorConformanceOptions {
  name: string;
  mode?: 'storage' | 'p2p';
  models?: ConformanceModel[];
  /** false: tiny-hybrid runs with --disable-hybrid-kv-cache-manager (one KV cache group). */
  supportsHybrid?: boolean;
  makeProducerConfig(ctx: ConformanceContext): TransferConfigInput;
  makeConsumerConfig(ctx: ConformanceContext): TransferConfigInput;
  /** Extra engine options (vLLM names) for the connector engines. */
  engineOptions?(ctx: ConformanceContext): Record<string, unknown>;
  setup?(ctx: ConformanceContext): void | Promise<void>;
  teardown?(ctx: ConformanceContext): void | Promise<void>;
  /** p2p: run the producer side of one request; returns the consumer's kv_transfer_params. */
  produce?(
    ctx: ConformanceContext,
    producer: AsyncEngine,
    request: { requestId: string; promptTokenIds: number[] },
  ): Promise<KVTransferParams | null>;
  /** Damages stored KV; without it the load-failure tests are not registered. */
  corrupt?(ctx: ConformanceContext, target: CorruptionTarget): void | Promise<void>;
  corruptionKinds?: CorruptionTarget['kind'][];
  /** Upper bound of prompt tokens a consumer computes itself (default: storage blockSize + 1, p2p 1). */
  maxLocalComputedTokens?(ctx: ConformanceContext, promptLength: number): number;
}

const BLOCK_SIZE = 16;
const MAX_TOKENS = 6;
const GREEDY = samplingParams({ maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true });

/** Byte-token prompts (no BOS/EOS ids) whose lengths hit different block alignments. */
export const CONFORMANCE_PROMPTS: readonly number[][] = [
  Array.from({ length: 50 }, (_, i) => (i * 31 + 7) % 256),
  Array.from({ length: 33 }, (_, i) => (i * 17 + 101) % 256),
  Array.from({ length: 64 }, (_, i) => (i * 13 + 53) % 256),
];

interface RunResult {
  tokenIds: number[];
  finishReason: string | null;
  error: RequestOutputDelta['error'] | undefined;
  metrics: RequestOutputDelta['metrics'];
  kvTransferParams: KVTransferParams | null;
}

async function collect(stream: AsyncIterable<RequestOutputDelta>): Promise<RunResult> {
  const tokenIds: number[] = [];
  let last: RequestOutputDelta | null = null;
  for await (const delta of stream) {
    tokenIds.push(...delta.newTokenIds);
    last = delta;
  }
  assert.ok(last, 'the stream ended without a final output');
  return {
    tokenIds,
    finishReason: last.finishReason,
    error: last.error,
    metrics: last.metrics,
    kvTransferParams: last.kvTransferParams,
  };
}

let requestCounter = 0;
function nextId(tag: string): string {
  return `${tag}-${process.pid}-${requestCounter++}`;
}

function run(
  engine: AsyncEngine,
  promptTokenIds: number[],
  kvTransferParams: KVTransferParams | null = null,
  maxTokens = MAX_TOKENS,
): Promise<RunResult> {
  const sampling = { ...GREEDY, maxTokens };
  return collect(engine.generate({ requestId: nextId('conf'), promptTokenIds, sampling, kvTransferParams }));
}

const referenceCache = new Map<ConformanceModel, Promise<number[][]>>();

/** The plain engine's greedy tokens for every prompt (computed once per model per process). */
export function referenceTokens(model: ConformanceModel): Promise<number[][]> {
  let ref = referenceCache.get(model);
  if (!ref) {
    ref = (async () => {
      const engine = await AsyncEngine.create({
        model,
        block_size: BLOCK_SIZE,
        num_gpu_blocks: 96,
        max_model_len: 256,
      });
      try {
        const results = await Promise.all(CONFORMANCE_PROMPTS.map((p) => run(engine, p)));
        return results.map((r) => r.tokenIds);
      } finally {
        await engine.shutdown();
      }
    })();
    referenceCache.set(model, ref);
  }
  return ref;
}

async function defaultProduce(
  _ctx: ConformanceContext,
  producer: AsyncEngine,
  request: { requestId: string; promptTokenIds: number[] },
): Promise<KVTransferParams | null> {
  const out = await collect(
    producer.generate({
      requestId: request.requestId,
      promptTokenIds: request.promptTokenIds,
      sampling: { ...GREEDY, maxTokens: 1 },
      kvTransferParams: { do_remote_decode: true },
    }),
  );
  assert.equal(out.error, undefined, `the producer request failed: ${out.error?.message}`);
  return out.kvTransferParams;
}

export function runConnectorConformance(opts: ConnectorConformanceOptions): void {
  const mode = opts.mode ?? 'storage';
  const models = opts.models ?? ['tiny', 'tiny-hybrid'];
  for (const model of models) {
    const hybrid = model === 'tiny-hybrid' && opts.supportsHybrid === true;
    describe(`${opts.name} conformance (${model}${model === 'tiny-hybrid' ? (hybrid ? ', HMA on' : ', HMA off') : ''})`, () => {
      let reference: number[][] = [];
      before(async () => {
        reference = await referenceTokens(model);
      });

      const maxLocal = (ctx: ConformanceContext, len: number): number =>
        opts.maxLocalComputedTokens?.(ctx, len) ?? (mode === 'storage' ? ctx.blockSize + 1 : 1);

      /** Runs `body` with a fresh context and the connector's setup/teardown around it. */
      const withContext = async (
        body: (ctx: ConformanceContext, h: Harness) => Promise<void>,
      ): Promise<void> => {
        const ctx: ConformanceContext = {
          model,
          dir: fs.mkdtempSync(path.join(os.tmpdir(), 'kvconnect-conformance-')),
          blockSize: BLOCK_SIZE,
          hybridKvCacheManager: hybrid,
          state: {},
        };
        const engines: AsyncEngine[] = [];
        const h: Harness = {
          engine: async (role, policy) => {
            const base = role === 'producer' ? opts.makeProducerConfig(ctx) : opts.makeConsumerConfig(ctx);
            const kv_transfer_config = policy ? { ...base, kv_load_failure_policy: policy } : base;
            const engine = await AsyncEngine.create({
              model,
              block_size: BLOCK_SIZE,
              num_gpu_blocks: 96,
              max_model_len: 256,
              disable_hybrid_kv_cache_manager: model === 'tiny-hybrid' ? !hybrid : null,
              ...opts.engineOptions?.(ctx),
              kv_transfer_config,
            });
            engines.push(engine);
            return engine;
          },
          /** Storage: run the prompts on a producer and shut it down. p2p: params per prompt. */
          produce: async (producer, prompts) => {
            if (mode === 'storage') {
              const outs = await Promise.all(prompts.map((p) => run(producer, p)));
              outs.forEach((o, i) => {
                assert.deepEqual(
                  o.tokenIds,
                  reference[CONFORMANCE_PROMPTS.indexOf(prompts[i] as number[])],
                  'a producer must not change outputs',
                );
              });
              await producer.waitIdle();
              await producer.shutdown();
              return prompts.map(() => null);
            }
            const produce = opts.produce ?? defaultProduce;
            return Promise.all(
              prompts.map((p) => produce(ctx, producer, { requestId: nextId('prod'), promptTokenIds: p })),
            );
          },
        };
        try {
          await opts.setup?.(ctx);
          await body(ctx, h);
        } finally {
          for (const e of engines) await e.shutdown().catch(() => {});
          await opts.teardown?.(ctx);
          fs.rmSync(ctx.dir, { recursive: true, force: true });
        }
      };

      test('the consumer reproduces the plain engine token for token and computes only the uncached suffix', async () => {
        await withContext(async (ctx, h) => {
          const producer = await h.engine('producer');
          const prompts = [...CONFORMANCE_PROMPTS];
          const params = await h.produce(producer, prompts);
          const consumer = await h.engine('consumer');
          const outs = await Promise.all(prompts.map((p, i) => run(consumer, p, params[i] ?? null)));
          outs.forEach((out, i) => {
            const len = prompts[i]?.length ?? 0;
            assert.equal(out.error, undefined, `prompt ${i} failed: ${out.error?.message}`);
            assert.deepEqual(out.tokenIds, reference[i], `prompt ${i}: tokens differ from the plain engine`);
            const m = out.metrics;
            assert.ok(m.numExternalTokens > 0, `prompt ${i}: nothing was loaded through the connector`);
            assert.ok(
              m.numLocalComputedTokens <= maxLocal(ctx, len),
              `prompt ${i} (${len} tokens): computed ${m.numLocalComputedTokens} tokens locally, at most ${maxLocal(ctx, len)} expected`,
            );
            // p2p loads the whole prompt, then recomputes its last token (vLLM's
            // _update_waiting_for_remote_kv): that token counts as external and as local.
            const counted = m.numLocalComputedTokens + m.numExternalTokens + m.numLocalCachedTokens;
            const overlap = mode === 'p2p' && m.numExternalTokens + m.numLocalCachedTokens === len ? 1 : 0;
            assert.equal(counted, len + overlap, `prompt ${i}: token accounting`);
          });
          await consumer.waitIdle();
          assert.equal(
            consumer.stats().kvCacheUsage,
            0,
            'blocks are still in use after every request finished',
          );
        });
      });

      test('aborting consumer requests while their KV loads leaks no blocks', async () => {
        await withContext(async (_ctx, h) => {
          const producer = await h.engine('producer');
          const prompts = [...CONFORMANCE_PROMPTS];
          const params = await h.produce(producer, prompts);
          const consumer = await h.engine('consumer');
          const controllers = prompts.map(() => new AbortController());
          const streams = prompts.map((p, i) =>
            consumer.generate(
              {
                requestId: nextId('abort'),
                promptTokenIds: p,
                sampling: { ...GREEDY, maxTokens: 32 },
                kvTransferParams: params[i] ?? null,
              },
              controllers[i]?.signal,
            ),
          );
          controllers[0]?.abort();
          const results = await Promise.all(
            streams.map(async (stream, i) => {
              const tokens: number[] = [];
              let reason: string | null = null;
              for await (const delta of stream) {
                tokens.push(...delta.newTokenIds);
                if (i === 1 && tokens.length > 0) controllers[1]?.abort();
                if (delta.finished) reason = delta.finishReason;
              }
              return reason;
            }),
          );
          assert.equal(results[0], 'abort');
          assert.equal(results[1], 'abort');
          assert.equal(results[2], 'length');
          await consumer.waitIdle();
          assert.equal(consumer.stats().kvCacheUsage, 0, 'aborted requests left blocks in use');
        });
      });

      if (!opts.corrupt) return;
      for (const kind of opts.corruptionKinds ?? (['corrupt', 'missing'] as const)) {
        for (const policy of ['fail', 'recompute'] as const) {
          test(`a ${kind} stored block is reported and handled by kv_load_failure_policy=${policy}`, async () => {
            await withContext(async (ctx, h) => {
              const producer = await h.engine('producer');
              const [damaged, clean] = [
                CONFORMANCE_PROMPTS[0] as number[],
                CONFORMANCE_PROMPTS[2] as number[],
              ];
              const params = await h.produce(producer, [damaged, clean]);
              await opts.corrupt?.(ctx, {
                kind,
                promptTokenIds: damaged,
                kvTransferParams: params[0] ?? null,
                producer: mode === 'p2p' ? producer : null,
              });
              const consumer = await h.engine('consumer', policy);
              const [bad, good] = await Promise.all([
                run(consumer, damaged, params[0] ?? null),
                run(consumer, clean, params[1] ?? null),
              ]);
              assert.deepEqual(good.tokenIds, reference[2], 'an undamaged request is unaffected');
              if (policy === 'fail') {
                assert.equal(bad.finishReason, 'error', 'the damaged load must fail the request');
                assert.ok(bad.error?.code, 'the failed request carries an error code');
              } else {
                assert.equal(bad.error, undefined, `recompute must recover: ${bad.error?.message}`);
                assert.deepEqual(
                  bad.tokenIds,
                  reference[0],
                  'recomputed tokens differ from the plain engine',
                );
                assert.ok(
                  consumer.stats().externalPrefixCacheHitsTotal > good.metrics.numExternalTokens,
                  'the connector did not offer the damaged prompt for loading',
                );
                assert.ok(
                  bad.metrics.numLocalComputedTokens > maxLocal(ctx, damaged.length),
                  `the damaged blocks were not recomputed (computed ${bad.metrics.numLocalComputedTokens} tokens locally)`,
                );
              }
              await consumer.waitIdle();
              assert.equal(consumer.stats().kvCacheUsage, 0, 'blocks are still in use after the failure');
            });
          });
        }
      }
    });
  }
}

interface Harness {
  engine(role: 'producer' | 'consumer', policy?: 'fail' | 'recompute'): Promise<AsyncEngine>;
  produce(producer: AsyncEngine, prompts: number[][]): Promise<(KVTransferParams | null)[]>;
}
