/**
 * Proxy overhead: latency of a NIXL-pull request through `kvconnect proxy` against the
 * client making the same two upstream calls itself (P with max_tokens=1, then D), with the
 * same in-process upstream servers, in the same run. Every response's status is checked
 * (a non-200 or an unparsable body is an error, not a sample). Rounds alternate the two
 * sides; the figures are the per-round p50 and p99 and what the proxy adds to each, as the
 * median of the rounds with min–max. The target: ≤ 1 ms added at p50.
 *   npm run bench -- proxy-overhead [--rounds 6] [--requests-per-round 500]
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, request } from 'undici';
import { setLogLevel } from '../src/logging/logger.ts';
import { resolveProxyOptions, startProxy } from '../src/proxy/index.ts';
import { nearestRankPercentile } from '../src/util/percentile.ts';
import { benchArgs, positiveInteger } from './_args.ts';
import { alternate, fmt, json, loadAverage, summarize } from './_rounds.ts';

const P_BODY = JSON.stringify({
  choices: [{ index: 0, text: 'x' }],
  kv_transfer_params: {
    do_remote_prefill: true,
    remote_block_ids: [[1]],
    remote_engine_id: 'p',
    remote_host: '127.0.0.1',
    remote_port: 1,
    tp_size: 1,
  },
});
const D_BODY = JSON.stringify({ choices: [{ index: 0, text: 'hello there' }] });

async function upstream(body: string): Promise<{ server: Server; url: string }> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.url === '/health') return void res.end('{}');
      res.writeHead(req.url === '/kvconnect/info' ? 404 : 200, { 'content-type': 'application/json' });
      res.end(body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

interface Side {
  p50: number;
  p99: number;
  errors: number;
}

export async function main(args: string[]): Promise<void> {
  setLogLevel('warn');
  const { rounds, 'requests-per-round': perRound } = benchArgs(
    'proxy-overhead',
    {
      rounds: positiveInteger(6, 'rounds, the two sides alternating'),
      'requests-per-round': positiveInteger(500, 'requests per side and round'),
    },
    args,
  );
  const p = await upstream(P_BODY);
  const d = await upstream(D_BODY);
  const proxy = await startProxy(
    resolveProxyOptions({ prefill: [p.url], decode: [d.url], port: 0, kvConnector: 'NixlConnector' }),
  );
  const agent = new Agent({ keepAliveTimeout: 30_000 });
  const body = { model: 'tiny', prompt: 'hello world', max_tokens: 4 };
  /** The parsed JSON body of a 200 answer; throws on any other status or a body that is not JSON. */
  const post = async (url: string, b: unknown): Promise<Record<string, unknown>> => {
    const res = await request(url, {
      method: 'POST',
      dispatcher: agent,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(b),
    });
    const text = await res.body.text();
    if (res.statusCode !== 200) throw new Error(`${url}: HTTP ${res.statusCode}`);
    return JSON.parse(text) as Record<string, unknown>;
  };
  const direct = async (): Promise<void> => {
    const pOut = await post(`${p.url}/v1/completions`, {
      ...body,
      max_tokens: 1,
      stream: false,
      kv_transfer_params: { do_remote_decode: true },
    });
    if (!pOut['kv_transfer_params']) throw new Error('P answered without kv_transfer_params');
    await post(`${d.url}/v1/completions`, { ...body, kv_transfer_params: pOut['kv_transfer_params'] });
  };
  const viaProxy = async (): Promise<void> => {
    const out = await post(`${proxy.url}/v1/completions`, body);
    if (!Array.isArray(out['choices'])) throw new Error('the proxy answered without choices');
  };
  const time = async (fn: () => Promise<void>, count: number): Promise<Side> => {
    const ms: number[] = [];
    let errors = 0;
    for (let k = 0; k < count; k++) {
      const t = performance.now();
      try {
        await fn();
        ms.push(performance.now() - t);
      } catch {
        errors++;
      }
    }
    ms.sort((a, b) => a - b);
    return { p50: nearestRankPercentile(ms, 50), p99: nearestRankPercentile(ms, 99), errors };
  };
  await time(direct, 300);
  await time(viaProxy, 300);
  const { a: directRounds, b: proxyRounds } = await alternate(
    rounds,
    () => time(direct, perRound),
    () => time(viaProxy, perRound),
  );
  await agent.close();
  await proxy.close();
  p.server.close();
  d.server.close();

  const added = (q: 'p50' | 'p99') => summarize(proxyRounds.map((r, i) => r[q] - directRounds[i]![q]));
  const of = (side: Side[], q: 'p50' | 'p99') => summarize(side.map((r) => r[q]));
  const errors = (side: Side[]) => side.reduce((n, r) => n + r.errors, 0);
  console.log(
    `${rounds} rounds × ${perRound} sequential requests per side (NIXL pull flow, in-process upstreams), ` +
      `sides alternating; load average ${loadAverage()}`,
  );
  console.log('| path | p50 ms | p99 ms | errors |');
  console.log('| --- | --- | --- | --- |');
  console.log(
    `| client → P then D directly (baseline) | ${fmt(of(directRounds, 'p50'), 3)} | ${fmt(of(directRounds, 'p99'), 3)} | ${errors(directRounds)} |`,
  );
  console.log(
    `| client → proxy → P then D | ${fmt(of(proxyRounds, 'p50'), 3)} | ${fmt(of(proxyRounds, 'p99'), 3)} | ${errors(proxyRounds)} |`,
  );
  console.log(`| added by the proxy (per round) | ${fmt(added('p50'), 3)} | ${fmt(added('p99'), 3)} | |`);
  console.log(
    JSON.stringify({
      bench: 'proxy-overhead',
      rounds,
      requests_per_round: perRound,
      load_average_1m: loadAverage(),
      direct_p50_ms: json(of(directRounds, 'p50'), 4),
      direct_p99_ms: json(of(directRounds, 'p99'), 4),
      proxy_p50_ms: json(of(proxyRounds, 'p50'), 4),
      proxy_p99_ms: json(of(proxyRounds, 'p99'), 4),
      proxy_added_p50_ms: json(added('p50'), 4),
      proxy_added_p99_ms: json(added('p99'), 4),
      direct_errors: errors(directRounds),
      proxy_errors: errors(proxyRounds),
    }),
  );
}
