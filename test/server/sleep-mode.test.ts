/**
 * vLLM's sleep mode through a real server: POST /sleep, /wake_up and GET /is_sleeping exist
 * only in dev mode and sleep only with --enable-sleep-mode; vllm:engine_sleep_state follows
 * the level; requests that arrive while asleep wait and finish after waking with the tokens
 * of an engine that never slept; pause modes abort / keep treat in-flight requests as vLLM
 * does; the prefix cache is discarded.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { AsyncEngine } from '../../src/engine/async-engine.ts';
import { KVEventSubscriber } from '../../src/kv-events/subscriber.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { parseExposition, sampleValue } from './helpers/prom-text.ts';
import { postForJson, type Served, serve, stop } from './helpers/served.ts';

setLogLevel('error');

const engineOptions = { max_model_len: 256, num_gpu_blocks: 64 };

async function sleepState(s: Served): Promise<Record<string, number>> {
  const exp = parseExposition(await (await fetch(`${s.url}/metrics`)).text());
  const out: Record<string, number> = {};
  for (const state of ['awake', 'weights_offloaded', 'discard_all'])
    out[state] = sampleValue(exp, 'vllm:engine_sleep_state', { sleep_state: state });
  return out;
}

async function isSleeping(s: Served): Promise<boolean> {
  const r = await fetch(`${s.url}/is_sleeping`);
  assert.equal(r.status, 200);
  return ((await r.json()) as { is_sleeping: boolean }).is_sleeping;
}

async function waitRunning(engine: AsyncEngine): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (engine.stats().numRequestsRunning === 0) {
    assert.ok(Date.now() < deadline, 'the request started running');
    await new Promise((r) => setTimeout(r, 1));
  }
}

/** True when `promise` is still pending after `ms`. */
async function stillPending(promise: Promise<unknown>, ms: number): Promise<boolean> {
  const marker = Symbol('pending');
  const first = await Promise.race([promise, new Promise((r) => setTimeout(() => r(marker), ms))]);
  return first === marker;
}

const greedy = {
  prompt: 'And God said, Let there be light',
  max_tokens: 12,
  ignore_eos: true,
  temperature: 0,
};

