/**
 * The transfer-agent conformance suite: every case runs against each agent variant (on the
 * caller's event loop or in a worker thread) over each data path (tcp; shm copying from the
 * peer's mapped KV memory; shm through the staging ring). test/transfer/agent.test.ts runs it.
 */
import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import { after, describe, it } from 'node:test';
import { isKVError } from '../../../src/errors/index.ts';
import {
  type AgentSeams,
  type CreateAgentOptions,
  createTransferAgent,
  type DescPair,
  InThreadTransferAgent,
  type TransferAgent,
} from '../../../src/transfer/index.ts';
import { blocksEqual, makeRegion } from './pattern.ts';
import { notificationsOf, until } from './wait.ts';

export interface AgentVariant {
  readonly name: string;
  readonly thread: boolean;
  readonly backend: 'TCP' | 'SHM';
  /** shm only: offer the KV mapping (one copy) or not (staging ring). */
  readonly kvMapping: boolean;
}

const BB = 4096;
const N = 128;
const ALL = Array.from({ length: N }, (_, i) => i);

/** Every agent a case opened, closed after the file even when an assertion failed mid-case. */
const open: TransferAgent[] = [];
after(() => Promise.all(open.map((a) => a.close().catch(() => {}))));

function options(v: AgentVariant, engineId: string, extra: Partial<CreateAgentOptions>): CreateAgentOptions {
  return {
    engineId,
    backends: [v.backend],
    chunkBytes: 16 * BB,
    offerKvMapping: v.kvMapping,
    thread: v.thread,
    ...extra,
  };
}

async function agent(v: AgentVariant, engineId: string, extra: Partial<CreateAgentOptions> = {}) {
  const a = await createTransferAgent(options(v, engineId, extra));
  open.push(a);
  return a;
}

/** An in-thread agent with seams (an outgoing transform cannot cross into a thread). */
async function hooked(v: AgentVariant, engineId: string, seams: AgentSeams) {
  const { thread: _, ...rest } = options(v, engineId, {});
  const a = await InThreadTransferAgent.create(rest, seams);
  open.push(a);
  return a;
}

function regions(seed: number) {
  return [makeRegion(0, BB, N, seed), makeRegion(1, 2 * BB, N, seed + 1)];
}

/** Agent `a` (the one that posts) and its peer `b`, each knowing the other. */
async function pair(a: TransferAgent, b: TransferAgent) {
  const ra = regions(1);
  const rb = regions(3);
  a.registerMemory(ra);
  b.registerMemory(rb);
  const remote = a.addRemoteAgent(b.metadata());
  b.addRemoteAgent(a.metadata());
  return { a, b, ra, rb, remote, close: () => Promise.all([a.close(), b.close()]) };
}

function randomRuns(seed: number, count: number): DescPair[] {
  let x = seed;
  const rnd = (n: number) => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return x % n;
  };
  return Array.from({ length: count }, () => {
    const region = rnd(2);
    return {
      localRegion: region,
      localFirst: 1 + rnd(N - 9),
      remoteRegion: region,
      remoteFirst: 1 + rnd(N - 9),
      count: 1 + rnd(8),
    };
  });
}

/** Drops runs that overlap an earlier one locally (a later READ would overwrite it). */
function disjoint(descs: readonly DescPair[]): DescPair[] {
  const used = new Set<string>();
  return descs.filter((d) => {
    const keys = Array.from({ length: d.count }, (_, k) => `${d.localRegion}:${d.localFirst + k}`);
    if (keys.some((k) => used.has(k))) return false;
    for (const k of keys) used.add(k);
    return true;
  });
}

function flipByte(view: Uint8Array, run: { first: number; count: number }, target: number): Uint8Array {
  if (target < run.first || target >= run.first + run.count) return view;
  const copy = new Uint8Array(view);
  copy[(target - run.first) * BB + 123]! ^= 0x40;
  return copy;
}

