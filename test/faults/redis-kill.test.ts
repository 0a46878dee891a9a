/**
 * The Redis tier with its server killed (SIGKILL) at the moment the engine's command
 * reaches it: a relay in front of Redis sees the SET of a write-through, or the GET of a
 * load, and kills the server before forwarding it. The engine must finish the request with
 * the plain engine's tokens (a store is best effort; a failed load is a load error handled
 * by `kv_load_failure_policy`), warn, keep serving, and use Redis again once it is back.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { type LogRecord, onLog } from '../../src/logging/logger.ts';
import { PROMPTS, plainTokens, run, tieredEngineOptions } from '../connectors/offloading/helpers.ts';
import { startFaultRelay } from '../helpers/fault-relay.ts';
import { type RedisServer, redisCommand, startRedis } from '../helpers/redis.ts';
import { waitUntil } from '../helpers/wait-until.ts';

let redis: RedisServer = await startRedis();
const port = redis.port;
/** The RESP bulk string of a command name, as the client sends it. */
let killOn: Buffer | null = null;
let killedAt: number | null = null;
const relay = await startFaultRelay({
  targetPort: port,
  tap: (dir, chunk) => {
    if (dir !== 'up' || !killOn || !chunk.includes(killOn)) return;
    killOn = null;
    killedAt = performance.now();
    redis.process.kill('SIGKILL');
  },
});

/** Restarts Redis on the same port if it was killed (the relay keeps pointing there). */
async function ensureRedis(): Promise<void> {
  if (redis.process.exitCode === null && redis.process.signalCode === null) return;
  redis = await startRedis([], port);
}

after(async () => {
  await relay.close();
  await redis.stop();
});

function engine(policy: 'fail' | 'recompute'): Promise<AsyncEngine> {
  return AsyncEngine.create(
    tieredEngineOptions({ type: 'redis', url: `redis://127.0.0.1:${relay.port}`, timeout_ms: 5000 }, policy),
  );
}

async function keysInRedis(): Promise<number> {
  return Number((await redisCommand(port, 'DBSIZE')).slice(1));
}

/** A 64-token prompt no other test uses. */
const freshPrompt = (n: number) => Array.from({ length: 64 }, (_, i) => (i * 7 + n * 31 + 5) % 256);

const bulk = (name: string) => Buffer.from(`$${name.length}\r\n${name}\r\n`);

describe('Redis killed while the engine uses it', () => {
  it('killed as a write-through SET arrives: the request completes, one warning; after a restart stores resume', async () => {
    const producer = await engine('fail');
    try {
      killOn = bulk('SET');
      killedAt = null;
      const records: LogRecord[] = [];
      const off = onLog((r) => records.push(r));
      try {
        const out = await run(producer, PROMPTS[0]!, 'stored-while-killed');
        assert.deepEqual(out.tokens, await plainTokens('tiny', PROMPTS[0]!));
        assert.equal(out.last.error, undefined);
        await waitUntil('the SET to reach Redis', () => killedAt !== null);
        await waitUntil('the outage to be logged', () =>
          records.some((r) => r.level === 'warn' && r.message.includes('is unavailable')),
        );
      } finally {
        off();
      }
      await ensureRedis();
      const next = await run(producer, PROMPTS[1]!, 'after-restart');
      assert.deepEqual(next.tokens, await plainTokens('tiny', PROMPTS[1]!), 'the engine keeps serving');
      // Stores made while the client reconnects are skipped (best effort); later ones land.
      let n = 0;
      await waitUntil(
        'a write-through to land in the restarted Redis',
        async () => {
          await run(producer, freshPrompt(n++), `probe-${n}`);
          return (await keysInRedis()) > 0;
        },
        { intervalMs: 200, timeoutMs: 30_000 },
      );
    } finally {
      await producer.shutdown();
    }
  });

  // Prompts no other test stored, so storing them adds keys.
  for (const [policy, prompt] of [
    ['recompute', freshPrompt(500)],
    ['fail', freshPrompt(600)],
  ] as const) {
    it(`killed as a load's GET arrives: a load error, policy=${policy}; the engine keeps serving`, async () => {
      await ensureRedis();
      const before = await keysInRedis();
      const producer = await engine('fail');
      try {
        await run(producer, prompt, `store-for-${policy}`);
        await waitUntil('the prompt to be in Redis', async () => (await keysInRedis()) > before, {
          timeoutMs: 30_000,
        });
        await producer.waitIdle();
      } finally {
        await producer.shutdown();
      }
      const consumer = await engine(policy);
      try {
        killOn = bulk('GET');
        killedAt = null;
        const out = await run(consumer, prompt, `load-${policy}`);
        assert.ok(killedAt !== null, 'Redis died while the load was in flight');
        if (policy === 'recompute') {
          assert.deepEqual(out.tokens, await plainTokens('tiny', prompt), 'recomputed: the plain tokens');
          assert.equal(out.last.error, undefined);
        } else {
          assert.equal(out.last.finishReason, 'error', 'policy=fail ends the request with an error');
          assert.deepEqual(out.tokens, []);
        }
        const other = await run(consumer, PROMPTS[2]!, `after-${policy}`);
        assert.deepEqual(other.tokens, await plainTokens('tiny', PROMPTS[2]!), 'the engine keeps serving');
        await consumer.waitIdle();
        assert.equal(consumer.engine.schedulerStats().kvCacheUsage, 0, 'no block is held');
      } finally {
        await consumer.shutdown();
      }
    });
  }
});
