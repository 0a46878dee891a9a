/**
 * Busy polling (busy-poll.ts): after transfer activity an agent keeps its event loop turning
 * for its window, then lets it sleep; 0 turns it off; closing the agent stops it at once; the
 * option and its environment variable are checked with the fix in the message.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { BUSY_POLL_ENV, DEFAULT_BUSY_POLL_US } from '../../src/transfer/agent-checks.ts';
import { BusyPoll } from '../../src/transfer/busy-poll.ts';
import {
  InThreadTransferAgent,
  ThreadedTransferAgent,
  type TransferAgent,
} from '../../src/transfer/index.ts';
import { makeRegion } from './helpers/pattern.ts';
import { finished } from './helpers/wait.ts';

setLogLevel('silent');

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Immediates queued in this process now (the busy poll is one while its window is open). */
const immediates = () => process.getActiveResourcesInfo().filter((r) => r === 'Immediate').length;

/** One turn of the event loop. */
const turn = () => new Promise((r) => setImmediate(r));

/** Loop turns that run while this process waits `ms` on a timer. */
async function turnsDuring(poll: BusyPoll, ms: number): Promise<number> {
  const before = poll.turns;
  await sleep(ms);
  return poll.turns - before;
}

describe('BusyPoll', () => {
  it('keeps the loop turning for its window after a touch, then stops', async () => {
    // The window is measured on a clock of the test's own, so a loaded machine's late timers
    // cannot change the outcome; the loop's turns are real.
    let clock = 0;
    const poll = new BusyPoll(30_000, () => clock);
    assert.equal(poll.polling, false);
    poll.touch();
    assert.equal(poll.polling, true);
    // A timer wait: without the poll the loop would sleep in epoll for all of it, and count none.
    assert.ok((await turnsDuring(poll, 10)) > 0, 'the loop turned while this waited on a timer');
    clock = 29.9;
    assert.ok((await turnsDuring(poll, 2)) > 0, 'still turning just inside the window');
    clock = 30;
    await turn();
    await turn();
    assert.equal(poll.polling, false, 'the window closed 30 ms after the touch');
    assert.equal(await turnsDuring(poll, 10), 0, 'no turns once closed');
  });

  it('reopens on every touch, and stop() closes it at once', async () => {
    // A clock of the test's own, so a loaded machine's late timers cannot change the outcome.
    let clock = 0;
    const poll = new BusyPoll(20_000, () => clock);
    poll.touch();
    clock = 12;
    await turn();
    poll.touch(); // 12 ms in: the window now ends 20 ms from here, not 8
    clock = 26;
    await turn();
    await turn();
    assert.equal(poll.polling, true, 'still open 26 ms after the first touch');
    clock = 33;
    await turn();
    await turn();
    assert.equal(poll.polling, false, 'closed 21 ms after the second touch');
    poll.touch();
    assert.equal(poll.polling, true);
    poll.stop();
    assert.equal(poll.polling, false);
    assert.equal(await turnsDuring(poll, 5), 0);
  });

  it('does nothing with a window of 0', async () => {
    const poll = new BusyPoll(0);
    poll.touch();
    assert.equal(poll.polling, false);
    assert.equal(await turnsDuring(poll, 5), 0);
  });
});

describe('an agent busy-polls after transfer activity', () => {
  const BB = 4096;
  /** Every agent opened here, closed after the file even when an assertion failed mid-case. */
  const open: TransferAgent[] = [];
  after(() => Promise.all(open.map((a) => a.close())));

  async function pair(busyPollUs: number) {
    const a = await InThreadTransferAgent.create({ engineId: 'A', backends: ['TCP'], busyPollUs });
    const b = await InThreadTransferAgent.create({ engineId: 'B', backends: ['TCP'], busyPollUs });
    open.push(a, b);
    a.registerMemory([makeRegion(0, BB, 8, 1)]);
    b.registerMemory([makeRegion(0, BB, 8, 2)]);
    const remote = a.addRemoteAgent(b.metadata());
    b.grantRead('g', { peer: 'A', blockIds: [1, 2] });
    return { a, b, remote };
  }

  const readOnce = async (p: Awaited<ReturnType<typeof pair>>) => {
    const h = p.a.read(
      p.remote,
      [{ localRegion: 0, localFirst: 3, remoteRegion: 0, remoteFirst: 1, count: 2 }],
      {
        grantKey: 'g',
      },
    );
    assert.equal((await finished(p.a, h)).state, 'DONE');
  };

  it('polls for its window after a READ, then sleeps; closing stops it at once', async () => {
    // A window long enough that a loaded machine still checks inside it.
    const p = await pair(100_000);
    await sleep(200); // the handshake's window has closed
    assert.equal(immediates(), 0, 'nothing polls while the agents are idle');
    await readOnce(p);
    assert.ok(immediates() >= 1, 'polling right after the READ');
    await sleep(200);
    assert.equal(immediates(), 0, 'asleep once the window closed');
    await readOnce(p);
    assert.ok(immediates() >= 1);
    await Promise.all([p.a.close(), p.b.close()]);
    assert.equal(immediates(), 0, 'closing the agents stopped polling');
  });

  it('never polls with busyPollUs 0', async () => {
    const p = await pair(0);
    await readOnce(p);
    assert.equal(immediates(), 0);
    await Promise.all([p.a.close(), p.b.close()]);
  });

  it('defaults to 0 for a threaded agent, the variable still applies to it', async () => {
    const saved = process.env[BUSY_POLL_ENV];
    delete process.env[BUSY_POLL_ENV];
    const threaded = await ThreadedTransferAgent.create({ engineId: 'T' });
    open.push(threaded);
    assert.equal(threaded.busyPollUs, 0);
    process.env[BUSY_POLL_ENV] = '150';
    try {
      const set = await ThreadedTransferAgent.create({ engineId: 'T2' });
      open.push(set);
      assert.equal(set.busyPollUs, 150);
      const inThread = await InThreadTransferAgent.create({ engineId: 'I' });
      open.push(inThread);
      assert.equal(inThread.busyPollUs, 150);
    } finally {
      if (saved === undefined) delete process.env[BUSY_POLL_ENV];
      else process.env[BUSY_POLL_ENV] = saved;
    }
  });

  it(`defaults to ${DEFAULT_BUSY_POLL_US} µs, and refuses a window that is not whole microseconds from 0 to 100000`, async () => {
    assert.equal(DEFAULT_BUSY_POLL_US, 100);
    await assert.rejects(
      InThreadTransferAgent.create({ engineId: 'X', busyPollUs: -5 }),
      /busyPollUs must be a whole number of microseconds from 0 to 100000, got -5; set it to 0 to let the agent's event loop sleep/,
    );
    const saved = process.env[BUSY_POLL_ENV];
    process.env[BUSY_POLL_ENV] = '1.5ms';
    try {
      await assert.rejects(
        InThreadTransferAgent.create({ engineId: 'X' }),
        /KVCONNECT_BUSY_POLL_US \(environment\) must be a whole number of microseconds from 0 to 100000, got "1.5ms"; .* unset it for the default \(100\)/,
      );
    } finally {
      if (saved === undefined) delete process.env[BUSY_POLL_ENV];
      else process.env[BUSY_POLL_ENV] = saved;
    }
  });
});