export function transferAgentConformance(v: AgentVariant): void {
  describe(`transfer agent conformance: ${v.name}`, () => {
    it('chooses the transport the backend list asks for', async () => {
      const p = await pair(await agent(v, 'A'), await agent(v, 'B'));
      assert.equal(p.a.transportFor(p.remote), v.backend.toLowerCase());
      await p.close();
    });

    it('READs random block runs byte for byte, many in flight, notifies after completion, keeps stats', async () => {
      const p = await pair(await agent(v, 'A'), await agent(v, 'B'));
      p.b.grantRead('req-1', { peer: 'A', blockIds: ALL });
      const descs = disjoint(randomRuns(7, 24));
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
        assert.ok(ok, `run at ${d.localFirst} of region ${d.localRegion} arrived intact`);
      }
      const notes = (await notificationsOf(p.b, descs.length)).map((n) => n.message).sort();
      assert.deepEqual(notes, descs.map((_, i) => `n${i}`).sort());
      const stats = p.a.resetStats();
      assert.equal(stats.transferDuration.length, descs.length);
      assert.equal(stats.wireDuration.length, descs.length);
      for (const [i, w] of stats.wireDuration.entries()) assert.ok(w >= 0 && w <= stats.transferDuration[i]!);
      assert.equal(stats.numFailedTransfers, 0);
      assert.equal(
        stats.bytesTransferred.reduce((s, x) => s + x, 0),
        descs.reduce((s, d) => s + d.count * (d.localRegion === 0 ? BB : 2 * BB), 0),
      );
      assert.equal(p.a.getStats().transferDuration.length, 0);
      await p.close();
    });

    it('wakes a notification listener; a waiter resolves even when a poller released its handle first', async () => {
      const p = await pair(await agent(v, 'A'), await agent(v, 'B'));
      let woken = 0;
      p.b.onNotification(() => woken++);
      p.b.grantRead('req-w', { peer: 'A', blockIds: ALL });
      const run = { localRegion: 0, localFirst: 1, remoteRegion: 0, remoteFirst: 1, count: 4 };
      const h = p.a.read(p.remote, [run], { grantKey: 'req-w', notification: 'read-done' });
      const waited = p.a.waitFor(h);
      // Poll as a connector does and release the handle in the very tick it is seen settled.
      await until(() => {
        if (p.a.status(h).state === 'PROC') return false;
        p.a.releaseHandle(h);
        return true;
      }, 'the READ to settle');
      assert.equal((await waited).state, 'DONE');
      await until(() => woken > 0, "the listener to hear of B's notification");
      assert.deepEqual(
        p.b.drainNotifications().map((n) => n.message),
        ['read-done'],
      );
      p.b.onNotification(null);
      await p.close();
    });

    it('coalesces block lists into contiguous runs and WRITEs them into granted blocks', async () => {
      const p = await pair(await agent(v, 'A'), await agent(v, 'B'));
      p.b.grantWrite('push-1', { peer: 'A', blockIds: [50, 51, 52, 53, 70, 90], regions: [0] });
      await p.b.settled();
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
      assert.ok(blocksEqual(p.ra[0]!.bytes, 9, p.rb[0]!.bytes, 70, 1, BB));
      assert.ok(blocksEqual(p.ra[0]!.bytes, 10, p.rb[0]!.bytes, 90, 1, BB));
      assert.equal(p.a.getStats().numDescriptors[0], 3);
      assert.deepEqual(await notificationsOf(p.b, 1), [{ agent: 'A-rank0', message: 'pushed' }]);
      await p.close();
    });

    it('refuses READ without a live grant and WRITE outside the grant, leaving memory untouched', async () => {
      const p = await pair(await agent(v, 'A', { grantWaitMs: 0 }), await agent(v, 'B', { grantWaitMs: 0 }));
      const before = Buffer.from(p.ra[0]!.bytes.subarray(0, 20 * BB));
      const d = [{ localRegion: 0, localFirst: 10, remoteRegion: 0, remoteFirst: 10, count: 2 }];
      const noGrant = await p.a.waitFor(p.a.read(p.remote, d));
      assert.equal(noGrant.state, 'ERR');
      assert.deepEqual(noGrant.failedBlockIds, [10, 11]);
      p.b.grantRead('old', { blockIds: [10, 11], expiresAt: Date.now() - 1 });
      p.b.grantRead('other-peer', { blockIds: [10, 11], peer: 'Z' });
      await p.b.settled();
      assert.equal((await p.a.waitFor(p.a.read(p.remote, d, { grantKey: 'old' }))).state, 'ERR');
      assert.equal((await p.a.waitFor(p.a.read(p.remote, d))).state, 'ERR', 'a grant for another peer');
      p.b.grantRead('ok', { blockIds: [10, 11], peer: 'A' });
      await p.b.settled();
      assert.equal((await p.a.waitFor(p.a.read(p.remote, d, { grantKey: 'ok' }))).state, 'DONE');
      assert.ok(p.b.revokeGrant('ok'));
      assert.equal(p.b.revokeGrant('ok'), false);
      await p.b.settled();
      const revoked = await p.a.waitFor(p.a.read(p.remote, d, { grantKey: 'ok' }));
      assert.match(revoked.reason ?? '', /no live read grant 'ok'/);
      p.b.grantWrite('w', { blockIds: [5] });
      await p.b.settled();
      const w = await p.a.waitFor(
        p.a.write(p.remote, [{ localRegion: 0, localFirst: 1, remoteRegion: 0, remoteFirst: 5, count: 2 }]),
      );
      assert.equal(w.state, 'ERR');
      assert.deepEqual(w.failedBlockIds, [1, 2]);
      assert.equal(p.a.getStats().numFailedTransfers, 5);
      assert.ok(before.subarray(0, 10 * BB).equals(p.ra[0]!.bytes.subarray(0, 10 * BB)));
      await p.close();
    });

    it('bounds-checks descriptors against local and remote regions, synchronously', async () => {
      const p = await pair(await agent(v, 'A'), await agent(v, 'B'));
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

    it('fails exactly the block whose bytes differ from their checksum, as READ target and as WRITE target', async () => {
      // The peers that send carry the test hook, so they run on this thread; the agent under test receives.
      const reader = await agent(v, 'A');
      const server = await hooked(v, 'B', { outgoing: (view, run) => flipByte(view, run, 33) });
      const p = await pair(reader, server);
      p.b.grantRead('g', { blockIds: ALL });
      const r = await p.a.waitFor(
        p.a.read(p.remote, [{ localRegion: 0, localFirst: 60, remoteRegion: 0, remoteFirst: 30, count: 6 }]),
      );
      assert.equal(r.state, 'ERR');
      assert.deepEqual(r.failedBlockIds, [63]);
      assert.ok(blocksEqual(p.ra[0]!.bytes, 60, p.rb[0]!.bytes, 30, 3, BB), 'blocks before it are valid');

      const sender = await hooked(v, 'S', { outgoing: (view, run) => flipByte(view, run, 21) });
      sender.registerMemory(regions(9));
      sender.addRemoteAgent(reader.metadata());
      reader.grantWrite('w', { blockIds: ALL });
      await reader.settled();
      const w = await sender.waitFor(
        sender.write(
          reader.name,
          [{ localRegion: 0, localFirst: 20, remoteRegion: 0, remoteFirst: 100, count: 4 }],
          {
            notification: 'never',
          },
        ),
      );
      assert.equal(w.state, 'ERR');
      assert.deepEqual(w.failedBlockIds, [21]);
      // Notifications on one connection arrive in order: 'never' would come before 'after'.
      await sender.sendNotification(reader.name, 'after');
      const notes = await notificationsOf(reader, 1);
      assert.deepEqual(
        notes.map((n) => n.message),
        ['after'],
        'a failed WRITE delivers no notification',
      );
      await Promise.all([p.close(), sender.close()]);
    });

    it('refuses a peer with the wrong shared secret and accepts the right one', async () => {
      const good = await pair(
        await agent(v, 'A', { secret: 's3cret' }),
        await agent(v, 'B', { secret: 's3cret' }),
      );
      good.b.grantRead('g', { blockIds: [1] });
      const d = [{ localRegion: 0, localFirst: 1, remoteRegion: 0, remoteFirst: 1, count: 1 }];
      assert.equal((await good.a.waitFor(good.a.read(good.remote, d, { grantKey: 'g' }))).state, 'DONE');
      await good.close();
      const bad = await pair(
        await agent(v, 'A', { secret: 'wrong' }),
        await agent(v, 'B', { secret: 's3cret' }),
      );
      bad.b.grantRead('g', { blockIds: [1] });
      const s = await bad.a.waitFor(bad.a.read(bad.remote, d, { grantKey: 'g' }));
      assert.equal(s.state, 'ERR');
      assert.match(s.reason ?? '', /authentication failed/);
      await assert.rejects(bad.a.sendNotification(bad.remote, 'x'), /authentication failed/);
      await bad.a.settled();
      assert.equal(bad.a.getStats().numFailedNotifications, 1);
      await bad.close();
    });

    it('fails transfers in bounded time when the peer is gone or never answers', async () => {
      const p = await pair(
        await agent(v, 'A', { connectTimeoutMs: 300, transferTimeoutMs: 2000 }),
        await agent(v, 'B'),
      );
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
        endpoints: {
          ...p.b.metadata().endpoints,
          tcp: { host: '127.0.0.1', port: typeof addr === 'object' && addr ? addr.port : 0 },
        },
      };
      const t0 = Date.now();
      const mute = await p.a.waitFor(p.a.read(p.a.addRemoteAgent(meta), d));
      assert.equal(mute.state, 'ERR');
      assert.match(mute.reason ?? '', /timed out/);
      assert.ok(Date.now() - t0 < 2500, `failed after ${Date.now() - t0} ms`);
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => silent.close(() => r()));
      await p.a.close();
    });
  });
}
