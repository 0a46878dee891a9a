/**
 * NixlConnector declares that every completion wakes the engine (wakesEngineOnCompletion),
 * so an engine with NIXL work pending idles long between steps and relies on each completion
 * ending that wait (docs/connector-api.md#waking-the-engine). Here the idle wait is made far
 * longer than each test's deadline: the engine that waits finishes in time only if the
 * completion woke it — a READ from a producer of another tensor-parallel size
 * (hetero-reader.ts), the end of a push WRITE on the producer (push-worker.ts), and a load
 * that ends outside a step (a failed handshake, worker.ts).
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { describe, it } from 'node:test';
import type { RequestOutputDelta } from '../../../src/engine/api.ts';
import { AsyncEngine } from '../../../src/engine/async-engine.ts';
import { LLM, samplingParams } from '../../../src/engine/llm.ts';
import { captureLogs } from '../../../src/logging/logger.ts';
import { nixlPrefillResult } from '../../../src/wire/index.ts';
import { GREEDY, PROMPTS, plainOutputs, waitForEmptyPool } from '../../helpers/llm.ts';
import { engineOptions, P_PARAMS, type PairOptions } from './helpers.ts';

/** Far beyond DEADLINE_MS: an engine that waits for its idle poll cannot finish in time. */
const IDLE_MS = 30_000;
const DEADLINE_MS = 10_000;

let nextId = 0;

/** An engine whose idle waits (woken or not) last IDLE_MS. */
async function sleepyEngine(o: PairOptions, role: 'kv_producer' | 'kv_consumer'): Promise<AsyncEngine> {
  const { kvTransferConfig, ...rest } = engineOptions(o, role, `${role}-${process.pid}-${nextId++}`);
  return AsyncEngine.create(
    { ...rest, kv_transfer_config: kvTransferConfig ?? null },
    { idleStepIntervalMs: IDLE_MS, wokenIdleStepIntervalMs: IDLE_MS },
  );
}

function late(what: string): Error {
  return new Error(`${what} not within ${DEADLINE_MS} ms: the completion did not wake the engine`);
}

function within<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(late(what)), DEADLINE_MS);
  });
  return Promise.race([p, deadline]).finally(() => clearTimeout(timer));
}

/** Polls `done` until it holds, for DEADLINE_MS at most. */
async function until(done: () => boolean, what: string): Promise<void> {
  const deadline = performance.now() + DEADLINE_MS;
  while (!done()) {
    if (performance.now() > deadline) throw late(what);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Runs `prompt` to its end on `engine`; resolves with its last delta and the tokens. */
async function serve(
  engine: AsyncEngine,
  prompt: string,
  maxTokens: number,
  kvTransferParams: Record<string, unknown> | null,
): Promise<{ last: RequestOutputDelta; tokenIds: number[] }> {
  const stream = engine.generate({
    requestId: `wakeup-${nextId++}`,
    prompt,
    sampling: samplingParams({ ...GREEDY, maxTokens }),
    kvTransferParams,
  });
  const tokenIds: number[] = [];
  let last: RequestOutputDelta | undefined;
  for await (const d of stream) {
    tokenIds.push(...d.newTokenIds);
    last = d;
  }
  assert.ok(last, 'the request produced output');
  return { last, tokenIds };
}

/** A loopback port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe('NixlConnector completions wake an engine that idles between steps', { timeout: 60_000 }, () => {
  const pull: PairOptions = { model: 'tiny', connector: 'NixlConnector', backend: 'TCP' };

  it('a READ from a producer of another TP size (P tp=2 → D tp=1) wakes D', async () => {
    const prompt = PROMPTS[0]!;
    const [expected] = await plainOutputs('tiny', [prompt]);
    const p = await LLM.create({
      ...engineOptions(pull, 'kv_producer', `p-${process.pid}`),
      tensor_parallel_size: 2,
    });
    const d = await sleepyEngine(pull, 'kv_consumer');
    try {
      const [answer] = await p.generate(prompt, { ...GREEDY, maxTokens: 1 }, { kvTransferParams: P_PARAMS });
      assert.equal(answer!.kvTransferParams?.['tp_size'], 2);
      const { last, tokenIds } = await within(
        serve(d, prompt, GREEDY.maxTokens, answer!.kvTransferParams),
        "D's request",
      );
      assert.equal(last.finishReason, 'length');
      assert.ok(last.metrics.numExternalTokens > 0, 'the prompt KV came from P');
      assert.deepEqual(tokenIds, expected);
      await waitForEmptyPool(p);
    } finally {
      await Promise.all([p.shutdown(), d.shutdown()]);
    }
  });

  it('the end of a push WRITE wakes P, which frees the pushed blocks', async () => {
    const push: PairOptions = { ...pull, connector: 'NixlPushConnector' };
    const prompt = PROMPTS[2]!;
    const p = await sleepyEngine(push, 'kv_producer');
    const d = await LLM.create(engineOptions(push, 'kv_consumer', `d-${process.pid}`));
    try {
      const answer = await serve(p, prompt, 1, P_PARAMS);
      assert.equal(answer.last.kvTransferParams?.['transfer_mode'], 'push');
      assert.ok(p.engine.schedulerStats().kvCacheUsage > 0, 'P holds the blocks until they are pushed');
      const [out] = await d.generate(prompt, GREEDY, { kvTransferParams: answer.last.kvTransferParams });
      assert.equal(out!.finishReason, 'length');
      assert.ok(out!.metrics.numExternalTokens > 0, 'the prompt KV was pushed to D');
      // D is answered when the WRITE's notification reaches it; P frees its blocks in the
      // step after the WRITE ended, which only the WRITE's end can start.
      await until(
        () => p.engine.schedulerStats().kvCacheUsage === 0 && !p.engine.hasWork(),
        "P's pushed blocks freed",
      );
    } finally {
      await Promise.all([p.shutdown(), d.shutdown()]);
    }
  });

  it('a load that fails outside a step (no producer at its address) wakes D to recompute', async () => {
    const prompt = PROMPTS[1]!;
    const [expected] = await plainOutputs('tiny', [prompt]);
    const d = await sleepyEngine({ ...pull, policy: 'recompute' }, 'kv_consumer');
    try {
      const params = nixlPrefillResult({
        remote: { engineId: 'gone', host: '127.0.0.1', port: await closedPort(), tpSize: 1 },
        requestId: 'gone-request',
        blockIds: [[1, 2]],
        numTokens: 20,
        mode: 'pull',
      });
      const { result, records } = await captureLogs(() =>
        within(serve(d, prompt, GREEDY.maxTokens, params), "D's request"),
      );
      assert.match(
        records.map((r) => r.message).join('\n'),
        /handshake_failed/,
        'the load failed at its handshake',
      );
      const { last, tokenIds } = result;
      assert.equal(last.finishReason, 'length');
      assert.equal(last.metrics.numExternalTokens, 0, 'nothing was loaded: D recomputed the prompt');
      assert.deepEqual(tokenIds, expected);
    } finally {
      await d.shutdown();
    }
  });
});
