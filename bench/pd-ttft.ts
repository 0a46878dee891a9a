/**
 * What disaggregation adds to time to first token, as a user sees it: sequential streamed
 * requests with unique prompts, one plain `kvconnect serve` against a prefill/decode pair
 * behind `kvconnect proxy`, for each P/D mode (NIXL pull and push, MoRIIO WRITE and READ)
 * over each transport (tcp, shm), in one run.
 *
 * The plain server and one pair at a time run as child processes (the proxy runs here). Per
 * pair, rounds alternate the two sides (plain first, then the pair first, ...); in a round
 * each side gets the same prompts, `--requests` per size, unique in the run (mulberry32), so no
 * prefix cache helps. TTFT is from sending the request to the first SSE event (the first
 * token); both sides must return the same token ids (greedy), else the bench fails. Per size
 * and round: the median TTFT of each side and their difference; reported as the median of the
 * rounds with min–max.
 *
 * The breakdown of a P/D request comes from the timelines both servers record
 * (`GET /kvconnect/timeline?request_id=`, served with VLLM_SERVER_DEV_MODE=1, docs/serve.md)
 * and the transfer metrics (`vllm:nixl_xfer_time_seconds`, `vllm:moriio_xfer_time_seconds`):
 * per event, the median over the pair's requests at `--breakdown-size` of its time since the
 * client sent the request.
 *
 *   npm run bench -- pd-ttft [--modes nixl-pull,nixl-push,moriio-write,moriio-read]
 *     [--transports tcp,shm] [--sizes 16,128,512,1008] [--rounds 5] [--requests 3]
 */
import { Agent, request } from 'undici';
import { resolveModelInfo } from '../src/config/model-info.ts';
import { ProcessGroup, type ServeProcess, startServe } from '../src/demo/processes.ts';
import {
  freeMoriioPorts,
  freePorts,
  type MoriioPorts,
  moriioTransferConfig,
  nixlTransferConfig,
} from '../src/demo/transfer-configs.ts';
import { setLogLevel } from '../src/logging/logger.ts';
import { type RunningProxy, resolveProxyOptions, startProxy } from '../src/proxy/index.ts';
import { mulberry32 } from '../src/util/mulberry32.ts';
import { benchArgs, exitWithUsageError, positiveInteger, text, toggle } from './_args.ts';
import { PD_MODES, PD_TRANSPORTS, type PdPair, planPdTtft } from './_pd-ttft-plan.ts';
import {
  BREAKDOWN_EVENTS,
  type Breakdown,
  type BreakdownKey,
  breakdownOf,
  type ServerTimeline,
  type XferTotals,
  xferTotals,
} from './_pd-ttft-timeline.ts';
import { alternate, fmt, json, loadAverage, median, type Summary, summarize } from './_rounds.ts';
import { metricsText } from './_server-load.ts';

const STARTUP_MS = 60_000;

interface Sample {
  ttftMs: number;
  ids: string;
  requestId: string;
}

/** One streamed greedy completion; TTFT is the time to its first SSE event. */
async function streamOnce(
  agent: Agent,
  url: string,
  model: string,
  prompt: number[],
  maxTokens: number,
  requestId: string,
): Promise<Sample & { sentAt: number; firstAt: number }> {
  const sentAt = performance.timeOrigin + performance.now();
  const t0 = performance.now();
  const res = await request(`${url}/v1/completions`, {
    method: 'POST',
    dispatcher: agent,
    headers: { 'content-type': 'application/json', 'x-request-id': requestId },
    body: JSON.stringify({
      model,
      prompt,
      max_tokens: maxTokens,
      temperature: 0,
      ignore_eos: true,
      stream: true,
      return_token_ids: true,
    }),
  });
  let text = '';
  let firstMs = Number.NaN;
  let firstAt = Number.NaN;
  for await (const chunk of res.body) {
    if (Number.isNaN(firstMs)) {
      firstMs = performance.now() - t0;
      firstAt = performance.timeOrigin + performance.now();
    }
    text += String(chunk);
  }
  if (res.statusCode !== 200 || !text.includes('data: [DONE]')) {
    throw new Error(`${url}: HTTP ${res.statusCode}: ${text.slice(0, 300)}`);
  }
  const ids: number[] = [];
  // The server's X-Request-Id, from the response id `cmpl-<id>`: through the proxy, the id it
  // sent P and D (for MoRIIO one it made, not the client's).
  let served = requestId;
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const e = JSON.parse(line.slice(6)) as {
      id?: string;
      error?: unknown;
      choices?: Array<{ token_ids?: number[] }>;
    };
    if (e.error) throw new Error(`${url}: error event ${JSON.stringify(e.error)}`);
    if (typeof e.id === 'string' && e.id.startsWith('cmpl-')) served = e.id.slice('cmpl-'.length);
    ids.push(...(e.choices?.[0]?.token_ids ?? []));
  }
  if (ids.length !== maxTokens) throw new Error(`${url}: ${ids.length} tokens instead of ${maxTokens}`);
  return { ttftMs: firstMs, ids: ids.join(','), requestId: served, sentAt, firstAt };
}

