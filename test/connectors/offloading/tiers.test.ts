/**
 * One conformance suite for every offload tier (cpu, fs, redis single server, redis
 * cluster, obj against a real S3 server), plus the failure cases each tier must turn into a
 * miss: corrupt, truncated or foreign values, and (redis, obj) a server that is down.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { GetObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { CpuTier } from '../../../src/connectors/offloading/cpu-tier.ts';
import { FsTier } from '../../../src/connectors/offloading/fs-tier.ts';
import type { KVTier } from '../../../src/connectors/offloading/kv-tier.ts';
import { ObjTier } from '../../../src/connectors/offloading/obj-tier.ts';
import { parseObjTier } from '../../../src/connectors/offloading/obj-tier-config.ts';
import { RedisTier } from '../../../src/connectors/offloading/redis-tier.ts';
import { KVError } from '../../../src/errors/kv-error.ts';
import { captureLogs } from '../../../src/logging/logger.ts';
import { freePort } from '../../helpers/free-port.ts';
import {
  type RedisClusterHandle,
  type RedisServer,
  redisCommand,
  requireRedisBinaries,
  startRedis,
  startRedisCluster,
} from '../../helpers/redis.ts';
import { S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, type S3Server, startS3Server } from '../../helpers/s3.ts';
import { waitUntil } from '../../helpers/wait-until.ts';
import { tinyRunLayout } from './helpers.ts';

const RUN = tinyRunLayout();

const SLOT = 64 * 1024;

function bytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = (i * 31 + seed * 7) & 0xff;
  return out;
}

/** The behaviour every tier shares; `make` returns a fresh, empty tier. */
function tierConformance(name: string, make: () => Promise<KVTier>): void {
  describe(`${name} tier conformance`, () => {
    test('round trip: batched put then get returns the same bytes; unknown keys miss', async () => {
      const tier = await make();
      try {
        const entries = [
          { key: `a-${randomBytes(4).toString('hex')}`, value: bytes(1, 1) },
          { key: `b-${randomBytes(4).toString('hex')}`, value: bytes(SLOT, 2) },
          {
            key: `c-${randomBytes(4).toString('hex')}`,
            value: Uint8Array.from({ length: 256 }, (_, i) => i),
          },
        ];
        const stored = await tier.putMany(entries);
        assert.deepEqual([...stored].sort(), entries.map((e) => e.key).sort());
        const got = await tier.getMany([entries[0]!.key, 'missing-key', entries[1]!.key, entries[2]!.key]);
        assert.deepEqual(Buffer.from(got[0]!), Buffer.from(entries[0]!.value));
        assert.equal(got[1], null);
        assert.deepEqual(Buffer.from(got[2]!), Buffer.from(entries[1]!.value));
        assert.deepEqual(Buffer.from(got[3]!), Buffer.from(entries[2]!.value));
        assert.deepEqual(await tier.hasMany([entries[1]!.key, 'missing-key']), [true, false]);
        const st = tier.stats();
        assert.equal(st.puts, 3);
        assert.equal(st.hits, 3);
        assert.equal(st.getBytes, 1 + SLOT + 256);
      } finally {
        await tier.close();
      }
    });

    test('overwrite replaces the value; delete makes it a miss', async () => {
      const tier = await make();
      try {
        const key = `k-${randomBytes(4).toString('hex')}`;
        await tier.putMany([{ key, value: bytes(100, 1) }]);
        await tier.putMany([{ key, value: bytes(200, 9) }]);
        const [v] = await tier.getMany([key]);
        assert.deepEqual(Buffer.from(v!), Buffer.from(bytes(200, 9)));
        await tier.deleteMany([key, 'never-stored']);
        assert.deepEqual(await tier.getMany([key]), [null]);
        assert.deepEqual(await tier.hasMany([key]), [false]);
      } finally {
        await tier.close();
      }
    });

    test('many keys in one batch (pipelined) all round-trip', async () => {
      const tier = await make();
      try {
        const entries = Array.from({ length: 64 }, (_, i) => ({
          key: `many-${i}-${randomBytes(3).toString('hex')}`,
          value: bytes(512 + i, i),
        }));
        assert.equal((await tier.putMany(entries)).length, 64);
        const got = await tier.getMany(entries.map((e) => e.key));
        got.forEach((v, i) => {
          assert.deepEqual(Buffer.from(v!), Buffer.from(entries[i]!.value));
        });
      } finally {
        await tier.close();
      }
    });
  });
}

// ---- cpu ----
tierConformance('cpu', async () => new CpuTier({ capacityBytes: 128 * SLOT, slotBytes: SLOT }));

