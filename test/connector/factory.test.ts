import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { buildEngineConfig } from '../../src/config/engine-config.ts';
import { KVTransferConfig } from '../../src/config/kv-transfer-config.ts';
import { KVConnectorFactory, resolveModuleSpecifier } from '../../src/connector/factory.ts';
import { BUILTIN_CONNECTORS } from '../../src/connector/registry.ts';
import { KVError } from '../../src/errors/kv-error.ts';
import type { KVCacheConfig } from '../../src/kv/interfaces.ts';
import { captureLogs } from '../../src/logging/logger.ts';

const FIXTURE = './test/fixtures/external-connector.mjs';
const FIXTURE_FROM_TEST: string = '../fixtures/external-connector.mjs';
const kvCacheConfig = { numBlocks: 8, tensors: [], groups: [] } as unknown as KVCacheConfig;
const cfg = (fields: Record<string, unknown>) =>
  KVTransferConfig.fromObject({ kv_role: 'kv_both', ...fields });

async function rejectsWith(p: Promise<unknown>, code: string, message: string): Promise<KVError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof KVError, `expected KVError, got ${String(e)}`);
    assert.equal(e.code, code);
    assert.equal(e.message, message);
    return e;
  }
  assert.fail(`expected ${code}`);
}

test('registration is lazy and a duplicate name fails with vLLM message', async () => {
  let loads = 0;
  const loader = async () => {
    loads++;
    return (await import(FIXTURE_FROM_TEST)) as Record<string, unknown>;
  };
  KVConnectorFactory.registerConnector('LazyTestConnector', loader, 'MyHMAConnector');
  assert.equal(loads, 0);
  assert.throws(
    () => KVConnectorFactory.registerConnector('LazyTestConnector', loader, 'MyHMAConnector'),
    (e: unknown) =>
      e instanceof KVError && e.message === "Connector 'LazyTestConnector' is already registered.",
  );
  const cls = await KVConnectorFactory.getConnectorClassByName('LazyTestConnector');
  assert.equal(cls.name, 'MyHMAConnector');
  assert.equal(loads, 1);
  assert.throws(
    () => KVConnectorFactory.registerConnector('NixlConnector', FIXTURE, 'X'),
    /already registered/,
  );
});

test('registerConnector with a module specifier resolves it from the working directory', async () => {
  KVConnectorFactory.registerConnector('SpecifierTestConnector', FIXTURE, 'MyExternalConnector');
  const cls = await KVConnectorFactory.getConnectorClass(cfg({ kv_connector: 'SpecifierTestConnector' }));
  assert.equal(cls.name, 'MyExternalConnector');
});

test('by-name lookup of an unknown name: vLLM message plus a did-you-mean hint', async () => {
  const e = await rejectsWith(
    KVConnectorFactory.getConnectorClassByName('NixlConnectorV1'),
    'KV_CONNECTOR_NOT_REGISTERED',
    "Connector 'NixlConnectorV1' is not registered.",
  );
  assert.match(e.hint ?? '', /did you mean 'NixlConnector'\?/);
});

test('getConnectorClass: name missing, empty module path, unknown and mis-cased names', async () => {
  await rejectsWith(
    KVConnectorFactory.getConnectorClass(KVTransferConfig.fromObject({})),
    'KV_CONNECTOR_NAME_MISSING',
    'Connector name is not set in KVTransferConfig',
  );
  await rejectsWith(
    KVConnectorFactory.getConnectorClass(
      cfg({ kv_connector: 'MyExternalConnector', kv_connector_module_path: '' }),
    ),
    'KV_CONNECTOR_MODULE_PATH_EMPTY',
    'kv_connector_module_path cannot be an empty string.',
  );
  const unknown = await rejectsWith(
    KVConnectorFactory.getConnectorClass(cfg({ kv_connector: 'NixlConnectorV1' })),
    'KV_CONNECTOR_UNSUPPORTED',
    'Unsupported connector type: NixlConnectorV1',
  );
  assert.match(unknown.hint ?? '', /did you mean 'NixlConnector'\?/);
  const cased = await rejectsWith(
    KVConnectorFactory.getConnectorClass(cfg({ kv_connector: 'nixlconnector' })),
    'KV_CONNECTOR_UNSUPPORTED',
    'Unsupported connector type: nixlconnector',
  );
  assert.match(cased.hint ?? '', /did you mean 'NixlConnector'\?/);
});

