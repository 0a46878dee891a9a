/**
 * NixlConnector with bidirectional_kv_xfer across real processes: P runs as a `kvconnect
 * serve` child; two D servers and `kvconnect proxy`'s server run here. A two-turn conversation
 * (conversation_id) has its second turn's prefix READ back from D by P, with the token ids
 * of one plain engine; on a D with a 1 s decoder_kv_blocks_ttl the kept blocks expire (D frees
 * them, num_kv_expired_reqs), P declines the late read and recomputes, and nothing is left held.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { sumMetric } from '../../../src/demo/metrics.ts';
import { AsyncEngine } from '../../../src/engine/async-engine.ts';
import { LLM } from '../../../src/engine/llm.ts';
import { type RunningProxy, resolveProxyOptions, startProxy } from '../../../src/proxy/index.ts';
import { createServer } from '../../../src/server/index.ts';
import { serveProcess, tinyServeArgs } from '../../helpers/serve-process.ts';
import { waitUntil } from '../../helpers/wait-until.ts';

const MAX_TOKENS = 20;
/** Scrapes of /metrics: every 50 ms is plenty. */
const POLL = { intervalMs: 50 };
const GREEDY = { maxTokens: MAX_TOKENS, temperature: 0, ignoreEos: true };

interface Child {
  url: string;
  kill(): Promise<void>;
}

function extra(more: Record<string, unknown>): Record<string, unknown> {
  return {
    backends: ['TCP'],
    side_channel_port: 0,
    bidirectional_kv_xfer: true,
    kv_recompute_threshold: 0,
    ...more,
  };
}

const KV_CONFIG = (role: string, engineId: string, extraConfig: Record<string, unknown>) => ({
  kv_connector: 'NixlConnector',
  kv_role: role,
  engine_id: engineId,
  kv_load_failure_policy: 'recompute',
  kv_connector_extra_config: extraConfig,
});

/** A server in this process (P, in its own process, READs from it). */
async function serveHere(engineId: string, extraConfig: Record<string, unknown>): Promise<Child> {
  const engine = await AsyncEngine.create({
    model: 'tiny',
    num_gpu_blocks: 64,
    max_model_len: 256,
    kv_transfer_config: KV_CONFIG('kv_consumer', engineId, extraConfig),
  });
  const server = createServer({ engine });
  const { url } = await server.start('127.0.0.1', 0);
  return {
    url,
    kill: async () => {
      await server.close();
      await engine.shutdown();
    },
  };
}

/** P: `kvconnect serve` in its own process. */
async function serve(role: string, engineId: string, extraConfig: Record<string, unknown>, flags: string[]) {
  const { url, proc } = await serveProcess(
    tinyServeArgs({
      numGpuBlocks: 64,
      maxModelLen: 256,
      flags,
      transfer: KV_CONFIG(role, engineId, extraConfig),
    }),
  );
  return {
    url,
    kill: async () => {
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await exited;
    },
  };
}

/** A metric family summed over its series (those with `label`, e.g. `source="x"`). */
async function metric(url: string, name: string, label = ''): Promise<number> {
  return sumMetric(await (await fetch(`${url}/metrics`)).text(), label ? `${name}{${label}}` : name);
}