test('cpu tier: capacity bound evicts the least recently used entry', async () => {
  const tier = new CpuTier({ capacityBytes: 2 * 1024, slotBytes: 1024 });
  await tier.putMany([
    { key: 'x', value: bytes(10, 1) },
    { key: 'y', value: bytes(10, 2) },
  ]);
  await tier.getMany(['x']);
  await tier.putMany([{ key: 'z', value: bytes(10, 3) }]);
  assert.deepEqual(await tier.hasMany(['x', 'y', 'z']), [true, false, true]);
  assert.deepEqual(tier.takeEvicted(), ['y']);
  await tier.close();
});

// ---- fs ----
const fsDirs: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(path.join(os.tmpdir(), 'kvconnect-fs-tier-'));
  fsDirs.push(d);
  return d;
}
after(() => {
  for (const d of fsDirs) rmSync(d, { recursive: true, force: true });
});

tierConformance(
  'fs',
  async () => new FsTier({ rootDir: tempDir(), run: RUN, capacityBytes: null, timeoutMs: 2000 }),
);

describe('fs tier failures', () => {
  test('a truncated or overwritten file is a miss (never trusted) and is deleted', async () => {
    const tier = new FsTier({ rootDir: tempDir(), run: RUN, capacityBytes: null, timeoutMs: 2000 });
    await tier.putMany([
      { key: 'trunc', value: bytes(4096, 1) },
      { key: 'flip', value: bytes(4096, 2) },
      { key: 'ok', value: bytes(10, 3) },
    ]);
    truncateSync(tier.fileOf('trunc'), 1000);
    const flipped = Buffer.from(bytes(4096 + 16, 0));
    writeFileSync(tier.fileOf('flip'), flipped);
    const got = await tier.getMany(['trunc', 'flip', 'ok']);
    assert.equal(got[0], null);
    assert.equal(got[1], null);
    assert.deepEqual(Buffer.from(got[2]!), Buffer.from(bytes(10, 3)));
    assert.equal(tier.stats().corrupt, 2);
    assert.deepEqual(await tier.hasMany(['trunc', 'flip']), [false, false]);
  });

  test('writes are atomic: no temp files remain, and a stale temp file is never read', async () => {
    const dir = tempDir();
    const tier = new FsTier({ rootDir: dir, run: RUN, capacityBytes: null, timeoutMs: 2000 });
    await tier.putMany([{ key: 'k', value: bytes(1000, 1) }]);
    const all = readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((f) =>
      statSync(path.join(dir, f)).isFile(),
    );
    assert.equal(all.filter((n) => n.endsWith('.tmp')).length, 0);
    assert.equal(all.filter((n) => n.endsWith('.bin')).length, 1);
    assert.deepEqual(
      all.filter((n) => !n.endsWith('.bin')),
      [path.relative(dir, tier.configFile)],
      'besides the chunk, only config.json',
    );
    mkdirSync(path.dirname(tier.fileOf('other')), { recursive: true });
    writeFileSync(`${tier.fileOf('other')}_1abcd.tmp`, bytes(100, 1));
    assert.deepEqual(await tier.getMany(['other']), [null]);
  });

  test('capacity bound evicts least recently used files and reports them', async () => {
    const tier = new FsTier({
      rootDir: tempDir(),
      run: RUN,
      capacityBytes: 3 * (1000 + 16),
      timeoutMs: 2000,
    });
    await tier.putMany([{ key: 'a', value: bytes(1000, 1) }]);
    await tier.putMany([{ key: 'b', value: bytes(1000, 2) }]);
    await tier.putMany([{ key: 'c', value: bytes(1000, 3) }]);
    await tier.getMany(['a']);
    await tier.putMany([{ key: 'd', value: bytes(1000, 4) }]);
    assert.deepEqual(await tier.hasMany(['a', 'b', 'c', 'd']), [true, false, true, true]);
    assert.deepEqual(tier.takeEvicted(), ['b']);
    assert.ok(tier.usedBytes <= 3 * 1016);
  });

  test('a second tier on the same directory sees the files (shared store)', async () => {
    const dir = tempDir();
    const a = new FsTier({ rootDir: dir, run: RUN, capacityBytes: null, timeoutMs: 2000 });
    await a.putMany([{ key: 'shared', value: bytes(300, 5) }]);
    const b = new FsTier({ rootDir: dir, run: RUN, capacityBytes: null, timeoutMs: 2000 });
    const [v] = await b.getMany(['shared']);
    assert.deepEqual(Buffer.from(v!), Buffer.from(bytes(300, 5)));
    assert.equal(b.usedBytes, 316);
  });
});

