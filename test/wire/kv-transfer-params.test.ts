/**
 * The kv_transfer_params of the P/D protocols (src/wire/nixl-params.ts, moriio-params.ts):
 * what P answers and what the proxy sends D is read back by D as the same engine, blocks and
 * layout, and every shape passes the server's type check of the known keys.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  invalidKvTransferParam,
  type KVTransferParams,
  moriioDecodeParams,
  moriioPrefillParams,
  moriioPrefillResult,
  NIXL_PREFILL_REQUEST,
  nixlPrefillResult,
  nixlPushDecodeParams,
  readMoRIIOPrefillPeer,
  readNixlRemote,
  readRemoteNumTokens,
} from '../../src/wire/index.ts';
import { blockGroups, host, overTheWire, PLAIN, port, rank, size, zmqAddress } from './helpers.ts';

const engineId = fc.string({ minLength: 1, maxLength: 40 });
const requestId = fc.string({ minLength: 1, maxLength: 60 });
const remote = fc.record({ engineId, host, port, tpSize: size }, PLAIN);

function wellTyped(params: KVTransferParams): void {
  assert.equal(invalidKvTransferParam(params), null, JSON.stringify(params));
}

test("NIXL: P's answer, relayed to D, names P's engine, the request's blocks and tokens", () => {
  fc.assert(
    fc.property(
      remote,
      requestId,
      blockGroups,
      fc.nat({ max: 4096 }),
      fc.constantFrom('pull' as const, 'push' as const),
      (r, id, blockIds, numTokens, mode) => {
        const sent = nixlPrefillResult({ remote: r, requestId: id, blockIds, numTokens, mode });
        const got = overTheWire(sent) as KVTransferParams;
        wellTyped(got);
        assert.deepEqual(readNixlRemote(got), r);
        assert.equal(readRemoteNumTokens(got), numTokens > 0 ? numTokens : null);
        assert.deepEqual(got['remote_block_ids'], blockIds);
        assert.equal(got['remote_request_id'], id);
        assert.equal(got['do_remote_prefill'], true);
      },
    ),
    { numRuns: 300 },
  );
  wellTyped(NIXL_PREFILL_REQUEST);
});

test("NIXL push: D's params from the proxy name P's side channel and the shared request id", () => {
  fc.assert(
    fc.property(remote, size, requestId, (r, ppSize, id) => {
      const got = overTheWire(nixlPushDecodeParams({ ...r, ppSize }, id)) as KVTransferParams;
      wellTyped(got);
      assert.deepEqual(readNixlRemote(got), r);
      assert.equal(got['remote_request_id'], id);
      assert.equal(got['remote_block_ids'], undefined, 'D registers its own blocks');
    }),
    { numRuns: 200 },
  );
});

test("MoRIIO: D reads P's address and layout from P's answer, and the proxy's READ params keep them", () => {
  const layout = fc.record({ dpSize: size, tpSize: size, dpRank: rank }, PLAIN);
  fc.assert(
    fc.property(
      engineId,
      zmqAddress,
      fc.array(fc.nat({ max: 100_000 }), { maxLength: 8 }),
      layout,
      size,
      layout,
      (id, address, blockIds, p, dpSizeLocal, d) => {
        const transferId = `tx-${id}`;
        const answer = overTheWire(
          moriioPrefillResult({ engineId: id, address, blockIds, ...p, dpSizeLocal, transferId }),
        ) as KVTransferParams;
        wellTyped(answer);
        assert.deepEqual(readMoRIIOPrefillPeer('cmpl-plain', answer), {
          address,
          dpRank: p.dpRank,
          dpSizeLocal,
          tpSize: p.tpSize,
        });
        wellTyped(moriioPrefillParams(d, transferId));
        const toD = overTheWire(moriioDecodeParams(p, transferId, answer)) as KVTransferParams;
        wellTyped(toD);
        assert.deepEqual(
          [toD['remote_engine_id'], toD['remote_block_ids'], toD['transfer_id']],
          [id, blockIds, transferId],
        );
        const peer = readMoRIIOPrefillPeer('cmpl-plain', {
          ...toD,
          remote_host: address.host,
          remote_handshake_port: address.handshakePort,
          remote_notify_port: address.notifyPort,
        });
        assert.deepEqual([peer?.dpRank, peer?.tpSize], [p.dpRank, p.tpSize]);
      },
    ),
    { numRuns: 200 },
  );
});

test('the server refuses a known key of the wrong type, naming it', () => {
  assert.deepEqual(invalidKvTransferParam({ remote_port: 70000 }), {
    key: 'remote_port',
    expected: 'an integer port in 0..65535',
    received: 70000,
  });
  assert.equal(invalidKvTransferParam({ remote_port: null, custom: { any: 1 } }), null);
});
