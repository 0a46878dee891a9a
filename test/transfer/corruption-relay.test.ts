import assert from 'node:assert/strict';
import { connect, createServer, type Socket } from 'node:net';
import { it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { type AgentFrame, parseAgentFrame } from '../../src/transfer/frames.ts';
import { encodePrefixAndHeader, FrameDecoder } from '../../src/transfer/framing.ts';
import { type AgentMetadata, InThreadTransferAgent } from '../../src/transfer/index.ts';
import { blocksEqual, makeRegion } from './pattern.ts';

setLogLevel('silent');
const BB = 4096;

/**
 * A man-in-the-middle TCP relay: forwards client→server bytes untouched, and re-frames
 * server→client traffic, flipping one payload byte of the `nth` data frame in flight.
 */
async function corruptingRelay(target: number, nth: number, byteInFrame: number) {
  const sockets: Socket[] = [];
  let seen = 0;
  let hit: { block: number; count: number } | null = null;
  const server = createServer((client) => {
    const upstream = connect({ host: '127.0.0.1', port: target });
    sockets.push(client, upstream);
    client.on('data', (d) => upstream.write(d));
    const decoder = new FrameDecoder<AgentFrame>(
      {
        destination: (_h, len) => (len > 0 ? new Uint8Array(len) : null),
        frame: (h, payload) => {
          if (h.type === 'data' && payload && ++seen === nth) {
            payload[byteInFrame]! ^= 0x01;
            hit = { block: h.block, count: h.count };
          }
          client.write(encodePrefixAndHeader(h, payload?.length ?? 0));
          if (payload) client.write(payload);
        },
      },
      parseAgentFrame,
    );
    upstream.on('data', (d) => decoder.push(d));
    for (const s of [client, upstream]) {
      s.on('error', () => {});
      s.on('close', () => {
        client.destroy();
        upstream.destroy();
      });
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const addr = server.address();
  return {
    port: typeof addr === 'object' && addr ? addr.port : 0,
    hit: () => hit,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

it('a byte flipped in flight on a real TCP path fails exactly that block', async () => {
  const a = await InThreadTransferAgent.create({ engineId: 'A', backends: ['TCP'], chunkBytes: 8 * BB });
  const b = await InThreadTransferAgent.create({ engineId: 'B', backends: ['TCP'], chunkBytes: 8 * BB });
  const ra = makeRegion(0, BB, 64, 1);
  const rb = makeRegion(0, BB, 64, 2);
  a.registerMemory([ra]);
  b.registerMemory([rb]);
  b.grantRead('g', { blockIds: Array.from({ length: 64 }, (_, i) => i) });
  const relay = await corruptingRelay(b.metadata().endpoints.tcp.port, 3, 5 * BB + 17);
  const meta: AgentMetadata = {
    ...b.metadata(),
    endpoints: { tcp: { host: '127.0.0.1', port: relay.port } },
  };
  const remote = a.addRemoteAgent(meta);
  const s = await a.waitFor(
    a.read(remote, [{ localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: 32, count: 32 }]),
  );
  const hit = relay.hit();
  assert.ok(hit, 'the relay saw the third data frame');
  assert.deepEqual(hit, { block: 16, count: 8 });
  assert.equal(s.state, 'ERR');
  assert.deepEqual(s.failedBlockIds, [16 + 5]);
  assert.ok(blocksEqual(ra.bytes, 0, rb.bytes, 32, 21, BB), 'blocks before it are valid');
  assert.ok(blocksEqual(ra.bytes, 22, rb.bytes, 54, 10, BB), 'blocks after it are valid');
  await relay.close();
  await Promise.all([a.close(), b.close()]);
});