// ---- redis single server ----
describe('redis (single server)', () => {
  let server: RedisServer;
  before(async () => {
    server = await startRedis();
  });
  after(async () => {
    await server?.stop();
  });
  tierConformance(
    'redis',
    async () =>
      new RedisTier({
        url: server.url,
        clusterNodes: [],
        timeoutMs: 2000,
        keyPrefix: `t${randomBytes(3).toString('hex')}`,
      }),
  );

  test('a corrupt value (wrong checksum or truncated) is a miss, counted, and deleted', async () => {
    const tier = new RedisTier({ url: server.url, clusterNodes: [], timeoutMs: 2000, keyPrefix: 'corrupt' });
    try {
      await tier.putMany([
        { key: 'v', value: bytes(2048, 1) },
        { key: 'w', value: bytes(10, 2) },
      ]);
      await redisCommand(server.port, 'SETRANGE corrupt:v 100 XXXX');
      await redisCommand(server.port, 'SET corrupt:w short');
      assert.deepEqual(await tier.getMany(['v', 'w']), [null, null]);
      assert.equal(tier.stats().corrupt, 2);
      assert.deepEqual(await tier.hasMany(['v', 'w']), [false, false]);
    } finally {
      await tier.close();
    }
  });
});

describe('redis slow', () => {
  test('a server that stalls answers "miss" within the timeout and warns', async () => {
    const server = await startRedis(['--enable-debug-command', 'yes']);
    const tier = new RedisTier({ url: server.url, clusterNodes: [], timeoutMs: 150, keyPrefix: 'slow' });
    try {
      // Stored, and the tier healthy, before the stall (on a loaded machine a put can miss 150 ms).
      await waitUntil(
        'the value to be stored',
        async () => (await tier.putMany([{ key: 'a', value: bytes(100, 1) }])).length === 1,
      );
      const timeoutsBefore = tier.health.timeouts;
      const { records } = await captureLogs(async () => {
        const stall = redisCommand(server.port, 'DEBUG SLEEP 5', 15_000);
        // Until Redis is inside the sleep: a PING gets no answer within a second.
        await waitUntil('Redis to stall', () =>
          redisCommand(server.port, 'PING', 1000).then(
            () => false,
            () => true,
          ),
        );
        const t0 = performance.now();
        assert.deepEqual(await tier.getMany(['a']), [null]);
        const elapsed = performance.now() - t0;
        // At the 150 ms timeout, long before the stall ends (loose for a loaded machine).
        assert.ok(elapsed >= 140 && elapsed < 3000, `answered after ${elapsed} ms`);
        await stall;
      });
      assert.equal(tier.health.timeouts - timeoutsBefore, 1);
      assert.equal(
        records.filter((r) => r.level === 'warn' && r.message.includes('did not answer within 150 ms'))
          .length,
        1,
      );
      const [v] = await tier.getMany(['a']);
      assert.deepEqual(Buffer.from(v!), Buffer.from(bytes(100, 1)), 'answers again once the server is back');
    } finally {
      await tier.close();
      await server.stop();
    }
  });
});

describe('redis down', () => {
  test('every operation answers "miss" within the bound, warns once per outage, counts errors', async () => {
    const port = await freePort();
    const tier = new RedisTier({
      url: `redis://127.0.0.1:${port}`,
      clusterNodes: [],
      timeoutMs: 150,
      keyPrefix: 'down',
    });
    try {
      const { records } = await captureLogs(async () => {
        const t0 = performance.now();
        assert.deepEqual(await tier.getMany(['a', 'b']), [null, null]);
        assert.deepEqual(await tier.hasMany(['a']), [false]);
        assert.deepEqual(await tier.putMany([{ key: 'a', value: bytes(10, 1) }]), []);
        const elapsed = performance.now() - t0;
        assert.ok(elapsed < 5000, `took ${elapsed} ms`);
      });
      const warnings = records.filter((r) => r.level === 'warn' && r.message.includes('unavailable'));
      assert.equal(warnings.length, 1);
      assert.ok(tier.stats().errors >= 1);
      assert.equal(tier.health.outages, 1);

      const server = await startRedis([], port);
      try {
        const stored = await waitUntil('the tier to reconnect once Redis is up', async () => {
          const keys = await tier.putMany([{ key: 'a', value: bytes(10, 1) }]);
          return keys.length > 0 ? keys : null;
        });
        assert.deepEqual(stored, ['a']);
        assert.equal(tier.health.isDown, false);
      } finally {
        await tier.close();
        await server.stop();
      }
    } finally {
      await tier.close();
    }
  });
});

