import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { after, describe, it } from 'node:test';
import { isKVError } from '../../src/errors/index.ts';
import { type DescPair, TransferAgent, type TransferAgentOptions } from '../../src/transfer/index.ts';
import { blocksEqual, makeRegion } from './pattern.ts';

const BB = 4096;
const N = 128;

async function pair(
  backend: string,
  extra: Partial<TransferAgentOptions> = {},
  extraB: Partial<TransferAgentOptions> = {},
) {
  const a = await TransferAgent.create({ engineId: 'A', backends: [backend], chunkBytes: 16 * BB, ...extra });
  const b = await TransferAgent.create({
    engineId: 'B',
    backends: [backend],
    chunkBytes: 16 * BB,
    ...extraB,
  });
  const ra = [makeRegion(0, BB, N, 1), makeRegion(1, 2 * BB, N, 2)];
  const rb = [makeRegion(0, BB, N, 3), makeRegion(1, 2 * BB, N, 4)];
  a.registerMemory(ra);
  b.registerMemory(rb);
  const remote = a.addRemoteAgent(b.metadata());
  b.addRemoteAgent(a.metadata());
  return { a, b, ra, rb, remote, close: () => Promise.all([a.close(), b.close()]) };
}

function randomRuns(seed: number, runs: number): DescPair[] {
  let x = seed;
  const rnd = (n: number) => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return x % n;
  };
  const out: DescPair[] = [];
  for (let i = 0; i < runs; i++) {
    const count = 1 + rnd(8);
    const region = rnd(2);
    out.push({
      localRegion: region,
      localFirst: 1 + rnd(N - 9),
      remoteRegion: region,
      remoteFirst: 1 + rnd(N - 9),
      count,
    });
  }
  return out;
}

const shmFilesBefore = readdirSync('/dev/shm').filter((f) => f.startsWith('kvconnect-')).length;
after(() => {
  const left = readdirSync('/dev/shm').filter((f) => f.startsWith('kvconnect-')).length;
  assert.equal(left, shmFilesBefore, 'shm staging files must not be left behind');
});

