/**
 * Failover: what a retried and a resumed request cost the client, against an undisturbed
 * request through the same proxy, P and D in the same run.
 *
 * A prefill and a decode `kvconnect serve` process (NIXL pull over TCP) behind three
 * proxies that differ only in their decode list:
 *   - undisturbed: the decode server alone;
 *   - retried: first a decode front that resets the connection of every completion it
 *     receives (a decode server that died before its first byte), then the decode server: the
 *     proxy sends the decode leg again with P's kv_transfer_params;
 *   - resumed: first a decode front that forwards to the decode server and cuts the stream
 *     after half the tokens (a decode server that died mid-way): the proxy continues it on
 *     the decode server from the prompt's and the sent tokens' ids.
 * `least_loaded` sends each request to the front first (ties go to the first listed). A
 * request is a greedy stream; its latency runs from the request to `[DONE]`, and its token
 * ids must equal the undisturbed request's (a mismatch is an error, not a sample). Sides
 * alternate in rotating order; per round each side's median, and the added latency as the
 * median over rounds of the per-round difference, with min–max.
 *   npm run bench -- failover [--rounds 6] [--requests-per-round 5] [--max-tokens 32]
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, request } from 'undici';
import { ProcessGroup, startServe } from '../src/demo/processes.ts';
import { setLogLevel } from '../src/logging/logger.ts';
import { type RunningProxy, resolveProxyOptions, startProxy } from '../src/proxy/index.ts';
import { benchArgs, positiveInteger } from './_args.ts';
import { nixlTcpTransferConfig } from './_nixl.ts';
import { fmt, json, loadAverage, median, summarize } from './_rounds.ts';

const ENGINE = ['--model', 'tiny', '--num-gpu-blocks', '512', '--max-model-len', '512', '--port', '0'];

/**
 * A decode front on 127.0.0.1:0: GET requests (health, models) go to the decode server;
 * completions are reset (`cutAfter` null) or forwarded and cut after `cutAfter` SSE events.
 */
async function front(decodeUrl: string, cutAfter: number | null, agent: Agent): Promise<Server> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        if (req.method === 'POST' && cutAfter === null) {
          req.socket.destroy();
          return;
        }
        const up = await request(`${decodeUrl}${req.url}`, {
          method: req.method as 'GET' | 'POST',
          dispatcher: agent,
          headers: { 'content-type': 'application/json' },
          ...(req.method === 'POST' ? { body: Buffer.concat(chunks) } : {}),
        });
        res.writeHead(up.statusCode, { 'content-type': String(up.headers['content-type'] ?? '') });
        let events = 0;
        for await (const chunk of up.body) {
          await new Promise((r) => res.write(chunk, r));
          events += String(chunk).split('\n\n').length - 1;
          if (req.method === 'POST' && cutAfter !== null && events >= cutAfter) {
            up.body.destroy();
            res.socket?.destroy();
            return;
          }
        }
        res.end();
      })().catch(() => res.socket?.destroy());
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return server;
}

const urlOf = (s: Server): string => `http://127.0.0.1:${(s.address() as AddressInfo).port}`;

