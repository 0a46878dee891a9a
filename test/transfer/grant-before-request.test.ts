/**
 * A grant made before the peer was told about the blocks holds when the peer's request
 * arrives, even when the agent reads the request first. With a ThreadedTransferAgent the
 * grant is a command on the thread's port and the request is on a socket: the thread can read
 * the socket first (here: it was busy while both arrived, and the socket had been readable
 * since before the grant). The agent then applies the grant commands queued on its port before
 * it refuses (AgentObserver.grantMissed; agent-thread-entry.ts). Found as a MoRIIO WRITE-mode
 * demo request that failed under load ("WRITE refused: no live write grant covers the
 * requested blocks", then a 30 s timeout on the decode side).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  type DescPair,
  InThreadTransferAgent,
  ThreadedTransferAgent,
  type TransferHandle,
} from '../../src/transfer/index.ts';
import { FAULTY_THREAD_ENTRY, STALL_PREFIX } from './helpers/agent-faults.ts';
import { blocksEqual, makeRegion } from './helpers/pattern.ts';
import { assertNoRingsLeftBehind } from './helpers/shm-files.ts';
import { notificationsOf } from './helpers/wait.ts';

const BB = 4096;
const N = 32;
/** Blocks 4–6 of the writer into blocks 10–12 of the receiver. */
const WRITE: DescPair[] = [{ localRegion: 0, localFirst: 4, remoteRegion: 0, remoteFirst: 10, count: 3 }];
const STALL = `${STALL_PREFIX}400`;

assertNoRingsLeftBehind();

describe('a grant made before the peer asks', () => {
  it('is applied when the request finds no grant (the host’s grantMissed), and only then', async () => {
    const writer = await InThreadTransferAgent.create({ engineId: 'W', backends: ['TCP'] });
    const receiver = await InThreadTransferAgent.create({ engineId: 'R', backends: ['TCP'] });
    const wr = [makeRegion(0, BB, N, 3)];
    const rr = [makeRegion(0, BB, N, 5)];
    writer.registerMemory(wr);
    receiver.registerMemory(rr);
    let queued: (() => void) | null = null;
    let misses = 0;
    receiver.observe({
      grantMissed: () => {
        misses++;
        const apply = queued;
        queued = null;
        apply?.();
        return apply !== null;
      },
    });
    const remote = writer.addRemoteAgent(receiver.metadata());
    try {
      // A grant the host holds back until the agent asks for it.
      queued = () => receiver.grantWrite('held-back', { blockIds: [10, 11, 12] });
      const first = await writer.waitFor(writer.write(remote, WRITE));
      assert.equal(first.state, 'DONE', first.reason);
      assert.ok(blocksEqual(rr[0]!.bytes, 10, wr[0]!.bytes, 4, 3, BB));
      assert.equal(misses, 1);
      // Covered by the grant now: no miss.
      const second = await writer.waitFor(writer.write(remote, WRITE));
      assert.equal(second.state, 'DONE', second.reason);
      assert.equal(misses, 1, 'a covered WRITE asked the host');
      // Nothing queued: the WRITE is refused, after one more ask.
      receiver.revokeGrant('held-back');
      const third = await writer.waitFor(writer.write(remote, WRITE));
      assert.equal(third.state, 'ERR');
      assert.match(third.reason ?? '', /no live write grant covers the requested blocks/);
      assert.equal(misses, 2);
    } finally {
      await Promise.all([writer.close(), receiver.close()]);
    }
  });

  for (const backend of ['TCP', 'SHM'] as const) {
    it(`holds for a threaded receiver that reads the WRITE before the grant command (${backend})`, async () => {
      await stalledWrite(
        backend,
        ({ receiver }) => {
          receiver.grantWrite('granted-first', { blockIds: [10, 11, 12] });
        },
        'DONE',
      );
    });
  }

  it('passes this side’s own transfers and notifications queued before the grant, which still run', async () => {
    let note: Promise<void> | undefined;
    let read: TransferHandle | undefined;
    await stalledWrite(
      'TCP',
      ({ receiver, writer }) => {
        writer.grantRead('own-read', { blockIds: [20] });
        read = receiver.read(
          'W-rank0',
          [{ localRegion: 0, localFirst: 20, remoteRegion: 0, remoteFirst: 20, count: 1 }],
          {
            grantKey: 'own-read',
          },
        );
        note = receiver.sendNotification('W-rank0', 'queued before the grant');
        receiver.grantWrite('granted-first', { blockIds: [10, 11, 12] });
      },
      'DONE',
      async ({ receiver, writer, wr, rr }) => {
        await note;
        assert.deepEqual(
          (await notificationsOf(writer, 1)).map((n) => n.message),
          ['queued before the grant'],
        );
        const st = await receiver.waitFor(read!);
        assert.equal(st.state, 'DONE', st.reason);
        assert.ok(blocksEqual(rr[0]!.bytes, 20, wr[0]!.bytes, 20, 1, BB));
      },
      true,
    );
  });

  it('does not pass a command grants depend on (a new remote): refused, and nothing is lost', async () => {
    await stalledWrite(
      'TCP',
      ({ receiver, writer }) => {
        receiver.addRemoteAgent(writer.metadata());
        receiver.grantWrite('granted-first', { blockIds: [10, 11, 12] });
      },
      'ERR',
      async ({ receiver, writer, remote, wr, rr }) => {
        // Both commands ran, in order, after the refusal: the grant covers the next WRITE, and
        // the remote is there to notify.
        const again = await writer.waitFor(writer.write(remote, WRITE));
        assert.equal(again.state, 'DONE', again.reason);
        assert.ok(blocksEqual(rr[0]!.bytes, 10, wr[0]!.bytes, 4, 3, BB));
        await receiver.sendNotification('W-rank0', 'through the new remote');
        assert.deepEqual(
          (await notificationsOf(writer, 1)).map((n) => n.message),
          ['through the new remote'],
        );
      },
    );
  });
});