for (const backend of ['TCP', 'SHM']) {
  describe(`transfer agent over ${backend}`, () => {
    it('chooses the transport the backend list asks for', async () => {
      const p = await pair(backend);
      assert.equal(p.a.transportFor(p.remote), backend.toLowerCase());
      await p.close();
    });

    it('READs random block runs byte for byte, many in flight, and notifies after completion', async () => {
      const p = await pair(backend);
      p.b.grantRead('req-1', { peer: 'A', blockIds: Array.from({ length: N }, (_, i) => i) });
      const all = Array.from({ length: 20 }, (_, i) => randomRuns(i + 7, 1));
      // Runs within one region must not overlap locally, or a later READ overwrites an earlier one.
      const used = new Set<string>();
      const descs = all.flat().filter((d) => {
        for (let k = 0; k < d.count; k++) if (used.has(`${d.localRegion}:${d.localFirst + k}`)) return false;
        for (let k = 0; k < d.count; k++) used.add(`${d.localRegion}:${d.localFirst + k}`);
        return true;
      });
      const handles = descs.map((d, i) =>
        p.a.read(p.remote, [d], { grantKey: 'req-1', notification: `n${i}` }),
      );
      assert.ok(
        handles.some((h) => p.a.status(h).state === 'PROC'),
        'transfers are asynchronous',
      );
      for (const h of handles) assert.equal((await p.a.waitFor(h)).state, 'DONE');
      for (const d of descs) {
        const bb = d.localRegion === 0 ? BB : 2 * BB;
        assert.ok(
          blocksEqual(
            p.ra[d.localRegion]!.bytes,
            d.localFirst,
            p.rb[d.remoteRegion]!.bytes,
            d.remoteFirst,
            d.count,
            bb,
          ),
        );
      }
      await new Promise((r) => setTimeout(r, 50));
      const notes = p.b
        .drainNotifications()
        .map((n) => n.message)
        .sort();
      assert.deepEqual(notes, descs.map((_, i) => `n${i}`).sort());
      assert.ok(notes.length > 0);
      const stats = p.a.resetStats();
      assert.equal(stats.transferDuration.length, descs.length);
      assert.equal(stats.numFailedTransfers, 0);
      assert.equal(p.a.getStats().transferDuration.length, 0);
      await p.close();
    });

    it('coalesces block lists into contiguous runs and WRITEs them into granted blocks', async () => {
      const p = await pair(backend);
      p.b.grantWrite('push-1', { peer: 'A', blockIds: [50, 51, 52, 53, 70, 90], regions: [0] });
      const h = p.a.write(
        p.remote,
        [
          {
            localRegion: 0,
            localBlockIds: [3, 4, 5, 6, 9, 10],
            remoteRegion: 0,
            remoteBlockIds: [50, 51, 52, 53, 70, 90],
          },
        ],
        { notification: 'pushed' },
      );
      assert.equal((await p.a.waitFor(h)).state, 'DONE');
      assert.ok(blocksEqual(p.ra[0]!.bytes, 3, p.rb[0]!.bytes, 50, 4, BB));
      assert.ok(blocksEqual(p.ra[0]!.bytes, 9, p.rb[0]!.bytes, 70, 1, BB));
      assert.ok(blocksEqual(p.ra[0]!.bytes, 10, p.rb[0]!.bytes, 90, 1, BB));
      assert.equal(p.a.getStats().numDescriptors[0], 3);
      await new Promise((r) => setTimeout(r, 30));
      assert.deepEqual(p.b.drainNotifications(), [{ agent: 'A-rank0', message: 'pushed' }]);
      await p.close();
    });

    it('refuses READ without a grant, with an expired or revoked grant, and WRITE outside the grant', async () => {
      const p = await pair(backend);
      const before = Buffer.from(p.ra[0]!.bytes.subarray(0, 20 * BB));
      const d = [{ localRegion: 0, localFirst: 10, remoteRegion: 0, remoteFirst: 10, count: 2 }];
      const noGrant = await p.a.waitFor(p.a.read(p.remote, d));
      assert.equal(noGrant.state, 'ERR');
      assert.deepEqual(noGrant.failedBlockIds, [10, 11]);
      p.b.grantRead('old', { blockIds: [10, 11], expiresAt: Date.now() - 1 });
      assert.equal((await p.a.waitFor(p.a.read(p.remote, d, { grantKey: 'old' }))).state, 'ERR');
      p.b.grantRead('other-peer', { blockIds: [10, 11], peer: 'Z' });
      assert.equal((await p.a.waitFor(p.a.read(p.remote, d))).state, 'ERR');
      p.b.grantRead('ok', { blockIds: [10, 11], peer: 'A' });
      assert.equal((await p.a.waitFor(p.a.read(p.remote, d, { grantKey: 'ok' }))).state, 'DONE');
      assert.ok(p.b.revokeGrant('ok'));
      const revoked = await p.a.waitFor(p.a.read(p.remote, d, { grantKey: 'ok' }));
      assert.match(revoked.reason ?? '', /no live read grant 'ok'/);
      p.b.grantWrite('w', { blockIds: [5] });
      const w = await p.a.waitFor(
        p.a.write(p.remote, [{ localRegion: 0, localFirst: 1, remoteRegion: 0, remoteFirst: 5, count: 2 }]),
      );
      assert.equal(w.state, 'ERR');
      assert.deepEqual(w.failedBlockIds, [1, 2]);
      assert.equal(p.a.getStats().numFailedTransfers, 5);
      assert.ok(before.subarray(0, 10 * BB).equals(p.ra[0]!.bytes.subarray(0, 10 * BB)));
      await p.close();
    });

    it('bounds-checks descriptors against local and remote regions', async () => {
      const p = await pair(backend);
      const bad = [
        { localRegion: 0, localFirst: N - 1, remoteRegion: 0, remoteFirst: 0, count: 2 },
        { localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: N, count: 1 },
        { localRegion: 7, localFirst: 0, remoteRegion: 0, remoteFirst: 0, count: 1 },
        { localRegion: 0, localFirst: -1, remoteRegion: 0, remoteFirst: 0, count: 1 },
        { localRegion: 0, localFirst: 0, remoteRegion: 1, remoteFirst: 0, count: 1 },
      ];
      for (const d of bad) {
        assert.throws(
          () => p.a.read(p.remote, [d]),
          (e: unknown) => isKVError(e) && /OUT_OF_BOUNDS|BLOCK_SIZE_MISMATCH/.test(e.code),
        );
      }
      await p.close();
    });

    it('detects a corrupted block and reports exactly that block (READ and WRITE)', async () => {
      const corruptBlock = (view: Uint8Array, run: { first: number; count: number }, target: number) => {
        if (target < run.first || target >= run.first + run.count) return view;
        const copy = new Uint8Array(view);
        copy[(target - run.first) * BB + 123]! ^= 0x40;
        return copy;
      };
      const p = await pair(
        backend,
        { testHooks: { outgoing: (v, run) => corruptBlock(v, run, 33) } },
        { testHooks: { outgoing: (v, run) => corruptBlock(v, run, 21) } },
      );
      p.b.grantRead('g', { blockIds: Array.from({ length: N }, (_, i) => i) });
      p.b.grantWrite('g', { blockIds: Array.from({ length: N }, (_, i) => i) });
      const r = await p.a.waitFor(
        p.a.read(p.remote, [{ localRegion: 0, localFirst: 60, remoteRegion: 0, remoteFirst: 20, count: 4 }]),
      );
      assert.equal(r.state, 'ERR');
      assert.deepEqual(r.failedBlockIds, [61]);
      assert.ok(blocksEqual(p.ra[0]!.bytes, 60, p.rb[0]!.bytes, 20, 1, BB));
      const w = await p.a.waitFor(
        p.a.write(
          p.remote,
          [{ localRegion: 0, localFirst: 30, remoteRegion: 0, remoteFirst: 100, count: 6 }],
          {
            notification: 'never',
          },
        ),
      );
      assert.equal(w.state, 'ERR');
      assert.deepEqual(w.failedBlockIds, [33]);
      await new Promise((res) => setTimeout(res, 30));
      assert.deepEqual(p.b.drainNotifications(), [], 'a failed WRITE delivers no notification');
      await p.close();
    });

    it('refuses a peer with the wrong shared secret and accepts the right one', async () => {
      const good = await pair(backend, { secret: 's3cret' }, { secret: 's3cret' });
      good.b.grantRead('g', { blockIds: [1] });
      const d = [{ localRegion: 0, localFirst: 1, remoteRegion: 0, remoteFirst: 1, count: 1 }];
      assert.equal((await good.a.waitFor(good.a.read(good.remote, d))).state, 'DONE');
      await good.close();
      const bad = await pair(backend, { secret: 'wrong' }, { secret: 's3cret' });
      bad.b.grantRead('g', { blockIds: [1] });
      const s = await bad.a.waitFor(bad.a.read(bad.remote, d));
      assert.equal(s.state, 'ERR');
      assert.match(s.reason ?? '', /authentication failed/);
      await assert.rejects(bad.a.sendNotification(bad.remote, 'x'), /authentication failed/);
      assert.equal(bad.a.getStats().numFailedNotifications, 1);
      await bad.close();
    });
  });
}