export async function main(args: string[]): Promise<void> {
  setLogLevel('error');
  const o = benchArgs(
    'failover',
    {
      rounds: positiveInteger(6, 'rounds, the three sides in rotating order'),
      'requests-per-round': positiveInteger(5, 'sequential requests per side and round'),
      'max-tokens': positiveInteger(32, 'tokens per request (the resumed stream is cut at half)'),
    },
    args,
  );
  const rounds = o.rounds;
  const perRound = o['requests-per-round'];
  const maxTokens = o['max-tokens'];
  const group = new ProcessGroup();
  const agent = new Agent({ keepAliveTimeout: 30_000 });
  const servers: Server[] = [];
  const proxies: RunningProxy[] = [];
  try {
    const env = { KVCONNECT_LOG_LEVEL: 'error' };
    const [p, d] = await Promise.all([
      startServe(
        'prefill',
        [...ENGINE, '--kv-transfer-config', nixlTcpTransferConfig('kv_producer', 'bench-fo-p')],
        {
          timeoutMs: 60_000,
          group,
          env,
        },
      ),
      startServe(
        'decode',
        [...ENGINE, '--kv-transfer-config', nixlTcpTransferConfig('kv_consumer', 'bench-fo-d')],
        {
          timeoutMs: 60_000,
          group,
          env,
        },
      ),
    ]);
    const reset = await front(d.url, null, agent);
    // The first event of a completions stream carries the first token: cut after half of them.
    const cut = await front(d.url, Math.floor(maxTokens / 2), agent);
    servers.push(reset, cut);
    const proxyFor = async (decode: string[]): Promise<RunningProxy> => {
      const proxy = await startProxy(
        resolveProxyOptions({
          prefill: [p.url],
          decode,
          port: 0,
          policy: 'least_loaded',
          kvConnector: 'NixlConnector',
          healthIntervalMs: 60_000,
          unhealthyIntervalMs: 20,
        }),
      );
      proxies.push(proxy);
      return proxy;
    };
    const sides = {
      undisturbed: await proxyFor([d.url]),
      retried: await proxyFor([urlOf(reset), d.url]),
      resumed: await proxyFor([urlOf(cut), d.url]),
    };
    type SideName = keyof typeof sides;
    const names = Object.keys(sides) as SideName[];

    let prompt = 0;
    /** One greedy stream; resolves with its latency (ms) and its token ids. */
    const stream = async (proxy: RunningProxy, i: number): Promise<{ ms: number; ids: string }> => {
      // The front may have been marked down by the previous request: wait until it is back.
      const t0 = Date.now();
      while (proxy.pool.healthy('decode').length < proxy.pool.all('decode').length) {
        if (Date.now() - t0 > 10_000) throw new Error('a decode front stayed marked down');
        await new Promise((r) => setTimeout(r, 5));
      }
      const start = performance.now();
      const res = await request(`${proxy.url}/v1/completions`, {
        method: 'POST',
        dispatcher: agent,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'tiny',
          prompt: `Failover benchmark request ${i}: the stream goes on when its server does not.`,
          max_tokens: maxTokens,
          temperature: 0,
          ignore_eos: true,
          stream: true,
          return_token_ids: true,
        }),
      });
      const text = await res.body.text();
      const ms = performance.now() - start;
      if (res.statusCode !== 200 || !text.includes('data: [DONE]')) {
        throw new Error(`HTTP ${res.statusCode}: ${text.slice(0, 200)}`);
      }
      const ids: number[] = [];
      for (const line of text.split('\n')) {
        if (!line.startsWith('data: {')) continue;
        const e = JSON.parse(line.slice(6)) as { error?: unknown; choices?: Array<{ token_ids?: number[] }> };
        if (e.error) throw new Error(`error event: ${JSON.stringify(e.error)}`);
        ids.push(...(e.choices?.[0]?.token_ids ?? []));
      }
      if (ids.length !== maxTokens) throw new Error(`${ids.length} tokens instead of ${maxTokens}`);
      return { ms, ids: ids.join(',') };
    };
    type Sample = { i: number; ms: number; ids: string };
    const samples: Record<SideName, Sample[][]> = { undisturbed: [], retried: [], resumed: [] };
    const errors: Record<SideName, number> = { undisturbed: 0, retried: 0, resumed: 0 };
    const runSide = async (name: SideName, first: number, round: number): Promise<void> => {
      const out: Sample[] = [];
      for (let k = 0; k < perRound; k++) {
        try {
          out.push({ i: first + k, ...(await stream(sides[name], first + k)) });
        } catch (e) {
          errors[name]++;
          console.error(`${name}: ${(e as Error).message}`);
        }
      }
      samples[name][round] = out;
    };
    // Warm-up: every side once.
    for (const name of names) await stream(sides[name], -1).catch(() => undefined);
    for (let round = 0; round < rounds; round++) {
      const first = prompt;
      prompt += perRound;
      const order = [...names.slice(round % 3), ...names.slice(0, round % 3)];
      if (round % 2 === 1) order.reverse();
      for (const name of order) await runSide(name, first, round);
    }
    // Every side asked the same prompts in a round: the token ids must be the undisturbed ones.
    const want = new Map(samples.undisturbed.flat().map((x) => [x.i, x.ids]));
    const perSide = {} as Record<SideName, number[]>;
    for (const name of names) {
      perSide[name] = samples[name].map((round) => {
        const good = round.filter((x) => want.get(x.i) === x.ids);
        errors[name] += round.length - good.length;
        return median(good.map((x) => x.ms));
      });
    }
    const counts = await Promise.all(
      [sides.retried, sides.resumed].map(async (proxy) =>
        (await request(`${proxy.url}/metrics`)).body.text(),
      ),
    );
    const retryCount = (text: string, leg: string): number =>
      text
        .split('\n')
        .filter((l) => l.startsWith(`kvconnect:proxy_retries_total{leg="${leg}"`))
        .reduce((n, l) => n + Number(l.split(' ').at(-1)), 0);
    const decodeRetries = retryCount(counts[0]!, 'decode');
    const resumes = retryCount(counts[1]!, 'resume');
    // A side whose fault never fired measured undisturbed requests under another name.
    if (decodeRetries === 0)
      throw new Error('the retried side took no decode retry: its figures measure nothing');
    if (resumes === 0) throw new Error('the resumed side resumed no stream: its figures measure nothing');

    const of = (name: SideName) => summarize(perSide[name]);
    const added = (name: SideName) => summarize(perSide[name].map((v, r) => v - perSide.undisturbed[r]!));
    console.log(
      `${rounds} rounds × ${perRound} sequential greedy streams of ${maxTokens} tokens per side (tiny, NIXL pull, ` +
        `P and D in their own processes), sides in rotating order; load average ${loadAverage()}`,
    );
    console.log('| request | latency ms, median of rounds (min–max) | added vs undisturbed ms | errors |');
    console.log('| --- | --- | --- | --- |');
    console.log(`| undisturbed | ${fmt(of('undisturbed'), 1)} | | ${errors.undisturbed} |`);
    console.log(
      `| retried (decode reset before its first byte; same kv_transfer_params on the other decode) | ${fmt(of('retried'), 1)} | ${fmt(added('retried'), 1)} | ${errors.retried} |`,
    );
    console.log(
      `| resumed (stream cut after ${Math.floor(maxTokens / 2)} tokens; continued on the other decode) | ${fmt(of('resumed'), 1)} | ${fmt(added('resumed'), 1)} | ${errors.resumed} |`,
    );
    console.log(
      JSON.stringify({
        bench: 'failover',
        rounds,
        requests_per_round: perRound,
        max_tokens: maxTokens,
        load_average_1m: loadAverage(),
        undisturbed_ms: json(of('undisturbed'), 2),
        retried_ms: json(of('retried'), 2),
        resumed_ms: json(of('resumed'), 2),
        retried_added_ms: json(added('retried'), 2),
        resumed_added_ms: json(added('resumed'), 2),
        decode_retries: decodeRetries,
        resumes,
        errors,
      }),
    );
  } finally {
    for (const proxy of proxies) await proxy.close();
    for (const s of servers) s.close();
    await agent.close();
    await group.stopAll();
  }
}
