/**
 * Transfers whose peer stalls, goes silent or loses its permission mid-transfer, over a real
 * TCP path through the fault relay. What must hold: a stalled transfer ends in ERR within
 * `transferTimeoutMs`; no byte lands in local memory after the transfer was reported ended
 * (the blocks may already belong to another request); a dead connection is replaced by a
 * fresh one for the next transfer; an owner that revokes a grant stops serving it, and a
 * receiver that revokes a write grant stops accepting it, even in the middle of a frame.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { waitUntil } from '../helpers/wait-until.ts';
import { all, closeRelayedAgents, settled, throughRelay, whole } from './helpers/relayed-agents.ts';

setLogLevel('silent');

after(closeRelayedAgents);

describe('a transfer whose peer stalls', () => {
  it('stalled in the middle of a frame: ERR within the timeout, nothing lands after it, the next READ reconnects', async () => {
    const BB = 64 << 10;
    let stall = true;
    const { a, b, ra, rb, relay, remote } = await throughRelay(
      BB,
      16,
      (dir, h, _p, index) =>
        stall && dir === 'down' && h.type === 'data' && index >= 4
          ? { action: 'hold', forwardBytes: BB / 2 }
          : { action: 'forward' },
      { transferTimeoutMs: 400 },
    );
    b.grantRead('g1', { blockIds: all(16) });
    const t0 = performance.now();
    const s = await a.waitFor(a.read(remote, whole(16), { grantKey: 'g1' }));
    const elapsed = performance.now() - t0;
    assert.equal(s.state, 'ERR');
    assert.match(s.reason ?? '', /timed out/);
    assert.ok(elapsed < 400 + 2000, `ERR after ${elapsed.toFixed(0)} ms, bounded by transferTimeoutMs`);
    assert.ok(!s.failedBlockIds.includes(0), 'blocks that arrived before the stall stay valid');
    const snapshot = Buffer.from(ra.bytes);
    stall = false;
    relay.set('down', 'flow');
    await settled(relay);
    assert.ok(Buffer.from(ra.bytes).equals(snapshot), 'no byte landed after the READ was reported failed');

    b.grantRead('g2', { blockIds: all(16) });
    const again = await a.waitFor(a.read(remote, whole(16), { grantKey: 'g2' }));
    assert.equal(again.state, 'DONE', again.reason);
    assert.ok(Buffer.from(ra.bytes).equals(Buffer.from(rb.bytes)));
    assert.equal(relay.connections, 2, 'the stalled connection was replaced');
  });

  it('a partition after the handshake (nothing arrives at all): ERR within the timeout, then a fresh connection', async () => {
    const BB = 16 << 10;
    const { a, b, ra, rb, relay, remote } = await throughRelay(BB, 8, () => ({ action: 'forward' }), {
      transferTimeoutMs: 300,
    });
    b.grantRead('warm', { blockIds: [0] });
    const warm = await a.waitFor(
      a.read(remote, [{ localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: 0, count: 1 }], {
        grantKey: 'warm',
      }),
    );
    assert.equal(warm.state, 'DONE', 'the connection works before the partition');
    relay.set('both', 'drop');
    b.grantRead('p1', { blockIds: all(8) });
    const t0 = performance.now();
    const s = await a.waitFor(a.read(remote, whole(8), { grantKey: 'p1' }));
    assert.equal(s.state, 'ERR');
    assert.deepEqual(s.failedBlockIds, all(8));
    assert.ok(performance.now() - t0 < 300 + 2000, 'bounded by transferTimeoutMs');
    relay.set('both', 'flow');
    b.grantRead('p2', { blockIds: all(8) });
    const again = await a.waitFor(a.read(remote, whole(8), { grantKey: 'p2' }));
    assert.equal(again.state, 'DONE', again.reason);
    assert.ok(Buffer.from(ra.bytes).equals(Buffer.from(rb.bytes)));
    assert.equal(relay.connections, 2, 'the silent connection was closed and a new one opened');
  });

  it('the owner revokes the grant while serving: it stops reading its blocks, and the reader accepts nothing sent after', async () => {
    const BB = 1 << 20;
    const N = 96;
    let produced = 0;
    let hold = true;
    const { a, b, ra, rb, relay, remote } = await throughRelay(
      BB,
      N,
      (dir, h, _p, index) =>
        hold && dir === 'down' && h.type === 'data' && index >= 3
          ? { action: 'hold' }
          : { action: 'forward' },
      { transferTimeoutMs: 60_000 },
      {},
      {
        outgoing: (view) => {
          produced++;
          return view;
        },
      },
    );
    const original = Buffer.from(rb.bytes);
    b.grantRead('r', { blockIds: all(N) });
    const pending = a.waitFor(a.read(remote, whole(N), { grantKey: 'r' }));
    // Until the kernel buffers and the relay are full and B's sender waits for them to drain.
    let last = -1;
    await waitUntil(
      "B's sender to block on back-pressure",
      () => {
        const same = produced === last && produced > 2;
        last = produced;
        return same;
      },
      { intervalMs: 200 },
    );
    const producedAtRevoke = produced;
    assert.ok(
      producedAtRevoke < N,
      `some chunks were still unsent at the revocation (${producedAtRevoke}/${N})`,
    );
    b.revokeGrant('r');
    rb.bytes.fill(0xee); // B reuses the blocks for something else
    hold = false;
    relay.set('down', 'flow');
    const s = await pending;
    assert.equal(s.state, 'ERR', 'a READ cut short by a revocation is not DONE');
    assert.equal(produced, producedAtRevoke, 'B read none of its blocks after revoking the grant');
    const failed = new Set(s.failedBlockIds);
    for (let i = 0; i < N; i++) {
      if (failed.has(i)) continue;
      const got = ra.bytes.subarray(i * BB, (i + 1) * BB);
      assert.ok(
        Buffer.from(got).equals(original.subarray(i * BB, (i + 1) * BB)),
        `block ${i} accepted with foreign content`,
      );
    }
    await settled(relay);
  });

  it('the receiver revokes a write grant in the middle of a frame: the rest of that WRITE never lands', async () => {
    const BB = 256 << 10;
    const N = 8;
    let hold = true;
    let dataFrames = 0;
    const { a, b, rb, relay, remote } = await throughRelay(
      BB,
      N,
      (dir, h) =>
        hold && dir === 'up' && h.type === 'data' && ++dataFrames === 3
          ? { action: 'hold', forwardBytes: BB / 4 }
          : { action: 'forward' },
      { transferTimeoutMs: 60_000 },
    );
    rb.bytes.fill(0);
    b.grantWrite('w', { blockIds: all(N) });
    const pending = a.waitFor(a.write(remote, whole(N)));
    // The third frame (block 2 with one block per frame) is a quarter landed in B's memory.
    await waitUntil('the partial frame to land in B', () => rb.bytes[2 * BB + 8] !== 0);
    b.revokeGrant('w');
    const snapshot = Buffer.from(rb.bytes);
    hold = false;
    relay.set('up', 'flow');
    const s = await pending;
    assert.equal(s.state, 'ERR');
    await settled(relay);
    assert.ok(Buffer.from(rb.bytes).equals(snapshot), 'nothing landed in B after the grant was revoked');
  });

  it('cut in the middle of a frame (FIN after half a payload): ERR at once, the partial blocks failed, the next READ reconnects', async () => {
    const BB = 64 << 10;
    let cut = true;
    const { a, b, ra, rb, relay, remote } = await throughRelay(
      BB,
      8,
      (dir, h, _p, index) =>
        cut && dir === 'down' && h.type === 'data' && index >= 4
          ? { action: 'cut', forwardBytes: BB / 2 }
          : { action: 'forward' },
      { transferTimeoutMs: 60_000 },
    );
    b.grantRead('c1', { blockIds: all(8) });
    const s = await a.waitFor(a.read(remote, whole(8), { grantKey: 'c1' }));
    assert.equal(s.state, 'ERR');
    assert.match(s.reason ?? '', /connection to .* lost/, 'the lost connection, not the 60 s timeout');
    assert.ok(s.failedBlockIds.includes(1), 'the half-received block failed');
    assert.ok(!s.failedBlockIds.includes(0), 'the block before it stayed valid');
    cut = false;
    b.grantRead('c2', { blockIds: all(8) });
    const again = await a.waitFor(a.read(remote, whole(8), { grantKey: 'c2' }));
    assert.equal(again.state, 'DONE', again.reason);
    assert.ok(Buffer.from(ra.bytes).equals(Buffer.from(rb.bytes)));
    assert.equal(relay.connections, 2);
  });

  it('a link with 100 ms of delay each way: slower, DONE, every byte right', async () => {
    const BB = 64 << 10;
    const { a, b, ra, rb, relay, remote } = await throughRelay(BB, 16, () => ({ action: 'forward' }), {
      transferTimeoutMs: 60_000,
    });
    relay.delay('both', 100);
    b.grantRead('d', { blockIds: all(16) });
    const t0 = performance.now();
    const s = await a.waitFor(a.read(remote, whole(16), { grantKey: 'd' }));
    assert.equal(s.state, 'DONE', s.reason);
    assert.ok(performance.now() - t0 >= 200 - 5, 'a round trip through the delayed link');
    assert.ok(Buffer.from(ra.bytes).equals(Buffer.from(rb.bytes)));
  });
});
