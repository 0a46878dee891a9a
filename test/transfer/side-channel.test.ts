import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { isKVError } from '../../src/errors/index.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { fetchRemoteMetadata, SideChannelServer } from '../../src/transfer/index.ts';

setLogLevel('silent');

describe('side channel', () => {
  it('serves every local rank’s metadata and advertises the port actually bound', async () => {
    const server = new SideChannelServer({
      host: '127.0.0.1',
      port: 0,
      getMetadata: (rank) => (rank < 2 ? { engineId: 'E', tpRank: rank } : undefined),
    });
    const bound = await server.start();
    assert.ok(bound.port > 0);
    assert.deepEqual(server.address(), bound);
    for (const rank of [0, 1]) {
      const { metadata, remotePerf } = await fetchRemoteMetadata('127.0.0.1', bound.port, rank);
      assert.deepEqual(metadata, { engineId: 'E', tpRank: rank });
      assert.ok(Number.isFinite(remotePerf));
    }
    await assert.rejects(fetchRemoteMetadata('127.0.0.1', bound.port, 5), /no tensor-parallel rank 5/);
    await server.close();
  });

  it('fails with a KVError naming the port when it is already in use', async () => {
    const first = new SideChannelServer({ host: '127.0.0.1', port: 0, getMetadata: () => ({}) });
    const { port } = await first.start();
    const second = new SideChannelServer({
      host: '127.0.0.1',
      port,
      getMetadata: () => ({}),
      portHint: 'Set VLLM_NIXL_SIDE_CHANNEL_PORT or side_channel_port to a free port.',
    });
    await assert.rejects(second.start(), (e: unknown) => {
      assert.ok(isKVError(e));
      assert.equal(e.code, 'SIDE_CHANNEL_PORT_IN_USE');
      assert.ok(e.message.includes(String(port)));
      assert.match(e.hint ?? '', /VLLM_NIXL_SIDE_CHANNEL_PORT/);
      return true;
    });
    await second.close();
    await first.close();
  });

  it('times out against a listener that never answers', async () => {
    const sockets: Socket[] = [];
    const silent = createServer((s) => sockets.push(s));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const addr = silent.address();
    const port = typeof addr === 'object' && addr ? addr.port : 0;
    const t0 = Date.now();
    await assert.rejects(fetchRemoteMetadata('127.0.0.1', port, 0, { timeoutMs: 300 }), (e: unknown) => {
      return isKVError(e) && e.code === 'SIDE_CHANNEL_TIMEOUT' && e.message.includes(`127.0.0.1:${port}`);
    });
    const took = Date.now() - t0;
    assert.ok(took >= 250 && took < 2000, `timed out after ${took} ms`);
    for (const s of sockets) s.destroy();
    await new Promise<void>((r) => silent.close(() => r()));
  });

  it('authenticates with a shared secret and refuses a wrong one', async () => {
    const server = new SideChannelServer({
      host: '127.0.0.1',
      port: 0,
      getMetadata: () => ({ ok: 1 }),
      secret: 'k',
    });
    const { port } = await server.start();
    assert.deepEqual((await fetchRemoteMetadata('127.0.0.1', port, 0, { secret: 'k' })).metadata, { ok: 1 });
    await assert.rejects(
      fetchRemoteMetadata('127.0.0.1', port, 0, { secret: 'other' }),
      /authentication failed/,
    );
    await assert.rejects(fetchRemoteMetadata('127.0.0.1', port, 0), (e: unknown) => isKVError(e));
    await server.close();
  });
});
