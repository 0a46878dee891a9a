import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { AdmissionGate } from '../../src/server/admission.ts';
import {
  ConnectorMetrics,
  connectorMetricSpecs,
  registerConnectorMetrics,
} from '../../src/server/connector-metrics.ts';
import { needsRejectionNotice, parseKvTransferParams } from '../../src/server/kv-transfer-params.ts';
import { internalRequestId } from '../../src/server/request-id.ts';

const labels = { model_name: 'tiny', engine: '0' };

function sampleLine(text: string, prefix: string): number {
  const line = text.split('\n').find((l) => l.startsWith(prefix));
  assert.ok(line, `missing ${prefix} in\n${text}`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

test('NIXL stats feed vLLM-named histograms and counters', async () => {
  const registry = new Registry();
  const metrics = new ConnectorMetrics(registry, ['NixlConnector'], labels);
  metrics.observe('NixlConnector', {
    transfer_duration: [0.002, 0.004],
    bytes_transferred: [4096, 8192],
    num_descriptors: [3, 5],
    num_failed_transfers: [1],
  });
  metrics.observe('NixlConnector', { num_failed_transfers: 2, transfer_duration: [0.5] });
  const text = await registry.metrics();
  assert.equal(sampleLine(text, 'vllm:nixl_xfer_time_seconds_count{model_name="tiny",engine="0"}'), 3);
  assert.equal(sampleLine(text, 'vllm:nixl_bytes_transferred_sum{model_name="tiny",engine="0"}'), 12288);
  assert.equal(sampleLine(text, 'vllm:nixl_num_failed_transfers_total{model_name="tiny",engine="0"}'), 3);
  assert.equal(sampleLine(text, 'vllm:nixl_num_failed_notifications_total{model_name="tiny",engine="0"}'), 0);
});

test('a connector declares its own metrics; MultiConnector stats reach each child', async () => {
  registerConnectorMetrics('TestFileConnector', [
    { name: 'kvconnect:test_file_bytes_written', help: 'bytes', type: 'counter', key: 'bytes_written' },
    {
      name: 'kvconnect:test_file_load_seconds',
      help: 'load time',
      type: 'histogram',
      key: 'load_ms',
      scale: 1e-3,
      buckets: [0.01, 0.1, 1],
    },
  ]);
  assert.equal(connectorMetricSpecs('TestFileConnector').length, 2);
  const registry = new Registry();
  const metrics = new ConnectorMetrics(
    registry,
    ['MultiConnector', 'TestFileConnector', 'NixlConnector'],
    labels,
  );
  metrics.observe('MultiConnector', {
    TestFileConnector: { bytes_written: 1000, load_ms: [50, 500] },
    NixlConnector: { transfer_duration: [0.01] },
    UnknownConnector: { whatever: [1] },
  });
  const text = await registry.metrics();
  assert.equal(sampleLine(text, 'kvconnect:test_file_bytes_written{'), 1000);
  assert.equal(sampleLine(text, 'kvconnect:test_file_load_seconds_bucket{le="0.1"'), 1);
  assert.ok(Math.abs(sampleLine(text, 'kvconnect:test_file_load_seconds_sum{') - 0.55) < 1e-9);
  assert.equal(sampleLine(text, 'vllm:nixl_xfer_time_seconds_count{'), 1);
});

test('kv_transfer_params: objects pass through, garbage is a 400 naming the key', () => {
  const ok = { do_remote_prefill: true, remote_block_ids: [[1, 2]], remote_port: 5559, custom: { a: 1 } };
  assert.deepEqual(parseKvTransferParams(ok), ok);
  assert.equal(parseKvTransferParams(null), null);
  for (const [bad, field] of [
    ['yes', 'kv_transfer_params'],
    [[1, 2], 'kv_transfer_params'],
    [{ remote_port: 70000 }, 'kv_transfer_params.remote_port'],
    [{ do_remote_prefill: 'true' }, 'kv_transfer_params.do_remote_prefill'],
    [{ remote_block_ids: [1, 'x'] }, 'kv_transfer_params.remote_block_ids'],
  ] as const) {
    assert.throws(
      () => parseKvTransferParams(bad),
      (e: { status: number; field: string }) => e.status === 400 && e.field === field,
    );
  }
  assert.equal(needsRejectionNotice({ do_remote_prefill: true }), true);
  assert.equal(needsRejectionNotice({ do_remote_decode: true }), false);
});

test('internal ids carry 8 random hex chars unless randomization is disabled', () => {
  const a = internalRequestId('cmpl-abc', false);
  const b = internalRequestId('cmpl-abc', false);
  assert.match(a, /^cmpl-abc-[0-9a-f]{8}$/);
  assert.notEqual(a, b);
  assert.equal(internalRequestId('cmpl-abc', true), 'cmpl-abc');
});

test('the admission gate refuses past capacity with a 503 and recovers on release', () => {
  const gate = new AdmissionGate(3);
  gate.acquire(2);
  assert.throws(
    () => gate.acquire(2),
    (e: { status: number; code: string }) => e.status === 503 && e.code === 'SERVER_QUEUE_FULL',
  );
  gate.acquire(1);
  gate.release(3);
  assert.equal(gate.inFlight, 0);
  gate.acquire(3);
});
