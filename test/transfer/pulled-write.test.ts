/**
 * Pulled WRITEs (protocol 5, docs/transfer.md#pulled-writes): over shm, a WRITE of recorded
 * blocks is leased to the receiver in the sender's lease table and the receiver copies it the
 * way it serves a direct READ. Checked here: the pull happens and moves the right bytes (and
 * the notification), everything the table cannot decide falls back to sending the blocks
 * with the same outcome as before, and the lease ends with the WRITE.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import {
  InThreadTransferAgent,
  ThreadedTransferAgent,
  type TransferAgent,
} from '../../src/transfer/index.ts';
import { SLOTS } from '../../src/transfer/lease-table.ts';
import type { MemoryRegion } from '../../src/transfer/types.ts';
import { mappableSharedMemory } from '../../src/util/shared-memory.ts';
import { blocksEqual, regionPair } from './helpers/pattern.ts';
import { finished, until } from './helpers/wait.ts';

setLogLevel('silent');

const BB = 16 << 10;
const N = 32;
const skip = mappableSharedMemory ? false : 'no native addon: KV memory cannot be mapped by a peer';

const regions = (seed: number): MemoryRegion[] => regionPair(BB, N, seed);

const DESCS = [
  { localRegion: 0, localFirst: 2, remoteRegion: 0, remoteFirst: 20, count: 5 },
  { localRegion: 1, localFirst: 2, remoteRegion: 1, remoteFirst: 20, count: 5 },
  { localRegion: 0, localFirst: 9, remoteRegion: 0, remoteFirst: 8, count: 1 },
  { localRegion: 1, localFirst: 9, remoteRegion: 1, remoteFirst: 8, count: 1 },
];
const SENT = [2, 3, 4, 5, 6, 9];

type Make = (engineId: string, backend: 'SHM' | 'TCP') => Promise<TransferAgent>;

function landed(src: MemoryRegion[], dst: MemoryRegion[]): boolean {
  return DESCS.every((d) =>
    blocksEqual(
      src[d.localRegion]!.bytes,
      d.localFirst,
      dst[d.remoteRegion]!.bytes,
      d.remoteFirst,
      d.count,
      BB,
    ),
  );
}

/** A sender and a receiver that granted it every block, connected (the handshake is what enables pulls). */
async function pair(make: Make, backend: 'SHM' | 'TCP' = 'SHM') {
  const src = regions(31);
  const dst = regions(41);
  const a = await make('A', backend);
  const b = await make('B', backend);
  a.registerMemory(src);
  b.registerMemory(dst);
  a.addRemoteAgent(b.metadata());
  b.grantWrite('w', { blockIds: Array.from({ length: N }, (_, i) => i), peer: 'A-rank0' });
  await b.settled();
  await a.sendNotification('B-rank0', 'hello');
  await until(() => b.drainNotifications().length > 0, 'the connection to come up');
  a.resetStats();
  return { a, b, src, dst, close: () => Promise.all([a.close(), b.close()]) };
}

const kinds: [string, Make][] = [
  [
    'in-thread',
    (engineId, backend) => InThreadTransferAgent.create({ engineId, backends: [backend], grantWaitMs: 0 }),
  ],
  [
    'threaded',
    (engineId, backend) => ThreadedTransferAgent.create({ engineId, backends: [backend], grantWaitMs: 0 }),
  ],
];

