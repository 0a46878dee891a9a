/**
 * MoRIIOConnector's transfer stats: counted on the engine that posts the transfers (P in
 * WRITE mode, D in READ mode), bytes = blocks × block bytes per layer × layers, failures
 * counted, and the vllm:moriio_* Prometheus metrics fed from them.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { MoRIIOConnector } from '../../../src/connectors/moriio/connector.ts';
import type { MoRIIOSchedulerStatsData, MoRIIOStatsData } from '../../../src/connectors/moriio/stats.ts';
import { MoRIIOStatsRecorder, reduceMoRIIOStats } from '../../../src/connectors/moriio/stats.ts';
import { LLM } from '../../../src/engine/llm.ts';
import { ConnectorMetrics } from '../../../src/server/connector-metrics.ts';
import { GREEDY, PROMPTS, waitForEmptyPool } from '../../helpers/llm.ts';
import {
  consumerParams,
  moriioOptions,
  moriioPorts,
  type PairSpec,
  producerParams,
  proxyRequestId,
  runPair,
} from './helpers.ts';

async function takeStats(llm: LLM): Promise<Record<string, unknown> | null> {
  return (await llm.engine()).engine.takeKvConnectorStats();
}

/** Bytes of one block of one layer, and the number of layers, from the engine's KV config. */
async function geometry(llm: LLM): Promise<{ pageBytes: number; layers: number; blockSize: number }> {
  const [group] = (await llm.engine()).engine.kvCacheConfig.groups;
  assert.ok(group);
  return {
    pageBytes: group.spec.pageSizeBytes,
    layers: group.layerNames.length,
    blockSize: group.spec.blockSize,
  };
}

const sum = (v: readonly number[]): number => v.reduce((a, b) => a + b, 0);

async function pairStats(spec: PairSpec): Promise<{
  poster: MoRIIOStatsData;
  other: Record<string, unknown> | null;
  expectedBytes: number;
  layers: number;
}> {
  const pPorts = await moriioPorts();
  const dPorts = await moriioPorts();
  const p = await LLM.create(moriioOptions(spec, 'kv_producer', pPorts));
  const d = await LLM.create(moriioOptions(spec, 'kv_consumer', dPorts));
  try {
    await runPair(p, d, pPorts, dPorts, spec);
    await waitForEmptyPool(p);
    await waitForEmptyPool(d);
    const { pageBytes, layers, blockSize } = await geometry(p);
    const tokenizer = (await p.engine()).engine.tokenizer;
    // WRITE moves every prompt block; READ loads all but the last prompt token.
    const blocks = sum(
      PROMPTS.map((prompt) =>
        Math.ceil((tokenizer.encode(prompt).length - (spec.readMode ? 1 : 0)) / blockSize),
      ),
    );
    const pStats = await takeStats(p);
    const dStats = await takeStats(d);
    const [poster, other] = spec.readMode ? [dStats, pStats] : [pStats, dStats];
    assert.ok(poster, 'the posting side reports stats');
    return {
      poster: poster as unknown as MoRIIOStatsData,
      other,
      expectedBytes: blocks * pageBytes * layers,
      layers,
    };
  } finally {
    await p.shutdown();
    await d.shutdown();
  }
}

function assertCleanRun(s: MoRIIOStatsData, expectedBytes: number, transfersPerPrompt: number): void {
  assert.equal(sum(s.bytes_transferred), expectedBytes);
  // Each transfer timed, each a single contiguous run or more.
  assert.equal(s.bytes_transferred.length, PROMPTS.length * transfersPerPrompt);
  assert.equal(s.transfer_duration.length, s.bytes_transferred.length);
  assert.ok(s.transfer_duration.every((t) => t > 0 && t < 10));
  assert.equal(s.num_descriptors.length, s.bytes_transferred.length);
  assert.ok(s.num_descriptors.every((n) => n >= 1));
  assert.equal(s.num_failed_transfers, 0);
  assert.equal(s.num_failed_notifications, 0);
  assert.equal(s.num_transfer_timeouts, 0);
}

describe('MoRIIO stats, two engines in one process', () => {
  it('WRITE (xgmi): P reports the writes, one per prompt; bytes = blocks × page bytes × layers; D reports none', async () => {
    const { poster, other, expectedBytes } = await pairStats({ readMode: false, backend: 'xgmi' });
    // tiny's layers are far below PUSH_MIN_BYTES: all of a prompt's layers go in one WRITE.
    assertCleanRun(poster, expectedBytes, 1);
    assert.equal(other, null, 'D posts nothing in WRITE mode');
  });

  it('READ (rdma): D reports the reads, one per layer; bytes = blocks × page bytes × layers; P reports none', async () => {
    const { poster, other, expectedBytes, layers } = await pairStats({ readMode: true, backend: 'rdma' });
    assertCleanRun(poster, expectedBytes, layers);
    assert.equal(other, null, 'P posts nothing in READ mode');
  });

  it('stats are drained per call', async () => {
    const spec: PairSpec = { readMode: false, backend: 'rdma' };
    const pPorts = await moriioPorts();
    const dPorts = await moriioPorts();
    const p = await LLM.create(moriioOptions(spec, 'kv_producer', pPorts));
    const d = await LLM.create(moriioOptions(spec, 'kv_consumer', dPorts));
    try {
      await runPair(p, d, pPorts, dPorts, spec, [PROMPTS[1]!]);
      await waitForEmptyPool(p);
      const first = (await takeStats(p)) as MoRIIOStatsData | null;
      assert.ok(first && first.bytes_transferred.length > 0);
      assert.equal(await takeStats(p), null);
    } finally {
      await p.shutdown();
      await d.shutdown();
    }
  });
});