async function turn(proxy: RunningProxy, conversation: string, prompt: number[]): Promise<number[]> {
  const res = await fetch(`${proxy.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'tiny',
      prompt,
      max_tokens: MAX_TOKENS,
      temperature: 0,
      ignore_eos: true,
      return_token_ids: true,
      conversation_id: conversation,
    }),
  });
  const json = (await res.json()) as { choices: { token_ids: number[] }[] };
  assert.equal(res.status, 200, JSON.stringify(json));
  return json.choices[0]!.token_ids;
}

const bytes = (s: string): number[] => [...Buffer.from(s)];
const FIRST = bytes('The quick brown fox jumps over the lazy dog and keeps running far away.');
const NEXT = bytes(' What happened next?');

let p: Child;
let d: Child;
let dShort: Child;
let plain: LLM;
before(async () => {
  [p, d, dShort, plain] = await Promise.all([
    // No prefix cache on P: every token of the earlier turns comes from D or is computed.
    serve('kv_producer', 'bidir-p', extra({}), ['--no-enable-prefix-caching']),
    serveHere('bidir-d', extra({ decoder_kv_blocks_ttl: 60 })),
    serveHere('bidir-d-short', extra({ decoder_kv_blocks_ttl: 1 })),
    LLM.create({ model: 'tiny', num_gpu_blocks: 64, max_model_len: 256 }),
  ]);
});
after(async () => {
  await Promise.all([p?.kill(), d?.kill(), dShort?.kill(), plain?.shutdown()]);
});

async function expected(prompt: number[]): Promise<number[]> {
  const [out] = await plain.generate({ promptTokenIds: prompt }, GREEDY);
  return out!.tokenIds;
}

describe('NixlConnector bidirectional_kv_xfer through kvconnect proxy', () => {
  it("a second turn's prefix is READ back from D; tokens equal one engine; D frees the first turn's blocks", async () => {
    const proxy = await startProxy(resolveProxyOptions({ prefill: [p.url], decode: [d.url], port: 0 }));
    try {
      const out1 = await turn(proxy, 'conv-a', FIRST);
      assert.deepEqual(out1, await expected(FIRST));
      const heldAfterTurn1 = await metric(d.url, 'vllm:kv_cache_usage_perc');
      assert.ok(heldAfterTurn1 > 0, 'D keeps the finished turn for the next one');

      const external0 = await metric(
        p.url,
        'vllm:prompt_tokens_by_source_total',
        'source="external_kv_transfer"',
      );
      const second = [...FIRST, ...out1, ...NEXT];
      const out2 = await turn(proxy, 'conv-a', second);
      assert.deepEqual(out2, await expected(second));
      // D computed FIRST and all but the last generated token: exactly what P READ back.
      const external =
        (await metric(p.url, 'vllm:prompt_tokens_by_source_total', 'source="external_kv_transfer"')) -
        external0;
      assert.equal(external, FIRST.length + MAX_TOKENS - 1, 'P loaded the first turn from D');
      // P's read notification freed turn 1 on D at once (its TTL is 60 s); D keeps turn 2 only.
      // Usage counts the 63 usable blocks of 64 (block 0 is the null block), 16 tokens each.
      const blocks = (n: number) => Math.ceil(n / 16) / 63;
      await waitUntil(
        'D to free the first turn',
        async () => {
          const usage = await metric(d.url, 'vllm:kv_cache_usage_perc');
          return Math.abs(usage - blocks(second.length + MAX_TOKENS - 1)) < 1e-9;
        },
        POLL,
      );
      assert.equal(
        await metric(p.url, 'vllm:kv_cache_usage_perc'),
        0,
        'P holds nothing once D read its blocks',
      );
    } finally {
      await proxy.close();
    }
  });

  it('D frees kept blocks at decoder_kv_blocks_ttl; P declines the late read and recomputes', async () => {
    const proxy = await startProxy(resolveProxyOptions({ prefill: [p.url], decode: [dShort.url], port: 0 }));
    try {
      const out1 = await turn(proxy, 'conv-b', FIRST);
      const expiredOnD = async () => metric(dShort.url, 'vllm:nixl_num_kv_expired_reqs_total');
      await waitUntil('the kept blocks to expire on D', async () => (await expiredOnD()) >= 1, POLL);
      assert.equal(await metric(dShort.url, 'vllm:kv_cache_usage_perc'), 0, 'expiry freed every block');

      const declined0 = await metric(p.url, 'vllm:nixl_num_kv_expired_reqs_total');
      const second = [...FIRST, ...out1, ...NEXT];
      const out2 = await turn(proxy, 'conv-b', second);
      assert.deepEqual(out2, await expected(second), 'recomputed on P after the declined read');
      assert.equal(
        (await metric(p.url, 'vllm:nixl_num_kv_expired_reqs_total')) - declined0,
        1,
        'P counts the declined read as expired',
      );
      await waitUntil(
        'D to free the second turn at its TTL',
        async () => {
          return (await metric(dShort.url, 'vllm:kv_cache_usage_perc')) === 0 && (await expiredOnD()) >= 2;
        },
        POLL,
      );
      assert.equal(await metric(p.url, 'vllm:kv_cache_usage_perc'), 0);
    } finally {
      await proxy.close();
    }
  });
});
