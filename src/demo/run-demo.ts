/**
 * `kvconnect demo`: start P, D and a reference server as child processes and the proxy in
 * this process, send the same greedy workload through the proxy and to the reference,
 * compare every output and report latency, KV moved and prefix-cache reuse.
 */
import { formatErrorText } from '../errors/format.ts';
import { setLogLevel } from '../logging/logger.ts';
import { readEnv } from '../util/envs.ts';
import { CONNECTOR_INFO_PATH } from '../wire/index.ts';
import { type CompletionResult, streamCompletion } from './client.ts';
import { keepRunningHelp } from './keep-running.ts';
import { demoMetricNames, type MetricReading, metricDelta, readMetrics } from './metrics.ts';
import {
  type DemoConnector,
  type DemoOptions,
  demoFlow,
  exportsTransferMetrics,
  resolveDemoConnector,
  transferMode,
} from './options.ts';
import { ProcessGroup } from './processes.ts';
import { Progress, type ProgressSink } from './progress.ts';
import { renderSamples } from './samples.ts';
import { type Running, type Servers, startServers } from './start-servers.ts';
import { type DemoSummary, nearestRankOf, type PhaseResult, renderTable, summarize } from './summary.ts';
import { kvBytesPerBlock } from './topology.ts';
import { buildWorkload, type DemoRequest, workloadWaves } from './workload.ts';

export const DEMO_EXIT_OK = 0;
export const DEMO_EXIT_MISMATCH = 1;
export const DEMO_EXIT_USAGE = 2;

export interface DemoIO {
  out(text: string): void;
  /** Progress and notes; `isTTY` switches to a single updating line. */
  err: ProgressSink;
}

export interface DemoRun {
  exitCode: number;
  summary: DemoSummary | null;
}

/** Resolves when SIGINT or SIGTERM arrives; `dispose` removes the handlers. */
function signalWaiter(): { signalled: Promise<NodeJS.Signals>; dispose(): void } {
  let handler: (s: NodeJS.Signals) => void = () => undefined;
  const signalled = new Promise<NodeJS.Signals>((resolve) => {
    handler = (s) => resolve(s);
  });
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return {
    signalled,
    dispose: () => {
      process.off('SIGINT', handler);
      process.off('SIGTERM', handler);
    },
  };
}

async function runPhase(
  label: string,
  baseUrl: string,
  model: string,
  waves: DemoRequest[][],
  progress: Progress,
): Promise<PhaseResult> {
  const total = waves.reduce((n, w) => n + w.length, 0);
  const results: CompletionResult[] = [];
  const started = performance.now();
  progress.update(label, 0, total);
  const tag = label.replace(/\W+/g, '-');
  for (const wave of waves) {
    await Promise.all(
      wave.map(async (request) => {
        const result = await streamCompletion(baseUrl, model, request, `demo-${tag}-${request.index}`);
        results.push(result);
        const p50 = nearestRankOf(
          results.map((r) => r.ttftMs),
          50,
        );
        progress.update(label, results.length, total, `TTFT p50 ${p50.toFixed(1)} ms`);
      }),
    );
  }
  results.sort((a, b) => a.index - b.index);
  return { results, wallMs: performance.now() - started };
}

/**
 * The mode and MoRIIO backend P itself reports (GET /kvconnect/info), so the summary shows
 * what ran, not what was asked; the asked-for values if P does not say.
 */
async function reportedMode(
  prefillUrl: string,
  connector: DemoConnector,
  options: DemoOptions,
): Promise<{ transferMode: string; moriioBackend: string | null }> {
  const moriio = demoFlow(connector) === 'MoRIIOConnector';
  const asked = {
    transferMode: transferMode(connector, options),
    moriioBackend: moriio ? options.moriioBackend : null,
  };
  try {
    const res = await fetch(`${prefillUrl}${CONNECTOR_INFO_PATH}`);
    const info = (await res.json()) as { transfer_mode?: unknown; backend?: unknown };
    return {
      transferMode: typeof info.transfer_mode === 'string' ? info.transfer_mode : asked.transferMode,
      moriioBackend: moriio && typeof info.backend === 'string' ? info.backend : asked.moriioBackend,
    };
  } catch {
    return asked;
  }
}

