/**
 * kv_aware's cost (src/proxy/kv-cost.ts) with a real block index, prefill ledger and prompt
 * hasher: the cached prefix is weighed against the work already routed to each backend, so
 * conversations that share a system prompt do not all land on the backend that saw it
 * first, while a follow-up still goes where its conversation is cached unless that backend's
 * queue outweighs the cache.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { KVEventBatch } from '../../src/kv-events/wire.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { Backend } from '../../src/proxy/backend.ts';
import { KvAwarePolicy } from '../../src/proxy/kv-aware-policy.ts';
import { cheapest, KV_COST_DEFAULTS, type KvCostWeights, kvCost } from '../../src/proxy/kv-cost.ts';
import { KvEventsFeed } from '../../src/proxy/kv-events-feed.ts';
import { KvBlockIndex } from '../../src/proxy/kv-index.ts';
import { PromptBlockHasher } from '../../src/proxy/prompt-blocks.ts';
import { ProxyMetrics } from '../../src/proxy/proxy-metrics.ts';
import { resolveProxyOptions, startProxy } from '../../src/proxy/proxy-server.ts';
import { loadTokenizer } from '../../src/tokenizer/load.ts';

setLogLevel('silent');

const BS = 16;
const SYSTEM = 'System: you are the assistant of the kv_aware cost tests. ';

function setup(weights: KvCostWeights = KV_COST_DEFAULTS) {
  const a = new Backend('http://127.0.0.1:1', 'decode', 'cli', true);
  const b = new Backend('http://127.0.0.1:2', 'decode', 'cli', true);
  const feed = new KvEventsFeed(new KvBlockIndex(), {
    endpoints: new Map([
      [a.url, 'tcp://127.0.0.1:11'],
      [b.url, 'tcp://127.0.0.1:12'],
    ]),
    blockSize: BS,
    hashAlgo: 'sha256_cbor',
  });
  const hasher = new PromptBlockHasher(loadTokenizer('tiny'));
  const metrics = new ProxyMetrics();
  const policy = new KvAwarePolicy({ feed, hasher, metrics, weights });
  const route = (prompt: string): Backend =>
    policy.select('decode', [a, b], { prefixHashes: [], body: { prompt } });
  /** What an engine publishes once it has scheduled the prompt's prefill. */
  const prefilled = (backend: Backend, prompt: string): void => {
    const batch: KVEventBatch = {
      ts: 0,
      dataParallelRank: 0,
      events: [
        {
          type: 'BlockStored',
          blockHashes: hasher.hashes({ prompt }, BS, 'sha256_cbor'),
          parentBlockHash: null,
          tokenIds: [],
          blockSize: BS,
          loraId: null,
          medium: 'GPU',
          loraName: null,
        },
      ],
    };
    feed.apply(backend.url, batch);
  };
  const tokens = (prompt: string): number => hasher.tokens({ prompt })!.length;
  return { a, b, feed, policy, metrics, route, prefilled, tokens };
}

test('the cost: queued + uncached tokens + running requests; ties go to the fewest in flight, then in turn', () => {
  const w = { overlapCredit: 1, runningCost: 4 };
  assert.equal(kvCost({ promptTokens: 100, cachedTokens: 32, queuedTokens: 50, decoding: 2 }, w), 126);
  assert.equal(
    kvCost({ promptTokens: 100, cachedTokens: 32, queuedTokens: 0, decoding: 0 }, { ...w, overlapCredit: 2 }),
    36,
  );
  assert.equal(cheapest([5, 3, 3], [0, 2, 1], 0), 2, 'lowest cost, then fewest in flight');
  assert.equal(cheapest([3, 3], [0, 0], 0), 0);
  assert.equal(cheapest([3, 3], [0, 0], 1), 1, 'full ties are taken in turn');
});

test('conversations sharing a system prompt spread over idle backends instead of piling onto one', async () => {
  const { a, b, route, metrics } = setup();
  const first = route(`${SYSTEM}conversation one asks about the weather in Lisbon today.`);
  first.inFlight += 1; // the proxy counts it in flight until it completes
  const second = route(`${SYSTEM}conversation two asks something else entirely, about trains.`);
  assert.notEqual(second, first, 'the second conversation goes to the idle backend');
  second.inFlight += 1;
  // Both hold the shared prefix now (pending); a third new conversation goes to either, not
  // necessarily the first one's.
  const third = route(`${SYSTEM}conversation three: a question about the history of tea.`);
  assert.ok(third === a || third === b);
  const text = (await metrics.render()).body;
  assert.match(
    text,
    /kvconnect:proxy_kv_aware_load_overrides_total 1/,
    'the second went away from a longer prefix',
  );
});