type Stalled = {
  writer: InThreadTransferAgent;
  receiver: ThreadedTransferAgent;
  remote: string;
  wr: ReturnType<typeof makeRegion>[];
  rr: ReturnType<typeof makeRegion>[];
};

/**
 * The receiver's thread stalls while it receives a notification; meanwhile a second
 * notification makes its socket readable, `queue` issues commands on the receiver (queued on
 * its thread's port), then the writer's WRITE of blocks 10–12 follows on the socket. After the
 * stall the thread polls the socket first. Checks the WRITE's state, then runs `after`.
 */
async function stalledWrite(
  backend: 'TCP' | 'SHM',
  queue: (s: Stalled) => void,
  expected: 'DONE' | 'ERR',
  after?: (s: Stalled) => Promise<void>,
  receiverKnowsWriter = false,
): Promise<Stalled> {
  const writer = await InThreadTransferAgent.create({ engineId: 'W', backends: [backend] });
  const receiver = await ThreadedTransferAgent.create(
    { engineId: 'R', backends: [backend] },
    { threadEntry: FAULTY_THREAD_ENTRY },
  );
  const wr = [makeRegion(0, BB, N, 7)];
  const rr = [makeRegion(0, BB, N, 9)];
  writer.registerMemory(wr);
  receiver.registerMemory(rr);
  const remote = writer.addRemoteAgent(receiver.metadata());
  if (receiverKnowsWriter) receiver.addRemoteAgent(writer.metadata());
  const s: Stalled = { writer, receiver, remote, wr, rr };
  try {
    await writer.sendNotification(remote, 'hello');
    await notificationsOf(receiver, 1);
    await writer.sendNotification(remote, STALL);
    await sleep(100);
    await writer.sendNotification(remote, 'readable before the grant');
    await sleep(50);
    queue(s);
    const st = await writer.waitFor(writer.write(remote, WRITE));
    assert.equal(st.state, expected, st.reason);
    if (expected === 'DONE') assert.ok(blocksEqual(rr[0]!.bytes, 10, wr[0]!.bytes, 4, 3, BB));
    else assert.match(st.reason ?? '', /no live write grant covers the requested blocks/);
    await after?.(s);
    return s;
  } finally {
    await Promise.all([writer.close(), receiver.close()]);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
