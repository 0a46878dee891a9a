import assert from 'node:assert/strict';
import { test } from 'node:test';
import { dottedArgsToObject, extractDottedArgs } from '../../src/config/dotted-args.ts';
import { expandJsonHumanReadableNumbers, parseHumanReadableInt } from '../../src/config/human-readable.ts';
import { KV_TRANSFER_CONFIG_FIELDS, KVTransferConfig } from '../../src/config/kv-transfer-config.ts';
import { KVError } from '../../src/errors/kv-error.ts';
import { captureLogs } from '../../src/logging/logger.ts';
import { kvError } from '../helpers/kv-error.ts';

const ROLE_MESSAGE =
  "Please specify kv_role when kv_connector is set, supported roles are ('kv_producer', 'kv_both', 'kv_consumer')";

test('defaults are vLLM defaults; engine_id is a fresh uuid per config', () => {
  const a = KVTransferConfig.fromObject({});
  const b = KVTransferConfig.fromObject({});
  assert.deepEqual(
    { ...a.toJSON(), engine_id: 'x' },
    {
      kv_connector: null,
      engine_id: 'x',
      kv_buffer_device: 'cpu',
      kv_buffer_size: 1e9,
      kv_role: null,
      kv_rank: null,
      kv_parallel_size: 1,
      kv_ip: '127.0.0.1',
      kv_port: 14579,
      kv_connector_extra_config: {},
      kv_connector_module_path: null,
      enable_permute_local_kv: false,
      kv_load_failure_policy: 'fail',
    },
  );
  assert.match(a.engine_id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.notEqual(a.engine_id, b.engine_id);
  assert.equal(KVTransferConfig.fromObject({ engine_id: 'mine' }).engine_id, 'mine');
  assert.equal(KV_TRANSFER_CONFIG_FIELDS.length, 13);
});

test('kv_role is required with a connector (exact vLLM message); bad roles are rejected', () => {
  const e = kvError(() => KVTransferConfig.fromObject({ kv_connector: 'NixlConnector' }));
  assert.equal(e.message, ROLE_MESSAGE);
  assert.equal(e.code, 'KV_ROLE_REQUIRED');
  assert.equal(e.field, 'kv_role');
  assert.match(e.hint ?? '', /kv_producer/);
  const bad = kvError(() =>
    KVTransferConfig.fromObject({ kv_connector: 'NixlConnector', kv_role: 'producer' }),
  );
  assert.equal(
    bad.message,
    "Unsupported kv_role: producer. Supported roles are ('kv_producer', 'kv_both', 'kv_consumer')",
  );
});

test('derived role properties and getFromExtraConfig', () => {
  const roles = { kv_producer: [true, false], kv_consumer: [false, true], kv_both: [true, true] } as const;
  for (const [role, [p, c]] of Object.entries(roles)) {
    const cfg = KVTransferConfig.fromObject({ kv_connector: 'NixlConnector', kv_role: role });
    assert.deepEqual([cfg.isKvProducer, cfg.isKvConsumer, cfg.isKvTransferInstance], [p, c, true], role);
  }
  const roleOnly = KVTransferConfig.fromObject({ kv_role: 'kv_both' });
  assert.deepEqual(
    [roleOnly.isKvProducer, roleOnly.isKvConsumer, roleOnly.isKvTransferInstance],
    [false, false, false],
  );
  const cfg = KVTransferConfig.fromObject({
    kv_role: 'kv_both',
    kv_connector_extra_config: { a: 1, z: null },
  });
  assert.equal(cfg.getFromExtraConfig('a', 5), 1);
  assert.equal(cfg.getFromExtraConfig('z', 5), null);
  assert.equal(cfg.getFromExtraConfig('missing', 5), 5);
});

test('unknown top-level keys are rejected naming the key, with a suggestion', () => {
  const e = kvError(() => KVTransferConfig.fromObject({ kv_conector: 'NixlConnector', kv_role: 'kv_both' }));
  assert.equal(e.code, 'KV_CONFIG_UNKNOWN_KEY');
  assert.equal(e.field, 'kv_conector');
  assert.match(e.message, /'kv_conector'/);
  assert.match(e.hint ?? '', /did you mean 'kv_connector'\?/);
  const backend = kvError(() => KVTransferConfig.fromObject({ backend: 'rdma' }));
  assert.match(backend.hint ?? '', /kv_connector_extra_config/);
});

test('type errors name the field, what was expected and what was received', () => {
  const e = kvError(() => KVTransferConfig.fromObject({ kv_port: '80' }));
  assert.equal(e.code, 'KV_CONFIG_INVALID');
  assert.equal(e.field, 'kv_port');
  assert.equal(e.message, 'Invalid value for kv_port: expected an integer, received "80"');
  assert.ok(e.hint);
  assert.equal(
    kvError(() => KVTransferConfig.fromObject({ kv_connector_extra_config: [] })).field,
    'kv_connector_extra_config',
  );
  assert.equal(
    kvError(() => KVTransferConfig.fromObject({ enable_permute_local_kv: 'yes' })).field,
    'enable_permute_local_kv',
  );
  assert.equal(
    kvError(() => KVTransferConfig.fromObject({ kv_load_failure_policy: 'retry' })).field,
    'kv_load_failure_policy',
  );
  assert.equal(kvError(() => KVTransferConfig.fromObject([])).field, 'kv_transfer_config');
});

test('JSON form, with human-readable numbers in bare tokens only', () => {
  const cfg = KVTransferConfig.fromJSON(
    '{"kv_connector":"OffloadingConnector","kv_role":"kv_both","kv_connector_extra_config":{"cpu_bytes_to_use": 8G, "label": "8G", "k": 2k}}',
  );
  assert.deepEqual(cfg.kv_connector_extra_config, { cpu_bytes_to_use: 8589934592, label: '8G', k: 2000 });
  assert.equal(parseHumanReadableInt('1.5k'), 1500);
  assert.equal(parseHumanReadableInt('80g'), 80e9);
  assert.equal(parseHumanReadableInt('2T'), 2 * 2 ** 40);
  assert.equal(parseHumanReadableInt('abc'), undefined);
  assert.throws(
    () => parseHumanReadableInt('1.5G'),
    (e: unknown) => e instanceof KVError && /Decimals/.test(e.message),
  );
  assert.equal(expandJsonHumanReadableNumbers('["a\\"8G", 1e9, -3]'), '["a\\"8G", 1e9, -3]');
  const bad = kvError(() => KVTransferConfig.fromJSON('{"kv_role": kv_both}'));
  assert.equal(bad.code, 'KV_CONFIG_INVALID_JSON');
  assert.match(bad.hint ?? '', /double quotes/);
});

test('dotted CLI form: nested keys, + lists, JSON / human-readable / string values, merge over JSON', async () => {
  const argv = [
    '--model',
    'tiny',
    '--kv-transfer-config.kv_connector',
    'MoRIIOConnector',
    '--kv-transfer-config.kv_role=kv_consumer',
    '--kv-transfer-config.kv_connector_extra_config.backend',
    'xgmi',
    '--kv-transfer-config.kv_connector_extra_config.http_port',
    '8000',
    '--kv-transfer-config.kv_connector_extra_config.backends+',
    'UCX,LIBFABRIC,3',
    '--kv-transfer-config.kv_connector_extra_config.cpu_bytes_to_use',
    '80g',
  ];
  const { rest, dotted } = extractDottedArgs(argv, '--kv-transfer-config');
  assert.deepEqual(rest, ['--model', 'tiny']);
  const cfg = KVTransferConfig.fromCli(
    '{"kv_connector":"NixlConnector","kv_connector_extra_config":{"keep":true}}',
    dotted,
  );
  assert.equal(cfg?.kv_connector, 'MoRIIOConnector');
  assert.equal(cfg?.kv_role, 'kv_consumer');
  assert.deepEqual(cfg?.kv_connector_extra_config, {
    keep: true,
    backend: 'xgmi',
    http_port: 8000,
    backends: ['UCX', 'LIBFABRIC', 3],
    cpu_bytes_to_use: 80e9,
  });
  assert.equal(KVTransferConfig.fromDottedArgv(argv)?.kv_connector, 'MoRIIOConnector');
  assert.equal(KVTransferConfig.fromCli(undefined, []), null);
  const { records, result } = await captureLogs(() =>
    dottedArgsToObject([
      { path: 'kv_role', value: 'kv_producer' },
      { path: 'kv_role', value: 'kv_consumer' },
    ]),
  );
  assert.equal(result['kv_role'], 'kv_consumer');
  assert.ok(records.some((r) => r.level === 'warn' && r.message === 'Found duplicate keys kv_role'));
  assert.throws(() => dottedArgsToObject([{ path: '__proto__.x', value: '1' }]), KVError);
  assert.throws(() => extractDottedArgs(['--kv-transfer-config.kv_role'], '--kv-transfer-config'), KVError);
});
