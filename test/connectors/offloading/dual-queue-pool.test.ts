/**
 * The fs tier's dual-queue workers: bounded concurrency per kind, reads first on read
 * workers, writes first on write workers, and idle workers of one kind drain the other queue.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DualQueuePool } from '../../../src/connectors/offloading/dual-queue-pool.ts';

/** An operation that finishes when released; records its start order. */
function gate(log: string[], name: string): { op: () => Promise<string>; release: () => void } {
  let release!: () => void;
  const done = new Promise<void>((r) => {
    release = r;
  });
  return {
    op: async () => {
      log.push(name);
      await done;
      return name;
    },
    release,
  };
}

test('a queued read overtakes queued writes as soon as a read worker is free', async () => {
  const pool = new DualQueuePool(1, 1);
  const started: string[] = [];
  const r1 = gate(started, 'r1');
  const w1 = gate(started, 'w1');
  const w2 = gate(started, 'w2');
  const w3 = gate(started, 'w3');
  const r2 = gate(started, 'r2');
  const results = [
    pool.read(r1.op),
    pool.write(w1.op),
    pool.write(w2.op),
    pool.write(w3.op),
    pool.read(r2.op),
  ];
  assert.deepEqual(started, ['r1', 'w1'], 'one operation per worker');
  assert.deepEqual(pool.queued, { reads: 1, writes: 2 });
  r1.release();
  await results[0];
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(started, ['r1', 'w1', 'r2'], 'the read worker took the read before older writes');
  r2.release();
  await results[4];
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(started, ['r1', 'w1', 'r2', 'w2'], 'an idle read worker drains the write queue');
  w1.release();
  w2.release();
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(started, ['r1', 'w1', 'r2', 'w2', 'w3']);
  w3.release();
  assert.deepEqual(await Promise.all(results), ['r1', 'w1', 'w2', 'w3', 'r2']);
  await pool.idle();
  assert.equal(pool.running, 0);
});

test('concurrency never exceeds the workers; failures reach the caller and free the worker', async () => {
  const pool = new DualQueuePool(2, 3);
  let running = 0;
  let peak = 0;
  const op = async () => {
    running++;
    peak = Math.max(peak, running);
    await new Promise((r) => setTimeout(r, 2));
    running--;
  };
  const all = [
    ...Array.from({ length: 20 }, () => pool.read(op)),
    ...Array.from({ length: 20 }, () => pool.write(op)),
  ];
  const failed = pool.write(async () => {
    throw new Error('ENOSPC');
  });
  await assert.rejects(failed, /ENOSPC/);
  await Promise.all(all);
  assert.equal(peak, 5);
  await pool.idle();
  assert.throws(() => new DualQueuePool(0, 1), RangeError);
});
