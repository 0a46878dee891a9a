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
