import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  AckReconciler,
  buildPing,
  moriioExpectedAckCount,
  moriioExpectedWriteDoneCount,
  moriioPeerRanks,
  moriioRemoteTpRank,
  prefillPeerOf,
  validateMoRIIOHeterogeneousTp,
} from '../../../src/connectors/moriio/index.ts';
import { captureLogs } from '../../../src/logging/logger.ts';
import { parseMoRIIORequestId, parseMoRIIOZmqAddress } from '../../../src/wire/index.ts';

const P = 'host:10.0.0.1,handshake:6301,notify:61005';
const D = 'host:10.0.0.2,handshake:6401,notify:62005';
const HEX = '0123456789abcdef0123456789abcdef';

describe('MoRIIO addressing (docs/connectors/moriio.md#addressing-the-peer)', () => {
  it('parses both peers out of the proxy request id, also when wrapped by the API server', () => {
    for (const id of [
      `___prefill_addr_${P}___decode_addr_${D}_${HEX}`,
      `___prefill_addr_${P}___decode_addr_${D}_${HEX}-0`,
      `___prefill_addr_${P}___decode_addr_${D}_${HEX}-1a2b3c4d`,
    ]) {
      const a = parseMoRIIORequestId(id);
      assert.deepEqual(a?.prefill, { host: '10.0.0.1', handshakePort: 6301, notifyPort: 61005 });
      assert.deepEqual(a?.decode, { host: '10.0.0.2', handshakePort: 6401, notifyPort: 62005 });
    }
    assert.equal(parseMoRIIORequestId('cmpl-plain-id'), null);
  });

  it('splits each segment on its first colon, so IPv6 hosts survive', () => {
    assert.deepEqual(parseMoRIIOZmqAddress('host:fe80::1,handshake:1,notify:2'), {
      host: 'fe80::1',
      handshakePort: 1,
      notifyPort: 2,
    });
  });

  it('rejects a malformed address with vLLM message verbatim', () => {
    for (const bad of ['host:1.2.3.4,handshake:x,notify:5', 'nonsense', 'host:1.2.3.4,notify:5']) {
      assert.throws(
        () => parseMoRIIOZmqAddress(bad),
        (e: Error) =>
          e.message ===
          `Malformed zmq_address '${bad}': expected 'host:IP,handshake:PORT,notify:PORT' format`,
      );
    }
    assert.throws(
      () => parseMoRIIORequestId(`___prefill_addr_host:1.2.3.4___decode_addr_${D}_${HEX}`),
      (e: Error) => e.message.startsWith("Malformed zmq_address 'host:1.2.3.4': expected"),
    );
  });

  it('falls back to explicit kv_transfer_params, and prefers the embedding when both exist', () => {
    const params = {
      remote_host: '10.9.9.9',
      remote_handshake_port: 7000,
      remote_notify_port: '7100',
      remote_dp_rank: 3,
      remote_dp_size: 2,
      remote_tp_size: 2,
    };
    assert.deepEqual(prefillPeerOf('cmpl-abc-0', params), {
      host: '10.9.9.9',
      handshakePort: 7000,
      notifyPort: 7100,
      dpRankLocal: 1,
      tpSize: 2,
    });
    const embedded = prefillPeerOf(`___prefill_addr_${P}___decode_addr_${D}_${HEX}`, params);
    assert.equal(embedded?.host, '10.0.0.1');
    assert.equal(embedded?.tpSize, 2);
    assert.equal(prefillPeerOf('cmpl-abc-0', { remote_host: 'h' }), null);
    assert.deepEqual(
      prefillPeerOf('x', { remote_hosts: ['10.1.1.1'], remote_handshake_port: 1, remote_notify_port: 2 }),
      {
        host: '10.1.1.1',
        handshakePort: 1,
        notifyPort: 2,
        dpRankLocal: 0,
        tpSize: 1,
      },
    );
  });
});

