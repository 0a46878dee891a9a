/**
 * Proxy overhead: p50 latency of a NIXL-pull request through `kvconnect proxy` minus the
 * p50 of the client making the same two upstream calls itself (P with max_tokens=1, then
 * D), against the same in-process upstream servers, in the same run. Target: ≤ 1 ms.
 *   npm run bench -- proxy-overhead [--requests N]
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, request } from 'undici';
import { setLogLevel } from '../src/logging/logger.ts';
import { resolveProxyOptions, startProxy } from '../src/proxy/index.ts';

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

function p50(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)]!;
}

export async function main(args: string[]): Promise<void> {
  setLogLevel('warn');
  const i = args.indexOf('--requests');
  const n = i >= 0 ? Number(args[i + 1]) : 3000;
  const p = await upstream(P_BODY);
  const d = await upstream(D_BODY);
  const proxy = await startProxy(
    resolveProxyOptions({ prefill: [p.url], decode: [d.url], port: 0, kvConnector: 'NixlConnector' }),
  );
  const agent = new Agent({ keepAliveTimeout: 30_000 });
  const body = { model: 'tiny', prompt: 'hello world', max_tokens: 4 };
  const post = async (url: string, b: unknown) => {
    const res = await request(url, {
      method: 'POST',
      dispatcher: agent,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(b),
    });
    return res.body.text();
  };
  const direct = async () => {
    await post(`${p.url}/v1/completions`, {
      ...body,
      max_tokens: 1,
      stream: false,
      kv_transfer_params: { do_remote_decode: true },
    });
    await post(`${d.url}/v1/completions`, body);
  };
  const viaProxy = async () => {
    await post(`${proxy.url}/v1/completions`, body);
  };
  const time = async (fn: () => Promise<void>, count: number) => {
    const out: number[] = [];
    for (let k = 0; k < count; k++) {
      const t = performance.now();
      await fn();
      out.push(performance.now() - t);
    }
    return out;
  };
  await time(direct, 300);
  await time(viaProxy, 300);
  // Interleave rounds so drift (GC, CPU frequency) hits both sides alike.
  const directMs: number[] = [];
  const proxyMs: number[] = [];
  for (let round = 0; round < 10; round++) {
    directMs.push(...(await time(direct, n / 10)));
    proxyMs.push(...(await time(viaProxy, n / 10)));
  }
  await agent.close();
  await proxy.close();
  p.server.close();
  d.server.close();
  const directP50 = p50(directMs);
  const proxyP50 = p50(proxyMs);
  const added = proxyP50 - directP50;
  console.log(`requests per side: ${directMs.length} (sequential, NIXL pull flow, in-process upstreams)`);
  console.log('| path | p50 (ms) |');
  console.log('| --- | --- |');
  console.log(`| client → P then D directly (baseline) | ${directP50.toFixed(3)} |`);
  console.log(`| client → proxy → P then D | ${proxyP50.toFixed(3)} |`);
  console.log(`| added by the proxy | ${added.toFixed(3)} (target ≤ 1 ms) |`);
  console.log(
    JSON.stringify({
      requests: directMs.length,
      direct_p50_ms: Number(directP50.toFixed(4)),
      proxy_p50_ms: Number(proxyP50.toFixed(4)),
      proxy_added_p50_ms: Number(added.toFixed(4)),
      target_ms: 1,
      within_target: added <= 1,
    }),
  );
}
