/**
 * The transfer benches' JavaScript warm-up (bench/_transfer-warmup.ts) and the warm-up curve
 * of `npm run bench -- transfer-warmup` (bench/_transfer-warmup-curve.ts), run for real with a
 * few transfers: a peer process, an agent here, shm and tcp.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { kvRegions, requestLayout, startPeer } from '../../bench/_transfer-peer.ts';
import { warmUpPair, warmupDescs } from '../../bench/_transfer-warmup.ts';
import { runCurve } from '../../bench/_transfer-warmup-curve.ts';
import { InThreadTransferAgent } from '../../src/transfer/index.ts';

describe('transfer bench warm-up', () => {
  test("warmupDescs keeps one block from each region's first run", () => {
    const { descs, layout } = requestLayout(2, 8, 4096);
    const small = warmupDescs(descs);
    assert.equal(small.length, layout.regions);
    assert.deepEqual(
      small.map((d) => d.localRegion),
      Array.from({ length: layout.regions }, (_, i) => i),
    );
    for (const d of small) {
      assert.equal(d.count, 1);
      const first = descs.find((x) => x.localRegion === d.localRegion)!;
      assert.deepEqual({ ...first, count: 1 }, d);
    }
  });

  for (const backend of ['SHM', 'TCP'] as const) {
    // The peer's agent on its loop, and in a worker thread (as the bench's threaded pairs run it).
    for (const peerThread of [false, true]) {
      const where = peerThread ? ', the peer in a thread' : '';
      test(`warmUpPair runs its rounds of transfers over ${backend}${where} and the agent counts them`, async () => {
        const { layout, descs } = requestLayout(2, 8, 4096);
        const peer = await startPeer(backend, layout, 64 * 1024, {}, peerThread);
        const agent = await InThreadTransferAgent.create({
          engineId: 'bench',
          agentName: 'bench',
          backends: [backend],
        });
        try {
          agent.registerMemory(kvRegions(layout));
          const remote = agent.addRemoteAgent(peer.meta);
          assert.equal(await warmUpPair(agent, remote, peer, descs, 0), 0);
          const ms = await warmUpPair(agent, remote, peer, descs, 3);
          assert.ok(ms > 0, `took ${ms} ms`);
          const stats = agent.getStats();
          // 3 rounds × (READ, WRITE, WRITE hashed of one block per region, one-block READ and WRITE).
          assert.equal(stats.transferDuration.length, 15);
          assert.equal(stats.numFailedTransfers, 0);
          const blocks = stats.bytesTransferred.reduce((a, b) => a + b, 0) / layout.blockBytes;
          assert.equal(blocks, 3 * (3 * layout.regions + 2));
        } finally {
          await agent.close();
          await peer.stop();
        }
      });
    }

    test(`runCurve gives a p50 per window over ${backend}`, async () => {
      const curve = await runCurve(backend, 3, 4);
      for (const kind of ['read', 'write'] as const) {
        assert.equal(curve[kind].length, 3, kind);
        for (const us of curve[kind]) assert.ok(Number.isFinite(us) && us > 0, `${kind} ${us}`);
      }
    });
  }
});