async function measure(options: DemoOptions, s: Servers, progress: Progress): Promise<DemoSummary> {
  const connector = resolveDemoConnector(options.connector);
  const workload = buildWorkload(options);
  const waves = workloadWaves(workload, options.concurrency);
  // One warm-up each: first-request costs (JIT, NIXL handshake) stay out of the figures.
  const warmup: DemoRequest = { index: -1, family: -1, prompt: 'warm-up: hello', maxTokens: 2 };
  await streamCompletion(s.proxy.url, options.model, warmup, 'demo-warmup-proxy');
  await streamCompletion(s.reference.url, options.model, warmup, 'demo-warmup-reference');
  const names = demoMetricNames(connector);
  const read = (): Promise<MetricReading[]> =>
    Promise.all([s.prefill.url, s.decode.url, s.reference.url].map((url) => readMetrics(url, names)));
  const before = await read();
  const disaggregated = await runPhase('disaggregated', s.proxy.url, options.model, waves, progress);
  const plain = await runPhase('plain        ', s.reference.url, options.model, waves, progress);
  const after = await read();
  const [prefill, decode, reference] = after.map((a, i) => metricDelta(before[i] as MetricReading, a)) as [
    MetricReading,
    MetricReading,
    MetricReading,
  ];
  return summarize({
    connector,
    ...(await reportedMode(s.prefill.url, connector, options)),
    transferMetrics: exportsTransferMetrics(connector),
    model: options.model,
    concurrency: options.concurrency,
    bytesPerBlock: kvBytesPerBlock(options.model),
    disaggregated,
    plain,
    prefill,
    decode,
    reference,
    requests: workload,
  });
}

export async function runDemo(options: DemoOptions, io: DemoIO): Promise<DemoRun> {
  // The proxy's per-request info logs would drown the progress line; KVCONNECT_LOG_LEVEL wins.
  if (readEnv('KVCONNECT_LOG_LEVEL') === undefined) setLogLevel('warn');
  try {
    resolveDemoConnector(options.connector);
  } catch (e) {
    io.err.write(`${formatErrorText(e)}\n`);
    return { exitCode: DEMO_EXIT_USAGE, summary: null };
  }
  const progress = new Progress(io.err);
  const running: Running = { group: new ProcessGroup() };
  const signals = signalWaiter();
  let summary: DemoSummary | null = null;
  try {
    const work = (async (): Promise<DemoSummary> => {
      running.servers = await startServers(options, running, progress);
      return measure(options, running.servers, progress);
    })();
    const outcome = await Promise.race([work, signals.signalled]);
    if (typeof outcome === 'string') {
      progress.note(`\n${outcome}: stopping the demo's servers…`);
      await running.group.stopAll(); // makes whatever step is in flight fail fast
      await work.catch(() => undefined);
      return { exitCode: outcome === 'SIGINT' ? 130 : 143, summary: null };
    }
    summary = outcome;
    io.out(`\n${renderTable(summary)}\n`);
    if (summary.samples.length > 0) io.out(`\n${renderSamples(summary.samples)}\n`);
    if (options.json) io.out(`${JSON.stringify(summary)}\n`);
    const exitCode = summary.outputs_identical ? DEMO_EXIT_OK : DEMO_EXIT_MISMATCH;
    if (options.keepRunning && running.servers) {
      const moriio = summary.moriio_backend !== null;
      io.out(`\n${keepRunningHelp(running.servers, options.model, process.pid, moriio)}\n`);
      const s = await signals.signalled;
      progress.note(`${s}: stopping…`);
    }
    return { exitCode, summary };
  } catch (e) {
    progress.clear();
    for (const p of running.group.processes) {
      const tail = p.stderrTail().trim();
      if (tail) io.err.write(`--- last output of the ${p.name} server ---\n${tail}\n`);
    }
    io.err.write(`${formatErrorText(e)}\n`);
    return { exitCode: DEMO_EXIT_MISMATCH, summary };
  } finally {
    signals.dispose();
    await running.proxy?.close();
    await running.group.stopAll();
  }
}
