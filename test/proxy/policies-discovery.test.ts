import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { encode as msgpackEncode } from '@msgpack/msgpack';
import * as zmq from 'zeromq';
import { setLogLevel } from '../../src/logging/logger.ts';
import {
  Backend,
  chainedPrefixHashes,
  createPolicy,
  resolveProxyOptions,
  startProxy,
} from '../../src/proxy/index.ts';
import { parseDiscoveryPing } from '../../src/wire/index.ts';
import {
  decodeResponder,
  prefillResponder,
  sleep,
  UpstreamDouble,
  waitFor,
} from './helpers/upstream-double.ts';

setLogLevel('silent');

const backends = (n: number) =>
  Array.from({ length: n }, (_, i) => new Backend(`http://10.0.0.${i + 1}:8000`, 'prefill', 'cli', true));

describe('routing policies', () => {
  test('round_robin cycles through the candidates', () => {
    const policy = createPolicy('round_robin', 10);
    const bs = backends(3);
    const picks = Array.from({ length: 6 }, () => policy.select('prefill', bs, { prefixHashes: [] }).url);
    assert.deepEqual(
      picks,
      [...bs, ...bs].map((b) => b.url),
    );
  });

  test('least_loaded picks the backend with the fewest requests in flight', () => {
    const policy = createPolicy('least_loaded', 10);
    const bs = backends(3);
    bs[0]!.inFlight = 4;
    bs[1]!.inFlight = 1;
    bs[2]!.inFlight = 2;
    assert.equal(policy.select('prefill', bs, { prefixHashes: [] }), bs[1]);
    bs[1]!.inFlight = 9;
    assert.equal(policy.select('prefill', bs, { prefixHashes: [] }), bs[2]);
  });

  test('prefix hashes are chained: a shared prefix shares leading hashes only', () => {
    const a = chainedPrefixHashes('x'.repeat(64) + 'y'.repeat(64) + 'tail', 64);
    const b = chainedPrefixHashes('x'.repeat(64) + 'z'.repeat(64), 64);
    const c = chainedPrefixHashes('y'.repeat(64), 64);
    assert.equal(a.length, 2);
    assert.equal(a[0], b[0]);
    assert.notEqual(a[1], b[1]);
    assert.notEqual(a[1], c[0], 'the same chunk after a different prefix hashes differently');
  });

  test('prefix_aware sends shared-prefix requests to the backend that served the prefix (through the proxy)', async () => {
    const ps = [
      await UpstreamDouble.start(prefillResponder()),
      await UpstreamDouble.start(prefillResponder()),
    ];
    const ds = [await UpstreamDouble.start(decodeResponder()), await UpstreamDouble.start(decodeResponder())];
    const proxy = await startProxy(
      resolveProxyOptions({
        prefill: ps.map((p) => p.url),
        decode: ds.map((d) => d.url),
        port: 0,
        policy: 'prefix_aware',
        prefixChunkBytes: 16,
      }),
    );
    try {
      const docA = 'Document A: the quick brown fox jumps over the lazy dog. ';
      const docB = 'Document B: lorem ipsum dolor sit amet, consectetur elit. ';
      const send = async (prompt: string) => {
        const r = await fetch(`${proxy.url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'tiny', prompt, max_tokens: 2 }),
        });
        await r.json();
      };
      const owner = (prompt: string, list: UpstreamDouble[]) =>
        list.findIndex((x) => x.completions().some((r) => r.body['prompt'] === prompt));
      await send(`${docA}question 1`);
      await send(`${docB}question 1`);
      const ownerA = owner(`${docA}question 1`, ps);
      const ownerB = owner(`${docB}question 1`, ps);
      assert.notEqual(ownerA, ownerB, 'distinct prefixes spread by load');
      for (let i = 2; i < 6; i++) {
        await send(`${docA}question ${i}`);
        await send(`${docB}question ${i}`);
        assert.equal(owner(`${docA}question ${i}`, ps), ownerA);
        assert.equal(owner(`${docB}question ${i}`, ps), ownerB);
        assert.equal(owner(`${docA}question ${i}`, ds), owner(`${docA}question 1`, ds));
      }
    } finally {
      await proxy.close();
      for (const x of [...ps, ...ds]) await x.close();
    }
  });
});

describe('MoRIIO discovery', () => {
  const ping = (type: 'P' | 'D', httpUrl: string, zmq: string) => ({
    type,
    http_address: httpUrl.replace('http://', ''),
    zmq_address: zmq,
    dp_size: 1,
    tp_size: 1,
    transfer_mode: 'READ',
  });

  test('parseDiscoveryPing validates every field', () => {
    assert.throws(() => parseDiscoveryPing({ type: 'X' }), /type must be "P" or "D"/);
    assert.throws(() => parseDiscoveryPing({ type: 'P', http_address: 'nope' }), /http_address/);
    assert.throws(
      () => parseDiscoveryPing({ type: 'P', http_address: '1.2.3.4:80', zmq_address: 'host:1.2.3.4' }),
      /zmq_address must be/,
    );
    assert.throws(
      () =>
        parseDiscoveryPing({ ...ping('P', '1.2.3.4:80', 'host:1.2.3.4,handshake:1,notify:2'), tp_size: 0 }),
      /tp_size must be a positive integer/,
    );
    assert.equal(
      parseDiscoveryPing({
        ...ping('D', '1.2.3.4:80', 'host:1.2.3.4,handshake:1,notify:2'),
        transfer_mode: 'write',
      }).transfer_mode,
      'WRITE',
    );
  });

  test('instances register by ping, serve MoRIIO requests with their zmq addresses, and expire', async () => {
    const p = await UpstreamDouble.start(
      prefillResponder(0, { remote_engine_id: 'pe', remote_block_ids: [1], transfer_id: 'tx-1' }),
    );
    const d = await UpstreamDouble.start(decodeResponder(1));
    const proxy = await startProxy(
      resolveProxyOptions({
        port: 0,
        discoveryPort: 0,
        discoveryHost: '127.0.0.1',
        discoveryTtlMs: 400,
        kvConnector: 'MoRIIOConnector',
      }),
    );
    // vLLM's MoRIIO engines ping from a ZMQ DEALER with one msgpack map per message.
    const dealer = new zmq.Dealer({ linger: 0 });
    dealer.connect(`tcp://127.0.0.1:${proxy.discoveryPort}`);
    const register = (b: unknown) => dealer.send(msgpackEncode(b));
    const registered = (url: string) => proxy.pool.all().some((b) => b.url === url && b.healthy);
    try {
      const before = await fetch(`${proxy.url}/v1/completions`, { method: 'POST', body: '{"prompt":"a"}' });
      assert.equal(before.status, 503);
      await before.json();
      // Malformed pings are skipped (ZMQ pings get no answer); the listener keeps going.
      await register({ type: 'P' });
      await dealer.send(Buffer.from('{not msgpack'));
      await register({ ...ping('P', p.url, 'host:nowhere'), pad: 'x' });
      const pZmq = 'host:127.0.0.9,handshake:7001,notify:7002';
      const dZmq = 'host:127.0.0.8,handshake:8001,notify:8002';
      await register(ping('P', p.url, pZmq));
      await register(ping('D', d.url, dZmq));
      await waitFor(() => registered(p.url) && registered(d.url), 5000, 'both instances registered');
      assert.equal(proxy.pool.all().length, 2, 'only the valid pings registered');
      const res = await fetch(`${proxy.url}/v1/completions`, {
        method: 'POST',
        body: JSON.stringify({ model: 'tiny', prompt: 'hi', max_tokens: 3 }),
      });
      assert.equal(res.status, 200);
      await res.json();
      const id = String(p.completions()[0]!.headers['x-request-id']);
      assert.ok(id.startsWith(`___prefill_addr_${pZmq}___decode_addr_${dZmq}_`), id);
      assert.equal(
        (d.completions()[0]!.body['kv_transfer_params'] as Record<string, unknown>)['remote_engine_id'],
        'pe',
      );
      const listed = (await (await fetch(`${proxy.url}/instances`)).json()) as {
        instances: unknown[];
      };
      assert.equal(listed.instances.length, 2);
      // Keep P alive with pings; let D's registration lapse.
      const deadline = Date.now() + 10_000;
      while (Date.now() < deadline) {
        await register(ping('P', p.url, pZmq));
        const h = (await (await fetch(`${proxy.url}/health`)).json()) as {
          decode_instances: number;
          prefill_instances: number;
        };
        if (h.decode_instances === 0) {
          assert.equal(h.prefill_instances, 1);
          break;
        }
        await sleep(100);
      }
      await waitFor(() => proxy.pool.healthy('decode').length === 0, 5000, 'decode expiry');
      const after = await fetch(`${proxy.url}/v1/completions`, { method: 'POST', body: '{"prompt":"a"}' });
      assert.equal(after.status, 503);
      assert.match(((await after.json()) as { error: { message: string } }).error.message, /decode/);
    } finally {
      dealer.close();
      await proxy.close();
      await p.close();
      await d.close();
    }
  });
});
