/**
 * Out-of-tree pieces as JavaScript modules (fixtures/): a secondary tier by `type` +
 * `module_path`, an eviction policy by `eviction_policy` + `cache_policy_module_path`, a spec
 * by `spec_name` + `spec_module_path` — working in an engine, and refused with an error that
 * names the key when the module is missing or has the wrong shape.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { buildEngineConfig } from '../../../src/config/engine-config.ts';
import { parseOffloadingConfig } from '../../../src/connectors/offloading/config.ts';
import { OffloadingConnector } from '../../../src/connectors/offloading/index.ts';
import { AsyncEngine } from '../../../src/engine/async-engine.ts';
import { KVError } from '../../../src/errors/kv-error.ts';
import { MiB, PROMPTS, plainTokens, run, tieredEngineOptions, tinyKvCacheConfig } from './helpers.ts';

const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url));
const TIER = fixture('memory-tier.mjs');
const POLICY = fixture('fifo-policy.cjs');
const SPEC = fixture('memory-spec.mjs');

const engineConfig = buildEngineConfig({
  model: 'tiny',
  block_size: 16,
  num_gpu_blocks: 32,
  max_model_len: 128,
});
const parse = (extra: Record<string, unknown>) =>
  parseOffloadingConfig({ cpu_bytes_to_use: 16 * MiB, ...extra }, engineConfig);

function refused(extra: Record<string, unknown>, field: string, message: RegExp): void {
  assert.throws(
    () => parse(extra),
    (err: unknown) =>
      err instanceof KVError &&
      err.field === `kv_connector_extra_config.${field}` &&
      message.test(err.message) &&
      Boolean(err.hint),
    JSON.stringify(extra),
  );
}

/** Two engines one after the other in this process: the second loads what the first stored. */
async function sharedAcrossEngines(kvTransferConfig: Record<string, unknown>): Promise<number> {
  const prompt = PROMPTS[1]!;
  const options = { ...tieredEngineOptions({}, 'fail'), kv_transfer_config: kvTransferConfig };
  const first = await AsyncEngine.create(options);
  try {
    assert.deepEqual((await run(first, prompt, 'a')).tokens, await plainTokens('tiny', prompt));
    await first.waitIdle();
  } finally {
    await first.shutdown();
  }
  const second = await AsyncEngine.create(options);
  try {
    const out = await run(second, prompt, 'b');
    assert.deepEqual(out.tokens, await plainTokens('tiny', prompt));
    return out.last.metrics.numExternalTokens;
  } finally {
    await second.shutdown();
  }
}

const tiering = (extra: Record<string, unknown>) => ({
  kv_connector: 'OffloadingConnector',
  kv_role: 'kv_both',
  kv_connector_extra_config: { cpu_bytes_to_use: 16 * MiB, spec_name: 'TieringOffloadingSpec', ...extra },
});

describe('secondary tier by type + module_path', () => {
  test('an engine stores to it and a second engine loads from it', async () => {
    const external = await sharedAcrossEngines(
      tiering({ secondary_tiers: [{ type: 'MemoryTier', module_path: TIER, custom_param: 'value' }] }),
    );
    assert.ok(external >= 48, `the second engine loaded ${external} tokens from the module tier`);
  });

  test('the tier class gets its entry and the run layout', () => {
    const config = parse({
      spec_name: 'TieringOffloadingSpec',
      secondary_tiers: [{ type: 'MemoryTier', module_path: TIER, custom_param: 'value', locality: 'REMOTE' }],
    });
    const tier = config.secondaryTiers[0]!;
    assert.ok(tier.type === 'module');
    assert.equal(tier.className, 'MemoryTier');
    assert.equal(tier.options['custom_param'], 'value');
    assert.equal(tier.locality, 'REMOTE');
  });

  test('a missing module, a missing class, a wrong shape and a missing module_path are refused', () => {
    const tiers = (t: Record<string, unknown>) => ({
      spec_name: 'TieringOffloadingSpec',
      secondary_tiers: [t],
    });
    refused(
      tiers({ type: 'MemoryTier', module_path: './no-such-tier.mjs' }),
      'secondary_tiers[0].module_path',
      /Cannot find module "\.\/no-such-tier\.mjs"/,
    );
    refused(tiers({ type: 'Nope', module_path: TIER }), 'secondary_tiers[0].type', /has no class "Nope"/);
    refused(
      tiers({ type: 'NotATier', module_path: TIER }),
      'secondary_tiers[0].type',
      /lacks putMany, getMany/,
    );
    refused(
      tiers({ type: 's3' }),
      'secondary_tiers[0].type',
      /expected one of 'fs', 'redis', 'obj', 'p2p', or a class name/,
    );
  });
});

