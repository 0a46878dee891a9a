/**
 * Servers really die (SIGKILL) in the middle of bursts behind the proxy, and every request
 * is still answered 200 with the token ids one plain engine produces.
 *
 * Two prefill and two decode `kvconnect serve` processes (NIXL pull over TCP; the decode
 * servers fail a KV load rather than recompute it, so the proxy's own retries are what
 * saves those requests). Four bursts of 32 greedy requests (completions and chat, half of
 * them streamed, long enough to be mid-way when the kill comes), one cluster:
 *   1. one decode server killed: streams are resumed on the other, the rest retried;
 *   2. it is restarted on the same port and the other decode server is killed: the
 *      restarted one takes the burst at once (health rounds are a minute apart);
 *   3. one prefill server killed: its legs go to the other prefill server;
 *   4. the only prefill server left killed: the requests fall back to local prefill.
 * After each burst the surviving prefill servers' KV pools are empty again (no lease left
 * behind, none freed twice), well before a lease could have expired.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { readMetrics } from '../../src/demo/metrics.ts';
import { ProcessGroup, type ServeProcess, startServe } from '../../src/demo/processes.ts';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { type RunningProxy, resolveProxyOptions, startProxy } from '../../src/proxy/index.ts';
import { createServer } from '../../src/server/index.ts';
import { freePortRange } from '../helpers/free-port.ts';
import { tinyServeArgs } from '../helpers/serve-process.ts';
import { waitUntil } from '../helpers/wait-until.ts';

setLogLevel('silent');

const BURST = 32;
const MAX_TOKENS = 40;
const ENV = { KVCONNECT_LOG_LEVEL: 'error' };

interface Case {
  route: '/v1/completions' | '/v1/chat/completions';
  stream: boolean;
  body: Record<string, unknown>;
}

function burstCases(round: number): Case[] {
  return Array.from({ length: BURST }, (_, i) => {
    const text = `Round ${round}, request ${i}: a server dies and the fleet serves on, item ${i * 13}.`;
    const chat = i % 4 >= 2;
    return {
      route: chat ? '/v1/chat/completions' : '/v1/completions',
      stream: i % 2 === 0,
      body: chat ? { messages: [{ role: 'user', content: text }] } : { prompt: text },
    };
  });
}

function transferConfig(role: 'kv_producer' | 'kv_consumer', engineId: string): Record<string, unknown> {
  return {
    kv_connector: 'NixlConnector',
    kv_role: role,
    engine_id: engineId,
    ...(role === 'kv_consumer' ? { kv_load_failure_policy: 'fail' } : {}),
    kv_connector_extra_config: { backends: ['TCP'], side_channel_port: 0, transfer_timeout: 5 },
  };
}

function engineArgs(port: number, transfer: Record<string, unknown>): string[] {
  return tinyServeArgs({ port, numGpuBlocks: 512, maxModelLen: 512, transfer });
}

const group = new ProcessGroup();
let prefills: ServeProcess[] = [];
let decodes: ServeProcess[] = [];
const decodePorts: number[] = [];
let proxy: RunningProxy;
let reference: { url: string; close(): Promise<void> };

function startDecode(i: number): Promise<ServeProcess> {
  return startServe(`decode${i}`, engineArgs(decodePorts[i]!, transferConfig('kv_consumer', `fo-d${i}`)), {
    timeoutMs: 30_000,
    group,
    env: ENV,
  });
}

function startPrefill(i: number): Promise<ServeProcess> {
  return startServe(`prefill${i}`, engineArgs(0, transferConfig('kv_producer', `fo-p${i}`)), {
    timeoutMs: 30_000,
    group,
    env: ENV,
  });
}

function kill(p: ServeProcess): Promise<number | null> {
  process.kill(-p.pid, 'SIGKILL');
  return p.exited;
}

before(async () => {
  decodePorts.push(await freePortRange(1), await freePortRange(1));
  const engine = await AsyncEngine.create({ model: 'tiny', num_gpu_blocks: 512, max_model_len: 512 });
  const server = createServer({ engine });
  const { url } = await server.start('127.0.0.1', 0);
  reference = {
    url,
    close: async () => {
      await server.close();
      await engine.shutdown();
    },
  };
  [prefills, decodes] = await Promise.all([
    Promise.all([startPrefill(0), startPrefill(1)]),
    Promise.all([startDecode(0), startDecode(1)]),
  ]);
  proxy = await startProxy(
    resolveProxyOptions({
      prefill: prefills.map((p) => p.url),
      decode: decodes.map((d) => d.url),
      port: 0,
      kvConnector: 'NixlConnector',
      // Only failures and the quick checks of backends marked down move backends in and out.
      healthIntervalMs: 60_000,
      healthTimeoutMs: 30_000,
    }),
  );
});

after(async () => {
  await proxy?.close();
  await group.stopAll();
  await reference?.close();
});

interface Answer {
  status: number;
  ids: number[];
  /** Streams: the ids of their chunks (one response must have one id). */
  chunkIds: Set<unknown>;
  usage: { prompt_tokens: number; completion_tokens: number } | null;
  error?: string;
}