describe('MoRIIO stats, failures', () => {
  it('READ of blocks P already released: every layer read fails and is counted on D', async () => {
    const spec: PairSpec = { readMode: true, backend: 'rdma', policy: 'recompute' };
    const pPorts = await moriioPorts();
    const dPorts = await moriioPorts();
    const p = await LLM.create(moriioOptions(spec, 'kv_producer', pPorts));
    const d = await LLM.create(moriioOptions(spec, 'kv_consumer', dPorts));
    try {
      const prompt = PROMPTS[0]!;
      const tx = `tx-${randomUUID()}`;
      const rid = proxyRequestId(pPorts, dPorts);
      const [pOut] = await p.generate(
        [prompt],
        { ...GREEDY, maxTokens: 1 },
        {
          requestIdPrefix: rid,
          kvTransferParams: producerParams(tx),
        },
      );
      const returned = pOut?.kvTransferParams ?? {};
      const dParams = {
        ...consumerParams(tx),
        remote_engine_id: returned['remote_engine_id'],
        remote_block_ids: returned['remote_block_ids'],
      };
      await d.generate([prompt], GREEDY, { requestIdPrefix: rid, kvTransferParams: dParams });
      await waitForEmptyPool(p);
      await takeStats(d);
      // The same grant again, for a prompt D has not cached: P revoked it, so the reads fail.
      const other = [...prompt].reverse().join('');
      const [out] = await d.generate([other], GREEDY, {
        requestIdPrefix: proxyRequestId(pPorts, dPorts),
        kvTransferParams: dParams,
      });
      assert.equal(out?.tokenIds.length, GREEDY.maxTokens, 'D recomputed the prompt');
      const stats = (await takeStats(d)) as MoRIIOStatsData | null;
      assert.ok(stats);
      const { layers } = await geometry(d);
      assert.equal(stats.num_failed_transfers, layers, 'one failed read per layer');
      assert.equal(stats.bytes_transferred.length, 0);
    } finally {
      await p.shutdown();
      await d.shutdown();
    }
  });

  it('defer_timeout reaps a held send: counted as num_reaped_sends by P', async () => {
    const spec: PairSpec = { readMode: false, backend: 'rdma', deferTimeout: 0.3 };
    const pPorts = await moriioPorts();
    const p = await LLM.create(moriioOptions(spec, 'kv_producer', pPorts));
    try {
      await p.generate(
        [PROMPTS[0]!],
        { ...GREEDY, maxTokens: 1 },
        { kvTransferParams: producerParams(`tx-${randomUUID()}`) },
      );
      await waitForEmptyPool(p);
      const stats = (await takeStats(p)) as MoRIIOSchedulerStatsData | null;
      assert.equal(stats?.num_reaped_sends, 1);
    } finally {
      await p.shutdown();
    }
  });
});

describe('MoRIIO stats, recorder and metrics', () => {
  it('the recorder adds its counts to the agent snapshot and resets', () => {
    const r = new MoRIIOStatsRecorder();
    r.failedTransfer();
    r.failedNotification();
    r.timedOut();
    const agent = {
      transferDuration: [0.5],
      wireDuration: [0.5],
      postDuration: [0.01],
      bytesTransferred: [1_000_000],
      numDescriptors: [2],
      numFailedTransfers: 2,
      numFailedNotifications: 0,
      numPulledWrites: 0,
    };
    const data = r.take(agent);
    assert.equal(data.num_failed_transfers, 3);
    assert.equal(data.num_failed_notifications, 1);
    assert.equal(data.num_transfer_timeouts, 1);
    assert.deepEqual(data.bytes_transferred, [1_000_000]);
    assert.equal(reduceMoRIIOStats(data)['Throughput (MB/s)'], 2);
    assert.equal(r.take(null).num_failed_transfers, 0);
  });

  it('vllm:moriio_* metrics are declared by the class and fed from the stats keys', async () => {
    const specs = MoRIIOConnector.metricSpecs();
    const names = specs.map((s) => s.name);
    for (const n of [
      'vllm:moriio_xfer_time_seconds',
      'vllm:moriio_bytes_transferred',
      'vllm:moriio_num_failed_transfers_total',
      'vllm:moriio_num_failed_notifications_total',
      'vllm:moriio_num_reaped_sends_total',
    ]) {
      assert.ok(names.includes(n), n);
    }
    const registry = new Registry();
    const metrics = new ConnectorMetrics(registry, specs, { model_name: 'tiny' });
    metrics.observe({
      transfer_duration: [0.02, 0.03],
      post_duration: [0.001, 0.001],
      bytes_transferred: [8192, 16384],
      num_descriptors: [1, 1],
      num_failed_transfers: 1,
      num_failed_notifications: 0,
      num_transfer_timeouts: 1,
    });
    metrics.observe({ num_reaped_sends: 2 });
    const text = await registry.metrics();
    assert.match(text, /^vllm:moriio_bytes_transferred_sum\{model_name="tiny"\} 24576$/m);
    assert.match(text, /^vllm:moriio_bytes_transferred_count\{model_name="tiny"\} 2$/m);
    assert.match(text, /^vllm:moriio_xfer_time_seconds_count\{model_name="tiny"\} 2$/m);
    assert.match(text, /^vllm:moriio_num_failed_transfers_total\{model_name="tiny"\} 1$/m);
    assert.match(text, /^vllm:moriio_num_reaped_sends_total\{model_name="tiny"\} 2$/m);
    assert.match(text, /^vllm:moriio_num_failed_notifications_total\{model_name="tiny"\} 0$/m);
  });
});