describe('MoRIIO ACK reconciliation (docs/connectors/moriio.md#holding-and-releasing-ps-blocks)', () => {
  it('frees held requests on ACK, parks early ACKs, reaps holds after defer_timeout with the warning', async () => {
    let now = 0;
    const r = new AckReconciler(60, () => now);
    r.defer('a', 'tx-a');
    assert.deepEqual(r.reconcile(['a']), ['a']);
    // Early ACK: arrives before request_finished; freed once the request is held.
    assert.equal(r.reconcile(['b']), null);
    r.defer('b', 'tx-b');
    assert.deepEqual(r.reconcile(null), ['b']);
    // A stale parked ACK is dropped after defer_timeout and never frees a later hold.
    assert.equal(r.reconcile(['c']), null);
    now += 61_000;
    assert.equal(r.reconcile(null), null);
    r.defer('c', 'tx-c');
    assert.equal(r.reconcile(null), null);
    const reaped: string[] = [];
    now += 60_001;
    const { result, records } = await captureLogs(() => r.reconcile(null, (tx) => reaped.push(tx)));
    assert.deepEqual(result, ['c']);
    assert.deepEqual(reaped, ['tx-c']);
    assert.ok(
      records.some(
        (x) =>
          x.level === 'warn' &&
          x.message ===
            'Reaped 1 deferred sends with no finished_sending notification after 60s. This indicates lost async KV completion notifications from the KV connector.',
      ),
    );
    assert.equal(r.held, 0);
  });
});

describe('MoRIIO heterogeneous TP (docs/connectors/moriio.md#heterogeneous-tensor-parallelism)', () => {
  it('maps ranks, counts ACKs and write_done notifications', () => {
    assert.equal(moriioRemoteTpRank(1, 2, 2), 1);
    assert.equal(moriioRemoteTpRank(1, 1, 2), 2);
    assert.equal(moriioRemoteTpRank(3, 4, 2), 1);
    assert.deepEqual(moriioPeerRanks(0, 1, 2), [0, 1]);
    assert.deepEqual(moriioPeerRanks(1, 2, 1), [0]);
    assert.equal(moriioExpectedAckCount(1, 2), 2);
    assert.equal(moriioExpectedAckCount(2, 1), 1);
    assert.equal(moriioExpectedWriteDoneCount(2, 1), 2);
    assert.equal(moriioExpectedWriteDoneCount(1, 2), 1);
    assert.throws(
      () => moriioRemoteTpRank(0, 2, 3),
      /remote tp_size 3 must be a multiple of local tp_size 2/,
    );
  });

  it('requires replicated KV heads on both sides, with vLLM message', () => {
    validateMoRIIOHeterogeneousTp(2, 2, 2);
    validateMoRIIOHeterogeneousTp(1, 1, 2);
    assert.throws(
      () => validateMoRIIOHeterogeneousTp(2, 1, 2),
      (e: Error) =>
        e.message ===
        'MoRIIO heterogeneous TP requires replicated KV heads on both prefill and decode. Got total_num_kv_heads=2, local_tp_size=1, remote_tp_size=2.',
    );
  });
});

describe('MoRIIO discovery ping', () => {
  it('carries type, http and zmq addresses, sizes and mode', () => {
    const cfg = {
      hostIp: '10.0.0.5',
      httpPort: 8100,
      handshakePort: 6301,
      notifyPort: 61005,
      tpSize: 2,
      readMode: true,
    } as Parameters<typeof buildPing>[0];
    assert.deepEqual(buildPing(cfg, true, 1), {
      type: 'P',
      http_address: '10.0.0.5:8100',
      zmq_address: 'host:10.0.0.5,handshake:6301,notify:61005',
      dp_size: 1,
      tp_size: 2,
      transfer_mode: 'READ',
    });
    assert.equal(buildPing({ ...cfg, readMode: false }, false, 2).type, 'D');
  });
});
