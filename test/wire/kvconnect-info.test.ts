/**
 * GET /kvconnect/info (src/wire/kvconnect-info.ts): what the server answers is what the proxy
 * reads back; the engine's identity wins over the connector's keys it may not set.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { formatKVConnectorInfo, formatMoRIIOZmqAddress, parseKVConnectorInfo } from '../../src/wire/index.ts';
import { host, overTheWire, PLAIN, port, rank, size, zmqAddress } from './helpers.ts';

const name = fc.string({ minLength: 1, maxLength: 30 });

test('parse(format(engine, advertisement)) gives the proxy every key it reads', () => {
  fc.assert(
    fc.property(
      fc.record(
        {
          kvConnector: fc.option(name, { nil: null }),
          connectorClass: fc.option(name, { nil: null }),
          kvRole: fc.option(fc.constantFrom('kv_producer', 'kv_consumer', 'kv_both'), { nil: null }),
          engineId: fc.option(name, { nil: null }),
          servedModelName: name,
          tpSize: size,
          dpSize: size,
          dpRank: rank,
          kvEvents: fc.option(
            fc.record(
              {
                endpoint: fc.constant('tcp://127.0.0.1:5557'),
                replay_endpoint: fc.option(fc.constant('tcp://127.0.0.1:5558'), { nil: null }),
                topic: fc.string({ maxLength: 8 }),
                block_size: size,
                prefix_caching_hash_algo: fc.constantFrom('sha256_cbor', 'xxhash'),
              },
              PLAIN,
            ),
            { nil: null },
          ),
        },
        PLAIN,
      ),
      fc.record(
        {
          connector: fc.constantFrom('NixlConnector', 'NixlPushConnector', 'MoRIIOConnector'),
          engine_id: name,
          side_channel_host: host,
          side_channel_port: port,
          transfer_mode: fc.constantFrom('pull', 'push', 'READ', 'WRITE'),
          pp_size: size,
          zmq_address: zmqAddress.map(formatMoRIIOZmqAddress),
        },
        { requiredKeys: [], ...PLAIN },
      ),
      (engine, advertised) => {
        const served = formatKVConnectorInfo(engine, advertised);
        const read = parseKVConnectorInfo(overTheWire(served));
        assert.ok(read);
        assert.equal(read.connector, advertised.connector ?? engine.kvConnector);
        assert.equal(read.engine_id, advertised.engine_id ?? engine.engineId ?? undefined);
        assert.equal(read.kv_role, engine.kvRole ?? undefined);
        assert.deepEqual(
          [read.tp_size, read.pp_size, read.dp_size],
          [engine.tpSize, advertised.pp_size ?? 1, engine.dpSize],
        );
        assert.equal(read.side_channel_host, advertised.side_channel_host);
        assert.equal(read.side_channel_port, advertised.side_channel_port);
        assert.equal(read.transfer_mode, advertised.transfer_mode);
        assert.equal(read.zmq_address, advertised.zmq_address);
        assert.deepEqual(read.kv_events, engine.kvEvents);
      },
    ),
    { numRuns: 300 },
  );
});

test("the engine's identity is not the connector's to change; extra keys pass through", () => {
  const info = formatKVConnectorInfo(
    {
      kvConnector: 'MultiConnector',
      connectorClass: 'MultiConnector',
      kvRole: 'kv_producer',
      engineId: 'e-1',
      servedModelName: 'tiny',
      tpSize: 2,
      dpSize: 1,
      dpRank: 0,
      kvEvents: null,
    },
    { connector: 'NixlConnector', kv_role: 'kv_consumer', tp_size: 8, backend: 'xgmi' },
  );
  assert.deepEqual(
    [
      info.connector,
      info.kv_connector,
      info.kv_role,
      info.tp_size,
      info.tensor_parallel_size,
      info['backend'],
    ],
    ['NixlConnector', 'MultiConnector', 'kv_producer', 2, 2, 'xgmi'],
  );
  assert.equal(parseKVConnectorInfo({ connector: 7 }), null, 'a connector that is not a name is no answer');
  assert.deepEqual(parseKVConnectorInfo({ connector: 'X', tp_size: 'two', zmq_address: 'nonsense' }), {
    connector: 'X',
  });
});
