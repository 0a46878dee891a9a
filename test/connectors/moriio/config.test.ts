import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildEngineConfig } from '../../../src/config/engine-config.ts';
import { KVTransferConfig } from '../../../src/config/kv-transfer-config.ts';
import { KVConnectorFactory } from '../../../src/connector/factory.ts';
import {
  foldLocalRank,
  moriioPort,
  parseMoRIIOConfig,
  warnDeprecatedMoRIIOEnv,
} from '../../../src/connectors/moriio/config.ts';
import { KVError } from '../../../src/errors/kv-error.ts';
import type { KVCacheConfig } from '../../../src/kv/interfaces.ts';
import { captureLogs } from '../../../src/logging/logger.ts';
import { MORIIO_DEFAULT_HANDSHAKE_PORT, MORIIO_DEFAULT_NOTIFY_PORT } from '../../../src/wire/index.ts';

const engine = buildEngineConfig();
const parse = (extra: Record<string, unknown>) => parseMoRIIOConfig({ http_port: 8000, ...extra }, engine);

test('backend: tcp, TCP, "Rdma " and nvlink fail with vLLM message (lower-cased, not trimmed)', () => {
  for (const [input, shown] of [
    ['tcp', "'tcp'"],
    ['TCP', "'tcp'"],
    ['Rdma ', "'rdma '"],
    ['nvlink', "'nvlink'"],
  ] as const) {
    assert.throws(
      () => parse({ backend: input }),
      (e: unknown) =>
        e instanceof KVError &&
        e.code === 'KV_MORIIO_BACKEND_INVALID' &&
        e.field === 'kv_connector_extra_config.backend' &&
        e.message ===
          `Invalid MoRIIO backend ${shown} in kv_connector_extra_config; must be one of 'rdma' or 'xgmi'.`,
      input,
    );
  }
  assert.throws(() => parse({ backend: null }), /Invalid MoRIIO backend 'none'/);
});

test('backend: rdma, XGMI and absent pass', () => {
  assert.equal(parse({ backend: 'rdma' }).backend, 'rdma');
  assert.equal(parse({ backend: 'XGMI' }).backend, 'xgmi');
  assert.equal(parse({}).backend, 'rdma');
});

test('http_port is required and named in the error', () => {
  assert.throws(
    () => parseMoRIIOConfig({ backend: 'rdma' }, engine),
    (e: unknown) =>
      e instanceof KVError &&
      e.code === 'KV_MORIIO_HTTP_PORT_REQUIRED' &&
      e.field === 'kv_connector_extra_config.http_port' &&
      /http_port/.test(e.hint ?? ''),
  );
  assert.equal(parse({ http_port: '8100' }).httpPort, 8100);
  assert.throws(
    () => parse({ http_port: 'eighty' }),
    (e: unknown) => e instanceof KVError && e.field === 'kv_connector_extra_config.http_port',
  );
});

test('defaults: ports (also when falsy), timeouts, modes and tuning knobs', () => {
  const c = parse({});
  assert.equal(c.handshakePort, MORIIO_DEFAULT_HANDSHAKE_PORT);
  assert.equal(c.notifyPort, MORIIO_DEFAULT_NOTIFY_PORT);
  assert.deepEqual(
    [
      c.transferTimeoutS,
      c.deferTimeoutS,
      c.readMode,
      c.qpPerTransfer,
      c.postBatchSize,
      c.numWorkers,
      c.proxyIp,
      c.proxyPingPort,
    ],
    [30, 60, false, 1, -1, 1, '', 0],
  );
  const falsy = parse({ handshake_port: 0, notify_port: '' });
  assert.deepEqual([falsy.handshakePort, falsy.notifyPort], [6301, 61005]);
  const set = parse({
    handshake_port: '7000',
    notify_port: 7100,
    transfer_timeout: '12.5',
    defer_timeout: 5,
    host_ip: '10.0.0.7',
  });
  assert.deepEqual(
    [set.handshakePort, set.notifyPort, set.transferTimeoutS, set.deferTimeoutS],
    [7000, 7100, 12.5, 5],
  );
  assert.equal(set.engineId, '10.0.0.7:7000');
  assert.throws(() => parse({ transfer_timeout: 'soon' }), /transfer_timeout/);
});

