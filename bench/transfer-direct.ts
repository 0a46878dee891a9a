/**
 * `npm run bench -- transfer-direct [--write [--hashed]] [--reads 12] [--gap-ms 0] [--layers 8] [--blocks 128] [--block-kib 64]
 *   [--copy-threads 1] [--warmup-rounds 3000]`
 *
 * Same-host direct READs (docs/transfer.md#direct-read-same-host) of one request (the layout of
 * `npm run bench -- transfer`) from a second process, one after the other, alternating with a
 * native memcpy of the same size in this process: how close the reader's copy-and-hash comes to
 * memcpy without the other contestants of the transfer bench in between. Before each READ the
 * owner records the blocks' checksums and grants them afresh (untimed here; `transfer`
 * reports both). `--gap-ms` waits
 * that long before each pair, leaving the memory idle as the transfer bench's rounds do. The
 * first two pairs are not counted. Reports medians with min–max, the per-pair ratio, and the
 * minor page faults this process takes per READ; prints a table, then one JSON object.
 *
 * `--write`: same-host WRITEs of the same layout back to back instead (this process announces
 * the blocks with the checksums it recorded before each WRITE, untimed; the peer copies from
 * its mapping of this process's KV), each paired with a memcpy. `--hashed`: WRITEs of blocks
 * without records (this process hashes each chunk as it announces it). `--copy-threads N`: the
 * copying agent shares a large copy out between N threads (the memcpy stays one thread).
 * Before the pairs, the two agents run `--warmup-rounds` rounds of small transfers of every
 * kind so that their JavaScript is optimized as in a running engine (_transfer-warmup.ts; 0:
 * cold code).
 */

import { readFileSync } from 'node:fs';
import { setLogLevel } from '../src/logging/logger.ts';
import { COPY_THREADS_ENV } from '../src/transfer/agent-checks.ts';
import { InThreadTransferAgent } from '../src/transfer/index.ts';
import { interruptBudgetFrom } from '../src/util/jit-tuning.ts';
import { mappableSharedMemory } from '../src/util/shared-memory.ts';
import {
  benchArgs,
  decimal,
  exitWithUsageError,
  nonNegativeInteger,
  positiveInteger,
  toggle,
} from './_args.ts';
import { damonPageoutNote } from './_damon.ts';
import { fmt, json, loadAverage, pairwiseRatio, summarize } from './_rounds.ts';
import { MEMCPY_MISSING, memcpyAvailable, memcpyRunner } from './_transfer-baselines.ts';
import { blockIdsOf, kvRegions, requestLayout, startPeer } from './_transfer-peer.ts';
import { DEFAULT_WARMUP_ROUNDS, warmUpPair } from './_transfer-warmup.ts';

const WARM_UP = 2;

/** Minor page faults of this process so far (/proc/self/stat field 10). */
function minorFaults(): number {
  return Number(readFileSync('/proc/self/stat', 'utf8').split(') ')[1]!.split(' ')[7]);
}