test('a follow-up goes where its conversation is cached, until that queue outweighs the cache', () => {
  const { a, b, feed, route, prefilled, tokens } = setup();
  const turn1 = `${SYSTEM}first turn of a long conversation with plenty of context to reuse later on. `;
  const turn2 = `${turn1}Second turn: and a follow-up question.`;
  const onA = route(turn1);
  assert.equal(onA, a, 'idle backends: the first in turn');
  a.inFlight += 1;
  prefilled(a, turn1);
  assert.equal(
    feed.ledger.queuedTokens(a.url, a.inFlight),
    0,
    'BlockStored of its last block settles the ticket',
  );
  a.inFlight -= 1;

  const cached = Math.floor(tokens(turn1) / BS) * BS;
  // Another request is queued on A with fewer uncached tokens than the cache saves: stay on A.
  feed.ledger.add(a.url, cached - 40, null);
  a.inFlight += 1;
  assert.equal(route(turn2), a);
  a.inFlight += 1;
  // Once A's queue is longer than what the cache saves, B computes the prompt sooner.
  feed.ledger.add(a.url, 200, null);
  a.inFlight += 1;
  assert.equal(route(turn2), b);
});

test('the overlap credit values cached tokens above their compute; the running cost charges decoding requests', () => {
  const turn1 = `${SYSTEM}a conversation whose first turn is cached on A only, long enough. `;
  const turn2 = `${turn1}and its second turn.`;
  for (const [credit, expected] of [
    [1, 'b'],
    [2, 'a'],
  ] as const) {
    const { a, b, feed, route, prefilled, tokens } = setup({ overlapCredit: credit, runningCost: 0 });
    prefilled(a, turn1);
    const cached = Math.floor(tokens(turn1) / BS) * BS;
    feed.ledger.add(a.url, Math.round(1.5 * cached), null);
    a.inFlight += 1;
    assert.equal(route(turn2), expected === 'a' ? a : b, `credit ${credit}`);
  }
  for (const [running, expected] of [
    [0, 'a'],
    [8, 'b'],
  ] as const) {
    const { a, b, route, prefilled } = setup({ overlapCredit: 1, runningCost: running });
    prefilled(a, SYSTEM); // A holds the shared prefix (a couple of blocks) ...
    a.inFlight += 10; // ... and 10 requests past their prefill (no tickets)
    assert.equal(route(`${SYSTEM}a new conversation.`), expected === 'a' ? a : b, `running cost ${running}`);
  }
});

test('the ledger never holds more tickets than requests in flight, and forgets a backend', () => {
  const { a, feed, policy } = setup();
  for (let i = 0; i < 3; i++) {
    const prompt = `${SYSTEM}request ${i} of a burst, each with its own long uncached question text.`;
    policy.select('decode', [a], { prefixHashes: [], body: { prompt } });
    a.inFlight += 1;
  }
  const all = feed.ledger.queuedTokens(a.url, 3);
  assert.ok(all > 0);
  const lastTwo = feed.ledger.queuedTokens(a.url, 2);
  assert.ok(lastTwo < all, 'the oldest ticket went first');
  assert.equal(feed.ledger.queuedTokens(a.url, 0), 0, 'nothing in flight: nothing queued');
  feed.ledger.add(a.url, 100, null);
  feed.forget(a);
  assert.equal(feed.ledger.queuedTokens(a.url, 5), 0);
});

test('bad cost weights are refused at start-up, naming the field, the value and the fix', async () => {
  for (const [key, value] of [
    ['kvAwareOverlapCredit', -1],
    ['kvAwareRunningCost', Number.NaN],
  ] as const) {
    await assert.rejects(
      startProxy(
        resolveProxyOptions({
          decode: ['http://127.0.0.1:9'],
          port: 0,
          policy: 'kv_aware',
          tokenizer: 'tiny',
          [key]: value,
        }),
      ),
      (e: Error & { code?: string; hint?: string }) => {
        assert.equal(e.code, 'PROXY_OPTIONS_INVALID');
        assert.match(
          e.message,
          new RegExp(`${key} \\(--kv-aware-.*\\) must be a finite number >= 0; received`),
        );
        assert.match(e.hint ?? '', /the default/);
        return true;
      },
    );
  }
});
