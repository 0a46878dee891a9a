/**
 * Direct READs (direct-read.ts) between two processes: the reader copies granted blocks from
 * the owner's KV by itself, so a READ completes while the owner process is stopped; and
 * while the owner revokes, rewrites and grants its blocks again and again, a READ that ends
 * DONE never holds a torn or mixed block (the lease table's sequence counters and the
 * checksums recorded at grant time catch every change during a copy).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { setLogLevel } from '../../src/logging/logger.ts';
import { type AgentMetadata, createTransferAgent } from '../../src/transfer/index.ts';
import { mappableSharedMemory } from '../../src/util/shared-memory.ts';
import { makeRegion } from './helpers/pattern.ts';

setLogLevel('silent');

const CHILD = fileURLToPath(new URL('./fixtures/lease-child.ts', import.meta.url));
const N = 16;
const BB = 64 << 10;
const skip = mappableSharedMemory ? false : 'no native addon: KV memory cannot be mapped by a peer';

interface Owner {
  readonly proc: ChildProcess;
  readonly meta: AgentMetadata;
  command(line: string): Promise<string>;
  /** Asks the owner to exit and waits until it has. */
  stop(): Promise<void>;
}

const children: ChildProcess[] = [];
after(() => {
  for (const c of children) c.kill('SIGKILL');
});

async function startOwner(): Promise<Owner> {
  const proc = spawn(process.execPath, ['--import', 'tsx', CHILD, String(N), String(BB)], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  children.push(proc);
  const replies: ((line: string) => void)[] = [];
  createInterface({ input: proc.stdout! }).on('line', (line) => replies.shift()?.(line));
  const next = () => new Promise<string>((resolve) => replies.push(resolve));
  const meta = JSON.parse(await next()) as AgentMetadata;
  return {
    proc,
    meta,
    command: (line) => {
      const reply = next();
      proc.stdin!.write(`${line}\n`);
      return reply;
    },
    stop: () => {
      const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
      proc.stdin!.write('exit\n');
      return exited;
    },
  };
}

/** The generation held by every word of block `b` of `bytes` (local block index `b`), or null if they differ or name another block. */
function generationOf(bytes: Uint8Array, b: number, remoteBlock: number): number | null {
  const w = new Uint32Array(bytes.buffer, bytes.byteOffset + b * BB, BB / 4);
  const first = w[0]!;
  if ((first & 0xffff) !== remoteBlock) return null;
  for (let i = 1; i < w.length; i++) if (w[i] !== first) return null;
  return first >>> 16;
}

/**
 * An owner process and a reader agent here (in its own thread, as the connectors run it, when
 * `thread`), connected: a first READ of `warmBlock` (granted, then revoked) opens the
 * connection, whose handshake maps the owner's KV and lease table.
 */
async function connected(warmBlock: number, thread = false) {
  const owner = await startOwner();
  // A READ that went to a stopped owner would fail after this, not hang the test.
  const reader = await createTransferAgent({
    engineId: 'reader',
    backends: ['SHM'],
    thread,
    transferTimeoutMs: 10_000,
  });
  const mine = makeRegion(0, BB, N, 9);
  reader.registerMemory([mine]);
  const remote = reader.addRemoteAgent(owner.meta);
  assert.equal(await owner.command(`grant warm ${warmBlock} 1`), 'ok');
  const one = [{ localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: warmBlock, count: 1 }];
  const warm = await reader.waitFor(reader.read(remote, one, { grantKey: 'warm' }));
  assert.equal(warm.state, 'DONE', warm.reason);
  assert.equal(await owner.command('revoke warm'), 'ok');
  return { owner, reader, mine, remote };
}

describe('direct READ across processes', { skip }, () => {
  for (const thread of [false, true]) {
    const agent = thread ? 'a threaded agent (the connectors’ default)' : 'an in-thread agent';
    it(`completes while the owner process is stopped: the owner is not asked (${agent})`, async () => {
      const { owner, reader, mine, remote } = await connected(2, thread);
      const run = (count: number) => [
        { localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: 2, count },
      ];
      assert.equal(await owner.command('grant r 2 6'), 'ok');
      owner.proc.kill('SIGSTOP');
      try {
        const s = await reader.waitFor(reader.read(remote, run(6), { grantKey: 'r' }));
        assert.equal(s.state, 'DONE', s.reason);
        for (let b = 0; b < 6; b++) assert.equal(generationOf(mine.bytes, b, 2 + b), 0);
      } finally {
        owner.proc.kill('SIGCONT');
      }
      await reader.close();
      await owner.stop();
    });
  }

  it('never completes a READ with a torn or mixed block while the owner re-grants changed blocks', async () => {
    const { owner, reader, mine, remote } = await connected(0);
    const all = [{ localRegion: 0, localFirst: 0, remoteRegion: 0, remoteFirst: 0, count: N }];
    const churned = owner.command('churn 1500');
    let running = true;
    void churned.then(() => {
      running = false;
    });
    const outcomes = { done: 0, err: 0 };
    const generations = new Set<number>();
    while (running) {
      // A direct READ completes in a microtask: let I/O (the owner's reply) in between.
      await new Promise((resolve) => setImmediate(resolve));
      const h = reader.read(remote, all, { grantKey: 'c' });
      const s = await reader.waitFor(h);
      reader.releaseHandle(h);
      if (s.state !== 'DONE') {
        outcomes.err++;
        continue;
      }
      outcomes.done++;
      const g = generationOf(mine.bytes, 0, 0);
      assert.notEqual(g, null, 'block 0 is torn');
      for (let b = 1; b < N; b++)
        assert.equal(generationOf(mine.bytes, b, b), g, `block ${b} is torn or from another grant`);
      generations.add(g!);
    }
    const last = Number(await churned);
    assert.ok(last > 10, `the owner re-granted only ${last} times`);
    console.log(`# ${JSON.stringify(outcomes)} READs, ${generations.size} generations seen, ${last} grants`);
    assert.ok(
      outcomes.done > 10 && generations.size > 1,
      `READs done: ${JSON.stringify(outcomes)}, generations seen: ${generations.size}`,
    );
    await reader.close();
    await owner.stop();
  });
});
