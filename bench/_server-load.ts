/**
 * What each server of a routing benchmark did, read from its own /metrics: requests
 * finished, prompt tokens computed vs served from the prefix cache, and its queue over the
 * run (vllm:num_requests_running + vllm:num_requests_waiting, sampled while the load runs). This is how a benchmark
 * shows whether a policy balanced the work or piled it onto one server.
 */
import { sumMetric } from '../src/demo/metrics.ts';

export interface ServerCounters {
  requests: number;
  prefixQueries: number;
  prefixHits: number;
  /** Prompt tokens the server computed itself (not from its cache). */
  computedTokens: number;
}

export interface ServerLoad extends ServerCounters {
  url: string;
  /** Mean and peak of the requests it held (vllm:num_requests_running + waiting) over the samples. */
  meanInSystem: number;
  peakInSystem: number;
}

export async function metricsText(url: string): Promise<string> {
  return (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(30_000) })).text();
}

export async function serverCounters(url: string): Promise<ServerCounters> {
  const text = await metricsText(url);
  return {
    requests: sumMetric(text, 'vllm:request_success_total'),
    prefixQueries: sumMetric(text, 'vllm:prefix_cache_queries_total'),
    prefixHits: sumMetric(text, 'vllm:prefix_cache_hits_total'),
    computedTokens: sumMetric(text, 'vllm:prompt_tokens_by_source_total{source="local_compute"}'),
  };
}

/** Samples the requests each server holds every `intervalMs` until stop(). */
export function sampleQueues(urls: readonly string[], intervalMs = 500): { stop(): Promise<ServerLoad[]> } {
  const samples = urls.map(() => [] as number[]);
  let running = true;
  const loop = (async () => {
    while (running) {
      const texts = await Promise.all(urls.map((u) => metricsText(u).catch(() => null)));
      texts.forEach((t, i) => {
        if (t !== null)
          samples[i]!.push(
            sumMetric(t, 'vllm:num_requests_waiting') + sumMetric(t, 'vllm:num_requests_running'),
          );
      });
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      const counters = await Promise.all(urls.map(serverCounters));
      return urls.map((url, i) => {
        const s = samples[i]!;
        return {
          url,
          ...counters[i]!,
          meanInSystem: s.length > 0 ? s.reduce((a, b) => a + b, 0) / s.length : 0,
          peakInSystem: s.length > 0 ? Math.max(...s) : 0,
        };
      });
    },
  };
}

/** The busier server's share of the computed prompt tokens (0.5 = even, 1 = all on one). */
export function busiestShare(loads: readonly ServerLoad[]): number {
  const total = loads.reduce((n, l) => n + l.computedTokens, 0);
  return total > 0 ? Math.max(...loads.map((l) => l.computedTokens)) / total : 0;
}
