/**
 * Panic routing with real servers that stop and restart on the same port, while health
 * rounds are a minute apart and the quick re-check of backends marked down is off: the
 * only way back into rotation is a request. The decode server, once restarted, serves the
 * first request after its restart; so does the prefill server (one request at a time tries
 * a prefill server marked down; the others fall back to local prefill meanwhile).
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { type RunningProxy, resolveProxyOptions, startProxy } from '../../src/proxy/index.ts';
import { createServer, type KVServer } from '../../src/server/index.ts';
import { freePortRange } from '../helpers/free-port.ts';

setLogLevel('silent');

interface Node {
  engine: AsyncEngine;
  port: number;
  server: KVServer | null;
}

const nodes: Record<'prefill' | 'decode', Node> = {} as Record<'prefill' | 'decode', Node>;
let proxy: RunningProxy;

async function up(node: Node): Promise<void> {
  node.server = createServer({ engine: node.engine });
  await node.server.start('127.0.0.1', node.port);
}

async function down(node: Node): Promise<void> {
  await node.server?.close();
  node.server = null;
}

/** Prompt tokens the node's engine has computed (its /metrics): proof that it served. */
async function promptTokens(node: Node): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${node.port}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('vllm:prompt_tokens_total{'));
  return Number(line?.split(' ').at(-1));
}

function ask(i: number): Promise<Response> {
  return fetch(`${proxy.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny', prompt: `restart ${i}`, max_tokens: 3, temperature: 0 }),
  });
}

function healthyIn(role: 'prefill' | 'decode'): boolean {
  return proxy.pool.all(role).every((b) => b.healthy);
}

before(async () => {
  const [prefillPort, decodePort] = [await freePortRange(1), await freePortRange(1)];
  for (const [role, port] of [
    ['prefill', prefillPort],
    ['decode', decodePort],
  ] as const) {
    nodes[role] = {
      engine: await AsyncEngine.create({ model: 'tiny', max_model_len: 256 }),
      port,
      server: null,
    };
    await up(nodes[role]);
  }
  proxy = await startProxy(
    resolveProxyOptions({
      prefill: [`http://127.0.0.1:${prefillPort}`],
      decode: [`http://127.0.0.1:${decodePort}`],
      port: 0,
      healthIntervalMs: 60_000,
      unhealthyIntervalMs: 0,
    }),
  );
  await proxy.pool.checkAll();
});

after(async () => {
  await proxy?.close();
  for (const node of Object.values(nodes)) {
    await down(node);
    await node.engine.shutdown();
  }
});

test('the only decode server stopped: 503; restarted on its port: the next request is served by it', async () => {
  assert.equal((await ask(0)).status, 200);
  await down(nodes.decode);
  const refused = await ask(1);
  assert.equal(refused.status, 503);
  assert.equal(
    ((await refused.json()) as { error: { kvconnect_code: string } }).error.kvconnect_code,
    'PROXY_NO_BACKEND',
  );
  assert.equal(healthyIn('decode'), false, 'the refused connection marked it down');
  await up(nodes.decode);
  const before = await promptTokens(nodes.decode);
  const res = await ask(2);
  assert.equal(res.status, 200, await res.clone().text());
  assert.ok((await promptTokens(nodes.decode)) > before, 'the restarted decode server served it');
  assert.equal(healthyIn('decode'), true, 'its answer marked it up, with no health round');
});

test('the only prefill server stopped: local prefill; restarted on its port: the next request prefills on it', async () => {
  await down(nodes.prefill);
  const fallback = await ask(3);
  assert.equal(fallback.status, 200, 'served by the decode server alone');
  assert.equal(healthyIn('prefill'), false, 'the refused connection marked it down');
  // Still down: a request tries it (refused at once) and falls back, still 200.
  assert.equal((await ask(4)).status, 200);
  await up(nodes.prefill);
  const before = await promptTokens(nodes.prefill);
  const res = await ask(5);
  assert.equal(res.status, 200);
  assert.ok((await promptTokens(nodes.prefill)) > before, 'the restarted prefill server ran the prefill leg');
  assert.equal(healthyIn('prefill'), true, 'its answer marked it up, with no health round');
});