describe('sleep mode endpoints', () => {
  let plain: Served;
  let sleepy: Served;
  let expected: unknown;
  before(async () => {
    plain = await serve(engineOptions, { devMode: true });
    sleepy = await serve(
      {
        ...engineOptions,
        kv_events_config: {
          enable_kv_cache_events: true,
          endpoint: 'tcp://127.0.0.1:*',
          replay_endpoint: 'tcp://127.0.0.1:*',
          topic: 'kv',
        },
      },
      { devMode: true, enableSleepMode: true },
    );
    const reference = await postForJson(`${plain.url}/v1/completions`, greedy);
    assert.equal(reference.status, 200);
    expected = (reference.json['choices'] as Array<{ text: string }>)[0]?.text;
  });
  after(() => stop(plain, sleepy));

  it('are development endpoints, and sleeping needs --enable-sleep-mode', async () => {
    const prod = await serve(engineOptions, { devMode: false, enableSleepMode: true });
    try {
      assert.equal((await postForJson(`${prod.url}/sleep`)).status, 404);
      assert.equal((await fetch(`${prod.url}/is_sleeping`)).status, 404);
    } finally {
      await stop(prod);
    }
    const refused = await postForJson(`${plain.url}/sleep?level=1`);
    assert.equal(refused.status, 400);
    assert.equal((refused.json['error'] as { param: string }).param, 'enable_sleep_mode');
    assert.equal(await isSleeping(plain), false);
    for (const [query, param] of [
      ['level=3', 'level'],
      ['level=x', 'level'],
      ['mode=later', 'mode'],
    ]) {
      const r = await postForJson(`${sleepy.url}/sleep?${query}`);
      assert.equal(r.status, 400, query);
      assert.equal((r.json['error'] as { param: string }).param, param);
    }
    const badTag = await postForJson(`${sleepy.url}/wake_up?tags=gpu`);
    assert.equal(badTag.status, 400);
    assert.equal(await isSleeping(sleepy), false);
  });

  it('level 1: requests wait while asleep, partial wake keeps sleeping, full wake answers them', async () => {
    assert.deepEqual(await sleepState(sleepy), { awake: 1, weights_offloaded: 0, discard_all: 0 });
    const slept = await postForJson(`${sleepy.url}/sleep?level=1`);
    assert.deepEqual(slept, { status: 200, json: {} });
    assert.equal(await isSleeping(sleepy), true);
    assert.deepEqual(await sleepState(sleepy), { awake: 0, weights_offloaded: 1, discard_all: 0 });
    const waiting = postForJson(`${sleepy.url}/v1/completions`, greedy);
    assert.ok(await stillPending(waiting, 300), 'a request does not run while the engine sleeps');
    assert.equal((await postForJson(`${sleepy.url}/wake_up?tags=weights`)).status, 200);
    assert.equal(await isSleeping(sleepy), true, 'the KV cache is still asleep');
    assert.ok(await stillPending(waiting, 100));
    assert.equal((await postForJson(`${sleepy.url}/wake_up?tags=kv_cache`)).status, 200);
    assert.equal(await isSleeping(sleepy), false);
    const answered = await waiting;
    assert.equal(answered.status, 200);
    assert.equal((answered.json['choices'] as Array<{ text: string }>)[0]?.text, expected);
    assert.deepEqual(await sleepState(sleepy), { awake: 1, weights_offloaded: 0, discard_all: 0 });
  });

  it('level 2 in abort mode finishes in-flight requests as aborted; the prefix cache is discarded', async () => {
    const prompt = 'A prompt long enough to fill a couple of sixteen-token blocks of the prefix cache.';
    await postForJson(`${sleepy.url}/v1/completions`, { prompt, max_tokens: 1 });
    const info = sleepy.engine.kvEventsInfo();
    assert.ok(info);
    const events: string[] = [];
    const sub = KVEventSubscriber.start({
      endpoint: info.endpoint,
      replayEndpoint: info.replay_endpoint,
      topic: 'kv',
      onBatch: (batch) => events.push(...batch.events.map((e) => e.type)),
    });
    const long = postForJson(`${sleepy.url}/v1/completions`, { ...greedy, max_tokens: 200 });
    await waitRunning(sleepy.engine);
    try {
      await sub.replayFrom(0n);
      // Only what is published from here on: the replayed history has older clears.
      events.length = 0;
      assert.equal((await postForJson(`${sleepy.url}/sleep?level=2&mode=abort`)).status, 200);
      const deadline = Date.now() + 10_000;
      while (!events.includes('AllBlocksCleared')) {
        assert.ok(Date.now() < deadline, 'AllBlocksCleared published while asleep');
        await new Promise((r) => setTimeout(r, 10));
      }
    } finally {
      await sub.close();
    }
    const aborted = await long;
    assert.equal(aborted.status, 200);
    assert.equal((aborted.json['choices'] as Array<{ finish_reason: string }>)[0]?.finish_reason, 'abort');
    assert.deepEqual(await sleepState(sleepy), { awake: 0, weights_offloaded: 0, discard_all: 1 });
    assert.equal((await postForJson(`${sleepy.url}/sleep?level=1`)).status, 200, 'sleeping again is a no-op');
    assert.deepEqual(await sleepState(sleepy), { awake: 0, weights_offloaded: 0, discard_all: 1 });
    assert.equal((await postForJson(`${sleepy.url}/wake_up`)).status, 200);
    const hitsBefore = sleepy.engine.stats().prefixCacheHitsTotal;
    await postForJson(`${sleepy.url}/v1/completions`, { prompt, max_tokens: 1 });
    assert.equal(sleepy.engine.stats().prefixCacheHitsTotal, hitsBefore, 'the cached prefix was discarded');
  });

  it('keep mode freezes an in-flight request; after waking it finishes with unchanged tokens', async () => {
    const body = { ...greedy, max_tokens: 60 };
    const reference = await postForJson(`${plain.url}/v1/completions`, body);
    const running = postForJson(`${sleepy.url}/v1/completions`, body);
    await waitRunning(sleepy.engine);
    assert.equal((await postForJson(`${sleepy.url}/sleep?level=1&mode=keep`)).status, 200);
    assert.ok(await stillPending(running, 200), 'the kept request is frozen');
    assert.equal((await postForJson(`${sleepy.url}/wake_up`)).status, 200);
    const out = await running;
    assert.equal(out.status, 200);
    assert.deepEqual(
      (out.json['choices'] as Array<{ text: string }>)[0]?.text,
      (reference.json['choices'] as Array<{ text: string }>)[0]?.text,
    );
  });

  it('wait mode lets an in-flight request finish before sleeping; a later one waits for the wake-up', async () => {
    const body = { ...greedy, max_tokens: 40 };
    const reference = await postForJson(`${plain.url}/v1/completions`, body);
    const running = postForJson(`${sleepy.url}/v1/completions`, body);
    await waitRunning(sleepy.engine);
    const sleeping = postForJson(`${sleepy.url}/sleep?level=1&mode=wait`);
    const out = await running;
    assert.equal(out.status, 200);
    const choice = (out.json['choices'] as Array<{ text: string; finish_reason: string }>)[0];
    assert.equal(choice?.finish_reason, 'length', 'not aborted');
    assert.equal(choice?.text, (reference.json['choices'] as Array<{ text: string }>)[0]?.text);
    assert.equal((await sleeping).status, 200);
    assert.equal(await isSleeping(sleepy), true);
    const later = postForJson(`${sleepy.url}/v1/completions`, greedy);
    assert.ok(await stillPending(later, 200), 'a request sent while asleep waits');
    assert.equal((await postForJson(`${sleepy.url}/wake_up`)).status, 200);
    assert.equal((await later).status, 200);
  });
});