test('an external connector loads from kv_connector_module_path (relative, absolute) and takes priority', async () => {
  const rel = await KVConnectorFactory.getConnectorClass(
    cfg({ kv_connector: 'MyExternalConnector', kv_connector_module_path: FIXTURE }),
  );
  assert.equal(rel.name, 'MyExternalConnector');
  const abs = await KVConnectorFactory.getConnectorClass(
    cfg({ kv_connector: 'MyHMAConnector', kv_connector_module_path: path.resolve(FIXTURE) }),
  );
  assert.equal(abs.supportsHMA, true);
  await rejectsWith(
    KVConnectorFactory.getConnectorClass(
      cfg({ kv_connector: 'NixlConnector', kv_connector_module_path: FIXTURE }),
    ),
    'KV_CONNECTOR_CLASS_NOT_FOUND',
    `Class NixlConnector not found in ${FIXTURE}`,
  );
  await rejectsWith(
    KVConnectorFactory.getConnectorClass(
      cfg({ kv_connector: 'notAClass', kv_connector_module_path: FIXTURE }),
    ),
    'KV_CONNECTOR_CLASS_NOT_FOUND',
    `Class notAClass not found in ${FIXTURE}`,
  );
  const missing = await rejectsWith(
    KVConnectorFactory.getConnectorClass(
      cfg({ kv_connector: 'X', kv_connector_module_path: 'my_pkg.connectors' }),
    ),
    'KV_CONNECTOR_MODULE_NOT_FOUND',
    "No module named 'my_pkg.connectors'",
  );
  assert.match(missing.hint ?? '', /not a Python dotted path/);
});

test('a connector with a 2-argument constructor is rejected with vLLM message', async () => {
  await rejectsWith(
    KVConnectorFactory.getConnectorClass(
      cfg({ kv_connector: 'TwoArgConnector', kv_connector_module_path: FIXTURE }),
    ),
    'KV_CONNECTOR_DEPRECATED_SIGNATURE',
    'Connector TwoArgConnector uses deprecated 2-argument constructor signature. External v1 KV connectors must accept kv_cache_config as the third constructor argument and pass it to super().__init__().',
  );
});

