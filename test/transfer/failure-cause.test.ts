/**
 * Every failed transfer carries a cause from a closed set (src/transfer/failure.ts), and what
 * is decided about a failure follows the cause, never the wording of its reason: each cause
 * the code produces is checked where it arises, and a relay that rewrites `xfer_err` frames on
 * the wire shows that a reworded reason changes nothing while a changed cause changes the
 * decision.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { isKVError } from '../../src/errors/index.ts';
import { GrantTable } from '../../src/transfer/grants.ts';
import {
  type DescPair,
  InThreadTransferAgent,
  isRetryableCause,
  ThreadedTransferAgent,
  TRANSFER_FAILURE_CAUSES,
  type TransferAgentOptions,
  type TransferFailure,
} from '../../src/transfer/index.ts';
import { parseAgentFrame, TRANSFER_PROTOCOL_VERSION } from '../../src/transfer/messages.ts';
import { all, closeRelayedAgents, throughRelay, whole } from '../faults/helpers/relayed-agents.ts';
import { makeRegion } from './helpers/pattern.ts';
import { until } from './helpers/wait.ts';

after(closeRelayedAgents);

const BB = 4096;
const N = 16;
const ONE: DescPair[] = [{ localRegion: 0, localFirst: 1, remoteRegion: 0, remoteFirst: 1, count: 1 }];
const me = { agentName: 'D-rank0', engineId: 'D' };
const run = [{ region: 0, first: 1, count: 2 }];

const open: InThreadTransferAgent[] = [];
after(async () => {
  for (const a of open.splice(0)) await a.close();
});

/** Reader A and owner B, each with one region of N blocks, A knowing B. */
async function pair(
  aOptions: Partial<TransferAgentOptions> = {},
  bOptions: Partial<TransferAgentOptions> = {},
) {
  const a = await InThreadTransferAgent.create({ engineId: 'A', backends: ['TCP'], ...aOptions });
  const b = await InThreadTransferAgent.create({ engineId: 'B', backends: ['TCP'], ...bOptions });
  open.push(a, b);
  a.registerMemory([makeRegion(0, BB, N, 1)]);
  b.registerMemory([makeRegion(0, BB, N, 2)]);
  return { a, b, remote: a.addRemoteAgent(b.metadata()) };
}

describe('the cause of a grant refusal, where the grant table decides it', () => {
  it('names each refusal', async () => {
    const t = new GrantTable({ waitMs: 0 });
    assert.equal(t.check('read', me, run, 'k')?.cause, 'not_granted_yet');
    t.add('read', 'k', { blockIds: [1], peer: 'D' });
    assert.equal(t.check('read', me, run, 'k')?.cause, 'not_granted', 'block 2 is not granted');
    assert.equal(t.check('read', me, run, undefined)?.cause, 'not_granted');
    t.add('read', 'other', { blockIds: [1, 2], peer: 'E' });
    assert.equal(t.check('read', me, run, 'other')?.cause, 'not_granted', "another peer's grant");
    t.revoke('read', 'k');
    assert.equal(t.check('read', me, run, 'k')?.cause, 'grant_ended');
    t.add('read', 'old', { blockIds: [1, 2], expiresAt: Date.now() - 1 });
    assert.equal(t.check('read', me, run, 'old')?.cause, 'grant_ended', 'expired');
  });

  it('names the outcomes of a READ that waits for its grant', async () => {
    const t = new GrantTable({ waitMs: 30, maxPerPeer: 1 });
    // The table's wait timers do not hold the process open: this does while the test waits.
    const alive = setInterval(() => {}, 1000);
    after(() => clearInterval(alive));
    const outcome = (key: string) =>
      new Promise<TransferFailure | null>((resolve) => {
        const parked = t.park('read', key, me, run, resolve);
        if (typeof parked !== 'function') resolve(parked);
      });
    const timedOut = outcome('late');
    assert.equal((await outcome('second'))?.cause, 'grant_quota', 'one READ of this peer already waits');
    assert.equal((await timedOut)?.cause, 'not_granted_yet');
    const revoked = outcome('gone');
    t.revoke('read', 'gone');
    assert.equal((await revoked)?.cause, 'grant_ended');
    const granted = outcome('soon');
    t.add('read', 'soon', { blockIds: [1, 2] });
    assert.equal(await granted, null);
    clearInterval(alive);
  });

  it('calls exactly the refusals for a grant not there yet retryable', () => {
    const retryable = TRANSFER_FAILURE_CAUSES.filter((c) => isRetryableCause(c));
    assert.deepEqual(retryable, ['not_granted_yet', 'grant_quota']);
    assert.equal(isRetryableCause(undefined), false);
  });
});