async function getJson(url: string): Promise<unknown> {
  const res = await request(url);
  const body = await res.body.text();
  if (res.statusCode !== 200) throw new Error(`GET ${url}: HTTP ${res.statusCode}: ${body.slice(0, 200)}`);
  return JSON.parse(body);
}

/** A P/D pair: P and D as child processes, the proxy in this process. */
interface RunningPair {
  pair: PdPair;
  prefill: ServeProcess;
  decode: ServeProcess;
  proxy: RunningProxy;
  stop(): Promise<void>;
}

async function startPair(
  pair: PdPair,
  engineArgs: readonly string[],
  group: ProcessGroup,
  env: Record<string, string>,
  { thread, paramsAhead }: { thread: boolean; paramsAhead: boolean },
): Promise<RunningPair> {
  const opts = { timeoutMs: STARTUP_MS, group, env };
  let prefillArgs: string[];
  let decodeArgs: string[];
  let proxyExtra: Parameters<typeof resolveProxyOptions>[0];
  if (pair.mode === 'nixl-pull' || pair.mode === 'nixl-push') {
    const suffix = Math.random().toString(16).slice(2, 10);
    const [pSide = 0] = pair.mode === 'nixl-push' ? await freePorts(1) : [0];
    const connector = pair.mode === 'nixl-push' ? 'NixlPushConnector' : 'NixlConnector';
    const nixl = {
      kvLoadFailurePolicy: 'fail',
      nixlBackends: [pair.transport === 'shm' ? 'SHM' : 'TCP'],
      transferThread: thread,
    } as const;
    const config = (role: 'kv_producer' | 'kv_consumer', id: string, port: number) =>
      JSON.stringify(nixlTransferConfig(connector, role, id, port, nixl));
    prefillArgs = ['--port', '0', '--kv-transfer-config', config('kv_producer', `p-${suffix}`, pSide)];
    decodeArgs = ['--port', '0', '--kv-transfer-config', config('kv_consumer', `d-${suffix}`, 0)];
    proxyExtra = {
      port: 0,
      kvConnector: connector,
      push:
        pair.mode === 'nixl-push'
          ? { engineId: `p-${suffix}`, host: '127.0.0.1', port: pSide, tpSize: 1, ppSize: 1 }
          : {},
    };
  } else {
    const [p, d] = (await freeMoriioPorts(2)) as [MoriioPorts, MoriioPorts];
    const moriio = {
      kvLoadFailurePolicy: 'fail',
      moriioBackend: pair.transport === 'shm' ? 'xgmi' : 'rdma',
      moriioReadMode: pair.mode === 'moriio-read',
      transferThread: thread,
    } as const;
    const config = (role: 'kv_producer' | 'kv_consumer', ports: MoriioPorts) =>
      JSON.stringify(moriioTransferConfig(role, ports, moriio));
    prefillArgs = ['--port', String(p.http), '--kv-transfer-config', config('kv_producer', p)];
    decodeArgs = ['--port', String(d.http), '--kv-transfer-config', config('kv_consumer', d)];
    proxyExtra = {
      port: 0,
      kvConnector: 'MoRIIOConnector',
      moriioMode: pair.mode === 'moriio-read' ? 'READ' : 'WRITE',
    };
  }
  const [prefill, decode] = await Promise.all([
    startServe(`${pair.label} prefill`, [...engineArgs, ...prefillArgs], opts),
    startServe(`${pair.label} decode`, [...engineArgs, ...decodeArgs], opts),
  ]);
  const proxy = await startProxy(
    resolveProxyOptions({ ...proxyExtra, paramsAhead, prefill: [prefill.url], decode: [decode.url] }),
  );
  return {
    pair,
    prefill,
    decode,
    proxy,
    stop: async () => {
      await proxy.close();
      await Promise.all([prefill.stop(), decode.stop()]);
    },
  };
}