export async function main(args: string[]): Promise<void> {
  const flags = benchArgs(
    'transfer-direct',
    {
      write: toggle('same-host WRITEs (of recorded blocks) instead of direct READs'),
      hashed: toggle('with --write: WRITEs of blocks without records, hashed as they are announced'),
      reads: positiveInteger(12, 'transfer + memcpy pairs counted after 2 warm-up pairs, at least 5'),
      'gap-ms': decimal(0, 'idle milliseconds before each pair', { positive: false, value: 'ms' }),
      layers: positiveInteger(8, 'layers of the KV layout, a region per layer and per K/V'),
      blocks: positiveInteger(128, 'blocks of the request, in every region'),
      'block-kib': positiveInteger(64, 'KiB per block'),
      'copy-threads': positiveInteger(1, 'threads the copying agent shares a large copy between, 1-16'),
      'warmup-rounds': nonNegativeInteger(
        DEFAULT_WARMUP_ROUNDS,
        'rounds of small transfers (READ, WRITE, WRITE hashed of a few blocks in every region, one-block READ and WRITE) run first, so the JavaScript is optimized as in a running engine; 0: time the cold code',
      ),
    },
    args,
  );
  if (flags.hashed && !flags.write) {
    exitWithUsageError(
      'transfer-direct',
      '--hashed applies to WRITEs only, got it without --write (add --write)',
    );
  }
  setLogLevel('error');
  if (!mappableSharedMemory || !memcpyAvailable()) {
    console.log(`transfer-direct needs the native addon: ${MEMCPY_MISSING}`);
    process.exitCode = 2;
    return;
  }
  const write = flags.write;
  const hashed = flags.hashed;
  const what = write ? (hashed ? 'shm WRITE, hashed' : 'shm WRITE') : 'direct READ';
  const reads = Math.max(5, flags.reads);
  const gapMs = flags['gap-ms'];
  const { layout, descs, bytes } = requestLayout(flags.layers, flags.blocks, flags['block-kib'] * 1024);
  const copyThreads = flags['copy-threads'];
  const peer = await startPeer('SHM', layout, 4 << 20, { [COPY_THREADS_ENV]: String(copyThreads) });
  const agent = await InThreadTransferAgent.create({
    engineId: 'bench',
    agentName: 'bench',
    backends: ['SHM'],
    copyThreads,
  });
  agent.registerMemory(kvRegions(layout));
  const remote = agent.addRemoteAgent(peer.meta);
  const ids = blockIdsOf(descs, 'remote');
  const localIds = blockIdsOf(descs, 'local');
  const warmupRounds = flags['warmup-rounds'];
  const warmupMs = Math.round(await warmUpPair(agent, remote, peer, descs, warmupRounds));
  const memcpy = memcpyRunner(bytes);
  const loadStart = loadAverage();
  const read: number[] = [];
  const copy: number[] = [];
  const faults: number[] = [];
  for (let i = 0; i < reads + WARM_UP; i++) {
    if (gapMs > 0) await new Promise((resolve) => setTimeout(resolve, gapMs));
    if (!write) await peer.grant('req', ids);
    else if (hashed) agent.forgetBlocks(localIds);
    else agent.recordBlocks(localIds);
    const f0 = minorFaults();
    const t0 = performance.now();
    const h = write ? agent.write(remote, descs) : agent.read(remote, descs, { grantKey: 'req' });
    const s = await agent.waitFor(h);
    const gbps = bytes / ((performance.now() - t0) / 1000) / 1e9;
    const f = minorFaults() - f0;
    agent.releaseHandle(h);
    if (s.state !== 'DONE') throw new Error(`${what} failed: ${s.reason}`);
    const m = memcpy();
    if (i < WARM_UP) continue;
    read.push(gbps);
    copy.push(m);
    faults.push(f);
  }
  await agent.close();
  await peer.stop();

  const r = summarize(read);
  const c = summarize(copy);
  const ratio = pairwiseRatio(copy, read);
  const f = summarize(faults);
  console.log(
    `transfer-direct: ${bytes >> 20} MiB per ${what} in ${descs.length} descriptors, ${reads} of them (after ${WARM_UP}), ` +
      `${gapMs} ms idle before each; V8 interrupt budget ${interruptBudgetFrom() ?? "V8's own"}; JavaScript warm-up ${warmupRounds} rounds of small transfers (${warmupMs} ms); copy threads ${copyThreads} (memcpy: one); load average ${loadStart} at the start, ${loadAverage()} at the end`,
  );
  console.log('| series | median (min–max) |\n|---|---|');
  console.log(`| ${what}, GB/s | ${fmt(r, 2)} |`);
  console.log(`| memcpy, GB/s | ${fmt(c, 2)} |`);
  const unit = write ? 'WRITE' : 'READ';
  console.log(`| ${unit} ÷ memcpy, per pair | ${fmt(ratio, 2)} |`);
  console.log(`| minor faults per ${unit} | ${fmt(f)} |`);
  const damon = damonPageoutNote();
  if (damon !== null) console.log(`note: ${damon}`);
  console.log(
    JSON.stringify({
      load_avg_start: loadStart,
      transfer_mib: bytes >> 20,
      reads,
      gap_ms: gapMs,
      damon_pageout: damon !== null,
      copy_threads: copyThreads,
      v8_interrupt_budget_bytes: interruptBudgetFrom(),
      warmup_rounds: warmupRounds,
      warmup_ms: warmupMs,
      ...(write
        ? {
            hashed,
            shm_write_gbps: json(r, 2),
            memcpy_gbps: json(c, 2),
            write_vs_memcpy: json(ratio, 2),
            minor_faults_per_write: json(f, 0),
          }
        : {
            direct_read_gbps: json(r, 2),
            memcpy_gbps: json(c, 2),
            read_vs_memcpy: json(ratio, 2),
            minor_faults_per_read: json(f, 0),
          }),
    }),
  );
}
