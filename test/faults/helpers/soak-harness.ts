/**
 * The P/D soak shared by test/faults/soak.test.ts and `npm run bench -- soak`: a prefill and
 * a decode server (NixlConnector) in their own processes, the proxy in front, and a client
 * that sends a seeded mix of requests at a fixed concurrency: prompt lengths up to
 * max_model_len, streaming and not, some cancelled by the client mid-stream, and a decode KV
 * pool small enough that the decode engine preempts. It runs in batches and reads both
 * servers' RSS (after a GC), KV usage and preemptions whenever the servers are idle.
 */
import { LLM } from '../../../src/engine/llm.ts';
import { mulberry32 } from '../../../src/util/mulberry32.ts';
import { waitUntil } from '../../helpers/wait-until.ts';
import type { ServerChild, ServerStats, SoakConfig, SoakTarget } from './soak-servers.ts';

export {
  type ServerStats,
  type SoakCluster,
  type SoakConfig,
  type SoakTarget,
  startPlainServer,
  startSoakCluster,
} from './soak-servers.ts';

export interface SoakRequest {
  readonly prompt: number[];
  readonly maxTokens: number;
  readonly stream: boolean;
  readonly cancel: boolean;
}

/**
 * The seeded mix: 70% short prompts (4–31 tokens), 25% medium (up to a third of the room),
 * 5% as long as max_model_len allows; 30% share one of 8 prefixes; 1–8 new tokens each.
 */
export function soakWorkload(cfg: SoakConfig): SoakRequest[] {
  const rnd = mulberry32(cfg.seed);
  const prefixes = Array.from({ length: 8 }, (_, k) =>
    Array.from({ length: 32 }, (_, i) => (i * (7 + 2 * k) + 11 * k + 1) % 256),
  );
  return Array.from({ length: cfg.requests }, () => {
    const maxTokens = 1 + Math.floor(rnd() * 8);
    const r = rnd();
    const room = cfg.maxModelLen - maxTokens;
    const medium = Math.floor(room / 3);
    const length = r < 0.7 ? 4 + Math.floor(rnd() * 28) : r < 0.95 ? 32 + Math.floor(rnd() * medium) : room;
    const shared = rnd() < 0.3 ? prefixes[Math.floor(rnd() * prefixes.length)]! : [];
    const prompt = [...shared, ...Array.from({ length }, () => Math.floor(rnd() * 256))].slice(
      0,
      Math.min(length, room),
    );
    const cancel = rnd() < cfg.cancelFraction;
    return { prompt, maxTokens, stream: cancel || rnd() < 0.5, cancel };
  });
}

export interface Checked {
  readonly prompt: number[];
  readonly maxTokens: number;
  readonly tokenIds: number[];
}

export interface BatchResult {
  completed: number;
  cancelled: number;
  failures: string[];
  checked: Checked[];
  seconds: number;
  /** Time to the whole answer of each completed request. */
  latenciesMs: number[];
  /** Each server of the target once idle again, in the target's order. */
  servers: ServerStats[];
}

interface Completion {
  choices?: Array<{ finish_reason?: string | null; logprobs?: { tokens?: string[] } | null; text?: string }>;
  usage?: { completion_tokens?: number };
  error?: { message?: string };
}

function tokenIds(labels: readonly string[]): number[] {
  return labels.map((l) => Number(/^token_id:(\d+)$/.exec(l)?.[1] ?? Number.NaN));
}

/** Sends one request; resolves with what went wrong (null = answered as asked, or cancelled). */
async function send(url: string, r: SoakRequest, check: boolean, checked: Checked[]): Promise<string | null> {
  try {
    return await exchange(url, r, check, checked);
  } catch (e) {
    // fetch's own message ("fetch failed", "terminated") hides what happened: name the cause.
    const cause = (e as { cause?: { code?: unknown; message?: unknown } }).cause;
    const why = cause ? ` (cause: ${String(cause.code ?? '')} ${String(cause.message ?? cause)})` : '';
    return `request failed: ${String(e)}${why}`;
  }
}