// ---- redis cluster ----
describe('redis cluster (3 masters)', () => {
  let cluster: RedisClusterHandle;
  before(async () => {
    cluster = await startRedisCluster(3);
  });
  after(async () => {
    await cluster?.stop();
  });
  tierConformance(
    'redis-cluster',
    async () =>
      new RedisTier({
        url: null,
        clusterNodes: [cluster.urls[0]!],
        timeoutMs: 3000,
        keyPrefix: `c${randomBytes(3).toString('hex')}`,
      }),
  );

  test('keys spread over every master', async () => {
    const tier = new RedisTier({
      url: null,
      clusterNodes: cluster.urls,
      timeoutMs: 3000,
      keyPrefix: 'spread',
    });
    try {
      await tier.putMany(Array.from({ length: 60 }, (_, i) => ({ key: `k${i}`, value: bytes(32, i) })));
      for (const n of cluster.nodes) {
        const reply = await redisCommand(n.port, 'DBSIZE');
        assert.ok(Number(reply.slice(1)) > 0, `node ${n.port} holds keys (${reply.trim()})`);
      }
    } finally {
      await tier.close();
    }
  });
});

test('without redis-server on PATH the Redis tests fail with an install hint (never skip)', () => {
  const saved = process.env['PATH'];
  process.env['PATH'] = '';
  try {
    assert.throws(
      () => requireRedisBinaries(),
      /redis-server is not installed.*apt-get install redis-server/,
    );
  } finally {
    process.env['PATH'] = saved;
  }
});

