/**
 * kv_transfer_params ahead (GenerateRequest.onKvTransferParamsAhead,
 * docs/connector-api.md#params-ahead): a NIXL pull producer's request that the step finishes
 * gets, before that step's token, exactly the params its final output carries, once, also
 * when its prompt is prefilled in chunks; a request the step does not finish, one without
 * do_remote_decode and a push producer's get nothing.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { KVTransferParams } from '../../src/connector/types.ts';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { samplingParams } from '../../src/engine/llm.ts';
import { NIXL_PREFILL_REQUEST } from '../../src/wire/index.ts';

const PROMPT = Array.from({ length: 40 }, (_, i) => (i * 37 + 11) % 256);
let next = 0;

function producer(connector: 'NixlConnector' | 'NixlPushConnector'): Promise<AsyncEngine> {
  return AsyncEngine.create({
    model: 'tiny',
    num_gpu_blocks: 32,
    max_model_len: 128,
    // Chunks of 16 tokens: a 40-token prompt is prefilled in three steps.
    max_num_batched_tokens: 16,
    kv_transfer_config: {
      kv_connector: connector,
      kv_role: 'kv_both',
      engine_id: `ahead-${process.pid}-${next}`,
      kv_connector_extra_config: { backends: ['TCP'], side_channel_port: 0 },
    },
  });
}

interface Run {
  ahead: KVTransferParams[];
  /** Deltas already received when each announcement came. */
  deltasBefore: number[];
  final: KVTransferParams | null;
}

async function run(
  engine: AsyncEngine,
  maxTokens: number,
  params: KVTransferParams | null = { ...NIXL_PREFILL_REQUEST },
): Promise<Run> {
  const out: Run = { ahead: [], deltasBefore: [], final: null };
  let deltas = 0;
  for await (const d of engine.generate({
    requestId: `ahead-req-${next++}`,
    promptTokenIds: PROMPT,
    sampling: samplingParams({ temperature: 0, maxTokens, ignoreEos: true }),
    kvTransferParams: params,
    onKvTransferParamsAhead: (p) => {
      out.ahead.push(p);
      out.deltasBefore.push(deltas);
    },
  })) {
    deltas++;
    if (d.finished) out.final = d.kvTransferParams ?? null;
  }
  return out;
}

let pull: AsyncEngine;
before(async () => {
  pull = await producer('NixlConnector');
});
after(async () => {
  await pull?.shutdown();
});

test('a prefill request finished by its last chunk gets its final params ahead, once, before its token', async () => {
  const r = await run(pull, 1);
  assert.ok(r.final, 'the request handed its KV off');
  assert.equal(r.ahead.length, 1);
  assert.deepEqual(r.ahead[0], r.final);
  assert.deepEqual(r.deltasBefore, [0]);
  assert.equal(r.final['remote_num_tokens'], PROMPT.length);
});

test('a request the step does not finish, or without do_remote_decode, gets nothing ahead', async () => {
  const longer = await run(pull, 2);
  assert.ok(longer.final, 'max_tokens 2 still hands off at its end');
  assert.equal(longer.ahead.length, 0);
  const plain = await run(pull, 1, null);
  assert.equal(plain.ahead.length, 0);
  assert.equal(plain.final, null);
});

test('a push producer gets nothing ahead (its decode instance registered already)', async () => {
  const push = await producer('NixlPushConnector');
  try {
    const r = await run(push, 1);
    assert.equal(r.ahead.length, 0);
  } finally {
    await push.shutdown();
  }
});
