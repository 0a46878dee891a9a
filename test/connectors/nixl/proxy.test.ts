/**
 * NIXL behind the real HTTP stack: P and D engines served by src/server (in-process, port 0)
 * and src/proxy in front of them, compared with a plain served engine. Also checks what GET
 * /kvconnect/info advertises and the rejection path of
 * docs/scheduler.md#delayed-free-and-aborts (a rejected D request frees P).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AsyncEngine } from '../../../src/engine/async-engine.ts';
import { captureLogs } from '../../../src/logging/logger.ts';
import { type RunningProxy, resolveProxyOptions, startProxy } from '../../../src/proxy/index.ts';
import { createServer, type KVServer } from '../../../src/server/index.ts';

type Connector = 'NixlConnector' | 'NixlPushConnector';

const PROMPTS = [
  'The quick brown fox jumps over the lazy dog and keeps running far away from the hunters.',
  'Disaggregated prefill moves the KV cache of a long prompt from one engine to another directly.',
];
const MAX_TOKENS = 6;

interface Served {
  engine: AsyncEngine;
  server: KVServer;
  url: string;
}

async function serve(kvTransferConfig: Record<string, unknown> | null): Promise<Served> {
  const engine = await AsyncEngine.create({
    model: 'tiny',
    num_gpu_blocks: 64,
    max_model_len: 256,
    ...(kvTransferConfig ? { kv_transfer_config: kvTransferConfig } : {}),
  });
  // Dev mode: GET /kvconnect/timeline tells when each server got and answered a request.
  const server = createServer({ engine, devMode: true });
  const { url } = await server.start('127.0.0.1', 0);
  return { engine, server, url };
}

function nixlConfig(connector: Connector, role: 'kv_producer' | 'kv_consumer', extra = {}) {
  return {
    kv_connector: connector,
    kv_role: role,
    engine_id: `${role}-${connector}`,
    kv_connector_extra_config: { backends: ['TCP'], side_channel_port: 0, ...extra },
  };
}

async function complete(
  url: string,
  body: Record<string, unknown>,
  headers: Record<string, string> = {},
): Promise<Record<string, unknown>> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({
      model: 'tiny',
      max_tokens: MAX_TOKENS,
      temperature: 0,
      ignore_eos: true,
      ...body,
    }),
  });
  const json = (await res.json()) as Record<string, unknown>;
  assert.equal(res.status, 200, JSON.stringify(json));
  return json;
}

function textOf(json: Record<string, unknown>): string {
  return (json['choices'] as Array<{ text: string }>)[0]!.text;
}

async function waitForEmpty(engine: AsyncEngine, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    await engine.waitIdle();
    if (engine.stats().kvCacheUsage === 0 && !engine.engine.hasWork()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.equal(engine.stats().kvCacheUsage, 0, 'the block pool returns to empty');
}

async function stop(...served: Served[]): Promise<void> {
  for (const s of served) {
    await s.server.close();
    await s.engine.shutdown();
  }
}

let plain: Served;
let expected: string[] = [];
before(async () => {
  plain = await serve(null);
  expected = [];
  for (const prompt of PROMPTS) expected.push(textOf(await complete(plain.url, { prompt })));
});
after(() => stop(plain));

describe('NIXL through src/server and src/proxy', () => {
  for (const connector of ['NixlConnector', 'NixlPushConnector'] as const) {
    it(`${connector}: the proxy's outputs equal a plain engine's; D loads the prompt; pools drain`, async () => {
      const p = await serve(nixlConfig(connector, 'kv_producer'));
      const d = await serve(nixlConfig(connector, 'kv_consumer'));
      let proxy: RunningProxy | null = null;
      try {
        const info = (await (await fetch(`${p.url}/kvconnect/info`)).json()) as Record<string, unknown>;
        assert.equal(info['connector'], connector);
        assert.equal(info['transfer_mode'], connector === 'NixlPushConnector' ? 'push' : 'pull');
        proxy = await startProxy(resolveProxyOptions({ prefill: [p.url], decode: [d.url], port: 0 }));
        assert.equal(proxy.pool.healthy('prefill')[0]?.info?.connector, connector, 'the proxy read the info');
        const before = d.engine.stats().externalPrefixCacheHitsTotal;
        const outputs = await Promise.all(PROMPTS.map((prompt) => complete(proxy!.url, { prompt })));
        assert.deepEqual(outputs.map(textOf), expected);
        assert.ok(
          d.engine.stats().externalPrefixCacheHitsTotal - before > 0,
          'D loaded the prompts through the connector',
        );
        await waitForEmpty(p.engine);
        await waitForEmpty(d.engine);
      } finally {
        await proxy?.close();
        await stop(d, p);
      }
    });
  }

  it("NixlConnector with params ahead: P announces the params its answer carries, D is sent once on them; outputs equal a plain engine's", async () => {
    const p = await serve(nixlConfig('NixlConnector', 'kv_producer'));
    const d = await serve(nixlConfig('NixlConnector', 'kv_consumer'));
    let proxy: RunningProxy | null = null;
    try {
      proxy = await startProxy(resolveProxyOptions({ prefill: [p.url], decode: [d.url], port: 0 }));
      const { records } = await captureLogs(async () => {
        for (const [i, prompt] of PROMPTS.entries()) {
          const id = `ahead-${i}`;
          const out = await complete(proxy!.url, { prompt }, { 'x-request-id': id });
          assert.equal(textOf(out), expected[i]);
          const events = (
            (await (await fetch(`${p.url}/kvconnect/timeline?request_id=${id}`)).json()) as {
              events: Record<string, number | null>;
            }
          ).events;
          assert.equal(typeof events['params_ahead'], 'number', 'P sent its params ahead');
        }
      });
      // A mismatch between the params ahead and the answer's would send D again, with a warning.
      assert.deepEqual(
        records.filter((r) => r.message.includes('announced ahead')).map((r) => r.message),
        [],
      );
      await waitForEmpty(p.engine);
      await waitForEmpty(d.engine);
    } finally {
      await proxy?.close();
      await stop(d, p);
    }
  });

  it('/kvconnect/info advertises the side channel a D handshakes with; a rejected D request frees P at once', async () => {
    const p = await serve(nixlConfig('NixlConnector', 'kv_producer', { kv_lease_duration: 60 }));
    const d = await serve(nixlConfig('NixlConnector', 'kv_consumer'));
    try {
      const info = (await (await fetch(`${p.url}/kvconnect/info`)).json()) as Record<string, unknown>;
      const address = (p.engine.engine.connector as unknown as { sideChannelAddress: unknown })
        .sideChannelAddress as { host: string; port: number };
      assert.ok(address.port > 0, 'the side channel is bound');
      assert.equal(info['side_channel_host'], address.host);
      assert.equal(info['side_channel_port'], address.port);
      assert.equal(info['engine_id'], 'kv_producer-NixlConnector');
      assert.equal(info['kv_role'], 'kv_producer');
      assert.deepEqual([info['tp_size'], info['pp_size'], info['dp_size']], [1, 1, 1]);

      // P's answer names the same coordinates, and D reads from them.
      const pOut = await complete(p.url, {
        prompt: PROMPTS[0],
        max_tokens: 1,
        kv_transfer_params: { do_remote_decode: true },
      });
      const params = pOut['kv_transfer_params'] as Record<string, unknown>;
      assert.equal(params['remote_host'], info['side_channel_host']);
      assert.equal(params['remote_port'], info['side_channel_port']);
      assert.equal(params['remote_engine_id'], info['engine_id']);
      const dOut = await complete(d.url, { prompt: PROMPTS[0], kv_transfer_params: params });
      assert.equal(textOf(dOut), expected[0]);
      await waitForEmpty(p.engine);

      // A D request rejected by validation still releases P's blocks (lease is 60 s).
      const held = await complete(p.url, {
        prompt: PROMPTS[1],
        max_tokens: 1,
        kv_transfer_params: { do_remote_decode: true },
      });
      assert.ok(p.engine.stats().kvCacheUsage > 0, 'P holds the blocks under the lease');
      const res = await fetch(`${d.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'tiny',
          prompt: PROMPTS[1],
          max_tokens: 10_000,
          kv_transfer_params: held['kv_transfer_params'],
        }),
      });
      assert.equal(res.status, 400);
      await res.arrayBuffer();
      // The lease is 60 s: emptying well before it proves the notification freed the blocks.
      const t0 = Date.now();
      await waitForEmpty(p.engine, 20_000);
      assert.ok(Date.now() - t0 < 20_000, 'released by the notification, not by the lease');
      await waitForEmpty(d.engine);
    } finally {
      await stop(d, p);
    }
  });
});
