/**
 * The p2p hub between two real sockets and transfer agents in one process: a parked chunk
 * crosses byte for byte; the handshake refuses a peer with another hash seed (the fetch
 * fails, nothing is held); a consumer that disconnects mid-fetch releases the producer's
 * chunks at once.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { P2PHub, type P2PHubOptions } from '../../../src/connectors/offloading/p2p-hub.ts';
import { captureLogs, setLogLevel } from '../../../src/logging/logger.ts';
import { freePort } from '../../helpers/free-port.ts';
import { waitUntil } from '../../helpers/wait-until.ts';

setLogLevel('warn');

const hubs: P2PHub[] = [];
after(async () => {
  for (const h of hubs) await h.release();
});

async function hub(extra: Partial<P2PHubOptions> = {}): Promise<P2PHub> {
  const h = P2PHub.acquire({
    host: '127.0.0.1',
    port: await freePort(),
    backends: ['TCP'],
    numThreads: 1,
    unboundStoreTimeoutMs: 60_000,
    timeoutMs: 5000,
    blockLen: 4096,
    numBlocks: 8,
    fingerprint: 'run-a',
    hashSeed: 'seed-a',
    field: 'kv_connector_extra_config.secondary_tiers[0]',
    ...extra,
  });
  hubs.push(h);
  await h.ready();
  return h;
}

const chunk = (n: number) => Uint8Array.from({ length: 3000 }, (_, i) => (i * 31 + n) % 251);
const from = (h: P2PHub, id: string) => ({ kvRequestId: id, host: h.options.host, port: h.options.port });

test('a parked chunk crosses byte for byte; both sides hold nothing afterwards', async () => {
  const [producer, consumer] = [await hub(), await hub()];
  producer.park('t1', 'k0', 3000, (into) => into.set(chunk(0)));
  producer.park('t1', 'k1', 3000, (into) => into.set(chunk(1)));
  producer.closeParking('t1');
  assert.equal(producer.heldBlocks, 2);
  const values = await consumer.fetch(from(producer, 't1'), ['k1', 'k0'], [3000, 3000]);
  assert.deepEqual(
    values.map((v) => v && Buffer.from(v)),
    [Buffer.from(chunk(1)), Buffer.from(chunk(0))],
  );
  await waitUntil('the producer to release', () => producer.heldBlocks === 0);
  assert.equal(consumer.heldBlocks, 0);
});

test('the handshake refuses a peer with another hash seed: the fetch fails, nothing is held', async () => {
  const producer = await hub();
  const stranger = await hub({ hashSeed: 'seed-b' });
  producer.park('t2', 'k0', 3000, (into) => into.set(chunk(2)));
  const { result, records } = await captureLogs(() => stranger.fetch(from(producer, 't2'), ['k0'], [3000]));
  assert.deepEqual(result, [null]);
  assert.ok(
    records.some((r) => /hash seed mismatch/.test(r.message)),
    records.map((r) => r.message).join('\n'),
  );
  assert.equal(stranger.heldBlocks, 0);
  assert.ok(stranger.hasFailed('t2'), 'the transaction is remembered as failed: its lookups miss');
  assert.deepEqual(stranger.lookup(from(producer, 't2'), ['k0']), [false]);
});

test("a consumer that disconnects mid-fetch releases the producer's chunks at once", async () => {
  const producer = await hub();
  const consumer = await hub();
  producer.park('t3', 'k0', 3000, (into) => into.set(chunk(3)));
  // k1 is never parked and the request never closes: the fetch waits on the producer.
  const pending = consumer.fetch(from(producer, 't3'), ['k0', 'k1'], [3000, 3000]);
  await waitUntil('the consumer to hold staging for its fetch', () => consumer.heldBlocks === 2);
  await consumer.release();
  hubs.splice(hubs.indexOf(consumer), 1);
  assert.deepEqual(await pending, [null, null], 'the closed connection fails the fetch');
  await waitUntil('the producer to release t3', () => producer.heldBlocks === 0);
});
