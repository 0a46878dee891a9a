/**
 * The Redis tier on a real Redis Cluster of 3 masters and 3 replicas (redis-cli --cluster
 * create --cluster-replicas 1): a master holding our chunks is killed (SIGKILL) and its
 * replica takes over; then a slot holding one of our chunks is migrated by hand, so the
 * clients meet ASK (during the migration) and MOVED (after it). Engines created before each
 * change keep their client, with its old slot map. Every answer must be the plain engine's
 * tokens (nothing wrong is ever loaded), and once the cluster settled, chunks stored after
 * the failover load in full again.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import type { ConformanceContext } from '../connectors/helpers/conformance.ts';
import { chunkKeys, plainTokens, run, tieredEngineOptions } from '../connectors/offloading/helpers.ts';
import {
  type RedisClusterHandle,
  type RedisServer,
  redisCommand,
  redisCommandFull,
  startRedisCluster,
} from '../helpers/redis.ts';
import { waitUntil } from '../helpers/wait-until.ts';

const PREFIX = 'fo';
/** A 64-token prompt is four 16-token chunks: four keys. */
const KEYS_PER_PROMPT = 4;
const FULL_HIT_TOKENS = 48;
/** What chunkKeys needs to name a chunk as these engines do. */
const CHUNK_CTX: ConformanceContext = {
  model: 'tiny',
  dir: '',
  blockSize: 16,
  hybridKvCacheManager: false,
  state: {},
};
const prompt = (n: number) => Array.from({ length: 64 }, (_, i) => (i * 11 + n * 37 + 3) % 256);

interface NodeInfo {
  id: string;
  port: number;
  master: boolean;
  masterId: string;
  failed: boolean;
}

let cluster: RedisClusterHandle;
const engines: AsyncEngine[] = [];
const dead = new Set<number>();

function live(): RedisServer[] {
  return cluster.nodes.filter((n) => !dead.has(n.port));
}

async function topology(): Promise<NodeInfo[]> {
  const text = await redisCommandFull(live()[0]!.port, 'CLUSTER NODES');
  return text
    .trim()
    .split('\n')
    .map((line) => {
      const [id, addr, flags, masterId] = line.split(' ');
      return {
        id: id!,
        port: Number(addr!.split('@')[0]!.split(':')[1]),
        master: flags!.includes('master'),
        masterId: masterId!,
        failed: flags!.includes('fail'),
      };
    });
}

async function dbsize(port: number): Promise<number> {
  return Number((await redisCommand(port, 'DBSIZE')).slice(1));
}

async function masterKeys(): Promise<number> {
  let n = 0;
  for (const m of (await topology()).filter((x) => x.master && !x.failed)) n += await dbsize(m.port);
  return n;
}

async function engine(): Promise<AsyncEngine> {
  const e = await AsyncEngine.create(
    tieredEngineOptions(
      { type: 'redis', cluster_nodes: cluster.urls, timeout_ms: 3000, key_prefix: PREFIX },
      'recompute',
    ),
  );
  engines.push(e);
  return e;
}

/** Runs `p` on `e`, checks the tokens against the plain engine, returns the tokens loaded from Redis. */
async function served(e: AsyncEngine, p: number[], id: string): Promise<number> {
  const out = await run(e, p, id);
  assert.deepEqual(out.tokens, await plainTokens('tiny', p), `${id}: the plain engine's tokens`);
  assert.equal(out.last.error, undefined);
  return out.last.metrics.numExternalTokens;
}

/** Stores fresh prompts through `producer` until one has all its chunks in the cluster. */
async function storeOne(producer: AsyncEngine, from: number): Promise<number> {
  let n = from;
  let stored = -1;
  await waitUntil(
    'a prompt to be stored in full',
    async () => {
      const before = await masterKeys();
      await run(producer, prompt(n), `store-${n}`);
      await producer.waitIdle();
      // Short: a write that has not landed by then is tried again with the next prompt.
      const ok = await waitUntil(
        'the write-through',
        async () => (await masterKeys()) >= before + KEYS_PER_PROMPT,
        { timeoutMs: 1000 },
      ).then(
        () => true,
        () => false,
      );
      if (ok) stored = n;
      n++;
      return ok;
    },
    { timeoutMs: 60_000, intervalMs: 100 },
  );
  return stored;
}

