import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { attentionLayerName } from '../../src/config/model-presets.ts';
import type { RequestOutputDelta } from '../../src/engine/api.ts';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { samplingParams } from '../../src/engine/llm.ts';
import { waitUntil } from '../helpers/wait-until.ts';
import { recorded, releaseHeldLoads } from './fixtures/recording-connector.ts';
import { saveOnProducer } from './fixtures/saved-kv.ts';

const FIXTURE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'recording-connector.ts');
const PROMPT = Array.from({ length: 40 }, (_, i) => (i * 29 + 7) % 256);
const GREEDY = samplingParams({ maxTokens: 6, temperature: 0, ignoreEos: true });
const LAYERS = Array.from({ length: 4 }, (_, i) => attentionLayerName(i));

let nextEngine = 0;

async function engineWith(
  role: 'kv_producer' | 'kv_consumer' | 'kv_both' | null,
  extra: Record<string, unknown> = {},
  more: Record<string, unknown> = {},
): Promise<{ engine: AsyncEngine; id: string }> {
  const id = `engine-${process.pid}-${nextEngine++}`;
  const { kv_load_failure_policy, ...extraConfig } = extra;
  const engine = await AsyncEngine.create({
    model: 'tiny',
    num_gpu_blocks: 32,
    max_model_len: 128,
    ...more,
    kv_transfer_config:
      role === null
        ? null
        : {
            kv_connector: 'RecordingConnector',
            kv_connector_module_path: FIXTURE,
            kv_role: role,
            engine_id: id,
            kv_connector_extra_config: extraConfig,
            ...(kv_load_failure_policy
              ? { kv_load_failure_policy: kv_load_failure_policy as 'fail' | 'recompute' }
              : {}),
          },
  });
  return { engine, id };
}

async function collect(stream: AsyncIterable<RequestOutputDelta>): Promise<RequestOutputDelta[]> {
  const out: RequestOutputDelta[] = [];
  for await (const d of stream) out.push(d);
  return out;
}

function tokensOf(deltas: RequestOutputDelta[]): number[] {
  return deltas.flatMap((d) => d.newTokenIds);
}

async function plainTokens(): Promise<number[]> {
  const { engine } = await engineWith(null);
  try {
    return tokensOf(
      await collect(engine.generate({ requestId: 'plain', promptTokenIds: PROMPT, sampling: GREEDY })),
    );
  } finally {
    await engine.shutdown();
  }
}

const FORWARD_STEP_TAIL = [
  'waitForSave',
  'getBlockIdsWithLoadErrors',
  'getKvConnectorStats',
  'getKvConnectorKvCacheEvents',
  'buildConnectorWorkerMeta',
  'clearConnectorMetadata',
];

/** Steps without layer hooks and getFinished details, for order checks. */
function shape(step: string[]): string[] {
  return step
    .filter((c) => !c.startsWith('waitForLayerLoad') && !c.startsWith('saveKvLayer'))
    .map((c) => c.split(' ')[0] as string);
}

test('worker hooks run in vLLM order every step, layer hooks per layer, scheduler hooks per request', async () => {
  const { engine, id } = await engineWith('kv_both', {}, { max_num_batched_tokens: 16 });
  try {
    const deltas = await collect(
      engine.generate({ requestId: 'r1', promptTokenIds: PROMPT, sampling: GREEDY }),
    );
    assert.equal(tokensOf(deltas).length, GREEDY.maxTokens);
    await engine.waitIdle();
  } finally {
    await engine.shutdown();
  }
  const calls = recorded(id);
  assert.deepEqual(calls.worker[0], ['registerKvCaches']);
  const steps = calls.worker.slice(1);
  // 40 prompt tokens in chunks of 16 → 3 prefill steps, then 5 decode steps, then one idle
  // step that tells the workers the request finished.
  assert.equal(steps.length, 3 + GREEDY.maxTokens - 1 + 1);
  const idle = steps.pop() ?? [];
  assert.deepEqual(shape(idle), [
    'handlePreemptions',
    'bindConnectorMetadata',
    'startLoadKv',
    'getFinished',
    ...FORWARD_STEP_TAIL.slice(1),
  ]);
  assert.ok(idle.includes('startLoadKv idle') && idle.includes('getFinished [r1]'));
  for (const step of steps) {
    assert.deepEqual(shape(step), [
      'handlePreemptions',
      'bindConnectorMetadata',
      'startLoadKv',
      FORWARD_STEP_TAIL[0],
      'getFinished',
      ...FORWARD_STEP_TAIL.slice(1),
    ]);
    const layerCalls = step.filter((c) => c.startsWith('waitForLayerLoad') || c.startsWith('saveKvLayer'));
    assert.deepEqual(
      layerCalls,
      LAYERS.flatMap((l) => [`waitForLayerLoad ${l}`, `saveKvLayer ${l}`]),
    );
  }
  assert.deepEqual(calls.scheduler.slice(0, 5), [
    'setXferHandshakeMetadata 0',
    'onNewRequest r1',
    'getNumNewMatchedTokens r1 0',
    'updateStateAfterAlloc r1 0',
    'buildConnectorMeta 16',
  ]);
  assert.equal(calls.scheduler.filter((c) => c === 'requestFinished r1').length, 1);
  assert.equal(calls.scheduler.filter((c) => c.startsWith('buildConnectorMeta')).length, steps.length + 1);
  // The finished id reaches the workers in the next step's getFinished; none here, so the engine stopped.
  assert.ok(
    calls.scheduler.indexOf('requestFinished r1') >
      calls.scheduler.lastIndexOf('getNumNewMatchedTokens r1 0'),
  );
});

