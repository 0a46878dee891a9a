/**
 * MoRIIOProducer in WRITE mode, layer by layer (docs/connectors/moriio.md#modes): it
 * records each layer's full blocks before pushing them, asks the worker to let the event loop
 * turn while a consumer's registration is missing, pushes the layers already computed when the
 * registration arrives, and endStep() waits for a finished prefill's pushes, so write_done
 * leaves as soon as the last one lands. The agent is a recording stand-in whose WRITEs this
 * test completes; the pushes themselves are covered with real engines in write-tracking.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { MoRIIOConfig } from '../../../src/connectors/moriio/config.ts';
import { type NotifyMessage, NotifyServer } from '../../../src/connectors/moriio/notify-channel.ts';
import { MoRIIOProducer } from '../../../src/connectors/moriio/producer.ts';
import { MoRIIOStatsRecorder } from '../../../src/connectors/moriio/stats.ts';
import type { MoRIIOWorkerContext } from '../../../src/connectors/moriio/worker-context.ts';
import type { TransferAgent, TransferHandle, TransferStatus } from '../../../src/transfer/index.ts';
import { waitUntil } from '../../helpers/wait-until.ts';

const BLOCK_SIZE = 16;

interface Posted {
  readonly region: number;
  readonly local: readonly number[];
  readonly remote: readonly number[];
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
      const [d] = descs;
      writes.push({
        region: d!.localRegion,
        local: d!.localBlockIds,
        remote: d!.remoteBlockIds,
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

describe('MoRIIO WRITE producer, layer by layer', () => {
  it('records full blocks, waits for the registration between layers, pushes on arrival, awaits the last push', async () => {
    const received: NotifyMessage[] = [];
    const decode = new NotifyServer((m) => received.push(m));
    const notifyPort = await decode.listen('127.0.0.1', 0, 'notify_port');
    const { agent, records, writes } = recordingAgent();
    const ctx: MoRIIOWorkerContext = {
      agent,
      cfg: { readMode: false, deferTimeoutS: 60 } as MoRIIOConfig,
      tpRank: 0,
      tpSize: 1,
      totalKvHeads: 2,
      blockSize: BLOCK_SIZE,
      regions: [0, 1],
      handshakePort: 0,
      notifyPort: 0,
      stats: new MoRIIOStatsRecorder(),
      connect: async () => 'decode-agent',
    };
    const producer = new MoRIIOProducer(ctx);
    try {
      // 40 prompt tokens: blocks 5 and 6 are full after this step, block 7 is not.
      producer.beginStep(
        [{ reqId: 'r', transferId: 'tx', blockIds: [5, 6, 7], start: 0, end: 40, last: true }],
        [],
        [],
      );
      assert.equal(producer.awaitingRegistration, true, 'no consumer rank registered yet');
      assert.equal(producer.saveLayer(0), false, 'nothing to push without the consumer’s blocks');
      assert.deepEqual(records, [{ blockIds: [5, 6], regions: [0] }], 'layer 0’s full blocks are recorded');
      // The consumer's registration arrives after layer 0: layer 0 is pushed at once.
      producer.registration({
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
      });
      assert.equal(producer.awaitingRegistration, false);
      await waitUntil('layer 0 pushed', () => writes.length === 1);
      assert.deepEqual(
        { region: writes[0]!.region, local: writes[0]!.local, remote: writes[0]!.remote },
        { region: 0, local: [5, 6, 7], remote: [50, 60, 70] },
      );
      // Layer 1 is pushed as it is done.
      assert.equal(producer.saveLayer(1), true);
      assert.deepEqual(records[1], { blockIds: [5, 6], regions: [1] });
      await waitUntil('layer 1 pushed', () => writes.length === 2);
      writes[0]!.finish();
      // The forward pass ended with layer 1's push in flight: endStep waits for it.
      let ended = false;
      const end = producer.endStep().then(() => {
        ended = true;
      });
      await new Promise((r) => setTimeout(r, 5));
      assert.equal(ended, false, 'endStep waits for the last layer’s push');
      writes[1]!.finish();
      await end;
      assert.deepEqual(producer.takeDone(), ['r'], 'finished sending in the step of its prefill');
      await waitUntil('write_done at the consumer', () => received.some((m) => m.type === 'write_done'));
    } finally {
      await decode.close();
    }
  });
});
