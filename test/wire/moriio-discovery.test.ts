/**
 * MoRIIO's discovery ping (src/wire/moriio-discovery.ts): the ping an engine formats is the
 * ping the proxy parses, for any instance.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { formatDiscoveryPing, parseDiscoveryPing, parseMoRIIOZmqAddress } from '../../src/wire/index.ts';
import { overTheWire, PLAIN, port, size, zmqAddress } from './helpers.ts';

test('parse(format(instance)) keeps every field; the zmq address parses back to the instance', () => {
  fc.assert(
    fc.property(
      fc.record(
        {
          producer: fc.boolean(),
          host: fc.ipV4(),
          httpPort: port,
          zmq: zmqAddress,
          dpSize: size,
          tpSize: size,
          readMode: fc.boolean(),
        },
        PLAIN,
      ),
      (instance) => {
        const ping = formatDiscoveryPing(instance);
        const parsed = parseDiscoveryPing(overTheWire(ping));
        assert.deepEqual(parsed, ping);
        assert.equal(parsed.type, instance.producer ? 'P' : 'D');
        assert.equal(parsed.http_address, `${instance.host}:${instance.httpPort}`);
        assert.deepEqual(parseMoRIIOZmqAddress(parsed.zmq_address), instance.zmq);
        assert.equal(parsed.transfer_mode, instance.readMode ? 'READ' : 'WRITE');
      },
    ),
    { numRuns: 300 },
  );
});