describe('the cause of a failed transfer, end to end', () => {
  it('a READ refused by the owner carries the owner’s cause', async () => {
    const { a, b, remote } = await pair({}, { grantWaitMs: 0 });
    const refused = await a.waitFor(a.read(remote, ONE, { grantKey: 'k' }));
    assert.equal(refused.cause, 'not_granted_yet');
    b.grantRead('k', { blockIds: [1] });
    b.revokeGrant('k');
    assert.equal((await a.waitFor(a.read(remote, ONE, { grantKey: 'k' }))).cause, 'grant_ended');
    b.grantRead('k2', { blockIds: [5] });
    assert.equal((await a.waitFor(a.read(remote, ONE, { grantKey: 'k2' }))).cause, 'not_granted');
    const write = await a.waitFor(a.write(remote, ONE));
    assert.equal(write.cause, 'not_granted', 'a WRITE without a write grant');
    for (const s of [refused, write]) assert.equal(s.state, 'ERR');
  });

  it('a READ of blocks the owner no longer has is out of bounds', async () => {
    const { a, b, remote } = await pair();
    // A still holds B's metadata from before B registered a smaller region.
    b.registerMemory([makeRegion(0, BB, 2, 3)]);
    b.grantRead('k', { blockIds: all(N) });
    const far: DescPair[] = [{ localRegion: 0, localFirst: 1, remoteRegion: 0, remoteFirst: 9, count: 1 }];
    assert.equal((await a.waitFor(a.read(remote, far, { grantKey: 'k' }))).cause, 'out_of_bounds');
  });

  it('a READ past its deadline times out; one whose peer goes away lost its connection; one of a closed agent is closed', async () => {
    const { a, b, remote } = await pair({ transferTimeoutMs: 300 }, { grantWaitMs: 10_000 });
    assert.equal((await a.waitFor(a.read(remote, ONE, { grantKey: 'never' }))).cause, 'timeout');

    const lost = a.waitFor(a.read(remote, ONE, { grantKey: 'never-either' }));
    await until(() => b.waitingReads === 1, 'the READ to wait at the owner');
    await b.close();
    assert.equal((await lost).cause, 'connection_lost');

    const c = await pair({}, { grantWaitMs: 10_000 });
    const closing = c.a.waitFor(c.a.read(c.remote, ONE, { grantKey: 'never' }));
    await until(() => c.b.waitingReads === 1, 'the READ to wait at the owner');
    await c.a.close();
    assert.equal((await closing).cause, 'closed');
  });
});

describe('decisions follow the cause, not the wording', () => {
  /** A relay between A and B that rewrites every xfer_err B sends with `rewrite`. */
  async function rewritten(rewrite: (cause: string, reason: string) => { cause: string; reason: string }) {
    const { a, b, remote } = await throughRelay(
      BB,
      N,
      (dir, h) => {
        if (dir !== 'down' || h.type !== 'xfer_err') return { action: 'forward' };
        const changed = rewrite(h.cause, h.reason);
        return { action: 'forward', header: parseAgentFrame({ ...h, ...changed }) };
      },
      {},
      { grantWaitMs: 0 },
    );
    return { a, b, remote };
  }

  it('a refusal reworded on the wire is still retryable, and the same words with another cause are not', async () => {
    const reworded = await rewritten((cause) => ({ cause, reason: 'the owner says: come back later' }));
    const st = await reworded.a.waitFor(reworded.a.read(reworded.remote, whole(1), { grantKey: 'k' }));
    assert.equal(st.reason, 'the owner says: come back later');
    assert.equal(st.cause, 'not_granted_yet');
    assert.ok(isRetryableCause(st.cause), 'retryable whatever the words');

    const recaused = await rewritten((_cause, reason) => ({ cause: 'grant_ended', reason }));
    const ended = await recaused.a.waitFor(recaused.a.read(recaused.remote, whole(1), { grantKey: 'k' }));
    assert.match(ended.reason ?? '', /no read grant 'k' yet/, 'the words of a retryable refusal');
    assert.equal(isRetryableCause(ended.cause), false, 'not retryable: the cause says the grant ended');
  });

  it('a peer that sends a cause outside the set is a protocol error', () => {
    assert.throws(
      () => parseAgentFrame({ type: 'xfer_err', xfer: 1, cause: 'retry please', reason: 'no grant yet' }),
      /field 'cause' of 'xfer_err' must be one of not_granted_yet/,
    );
    assert.throws(() => parseAgentFrame({ type: 'xfer_err', xfer: 1, reason: 'no grant yet' }), /'cause'/);
  });
});

describe('transfer protocol 6 (causes on the wire)', () => {
  it('an agent of protocol 5, which sends no cause, is refused before any connection, naming both versions', async () => {
    assert.equal(TRANSFER_PROTOCOL_VERSION, 6);
    const { a, b } = await pair();
    const t = await ThreadedTransferAgent.create({ engineId: 'T', backends: ['TCP'] });
    try {
      const old = { ...b.metadata(), agentName: 'old-rank0', protocolVersion: 5 };
      for (const agent of [a, t]) {
        assert.throws(
          () => agent.addRemoteAgent(old),
          (e: unknown) =>
            isKVError(e) &&
            e.code === 'TRANSFER_PROTOCOL_MISMATCH' &&
            e.message === `remote agent old-rank0 speaks transfer protocol 5, this agent 6`,
        );
      }
    } finally {
      await t.close();
    }
  });
});
