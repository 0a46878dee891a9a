import assert from 'node:assert/strict';
import { it } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { type AgentMetadata, InThreadTransferAgent } from '../../src/transfer/index.ts';
import { startFaultRelay } from '../helpers/fault-relay.ts';
import { blocksEqual, makeRegion } from './helpers/pattern.ts';

setLogLevel('silent');
const BB = 4096;

/** Flips one payload byte of the `nth` data frame from server to client, through the fault relay. */
async function corruptingRelay(target: number, nth: number, byteInFrame: number) {
  let seen = 0;
  let hit: { block: number; count: number } | null = null;
  const relay = await startFaultRelay({
    targetPort: target,
    frames: (dir, h, payload) => {
      if (dir === 'down' && h.type === 'data' && payload && ++seen === nth) {
        payload[byteInFrame]! ^= 0x01;
        hit = { block: h.block, count: h.count };
      }
      return { action: 'forward' };
    },
  });
  return { port: relay.port, hit: () => hit, close: () => relay.close() };
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