async function exchange(
  url: string,
  r: SoakRequest,
  check: boolean,
  checked: Checked[],
): Promise<string | null> {
  const abort = new AbortController();
  const body = {
    model: 'tiny',
    prompt: r.prompt,
    max_tokens: r.maxTokens,
    temperature: 0,
    ignore_eos: true,
    stream: r.stream,
    ...(r.stream ? { stream_options: { include_usage: true } } : {}),
    ...(check ? { logprobs: 0, return_tokens_as_token_ids: true } : {}),
  };
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: abort.signal,
  });
  if (res.status !== 200) return `HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`;
  const chunks: Completion[] = [];
  if (!r.stream) {
    chunks.push((await res.json()) as Completion);
  } else {
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (r.cancel) {
        abort.abort();
        return null;
      }
      buf += decoder.decode(value, { stream: true });
      let nl = buf.indexOf('\n');
      while (nl >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        nl = buf.indexOf('\n');
        if (line.startsWith('data: ') && line !== 'data: [DONE]')
          chunks.push(JSON.parse(line.slice(6)) as Completion);
      }
    }
    if (r.cancel) return null;
  }
  const error = chunks.find((c) => c.error);
  if (error) return `error event: ${error.error?.message ?? ''}`;
  const finish = chunks.map((c) => c.choices?.[0]?.finish_reason).find((f) => f);
  if (finish !== 'length') return `finish_reason ${String(finish)}`;
  const count = chunks.map((c) => c.usage?.completion_tokens).find((n) => n !== undefined);
  if (count !== r.maxTokens) return `${count} completion tokens for max_tokens ${r.maxTokens}`;
  if (check) {
    const labels = chunks.flatMap((c) => c.choices?.[0]?.logprobs?.tokens ?? []);
    if (labels.length !== r.maxTokens) return `${labels.length} token ids for max_tokens ${r.maxTokens}`;
    checked.push({ prompt: r.prompt, maxTokens: r.maxTokens, tokenIds: tokenIds(labels) });
  }
  return null;
}

/** Sends `items` at `concurrency`, then waits until both servers are idle and reads them. */
export async function runBatch(
  target: SoakTarget,
  items: readonly SoakRequest[],
  cfg: SoakConfig,
  firstIndex: number,
): Promise<BatchResult> {
  const failures: string[] = [];
  const checked: Checked[] = [];
  let next = 0;
  let completed = 0;
  let cancelled = 0;
  const t0 = performance.now();
  const inflight = new Map<number, number>();
  const latenciesMs: number[] = [];
  const trace = process.env['SOAK_TRACE']
    ? setInterval(async () => {
        const stats = await Promise.all(target.servers.map((x) => x.stats()));
        const old = [...inflight].filter(([, at]) => performance.now() - at > 20_000).map(([i]) => i);
        const shown = stats.map(
          (st) =>
            `run ${st.running} wait ${st.waiting} kv ${st.kvCacheUsage.toFixed(2)} preempt ${st.numPreemptions}`,
        );
        console.error(
          `[soak ${((performance.now() - t0) / 1000).toFixed(0)} s] next ${next} done ${completed + cancelled} ` +
            `${shown.join(' | ')} older than 20 s: ${old.length} [${old.slice(0, 8).join(',')}]`,
        );
        if (old.length > 0 && old.length === inflight.size) {
          for (const x of target.servers) console.error(`[soak] ${JSON.stringify(await x.dump())}`);
        }
      }, 5000)
    : null;
  await Promise.all(
    Array.from({ length: cfg.concurrency }, async () => {
      for (;;) {
        const i = next++;
        const r = items[i];
        if (!r) return;
        const check = !r.cancel && (firstIndex + i) % cfg.checkEvery === 0;
        const sentAt = performance.now();
        inflight.set(firstIndex + i, sentAt);
        const failure = await send(target.url, r, check, checked);
        inflight.delete(firstIndex + i);
        if (!failure && !r.cancel) latenciesMs.push(performance.now() - sentAt);
        if (failure) failures.push(`request ${firstIndex + i} (${r.prompt.length} tokens): ${failure}`);
        else if (r.cancel) cancelled++;
        else completed++;
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  if (trace) clearInterval(trace);
  const idle = async (s: ServerChild) =>
    waitUntil(
      'the server to go idle with no block held',
      async () => {
        const st = await s.stats();
        return st.running === 0 && st.waiting === 0 && st.kvCacheUsage === 0 ? st : null;
      },
      { timeoutMs: 60_000, intervalMs: 100 },
    );
  const servers: ServerStats[] = [];
  for (const x of target.servers) servers.push(await idle(x));
  return { completed, cancelled, failures, checked, seconds, latenciesMs, servers };
}

/** Token ids of a single engine for the checked requests, in order. */
export async function singleEngineTokens(cfg: SoakConfig, checked: readonly Checked[]): Promise<number[][]> {
  const llm = await LLM.create({ model: 'tiny', max_model_len: cfg.maxModelLen, num_gpu_blocks: 2048 });
  try {
    const out: number[][] = new Array(checked.length);
    for (const maxTokens of new Set(checked.map((c) => c.maxTokens))) {
      const idx = checked.flatMap((c, i) => (c.maxTokens === maxTokens ? [i] : []));
      const outs = await llm.generate(
        idx.map((i) => ({ promptTokenIds: checked[i]!.prompt })),
        { maxTokens, temperature: 0, ignoreEos: true },
      );
      idx.forEach((i, k) => {
        out[i] = outs[k]!.tokenIds;
      });
    }
    return out;
  } finally {
    await llm.shutdown();
  }
}

export const MiB = 1 << 20;
