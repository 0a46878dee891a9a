/**
 * MoRIIO's zmq address and request id (src/wire/moriio-address.ts): what one process formats,
 * the other parses back to the same values, for any host and port; malformed text is refused
 * with vLLM's message.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  formatMoRIIORequestId,
  formatMoRIIOZmqAddress,
  isMoRIIOZmqAddress,
  parseMoRIIORequestId,
  parseMoRIIOZmqAddress,
} from '../../src/wire/index.ts';
import { uuidHex, zmqAddress } from './helpers.ts';

test('zmq address: parse(format(a)) is a, for IPv4, IPv6 and host names', () => {
  fc.assert(
    fc.property(zmqAddress, (a) => {
      const text = formatMoRIIOZmqAddress(a);
      assert.deepEqual(parseMoRIIOZmqAddress(text), a);
      assert.ok(isMoRIIOZmqAddress(text));
    }),
    { numRuns: 300 },
  );
});

test('request id: both peers come back, also with the suffixes the API server appends', () => {
  fc.assert(
    fc.property(
      zmqAddress,
      zmqAddress,
      uuidHex,
      fc.constantFrom('', '-0', '-1a2b3c4d'),
      (p, d, hex, suffix) => {
        const id = formatMoRIIORequestId(p, d, hex);
        assert.deepEqual(parseMoRIIORequestId(`${id}${suffix}`), { prefill: p, decode: d });
      },
    ),
    { numRuns: 300 },
  );
  assert.equal(parseMoRIIORequestId('cmpl-plain-id'), null);
});

test('what could not be parsed back is refused when formatted, and malformed text when parsed', () => {
  for (const host of ['', 'a,b', 'a b', 'x___decode_addr_y']) {
    assert.throws(
      () => formatMoRIIOZmqAddress({ host, handshakePort: 1, notifyPort: 2 }),
      (e: { code: string }) => e.code === 'MORIIO_MALFORMED_ADDRESS',
    );
  }
  assert.throws(() => formatMoRIIOZmqAddress({ host: 'h', handshakePort: 0, notifyPort: 2 }));
  for (const bad of [
    'host:1.2.3.4,handshake:0,notify:5',
    'host:1.2.3.4,handshake:70000,notify:5',
    'nonsense',
  ]) {
    assert.equal(isMoRIIOZmqAddress(bad), false, bad);
    assert.throws(
      () => parseMoRIIOZmqAddress(bad),
      (e: Error) =>
        e.message === `Malformed zmq_address '${bad}': expected 'host:IP,handshake:PORT,notify:PORT' format`,
    );
  }
});
