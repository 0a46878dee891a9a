/**
 * The environment-variable registry (src/util/envs.ts): docs/environment.md lists it, every
 * variable the code names is in it, and its parsers read values as vLLM does.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { ENV_DOC, renderEnvTable } from '../../scripts/env-doc.ts';
import { ENV_VARS, readEnv } from '../../src/util/envs.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function files(dir: string, exts: readonly string[]): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory()
      ? files(join(dir, d.name), exts)
      : exts.some((e) => d.name.endsWith(e))
        ? [join(dir, d.name)]
        : [],
  );
}

/** Names that look like variables but are not read from the environment. */
const NOT_VARIABLES = new Set(['KVCONNECT_VERSION']);

test('docs/environment.md holds the table generated from src/util/envs.ts (run scripts/env-doc.ts)', () => {
  assert.ok(readFileSync(ENV_DOC, 'utf8').includes(renderEnvTable()));
});

test('the registry and the code name the same variables', () => {
  const named = new Set<string>();
  const sources = [
    ...files(join(ROOT, 'src'), ['.ts']).filter((f) => !f.endsWith(join('util', 'envs.ts'))),
    ...files(join(ROOT, 'native'), ['.c', '.cc', '.h']),
  ];
  for (const file of sources) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/\b(?:KVCONNECT|VLLM)_[A-Z0-9_]*[A-Z0-9]\b/g)) named.add(m[0]);
    for (const name of Object.keys(ENV_VARS))
      if (text.includes(`'${name}'`) || text.includes(`"${name}"`)) named.add(name);
  }
  assert.ok(named.size > 15, `only ${named.size} names found`);
  const unregistered = [...named].filter((n) => !(n in ENV_VARS) && !NOT_VARIABLES.has(n)).sort();
  assert.deepEqual(unregistered, [], 'named in src/ or native/ but not declared in src/util/envs.ts');
  const unread = Object.keys(ENV_VARS).filter((n) => !named.has(n));
  assert.deepEqual(unread, [], 'declared in src/util/envs.ts but read nowhere');
});

test('flags are on only at exactly 1; other variables parse as their readers need', () => {
  assert.equal(readEnv('KVCONNECT_DISABLE_NATIVE', {}), false);
  assert.equal(readEnv('KVCONNECT_DISABLE_NATIVE', { KVCONNECT_DISABLE_NATIVE: '1' }), true);
  assert.equal(readEnv('KVCONNECT_DISABLE_NATIVE', { KVCONNECT_DISABLE_NATIVE: 'true' }), false);
  assert.equal(
    readEnv('KVCONNECT_DISABLE_AVX512', { KVCONNECT_DISABLE_AVX512: '' }),
    true,
    'getenv() != NULL',
  );
  // vLLM: int(os.getenv("VLLM_SERVER_DEV_MODE", "0")) != 0.
  assert.equal(readEnv('VLLM_SERVER_DEV_MODE', {}), false);
  assert.equal(readEnv('VLLM_SERVER_DEV_MODE', { VLLM_SERVER_DEV_MODE: '2' }), true);
  assert.equal(readEnv('VLLM_SERVER_DEV_MODE', { VLLM_SERVER_DEV_MODE: '0' }), false);
  assert.equal(readEnv('VLLM_SERVER_DEV_MODE', { VLLM_SERVER_DEV_MODE: 'on' }), false);
  assert.equal(readEnv('PYTHONHASHSEED', { PYTHONHASHSEED: '' }), '', 'an empty seed is a seed');
  assert.equal(readEnv('OPENAI_API_KEY', {}), undefined);
});
