import assert from 'node:assert/strict';
import { KVError } from '../../src/errors/kv-error.ts';

/** The KVError `fn` throws (fails the test when it throws nothing or something else). */
export function kvError(fn: () => unknown): KVError {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof KVError, String(e));
    return e;
  }
  assert.fail('expected a KVError');
}
