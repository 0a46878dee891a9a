import assert from 'node:assert/strict';
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { createInterface, type Interface } from 'node:readline';
import { describe, it } from 'node:test';
import { crc32 } from 'node:zlib';
import { setLogLevel } from '../../src/logging/logger.ts';
import { type AgentMetadata, InThreadTransferAgent } from '../../src/transfer/index.ts';
import { MAPPED_BATCH_BYTES } from '../../src/transfer/peer-link.ts';
import { mappableSharedMemory } from '../../src/util/shared-memory.ts';
import { fillPattern, makeRegion } from './helpers/pattern.ts';

setLogLevel('silent');
const BB = 16 << 10;

interface Child {
  proc: ChildProcessWithoutNullStreams;
  meta: AgentMetadata;
  ask(line: string): Promise<string>;
  stop(): Promise<void>;
}

async function startChild(
  backend: string,
  numBlocks: number,
  seed: number,
  env: Record<string, string> = {},
): Promise<Child> {
  const proc = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      new URL('./fixtures/peer-child.ts', import.meta.url).pathname,
      backend,
      String(numBlocks),
      String(BB),
      String(seed),
    ],
    { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, KVCONNECT_LOG_LEVEL: 'silent', ...env } },
  );
  const lines: Interface = createInterface({ input: proc.stdout });
  const queue: ((l: string) => void)[] = [];
  lines.on('line', (l) => queue.shift()?.(l));
  const next = () => new Promise<string>((resolve) => queue.push(resolve));
  const meta = JSON.parse(await next()) as AgentMetadata;
  proc.stdin.on('error', () => {}); // the kill test writes to a child that is already gone
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  return {
    proc,
    meta,
    ask: (line) => {
      const p = next();
      proc.stdin.write(`${line}\n`);
      return p;
    },
    stop: async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.stdin.end('exit\n');
      await exited;
    },
  };
}

async function readsAndWrites(backend: string, env: Record<string, string>): Promise<void> {
  const N = 256;
  const child = await startChild(backend, N, 9, env);
  const agent = await InThreadTransferAgent.create({
    engineId: 'parent',
    agentName: 'parent',
    backends: [backend],
    ...(env['PEER_RING_BYTES'] ? { ringBytes: Number(env['PEER_RING_BYTES']) } : {}),
  });
  try {
    const local = makeRegion(0, BB, N, 5);
    agent.registerMemory([local]);
    const remote = agent.addRemoteAgent(child.meta);
    assert.equal(agent.transportFor(remote), backend.toLowerCase());
    if (env['KVCONNECT_DISABLE_NATIVE'] === '1') {
      assert.equal((JSON.parse(await child.ask('impl')) as { native: boolean }).native, false);
    }
    const expected = new Uint8Array(N * BB);
    fillPattern(expected, BB, 9);
    const reads = [
      [10, 100, 50],
      [70, 3, 5],
      [200, 160, 40],
    ] as const;
    const hs = reads.map(([l, r, n]) =>
      agent.read(remote, [{ localRegion: 0, localFirst: l, remoteRegion: 0, remoteFirst: r, count: n }]),
    );
    for (const h of hs) assert.equal((await agent.waitFor(h)).state, 'DONE');
    for (const [l, r, n] of reads) {
      assert.ok(
        Buffer.from(local.bytes.subarray(l * BB, (l + n) * BB)).equals(
          expected.subarray(r * BB, (r + n) * BB),
        ),
      );
    }
    const w = agent.write(remote, [
      { localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: 128, count: 100 },
    ]);
    assert.equal((await agent.waitFor(w)).state, 'DONE');
    const want = crc32(local.bytes.subarray(0, 100 * BB));
    assert.equal(Number(await child.ask('crc 128 100')), want);
  } finally {
    await agent.close();
    await child.stop();
  }
}

/**
 * The child runs each data-path variant the parent may meet: over shm, KV memory mapped
 * across the processes (with rings too small for a chunk, so nothing can go through them),
 * a peer whose KV memory cannot be mapped (the parent's chunks still are; its own go
 * through the ring), and a peer without the native addon at all (its ring is a file); over
 * tcp, a peer that reads accepted sockets the plain way.
 */
const VARIANTS: Record<string, Record<string, Record<string, string>>> = {
  TCP: { default: {}, 'accepted sockets not adopted': { KVCONNECT_DISABLE_SOCKET_ADOPT: '1' } },
  SHM: {
    default: {},
    ...(mappableSharedMemory
      ? { 'KV memory mapped across processes, no ring': { PEER_RING_BYTES: String(64 << 10) } }
      : {}),
    'peer whose KV memory cannot be mapped': { KVCONNECT_DISABLE_KV_MAP: '1' },
    'peer without the native addon': { KVCONNECT_DISABLE_NATIVE: '1' },
  },
};

for (const backend of ['TCP', 'SHM']) {
  describe(`two processes over ${backend}`, () => {
    for (const [variant, env] of Object.entries(VARIANTS[backend]!)) {
      it(`READs and WRITEs block runs across processes, byte for byte (${variant})`, async () => {
        await readsAndWrites(backend, env);
      });
    }

    it('fails an in-flight READ with ERR, in bounded time, when the peer is killed', async () => {
      const N = 1024;
      const child = await startChild(backend, N, 3);
      const agent = await InThreadTransferAgent.create({
        engineId: 'parent',
        agentName: 'parent',
        backends: [backend],
      });
      try {
        const local = makeRegion(0, BB, N, 5);
        agent.registerMemory([local]);
        const remote = agent.addRemoteAgent(child.meta);
        // The child's chunks are 256 KiB; over mapped KV they leave in batches: die after the first batch left.
        const chunks = MAPPED_BATCH_BYTES / (256 << 10) + 8;
        assert.equal(await child.ask(`die-after ${chunks}`), 'ok');
        const t0 = Date.now();
        const h = agent.read(remote, [
          { localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: 0, count: N },
        ]);
        const s = await agent.waitFor(h);
        assert.equal(s.state, 'ERR');
        assert.match(s.reason ?? '', /connection .* lost/);
        assert.ok(
          s.failedBlockIds.length > 0 && s.failedBlockIds.length < N,
          `${s.failedBlockIds.length} failed`,
        );
        assert.ok(s.failedBlockIds.includes(N - 1));
        assert.ok(Date.now() - t0 < 5000);
      } finally {
        await child.stop();
        await agent.close();
      }
    });
  });
}
