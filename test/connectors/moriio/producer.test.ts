/**
 * MoRIIOProducer in WRITE mode (docs/connectors/moriio.md#modes): layers whose KV is small
 * are pushed together in one WRITE when the forward pass ends; layers that reach
 * PUSH_MIN_BYTES are pushed while the forward pass runs. Either way the full blocks are
 * recorded before they are pushed, the layers already pushed go to a consumer rank whose
 * registration arrives later, and endStep() waits for a finished prefill's pushes, so
 * write_done leaves as soon as the last one lands. The agent is a recording stand-in whose
 * WRITEs this test completes; the pushes themselves are covered with real engines in
 * write-tracking.test.ts and stats.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { MoRIIOConfig } from '../../../src/connectors/moriio/config.ts';
import {
  type NotifyMessage,
  NotifyServer,
  type RemoteBlocksMessage,
} from '../../../src/connectors/moriio/notify-channel.ts';
import { MoRIIOProducer, PUSH_MIN_BYTES, SAVE_WAIT_MS } from '../../../src/connectors/moriio/producer.ts';
import { MoRIIOStatsRecorder } from '../../../src/connectors/moriio/stats.ts';
import type { MoRIIOWorkerContext } from '../../../src/connectors/moriio/worker-context.ts';
import type { TransferAgent, TransferHandle, TransferStatus } from '../../../src/transfer/index.ts';
import { waitUntil } from '../../helpers/wait-until.ts';

const BLOCK_SIZE = 16;

interface Posted {
  /** Per desc pair: region, local block ids, remote block ids. */
  readonly pairs: { region: number; local: number[]; remote: number[] }[];
  finish(): void;
}

/** The agent calls the producer makes, with WRITEs that complete when the test says so. */
function recordingAgent() {
  const records: { blockIds: number[]; regions: number[] }[] = [];
  const writes: Posted[] = [];
  const waiting = new Map<number, (s: TransferStatus) => void>();
  let next = 1;
  const agent = {
    recordBlocks(blockIds: Iterable<number>, regions?: Iterable<number>) {
      records.push({ blockIds: [...blockIds], regions: [...(regions ?? [])] });
    },
    write(
      remoteAgent: string,
      descs: { localRegion: number; localBlockIds: number[]; remoteBlockIds: number[] }[],
    ) {
      const id = next++;
      writes.push({
        pairs: descs.map((d) => ({
          region: d.localRegion,
          local: d.localBlockIds,
          remote: d.remoteBlockIds,
        })),
        finish: () => waiting.get(id)?.({ state: 'DONE' } as TransferStatus),
      });
      return { id, kind: 'WRITE', remoteAgent } as TransferHandle;
    },
    waitFor(h: TransferHandle) {
      return new Promise<TransferStatus>((resolve) => waiting.set(h.id, resolve));
    },
    releaseHandle() {},
    revokeGrant() {
      return false;
    },
  };
  return { agent: agent as unknown as TransferAgent, records, writes };
}

/** A producer of two layers (regions 0 and 1) whose blocks are `blockBytes` each. */
function producerFor(agent: TransferAgent, blockBytes: number): MoRIIOProducer {
  const ctx: MoRIIOWorkerContext = {
    agent,
    cfg: { readMode: false, deferTimeoutS: 60 } as MoRIIOConfig,
    tpRank: 0,
    tpSize: 1,
    totalKvHeads: 2,
    blockSize: BLOCK_SIZE,
    regions: [0, 1],
    blockBytes: new Map([
      [0, blockBytes],
      [1, blockBytes],
    ]),
    handshakePort: 0,
    notifyPort: 0,
    stats: new MoRIIOStatsRecorder(),
    connect: async () => 'decode-agent',
  };
  return new MoRIIOProducer(ctx);
}

/** D's registration of blocks 50, 60, 70 for positions 0–2, answered on `notifyPort`. */
function registration(notifyPort: number): RemoteBlocksMessage {
  return {
    type: 'remote_blocks',
    req_id: 'r',
    transfer_id: 'tx',
    block_notify_list: [50, 60, 70],
    block_positions: [0, 1, 2],
    decode_rank: 0,
    decode_tp_rank: 0,
    decode_tp_size: 1,
    decode_host: '127.0.0.1',
    decode_handshake_port: 1,
    decode_notify_port: notifyPort,
  };
}

// 40 prompt tokens: blocks 5 and 6 are full after this step, block 7 is not.
const SAVE = { reqId: 'r', transferId: 'tx', blockIds: [5, 6, 7], start: 0, end: 40, last: true };
const ALL = { local: [5, 6, 7], remote: [50, 60, 70] };