describe('Redis Cluster with replicas: failover, ASK and MOVED', () => {
  before(async () => {
    cluster = await startRedisCluster(3, { replicas: 1, nodeTimeoutMs: 1000 });
  });
  after(async () => {
    for (const e of engines) await e.shutdown();
    await cluster?.stop();
  });

  it('a master killed: answers stay correct during the failover, and the promoted replica serves the chunks', async () => {
    const producer = await engine();
    const early = await engine();
    await served(early, prompt(900), 'warm-up'); // its cluster client is connected, with today's slot map
    for (let i = 0; i < 4; i++) await served(producer, prompt(i), `p${i}`);
    await producer.waitIdle();
    await waitUntil('16 chunks in the cluster', async () => (await masterKeys()) >= 4 * KEYS_PER_PROMPT);
    const before = await topology();
    const masters = before.filter((n) => n.master);
    await waitUntil('the replicas to hold what their masters hold', async () => {
      for (const r of before.filter((n) => !n.master)) {
        const m = masters.find((x) => x.id === r.masterId)!;
        if ((await dbsize(r.port)) !== (await dbsize(m.port))) return false;
      }
      return true;
    });
    let victim = masters[0]!;
    for (const m of masters) if ((await dbsize(m.port)) > (await dbsize(victim.port))) victim = m;
    assert.ok((await dbsize(victim.port)) > 0, 'the victim holds some of our chunks');
    const successor = before.find((n) => n.masterId === victim.id)!;
    cluster.nodes.find((n) => n.port === victim.port)!.process.kill('SIGKILL');
    dead.add(victim.port);

    // During the failover: whatever cannot be read is recomputed; nothing wrong is loaded.
    for (let i = 0; i < 4; i++) await served(early, prompt(i), `during-${i}`);

    await waitUntil(
      'the replica to be promoted',
      async () => {
        const now = await topology();
        const info = await redisCommand(successor.port, 'CLUSTER INFO');
        return now.find((n) => n.id === successor.id)?.master && info.includes('cluster_state:ok');
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    assert.ok((await dbsize(successor.port)) > 0, "the promoted replica holds the victim's chunks");

    // Engines created before the failover keep their clients: writes and reads find the new master.
    const n = await storeOne(producer, 100);
    assert.equal(await served(early, prompt(n), 'after-failover'), FULL_HIT_TOKENS, 'a full hit again');
    const fresh = await engine();
    for (let i = 0; i < 4; i++) await served(fresh, prompt(i), `fresh-${i}`);
  });

  it('a slot migrated under the engines: ASK while it moves, MOVED after; full hits with the right tokens', async () => {
    const producer = await engine();
    const asking = await engine();
    const moved = await engine();
    for (const [e, id] of [
      [asking, 'a'],
      [moved, 'm'],
    ] as const)
      await served(e, prompt(901), `warm-${id}`);
    const n = await storeOne(producer, 200);
    const masters = (await topology()).filter((x) => x.master && !x.failed);
    // The first chunk of prompt n (always loaded), the master that holds it and another one.
    const key = `${PREFIX}:${chunkKeys(CHUNK_CTX, {}, prompt(n), 0)[0]}`;
    let source = masters[0]!;
    for (const m of masters) if ((await redisCommand(m.port, `EXISTS ${key}`)).trim() === ':1') source = m;
    assert.equal((await redisCommand(source.port, `EXISTS ${key}`)).trim(), ':1', 'the chunk is stored');
    const target = masters.find((m) => m.id !== source.id)!;
    const slot = Number((await redisCommand(source.port, `CLUSTER KEYSLOT ${key}`)).slice(1));
    const keysInSlot = (await redisCommandFull(source.port, `CLUSTER GETKEYSINSLOT ${slot} 100`))
      .split('\r\n')
      .filter((k) => k.startsWith(PREFIX));
    assert.ok(
      (await redisCommand(target.port, `CLUSTER SETSLOT ${slot} IMPORTING ${source.id}`)).startsWith('+OK'),
    );
    assert.ok(
      (await redisCommand(source.port, `CLUSTER SETSLOT ${slot} MIGRATING ${target.id}`)).startsWith('+OK'),
    );
    assert.ok(
      (
        await redisCommand(
          source.port,
          `MIGRATE 127.0.0.1 ${target.port} "" 0 5000 KEYS ${keysInSlot.join(' ')}`,
        )
      ).startsWith('+OK'),
    );
    assert.match(
      await redisCommand(source.port, `GET ${key}`),
      /^-ASK /,
      'the key left: its old master answers ASK',
    );

    for (let i = 0; i < 4; i++) await served(asking, prompt(i), `ask-old-${i}`);
    assert.equal(await served(asking, prompt(n), 'ask'), FULL_HIT_TOKENS, 'a full hit through ASK');

    for (const m of masters) await redisCommand(m.port, `CLUSTER SETSLOT ${slot} NODE ${target.id}`);
    assert.match(await redisCommand(source.port, `GET ${key}`), /^-MOVED /, 'the old master answers MOVED');
    assert.equal(await served(moved, prompt(n), 'moved'), FULL_HIT_TOKENS, 'a full hit after MOVED');
  });
});
