/**
 * Grant ends and timeouts on the same-host (shm) paths, where no block bytes cross the socket:
 * the receiver copies each chunk from the sender's mapped KV memory, or from its staging
 * ring. Only the frames that announce chunks (and the acks that free the sender's ring) go
 * through the fault relay, so holding acks makes a ring sender wait for ring space, and
 * holding the announcing frames makes the receiver's copies late. What must hold: an owner
 * whose read grant ends while chunks wait for ring space announces none of them afterwards
 * (they would carry checksums of another request's data); chunks of mapped KV announced
 * before the grant ended and copied after the owner reused the blocks fail verification; a
 * receiver whose write grant ends copies nothing more; a READ that timed out copies nothing
 * when its late frames arrive.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import type { TransferAgentOptions } from '../../src/transfer/index.ts';
import { mappableSharedMemory } from '../../src/util/shared-memory.ts';
import type { Direction, FrameHook } from '../helpers/fault-relay.ts';
import { waitUntil } from '../helpers/wait-until.ts';
import { fillPattern } from '../transfer/helpers/pattern.ts';
import { all, closeRelayedAgents, settled, throughRelay, whole } from './helpers/relayed-agents.ts';

setLogLevel('silent');
after(closeRelayedAgents);

const BB = 1 << 20;

const paths = [
  {
    name: 'from mapped KV memory',
    options: { backends: ['SHM'], offerKvMapping: true } as Partial<TransferAgentOptions>,
    via: 'src' as const,
    skip: mappableSharedMemory ? false : 'no native addon: KV memory cannot be mapped',
  },
  {
    name: 'through the staging ring',
    options: { backends: ['SHM'], offerKvMapping: false, ringBytes: 4 * BB } as Partial<TransferAgentOptions>,
    via: 'ring' as const,
    skip: false,
  },
];

interface Controls {
  /** Chunks announced per direction: one per `data` frame, one per part of a `mapped` frame. */
  readonly seen: Record<Direction, number>;
  /** Where the announced chunks' bytes were: 'src' (mapped KV), 'ring' or 'payload'. */
  readonly vias: Set<string>;
  holdAcks: boolean;
  /** Hold the frames that announce chunks in that direction from the one whose first chunk has this index (1-based) on. */
  readonly holdDataFrom: Record<Direction, number>;
  readonly hook: FrameHook;
}

/**
 * Counts announced chunks per direction and lets a test hold acks (up) or the frames that
 * announce chunks (either way). Mapped KV is announced several chunks per `mapped` frame (up
 * to 8 MiB), the ring one chunk per `data` frame.
 */
function controls(): Controls {
  const c: Controls = {
    seen: { up: 0, down: 0 },
    vias: new Set(),
    holdAcks: false,
    holdDataFrom: { up: Number.POSITIVE_INFINITY, down: Number.POSITIVE_INFINITY },
    hook: (dir, h) => {
      if (h.type === 'ack' && c.holdAcks) return { action: 'hold' };
      if (h.type !== 'data' && h.type !== 'mapped') return { action: 'forward' };
      const first = c.seen[dir] + 1;
      c.seen[dir] += h.type === 'mapped' ? h.parts.length : 1;
      c.vias.add(h.type === 'mapped' ? 'src' : h.ring ? 'ring' : 'payload');
      return first >= c.holdDataFrom[dir] ? { action: 'hold' } : { action: 'forward' };
    },
  };
  return c;
}

/** Waits until `read()` stops changing (the sender waits for acks that are held). */
async function stable(what: string, read: () => number): Promise<number> {
  let last = -1;
  return waitUntil(
    what,
    () => {
      const now = read();
      const same = now === last && now > 0;
      last = now;
      return same ? now : null;
    },
    { intervalMs: 200 },
  );
}