describe('MoRIIO WRITE producer', () => {
  it('small layers: one WRITE of every layer when the forward pass ends, awaited by endStep', async () => {
    const received: NotifyMessage[] = [];
    const decode = new NotifyServer((m) => received.push(m));
    const notifyPort = await decode.listen('127.0.0.1', 0, 'notify_port');
    const { agent, records, writes } = recordingAgent();
    // Three blocks of 8 KiB per layer: far below PUSH_MIN_BYTES.
    const producer = producerFor(agent, 8 << 10);
    try {
      producer.beginStep([SAVE], [], []);
      assert.equal(producer.saveLayer(0), false, 'layer 0 waits for the others');
      producer.registration(registration(notifyPort));
      assert.equal(producer.saveLayer(1), false, 'layer 1 too');
      await new Promise((r) => setImmediate(r));
      assert.deepEqual(records, [], 'nothing recorded during the forward pass');
      assert.equal(writes.length, 0, 'nothing pushed during the forward pass');
      let ended = false;
      const endCalled = performance.now();
      const end = producer.endStep().then(() => {
        ended = true;
      });
      await new Promise((r) => setImmediate(r));
      assert.equal(writes.length, 1, 'the push of both layers');
      assert.deepEqual(records, [{ blockIds: [5, 6], regions: [0, 1] }], 'both layers’ full blocks, once');
      assert.deepEqual(writes[0]!.pairs, [
        { region: 0, ...ALL },
        { region: 1, ...ALL },
      ]);
      await new Promise((r) => setImmediate(r));
      // (Unless SAVE_WAIT_MS passed already: a loaded machine stalled this test that long.)
      assert.ok(!ended || performance.now() - endCalled >= SAVE_WAIT_MS, 'endStep waits for the push');
      writes[0]!.finish();
      await end;
      assert.deepEqual(producer.takeDone(), ['r'], 'finished sending in the step of its prefill');
      await waitUntil('write_done at the consumer', () => received.some((m) => m.type === 'write_done'));
    } finally {
      await decode.close();
    }
  });

  it('large layers: pushed during the forward pass; a late registration gets the layers pushed so far', async () => {
    const received: NotifyMessage[] = [];
    const decode = new NotifyServer((m) => received.push(m));
    const notifyPort = await decode.listen('127.0.0.1', 0, 'notify_port');
    const { agent, records, writes } = recordingAgent();
    // Three blocks of half PUSH_MIN_BYTES: every layer is worth its own push.
    const producer = producerFor(agent, PUSH_MIN_BYTES / 2);
    try {
      producer.beginStep([SAVE], [], []);
      assert.equal(producer.awaitingRegistration, true, 'no consumer rank registered yet');
      assert.equal(producer.saveLayer(0), true, 'layer 0 is pushed now');
      assert.equal(producer.pushPending(), false, 'nowhere to push it without the consumer’s blocks');
      assert.deepEqual(records, [{ blockIds: [5, 6], regions: [0] }], 'layer 0’s full blocks are recorded');
      // The consumer's registration arrives after layer 0: layer 0 is pushed at once.
      producer.registration(registration(notifyPort));
      assert.equal(producer.awaitingRegistration, false);
      await waitUntil('layer 0 pushed', () => writes.length === 1);
      assert.deepEqual(writes[0]!.pairs, [{ region: 0, ...ALL }]);
      // Layer 1 is pushed as it is done.
      assert.equal(producer.saveLayer(1), true);
      assert.equal(producer.pushPending(), true);
      assert.deepEqual(records[1], { blockIds: [5, 6], regions: [1] });
      await waitUntil('layer 1 pushed', () => writes.length === 2);
      assert.deepEqual(writes[1]!.pairs, [{ region: 1, ...ALL }]);
      writes[0]!.finish();
      // The forward pass ended with layer 1's push in flight: endStep waits for it.
      let ended = false;
      const endCalled = performance.now();
      const end = producer.endStep().then(() => {
        ended = true;
      });
      await new Promise((r) => setImmediate(r));
      assert.ok(!ended || performance.now() - endCalled >= SAVE_WAIT_MS, 'endStep waits for the last push');
      assert.equal(writes.length, 2, 'nothing left to push after the forward pass');
      writes[1]!.finish();
      await end;
      assert.deepEqual(producer.takeDone(), ['r']);
      await waitUntil('write_done at the consumer', () => received.some((m) => m.type === 'write_done'));
    } finally {
      await decode.close();
    }
  });
});
