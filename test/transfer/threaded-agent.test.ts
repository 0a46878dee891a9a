import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { after, describe, it } from 'node:test';
import { isKVError } from '../../src/errors/index.ts';
import { type DescPair, TransferAgent, type TransferAgentOptions } from '../../src/transfer/index.ts';
import { type ThreadedAgentOptions, ThreadedTransferAgent } from '../../src/transfer/threaded.ts';
import { blocksEqual, makeRegion } from './pattern.ts';

const BB = 4096;
const N = 128;

function regions(seed: number) {
  return [makeRegion(0, BB, N, seed), makeRegion(1, 2 * BB, N, seed + 1)];
}

async function threadedPair(backend: string, extra: Partial<ThreadedAgentOptions> = {}) {
  const opts = { backends: [backend], chunkBytes: 16 * BB, ...extra };
  const [a, b] = await Promise.all([
    ThreadedTransferAgent.create({ engineId: 'A', ...opts }),
    ThreadedTransferAgent.create({ engineId: 'B', ...opts }),
  ]);
  const ra = regions(1);
  const rb = regions(3);
  a.registerMemory(ra);
  b.registerMemory(rb);
  const remote = a.addRemoteAgent(b.metadata());
  b.addRemoteAgent(a.metadata());
  const close = () => Promise.all([a.close(), b.close()]);
  open.push(close);
  return { a, b, ra, rb, remote, close };
}

/** Every pair's close, run again after the tests: a failed assertion must not leave worker threads keeping the process alive. */
const open: (() => Promise<unknown>)[] = [];
after(() => Promise.all(open.map((close) => close().catch(() => {}))));

const settle = (ms: number) => new Promise((r) => setTimeout(r, ms));

const shmFilesBefore = readdirSync('/dev/shm').filter((f) => f.startsWith('kvconnect-')).length;
after(() => {
  const left = readdirSync('/dev/shm').filter((f) => f.startsWith('kvconnect-')).length;
  assert.equal(left, shmFilesBefore, 'shm staging files must not be left behind');
});