for (const path of paths) {
  /** A (reader/writer) and B (owner) over this path, through the relay that `c` controls. */
  const relayed = (n: number, c: Controls, transferTimeoutMs: number) =>
    throughRelay(BB, n, c.hook, { ...path.options, transferTimeoutMs }, path.options);

  describe(`shm ${path.name}: grant ends and timeouts`, { skip: path.skip }, () => {
    // Only ring chunks wait (for ring space, freed by acks); mapped KV is announced without acks or a window.
    if (path.via === 'ring')
      it('the owner revokes a READ grant while chunks wait for acks: it announces none of them afterwards', async () => {
        const N = 32;
        const c = controls();
        c.holdAcks = true;
        const { a, b, ra, rb, relay, remote } = await relayed(N, c, 60_000);
        const original = Buffer.from(rb.bytes);
        b.grantRead('r', { blockIds: all(N) });
        const pending = a.waitFor(a.read(remote, whole(N), { grantKey: 'r' }));
        const announced = await stable("B's sender to wait for acks", () => c.seen.down);
        assert.ok(announced < N, `chunks were still waiting at the revocation (${announced}/${N} sent)`);
        b.revokeGrant('r');
        fillPattern(rb.bytes, BB, 0x5eed); // B reuses the blocks for another request
        c.holdAcks = false;
        relay.set('up', 'flow');
        const s = await pending;
        assert.equal(s.state, 'ERR');
        assert.match(s.reason ?? '', /READ aborted/);
        await settled(relay);
        assert.equal(c.seen.down, announced, 'no chunk was announced after the revocation');
        assert.deepEqual([...c.vias], [path.via], `the chunks went ${path.via}`);
        const failed = new Set(s.failedBlockIds);
        assert.ok(failed.size > 0);
        for (let i = 0; i < N; i++) {
          if (failed.has(i)) continue;
          const got = Buffer.from(ra.bytes.subarray(i * BB, (i + 1) * BB));
          assert.ok(
            got.equals(original.subarray(i * BB, (i + 1) * BB)),
            `block ${i} accepted with foreign content`,
          );
        }
      });

    // Only mapped KV is copied from the owner's memory after it was announced (ring chunks are copied into the ring first).
    if (path.via === 'src')
      it('the owner revokes a READ grant and reuses the blocks while its announcements are in flight: the late copies fail verification', async () => {
        const N = 24; // 1 MiB chunks: three mapped frames of 8
        const c = controls();
        c.holdDataFrom.down = 9;
        const { a, b, ra, rb, relay, remote } = await relayed(N, c, 60_000);
        const original = Buffer.from(rb.bytes);
        b.grantRead('r', { blockIds: all(N) });
        const pending = a.waitFor(a.read(remote, whole(N), { grantKey: 'r' }));
        const block = (r: Uint8Array, i: number) => Buffer.from(r.subarray(i * BB, (i + 1) * BB));
        await waitUntil('the first frame to land in A', () => block(ra.bytes, 7).equals(block(rb.bytes, 7)));
        b.revokeGrant('r');
        fillPattern(rb.bytes, BB, 0x5eed); // B reuses the blocks for another request
        c.holdDataFrom.down = Number.POSITIVE_INFINITY;
        relay.set('down', 'flow');
        const s = await pending;
        await settled(relay);
        assert.equal(s.state, 'ERR');
        assert.deepEqual([...c.vias], ['src'], 'the chunks went by mapped KV');
        assert.equal(c.seen.down, N, 'every chunk had been announced before the revocation');
        assert.deepEqual(
          s.failedBlockIds,
          Array.from({ length: N - 8 }, (_, i) => 8 + i),
          'exactly the chunks copied after the reuse failed',
        );
        for (let i = 0; i < 8; i++)
          assert.ok(block(ra.bytes, i).equals(original.subarray(i * BB, (i + 1) * BB)));
      });

    it('the receiver revokes a write grant while frames are in flight: it copies nothing more of that WRITE', async () => {
      const N = 24; // 1 MiB chunks: three mapped frames of 8, or 24 ring frames
      const c = controls();
      c.holdDataFrom.up = 3;
      const { a, b, ra, rb, relay, remote } = await relayed(N, c, 60_000);
      b.grantWrite('w', { blockIds: all(N) });
      const pending = a.waitFor(a.write(remote, whole(N)));
      const block = (r: Uint8Array, i: number) => Buffer.from(r.subarray(i * BB, (i + 1) * BB));
      await waitUntil('the first two chunks to land in B', () =>
        block(rb.bytes, 1).equals(block(ra.bytes, 1)),
      );
      b.revokeGrant('w');
      const snapshot = Buffer.from(rb.bytes);
      c.holdDataFrom.up = Number.POSITIVE_INFINITY;
      relay.set('up', 'flow');
      const s = await pending;
      assert.equal(s.state, 'ERR');
      await settled(relay);
      assert.ok(c.seen.up > 2, 'the held chunks did reach B');
      assert.deepEqual([...c.vias], [path.via]);
      assert.ok(
        Buffer.from(rb.bytes).equals(snapshot),
        'nothing was copied into B after the grant was revoked',
      );
    });

    it('a READ that timed out: its late chunks are not copied, and the next READ on the connection is DONE', async () => {
      const N = 24; // 1 MiB chunks: three mapped frames of 8, or 24 ring frames
      const c = controls();
      c.holdDataFrom.down = 3;
      const { a, b, ra, rb, relay, remote } = await relayed(N, c, 400);
      b.grantRead('t1', { blockIds: all(N) });
      const t0 = performance.now();
      const s = await a.waitFor(a.read(remote, whole(N), { grantKey: 't1' }));
      assert.equal(s.state, 'ERR');
      assert.match(s.reason ?? '', /timed out/);
      assert.ok(performance.now() - t0 < 400 + 2000, 'bounded by transferTimeoutMs');
      assert.ok(!s.failedBlockIds.includes(0), 'chunks copied before the stall stay valid');
      const snapshot = Buffer.from(ra.bytes);
      fillPattern(rb.bytes, BB, 0x5eed);
      c.holdDataFrom.down = Number.POSITIVE_INFINITY;
      relay.set('down', 'flow');
      await settled(relay);
      assert.ok(Buffer.from(ra.bytes).equals(snapshot), 'no late chunk was copied into A');
      b.grantRead('t2', { blockIds: all(N) });
      const again = await a.waitFor(a.read(remote, whole(N), { grantKey: 't2' }));
      assert.equal(again.state, 'DONE', again.reason);
      assert.ok(Buffer.from(ra.bytes).equals(Buffer.from(rb.bytes)));
    });
  });
}
