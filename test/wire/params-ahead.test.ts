/**
 * kv_transfer_params ahead on the wire (src/wire/params-ahead.ts): the 103's header value is
 * ASCII whatever the params hold and parses back to them; a value that is not a JSON object
 * is no params; only `1` asks.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  formatParamsAhead,
  PARAMS_AHEAD_HINT,
  paramsAheadOf,
  wantsParamsAhead,
} from '../../src/wire/index.ts';

test('the header value is ASCII and round-trips the params', () => {
  const params = {
    remote_block_ids: [[1, 2]],
    remote_request_id: 'cmpl-é✓-1',
    remote_host: 'h\r\nx',
    tp_size: 1,
  };
  const value = formatParamsAhead(params);
  assert.match(value, /^[\x20-\x7e]*$/);
  assert.deepEqual(paramsAheadOf({ [PARAMS_AHEAD_HINT]: value }), params);
});

test('a missing, non-JSON or non-object value is no params; only "1" asks', () => {
  for (const raw of [undefined, '', 'not json', '[1,2]', 'null', '3', ['{}']]) {
    assert.equal(paramsAheadOf({ [PARAMS_AHEAD_HINT]: raw }), null, String(raw));
  }
  assert.equal(wantsParamsAhead('1'), true);
  for (const v of [undefined, '0', 'true', ['1']]) assert.equal(wantsParamsAhead(v), false);
});
