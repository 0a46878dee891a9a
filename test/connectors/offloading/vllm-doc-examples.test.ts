/**
 * `kvconnect check-config` on every OffloadingConnector example of vLLM's offloading guide
 * (fixtures/vllm-docs/, verbatim). The two examples that name a Python module
 * (`my_package.my_module`) are refused with an error that says how to name a JavaScript
 * module, and pass once the module path names one of the JavaScript fixtures.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { runCli } from '../../../src/cli/program.ts';

const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url));
const read = (name: string) =>
  JSON.parse(readFileSync(fixture(`vllm-docs/${name}`), 'utf8')) as Record<string, unknown>;
const wrap = (extra: Record<string, unknown>) => ({
  kv_connector: 'OffloadingConnector',
  kv_role: 'kv_both',
  kv_connector_extra_config: extra,
});

async function checkConfig(
  config: Record<string, unknown>,
): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await runCli(
    ['check-config', '--model', 'tiny', '--block-size', '16', '--kv-transfer-config', JSON.stringify(config)],
    {
      out: (t) => {
        out += t;
      },
      err: (t) => {
        err += t;
      },
    },
  );
  return { code, out, err };
}

for (const name of ['single-tier.json', 'multi-tier-fs.json']) {
  test(`vLLM's ${name} example passes check-config`, async () => {
    const r = await checkConfig(read(name));
    assert.equal(r.code, 0, r.err);
  });
}

test('the examples naming a Python module fail clearly and pass with a JavaScript module', async () => {
  const policy = read('custom-eviction-policy.extra.json');
  const tier = read('out-of-tree-tier.extra.json');
  for (const [extra, field] of [
    [policy, 'cache_policy_module_path'],
    [tier, 'secondary_tiers[0].module_path'],
  ] as const) {
    const r = await checkConfig(wrap(extra));
    assert.equal(r.code, 2);
    assert.match(r.err, /Cannot find module "my_package\.my_module"/);
    assert.match(r.err, new RegExp(`kv_connector_extra_config\\.${field.replace(/[[\].]/g, '\\$&')}`));
    assert.match(r.err, /hint: Give a JavaScript file/);
  }
  const withPolicy = await checkConfig(
    wrap({ ...policy, eviction_policy: 'FifoPolicy', cache_policy_module_path: fixture('fifo-policy.cjs') }),
  );
  assert.equal(withPolicy.code, 0, withPolicy.err);
  const tiers = tier['secondary_tiers'] as Record<string, unknown>[];
  const withTier = await checkConfig(
    wrap({
      ...tier,
      secondary_tiers: [{ ...tiers[0], type: 'MemoryTier', module_path: fixture('memory-tier.mjs') }],
    }),
  );
  assert.equal(withTier.code, 0, withTier.err);
});

test('the p2p example: refused for the missing cpu_bytes_to_use as vLLM refuses it, accepted with it', async () => {
  const example = read('p2p-unbound-timeout.json');
  const r = await checkConfig(example);
  assert.equal(r.code, 2);
  assert.match(r.err, /cpu_bytes_to_use/);
  const extra = example['kv_connector_extra_config'] as Record<string, unknown>;
  const ok = await checkConfig({
    ...example,
    kv_connector_extra_config: { ...extra, cpu_bytes_to_use: 1 << 24 },
  });
  assert.equal(ok.code, 0, ok.err);
  // llm-d's offloading sidecar configuration: the pod's own host and the sidecar's p2p port.
  const llmd = await checkConfig(
    wrap({
      spec_name: 'TieringOffloadingSpec',
      cpu_bytes_to_use: 1 << 24,
      secondary_tiers: [{ type: 'p2p', host: '10.0.0.7', port: 7777 }],
    }),
  );
  assert.equal(llmd.code, 0, llmd.err);
});

test('p2p tier keys: a bad value names the field, what was expected and the fix', async () => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ port: 70000 }, /secondary_tiers\[0\]\.port: expected an integer port in 1\.\.65535/],
    [
      { backends: ['MOONCAKE'] },
      /secondary_tiers\[0\]\.backends: expected a non-empty list of TCP, SHM, UCX/,
    ],
    [
      { unbound_store_timeout_s: 0 },
      /secondary_tiers\[0\]\.unbound_store_timeout_s: expected a positive number of seconds/,
    ],
    [{ num_threads: -1 }, /secondary_tiers\[0\]\.num_threads: expected a positive integer/],
    [{ root_dir: '/tmp' }, /secondary_tiers\[0\]\.root_dir: expected one of the p2p tier's keys/],
  ];
  for (const [keys, message] of cases) {
    const r = await checkConfig(
      wrap({
        spec_name: 'TieringOffloadingSpec',
        cpu_bytes_to_use: 1 << 24,
        secondary_tiers: [{ type: 'p2p', ...keys }],
      }),
    );
    assert.equal(r.code, 2, JSON.stringify(keys));
    assert.match(r.err, message);
    assert.match(r.err, /hint: /);
  }
});