for (const backend of ['TCP', 'SHM']) {
  describe(`threaded transfer agent over ${backend}`, () => {
    it('READs block runs byte for byte, notifies after completion and mirrors stats', async () => {
      const p = await threadedPair(backend);
      assert.equal(p.a.transportFor(p.remote), backend.toLowerCase());
      p.b.grantRead('req-1', { peer: 'A', blockIds: Array.from({ length: N }, (_, i) => i) });
      const descs: DescPair[] = Array.from({ length: 12 }, (_, i) => ({
        localRegion: i % 2,
        localFirst: 1 + i * 9,
        remoteRegion: i % 2,
        remoteFirst: 120 - i * 9,
        count: 1 + (i % 7),
      }));
      const handles = descs.map((d, i) =>
        p.a.read(p.remote, [d], { grantKey: 'req-1', notification: `n${i}` }),
      );
      assert.equal(p.a.status(handles[0]!).state, 'PROC', 'status is known synchronously after posting');
      for (const h of handles) assert.equal((await p.a.waitFor(h)).state, 'DONE');
      for (const d of descs) {
        const bb = d.localRegion === 0 ? BB : 2 * BB;
        const ok = blocksEqual(
          p.ra[d.localRegion]!.bytes,
          d.localFirst,
          p.rb[d.remoteRegion]!.bytes,
          d.remoteFirst,
          d.count,
          bb,
        );
        assert.ok(ok, `blocks of run at ${d.localFirst} arrived intact`);
      }
      await settle(50);
      const notes = p.b
        .drainNotifications()
        .map((n) => n.message)
        .sort();
      assert.deepEqual(notes, descs.map((_, i) => `n${i}`).sort());
      const stats = p.a.resetStats();
      assert.equal(stats.transferDuration.length, descs.length);
      assert.equal(
        stats.bytesTransferred.reduce((s, x) => s + x, 0),
        descs.reduce((s, d) => s + d.count * (d.localRegion === 0 ? BB : 2 * BB), 0),
      );
      assert.equal(p.a.getStats().transferDuration.length, 0);
      await p.close();
    });

    it('coalesces block lists and WRITEs them into granted blocks, then notifies', async () => {
      const p = await threadedPair(backend);
      p.b.grantWrite('push-1', { peer: 'A', blockIds: [50, 51, 52, 53, 70, 90], regions: [0] });
      const lists = [
        {
          localRegion: 0,
          localBlockIds: [3, 4, 5, 6, 9, 10],
          remoteRegion: 0,
          remoteBlockIds: [50, 51, 52, 53, 70, 90],
        },
      ];
      const h = p.a.write(p.remote, lists, { notification: 'pushed' });
      assert.equal((await p.a.waitFor(h)).state, 'DONE');
      assert.ok(blocksEqual(p.ra[0]!.bytes, 3, p.rb[0]!.bytes, 50, 4, BB));
      assert.ok(blocksEqual(p.ra[0]!.bytes, 10, p.rb[0]!.bytes, 90, 1, BB));
      assert.equal(p.a.getStats().numDescriptors[0], 3);
      await settle(30);
      assert.deepEqual(p.b.drainNotifications(), [{ agent: 'A-rank0', message: 'pushed' }]);
      await p.close();
    });

    it('refuses READ without a live grant and WRITE outside the grant; bad descriptors throw at once', async () => {
      const p = await threadedPair(backend, { grantWaitMs: 0 });
      const before = Buffer.from(p.ra[0]!.bytes.subarray(0, 20 * BB));
      const d = [{ localRegion: 0, localFirst: 10, remoteRegion: 0, remoteFirst: 10, count: 2 }];
      const noGrant = await p.a.waitFor(p.a.read(p.remote, d));
      assert.equal(noGrant.state, 'ERR');
      assert.deepEqual(noGrant.failedBlockIds, [10, 11]);
      p.b.grantRead('old', { blockIds: [10, 11], expiresAt: Date.now() - 1 });
      assert.equal((await p.a.waitFor(p.a.read(p.remote, d, { grantKey: 'old' }))).state, 'ERR');
      p.b.grantRead('ok', { blockIds: [10, 11], peer: 'A' });
      // Grant changes reach the agent's thread as messages: let them land before racing a READ.
      await settle(30);
      assert.equal((await p.a.waitFor(p.a.read(p.remote, d, { grantKey: 'ok' }))).state, 'DONE');
      assert.ok(p.b.revokeGrant('ok'));
      assert.equal(p.b.revokeGrant('ok'), false);
      await settle(30);
      const revoked = await p.a.waitFor(p.a.read(p.remote, d, { grantKey: 'ok' }));
      assert.match(revoked.reason ?? '', /no live read grant 'ok'/);
      p.b.grantWrite('w', { blockIds: [5] });
      const w = await p.a.waitFor(
        p.a.write(p.remote, [{ localRegion: 0, localFirst: 1, remoteRegion: 0, remoteFirst: 5, count: 2 }]),
      );
      assert.deepEqual(w.failedBlockIds, [1, 2]);
      assert.equal(p.a.getStats().numFailedTransfers, 4);
      assert.ok(before.subarray(0, 10 * BB).equals(p.ra[0]!.bytes.subarray(0, 10 * BB)));
      const outOfBounds = { localRegion: 0, localFirst: N - 1, remoteRegion: 0, remoteFirst: 0, count: 2 };
      assert.throws(
        () => p.a.read(p.remote, [outOfBounds]),
        (e: unknown) => isKVError(e) && /OUT_OF_BOUNDS/.test(e.code),
      );
      await p.close();
    });
  });
}

