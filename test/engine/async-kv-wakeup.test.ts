/**
 * The connector's wake-up (KVConnectorBase.wakeEngine → Engine.setKvWakeup → AsyncEngine):
 * a load that lands between steps is scheduled at once, not at the loop's next idle poll.
 * The poll is made far longer than the test's deadline, so a request whose load landed
 * finishes in time only if the landing woke the loop — with the rank in the engine's thread
 * (tp = 1) and in worker threads (tp = 2, through a message).
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { RequestOutputDelta } from '../../src/engine/api.ts';
import { AsyncEngine, type AsyncEngineLoopOptions } from '../../src/engine/async-engine.ts';
import { samplingParams } from '../../src/engine/llm.ts';
import { saveOnProducer } from './fixtures/saved-kv.ts';

const FIXTURE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'recording-connector.ts');
const PROMPT = Array.from({ length: 40 }, (_, i) => (i * 31 + 5) % 256);
/** Far beyond DEADLINE_MS: a load noticed only by the poll cannot finish in time. */
const IDLE_POLL_MS = 30_000;
const DEADLINE_MS = 10_000;
const LAND_AFTER_MS = 30;

let nextEngine = 0;

async function engineWith(
  role: 'kv_producer' | 'kv_consumer',
  extra: Record<string, unknown>,
  more: Record<string, unknown> = {},
  loop: AsyncEngineLoopOptions = { idleStepIntervalMs: IDLE_POLL_MS },
): Promise<{ engine: AsyncEngine; id: string }> {
  const id = `wakeup-${process.pid}-${nextEngine++}`;
  const engine = await AsyncEngine.create(
    {
      model: 'tiny',
      num_gpu_blocks: 32,
      max_model_len: 128,
      ...more,
      kv_transfer_config: {
        kv_connector: 'RecordingConnector',
        kv_connector_module_path: FIXTURE,
        kv_role: role,
        engine_id: id,
        kv_connector_extra_config: extra,
      },
    },
    loop,
  );
  return { engine, id };
}

async function collect(stream: AsyncIterable<RequestOutputDelta>): Promise<RequestOutputDelta[]> {
  const out: RequestOutputDelta[] = [];
  for await (const d of stream) out.push(d);
  return out;
}

function withDeadline<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new Error(`${what} not served within ${DEADLINE_MS} ms: the landed load did not wake the loop`),
        ),
      DEADLINE_MS,
    );
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** PROMPT's request, its KV loaded from `key`, within DEADLINE_MS. */
function loadAndGenerate(
  engine: AsyncEngine,
  key: string,
  maxTokens: number,
  what: string,
): Promise<RequestOutputDelta[]> {
  const stream = engine.generate({
    requestId: 'd',
    promptTokenIds: PROMPT,
    sampling: samplingParams({ maxTokens, temperature: 0, ignoreEos: true }),
    kvTransferParams: { load_key: key },
  });
  return withDeadline(collect(stream), what);
}

for (const tp of [1, 2]) {
  test(`tp=${tp}: a load that lands between steps is scheduled at once, not at the idle poll`, async () => {
    const key = await saveOnProducer(await engineWith('kv_producer', {}), PROMPT);
    const consumer = await engineWith(
      'kv_consumer',
      { async_load: true, land_after_ms: LAND_AFTER_MS, wakes_engine: true },
      { tensor_parallel_size: tp },
    );
    try {
      const started = performance.now();
      const deltas = await loadAndGenerate(consumer.engine, key, 2, `tp=${tp}: the request`);
      const last = deltas.at(-1);
      assert.equal(last?.finishReason, 'length');
      assert.equal(last?.metrics.numExternalTokens, PROMPT.length, 'its prompt was loaded, asynchronously');
      assert.ok(performance.now() - started >= LAND_AFTER_MS, 'served after its load landed');
    } finally {
      await consumer.engine.shutdown();
    }
  });
}

/** Engine steps while one request's load (landing after `landAfterMs`) is in flight, with the default idle poll. */
async function stepsWhileLoading(wakesEngine: boolean, landAfterMs: number): Promise<number> {
  const key = await saveOnProducer(await engineWith('kv_producer', {}), PROMPT);
  const consumer = await engineWith(
    'kv_consumer',
    { async_load: true, land_after_ms: landAfterMs, wakes_engine: wakesEngine },
    {},
    {},
  );
  const inner = consumer.engine.engine;
  const step = inner.step.bind(inner);
  let steps = 0;
  inner.step = () => {
    steps++;
    return step();
  };
  try {
    const deltas = await loadAndGenerate(consumer.engine, key, 1, 'the request');
    assert.equal(deltas.at(-1)?.metrics.numExternalTokens, PROMPT.length, 'its prompt was loaded');
    return steps;
  } finally {
    await consumer.engine.shutdown();
  }
}

test('a connector whose completions all wake the engine is not polled every 2 ms while a load is in flight', async () => {
  const landAfterMs = 500;
  const woken = await stepsWhileLoading(true, landAfterMs);
  // 500 ms at the 50 ms wait is about 10 idle steps, plus the admission and the computing step.
  assert.ok(woken <= 16, `${woken} steps while waiting ${landAfterMs} ms for a load that wakes the engine`);
  // The control: a connector that does not declare it keeps the short poll (the test can fail).
  const polled = await stepsWhileLoading(false, landAfterMs);
  assert.ok(polled > 2 * woken, `${polled} steps with the 2 ms poll, ${woken} with wake-ups`);
});
