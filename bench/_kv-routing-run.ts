/**
 * One run of the KV-aware routing benchmark: two fresh `kvconnect serve --model tiny`
 * processes (KV events on) behind an in-process `kvconnect proxy` with one policy, a trace
 * replayed through it by `bench serve`, and what each server did (./_server-load.ts).
 *
 * A policy is named as on the command line, optionally with kv_aware's cost weights:
 * `kv_aware@credit=2@running=0` (docs/proxy.md#policies).
 */
import { resolveBenchOptions, runBenchServe } from '../src/bench-serve/index.ts';
import { type ServeProcess, startServe } from '../src/demo/processes.ts';
import { resolveProxyOptions, startProxy } from '../src/proxy/index.ts';
import { POLICY_NAMES, type PolicyName, type ProxyOptions } from '../src/proxy/types.ts';
import { type ServerLoad, sampleQueues } from './_server-load.ts';

export interface PolicySpec {
  label: string;
  policy: PolicyName;
  weights: Partial<Pick<ProxyOptions, 'kvAwareOverlapCredit' | 'kvAwareRunningCost'>>;
}

export function parsePolicySpec(label: string): PolicySpec {
  const [name, ...params] = label.split('@');
  if (!(POLICY_NAMES as readonly string[]).includes(name!)) {
    throw new Error(
      `unknown policy ${JSON.stringify(name)} in --policies; use one of ${POLICY_NAMES.join(', ')}`,
    );
  }
  const weights: PolicySpec['weights'] = {};
  for (const p of params) {
    const [key, value] = p.split('=');
    const n = Number(value);
    if (key === 'credit') weights.kvAwareOverlapCredit = n;
    else if (key === 'running') weights.kvAwareRunningCost = n;
    else throw new Error(`unknown parameter ${JSON.stringify(p)} in ${label}; use credit=X or running=Y`);
  }
  return { label, policy: name as PolicyName, weights };
}

export interface RunOptions {
  blockWords: number;
  timeScale: number;
  maxRequests: number;
  maxOutputLen: number;
}

export interface RunResult {
  hitRate: number;
  ttftP50: number;
  ttftP99: number;
  completed: number;
  failed: number;
  servers: ServerLoad[];
}

function startServer(name: string): Promise<ServeProcess> {
  const events = {
    enable_kv_cache_events: true,
    endpoint: 'tcp://127.0.0.1:*',
    replay_endpoint: 'tcp://127.0.0.1:*',
  };
  return startServe(
    name,
    [
      '--model',
      'tiny',
      '--port',
      '0',
      '--max-model-len',
      '4096',
      '--kv-cache-memory-bytes',
      '256M',
      '--max-num-batched-tokens',
      '4096',
      '--kv-events-config',
      JSON.stringify(events),
    ],
    { timeoutMs: 120_000 },
  );
}

export async function runOnce(spec: PolicySpec, tracePath: string, o: RunOptions): Promise<RunResult> {
  const servers = await Promise.all([startServer('decode-0'), startServer('decode-1')]);
  const proxy = await startProxy(
    resolveProxyOptions({
      prefill: [],
      decode: servers.map((s) => s.url),
      port: 0,
      policy: spec.policy,
      tokenizer: 'tiny',
      healthIntervalMs: 1000,
      // A busy engine answers /health late; the bench is about routing, not failure detection.
      healthTimeoutMs: 30_000,
      ...spec.weights,
    }),
  );
  try {
    if (spec.policy === 'kv_aware') {
      const followed = () =>
        servers.every((s) => proxy.kvEvents?.sourceOf(proxy.pool.all().find((b) => b.url === s.url)!));
      for (let i = 0; i < 400 && !followed(); i++) await new Promise((r) => setTimeout(r, 25));
    }
    const queues = sampleQueues(servers.map((s) => s.url));
    const run = await runBenchServe(
      resolveBenchOptions({
        model: 'tiny',
        baseUrl: proxy.url,
        trace: tracePath,
        traceBlockTokens: o.blockWords,
        traceTimeScale: o.timeScale,
        timeoutMs: 600_000,
        maxRequests: o.maxRequests,
        traceMaxOutputLen: o.maxOutputLen,
        ignoreEos: true,
        seed: 0,
      }),
    ).catch(async (e: unknown) => {
      await queues.stop().catch(() => undefined);
      throw e;
    });
    const loads = await queues.stop();
    const queries = loads.reduce((n, c) => n + c.prefixQueries, 0);
    const hits = loads.reduce((n, c) => n + c.prefixHits, 0);
    return {
      hitRate: queries > 0 ? hits / queries : 0,
      ttftP50: run.summary.ttftMs.p50,
      ttftP99: run.summary.ttftMs.p99,
      completed: run.summary.completed,
      failed: run.summary.failed,
      servers: loads,
    };
  } finally {
    await proxy.close();
    await Promise.all(servers.map((s) => s.stop()));
  }
}
