/**
 * The p2p tier's wire (src/wire/p2p-params.ts, p2p-messages.ts): the roles a proxy formats
 * come back as the same roles on the engine, for every allowed combination; forbidden
 * combinations and malformed roles are refused by the server with a 400 that names the field,
 * what was expected, what was received and the fix; every control message survives a frame
 * round trip and a malformed one is refused naming the field.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { KVError } from '../../src/errors/index.ts';
import { parseKvTransferParams } from '../../src/server/kv-transfer-params.ts';
import {
  formatP2PFrame,
  formatP2PParams,
  invalidKvTransferParam,
  P2PFrameReader,
  type P2PMessage,
  type P2PRoles,
  parseP2PMessage,
  readP2PRoles,
} from '../../src/wire/index.ts';
import { host, overTheWire, PLAIN, port } from './helpers.ts';

const id = fc.string({ minLength: 1, maxLength: 60 });
const source = fc.record({ kvRequestId: id, host: host.filter((h) => h !== ''), port }, PLAIN);
const decoder = fc.record({ kvRequestId: id }, PLAIN);

/** The combinations vLLM allows: each role alone, and remote_decoder + remote_kv_source. */
const roles: fc.Arbitrary<P2PRoles> = fc.oneof(
  decoder.map((d) => ({ decoder: d, prefiller: null, kvSource: null })),
  source.map((s) => ({ decoder: null, prefiller: s, kvSource: null })),
  source.map((s) => ({ decoder: null, prefiller: null, kvSource: s })),
  fc.tuple(decoder, source).map(([d, s]) => ({ decoder: d, prefiller: null, kvSource: s })),
);

test('roles: read(format(r)) is r for every allowed combination, and the server accepts them', () => {
  fc.assert(
    fc.property(roles, (r) => {
      const params = overTheWire(formatP2PParams(r)) as Record<string, unknown>;
      assert.equal(invalidKvTransferParam(params), null, JSON.stringify(params));
      assert.deepEqual(readP2PRoles(params), r);
      assert.deepEqual(parseKvTransferParams(params), params);
    }),
    { numRuns: 300 },
  );
  assert.equal(readP2PRoles({ do_remote_prefill: true }), null, 'no role: not a p2p request');
});

function refused(params: Record<string, unknown>): KVError {
  try {
    parseKvTransferParams(params);
  } catch (err) {
    assert.ok(err instanceof KVError);
    assert.equal(err.status, 400);
    return err;
  }
  assert.fail(`accepted ${JSON.stringify(params)}`);
}

test('forbidden combinations are a 400 naming the keys, what is allowed and the fix', () => {
  const src = { kv_request_id: 'x', remote_host: '10.0.0.2', remote_port: 5710 };
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ remote_prefiller: src, remote_decoder: { kv_request_id: 'x' } }, /contradictory roles/],
    [{ remote_prefiller: src, remote_kv_source: src }, /two competing fetch sources/],
    [
      { remote_prefiller: src, remote_kv_source: src, remote_decoder: { kv_request_id: 'x' } },
      /contradictory roles/,
    ],
  ];
  for (const [params, why] of cases) {
    const err = refused(params);
    const keys = Object.keys(params).sort();
    assert.match(err.message, /^Invalid kv_transfer_params\.remote_/);
    assert.match(
      err.message,
      /expected one of remote_decoder, remote_prefiller, remote_kv_source, or remote_decoder \+ remote_kv_source/,
    );
    for (const k of keys) assert.match(err.message, new RegExp(k));
    assert.match(String(err.hint), why);
    assert.match(String(err.hint), /keep one/);
  }
});

