/**
 * The p2p tier across real processes, driven by kv_transfer_params as an orchestrator drives
 * vLLM's: P/D (remote_decoder on the prefiller, remote_prefiller on the decoder) and a peer
 * pull (remote_kv_source) answer with the plain engine's tokens, loading the prefix from the
 * peer; an unbound store is released after unbound_store_timeout_s and a late fetch is
 * refused at once; a producer killed mid-fetch fails the fetch at once and the decoder
 * recomputes. Afterwards no process holds staging or KV blocks.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { LLMOptions } from '../../../src/engine/llm.ts';
import { EngineChild } from '../../faults/helpers/engine-child.ts';
import { freePort } from '../../helpers/free-port.ts';
import { waitUntil } from '../../helpers/wait-until.ts';
import { PROMPTS, plainTokens, tieredEngineOptions } from './helpers.ts';

function p2pEngine(port: number, extra: Record<string, unknown> = {}): LLMOptions {
  return tieredEngineOptions(
    { type: 'p2p', host: '127.0.0.1', port, timeout_ms: 10_000, ...extra },
    'recompute',
  ) as LLMOptions;
}

const source = (id: string, port: number) => ({
  kv_request_id: id,
  remote_host: '127.0.0.1',
  remote_port: port,
});

let producer: EngineChild;
let expiring: EngineChild;
let decoder: EngineChild;
let ports: { producer: number; expiring: number; decoder: number };
const children: EngineChild[] = [];

before(async () => {
  ports = { producer: await freePort(), expiring: await freePort(), decoder: await freePort() };
  [producer, expiring, decoder] = await Promise.all([
    new EngineChild(p2pEngine(ports.producer)).ready(),
    new EngineChild(p2pEngine(ports.expiring, { unbound_store_timeout_s: 0.5 })).ready(),
    new EngineChild(p2pEngine(ports.decoder)).ready(),
  ]);
  children.push(producer, expiring, decoder);
});

after(async () => {
  await Promise.all(children.map((c) => c.kill()));
});

test('P/D through the p2p tier: the decoder pulls the prompt and answers as one engine', async () => {
  const prompt = PROMPTS[0]!;
  const plain = await plainTokens('tiny', prompt);
  const pre = await producer.generate(prompt, 1, { remote_decoder: { kv_request_id: 'pd-1' } });
  assert.deepEqual(pre.tokenIds, plain.slice(0, 1));
  assert.ok((await producer.p2pHeld()) >= 3, 'the producer keeps the prompt chunks for the decoder');
  const out = await decoder.generate(prompt, 6, { remote_prefiller: source('pd-1', ports.producer) });
  assert.deepEqual(out.tokenIds, plain, "the decoder answers with the plain engine's tokens");
  assert.ok(
    out.externalTokens >= 48,
    `the decoder loaded the prompt from the prefiller (${out.externalTokens})`,
  );
  await waitUntil('the producer to release the fetched blocks', async () =>
    (await producer.p2pHeld()) === 0 ? true : null,
  );
  assert.equal(await decoder.p2pHeld(), 0);
});

test('peer pull: remote_kv_source loads the prefix a peer holds in its CPU tier', async () => {
  const prompt = PROMPTS[1]!;
  const plain = await plainTokens('tiny', prompt);
  const first = await producer.generate(prompt, 6);
  assert.deepEqual(first.tokenIds, plain);
  const out = await decoder.generate(prompt, 6, { remote_kv_source: source('pull-1', ports.producer) });
  assert.deepEqual(out.tokenIds, plain);
  assert.ok(out.externalTokens >= 48, `the consumer pulled the prefix (${out.externalTokens})`);
  // A source that holds nothing of the prompt: every lookup misses and the consumer computes.
  const fresh = PROMPTS[2]!;
  const none = await decoder.generate(fresh, 6, { remote_kv_source: source('pull-2', ports.expiring) });
  assert.deepEqual(none.tokenIds, await plainTokens('tiny', fresh));
  assert.equal(none.externalTokens, 0);
  assert.equal(await producer.p2pHeld(), 0);
  assert.equal(await decoder.p2pHeld(), 0);
});

test('an unbound store is released after unbound_store_timeout_s; the late fetch is refused at once', async () => {
  const prompt = PROMPTS[3]!;
  const plain = await plainTokens('tiny', prompt);
  await expiring.generate(prompt, 1, { remote_decoder: { kv_request_id: 'late-1' } });
  await waitUntil('the unbound store to expire', async () =>
    (await expiring.p2pHeld()) === 0 ? true : null,
  );
  assert.ok(
    (await expiring.logs()).some((l) => /unbound store kv_request_id=late-1 timed out/.test(l.message)),
    'the producer says it released the blocks',
  );
  const started = performance.now();
  const out = await decoder.generate(prompt, 6, { remote_prefiller: source('late-1', ports.expiring) });
  assert.deepEqual(out.tokenIds, plain, 'the decoder recomputes');
  assert.ok(performance.now() - started < 5000, 'refused in one round trip, not after the 10 s fetch bound');
  assert.ok(
    (await expiring.logs()).some((l) =>
      /fetch for kv_request_id=late-1 after its blocks were released/.test(l.message),
    ),
  );
  assert.equal(await decoder.p2pHeld(), 0);
});

test('a producer killed mid-fetch: the fetch fails at once, the decoder recomputes, nothing is held', async () => {
  const port = await freePort();
  const doomed = await new EngineChild(p2pEngine(port)).ready();
  children.push(doomed);
  const prompt = PROMPTS[0]!.map((t) => (t + 7) % 256);
  const plain = await plainTokens('tiny', prompt);
  // Decoder first: the fetch waits on the producer for blocks its prefill has not computed.
  const started = performance.now();
  const pending = decoder.generate(prompt, 6, { remote_prefiller: source('kill-1', port) });
  await waitUntil('the decoder to hold staging for its fetch', async () =>
    (await decoder.p2pHeld()) > 0 ? true : null,
  );
  await doomed.kill();
  const out = await pending;
  assert.deepEqual(out.tokenIds, plain, 'the decoder recomputes the prompt');
  assert.ok(performance.now() - started < 8000, 'the dead peer fails the fetch before the 10 s bound');
  assert.equal(await decoder.p2pHeld(), 0, 'the decoder released its staging blocks');
  await waitUntil('the decoder to free its KV blocks', async () =>
    (await decoder.usage()) === 0 ? true : null,
  );
  assert.equal(await producer.usage(), 0);
});
