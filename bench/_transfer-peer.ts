/**
 * The remote side of `npm run bench -- transfer`: a process with a transfer agent over an
 * engine-like KV layout (one region per layer and per K/V, filled with random bytes). It
 * grants WRITEs of every block to the bench's agent, and READs as the bench asks: like an
 * engine, it records the checksums of a request's blocks (as the engine does when its
 * forward pass fills them) and grants them (`grant()`) before the reader reads them.
 * startPeer() spawns it and returns its metadata; run as a script, this file is the peer. Its
 * agent runs on the peer's loop, or in a worker thread (`thread`, as the connectors' default).
 */
import { spawn } from 'node:child_process';
import { randomFillSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { setLogLevel } from '../src/logging/logger.ts';
import {
  type AgentMetadata,
  createTransferAgent,
  type DescPair,
  type MemoryRegion,
} from '../src/transfer/index.ts';
import { tuneJit } from '../src/util/jit-tuning.ts';
import { allocateShared } from '../src/util/shared-memory.ts';

const SELF = fileURLToPath(import.meta.url);

export interface KvLayout {
  /** Regions (layers × K/V). */
  readonly regions: number;
  readonly blockBytes: number;
  readonly numBlocks: number;
}

/** The layout's regions, in memory a same-host peer can map, filled (and so faulted in) with random bytes. */
export function kvRegions(layout: KvLayout): MemoryRegion[] {
  return Array.from({ length: layout.regions }, (_, id) => {
    const bytes = new Uint8Array(allocateShared(layout.blockBytes * layout.numBlocks));
    for (let off = 0; off < bytes.length; off += 1 << 16)
      randomFillSync(bytes, off, Math.min(1 << 16, bytes.length - off));
    return { id, bytes, blockBytes: layout.blockBytes, numBlocks: layout.numBlocks };
  });
}

/** Run lengths of 1–64 blocks summing to `blocks`, from a fixed seed. */
function runLengths(blocks: number, seed: number): number[] {
  let x = seed;
  const out: number[] = [];
  for (let left = blocks; left > 0; ) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    const n = Math.min(left, 1 + (x % 64));
    out.push(n);
    left -= n;
  }
  return out;
}

/** Places the runs with a one-block gap after each, from `start`: a fragmented block table. */
function place(lengths: readonly number[], start: number): number[] {
  const firsts: number[] = [];
  let at = start;
  for (const n of lengths) {
    firsts.push(at);
    at += n + 1;
  }
  return firsts;
}

/** One request's descriptors: the same runs in every region, at other places on each side. */
function requestDescs(regions: number, lengths: readonly number[]): DescPair[] {
  const local = place(lengths, 1);
  const remote = place([...lengths].reverse(), 2).reverse();
  return Array.from({ length: regions }, (_, region) =>
    lengths.map((count, i) => ({
      localRegion: region,
      localFirst: local[i]!,
      remoteRegion: region,
      remoteFirst: remote[i]!,
      count,
    })),
  ).flat();
}

export interface RequestLayout {
  readonly layout: KvLayout;
  /** One request's descriptors: runs of 1–64 blocks in every region, at other places on each side. */
  readonly descs: DescPair[];
  /** Bytes one READ or WRITE of the request moves. */
  readonly bytes: number;
}

/** An engine-like layout of `layers` × K/V regions and one request of `blocks` blocks in it. */
export function requestLayout(layers: number, blocks: number, blockBytes: number): RequestLayout {
  const lengths = runLengths(blocks, 7);
  const layout: KvLayout = { regions: 2 * layers, blockBytes, numBlocks: blocks + lengths.length + 2 };
  return {
    layout,
    descs: requestDescs(layout.regions, lengths),
    bytes: layout.regions * blocks * blockBytes,
  };
}

/** The block ids a request's descriptors name on one side. */
export function blockIdsOf(descs: readonly DescPair[], side: 'local' | 'remote'): number[] {
  const ids = new Set<number>();
  for (const d of descs) {
    const first = side === 'local' ? d.localFirst : d.remoteFirst;
    for (let b = first; b < first + d.count; b++) ids.add(b);
  }
  return [...ids];
}

/** Seconds the peer took to record a request's checksums (its engine filling the blocks) and to grant them. */
export interface GrantTimes {
  readonly record: number;
  readonly grant: number;
}

export interface Peer {
  readonly meta: AgentMetadata;
  /** Records the checksums of `blockIds`, then replaces READ grant `key` with one of them. */
  grant(key: string, blockIds: readonly number[]): Promise<GrantTimes>;
  /** CPU seconds (user + system) the peer process has used so far. */
  cpuSeconds(): number;
  stop(): Promise<void>;
}

/** CPU seconds of process `pid` from /proc (Linux). */
export function processCpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  // utime and stime are fields 14 and 15 of stat, in clock ticks (USER_HZ, 100 on Linux).
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

export async function startPeer(
  backend: 'TCP' | 'SHM',
  layout: KvLayout,
  chunkBytes: number,
  env: Record<string, string> = {},
  thread = false,
): Promise<Peer> {
  const proc = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      SELF,
      backend,
      JSON.stringify(layout),
      String(chunkBytes),
      ...(thread ? ['thread'] : []),
    ],
    { stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, ...env } },
  );
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const lines = createInterface({ input: proc.stdout! });
  const replies: ((line: string) => void)[] = [];
  lines.on('line', (line) => replies.shift()?.(line));
  const nextLine = () =>
    new Promise<string>((resolve, reject) => {
      replies.push(resolve);
      void exited.then(() => reject(new Error(`the ${backend} peer exited`)));
    });
  const first = await nextLine();
  return {
    meta: JSON.parse(first) as AgentMetadata,
    grant: async (key, blockIds) => {
      const reply = nextLine();
      proc.stdin!.write(`${JSON.stringify({ key, blockIds })}\n`);
      return JSON.parse(await reply) as GrantTimes;
    },
    cpuSeconds: () => processCpuSeconds(proc.pid!),
    stop: async () => {
      proc.stdin?.end();
      await exited;
    },
  };
}

async function servePeer(
  backend: string,
  layout: KvLayout,
  chunkBytes: number,
  thread: boolean,
): Promise<void> {
  setLogLevel('error');
  const agent = await createTransferAgent({ engineId: 'peer', backends: [backend], chunkBytes, thread });
  agent.registerMemory(kvRegions(layout));
  const all = Array.from({ length: layout.numBlocks }, (_, i) => i);
  agent.grantWrite('all', { blockIds: all, peer: 'bench' });
  process.stdout.write(`${JSON.stringify(agent.metadata())}\n`);
  // Serve grant commands until the bench closes stdin.
  for await (const line of createInterface({ input: process.stdin })) {
    const { key, blockIds } = JSON.parse(line) as { key: string; blockIds: number[] };
    const t0 = performance.now();
    agent.recordBlocks(blockIds);
    const t1 = performance.now();
    agent.revokeGrant(key);
    agent.grantRead(key, { blockIds, peer: 'bench' });
    await agent.settled();
    const times: GrantTimes = { record: (t1 - t0) / 1000, grant: (performance.now() - t1) / 1000 };
    process.stdout.write(`${JSON.stringify(times)}\n`);
  }
  await agent.close();
  process.exit(0);
}

if (process.argv[1] === SELF) {
  tuneJit();
  await servePeer(
    process.argv[2] ?? 'TCP',
    JSON.parse(process.argv[3] ?? '{}') as KvLayout,
    Number(process.argv[4]),
    process.argv[5] === 'thread',
  );
}