async function ask(base: string, c: Case, onTokens: (n: number) => void = () => undefined): Promise<Answer> {
  const res = await fetch(`${base}${c.route}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'tiny',
      temperature: 0,
      ignore_eos: true,
      max_tokens: MAX_TOKENS,
      return_token_ids: true,
      stream: c.stream,
      ...(c.stream ? { stream_options: { include_usage: true } } : {}),
      ...c.body,
    }),
  });
  const answer: Answer = { status: res.status, ids: [], chunkIds: new Set(), usage: null };
  if (!c.stream || res.status !== 200) {
    const json = (await res.json()) as {
      choices?: Array<{ token_ids?: number[] }>;
      usage?: Answer['usage'];
    };
    answer.ids = json.choices?.[0]?.token_ids ?? [];
    answer.usage = json.usage ?? null;
    if (res.status !== 200) answer.error = JSON.stringify(json);
    return answer;
  }
  const decoder = new TextDecoder();
  let buffered = '';
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buffered += decoder.decode(chunk, { stream: true });
    let end = buffered.indexOf('\n\n');
    while (end >= 0) {
      const line = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      end = buffered.indexOf('\n\n');
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      const event = JSON.parse(line.slice(6)) as {
        id?: string;
        error?: { message: string };
        choices?: Array<{ token_ids?: number[] }>;
        usage?: Answer['usage'];
      };
      if (event.error) answer.error = event.error.message;
      if (event.usage) answer.usage = event.usage;
      answer.chunkIds.add(event.id);
      const ids = event.choices?.[0]?.token_ids ?? [];
      answer.ids.push(...ids);
      if (ids.length > 0) onTokens(answer.ids.length);
    }
  }
  return answer;
}

const expected = new Map<number, number[][]>();

async function expectedIds(round: number): Promise<number[][]> {
  const cached = expected.get(round);
  if (cached) return cached;
  // Asked all at once: the plain engine batches them, as the servers behind the proxy do.
  const ids = await Promise.all(
    burstCases(round).map(async (c) => (await ask(reference.url, { ...c, stream: false })).ids),
  );
  assert.ok(
    ids.every((x) => x.length === MAX_TOKENS),
    'the plain server returned every generated id',
  );
  expected.set(round, ids);
  return ids;
}

async function retries(leg: string): Promise<number> {
  const text = await (await fetch(`${proxy.url}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(`kvconnect:proxy_retries_total{leg="${leg}"`))
    .reduce((n, l) => n + Number(l.split(' ').at(-1)), 0);
}

/**
 * One burst with a kill once it is under way (`when` decides from the streamed token counts);
 * every answer is 200 and token-identical; streams are one response with correct usage.
 */
async function burst(
  round: number,
  when: (progress: number[]) => boolean,
  action: () => Promise<unknown>,
): Promise<void> {
  const want = await expectedIds(round);
  const progress: number[] = new Array(BURST).fill(0);
  const requests = burstCases(round).map((c, i) =>
    ask(proxy.url, c, (n) => {
      progress[i] = n;
    }).finally(() => {
      progress[i] = Number.POSITIVE_INFINITY;
    }),
  );
  await waitUntil('the moment to inject the fault', () => when(progress), {
    intervalMs: 2,
    timeoutMs: 60_000,
  });
  await action();
  const answers = await Promise.all(requests);
  const failed = answers.map((a, i) => ({ i, ...a })).filter((a) => a.status !== 200 || a.error);
  assert.deepEqual(failed, [], `round ${round}: every request answered 200`);
  for (const [i, a] of answers.entries()) {
    assert.deepEqual(a.ids, want[i], `round ${round} request ${i}: token ids of one plain engine`);
    assert.equal(a.usage?.completion_tokens, MAX_TOKENS, `round ${round} request ${i}: usage`);
    if (burstCases(round)[i]!.stream)
      assert.equal(a.chunkIds.size, 1, `round ${round} request ${i}: one stream`);
  }
  // Well inside the 30 s lease: a block left leased by a dead decode server would show here.
  await waitUntil("the prefill servers' KV pools to be empty", async () => {
    for (const p of prefills) if (!dead.has(p) && (await readMetrics(p.url)).kvUsage !== 0) return false;
    return true;
  });
}

