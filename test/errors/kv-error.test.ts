import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatErrorJson, formatErrorText, KVError } from '../../src/errors/index.ts';

test('KVError carries code, message, hint and cause; formatters show both', () => {
  const cause = new Error('root');
  const e = new KVError('SOME_CODE', 'the message', { hint: 'do this', cause, field: 'kv_role' });
  assert.equal(e.code, 'SOME_CODE');
  assert.equal(e.cause, cause);
  assert.equal(formatErrorText(e), 'error[SOME_CODE]: the message\nhint: do this');
  const body = formatErrorJson(e);
  assert.deepEqual(body, {
    error: {
      message: 'the message',
      type: 'BadRequestError',
      code: 'SOME_CODE',
      hint: 'do this',
      param: 'kv_role',
    },
  });
  assert.deepEqual(structuredClone(e.toJSON()), e.toJSON());
});
