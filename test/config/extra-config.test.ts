import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  type ExtraConfigSchema,
  extraConfigWarnings,
  parseExtraBoolean,
  parseExtraNumber,
  readExtraConfig,
} from '../../src/config/extra-config.ts';
import { KVError } from '../../src/errors/index.ts';
import { captureLogs } from '../../src/logging/logger.ts';

const SCHEMA = {
  connector: 'TestConnector',
  fields: {
    flag: { type: 'boolean', default: true },
    count: { type: 'integer', default: 4, min: 1 },
    seconds: { type: 'number', default: 30, min: 0, aboveMin: true },
    port: { type: 'integer', default: 6301, min: 1, max: 65535, falsyIsDefault: true },
    optional: { type: 'integer' },
    policy: { type: 'string', default: 'lru', oneOf: ['lru', 'arc'] },
    host: { type: 'string', nonEmpty: true },
    raw: { type: 'custom' },
    legacy: { type: 'ignored', why: 'not needed here' },
  },
} as const satisfies ExtraConfigSchema;

test('booleans: JSON booleans, 1/0 and the words true/false/1/0 in any case; anything else is refused', () => {
  for (const v of [true, 1, 'true', 'TRUE', ' True ', '1'])
    assert.equal(parseExtraBoolean(v), true, String(v));
  for (const v of [false, 0, 'false', 'False', ' FALSE', '0'])
    assert.equal(parseExtraBoolean(v), false, String(v));
  for (const v of ['yes', 'no', 'on', '', 2, 'truee', {}, []])
    assert.equal(parseExtraBoolean(v), null, String(v));
});

test('numbers: JSON numbers and numeric strings (trimmed, Python-style underscores)', () => {
  assert.equal(parseExtraNumber(12.5), 12.5);
  assert.equal(parseExtraNumber(' 7000 '), 7000);
  assert.equal(parseExtraNumber('1_000'), 1000);
  assert.equal(parseExtraNumber('-1'), -1);
  assert.equal(parseExtraNumber('1e3'), 1000);
  for (const v of ['', ' ', 'abc', '1__0', '_1', '0x10', Number.NaN, Number.POSITIVE_INFINITY, true, null]) {
    assert.equal(parseExtraNumber(v), null, String(v));
  }
});

test('defaults apply to absent and null keys; set keys are parsed', () => {
  const d = readExtraConfig(SCHEMA, { legacy: null });
  assert.deepEqual(d, {
    flag: true,
    count: 4,
    seconds: 30,
    port: 6301,
    optional: undefined,
    policy: 'lru',
    host: undefined,
    raw: undefined,
    legacy: null,
  });
  const v = readExtraConfig(SCHEMA, {
    flag: 'false',
    count: '8',
    seconds: 0.5,
    port: 0,
    optional: -3,
    policy: 'arc',
    host: 'h',
    raw: [1, 2],
  });
  assert.deepEqual(
    [v.flag, v.count, v.seconds, v.port, v.optional, v.policy, v.host, v.raw],
    [false, 8, 0.5, 6301, -3, 'arc', 'h', [1, 2]],
  );
});

test('a bad value names the key, what was expected and what was received', () => {
  const cases: [Record<string, unknown>, string, string][] = [
    [{ flag: 'yes' }, 'flag', 'expected true or false, received "yes"'],
    [{ count: 0 }, 'count', 'expected an integer >= 1, received 0'],
    [{ count: 2.5 }, 'count', 'expected an integer >= 1, received 2.5'],
    [{ seconds: 0 }, 'seconds', 'expected a number > 0, received 0'],
    [{ port: 70000 }, 'port', 'expected an integer >= 1 and <= 65535, received 70000'],
    [{ policy: 'mru' }, 'policy', "expected 'lru' or 'arc', received \"mru\""],
    [{ host: '' }, 'host', 'expected a non-empty string, received ""'],
    [{ host: 5 }, 'host', 'expected a non-empty string, received 5'],
  ];
  for (const [extra, key, text] of cases) {
    assert.throws(
      () => readExtraConfig(SCHEMA, extra),
      (e: unknown) =>
        e instanceof KVError &&
        e.code === 'KV_CONFIG_INVALID' &&
        e.field === `kv_connector_extra_config.${key}` &&
        e.message === `Invalid value for kv_connector_extra_config.${key}: ${text}` &&
        (e.hint ?? '').includes(key),
      `${key}: ${JSON.stringify(extra)}`,
    );
  }
  assert.throws(
    () => readExtraConfig({ ...SCHEMA, code: 'NIXL_BAD_EXTRA_CONFIG' }, { count: 'x' }),
    (e: unknown) => e instanceof KVError && e.code === 'NIXL_BAD_EXTRA_CONFIG',
  );
});

test('unknown keys and ignored vLLM keys are warned about, with the closest known key', async () => {
  const extra = { cuont: 3, legacy: 1, zzz: true };
  assert.deepEqual(extraConfigWarnings(SCHEMA, extra), [
    "Unknown key 'cuont' in kv_connector_extra_config of TestConnector is ignored (did you mean 'count'?). Known keys: flag, count, seconds, port, optional, policy, host, raw, legacy.",
    "Unknown key 'zzz' in kv_connector_extra_config of TestConnector is ignored. Known keys: flag, count, seconds, port, optional, policy, host, raw, legacy.",
    'TestConnector ignores kv_connector_extra_config.legacy: not needed here',
  ]);
  const { records } = await captureLogs(() => readExtraConfig(SCHEMA, extra));
  assert.deepEqual(
    records.filter((r) => r.level === 'warn').map((r) => r.message),
    extraConfigWarnings(SCHEMA, extra),
  );
  assert.deepEqual(extraConfigWarnings(SCHEMA, { count: 2 }), []);
});