/** Prefill legs in flight on a prefill server, as the proxy counts them. */
function prefilling(p: ServeProcess): () => boolean {
  return () => (proxy.pool.all('prefill').find((b) => b.url === p.url)?.inFlight ?? 0) >= 2;
}

test('token ids are asked of the decode servers but reach only clients that asked for them', async () => {
  for (const route of ['/v1/completions', '/v1/chat/completions'] as const) {
    const res = await fetch(`${proxy.url}${route}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'tiny',
        max_tokens: 8,
        stream: true,
        ...(route === '/v1/completions'
          ? { prompt: 'Hello' }
          : { messages: [{ role: 'user', content: 'Hi' }] }),
      }),
    });
    assert.equal(res.status, 200);
    const text = await res.text();
    assert.match(text, /data: \[DONE\]/);
    assert.doesNotMatch(text, /token_ids/, `${route}: no token ids in what the client sees`);
  }
});

const dead = new Set<ServeProcess>();
const midStream = (progress: number[]): boolean =>
  progress.filter((n) => n >= 4 && Number.isFinite(n)).length >= 4;
/** Requests the proxy has in flight on decode server `d`. */
function inFlight(d: ServeProcess): number {
  return proxy.pool.all('decode').find((b) => b.url === d.url)?.inFlight ?? 0;
}
/** Mid-burst, with streams in flight on decode server `d` (so its kill leaves some to resume). */
function decodingMidStream(d: ServeProcess): (progress: number[]) => boolean {
  return (progress) => midStream(progress) && inFlight(d) >= 2;
}

test('a decode server killed mid-burst: streams resumed, the rest retried; 32/32 identical', async () => {
  const resumesBefore = await retries('resume');
  await burst(1, decodingMidStream(decodes[0]!), async () => {
    dead.add(decodes[0]!);
    await kill(decodes[0]!);
  });
  assert.ok((await retries('resume')) > resumesBefore, 'some stream was resumed on the other decode server');
});

test('the killed decode server restarted on its port is used at once; the other killed: 32/32', async () => {
  decodes[0] = await startDecode(0);
  const restarted = decodes[0];
  dead.delete(restarted);
  // The proxy's check of backends marked down finds it back; from then on it takes requests.
  await waitUntil('the proxy to see the restarted decode server', () =>
    Boolean(proxy.pool.all('decode').find((b) => b.url === restarted.url)?.healthy),
  );
  let usedBeforeKill = 0;
  // Mid-burst: both decode servers have requests in flight (the restarted one's count is what
  // the assertion below reads).
  await burst(
    2,
    () => inFlight(restarted) > 0 && inFlight(decodes[1]!) > 0,
    async () => {
      usedBeforeKill = inFlight(restarted);
      dead.add(decodes[1]!);
      await kill(decodes[1]!);
    },
  );
  assert.ok(usedBeforeKill > 0, 'the restarted decode server had requests before the other one died');
  const served = (await (await fetch(`${decodes[0].url}/metrics`)).text())
    .split('\n')
    .filter((l) => l.startsWith('vllm:request_success_total{'))
    .reduce((n, l) => n + Number(l.split(' ').at(-1)), 0);
  // At least its own half of the burst, plus what was retried or resumed from the dead one (how
  // many of the dead one's requests had already finished before the kill varies from run to run).
  assert.ok(served >= BURST / 2, `the restarted decode server served ${served} requests`);
  decodes[1] = await startDecode(1);
  dead.delete(decodes[1]);
});

test('a prefill server killed mid-burst: its legs go to the other one; 32/32 identical', async () => {
  const before = (await retries('prefill')) + (await retries('decode'));
  await burst(3, prefilling(prefills[0]!), async () => {
    dead.add(prefills[0]!);
    await kill(prefills[0]!);
  });
  const retried = (await retries('prefill')) + (await retries('decode')) - before;
  assert.ok(retried > 0, 'prefill legs (or decode legs whose KV died with P) were retried');
});

test('the only prefill server left killed mid-burst: local prefill on the decode servers; 32/32', async () => {
  const fallbacksBefore = await fetch(`${proxy.url}/metrics`).then((r) => r.text());
  await burst(4, prefilling(prefills[1]!), async () => {
    dead.add(prefills[1]!);
    await kill(prefills[1]!);
  });
  const count = (text: string): number =>
    text
      .split('\n')
      .filter((l) => l.startsWith('kvconnect:proxy_prefill_fallbacks_total{'))
      .reduce((n, l) => n + Number(l.split(' ').at(-1)), 0);
  const fallbacksAfter = await fetch(`${proxy.url}/metrics`).then((r) => r.text());
  assert.ok(count(fallbacksAfter) > count(fallbacksBefore), 'requests fell back to local prefill');
});