interface SizeResult {
  size: number;
  plain: Summary;
  pd: Summary;
  added: Summary;
}

interface PairResult {
  label: string;
  sizes: SizeResult[];
  breakdown: Breakdown | null;
  breakdownSamples: number;
  /** The plain server's requests of the same size, measured beside this pair (its timeline in the d_* events). */
  plainBreakdown: Breakdown | null;
}

export async function main(args: string[]): Promise<void> {
  const flags = benchArgs(
    'pd-ttft',
    {
      modes: text('P/D modes, comma-separated', { default: PD_MODES.join(','), value: 'list' }),
      transports: text('transports, comma-separated', { default: PD_TRANSPORTS.join(','), value: 'list' }),
      sizes: text('prompt lengths in tokens, comma-separated', { default: '16,128,512,1008', value: 'list' }),
      rounds: positiveInteger(5, 'rounds per pair, plain and P/D alternating'),
      requests: positiveInteger(3, 'sequential requests per size, side and round'),
      'max-tokens': positiveInteger(2, 'tokens generated per request'),
      model: text('the model every server serves', { default: 'kjv-llama', value: 'name' }),
      'no-transfer-thread': toggle(
        "run the transfer agents on the engines' event loops (transfer_thread: false) instead of in their own threads",
      ),
      'no-params-ahead': toggle(
        "NIXL pull: the proxy sends D after P answered (kvconnect proxy --no-params-ahead) instead of on P's 103",
      ),
      'breakdown-size': positiveInteger(
        512,
        'prompt length of the requests whose timelines are broken down (the nearest of --sizes)',
      ),
    },
    args,
  );
  const maxTokens = flags['max-tokens'];
  let maxModelLen: number;
  try {
    maxModelLen = resolveModelInfo(flags.model).hfConfig.max_position_embeddings;
  } catch (e) {
    exitWithUsageError('pd-ttft', `--model: ${(e as Error).message}`);
  }
  const planned = planPdTtft(flags, maxModelLen, maxTokens);
  if (!planned.ok) exitWithUsageError('pd-ttft', planned.problem);
  const { pairs, sizes } = planned.plan;
  const breakdownSize = sizes.reduce((best, s) =>
    Math.abs(s - flags['breakdown-size']) < Math.abs(best - flags['breakdown-size']) ? s : best,
  );
  setLogLevel('error');

  const group = new ProcessGroup();
  const agent = new Agent({ keepAliveTimeout: 30_000 });
  const env = { KVCONNECT_LOG_LEVEL: 'error', VLLM_SERVER_DEV_MODE: '1' };
  const engineArgs = ['--model', flags.model, '--max-model-len', String(maxModelLen)];
  const vocab = resolveModelInfo(flags.model).hfConfig.vocab_size;
  // Unique prompts: every request of the run gets fresh random token ids (no prefix reuse).
  const random = mulberry32(0x5eed);
  const promptOf = (n: number): number[] =>
    Array.from({ length: n }, () => 3 + Math.floor(random() * (vocab - 16)));
  let serial = 0;
  const rid = (side: string): string => `pdttft-${side}-${process.pid}-${serial++}`;
  const results: PairResult[] = [];
  try {
    const plain = await startServe('plain', [...engineArgs, '--port', '0'], {
      timeoutMs: STARTUP_MS,
      group,
      env,
    });
    for (const pair of pairs) {
      const running = await startPair(pair, engineArgs, group, env, {
        thread: !flags['no-transfer-thread'],
        paramsAhead: !flags['no-params-ahead'],
      });
      try {
        results.push(
          await measurePair(running, plain, {
            agent,
            model: flags.model,
            sizes,
            rounds: flags.rounds,
            perRound: flags.requests,
            maxTokens,
            breakdownSize,
            promptOf,
            rid,
          }),
        );
      } catch (e) {
        // What the servers said last is what explains a failed request.
        const tails = [running.prefill, running.decode, plain]
          .map((s) => `--- ${s.name} (last output) ---\n${s.stderrTail().trim() || '(nothing)'}`)
          .join('\n');
        throw new Error(`${pair.label}: ${(e as Error).message}\n${tails}`);
      } finally {
        await running.stop();
      }
    }
  } finally {
    await agent.close();
    await group.stopAll();
  }
  report(results, { ...flags, sizes, breakdownSize, pairs });
}