test('malformed roles are a 400 naming the exact field', () => {
  const cases: [Record<string, unknown>, string, RegExp][] = [
    [{ remote_decoder: {} }, 'remote_decoder.kv_request_id', /non-empty string/],
    [{ remote_decoder: 'abc' }, 'remote_decoder', /an object with kv_request_id/],
    [
      { remote_prefiller: { kv_request_id: 'x', remote_port: 5710 } },
      'remote_prefiller.remote_host',
      /p2p host/,
    ],
    [
      { remote_kv_source: { kv_request_id: 'x', remote_host: 'h', remote_port: '5710' } },
      'remote_kv_source.remote_port',
      /integer port in 1\.\.65535/,
    ],
    [
      { remote_kv_source: { remote_host: 'h', remote_port: 1 } },
      'remote_kv_source.kv_request_id',
      /non-empty/,
    ],
  ];
  for (const [params, field, expected] of cases) {
    const err = refused(params);
    assert.equal(err.field, `kv_transfer_params.${field}`);
    assert.match(err.message, expected);
    assert.match(err.message, /received/);
    assert.ok(err.hint && err.hint.length > 10, 'a hint says how to fix it');
  }
});

const hashes = fc.array(fc.string({ maxLength: 64 }), { maxLength: 8 });

/** A message whose `key` list runs parallel to its block_hashes. */
function parallel<T>(
  type: 'lookup_resp' | 'fetch',
  key: string,
  item: fc.Arbitrary<T>,
): fc.Arbitrary<P2PMessage> {
  return hashes.chain((h) =>
    fc
      .array(item, { minLength: h.length, maxLength: h.length })
      .chain((list) =>
        fc.constant({ type, kv_request_id: 'k', block_hashes: h, [key]: list } as unknown as P2PMessage),
      ),
  );
}
const messages: fc.Arbitrary<P2PMessage> = fc.oneof(
  fc.record(
    {
      type: fc.constant('connect' as const),
      peer_id: fc.string(),
      agent_metadata: fc.dictionary(fc.string({ minLength: 1 }), fc.string(), { noNullPrototype: true }),
      block_len: fc.integer({ min: 1, max: 1 << 24 }),
      num_blocks: fc.integer({ min: 1, max: 1 << 16 }),
      config_fingerprint: fc.string(),
      hash_seed: fc.string(),
    },
    PLAIN,
  ),
  fc.record({ type: fc.constant('lookup' as const), kv_request_id: id, block_hashes: hashes }, PLAIN),
  parallel('lookup_resp', 'hits', fc.boolean()),
  parallel('fetch', 'block_indexes', fc.nat()),
  fc.record({ type: fc.constant('transfer_done' as const), kv_request_id: id, success: fc.boolean() }, PLAIN),
  fc.record({ type: fc.constant('abort_fetch' as const), kv_request_id: id }, PLAIN),
);

test('control messages: every message comes back from its frame, also split across reads', () => {
  fc.assert(
    fc.property(fc.array(messages, { minLength: 1, maxLength: 5 }), fc.nat({ max: 64 }), (msgs, cut) => {
      const bytes = Buffer.concat(msgs.map(formatP2PFrame));
      const at = Math.min(cut, bytes.length);
      const reader = new P2PFrameReader();
      const got = [...reader.push(bytes.subarray(0, at)), ...reader.push(bytes.subarray(at))];
      assert.deepEqual(got, msgs);
    }),
    { numRuns: 200 },
  );
});

test('a malformed control message is refused naming the field', () => {
  assert.throws(
    () =>
      parseP2PMessage({ type: 'fetch', kv_request_id: 'k', block_hashes: ['a', 'b'], block_indexes: [1] }),
    /block_hashes\/block_indexes length mismatch: 2 vs 1/,
  );
  assert.throws(
    () => parseP2PMessage({ type: 'lookup_resp', kv_request_id: 'k', block_hashes: ['a'], hits: [1] }),
    /hits: expected a list of booleans/,
  );
  assert.throws(() => parseP2PMessage({ type: 'connect', peer_id: 'p' }), /agent_metadata: expected a map/);
  assert.throws(() => parseP2PMessage({ type: 'teleport' }), /unknown type "teleport"/);
});
