/**
 * Connector metrics as the connector classes declare them (KVConnectorBase.metricSpecs,
 * vLLM's build_prom_metrics): the built-ins' specs fed by their stats, MultiConnector's union
 * of its children's, an external connector's through the public API up to /metrics, and
 * stats keys checked by the compiler. Also the server's small request helpers.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Registry } from 'prom-client';
import { KVTransferConfig } from '../../src/config/kv-transfer-config.ts';
import { KVConnectorFactory } from '../../src/connector/factory.ts';
import type { ConnectorMetricSpec } from '../../src/connector/metric-specs.ts';
import { MultiConnector } from '../../src/connectors/multi/index.ts';
import { NixlConnector } from '../../src/connectors/nixl/index.ts';
import type { NixlStatsData } from '../../src/connectors/nixl/stats.ts';
import { OffloadingConnector } from '../../src/connectors/offloading/index.ts';
import { AdmissionGate } from '../../src/server/admission.ts';
import { ConnectorMetrics } from '../../src/server/connector-metrics.ts';
import { needsRejectionNotice, parseKvTransferParams } from '../../src/server/kv-transfer-params.ts';
import { internalRequestId } from '../../src/server/request-id.ts';
import { metricValue, postJson, startEngine, startServer } from './helpers/harness.ts';

const labels = { model_name: 'tiny', engine: '0' };
const FIXTURE = fileURLToPath(new URL('../fixtures/external-connector.mjs', import.meta.url));

function sampleLine(text: string, prefix: string): number {
  const line = text.split('\n').find((l) => l.startsWith(prefix));
  assert.ok(line, `missing ${prefix} in\n${text}`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

test("NIXL stats feed the vLLM-named histograms and counters NixlConnector's class declares", async () => {
  const registry = new Registry();
  const metrics = new ConnectorMetrics(registry, await NixlConnector.metricSpecs(), labels);
  metrics.observe({
    transfer_duration: [0.002, 0.004],
    bytes_transferred: [4096, 8192],
    num_descriptors: [3, 5],
    num_failed_transfers: [1],
  });
  metrics.observe({ num_failed_transfers: 2, transfer_duration: [0.5] });
  const text = await registry.metrics();
  assert.equal(sampleLine(text, 'vllm:nixl_xfer_time_seconds_count{model_name="tiny",engine="0"}'), 3);
  assert.equal(sampleLine(text, 'vllm:nixl_bytes_transferred_sum{model_name="tiny",engine="0"}'), 12288);
  assert.equal(sampleLine(text, 'vllm:nixl_num_failed_transfers_total{model_name="tiny",engine="0"}'), 3);
  assert.equal(sampleLine(text, 'vllm:nixl_num_failed_notifications_total{model_name="tiny",engine="0"}'), 0);
});

test("OffloadingConnector's specs as vLLM builds them: the CPU spec's families and fixed transfer_type series", async () => {
  const specsOf = (extra: Record<string, unknown>) =>
    OffloadingConnector.metricSpecs(
      KVTransferConfig.fromObject({
        kv_connector: 'OffloadingConnector',
        kv_role: 'kv_both',
        kv_connector_extra_config: { cpu_bytes_to_use: 1 << 20, ...extra },
      }),
    ).map((s) => s.name);
  const plain = specsOf({});
  assert.ok(plain.includes('vllm:kv_offload_cpu_cache_usage_perc'));
  assert.ok(!plain.includes('vllm:kv_offload_stores_skipped_total'), 'only with store_threshold >= 2');
  assert.ok(specsOf({ store_threshold: 2 }).includes('vllm:kv_offload_stores_skipped_total'));
  const registry = new Registry();
  const specs = OffloadingConnector.metricSpecs(
    KVTransferConfig.fromObject({
      kv_connector: 'OffloadingConnector',
      kv_role: 'kv_both',
      kv_connector_extra_config: { cpu_bytes_to_use: 1 << 20 },
    }),
  );
  const metrics = new ConnectorMetrics(registry, specs, labels);
  const series = (type: string) =>
    `vllm:kv_offload_total_bytes_total{model_name="tiny",engine="0",transfer_type="${type}"}`;
  // Both directions exist before any transfer, as vLLM binds them at start.
  let text = await registry.metrics();
  assert.equal(sampleLine(text, series('CPU_to_GPU')), 0);
  assert.equal(sampleLine(text, series('GPU_to_CPU')), 0);
  metrics.observe({
    offload_load_ops: [{ op_size: 100, op_time: 0.5 }],
    offload_store_ops: [
      { op_size: 7, op_time: 0.1 },
      { op_size: 3, op_time: 0.1 },
    ],
    offload_cpu_cache_usage: [0.5, 0.25],
  });
  text = await registry.metrics();
  assert.equal(sampleLine(text, series('CPU_to_GPU')), 100);
  assert.equal(sampleLine(text, series('GPU_to_CPU')), 10);
  assert.equal(sampleLine(text, 'vllm:kv_offload_load_bytes_total{model_name="tiny",engine="0"}'), 100);
  assert.equal(sampleLine(text, 'vllm:kv_offload_cpu_cache_usage_perc{model_name="tiny",engine="0"}'), 0.25);
});

test("MultiConnector declares the union of its children's metrics, each fed from its child's stats", async () => {
  const child = { kv_connector: 'MyMetricsConnector', kv_role: 'kv_both', kv_connector_module_path: FIXTURE };
  const nixl = { kv_connector: 'NixlConnector', kv_role: 'kv_both' };
  const config = KVTransferConfig.fromObject({
    kv_connector: 'MultiConnector',
    kv_role: 'kv_both',
    // Two children of one class share one stats entry: their metrics are bound once.
    kv_connector_extra_config: { connectors: [child, nixl, child] },
  });
  assert.ok(KVConnectorFactory.isRegistered('MultiConnector'), 'the factory resolves the children');
  const specs = await MultiConnector.metricSpecs(config);
  assert.deepEqual(
    specs.filter((s) => s.name.startsWith('kvconnect:example')).map((s) => [s.name, s.within]),
    [
      ['kvconnect:example_saves_total', ['MyMetricsConnector']],
      ['kvconnect:example_save_seconds', ['MyMetricsConnector']],
    ],
  );
  const registry = new Registry();
  const metrics = new ConnectorMetrics(registry, specs, labels);
  metrics.observe({
    MyMetricsConnector: { saves: 2, save_ms: [50, 500] },
    NixlConnector: { transfer_duration: [0.01] },
    UnknownConnector: { whatever: [1] },
  });
  const text = await registry.metrics();
  assert.equal(sampleLine(text, 'kvconnect:example_saves_total{'), 2);
  assert.equal(sampleLine(text, 'kvconnect:example_save_seconds_bucket{le="0.1"'), 1);
  assert.ok(Math.abs(sampleLine(text, 'kvconnect:example_save_seconds_sum{') - 0.55) < 1e-9);
  assert.equal(sampleLine(text, 'vllm:nixl_xfer_time_seconds_count{'), 1);
});

test('an external connector declares a metric and an advertisement through the public API; both are served', async () => {
  const engine = await startEngine({
    kv_transfer_config: {
      kv_connector: 'MyMetricsConnector',
      kv_role: 'kv_both',
      kv_connector_module_path: FIXTURE,
    },
  });
  const running = await startServer({ engine });
  try {
    const res = await postJson(`${running.url}/v1/completions`, { prompt: 'count my saves', max_tokens: 3 });
    assert.equal(res.status, 200);
    await res.json();
    const text = await (await fetch(`${running.url}/metrics`)).text();
    assert.ok(metricValue(text, 'kvconnect:example_saves_total', 'model_name="tiny"') >= 3, text);
    assert.ok(metricValue(text, 'kvconnect:example_save_seconds_count', 'model_name="tiny"') >= 3);
    const info = (await (await fetch(`${running.url}/kvconnect/info`)).json()) as Record<string, unknown>;
    assert.equal(info['example_store'], 'memory://example');
    assert.equal(info['connector'], 'MyMetricsConnector', 'no P/D protocol advertised: the configured name');
    assert.equal(info['connector_class'], 'MyMetricsConnector');
  } finally {
    await running.close();
    await engine.shutdown();
  }
});

test('a stats key the stats type does not have does not compile', () => {
  const ok: ConnectorMetricSpec<NixlStatsData> = {
    name: 'x_seconds',
    help: 'x',
    type: 'histogram',
    key: 'transfer_duration',
  };
  const typo: ConnectorMetricSpec<NixlStatsData> = {
    ...ok,
    // @ts-expect-error 'transfer_duraton' is not a key of NixlStatsData
    key: 'transfer_duraton',
  };
  const field: ConnectorMetricSpec<NixlStatsData> = {
    ...ok,
    // @ts-expect-error a list of numbers has no `field`
    field: 'op_size',
  };
  assert.deepEqual(
    [ok.key, typo.key, field.key],
    ['transfer_duration', 'transfer_duraton', 'transfer_duration'],
  );
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
