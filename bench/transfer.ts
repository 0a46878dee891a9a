/**
 * `npm run bench -- transfer [--layers 8] [--block-kib 64] [--blocks 128] [--rounds 5]
 *   [--latency-samples 2000] [--chunk-kib 4096] [--ucx-tcp-mib 16] [--copy-threads 1]
 *   [--warmup-rounds 3000] [--busy-poll-us 100]`
 *
 * kvconnect's transfer agent between two processes, READ and WRITE with checksums on, over
 * an engine-like layout: one region per layer and per K/V, a request's blocks in runs of
 * 1–64 (placed differently on the two sides), so one transfer is many descriptors. In the
 * same run, alternating with it round by round: UCX ucp_put_bw over posix and over tcp
 * (lo), iperf3 single stream, a native memcpy of the same size and the fused copy-and-hash
 * of the same size (the receiver's pass alone), an shm READ the request way (an owner that
 * does not offer its lease table, so no direct READ), and WRITEs of blocks whose checksums
 * were not recorded (the sender hashes them as it sends). Like an engine, before each READ
 * the owner records the request's blocks' checksums (recordBlocks, what its model runner
 * does when a forward pass fills blocks) and grants them afresh; before each WRITE the
 * sender records them. Record and grant are timed apart, and a rate counted from the
 * record's start is reported too. Every contestant is measured as ucx_perftest measures itself
 * (`-w 1`, one warm-up iteration of the same size before the timed one; iperf3 runs for 2 s):
 * kvconnect's transfers, memcpy and copy_hash run twice in a row in each round and the second
 * run is the sample; the first, cold one (with the contestant's memory, processes and caches
 * idle since the previous round) is reported in a table of its own. Before the rounds each
 * agent pair runs `--warmup-rounds` rounds of small transfers of every kind it is timed on, so
 * that its JavaScript is optimized as in an engine that has been serving (_transfer-warmup.ts).
 * Reports
 * medians with min–max over the rounds and the ratios kvconnect/baseline (of medians), then
 * the p50/p99 of a one-block READ and WRITE (the agents take turns, round by round), beside the
 * same round trip's floors taken in the same rounds: a bare Node.js request/reply with the
 * block's bytes as its reply (_pingpong.ts; loops sleeping between messages, and polling as the
 * agents do) and UCX's `tag_lat` ping-pong of the block's size over tcp and posix. The agents
 * busy-poll for `--busy-poll-us` after transfer activity (0 = sleep; busy-poll.ts). Two more
 * pairs with both agents in worker threads (how the connectors run them by default, with the
 * threaded agents' own busy-poll default) are timed for one-block latency only. Prints a
 * table, then one JSON object. `--copy-threads N` lets both agents share a large same-host
 * copy out between N threads (TransferAgentOptions.copyThreads; the NIXL connector's
 * num_threads): memcpy and copy_hash stay one-thread baselines, and copy_hash_threads (the
 * fused copy-and-hash on N threads) is added beside them.
 */

import { setLogLevel } from '../src/logging/logger.ts';
import {
  BUSY_POLL_ENV,
  COPY_THREADS_ENV,
  DEFAULT_BUSY_POLL_US,
  resolveBusyPollUs,
} from '../src/transfer/agent-checks.ts';
import { checksumImplementation } from '../src/transfer/checksum.ts';
import { createTransferAgent, type DescPair, type TransferAgent } from '../src/transfer/index.ts';
import { readEnv } from '../src/util/envs.ts';
import { interruptBudgetFrom } from '../src/util/jit-tuning.ts';
import { nearestRankPercentile } from '../src/util/percentile.ts';
import { mappableSharedMemory } from '../src/util/shared-memory.ts';
import { benchArgs, nonNegativeInteger, positiveInteger } from './_args.ts';
import { damonPageoutNote } from './_damon.ts';
import { type PingPong, startPingPong } from './_pingpong.ts';
import { loadAverage, type Summary, summarize } from './_rounds.ts';
import {
  copyHashRunner,
  IPERF3_MISSING,
  iperf3Available,
  iperf3Gbps,
  MEMCPY_MISSING,
  memcpyAvailable,
  memcpyRunner,
  UCX_MISSING,
  ucxAvailable,
  ucxPutGbps,
  ucxTagLatRttUs,
} from './_transfer-baselines.ts';
import { ONE_BLOCK, timeOneBlock } from './_transfer-one-block.ts';
import { blockIdsOf, kvRegions, type Peer, requestLayout, startPeer } from './_transfer-peer.ts';
import { DEFAULT_WARMUP_ROUNDS, warmUpPair } from './_transfer-warmup.ts';

