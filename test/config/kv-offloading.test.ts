/**
 * vLLM's --kv-offloading-size / --kv-offloading-backend shortcuts: the transfer config they
 * produce (OffloadingConnector, kv_both, cpu_bytes_to_use = GiB × 2^30, over any other
 * connector), the errors that name the flag, and the flags through `kvconnect check-config`.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runCli } from '../../src/cli/program.ts';
import { buildEngineConfig } from '../../src/config/engine-config.ts';
import { applyKvOffloading } from '../../src/config/kv-offloading.ts';
import type { KVError } from '../../src/errors/kv-error.ts';

test('a size alone creates the OffloadingConnector with role kv_both and the size in bytes', () => {
  const config = buildEngineConfig({ kv_offloading_size: 0.25 });
  const kv = config.kvTransferConfig!;
  assert.equal(kv.kv_connector, 'OffloadingConnector');
  assert.equal(kv.kv_role, 'kv_both');
  assert.deepEqual(kv.kv_connector_extra_config, { cpu_bytes_to_use: 268435456 });
  assert.equal(config.cache.kvOffloadingSize, 0.25);
  assert.equal(config.cache.kvOffloadingBackend, 'native');
  // As on the command line: strings are parsed.
  const fromFlags = buildEngineConfig({ kv_offloading_size: '2', kv_offloading_backend: 'native' });
  assert.equal(fromFlags.kvTransferConfig!.kv_connector_extra_config['cpu_bytes_to_use'], 2 * 2 ** 30);
});

test('the size overrides a configured connector and merges into its extra config, as vLLM does', () => {
  const config = buildEngineConfig({
    kv_offloading_size: 1,
    kv_transfer_config: {
      kv_connector: 'NixlConnector',
      kv_role: 'kv_producer',
      engine_id: 'keep-me',
      kv_connector_extra_config: { eviction_policy: 'arc', cpu_bytes_to_use: 5 },
    },
  });
  const kv = config.kvTransferConfig!;
  assert.equal(kv.kv_connector, 'OffloadingConnector');
  assert.equal(kv.kv_role, 'kv_both');
  assert.equal(kv.engine_id, 'keep-me');
  assert.deepEqual(kv.kv_connector_extra_config, { eviction_policy: 'arc', cpu_bytes_to_use: 2 ** 30 });
  assert.equal(buildEngineConfig({}).kvTransferConfig, null, 'no size: nothing changes');
  assert.equal(buildEngineConfig({ kv_offloading_backend: 'lmcache' }).kvTransferConfig, null);
});

test('bad sizes, the lmcache backend and VLLM_USE_SIMPLE_KV_OFFLOAD fail naming what to fix', () => {
  for (const bad of [0, -1, 'abc', '']) {
    assert.throws(
      () => buildEngineConfig({ kv_offloading_size: bad as never }),
      (e: KVError) =>
        e.code === 'KV_CONFIG_INVALID' &&
        e.field === 'kv_offloading_size' &&
        e.message.includes('expected a number > 0') &&
        (e.hint ?? '').includes('--kv-offloading-size'),
      String(bad),
    );
  }
  assert.throws(
    () => buildEngineConfig({ kv_offloading_size: 1, kv_offloading_backend: 'disk' }),
    (e: KVError) => e.field === 'kv_offloading_backend' && e.message.includes('"native", "lmcache"'),
  );
  assert.throws(
    () => buildEngineConfig({ kv_offloading_size: 1, kv_offloading_backend: 'lmcache' }),
    (e: KVError) =>
      e.field === 'kv_offloading_backend' &&
      e.message.includes('LMCacheMPConnector') &&
      (e.hint ?? '').includes('--kv-offloading-backend native'),
  );
  assert.throws(
    () => applyKvOffloading(null, 1, 'native', { VLLM_USE_SIMPLE_KV_OFFLOAD: '1' }),
    (e: KVError) => e.message.includes('SimpleCPUOffloadConnector') && (e.hint ?? '').includes('Unset'),
  );
});

test('kvconnect check-config --kv-offloading-size validates the resulting connector', async () => {
  let out = '';
  let err = '';
  const io = {
    out: (t: string) => {
      out += t;
    },
    err: (t: string) => {
      err += t;
    },
  };
  assert.equal(await runCli(['check-config', '--kv-offloading-size', '0.5', '--json'], io), 0, err);
  const report = JSON.parse(out) as {
    connector: { connector: string; extraConfig: { cpuBytesToUse: number } };
    role: string;
  };
  assert.equal(report.connector.connector, 'OffloadingConnector');
  assert.equal(report.role, 'kv_both');
  assert.equal(report.connector.extraConfig.cpuBytesToUse, 2 ** 29);
  err = '';
  assert.equal(await runCli(['check-config', '--kv-offloading-size', 'lots'], io), 2);
  assert.match(
    err,
    /^error\[KV_CONFIG_INVALID\]: Invalid value for kv_offloading_size: expected a number > 0/,
  );
});
