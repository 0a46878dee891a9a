import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatErrorJson, formatErrorText, KVError } from '../../src/errors/index.ts';

test('KVError carries code, message, hint and cause; formatters show both', () => {
  const cause = new Error('root');
  const e = new KVError('KV_CONFIG_INVALID', 'the message', { hint: 'do this', cause, field: 'kv_role' });
  assert.equal(e.code, 'KV_CONFIG_INVALID');
  assert.equal(e.cause, cause);
  assert.equal(formatErrorText(e), 'error[KV_CONFIG_INVALID]: the message\nhint: do this');
  const body = formatErrorJson(e);
  assert.deepEqual(body, {
    error: {
      message: 'the message',
      type: 'BadRequestError',
      param: 'kv_role',
      code: 400,
      kvconnect_code: 'KV_CONFIG_INVALID',
      hint: 'do this',
    },
  });
  assert.deepEqual(structuredClone(e.toJSON()), e.toJSON());
});