interface Series {
  readonly samples: number[];
  readonly note?: string;
}

/** Per series: GB moved per CPU-second of the receiving and of the sending process (how fast each would go with a core to itself). */
const cpuSamples: Record<string, { receiver: number[]; sender: number[] }> = {};
/**
 * Per series, as GB/s of the request's bytes: the owner's (READ) or sender's (WRITE)
 * recordBlocks of the request's blocks, the owner's grantRead (READ), and the transfer
 * counted from the record's start.
 */
const prepSamples: Record<string, { record: number[]; grant: number[]; fromRecord: number[] }> = {};
/** Per series, GB/s of the round's first (cold) run, before the timed one (see warmedUp). */
const coldSamples: Record<string, number[]> = {};

/**
 * A contestant measured as ucx_perftest measures itself (`-w 1`: one warm-up iteration of the
 * same size before the timed ones): it runs twice in a row and the second run is its sample.
 * The first, cold one (after the round's other contestants, with this contestant's memory,
 * processes and caches idle) is kept apart in coldSamples and reported in its own table.
 * `once(timed)` runs it once; only the timed run records CPU and preparation figures.
 */
function warmedUp(name: string, once: (timed: boolean) => Promise<number>): () => Promise<number> {
  return async () => {
    const cold = await once(false);
    coldSamples[name] ??= [];
    coldSamples[name].push(cold);
    return once(true);
  };
}

async function transferGbps(
  agent: TransferAgent,
  remote: string,
  peer: Peer,
  kind: 'READ' | 'WRITE',
  descs: DescPair[],
  bytes: number,
  series?: string,
  recorded = true,
) {
  // Like an engine: the blocks' owner records their checksums (its forward pass filled them),
  // and grants them before they are read; both timed apart. Unrecorded, a WRITE's sender
  // hashes each chunk as it sends it.
  let recordSeconds = 0;
  let grantSeconds = 0;
  if (kind === 'READ') {
    ({ record: recordSeconds, grant: grantSeconds } = await peer.grant('req', blockIdsOf(descs, 'remote')));
  } else {
    const ids = blockIdsOf(descs, 'local');
    const t = performance.now();
    if (recorded) agent.recordBlocks(ids);
    else agent.forgetBlocks(ids);
    if (recorded) recordSeconds = (performance.now() - t) / 1000;
  }
  const peer0 = peer.cpuSeconds();
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const h = kind === 'READ' ? agent.read(remote, descs, { grantKey: 'req' }) : agent.write(remote, descs);
  const s = await agent.waitFor(h);
  const seconds = (performance.now() - t0) / 1000;
  const c = process.cpuUsage(c0);
  const peerCpu = peer.cpuSeconds() - peer0;
  agent.releaseHandle(h);
  if (s.state !== 'DONE') throw new Error(`${kind} failed: ${s.reason}`);
  if (series) {
    const localCpu = (c.user + c.system) / 1e6;
    const [recv, send] = kind === 'READ' ? [localCpu, peerCpu] : [peerCpu, localCpu];
    cpuSamples[series] ??= { receiver: [], sender: [] };
    // /proc counts in 10 ms ticks: a side that used less than one tick has no figure.
    if (recv > 0) cpuSamples[series].receiver.push(bytes / recv / 1e9);
    if (send > 0) cpuSamples[series].sender.push(bytes / send / 1e9);
    if (recorded) {
      prepSamples[series] ??= { record: [], grant: [], fromRecord: [] };
      const p = prepSamples[series];
      p.record.push(bytes / recordSeconds / 1e9);
      if (kind === 'READ') p.grant.push(bytes / grantSeconds / 1e9);
      p.fromRecord.push(bytes / (recordSeconds + grantSeconds + seconds) / 1e9);
    }
  }
  return bytes / seconds / 1e9;
}

interface LatencySamples {
  readonly READ: number[];
  readonly WRITE: number[];
}

/**
 * Appends the round-trip µs of `samples` one-block transfers, alternating READ (of block 0,
 * granted) and WRITE (of block 1, recorded), to `out` (after 20 not counted).
 */
