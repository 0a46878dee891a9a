/**
 * Runs a load: plans the prompts (random or trace replay), releases them on a Poisson
 * schedule, the trace's timestamps or all at once, caps concurrency, and summarises.
 */
import { Agent } from 'undici';
import { getLogger } from '../logging/logger.ts';
import { mulberry32 } from '../util/mulberry32.ts';
import { type BenchSummary, summarize } from './metrics.ts';
import type { BenchServeOptions } from './options.ts';
import { type PlannedRequest, randomRequests, traceRequests } from './prompts.ts';
import { type RequestResult, sendStreaming } from './sse-client.ts';
import { loadTrace, type TraceProblem } from './trace.ts';

const log = getLogger('kvconnect.bench-serve.runner');

export interface BenchRun {
  summary: BenchSummary;
  results: RequestResult[];
  traceProblems: TraceProblem[];
}

export function planRequests(o: BenchServeOptions): {
  planned: PlannedRequest[];
  traceProblems: TraceProblem[];
} {
  if (o.trace !== undefined) {
    const trace = loadTrace(o.trace);
    for (const p of trace.problems) log.warn('%s line %d skipped: %s', o.trace, p.line, p.message);
    const planned = traceRequests(trace.entries, {
      blockTokens: o.traceBlockTokens,
      timeScale: o.traceTimeScale,
      maxRequests: o.maxRequests ?? o.numPrompts,
      ...(o.traceMaxOutputLen === undefined ? {} : { maxOutputLen: o.traceMaxOutputLen }),
    });
    return { planned, traceProblems: trace.problems };
  }
  const count = Math.min(o.numPrompts, o.maxRequests ?? o.numPrompts);
  const planned = randomRequests(count, o.randomInputLen, o.randomOutputLen, o.randomRangeRatio, o.seed);
  if (Number.isFinite(o.requestRate) && o.requestRate > 0) {
    const rand = mulberry32(o.seed + 1);
    let t = 0;
    for (const r of planned) {
      r.arrivalMs = t;
      t += (-Math.log(1 - rand()) / o.requestRate) * 1000;
    }
  }
  return { planned, traceProblems: [] };
}

function requestBody(o: BenchServeOptions, r: PlannedRequest, chat: boolean): Record<string, unknown> {
  return {
    model: o.model,
    ...(chat ? { messages: [{ role: 'user', content: r.prompt }] } : { prompt: r.prompt }),
    max_tokens: r.maxTokens,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
    ...(o.ignoreEos ? { ignore_eos: true } : {}),
  };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export async function runBenchServe(o: BenchServeOptions): Promise<BenchRun> {
  const { planned, traceProblems } = planRequests(o);
  const chat = o.endpoint.includes('chat');
  const url = `${o.baseUrl.replace(/\/+$/, '')}${o.endpoint}`;
  const limit = o.maxConcurrency ?? Number.POSITIVE_INFINITY;
  const agent = new Agent({ keepAliveTimeout: 10_000, connections: Number.isFinite(limit) ? limit : 512 });
  const headers: Record<string, string> = o.apiKey ? { authorization: `Bearer ${o.apiKey}` } : {};
  const results: RequestResult[] = [];
  const running = new Set<Promise<void>>();
  const runStart = performance.now();
  try {
    for (const r of planned) {
      if (r.arrivalMs !== null) {
        const wait = r.arrivalMs - (performance.now() - runStart);
        if (wait > 0) await sleep(wait);
      }
      while (running.size >= limit) await Promise.race(running);
      if (performance.now() - runStart > o.maxDurationS * 1000) {
        log.warn(
          'stopping after %d s (--max-duration); %d requests not sent',
          o.maxDurationS,
          planned.length - results.length - running.size,
        );
        break;
      }
      const task = sendStreaming({
        url,
        body: requestBody(o, r, chat),
        chat,
        headers,
        dispatcher: agent,
        timeoutMs: o.timeoutMs,
        promptLen: r.promptLen,
        runStart,
      }).then((res) => {
        results.push(res);
        running.delete(task);
      });
      running.add(task);
    }
    await Promise.all(running);
  } finally {
    await agent.close();
  }
  const durationS = (performance.now() - runStart) / 1000;
  results.sort((a, b) => a.startMs - b.startMs);
  const failed = results.filter((r) => !r.ok);
  if (failed.length > 0)
    log.warn('%d of %d requests failed; first error: %s', failed.length, results.length, failed[0]!.error);
  return { summary: summarize(results, durationS), results, traceProblems };
}
