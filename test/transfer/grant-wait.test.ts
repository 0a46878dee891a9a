/**
 * A READ that names a grant the owner has not created yet waits for it (bounded in time
 * and per peer) instead of being refused; a READ naming a grant that ended is refused at once.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  type DescPair,
  InThreadTransferAgent,
  isRetryableCause,
  type TransferAgentOptions,
} from '../../src/transfer/index.ts';
import { blocksEqual, makeRegion } from './helpers/pattern.ts';
import { assertNoRingsLeftBehind } from './helpers/shm-files.ts';
import { until } from './helpers/wait.ts';

const BB = 4096;
const N = 64;
const D: DescPair[] = [{ localRegion: 0, localFirst: 10, remoteRegion: 0, remoteFirst: 20, count: 3 }];
const GRANTED = [20, 21, 22];

async function pair(backend: string, owner: Partial<TransferAgentOptions> = {}) {
  const a = await InThreadTransferAgent.create({ engineId: 'A', backends: [backend] });
  const b = await InThreadTransferAgent.create({ engineId: 'B', backends: [backend], ...owner });
  const ra = [makeRegion(0, BB, N, 1)];
  const rb = [makeRegion(0, BB, N, 2)];
  a.registerMemory(ra);
  b.registerMemory(rb);
  const remote = a.addRemoteAgent(b.metadata());
  return { a, b, ra, rb, remote, close: () => Promise.all([a.close(), b.close()]) };
}

assertNoRingsLeftBehind();

for (const backend of ['TCP', 'SHM']) {
  describe(`grant wait over ${backend}`, () => {
    it('serves a READ that arrived before its grant as soon as the grant appears', async () => {
      const p = await pair(backend);
      try {
        const h = p.a.read(p.remote, D, { grantKey: 'req-early', notification: 'req-early:1' });
        await until(() => p.b.waitingReads === 1 || p.a.status(h).state !== 'PROC', 'the READ to reach B');
        assert.equal(p.a.status(h).state, 'PROC', 'the READ was answered before any grant existed');
        // Hold the READ at B for at least 50 ms: that wait must not count as time on the wire.
        const parkedAt = performance.now();
        await until(() => performance.now() - parkedAt >= 50, '50 ms to pass');
        p.b.grantRead('req-early', { peer: 'A', blockIds: GRANTED, expiresAt: Date.now() + 30_000 });
        const st = await p.a.waitFor(h);
        assert.equal(st.state, 'DONE', st.reason);
        assert.ok(blocksEqual(p.ra[0]!.bytes, 10, p.rb[0]!.bytes, 20, 3, BB));
        assert.equal(p.b.waitingReads, 0);
        await until(() => p.b.drainNotifications().length === 1, 'the completion notification');
        const stats = p.a.getStats();
        assert.equal(stats.numFailedTransfers, 0);
        const [total = 0] = stats.transferDuration;
        const [wire = 0] = stats.wireDuration;
        assert.ok(
          total - wire >= 0.05,
          `held ${((total - wire) * 1000).toFixed(1)} ms of ${(total * 1000).toFixed(1)}`,
        );
        assert.ok(wire >= 0);
      } finally {
        await p.close();
      }
    });

    it('refuses after grantWaitMs when the grant never appears, as retryable', async () => {
      const p = await pair(backend, { grantWaitMs: 150 });
      try {
        const started = performance.now();
        const st = await p.a.waitFor(p.a.read(p.remote, D, { grantKey: 'never' }));
        const waited = performance.now() - started;
        assert.equal(st.state, 'ERR');
        assert.match(st.reason ?? '', /READ refused: no read grant 'never' yet \(waited 150 ms\)/);
        assert.ok(isRetryableCause(st.cause));
        assert.ok(waited >= 140, `refused after ${waited.toFixed(0)} ms, before the wait ended`);
        assert.deepEqual(st.failedBlockIds, [10, 11, 12]);
        assert.equal(p.b.waitingReads, 0);
      } finally {
        await p.close();
      }
    });

    it('refuses at once, not retryable, a READ naming a revoked or expired grant', async () => {
      const p = await pair(backend, { grantWaitMs: 10_000 });
      try {
        p.b.grantRead('done', { blockIds: GRANTED });
        assert.equal((await p.a.waitFor(p.a.read(p.remote, D, { grantKey: 'done' }))).state, 'DONE');
        assert.ok(p.b.revokeGrant('done'));
        const lapsesAt = Date.now() + 20;
        p.b.grantRead('lapsed', { blockIds: GRANTED, expiresAt: lapsesAt });
        await until(() => Date.now() > lapsesAt, "the lease of 'lapsed' to pass");
        for (const key of ['done', 'lapsed']) {
          const started = performance.now();
          const st = await p.a.waitFor(p.a.read(p.remote, D, { grantKey: key }));
          assert.equal(st.state, 'ERR');
          assert.match(
            st.reason ?? '',
            new RegExp(`no live read grant '${key}' \\(it was revoked or has expired\\)`),
          );
          assert.equal(isRetryableCause(st.cause), false);
          assert.ok(performance.now() - started < 2000, `${key}: refusal waited for the grant`);
        }
        assert.equal(p.b.waitingReads, 0);
      } finally {
        await p.close();
      }
    });

    it('refuses a waiting READ when its key is revoked, or when the grant does not cover it', async () => {
      const p = await pair(backend, { grantWaitMs: 10_000 });
      try {
        const dropped = p.a.read(p.remote, D, { grantKey: 'dropped' });
        const narrow = p.a.read(p.remote, D, { grantKey: 'narrow' });
        const stranger = p.a.read(p.remote, D, { grantKey: 'stranger' });
        await until(() => p.b.waitingReads === 3, 'three READs to wait');
        assert.equal(p.b.revokeGrant('dropped'), false);
        p.b.grantRead('narrow', { blockIds: [20, 21] });
        p.b.grantRead('stranger', { peer: 'Z', blockIds: GRANTED });
        const [d, n, s] = await Promise.all([dropped, narrow, stranger].map((h) => p.a.waitFor(h)));
        assert.match(d!.reason ?? '', /no live read grant 'dropped'/);
        assert.equal(isRetryableCause(d!.cause), false);
        assert.match(n!.reason ?? '', /read grant 'narrow' does not cover the requested blocks/);
        assert.match(s!.reason ?? '', /read grant 'stranger' does not cover the requested blocks/);
        assert.equal(p.b.waitingReads, 0);
      } finally {
        await p.close();
      }
    });

    it('bounds the READs one peer may have waiting, and frees them when the peer disconnects', async () => {
      const p = await pair(backend, { grantWaitMs: 10_000, maxWaitingReadsPerPeer: 2 });
      try {
        const first = p.a.read(p.remote, D, { grantKey: 'k1' });
        p.a.read(p.remote, D, { grantKey: 'k2' });
        await until(() => p.b.waitingReads === 2, 'two READs to wait');
        const third = await p.a.waitFor(p.a.read(p.remote, D, { grantKey: 'k3' }));
        assert.equal(third.state, 'ERR');
        assert.match(
          third.reason ?? '',
          /no read grant 'k3' yet, and A-rank0 already has 2 transfers waiting/,
        );
        assert.ok(isRetryableCause(third.cause));
        p.b.grantRead('k1', { blockIds: GRANTED });
        assert.equal((await p.a.waitFor(first)).state, 'DONE');
        assert.equal(p.b.waitingReads, 1);
        await p.a.close();
        await until(() => p.b.waitingReads === 0, "the departed peer's READ to be dropped");
      } finally {
        await p.close();
      }
    });

    it('with grantWaitMs 0 refuses an unknown grant at once, as retryable', async () => {
      const p = await pair(backend, { grantWaitMs: 0 });
      try {
        const st = await p.a.waitFor(p.a.read(p.remote, D, { grantKey: 'later' }));
        assert.equal(st.state, 'ERR');
        assert.ok(isRetryableCause(st.cause), st.reason);
        assert.equal(p.b.waitingReads, 0);
      } finally {
        await p.close();
      }
    });
  });
}

it('rejects a grantWaitMs that is not a duration', async () => {
  await assert.rejects(InThreadTransferAgent.create({ engineId: 'X', grantWaitMs: -1 }), /grantWaitMs/);
  await assert.rejects(
    InThreadTransferAgent.create({ engineId: 'X', grantWaitMs: Number.NaN }),
    /grantWaitMs/,
  );
});