interface MeasureOptions {
  agent: Agent;
  model: string;
  sizes: number[];
  rounds: number;
  perRound: number;
  maxTokens: number;
  breakdownSize: number;
  promptOf: (n: number) => number[];
  rid: (side: string) => string;
}

async function measurePair(pd: RunningPair, plain: ServeProcess, o: MeasureOptions): Promise<PairResult> {
  const { agent, model, maxTokens } = o;
  // Warm-up (not counted): connections, the handshake between P and D, code paths, every size.
  for (const size of o.sizes) {
    for (let k = 0; k < 2; k++) {
      const prompt = o.promptOf(size);
      await streamOnce(agent, plain.url, model, prompt, maxTokens, o.rid('warm'));
      await streamOnce(agent, pd.proxy.url, model, prompt, maxTokens, o.rid('warm'));
    }
  }
  const breakdowns: Breakdown[] = [];
  const plainBreakdowns: Breakdown[] = [];
  const xferBefore = async (): Promise<XferTotals> =>
    xferTotals(await metricsText(pd.prefill.url), await metricsText(pd.decode.url));
  /** One round's prompts, size by size, shared by both sides. */
  const prompts: number[][][][] = [];
  const ids = new Map<string, string>();
  const side =
    (which: 'plain' | 'pd') =>
    async (round: number): Promise<number[][]> => {
      prompts[round] ??= o.sizes.map((size) => Array.from({ length: o.perRound }, () => o.promptOf(size)));
      const out: number[][] = [];
      for (const [s, size] of o.sizes.entries()) {
        const ttfts: number[] = [];
        for (let k = 0; k < o.perRound; k++) {
          const key = `${round}/${s}/${k}`;
          const prompt = prompts[round]![s]![k]!;
          const url = which === 'plain' ? plain.url : pd.proxy.url;
          const before = which === 'pd' && size === o.breakdownSize ? await xferBefore() : null;
          const sample = await streamOnce(agent, url, model, prompt, maxTokens, o.rid(which));
          ttfts.push(sample.ttftMs);
          const other = ids.get(key);
          if (other !== undefined && other !== sample.ids) {
            throw new Error(
              `${pd.pair.label}: P/D returned token ids ${which === 'pd' ? sample.ids : other} where the plain server returned ${which === 'pd' ? other : sample.ids} (prompt of ${size} tokens)`,
            );
          }
          ids.set(key, sample.ids);
          if (which === 'plain' && size === o.breakdownSize) {
            const timeline = (await getJson(
              `${plain.url}/kvconnect/timeline?request_id=${encodeURIComponent(sample.requestId)}`,
            )) as ServerTimeline;
            plainBreakdowns.push(breakdownOf(sample, null, timeline));
          }
          if (before) {
            const [pTimeline, dTimeline] = (await Promise.all([
              getJson(
                `${pd.prefill.url}/kvconnect/timeline?request_id=${encodeURIComponent(sample.requestId)}`,
              ),
              getJson(
                `${pd.decode.url}/kvconnect/timeline?request_id=${encodeURIComponent(sample.requestId)}`,
              ),
            ])) as [ServerTimeline, ServerTimeline];
            const after = await xferBefore();
            breakdowns.push(
              breakdownOf(
                { sentAt: sample.sentAt, firstAt: sample.firstAt },
                pTimeline,
                dTimeline,
                before,
                after,
              ),
            );
          }
        }
        out.push(ttfts);
      }
      return out;
    };
  const { a: plainRounds, b: pdRounds } = await alternate(o.rounds, side('plain'), side('pd'));
  const sizes = o.sizes.map((size, s): SizeResult => {
    const plainMed = plainRounds.map((r) => median(r[s]!));
    const pdMed = pdRounds.map((r) => median(r[s]!));
    return {
      size,
      plain: summarize(plainMed),
      pd: summarize(pdMed),
      added: summarize(pdMed.map((v, i) => v - plainMed[i]!)),
    };
  });
  return {
    label: pd.pair.label,
    sizes,
    breakdown: breakdowns.length > 0 ? medianBreakdown(breakdowns) : null,
    breakdownSamples: breakdowns.length,
    plainBreakdown: plainBreakdowns.length > 0 ? medianBreakdown(plainBreakdowns) : null,
  };
}