test('KV saved by a producer (delayed free) and loaded asynchronously by a consumer gives the plain tokens', async () => {
  const expected = await plainTokens();
  const producer = await engineWith('kv_producer');
  let params: Record<string, unknown> | null = null;
  try {
    const deltas = await collect(
      producer.engine.generate({
        requestId: 'p1',
        promptTokenIds: PROMPT,
        sampling: samplingParams({ maxTokens: 1, temperature: 0, ignoreEos: true }),
        kvTransferParams: { save_key: `${producer.id}-k` },
      }),
    );
    const last = deltas.at(-1);
    params = last?.kvTransferParams ?? null;
    assert.deepEqual(params, { load_key: `${producer.id}-k`, saved_by: producer.id });
    assert.deepEqual(tokensOf(deltas), expected.slice(0, 1));
    // Delayed free: the blocks are held until the save reports finished_sending.
    assert.ok(producer.engine.stats().kvCacheUsage > 0, 'blocks held for the hand-off');
    await producer.engine.waitIdle();
    assert.equal(producer.engine.stats().kvCacheUsage, 0);
  } finally {
    await producer.engine.shutdown();
  }
  const pCalls = recorded(producer.id);
  const finishedAt = pCalls.scheduler.indexOf('requestFinished p1');
  const sentAt = pCalls.scheduler.indexOf('updateConnectorOutput sending=p1');
  assert.ok(finishedAt >= 0 && sentAt > finishedAt, 'finished_sending arrives after requestFinished');
  assert.ok(pCalls.worker.some((s) => s.includes('getFinished [p1] sending=p1')));

  const consumer = await engineWith('kv_consumer', { async_load: true, load_delay_steps: 2 });
  try {
    const deltas = await collect(
      consumer.engine.generate({
        requestId: 'd1',
        promptTokenIds: PROMPT,
        sampling: GREEDY,
        kvTransferParams: params,
      }),
    );
    assert.deepEqual(tokensOf(deltas), expected, 'loaded KV gives the same tokens as computing it');
    const metrics = deltas.at(-1)?.metrics;
    assert.equal(metrics?.numExternalTokens, PROMPT.length);
    assert.equal(consumer.engine.stats().externalPrefixCacheHitsTotal, PROMPT.length);
  } finally {
    await consumer.engine.shutdown();
  }
  const dCalls = recorded(consumer.id);
  assert.deepEqual(dCalls.scheduler.slice(0, 4), [
    'setXferHandshakeMetadata 0',
    'onNewRequest d1',
    'getNumNewMatchedTokens d1 0',
    `updateStateAfterAlloc d1 ${PROMPT.length}`,
  ]);
  const steps = dCalls.worker.slice(1);
  // Step 1 starts the load with nothing to compute (idle: no layer hooks, no waitForSave).
  assert.deepEqual(shape(steps[0] ?? []), [
    'handlePreemptions',
    'bindConnectorMetadata',
    'startLoadKv',
    'getFinished',
    ...FORWARD_STEP_TAIL.slice(1),
  ]);
  assert.ok(steps[0]?.includes('startLoadKv idle'));
  const recvStep = steps.findIndex((s) => s.some((c) => c.includes('recving=d1')));
  assert.equal(recvStep, 1, 'the load completes after load_delay_steps worker steps');
  // Promotion: the full prompt hit recomputes only the last prompt token.
  const firstForward = steps.findIndex((s) => s.includes('startLoadKv'));
  assert.equal(firstForward, 2);
  assert.ok(dCalls.scheduler.includes('updateConnectorOutput recving=d1'));
});

test('a synchronous load in the forward step gives the plain tokens', async () => {
  const expected = await plainTokens();
  const producer = await engineWith('kv_producer');
  await collect(
    producer.engine.generate({
      requestId: 'p',
      promptTokenIds: PROMPT,
      sampling: samplingParams({ maxTokens: 1, temperature: 0 }),
      kvTransferParams: { save_key: `${producer.id}-k` },
    }),
  );
  await producer.engine.waitIdle();
  await producer.engine.shutdown();
  const consumer = await engineWith('kv_consumer', { async_load: false });
  try {
    const deltas = await collect(
      consumer.engine.generate({
        requestId: 'd',
        promptTokenIds: PROMPT,
        sampling: GREEDY,
        kvTransferParams: { load_key: `${producer.id}-k` },
      }),
    );
    assert.deepEqual(tokensOf(deltas), expected);
    assert.equal(deltas.at(-1)?.metrics.numExternalTokens, PROMPT.length - 1);
  } finally {
    await consumer.engine.shutdown();
  }
  const steps = recorded(consumer.id).worker.slice(1);
  assert.ok(steps[0]?.includes('startLoadKv'), 'the first step computes (sync load + last token)');
});

