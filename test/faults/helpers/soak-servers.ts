/**
 * The servers of the soak (test/faults/soak.test.ts, `npm run bench -- soak`): each an
 * OpenAI-compatible server in its own process (fixtures/server-child.ts) that reports its
 * RSS, heap, KV usage and preemptions when asked; a NIXL prefill/decode pair behind the
 * proxy, or one engine alone as the baseline.
 */
import { type ChildProcessByStdio, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { type RunningProxy, resolveProxyOptions, startProxy } from '../../../src/proxy/proxy-server.ts';

const SERVER = fileURLToPath(new URL('../fixtures/server-child.ts', import.meta.url));

/** The soak's shape: the workload (soak-harness.ts) and the servers (here). */
export interface SoakConfig {
  readonly requests: number;
  readonly batches: number;
  readonly concurrency: number;
  readonly maxModelLen: number;
  readonly prefillBlocks: number;
  readonly decodeBlocks: number;
  readonly decodeMaxNumSeqs: number;
  readonly cancelFraction: number;
  /** Every n-th completed request is checked token by token against a single engine. */
  readonly checkEvery: number;
  readonly seed: number;
}

export interface ServerStats {
  rss: number;
  heapUsed: number;
  numPreemptions: number;
  kvCacheUsage: number;
  running: number;
  waiting: number;
}

export interface ServerChild {
  readonly url: string;
  stats(): Promise<ServerStats>;
  /** Debugging: the scheduler's request states. */
  dump(): Promise<unknown>;
  /** Debugging: writes a heap snapshot (after a GC) to `file`. */
  heapSnapshot(file: string): Promise<unknown>;
  stop(): Promise<void>;
}

async function startServer(options: Record<string, unknown>): Promise<ServerChild> {
  const proc: ChildProcessByStdio<Writable, Readable, null> = spawn(
    process.execPath,
    ['--expose-gc', '--import', 'tsx', SERVER, JSON.stringify(options)],
    {
      stdio: ['pipe', 'pipe', 'inherit'],
      env: { ...process.env, KVCONNECT_LOG_LEVEL: process.env['SOAK_SERVER_LOG'] ?? 'error' },
    },
  );
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const lines = createInterface({ input: proc.stdout })[Symbol.asyncIterator]();
  const next = async (): Promise<Record<string, unknown>> => {
    const l = await lines.next();
    if (l.done) throw new Error('the soak server exited');
    return JSON.parse(l.value) as Record<string, unknown>;
  };
  const { url } = (await next()) as { url: string };
  return {
    url,
    stats: async () => {
      proc.stdin.write('stats\n');
      return (await next()) as unknown as ServerStats;
    },
    dump: async () => {
      proc.stdin.write('dump\n');
      return next();
    },
    heapSnapshot: async (file) => {
      proc.stdin.write(`heapsnapshot ${file}\n`);
      return next();
    },
    stop: async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.stdin.write('exit\n');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Where the client sends requests, and the servers it reads figures from when idle. */
export interface SoakTarget {
  readonly url: string;
  readonly servers: readonly ServerChild[];
}

export interface SoakCluster extends SoakTarget {
  readonly prefill: ServerChild;
  readonly decode: ServerChild;
  readonly proxy: RunningProxy;
  close(): Promise<void>;
}

function nixl(role: 'kv_producer' | 'kv_consumer', id: string) {
  return {
    kv_connector: 'NixlConnector',
    kv_role: role,
    engine_id: id,
    kv_load_failure_policy: 'fail',
    // tcp (as between hosts): an shm ring would add up to 64 MiB of RSS as it first wraps.
    kv_connector_extra_config: { side_channel_port: 0, backends: ['TCP'] },
  };
}

export async function startSoakCluster(cfg: SoakConfig): Promise<SoakCluster> {
  const base = { model: 'tiny', max_model_len: cfg.maxModelLen };
  const [prefill, decode] = await Promise.all([
    startServer({
      ...base,
      num_gpu_blocks: cfg.prefillBlocks,
      max_num_seqs: 256,
      kv_transfer_config: nixl('kv_producer', 'soak-prefill'),
    }),
    startServer({
      ...base,
      num_gpu_blocks: cfg.decodeBlocks,
      max_num_seqs: cfg.decodeMaxNumSeqs,
      kv_transfer_config: nixl('kv_consumer', 'soak-decode'),
    }),
  ]);
  const proxy = await startProxy(
    resolveProxyOptions({
      prefill: [prefill.url],
      decode: [decode.url],
      port: 0,
      kvConnector: 'NixlConnector',
    }),
  );
  return {
    url: proxy.url,
    servers: [prefill, decode],
    prefill,
    decode,
    proxy,
    close: async () => {
      await proxy.close();
      await Promise.all([prefill.stop(), decode.stop()]);
    },
  };
}

/** One engine serving the same workload alone (the baseline the P/D pair is compared with). */
export async function startPlainServer(cfg: SoakConfig): Promise<SoakTarget & { close(): Promise<void> }> {
  const server = await startServer({
    model: 'tiny',
    max_model_len: cfg.maxModelLen,
    num_gpu_blocks: cfg.prefillBlocks,
    max_num_seqs: 256,
  });
  return { url: server.url, servers: [server], close: () => server.stop() };
}