// ---- obj (S3) ----
describe('obj (s3rver)', () => {
  let s3: S3Server;
  const tiers: ObjTier[] = [];
  function objTier(prefix: string, timeoutMs = 3000): ObjTier {
    const spec = parseObjTier(
      {
        type: 'obj',
        store_config: {
          bucket: 'tiers',
          endpoint_override: s3.endpoint,
          access_key: S3RVER_ACCESS_KEY,
          secret_key: S3RVER_SECRET_KEY,
        },
        prefix,
        timeout_ms: timeoutMs,
      },
      'secondary_tiers[0]',
    );
    const tier = new ObjTier({ spec, objectKeyOf: (key) => `${prefix}/${key}.bin` });
    tiers.push(tier);
    return tier;
  }
  before(async () => {
    s3 = await startS3Server(['tiers']);
  });
  after(async () => {
    for (const t of tiers) await t.close();
    await s3?.stop();
  });
  tierConformance('obj', async () => objTier(`t${randomBytes(3).toString('hex')}`));

  test("a foreign object (another key's frame, or raw bytes as vLLM writes them) or a damaged one is a miss, counted, deleted", async () => {
    const tier = objTier('bad');
    const client = new S3Client({
      endpoint: s3.endpoint,
      region: 'us-east-1',
      forcePathStyle: true,
      credentials: { accessKeyId: S3RVER_ACCESS_KEY, secretAccessKey: S3RVER_SECRET_KEY },
    });
    const read = async (key: string) =>
      Buffer.from(
        await (
          await client.send(new GetObjectCommand({ Bucket: 'tiers', Key: key }))
        ).Body!.transformToByteArray(),
      );
    const write = (key: string, body: Uint8Array) =>
      client.send(new PutObjectCommand({ Bucket: 'tiers', Key: key, Body: body }));
    try {
      await tier.putMany([
        { key: 'other', value: bytes(4096, 1) },
        { key: 'ok', value: bytes(4096, 3) },
      ]);
      await write('bad/v.bin', await read('bad/other.bin'));
      await write('bad/raw.bin', bytes(4096, 7));
      const damaged = await read('bad/ok.bin');
      damaged[20] = (damaged[20] ?? 0) ^ 0xff;
      await write('bad/ok.bin', damaged);
    } finally {
      client.destroy();
    }
    // A lookup reads only the header: a foreign frame and raw bytes are misses; a damaged payload is found by its CRC on load.
    assert.deepEqual(await tier.hasMany(['v', 'raw', 'ok', 'none']), [false, false, true, false]);
    assert.deepEqual(await tier.getMany(['v', 'raw', 'ok']), [null, null, null]);
    const st = tier.stats();
    assert.equal(st.corrupt, 3);
    assert.equal(st.hits, 0);
    assert.equal(st.errors, 0);
    assert.deepEqual(await tier.hasMany(['ok']), [false], 'the damaged object was deleted');
  });

  test('https: the probe trusts the server only with ca_bundle, then bytes round-trip; https to a plain server names scheme', async () => {
    const tls = await startS3Server(['tiers'], { tls: true });
    const make = (endpoint: string, extra: Record<string, unknown>) =>
      new ObjTier({
        spec: parseObjTier(
          {
            type: 'obj',
            store_config: {
              bucket: 'tiers',
              endpoint_override: endpoint,
              access_key: S3RVER_ACCESS_KEY,
              secret_key: S3RVER_SECRET_KEY,
              ...extra,
            },
          },
          'secondary_tiers[0]',
        ),
        objectKeyOf: (key) => `tls/${key}.bin`,
      });
    const untrusted = make(tls.endpoint, {});
    const trusted = make(tls.endpoint, { ca_bundle: tls.certFile });
    const wrongScheme = make(s3.endpoint.replace('http://', 'https://'), {});
    try {
      await assert.rejects(untrusted.probe(), (err: unknown) => {
        assert.ok(err instanceof KVError);
        assert.equal(err.field, 'secondary_tiers[0].store_config.ca_bundle');
        return true;
      });
      await assert.rejects(wrongScheme.probe(), (err: unknown) => {
        assert.ok(err instanceof KVError);
        assert.equal(err.field, 'secondary_tiers[0].store_config.scheme');
        return true;
      });
      await trusted.probe();
      assert.deepEqual(await trusted.putMany([{ key: 'k', value: bytes(1000, 4) }]), ['k']);
      assert.deepEqual(Buffer.from((await trusted.getMany(['k']))[0]!), Buffer.from(bytes(1000, 4)));
    } finally {
      for (const t of [untrusted, trusted, wrongScheme]) await t.close();
      await tls.stop();
    }
  });

  test('io_threads bounds the connections in flight to the server', async () => {
    // A counting TCP relay in front of s3rver: each client connection is one socket of the tier.
    let open = 0;
    let peak = 0;
    const relay = net.createServer((client) => {
      open++;
      peak = Math.max(peak, open);
      const upstream = net.connect(s3.port, '127.0.0.1');
      client.pipe(upstream).pipe(client);
      const done = () => {
        client.destroy();
        upstream.destroy();
      };
      client.once('close', () => {
        open--;
        done();
      });
      client.on('error', done);
      upstream.on('error', done);
    });
    await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
    const port = (relay.address() as net.AddressInfo).port;
    const tier = new ObjTier({
      spec: parseObjTier(
        {
          type: 'obj',
          store_config: {
            bucket: 'tiers',
            endpoint_override: `127.0.0.1:${port}`,
            access_key: S3RVER_ACCESS_KEY,
            secret_key: S3RVER_SECRET_KEY,
          },
          io_threads: 2,
        },
        'secondary_tiers[0]',
      ),
      objectKeyOf: (key) => `threads/${key}.bin`,
    });
    try {
      const entries = Array.from({ length: 16 }, (_, i) => ({ key: `k${i}`, value: bytes(64 * 1024, i) }));
      assert.equal((await tier.putMany(entries)).length, 16);
      assert.equal((await tier.getMany(entries.map((e) => e.key))).filter((v) => v !== null).length, 16);
      assert.ok(peak >= 1 && peak <= 2, `at most io_threads=2 connections at once, saw ${peak}`);
    } finally {
      await tier.close();
      await new Promise((resolve) => relay.close(resolve));
    }
  });

  test('S3 down: every operation answers a miss within its bound and counts an error', async () => {
    const own = await startS3Server(['tiers']);
    const spec = parseObjTier(
      {
        type: 'obj',
        store_config: {
          bucket: 'tiers',
          endpoint_override: own.endpoint,
          access_key: S3RVER_ACCESS_KEY,
          secret_key: S3RVER_SECRET_KEY,
        },
        timeout_ms: 300,
      },
      'secondary_tiers[0]',
    );
    const tier = new ObjTier({ spec, objectKeyOf: (key) => `down/${key}.bin` });
    try {
      assert.deepEqual(await tier.putMany([{ key: 'a', value: bytes(64, 1) }]), ['a']);
      await own.kill();
      const t0 = performance.now();
      assert.deepEqual(await tier.hasMany(['a']), [false]);
      assert.deepEqual(await tier.getMany(['a']), [null]);
      assert.deepEqual(await tier.putMany([{ key: 'b', value: bytes(64, 2) }]), []);
      await tier.deleteMany(['a']);
      assert.ok(performance.now() - t0 < 5000, `took ${performance.now() - t0} ms`);
      assert.equal(tier.stats().errors, 4);
      assert.equal(tier.health.outages, 1);
    } finally {
      await tier.close();
      await own.stop();
    }
  });
});
