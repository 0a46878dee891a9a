import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isKVError } from '../../src/errors/index.ts';
import { InThreadTransferAgent, ThreadedTransferAgent } from '../../src/transfer/index.ts';
import { CRASH_NOTIFICATION, FAULTY_THREAD_ENTRY } from './helpers/agent-faults.ts';
import { makeRegion } from './helpers/pattern.ts';
import { assertNoRingsLeftBehind } from './helpers/shm-files.ts';
import { until } from './helpers/wait.ts';

const BB = 4096;
const N = 128;

function regions(seed: number) {
  return [makeRegion(0, BB, N, seed), makeRegion(1, 2 * BB, N, seed + 1)];
}

assertNoRingsLeftBehind();

describe('threaded transfer agent, beyond the conformance suite', () => {
  it('refuses memory that is not in a SharedArrayBuffer', async () => {
    const t = await ThreadedTransferAgent.create({ engineId: 'T', backends: ['TCP'] });
    const region = { id: 0, bytes: new Uint8Array(4 * BB), blockBytes: BB, numBlocks: 4 };
    assert.throws(
      () => t.registerMemory([region]),
      (e: unknown) => isKVError(e) && e.code === 'TRANSFER_REGION_NOT_SHARED',
    );
    await t.close();
  });

  it('fails every pending transfer and the next call when the thread crashes', async () => {
    const t = await ThreadedTransferAgent.create(
      { engineId: 'T', backends: ['TCP'] },
      { threadEntry: FAULTY_THREAD_ENTRY },
    );
    const owner = await InThreadTransferAgent.create({
      engineId: 'O',
      backends: ['TCP'],
      grantWaitMs: 10_000,
    });
    t.registerMemory(regions(11));
    owner.registerMemory(regions(13));
    t.addRemoteAgent(owner.metadata());
    // The owner never creates the grant, so this READ stays pending until the crash.
    const h = t.read(
      'O-rank0',
      [{ localRegion: 1, localFirst: 4, remoteRegion: 1, remoteFirst: 4, count: 3 }],
      { grantKey: 'later' },
    );
    const note = t.sendNotification('O-rank0', 'hello');
    await until(() => owner.waitingReads === 1, 'the READ to wait at the owner');
    assert.equal(t.status(h).state, 'PROC', `pending before the crash: ${t.status(h).reason}`);
    // A peer's notification makes the thread throw an uncaught error (agent-faults.ts).
    owner.addRemoteAgent(t.metadata());
    await owner.sendNotification(t.name, CRASH_NOTIFICATION);
    const s = await t.waitFor(h);
    assert.equal(s.state, 'ERR');
    assert.match(s.reason ?? '', /transfer thread failed/);
    assert.equal(s.cause, 'thread_failed');
    assert.deepEqual(s.failedBlockIds, [4, 5, 6]);
    await note.catch(() => {});
    assert.throws(
      () => t.read('O-rank0', [{ localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: 0, count: 1 }]),
      (e: unknown) => isKVError(e) && e.code === 'TRANSFER_THREAD_FAILED',
    );
    await assert.rejects(
      t.sendNotification('O-rank0', 'x'),
      (e: unknown) => isKVError(e) && e.code === 'TRANSFER_THREAD_FAILED',
    );
    await Promise.all([t.close(), owner.close()]);
  });
});

/**
 * Blocks this thread like a model step, for at most `ms` or until the bytes at `probe`
 * match `expected`; returns when they first matched (null: never, while blocked).
 */
function busyStep(ms: number, probe: Uint8Array, expected: Uint8Array): number | null {
  const start = performance.now();
  while (performance.now() - start < ms) {
    if (Buffer.from(probe).equals(expected)) return performance.now() - start;
  }
  return null;
}

describe('transfers progress while the main thread computes', () => {
  const BIG = 16 * 1024;
  const COUNT = 64;

  async function readDuringStep(threaded: boolean, stepMs: number) {
    const make = (engineId: string) =>
      threaded
        ? ThreadedTransferAgent.create({ engineId, backends: ['TCP'] })
        : InThreadTransferAgent.create({ engineId, backends: ['TCP'] });
    const [p, d] = await Promise.all([make('P'), make('D')]);
    const rp = makeRegion(0, BIG, COUNT, 21);
    const rd = makeRegion(0, BIG, COUNT, 22);
    p.registerMemory([rp]);
    d.registerMemory([rd]);
    d.addRemoteAgent(p.metadata());
    p.grantRead('r', { blockIds: Array.from({ length: COUNT }, (_, i) => i) });
    await p.settled();
    const h = d.read(
      'P-rank0',
      [{ localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: 0, count: COUNT }],
      { grantKey: 'r' },
    );
    const lastBlock = COUNT - 1;
    const seenAt = busyStep(
      stepMs,
      rd.bytes.subarray(lastBlock * BIG, COUNT * BIG),
      rp.bytes.subarray(lastBlock * BIG, COUNT * BIG),
    );
    const status = await d.waitFor(h);
    const durationMs = (d.getStats().transferDuration[0] ?? Number.NaN) * 1000;
    await Promise.all([p.close(), d.close()]);
    return { status, seenAt, durationMs };
  }

  it('with the threaded agent the READ lands while the main thread is blocked; in-thread it cannot', async () => {
    // In-thread nothing can move while the loop is blocked, however long the step.
    const STEP_MS = 300;
    const plain = await readDuringStep(false, STEP_MS);
    assert.equal(plain.status.state, 'DONE');
    assert.equal(plain.seenAt, null, 'in-thread: no byte moves while the loop is blocked');
    assert.ok(plain.durationMs >= STEP_MS, `in-thread read took ${plain.durationMs} ms`);
    // Threaded: the step lasts until the last block landed (bounded only so a bug cannot hang).
    const threaded = await readDuringStep(true, 60_000);
    assert.equal(threaded.status.state, 'DONE');
    assert.ok(threaded.seenAt !== null, 'the last block landed while the main thread was blocked');
  });
});
