/**
 * One warm-up curve of `npm run bench -- transfer-warmup`, run as a script in a fresh process
 * (so that none of the agent's JavaScript has been compiled yet):
 * `node --import tsx bench/_transfer-warmup-curve.ts <SHM|TCP> <windows> <per-window>`.
 *
 * Starts a peer process (_transfer-peer.ts) and an agent in this one, makes the connection with
 * one one-block READ and WRITE (not counted), then runs `windows` windows of `per-window`
 * one-block (64 KiB) READs of a granted block and WRITEs of a recorded block, alternating, and
 * prints one JSON line: the p50 in µs of each window's READs and WRITEs (post to `waitFor`).
 * `runCurve` is the same in the calling process.
 */
import { fileURLToPath } from 'node:url';
import { setLogLevel } from '../src/logging/logger.ts';
import { InThreadTransferAgent } from '../src/transfer/index.ts';
import { tuneJit } from '../src/util/jit-tuning.ts';
import { median } from './_rounds.ts';
import { ONE_BLOCK, timeOneBlock } from './_transfer-one-block.ts';
import { type KvLayout, kvRegions, startPeer } from './_transfer-peer.ts';

const SELF = fileURLToPath(import.meta.url);

/** What the script prints: per kind, the p50 (µs) of each window, in order. */
export interface WarmupCurve {
  readonly read: number[];
  readonly write: number[];
}

/** The layout the curve runs on: 8 layers × K/V of 64 KiB blocks, as the transfer bench's. */
export const CURVE_LAYOUT: KvLayout = { regions: 16, numBlocks: 128, blockBytes: 64 * 1024 };

export async function runCurve(
  backend: 'SHM' | 'TCP',
  windows: number,
  perWindow: number,
): Promise<WarmupCurve> {
  setLogLevel('error');
  const peer = await startPeer(backend, CURVE_LAYOUT, 4 << 20);
  const agent = await InThreadTransferAgent.create({
    engineId: 'bench',
    agentName: 'bench',
    backends: [backend],
    chunkBytes: 4 << 20,
  });
  try {
    agent.registerMemory(kvRegions(CURVE_LAYOUT));
    const remote = agent.addRemoteAgent(peer.meta);
    await peer.grant('one', [ONE_BLOCK.read]);
    agent.recordBlocks([ONE_BLOCK.write]);
    const once = (kind: 'READ' | 'WRITE') => timeOneBlock(agent, remote, kind, 'one');
    await once('READ');
    await once('WRITE');
    const curve: WarmupCurve = { read: [], write: [] };
    for (let w = 0; w < windows; w++) {
      const reads: number[] = [];
      const writes: number[] = [];
      for (let i = 0; i < perWindow; i++) {
        reads.push(await once('READ'));
        writes.push(await once('WRITE'));
      }
      curve.read.push(median(reads));
      curve.write.push(median(writes));
    }
    return curve;
  } finally {
    await agent.close();
    await peer.stop();
  }
}

if (process.argv[1] === SELF) {
  tuneJit();
  const [backend, windows, perWindow] = process.argv.slice(2);
  const curve = await runCurve(backend === 'SHM' ? 'SHM' : 'TCP', Number(windows), Number(perWindow));
  process.stdout.write(`${JSON.stringify(curve)}\n`);
}