test('an installed package resolves from the working directory, not from kvconnect', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'kvconnect-pkg-'));
  try {
    const pkg = path.join(dir, 'node_modules', 'my-kv-connector');
    mkdirSync(pkg, { recursive: true });
    writeFileSync(path.join(dir, 'package.json'), '{"name":"app","private":true}');
    writeFileSync(
      path.join(pkg, 'package.json'),
      '{"name":"my-kv-connector","type":"module","main":"index.js"}',
    );
    writeFileSync(path.join(pkg, 'index.js'), 'export class PkgConnector { static supportsHMA = true; }\n');
    assert.match(resolveModuleSpecifier('my-kv-connector', dir), /node_modules\/my-kv-connector\/index\.js$/);
    assert.throws(
      () => resolveModuleSpecifier('my-kv-connector'),
      (e: unknown) => e instanceof KVError && e.code === 'KV_CONNECTOR_MODULE_NOT_FOUND',
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('every built-in name is registered; missing implementations fail precisely', async () => {
  const names = KVConnectorFactory.registeredNames();
  for (const n of [
    'ExampleConnector',
    'SharedStorageConnector',
    'ExampleHiddenStatesConnector',
    'LMCacheConnectorV1',
    'LMCacheMPConnector',
    'NixlConnector',
    'NixlPullConnector',
    'NixlPushConnector',
    'MultiConnector',
    'MoRIIOConnector',
    'OffloadingConnector',
    'DecodeBenchConnector',
    'MooncakeConnector',
    'MooncakeStoreConnector',
    'FlexKVConnectorV1',
    'SimpleCPUOffloadConnector',
    'HF3FSKVConnector',
  ]) {
    assert.ok(names.includes(n), n);
  }
  assert.equal(
    BUILTIN_CONNECTORS.find((c) => c.name === 'SharedStorageConnector')?.className,
    'ExampleConnector',
  );
  for (const entry of BUILTIN_CONNECTORS.filter((c) => c.load === null)) {
    const e = await KVConnectorFactory.getConnectorClass(cfg({ kv_connector: entry.name })).catch(
      (x: unknown) => x,
    );
    assert.ok(e instanceof KVError && e.code === 'KV_CONNECTOR_NOT_IMPLEMENTED', entry.name);
    if (entry.status === 'unavailable') assert.match(e.hint ?? '', new RegExp(`Use ${entry.alternative}`));
  }
  const mooncake = await KVConnectorFactory.getConnectorClass(
    cfg({ kv_connector: 'MooncakeConnector' }),
  ).catch((x: KVError) => x);
  assert.match((mooncake as KVError).message, /Mooncake Transfer Engine/);
});

test('supportsHMAConfig: classes, capability table, and MultiConnector children (recursive)', async () => {
  const hma = (fields: Record<string, unknown>) => KVConnectorFactory.supportsHMAConfig(cfg(fields));
  const multi = (children: unknown[] | undefined) =>
    hma({
      kv_connector: 'MultiConnector',
      kv_connector_extra_config: children ? { connectors: children } : {},
    });
  assert.equal(await hma({ kv_connector: 'NixlConnector' }), true);
  assert.equal(await hma({ kv_connector: 'OffloadingConnector' }), true);
  assert.equal(await hma({ kv_connector: 'ExampleConnector' }), false);
  assert.equal(await hma({ kv_connector: 'MoRIIOConnector' }), false);
  assert.equal(await hma({ kv_connector: 'MyHMAConnector', kv_connector_module_path: FIXTURE }), true);
  assert.equal(await hma({ kv_connector: 'MyExternalConnector', kv_connector_module_path: FIXTURE }), false);
  const nixl = { kv_connector: 'NixlConnector', kv_role: 'kv_both' };
  const offload = { kv_connector: 'OffloadingConnector', kv_role: 'kv_both' };
  const example = { kv_connector: 'ExampleConnector', kv_role: 'kv_both' };
  assert.equal(await multi([nixl, offload]), true);
  assert.equal(await multi([nixl, example]), false);
  assert.equal(await multi([]), false);
  assert.equal(await multi(undefined), false);
  const nested = {
    kv_connector: 'MultiConnector',
    kv_role: 'kv_both',
    kv_connector_extra_config: { connectors: [nixl] },
  };
  assert.equal(await multi([offload, nested]), true);
  await assert.rejects(multi([{ kv_connector: 'NixlConnector' }]), (e: unknown) => {
    assert.ok(e instanceof KVError);
    assert.equal(e.field, 'kv_connector_extra_config.connectors[0].kv_role');
    return true;
  });
});

test('createConnector: missing config, forced HMA on a non-HMA connector, and the logged creation', async () => {
  await rejectsWith(
    KVConnectorFactory.createConnector(buildEngineConfig(), 'scheduler', kvCacheConfig),
    'KV_TRANSFER_CONFIG_MISSING',
    'kv_transfer_config must be set to create a connector',
  );
  const transfer = {
    kv_connector: 'MyExternalConnector',
    kv_role: 'kv_producer',
    kv_connector_module_path: FIXTURE,
    engine_id: 'eng-1',
  };
  await rejectsWith(
    KVConnectorFactory.createConnector(
      buildEngineConfig({
        model: 'tiny-hybrid',
        disable_hybrid_kv_cache_manager: false,
        kv_transfer_config: transfer,
      }),
      'scheduler',
      kvCacheConfig,
    ),
    'KV_CONNECTOR_HMA_UNSUPPORTED',
    'Connector MyExternalConnector does not support HMA but HMA is enabled. Please set `--disable-hybrid-kv-cache-manager`.',
  );
  for (const setting of [true, null]) {
    const engine = buildEngineConfig({
      disable_hybrid_kv_cache_manager: setting,
      kv_transfer_config: transfer,
    });
    const { result, records } = await captureLogs(() =>
      KVConnectorFactory.createConnector(engine, 'worker', kvCacheConfig),
    );
    assert.equal(result.constructor.name, 'MyExternalConnector');
    assert.equal(result.role, 'worker');
    assert.equal(result.kvCacheConfig, kvCacheConfig);
    assert.ok(
      records.some(
        (r) => r.message === 'Creating v1 connector with name: MyExternalConnector and engine_id: eng-1',
      ),
    );
  }
});