for (const mode of ['async', 'sync'] as const) {
  test(`load failure (${mode}): policy fail ends the request with an error, recompute gives the plain tokens`, async () => {
    const expected = await plainTokens();
    const key = await saveOnProducer(await engineWith('kv_producer'), PROMPT);
    const extra = { async_load: mode === 'async', fail_block_index: 1 };

    const failing = await engineWith('kv_consumer', { ...extra, kv_load_failure_policy: 'fail' });
    try {
      const deltas = await collect(
        failing.engine.generate({
          requestId: 'f',
          promptTokenIds: PROMPT,
          sampling: GREEDY,
          kvTransferParams: { load_key: key },
        }),
      );
      const last = deltas.at(-1);
      assert.equal(last?.finishReason, 'error');
      assert.equal(last?.error?.code, 'KV_LOAD_FAILED');
      assert.deepEqual(tokensOf(deltas), []);
      await failing.engine.waitIdle();
      assert.equal(failing.engine.stats().kvCacheUsage, 0);
    } finally {
      await failing.engine.shutdown();
    }
    assert.ok(
      recorded(failing.id).scheduler.some(
        (c) => c.startsWith('updateConnectorOutput') && c.includes('invalid='),
      ),
    );

    const recovering = await engineWith('kv_consumer', { ...extra, kv_load_failure_policy: 'recompute' });
    try {
      const deltas = await collect(
        recovering.engine.generate({
          requestId: 'r',
          promptTokenIds: PROMPT,
          sampling: GREEDY,
          kvTransferParams: { load_key: key },
        }),
      );
      assert.deepEqual(tokensOf(deltas), expected);
      assert.equal(deltas.at(-1)?.finishReason, 'length');
    } finally {
      await recovering.engine.shutdown();
    }
  });
}

test('abort while loading: the blocks stay held until finished_recving, then are freed', async () => {
  const key = await saveOnProducer(await engineWith('kv_producer'), PROMPT);
  const consumer = await engineWith('kv_consumer', { async_load: true, hold_load: true });
  try {
    const stream = consumer.engine.generate({
      requestId: 'a',
      promptTokenIds: PROMPT,
      sampling: GREEDY,
      kvTransferParams: { load_key: key },
    });
    const collecting = collect(stream);
    // A few idle steps run with the load in flight (counted, not timed: a loaded machine steps slowly).
    const steps = () => recorded(consumer.id).worker.length;
    await waitUntil('two idle steps with the load in flight', () => steps() >= 3);
    assert.equal(consumer.engine.stats().numRequestsWaiting, 1);
    consumer.engine.abort('a');
    const deltas = await collecting;
    assert.equal(deltas.at(-1)?.finishReason, 'abort');
    assert.ok(consumer.engine.stats().kvCacheUsage > 0, 'blocks may still receive the remote write');
    const afterAbort = steps();
    await waitUntil('two more steps after the abort', () => steps() >= afterAbort + 2);
    assert.ok(consumer.engine.stats().kvCacheUsage > 0, 'still held while the load is in flight');
    releaseHeldLoads(consumer.id);
    await consumer.engine.waitIdle();
    assert.equal(consumer.engine.stats().kvCacheUsage, 0);
  } finally {
    await consumer.engine.shutdown();
  }
  const calls = recorded(consumer.id);
  assert.ok(calls.scheduler.includes('requestFinished a'));
  assert.ok(
    calls.scheduler.indexOf('updateConnectorOutput recving=a') > calls.scheduler.indexOf('requestFinished a'),
  );
  assert.ok(
    calls.worker.some((s) => s.some((c) => c.startsWith('getFinished [a]'))),
    'workers are told about the abort',
  );
});

test('tp=2: every rank registers and publishes handshake metadata; hand-offs finish once all ranks report', async () => {
  const producer = await engineWith('kv_producer', {}, { tensor_parallel_size: 2 });
  try {
    const deltas = await collect(
      producer.engine.generate({
        requestId: 'tp',
        promptTokenIds: PROMPT,
        sampling: samplingParams({ maxTokens: 2, temperature: 0, ignoreEos: true }),
        kvTransferParams: { save_key: `${producer.id}-k` },
      }),
    );
    assert.deepEqual(deltas.at(-1)?.kvTransferParams, {
      load_key: `${producer.id}-k`,
      saved_by: producer.id,
    });
    await producer.engine.waitIdle();
    assert.equal(producer.engine.stats().kvCacheUsage, 0);
  } finally {
    await producer.engine.shutdown();
  }
  const calls = recorded(producer.id).scheduler;
  assert.equal(calls[0], 'setXferHandshakeMetadata 0,1');
  assert.equal(calls.filter((c) => c === 'updateConnectorOutput sending=tp').length, 1);
});