async function latencySlice(agent: TransferAgent, remote: string, samples: number, out: LatencySamples) {
  agent.recordBlocks([ONE_BLOCK.write]);
  for (let i = 0; i < samples + 20; i++) {
    for (const kind of ['READ', 'WRITE'] as const) {
      const us = await timeOneBlock(agent, remote, kind, 'lat');
      if (i >= 20) out[kind].push(us);
    }
  }
}

/** p50 and p99 of round-trip samples (sorts them in place). */
function p50p99(v: number[]) {
  const sorted = v.sort((a, b) => a - b);
  return { p50: nearestRankPercentile(sorted, 50), p99: nearestRankPercentile(sorted, 99) };
}

function latencyStats(out: LatencySamples) {
  return { read: p50p99(out.READ), write: p50p99(out.WRITE) };
}

export async function main(args: string[]): Promise<void> {
  setLogLevel('error');
  const flags = benchArgs(
    'transfer',
    {
      layers: positiveInteger(8, 'layers of the KV layout, a region per layer and per K/V'),
      'block-kib': positiveInteger(64, 'KiB per block'),
      blocks: positiveInteger(128, 'blocks of the request, in every region'),
      rounds: positiveInteger(5, 'rounds, at least 5: fewer are raised to 5'),
      'latency-samples': positiveInteger(2000, 'one-block READs + WRITEs timed for p50/p99, over all rounds'),
      'chunk-kib': positiveInteger(4096, "the agents' chunk size in KiB"),
      'ucx-tcp-mib': positiveInteger(16, 'MiB UCX ucp_put_bw moves over tcp per sample'),
      'copy-threads': positiveInteger(1, 'threads an agent shares a large same-host copy between, 1-16'),
      'warmup-rounds': nonNegativeInteger(
        DEFAULT_WARMUP_ROUNDS,
        'rounds of small transfers (READ, WRITE, WRITE hashed of a few blocks in every region, one-block READ and WRITE) each agent pair runs before the timed ones, so its JavaScript is optimized as in a running engine; 0: time the cold code',
      ),
      'busy-poll-us': nonNegativeInteger(
        DEFAULT_BUSY_POLL_US,
        "µs both agents of the tcp and shm pairs keep their event loop polling after transfer activity (the agents' busyPollUs); 0: they sleep between frames. The threaded pairs keep the threaded agents' default (0)",
      ),
    },
    args,
  );
  const layers = flags.layers;
  const blockBytes = flags['block-kib'] * 1024;
  const blocks = flags.blocks;
  const rounds = Math.max(5, flags.rounds);
  const latencySamples = flags['latency-samples'];
  const chunkBytes = flags['chunk-kib'] * 1024;
  const ucxTcpBytes = flags['ucx-tcp-mib'] << 20;
  const copyThreads = flags['copy-threads'];
  const warmupRounds = flags['warmup-rounds'];
  const busyPollUs = flags['busy-poll-us'];
  const { layout, descs, bytes } = requestLayout(layers, blocks, blockBytes);

  const local = kvRegions(layout);
  /** Per agent pair, the milliseconds its JavaScript warm-up took. */
  const warmupMs: Record<string, number> = {};
  const agents: Record<
    'tcp' | 'shm' | 'shm_request' | 'tcp_threaded' | 'shm_threaded',
    { agent: TransferAgent; remote: string; peer: Peer; stop: () => Promise<void> }
  > = {} as never;
  // Threaded pairs (both agents in worker threads, as the connectors run them by default) are
  // timed for one-block latency only, with the threaded agents' own busy-poll default.
  const threadedPollUs = resolveBusyPollUs(undefined, true);
  // shm_request: an owner that does not offer its lease table, so every shm READ asks it (the
  // request path), alternated with the direct READ in the same rounds.
  for (const [name, backend, env, thread] of [
    ['tcp', 'TCP', {}, false],
    ['shm', 'SHM', {}, false],
    ['shm_request', 'SHM', { KVCONNECT_DISABLE_DIRECT_READ: '1' }, false],
    ['tcp_threaded', 'TCP', {}, true],
    ['shm_threaded', 'SHM', {}, true],
  ] as const) {
    const pollUs = thread ? threadedPollUs : busyPollUs;
    const peer = await startPeer(
      backend,
      layout,
      chunkBytes,
      { [COPY_THREADS_ENV]: String(copyThreads), [BUSY_POLL_ENV]: String(pollUs), ...env },
      thread,
    );
    const agent = await createTransferAgent({
      engineId: 'bench',
      agentName: 'bench',
      backends: [backend],
      chunkBytes,
      copyThreads,
      busyPollUs: pollUs,
      thread,
    });
    agent.registerMemory(local);
    const remote = agent.addRemoteAgent(peer.meta);
    // Warm-up: connection, handshake, mappings; then the JavaScript (see _transfer-warmup.ts).
    await transferGbps(agent, remote, peer, 'READ', descs, bytes);
    await transferGbps(agent, remote, peer, 'WRITE', descs, bytes);
    warmupMs[name] = Math.round(await warmUpPair(agent, remote, peer, descs, warmupRounds));
    agents[name] = {
      agent,
      remote,
      peer,
      stop: async () => {
        await agent.close();
        await peer.stop();
      },
    };
  }

  const loadStart = loadAverage();
  const notes: string[] = [];
  const damon = damonPageoutNote();
  if (damon !== null) notes.push(damon);
  const series: Record<string, Series> = {};
  const contestants: [string, (() => Promise<number>) | null, string?][] = [];
  const memcpy = memcpyAvailable() ? memcpyRunner(bytes) : null;
  contestants.push(['memcpy', memcpy && warmedUp('memcpy', async () => memcpy()), MEMCPY_MISSING]);
  // The receiver's pass of a same-host transfer alone: copy while hashing, as a direct READ does.
  const copyHash = memcpy ? copyHashRunner(bytes, blockBytes) : null;
  contestants.push(['copy_hash', copyHash && warmedUp('copy_hash', async () => copyHash()), MEMCPY_MISSING]);
  if (copyThreads > 1) {
    const threaded = memcpy ? copyHashRunner(bytes, blockBytes, copyThreads) : null;
    contestants.push([
      'copy_hash_threads',
      threaded && warmedUp('copy_hash_threads', async () => threaded()),
      MEMCPY_MISSING,
    ]);
  }
  const ucx = ucxAvailable();
  const posixSize = Math.min(bytes, 64 << 20);
  contestants.push([
    'ucx_posix',
    ucx ? () => ucxPutGbps('posix', posixSize, Math.max(1, Math.round(bytes / posixSize))) : null,
    UCX_MISSING,
  ]);
  /** kvconnect's agents, measured as ucx_perftest is (warmedUp). */
  const agentRun = (pair: keyof typeof agents, kind: 'READ' | 'WRITE', name: string, recorded = true) => {
    const { agent, remote, peer } = agents[pair];
    return warmedUp(name, (timed) =>
      transferGbps(agent, remote, peer, kind, descs, bytes, timed ? name : undefined, recorded),
    );
  };
  contestants.push(['shm_read', agentRun('shm', 'READ', 'shm_read')]);
  contestants.push(['shm_write', agentRun('shm', 'WRITE', 'shm_write')]);
  contestants.push(['shm_write_hashed', agentRun('shm', 'WRITE', 'shm_write_hashed', false)]);
  contestants.push(['shm_read_request', agentRun('shm_request', 'READ', 'shm_read_request')]);
  contestants.push(['iperf3', iperf3Available() ? () => iperf3Gbps(2) : null, IPERF3_MISSING]);
  contestants.push([
    'ucx_tcp',
    ucx ? () => ucxPutGbps('tcp', Math.min(4 << 20, ucxTcpBytes), Math.max(1, ucxTcpBytes >> 22)) : null,
    UCX_MISSING,
  ]);
  contestants.push(['tcp_read', agentRun('tcp', 'READ', 'tcp_read')]);
  contestants.push(['tcp_write', agentRun('tcp', 'WRITE', 'tcp_write')]);
  contestants.push(['tcp_write_hashed', agentRun('tcp', 'WRITE', 'tcp_write_hashed', false)]);
  for (const [name, run, missing] of contestants) {
    series[name] = { samples: [], ...(run === null ? { note: missing } : {}) };
    if (run === null && missing && !notes.includes(missing)) notes.push(missing);
  }
  for (let r = 0; r < rounds; r++) {
    for (const [name, run] of contestants) {
      if (run === null) continue;
      try {
        series[name]!.samples.push(await run());
      } catch (e) {
        const note = `${name}: ${e instanceof Error ? e.message : String(e)}`;
        if (!notes.includes(note)) notes.push(note);
      }
    }
  }
  // One-block latencies: the agents take turns, a slice of the samples each per round.
  const latSamples: Record<keyof typeof agents, LatencySamples> = {
    tcp_threaded: { READ: [], WRITE: [] },
    shm_threaded: { READ: [], WRITE: [] },
    tcp: { READ: [], WRITE: [] },
    shm: { READ: [], WRITE: [] },
    shm_request: { READ: [], WRITE: [] },
  };
  for (const a of Object.values(agents)) await a.peer.grant('lat', [ONE_BLOCK.read]);
  // The floors, in the same rounds: bare Node.js request/reply (sleeping, and polling as the
  // agents do when they do), UCX's tag_lat ping-pong.
  const pingPongs: [string, PingPong][] = [['node_pingpong', await startPingPong(blockBytes, 0)]];
  if (busyPollUs > 0) pingPongs.push(['node_pingpong_polling', await startPingPong(blockBytes, busyPollUs)]);
  const pingSamples: Record<string, number[]> = Object.fromEntries(pingPongs.map(([k]) => [k, []]));
  const ucxLat: Record<'tcp' | 'posix', number[]> = { tcp: [], posix: [] };
  const perSlice = Math.ceil(latencySamples / rounds);
  for (let r = 0; r < rounds; r++) {
    for (const [name, a] of Object.entries(agents) as [keyof typeof latSamples, (typeof agents)['tcp']][])
      await latencySlice(a.agent, a.remote, perSlice, latSamples[name]);
    for (const [name, pp] of pingPongs) pingSamples[name]!.push(...(await pp.time(perSlice)));
    if (!ucx) continue;
    for (const transport of ['tcp', 'posix'] as const) {
      try {
        ucxLat[transport].push(await ucxTagLatRttUs(transport, blockBytes, perSlice));
      } catch (e) {
        const note = `ucx tag_lat ${transport}: ${e instanceof Error ? e.message : String(e)}`;
        if (!notes.includes(note)) notes.push(note);
      }
    }
  }
  for (const [, pp] of pingPongs) await pp.stop();
  const pingLat = Object.fromEntries(Object.entries(pingSamples).map(([k, v]) => [k, p50p99(v)]));
  const ucxLatSummary = {
    tcp: ucxLat.tcp.length > 0 ? summarize(ucxLat.tcp) : null,
    posix: ucxLat.posix.length > 0 ? summarize(ucxLat.posix) : null,
  };
  const lat = {
    tcp: latencyStats(latSamples.tcp),
    shm: latencyStats(latSamples.shm),
    shmRequest: latencyStats(latSamples.shm_request),
    tcpThreaded: latencyStats(latSamples.tcp_threaded),
    shmThreaded: latencyStats(latSamples.shm_threaded),
  };
  for (const a of Object.values(agents)) await a.stop();

  /** Each series' summary (null when it has no sample). */
  const summaries = (samples: Record<string, number[]>) =>
    Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, v.length > 0 ? summarize(v) : null]));
  const s = summaries(Object.fromEntries(Object.entries(series).map(([k, v]) => [k, v.samples])));
  const r2 = (x: number | undefined | null) =>
    x === undefined || x === null ? null : Math.round(x * 100) / 100;
  /** The ratio of two medians, rounded (null when either is missing). */
  const medianRatio = (x: Summary | null | undefined, y: Summary | null | undefined) =>
    !x || !y || y.median <= 0 ? null : r2(x.median / y.median);
  const ratio = (a: string, b: string) => medianRatio(s[a], s[b]);
  const fmt = (name: string) => {
    const v = s[name];
    return v ? `${r2(v.median)} (${r2(v.min)}–${r2(v.max)})` : `n/a (${series[name]?.note ?? 'failed'})`;
  };
  const warmupTimes = Object.entries(warmupMs)
    .map(([k, v]) => `${k} ${v} ms`)
    .join(', ');
  console.log(
    `transfer: ${layout.regions} regions (${layers} layers × K/V) × ${blocks} blocks × ${blockBytes >> 10} KiB = ${bytes >> 20} MiB per transfer in ${descs.length} descriptors (runs of 1–64 blocks); ` +
      `${rounds} alternating rounds; checksum ${checksumImplementation}; shm from mapped KV memory: ${mappableSharedMemory ? 'yes' : 'no (ring)'}; ` +
      `copy threads ${copyThreads}${copyThreads > 1 ? ' (memcpy and copy_hash: one thread)' : ''}; ` +
      `busy polling ${busyPollUs > 0 ? `${busyPollUs} µs after transfer activity` : 'off'}; ` +
      `V8 interrupt budget ${interruptBudgetFrom() ?? "V8's own"}; JavaScript warm-up ${warmupRounds} rounds of small transfers per agent pair (${warmupTimes}); ` +
      `load average ${loadStart} at the start, ${loadAverage()} at the end; DAMON pageout ${damon === null ? 'off' : 'on (see the note)'}`,
  );
  console.log(
    '| path | GB/s median (min–max) | baseline | baseline GB/s median (min–max) | ratio of medians |\n|---|---|---|---|---|',
  );
  const rows: [string, ...string[]][] = [
    ['shm_read', 'ucx_posix', 'memcpy'],
    ['shm_write', 'ucx_posix', 'memcpy'],
    ['shm_write_hashed', 'ucx_posix', 'memcpy'],
    ['shm_read_request', 'ucx_posix', 'shm_read'],
    ['copy_hash', 'memcpy'],
    ...(copyThreads > 1 ? [['copy_hash_threads', 'memcpy'] as [string, string]] : []),
    ['tcp_read', 'ucx_tcp', 'iperf3'],
    ['tcp_write', 'ucx_tcp', 'iperf3'],
    ['tcp_write_hashed', 'ucx_tcp', 'iperf3'],
  ];
  for (const [path, ...bases] of rows) {
    for (const base of bases)
      console.log(`| ${path} | ${fmt(path)} | ${base} | ${fmt(base)} | ${ratio(path, base) ?? 'n/a'} |`);
  }
  const us = (x: number) => Math.round(x * 10) / 10;
  console.log(
    `| one ${blockBytes >> 10} KiB block, round trip | tcp READ p50 ${us(lat.tcp.read.p50)} µs, p99 ${us(lat.tcp.read.p99)} µs; WRITE p50 ${us(lat.tcp.write.p50)} µs, p99 ${us(lat.tcp.write.p99)} µs | | shm READ p50 ${us(lat.shm.read.p50)} µs, p99 ${us(lat.shm.read.p99)} µs; WRITE p50 ${us(lat.shm.write.p50)} µs, p99 ${us(lat.shm.write.p99)} µs; shm READ the request way p50 ${us(lat.shmRequest.read.p50)} µs, p99 ${us(lat.shmRequest.read.p99)} µs | |`,
  );
  console.log(
    `| one ${blockBytes >> 10} KiB block, round trip, both agents in worker threads (the connectors' default; busy polling ${threadedPollUs > 0 ? `${threadedPollUs} µs` : 'off'}) | tcp READ p50 ${us(lat.tcpThreaded.read.p50)} µs, p99 ${us(lat.tcpThreaded.read.p99)} µs; WRITE p50 ${us(lat.tcpThreaded.write.p50)} µs, p99 ${us(lat.tcpThreaded.write.p99)} µs | | shm READ p50 ${us(lat.shmThreaded.read.p50)} µs, p99 ${us(lat.shmThreaded.read.p99)} µs; WRITE p50 ${us(lat.shmThreaded.write.p50)} µs, p99 ${us(lat.shmThreaded.write.p99)} µs | |`,
  );
  const pp = (k: string) => {
    const v = pingLat[k];
    return v ? `p50 ${us(v.p50)} µs, p99 ${us(v.p99)} µs` : 'n/a';
  };
  const ucxRtt = (v: Summary | null) =>
    v
      ? `p50 ${us(v.median)} µs (${us(v.min)}–${us(v.max)} over the rounds)`
      : `n/a (${ucx ? 'failed' : UCX_MISSING})`;
  console.log(
    `| one ${blockBytes >> 10} KiB block, floors | bare Node.js request/reply over tcp, ${blockBytes >> 10} KiB reply: loops sleeping ${pp('node_pingpong')}${busyPollUs > 0 ? `; polling ${busyPollUs} µs ${pp('node_pingpong_polling')}` : ''} | UCX tag_lat round trip, ${blockBytes >> 10} KiB each way | tcp ${ucxRtt(ucxLatSummary.tcp)}; posix ${ucxRtt(ucxLatSummary.posix)} | tcp READ ÷ UCX tcp ${ucxLatSummary.tcp ? r2(lat.tcp.read.p50 / ucxLatSummary.tcp.median) : 'n/a'}; ÷ Node.js ${pingLat['node_pingpong'] ? r2(lat.tcp.read.p50 / pingLat['node_pingpong'].p50) : 'n/a'} (sleeping)${pingLat['node_pingpong_polling'] ? `, ${r2(lat.tcp.read.p50 / pingLat['node_pingpong_polling'].p50)} (polling)` : ''} |`,
  );
  const roundedMedian = (v: number[] | undefined) => (v && v.length > 0 ? r2(summarize(v).median) : null);
  console.log('| path | GB per CPU-second, receiver / sender (median) |\n|---|---|');
  for (const [path] of rows) {
    const c = cpuSamples[path];
    if (!c) continue;
    console.log(
      `| ${path} | ${roundedMedian(c?.receiver) ?? 'n/a'} / ${roundedMedian(c?.sender) ?? 'n/a'} |`,
    );
  }
  console.log(
    "| path | owner's recordBlocks of the request's blocks, GB/s median | owner's grantRead, GB/s median | transfer counted from the record's start, GB/s median |\n|---|---|---|---|",
  );
  for (const [path, p] of Object.entries(prepSamples)) {
    console.log(
      `| ${path} | ${roundedMedian(p.record) ?? 'n/a'} | ${roundedMedian(p.grant) ?? '–'} | ${roundedMedian(p.fromRecord) ?? 'n/a'} |`,
    );
  }
  // The warm-up runs: each contestant's first run of a round, with its memory, processes and
  // caches idle since the previous round. Shown against memcpy's warm-up run (same treatment).
  const cold = summaries(coldSamples);
  /** A path measured against memcpy (the same-host copies; not tcp, not memcpy itself). */
  const sameHost = (path: string) => path !== 'memcpy' && !path.startsWith('tcp_');
  const coldRatio = (a: string, b: string, of: typeof cold = cold) => medianRatio(cold[a], of[b]);
  console.log(
    "| path, first run of a round (cold) | GB/s median (min–max) | ÷ memcpy's first run (same host) | ÷ its own timed run (the table above) |\n|---|---|---|---|",
  );
  for (const [path, v] of Object.entries(cold)) {
    if (!v) continue;
    console.log(
      `| ${path} | ${r2(v.median)} (${r2(v.min)}–${r2(v.max)}) | ${sameHost(path) ? (coldRatio(path, 'memcpy') ?? 'n/a') : '–'} | ${coldRatio(path, path, s) ?? 'n/a'} |`,
    );
  }
  for (const n of notes) console.log(`note: ${n}`);
  const out: Record<string, unknown> = {
    load_avg_start: loadStart,
    load_avg_end: loadAverage(),
    transfer_mib: bytes >> 20,
    regions: layout.regions,
    descriptors: descs.length,
    block_kib: blockBytes >> 10,
    rounds,
    chunk_kib: chunkBytes >> 10,
    copy_threads: copyThreads,
    v8_interrupt_budget_bytes: interruptBudgetFrom(),
    warmup_rounds: warmupRounds,
    busy_poll_us: busyPollUs,
    ...Object.fromEntries(Object.entries(warmupMs).map(([k, v]) => [`${k}_warmup_ms`, v])),
    shm_mapped_kv: mappableSharedMemory,
    checksum: checksumImplementation,
    damon_pageout: damon !== null,
  };
  const putGbps = (key: string, v: Summary | null | undefined) => {
    out[`${key}_gbps_median`] = r2(v?.median);
    out[`${key}_gbps_min`] = r2(v?.min);
    out[`${key}_gbps_max`] = r2(v?.max);
  };
  for (const [name, v] of Object.entries(s)) putGbps(name, v);
  for (const [name, v] of Object.entries(cold)) {
    putGbps(`${name}_cold`, v);
    if (sameHost(name)) out[`${name}_cold_vs_memcpy_cold`] = coldRatio(name, 'memcpy');
  }
  for (const [name, c] of Object.entries(cpuSamples)) {
    out[`${name}_receiver_gb_per_cpu_s`] = roundedMedian(c.receiver);
    out[`${name}_sender_gb_per_cpu_s`] = roundedMedian(c.sender);
  }
  for (const [name, p] of Object.entries(prepSamples)) {
    out[`${name}_record_gbps`] = roundedMedian(p.record);
    if (p.grant.length > 0) out[`${name}_grant_gbps`] = roundedMedian(p.grant);
    out[`${name}_from_record_gbps`] = roundedMedian(p.fromRecord);
  }
  Object.assign(out, {
    direct_read: !readEnv('KVCONNECT_DISABLE_DIRECT_READ'),
    shm_read_vs_ucx_posix: ratio('shm_read', 'ucx_posix'),
    shm_write_vs_ucx_posix: ratio('shm_write', 'ucx_posix'),
    shm_read_vs_memcpy: ratio('shm_read', 'memcpy'),
    copy_hash_vs_memcpy: ratio('copy_hash', 'memcpy'),
    shm_write_vs_memcpy: ratio('shm_write', 'memcpy'),
    shm_write_hashed_vs_ucx_posix: ratio('shm_write_hashed', 'ucx_posix'),
    shm_write_hashed_vs_memcpy: ratio('shm_write_hashed', 'memcpy'),
    tcp_read_vs_ucx_tcp: ratio('tcp_read', 'ucx_tcp'),
    tcp_write_vs_ucx_tcp: ratio('tcp_write', 'ucx_tcp'),
    tcp_read_vs_iperf3: ratio('tcp_read', 'iperf3'),
    tcp_write_vs_iperf3: ratio('tcp_write', 'iperf3'),
    tcp_write_hashed_vs_iperf3: ratio('tcp_write_hashed', 'iperf3'),
    tcp_read_64k_p50_us: us(lat.tcp.read.p50),
    tcp_read_64k_p99_us: us(lat.tcp.read.p99),
    tcp_write_64k_p50_us: us(lat.tcp.write.p50),
    tcp_write_64k_p99_us: us(lat.tcp.write.p99),
    shm_read_64k_p50_us: us(lat.shm.read.p50),
    shm_read_64k_p99_us: us(lat.shm.read.p99),
    shm_read_request_64k_p50_us: us(lat.shmRequest.read.p50),
    shm_read_request_64k_p99_us: us(lat.shmRequest.read.p99),
    shm_read_vs_request: ratio('shm_read', 'shm_read_request'),
    shm_write_64k_p50_us: us(lat.shm.write.p50),
    shm_write_64k_p99_us: us(lat.shm.write.p99),
    threaded_busy_poll_us: threadedPollUs,
    tcp_threaded_read_64k_p50_us: us(lat.tcpThreaded.read.p50),
    tcp_threaded_read_64k_p99_us: us(lat.tcpThreaded.read.p99),
    tcp_threaded_write_64k_p50_us: us(lat.tcpThreaded.write.p50),
    tcp_threaded_write_64k_p99_us: us(lat.tcpThreaded.write.p99),
    shm_threaded_read_64k_p50_us: us(lat.shmThreaded.read.p50),
    shm_threaded_read_64k_p99_us: us(lat.shmThreaded.read.p99),
    shm_threaded_write_64k_p50_us: us(lat.shmThreaded.write.p50),
    shm_threaded_write_64k_p99_us: us(lat.shmThreaded.write.p99),
    ...Object.fromEntries(
      Object.entries(pingLat).flatMap(([k, v]) => [
        [`${k}_64k_p50_us`, us(v.p50)],
        [`${k}_64k_p99_us`, us(v.p99)],
      ]),
    ),
    ...Object.fromEntries(
      (['tcp', 'posix'] as const).flatMap((t) => {
        const v = ucxLatSummary[t];
        return [
          [`ucx_${t}_tag_lat_64k_rtt_us_median`, v ? us(v.median) : null],
          [`ucx_${t}_tag_lat_64k_rtt_us_min`, v ? us(v.min) : null],
          [`ucx_${t}_tag_lat_64k_rtt_us_max`, v ? us(v.max) : null],
        ];
      }),
    ),
    tcp_read_64k_vs_ucx_tcp_tag_lat: ucxLatSummary.tcp
      ? r2(lat.tcp.read.p50 / ucxLatSummary.tcp.median)
      : null,
    tcp_read_64k_vs_node_pingpong: pingLat['node_pingpong']
      ? r2(lat.tcp.read.p50 / pingLat['node_pingpong'].p50)
      : null,
    tcp_read_64k_vs_node_pingpong_polling: pingLat['node_pingpong_polling']
      ? r2(lat.tcp.read.p50 / pingLat['node_pingpong_polling'].p50)
      : null,
    notes,
  });
  console.log(JSON.stringify(out));
}