describe('threaded transfer agent against a plain one', () => {
  it('detects a corrupted block and reports exactly that block, as reader and as WRITE target', async () => {
    const corrupt = (view: Uint8Array, run: { first: number; count: number }, target: number) => {
      if (target < run.first || target >= run.first + run.count) return view;
      const copy = new Uint8Array(view);
      copy[(target - run.first) * BB + 123]! ^= 0x40;
      return copy;
    };
    const hooks = (target: number): Partial<TransferAgentOptions> => ({
      testHooks: { outgoing: (v, run) => corrupt(v, run, target) },
    });
    const t = await ThreadedTransferAgent.create({ engineId: 'T', backends: ['TCP'] });
    const plain = await TransferAgent.create({ engineId: 'P', backends: ['TCP'], ...hooks(21) });
    const sender = await TransferAgent.create({ engineId: 'S', backends: ['TCP'], ...hooks(33) });
    const rt = regions(5);
    t.registerMemory(rt);
    plain.registerMemory(regions(7));
    sender.registerMemory(regions(9));
    t.addRemoteAgent(plain.metadata());
    sender.addRemoteAgent(t.metadata());
    plain.grantRead('g', { blockIds: Array.from({ length: N }, (_, i) => i) });
    const r = await t.waitFor(
      t.read('P-rank0', [{ localRegion: 0, localFirst: 60, remoteRegion: 0, remoteFirst: 20, count: 4 }]),
    );
    assert.equal(r.state, 'ERR');
    assert.deepEqual(r.failedBlockIds, [61]);
    t.grantWrite('w', { blockIds: Array.from({ length: N }, (_, i) => i) });
    const w = await sender.waitFor(
      sender.write(
        'T-rank0',
        [{ localRegion: 0, localFirst: 30, remoteRegion: 0, remoteFirst: 100, count: 6 }],
        { notification: 'never' },
      ),
    );
    assert.deepEqual(w.failedBlockIds, [33]);
    await settle(30);
    assert.deepEqual(t.drainNotifications(), [], 'a failed WRITE delivers no notification');
    await Promise.all([t.close(), plain.close(), sender.close()]);
  });

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
    const t = await ThreadedTransferAgent.create({ engineId: 'T', backends: ['TCP'] });
    const owner = await TransferAgent.create({ engineId: 'O', backends: ['TCP'], grantWaitMs: 10_000 });
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
    await settle(100);
    assert.equal(t.status(h).state, 'PROC', `pending before the crash: ${t.status(h).reason}`);
    t.crashForTest();
    const s = await t.waitFor(h);
    assert.equal(s.state, 'ERR');
    assert.match(s.reason ?? '', /transfer thread failed/);
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

/** Blocks this thread like a model step; returns when the bytes at `probe` first matched `expected`. */
function busyStep(ms: number, probe: Uint8Array, expected: Uint8Array): number | null {
  const start = performance.now();
  let seenAt: number | null = null;
  while (performance.now() - start < ms) {
    if (seenAt === null && Buffer.from(probe).equals(expected)) seenAt = performance.now() - start;
  }
  return seenAt;
}

describe('transfers progress while the main thread computes', () => {
  const STEP_MS = 600;
  const BIG = 16 * 1024;
  const COUNT = 64;

  async function readDuringStep(threaded: boolean) {
    const make = (engineId: string) =>
      threaded
        ? ThreadedTransferAgent.create({ engineId, backends: ['TCP'] })
        : TransferAgent.create({ engineId, backends: ['TCP'] });
    const [p, d] = await Promise.all([make('P'), make('D')]);
    const rp = makeRegion(0, BIG, COUNT, 21);
    const rd = makeRegion(0, BIG, COUNT, 22);
    p.registerMemory([rp]);
    d.registerMemory([rd]);
    d.addRemoteAgent(p.metadata());
    p.grantRead('r', { blockIds: Array.from({ length: COUNT }, (_, i) => i) });
    await settle(20);
    const h = d.read(
      'P-rank0',
      [{ localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: 0, count: COUNT }],
      { grantKey: 'r' },
    );
    const lastBlock = COUNT - 1;
    const seenAt = busyStep(
      STEP_MS,
      rd.bytes.subarray(lastBlock * BIG, COUNT * BIG),
      rp.bytes.subarray(lastBlock * BIG, COUNT * BIG),
    );
    const status = await d.waitFor(h);
    const durationMs = (d.getStats().transferDuration[0] ?? Number.NaN) * 1000;
    await Promise.all([p.close(), d.close()]);
    return { status, seenAt, durationMs };
  }

  it('with the threaded agent the READ completes before the step ends; in-thread it cannot', async () => {
    const plain = await readDuringStep(false);
    assert.equal(plain.status.state, 'DONE');
    assert.equal(plain.seenAt, null, 'in-thread: no byte moves while the loop is blocked');
    assert.ok(plain.durationMs >= STEP_MS, `in-thread read took ${plain.durationMs} ms`);
    const threaded = await readDuringStep(true);
    assert.equal(threaded.status.state, 'DONE');
    assert.ok(threaded.seenAt !== null && threaded.seenAt < STEP_MS, 'the last block landed during the step');
    assert.ok(threaded.durationMs < STEP_MS, `threaded read took ${threaded.durationMs} ms`);
  });
});