describe('eviction policy by eviction_policy + cache_policy_module_path', () => {
  test("the CPU tier evicts with the module's policy", () => {
    const config = parse({ eviction_policy: 'FifoPolicy', cache_policy_module_path: POLICY });
    assert.equal(config.evictionPolicy, 'FifoPolicy');
    const withPolicy = buildEngineConfig({
      model: 'tiny',
      block_size: 16,
      num_gpu_blocks: 32,
      max_model_len: 128,
      kv_transfer_config: {
        kv_connector: 'OffloadingConnector',
        kv_role: 'kv_both',
        kv_connector_extra_config: {
          cpu_bytes_to_use: 4 * MiB,
          eviction_policy: 'FifoPolicy',
          cache_policy_module_path: POLICY,
        },
      },
    });
    const c = new OffloadingConnector(withPolicy, 'scheduler', tinyKvCacheConfig(withPolicy));
    assert.equal(c.scheduler!.index.policy.name, 'FifoPolicy');
    const slots = c.scheduler!.index.numSlots;
    for (let i = 0; i <= slots; i++) {
      c.scheduler!.index.allocate(`k${i}`);
      c.scheduler!.index.markReady(`k${i}`);
      if (i === 0) c.scheduler!.index.touch('k0');
    }
    assert.equal(
      c.scheduler!.index.policy.has('k0'),
      false,
      'FIFO: the first key left although it was the most recently used',
    );
  });

  test('unknown names and bad modules are refused naming the key', () => {
    refused({ eviction_policy: 'mru' }, 'eviction_policy', /expected 'lru' or 'arc', or a class name/);
    refused(
      { eviction_policy: 'FifoPolicy', cache_policy_module_path: './missing.cjs' },
      'cache_policy_module_path',
      /Cannot find module/,
    );
    refused(
      { eviction_policy: 'Lifo', cache_policy_module_path: POLICY },
      'eviction_policy',
      /has no class "Lifo"/,
    );
    refused(
      { eviction_policy: 'MemoryTier', cache_policy_module_path: TIER },
      'eviction_policy',
      /lacks has, touch, insert/,
    );
  });
});

describe('spec by spec_name + spec_module_path', () => {
  test("the spec's tier and policy serve an engine; a second engine loads from the spec's tier", async () => {
    const config = parse({ spec_name: 'MemorySpec', spec_module_path: SPEC });
    assert.equal(config.specName, 'MemorySpec');
    assert.ok(config.specClass);
    const external = await sharedAcrossEngines({
      kv_connector: 'OffloadingConnector',
      kv_role: 'kv_both',
      kv_connector_extra_config: {
        cpu_bytes_to_use: 16 * MiB,
        spec_name: 'MemorySpec',
        spec_module_path: SPEC,
      },
    });
    assert.ok(external >= 48, `loaded ${external} tokens through the spec's tier`);
  });

  test('an unknown spec or a module without one is refused', () => {
    refused({ spec_name: 'MySpec' }, 'spec_name', /Unsupported spec type: MySpec/);
    refused({ spec_name: 'MySpec', spec_module_path: SPEC }, 'spec_name', /has no class "MySpec"/);
    refused(
      { spec_name: 'NotATier', spec_module_path: TIER },
      'spec_name',
      /lacks secondaryTiers, evictionPolicy/,
    );
  });
});