for (const [kind, make] of kinds) {
  describe(`pulled WRITEs, ${kind} agents`, { skip }, () => {
    it('the receiver pulls a WRITE of recorded blocks: the bytes and the notification arrive', async () => {
      const p = await pair(make);
      try {
        p.a.recordBlocks(SENT);
        const s = await finished(p.a, p.a.write('B-rank0', DESCS, { notification: 'pulled' }));
        assert.equal(s.state, 'DONE', s.reason);
        assert.ok(landed(p.src, p.dst));
        await p.a.settled();
        assert.equal(p.a.getStats().numPulledWrites, 1, 'the receiver copied it itself');
        await until(() => p.b.drainNotifications().some((n) => n.message === 'pulled'), 'the notification');
      } finally {
        await p.close();
      }
    });

    it('sends the blocks when they are not all recorded', async () => {
      const p = await pair(make);
      try {
        p.a.recordBlocks([2, 3, 4, 5, 6]);
        const s = await finished(p.a, p.a.write('B-rank0', DESCS));
        assert.equal(s.state, 'DONE', s.reason);
        assert.ok(landed(p.src, p.dst));
        await p.a.settled();
        assert.equal(p.a.getStats().numPulledWrites, 0);
      } finally {
        await p.close();
      }
    });

    it('falls back to sending when the lease table has no slot for the pull', async () => {
      const p = await pair(make);
      try {
        p.a.recordBlocks(SENT);
        // Every slot of block 4 taken by other READ grants: the pull's lease is not in the table.
        for (let i = 0; i < SLOTS; i++) p.a.grantRead(`other${i}`, { blockIds: [4] });
        await p.a.settled();
        const s = await finished(p.a, p.a.write('B-rank0', DESCS));
        assert.equal(s.state, 'DONE', s.reason);
        assert.ok(landed(p.src, p.dst));
        await p.a.settled();
        assert.equal(p.a.getStats().numPulledWrites, 0, 'declined, then sent');
      } finally {
        await p.close();
      }
    });

    it('a block changed after its record: the pull is declined and the sent block fails, alone', async () => {
      const p = await pair(make);
      try {
        p.a.recordBlocks(SENT);
        await p.a.settled();
        const r = p.src[1]!;
        r.bytes[5 * BB + 7] = r.bytes[5 * BB + 7]! ^ 1;
        const s = await finished(p.a, p.a.write('B-rank0', DESCS));
        assert.equal(s.state, 'ERR');
        assert.deepEqual(s.failedBlockIds, [5]);
        assert.deepEqual(s.failed, [{ region: 1, blockIds: [5] }]);
        await p.a.settled();
        assert.equal(p.a.getStats().numPulledWrites, 0);
      } finally {
        await p.close();
      }
    });

    it('the lease ends with the WRITE: its key cannot be read afterwards', async () => {
      const p = await pair(make);
      try {
        p.a.recordBlocks(SENT);
        const s = await finished(p.a, p.a.write('B-rank0', DESCS));
        assert.equal(s.state, 'DONE', s.reason);
        // B's own connection to A, up before the READ (a READ on a new connection asks A).
        p.b.addRemoteAgent(p.a.metadata());
        await p.b.sendNotification('A-rank0', 'hello');
        await until(() => p.a.drainNotifications().length > 0, 'the connection to come up');
        // The first pulled WRITE of this agent is transfer 1 (the notification is not a transfer).
        const back = await finished(
          p.b,
          p.b.read(
            'A-rank0',
            [{ localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: 2, count: 1 }],
            {
              grantKey: 'kvconnect-write-pull:1',
            },
          ),
        );
        assert.equal(back.state, 'ERR', 'no lease, no grant: refused');
        assert.match(back.reason ?? '', /no read grant/);
      } finally {
        await p.close();
      }
    });

    it('a WRITE refused by the receiver (no write grant) fails as before', async () => {
      const p = await pair(make);
      try {
        p.b.revokeGrant('w');
        await p.b.settled();
        p.a.recordBlocks(SENT);
        const s = await finished(p.a, p.a.write('B-rank0', DESCS));
        assert.equal(s.state, 'ERR');
        assert.match(s.reason ?? '', /WRITE refused/);
      } finally {
        await p.close();
      }
    });
  });
}

describe('pulled WRITEs need shm', () => {
  it('over tcp a WRITE of recorded blocks is sent', async () => {
    const p = await pair(
      (engineId, backend) => InThreadTransferAgent.create({ engineId, backends: [backend] }),
      'TCP',
    );
    try {
      p.a.recordBlocks(SENT);
      const s = await finished(p.a, p.a.write('B-rank0', DESCS));
      assert.equal(s.state, 'DONE', s.reason);
      assert.ok(landed(p.src, p.dst));
      assert.equal(p.a.getStats().numPulledWrites, 0);
    } finally {
      await p.close();
    }
  });
});