/** Event by event, the median over the samples (each event's own median: they need not add up). */
function medianBreakdown(all: readonly Breakdown[]): Breakdown {
  const out: Breakdown = {};
  for (const key of BREAKDOWN_EVENTS.map((e) => e.key)) {
    const values = all.map((b) => b[key]).filter((v): v is number => v !== undefined && Number.isFinite(v));
    if (values.length > 0) out[key] = median(values);
  }
  return out;
}

function rounded(b: Breakdown | null): Record<string, number> | null {
  return b ? Object.fromEntries(Object.entries(b).map(([k, v]) => [k, Number(v.toFixed(3))])) : null;
}

function report(
  results: readonly PairResult[],
  o: {
    rounds: number;
    requests: number;
    model: string;
    'max-tokens': number;
    sizes: number[];
    breakdownSize: number;
    pairs: PdPair[];
    'no-transfer-thread': boolean;
    'no-params-ahead': boolean;
  },
): void {
  const thread = !o['no-transfer-thread'];
  const paramsAhead = !o['no-params-ahead'];
  console.log(
    `${o.model}, ${o.rounds} rounds × ${o.requests} sequential streamed requests per size and side ` +
      `(max_tokens ${o['max-tokens']}, unique prompts), plain and P/D alternating; TTFT ms, median of the ` +
      `per-round medians (min–max); transfer agents ${thread ? 'in their own threads' : 'on the engine loops'}; ` +
      `NIXL pull ${paramsAhead ? "sends D on P's params ahead" : 'sends D after P answered'}; ` +
      `load average ${loadAverage()}`,
  );
  console.log('| P/D | prompt tokens | plain TTFT | P/D TTFT | P/D − plain |');
  console.log('| --- | --- | --- | --- | --- |');
  for (const r of results) {
    for (const s of r.sizes) {
      console.log(`| ${r.label} | ${s.size} | ${fmt(s.plain, 1)} | ${fmt(s.pd, 1)} | ${fmt(s.added, 1)} |`);
    }
  }
  console.log('');
  console.log(
    `Breakdown of a P/D request (${o.breakdownSize}-token prompt): ms since the client sent it, ` +
      'median over the measured P/D requests of that size, event by event',
  );
  // The plain server's own events (it stands in for D), from the requests beside the first pair.
  const plainColumn = results[0]?.plainBreakdown ?? null;
  console.log(`| event | plain | ${results.map((r) => r.label).join(' | ')} |`);
  console.log(`| --- | --- | ${results.map(() => '---').join(' | ')} |`);
  const cell = (b: Breakdown | null, key: BreakdownKey): string => {
    const v = b?.[key];
    return v === undefined ? '–' : v.toFixed(2);
  };
  for (const e of BREAKDOWN_EVENTS) {
    console.log(
      `| ${e.label} | ${cell(plainColumn, e.key)} | ${results.map((r) => cell(r.breakdown, e.key)).join(' | ')} |`,
    );
  }
  console.log(
    JSON.stringify({
      bench: 'pd-ttft',
      model: o.model,
      rounds: o.rounds,
      requests_per_round: o.requests,
      max_tokens: o['max-tokens'],
      sizes: o.sizes,
      transfer_thread: thread,
      params_ahead: paramsAhead,
      load_average_1m: loadAverage(),
      pairs: results.map((r) => ({
        pair: r.label,
        sizes: r.sizes.map((s) => ({
          prompt_tokens: s.size,
          plain_ttft_ms: json(s.plain, 2),
          pd_ttft_ms: json(s.pd, 2),
          added_ms: json(s.added, 2),
        })),
        breakdown_prompt_tokens: o.breakdownSize,
        breakdown_samples: r.breakdownSamples,
        breakdown_ms: rounded(r.breakdown),
        plain_breakdown_ms: rounded(r.plainBreakdown),
      })),
    }),
  );
}