describe('unreachable peers', () => {
  it('fails transfers in bounded time when the peer is gone or never answers', async () => {
    const p = await pair('TCP', { connectTimeoutMs: 300, transferTimeoutMs: 2000 });
    await p.b.close();
    const d = [{ localRegion: 0, localFirst: 1, remoteRegion: 0, remoteFirst: 1, count: 3 }];
    const gone = await p.a.waitFor(p.a.read(p.remote, d));
    assert.equal(gone.state, 'ERR');
    assert.deepEqual(gone.failedBlockIds, [1, 2, 3]);

    const sockets: Socket[] = [];
    const silent = createServer((s) => sockets.push(s));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const addr = silent.address();
    const meta = {
      ...p.b.metadata(),
      agentName: 'silent',
      endpoints: { tcp: { host: '127.0.0.1', port: typeof addr === 'object' && addr ? addr.port : 0 } },
    };
    const t0 = Date.now();
    const mute = await p.a.waitFor(p.a.read(p.a.addRemoteAgent(meta), d));
    assert.equal(mute.state, 'ERR');
    assert.match(mute.reason ?? '', /timed out/);
    assert.ok(Date.now() - t0 < 1500);
    for (const s of sockets) s.destroy();
    await new Promise<void>((r) => silent.close(() => r()));
    await p.a.close();
  });
});
