import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { dottedArgsToObject } from '../../src/config/dotted-args.ts';
import { KV_TRANSFER_CONFIG_FIELDS, KVTransferConfig } from '../../src/config/kv-transfer-config.ts';
import { KVError } from '../../src/errors/kv-error.ts';

function acceptedOrKVError(fn: () => unknown): void {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof KVError, `not a KVError: ${String(e)}`);
    assert.ok(e.code.length > 0 && e.message.length > 0);
  }
}

test('random JSON text never crashes the parser', () => {
  fc.assert(
    fc.property(fc.oneof(fc.json(), fc.string()), (text) =>
      acceptedOrKVError(() => KVTransferConfig.fromJSON(text)),
    ),
    { numRuns: 500 },
  );
});

test('random objects built from real field names are accepted or rejected with a coded error', () => {
  const key = fc.oneof(fc.constantFrom(...KV_TRANSFER_CONFIG_FIELDS), fc.string());
  const value = fc.oneof(
    fc.jsonValue(),
    fc.constantFrom('kv_producer', 'kv_consumer', 'kv_both', 'fail', 'recompute', 'NixlConnector', ''),
  );
  fc.assert(
    fc.property(fc.dictionary(key, value), (obj) => {
      let cfg: KVTransferConfig | undefined;
      acceptedOrKVError(() => {
        cfg = KVTransferConfig.fromObject(obj);
      });
      if (cfg) {
        assert.equal(typeof cfg.engine_id, 'string');
        if (cfg.kv_connector !== null) assert.notEqual(cfg.kv_role, null);
      }
    }),
    { numRuns: 1000 },
  );
});

test('random dotted arguments never crash', () => {
  const arg = fc.record({ path: fc.string(), value: fc.string() });
  fc.assert(
    fc.property(fc.array(arg, { maxLength: 5 }), (args) =>
      acceptedOrKVError(() => KVTransferConfig.fromObject(dottedArgsToObject(args))),
    ),
    { numRuns: 500 },
  );
});