test('read_mode is a boolean by the shared extra-config rule; other words fail naming the key', () => {
  for (const v of [true, 'true', ' TRUE ', '1', 1])
    assert.equal(parse({ read_mode: v }).readMode, true, String(v));
  for (const v of [false, 'false', 'False', '0', 0, undefined, null])
    assert.equal(parse({ read_mode: v }).readMode, false, String(v));
  assert.throws(
    () => parse({ read_mode: 'yes' }),
    (e: unknown) => e instanceof KVError && e.field === 'kv_connector_extra_config.read_mode',
  );
});

test('one port formula: base + dp_local * tp_size + tp_rank, with no collisions across ranks', () => {
  assert.equal(moriioPort(6301, 0, 1, 0), 6301);
  assert.equal(moriioPort(6301, 1, 4, 2), 6301 + 4 + 2);
  const seen = new Set<number>();
  for (let dp = 0; dp < 3; dp++) for (let tp = 0; tp < 4; tp++) seen.add(moriioPort(1000, dp, 4, tp));
  assert.equal(seen.size, 12);
  assert.equal(foldLocalRank(5, 2), 1);
  assert.equal(foldLocalRank(5, 0), 5);
  const big = buildEngineConfig({ tensor_parallel_size: 8, data_parallel_size: 4, data_parallel_rank: 3 });
  assert.throws(() => parseMoRIIOConfig({ http_port: 8000, notify_port: 65530 }, big), /exceeds 65535/);
});

test('deprecated environment variables are warned about once and ignored', async () => {
  const env = { VLLM_MORIIO_QP_PER_TRANSFER: '8', VLLM_MORIIO_CONNECTOR_READ_MODE: 'true' };
  const { result, records } = await captureLogs(() => {
    warnDeprecatedMoRIIOEnv(env);
    return warnDeprecatedMoRIIOEnv(env);
  });
  assert.deepEqual(result.sort(), ['VLLM_MORIIO_CONNECTOR_READ_MODE', 'VLLM_MORIIO_QP_PER_TRANSFER']);
  const msgs = records.filter((r) => r.level === 'warn').map((r) => r.message);
  assert.deepEqual(msgs.sort(), [
    "The environment variable VLLM_MORIIO_CONNECTOR_READ_MODE is deprecated and ignored. Set 'read_mode' inside kv_transfer_config.kv_connector_extra_config instead.",
    "The environment variable VLLM_MORIIO_QP_PER_TRANSFER is deprecated and ignored. Set 'qp_per_transfer' inside kv_transfer_config.kv_connector_extra_config instead.",
  ]);
});

test('MoRIIOConnector resolves through the factory: no HMA, validates config, constructs the connector', async () => {
  const transfer = KVTransferConfig.fromObject({
    kv_connector: 'MoRIIOConnector',
    kv_role: 'kv_producer',
    kv_connector_extra_config: { http_port: 8000, backend: 'TCP' },
  });
  const cls = await KVConnectorFactory.getConnectorClass(transfer);
  assert.equal(cls.name, 'MoRIIOConnector');
  assert.equal(cls.supportsHMA, false);
  assert.throws(
    () => cls.validateExtraConfig?.(transfer.kv_connector_extra_config, engine),
    /Invalid MoRIIO backend 'tcp'/,
  );
  const ok = buildEngineConfig({
    disable_hybrid_kv_cache_manager: true,
    kv_transfer_config: { ...transfer.toJSON(), kv_connector_extra_config: { http_port: 8000 } },
  });
  const connector = await KVConnectorFactory.createConnector(ok, 'worker', {
    numBlocks: 4,
    tensors: [],
    groups: [],
  } as unknown as KVCacheConfig);
  try {
    assert.equal(connector.constructor.name, 'MoRIIOConnector');
    assert.equal(connector.role, 'worker');
  } finally {
    await connector.shutdown();
  }
});
