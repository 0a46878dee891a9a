import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildEngineConfig } from '../../src/config/engine-config.ts';
import {
  applyHMADecision,
  HMA_AUTO_DISABLE_WARNING,
  resolveHybridKvCacheManager,
} from '../../src/connector/hma.ts';
import { captureLogs } from '../../src/logging/logger.ts';

const role = { kv_role: 'kv_both' };
async function decide(setting: boolean | null, transfer: Record<string, unknown> | null) {
  const engine = buildEngineConfig({
    model: 'tiny-hybrid',
    disable_hybrid_kv_cache_manager: setting,
    kv_transfer_config: transfer ? { ...role, ...transfer } : null,
  });
  const { result, records } = await captureLogs(() => resolveHybridKvCacheManager(engine));
  return {
    d: result,
    warned: records.some((r) => r.level === 'warn' && r.message === HMA_AUTO_DISABLE_WARNING),
    engine,
  };
}

test('auto + a connector without HMA support turns HMA off with vLLM warning', async () => {
  for (const name of ['ExampleConnector', 'SharedStorageConnector', 'MoRIIOConnector']) {
    const { d, warned } = await decide(null, { kv_connector: name });
    assert.equal(d.enabled, false, name);
    assert.equal(d.reason, 'auto-connector-unsupported');
    assert.ok(warned, `warning for ${name}`);
  }
});

test('auto keeps HMA on for HMA connectors and for a MultiConnector of HMA children', async () => {
  const nixl = { kv_connector: 'NixlConnector', kv_role: 'kv_both' };
  const offload = { kv_connector: 'OffloadingConnector', kv_role: 'kv_both' };
  for (const transfer of [
    { kv_connector: 'NixlConnector' },
    { kv_connector: 'OffloadingConnector' },
    { kv_connector: 'MultiConnector', kv_connector_extra_config: { connectors: [nixl, offload] } },
  ]) {
    const { d, warned } = await decide(null, transfer);
    assert.equal(d.enabled, true);
    assert.equal(d.reason, 'auto-connector-supported');
    assert.equal(warned, false);
  }
});

test('auto turns HMA off for a MultiConnector with a non-HMA child or no children', async () => {
  const nixl = { kv_connector: 'NixlConnector', kv_role: 'kv_both' };
  const example = { kv_connector: 'ExampleConnector', kv_role: 'kv_both' };
  for (const connectors of [[nixl, example], []]) {
    const { d, warned } = await decide(null, {
      kv_connector: 'MultiConnector',
      kv_connector_extra_config: { connectors },
    });
    assert.equal(d.enabled, false);
    assert.ok(warned);
  }
});

test('explicit settings win; no connector leaves HMA on', async () => {
  const off = await decide(true, { kv_connector: 'NixlConnector' });
  assert.deepEqual([off.d.enabled, off.d.reason, off.warned], [false, 'explicitly-disabled', false]);
  const on = await decide(false, { kv_connector: 'ExampleConnector' });
  assert.deepEqual(
    [on.d.enabled, on.d.reason, on.d.connectorSupportsHMA],
    [true, 'explicitly-enabled', false],
  );
  const none = await decide(null, null);
  assert.deepEqual([none.d.enabled, none.d.reason], [true, 'auto-no-connector']);
  const applied = applyHMADecision(off.engine, off.d);
  assert.equal(applied.scheduler.disableHybridKvCacheManager, true);
  assert.equal(off.engine.scheduler.disableHybridKvCacheManager, true);
  assert.equal(applyHMADecision(none.engine, none.d).scheduler.disableHybridKvCacheManager, false);
});
