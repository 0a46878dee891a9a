/**
 * GET /metrics as an operator with vLLM dashboards scrapes it: a running server with each
 * connector, after real traffic (a NIXL transfer P → D, offloaded KV stored and loaded
 * back), served text that `promtool check metrics` parses with no finding a vLLM scrape
 * lacks, every series once, counters ending in `_total`, vLLM's families and labels.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it, type TestContext } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { moriioOptions, moriioPorts } from '../connectors/moriio/helpers.ts';
import {
  assertPromtoolAccepts,
  assertVllmShape,
  type Exposition,
  parseExposition,
  sampleValue,
} from './helpers/prom-text.ts';
import { type Served, serve, stop } from './helpers/served.ts';

setLogLevel('error');

/** The families every vLLM engine serves, whatever its connector. */
const ENGINE_FAMILIES: ReadonlyArray<[string, string]> = [
  ['vllm:num_requests_running', 'gauge'],
  ['vllm:num_requests_waiting', 'gauge'],
  ['vllm:num_requests_waiting_by_reason', 'gauge'],
  ['vllm:kv_cache_usage_perc', 'gauge'],
  ['vllm:engine_sleep_state', 'gauge'],
  ['vllm:cache_config_info', 'gauge'],
  ['vllm:prefix_cache_queries_total', 'counter'],
  ['vllm:prefix_cache_hits_total', 'counter'],
  ['vllm:external_prefix_cache_queries_total', 'counter'],
  ['vllm:external_prefix_cache_hits_total', 'counter'],
  ['vllm:num_preemptions_total', 'counter'],
  ['vllm:prompt_tokens_total', 'counter'],
  ['vllm:prompt_tokens_by_source_total', 'counter'],
  ['vllm:prompt_tokens_cached_total', 'counter'],
  ['vllm:prompt_tokens_recomputed_total', 'counter'],
  ['vllm:generation_tokens_total', 'counter'],
  ['vllm:request_success_total', 'counter'],
  ['vllm:request_prompt_tokens', 'histogram'],
  ['vllm:request_generation_tokens', 'histogram'],
  ['vllm:iteration_tokens_total', 'histogram'],
  ['vllm:request_params_max_tokens', 'histogram'],
  ['vllm:time_to_first_token_seconds', 'histogram'],
  ['vllm:inter_token_latency_seconds', 'histogram'],
  ['vllm:request_time_per_output_token_seconds', 'histogram'],
  ['vllm:e2e_request_latency_seconds', 'histogram'],
  ['vllm:request_queue_time_seconds', 'histogram'],
  ['vllm:request_inference_time_seconds', 'histogram'],
  ['vllm:request_prefill_time_seconds', 'histogram'],
  ['vllm:request_decode_time_seconds', 'histogram'],
  ['vllm:request_prefill_kv_computed_tokens', 'histogram'],
];

const NIXL_FAMILIES: ReadonlyArray<[string, string]> = [
  ['vllm:nixl_xfer_time_seconds', 'histogram'],
  ['vllm:nixl_xfer_wire_time_seconds', 'histogram'],
  ['vllm:nixl_post_time_seconds', 'histogram'],
  ['vllm:nixl_bytes_transferred', 'histogram'],
  ['vllm:nixl_num_descriptors', 'histogram'],
  ['vllm:nixl_num_failed_transfers_total', 'counter'],
  ['vllm:nixl_num_failed_notifications_total', 'counter'],
  ['vllm:nixl_num_kv_expired_reqs_total', 'counter'],
  ['vllm:nixl_num_failed_handshakes_total', 'counter'],
  ['vllm:nixl_num_notifications_after_expiry_total', 'counter'],
];

const OFFLOAD_FAMILIES: ReadonlyArray<[string, string]> = [
  ['vllm:kv_offload_load_bytes_total', 'counter'],
  ['vllm:kv_offload_load_time_total', 'counter'],
  ['vllm:kv_offload_load_size', 'histogram'],
  ['vllm:kv_offload_store_bytes_total', 'counter'],
  ['vllm:kv_offload_store_time_total', 'counter'],
  ['vllm:kv_offload_store_size', 'histogram'],
  ['vllm:kv_offload_total_bytes_total', 'counter'],
  ['vllm:kv_offload_total_time_total', 'counter'],
  ['vllm:kv_offload_size', 'histogram'],
  ['vllm:kv_offload_lookup_sync_delay_seconds', 'histogram'],
  ['vllm:kv_offload_lookup_async_delay_seconds', 'histogram'],
  ['vllm:kv_offload_allocation_failure_total', 'counter'],
  ['vllm:kv_offload_cpu_cache_usage_perc', 'gauge'],
];

/** vllm:prompt_tokens_cached_by_source_total by source; the sources sum to vllm:prompt_tokens_cached_total. */
function cachedBySource(exp: Exposition): Record<string, number> {
  const out: Record<string, number> = {};
  for (const source of ['device', 'host', 'p2p', 'disk', 'external_unspecified'])
    out[source] = sampleValue(exp, 'vllm:prompt_tokens_cached_by_source_total', { source });
  const sum = Object.values(out).reduce((a, v) => a + v, 0);
  assert.equal(
    sum,
    sampleValue(exp, 'vllm:prompt_tokens_cached_total'),
    'the sources sum to the cached tokens',
  );
  return out;
}

const PROMPT = 'The quick brown fox jumps over the lazy dog and keeps running far away from the hunters.';

async function serveWith(
  kv: Record<string, unknown> | null,
  extra: Record<string, unknown> = {},
): Promise<Served> {
  return serve({ num_gpu_blocks: 64, ...extra, ...(kv ? { kv_transfer_config: kv } : {}) });
}

async function complete(url: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: PROMPT, max_tokens: 4, temperature: 0, ignore_eos: true, ...body }),
  });
  const json = (await res.json()) as Record<string, unknown>;
  assert.equal(res.status, 200, JSON.stringify(json));
  return json;
}

/** Scrapes, checks the text with promtool and our parser, and returns it parsed. */
async function scrape(
  t: TestContext,
  s: Served,
  families: ReadonlyArray<[string, string]>,
): Promise<Exposition> {
  const text = await (await fetch(`${s.url}/metrics`)).text();
  const exp = parseExposition(text);
  assertVllmShape(exp, 'tiny');
  for (const [name, type] of [...ENGINE_FAMILIES, ...families]) {
    assert.equal(exp.types.get(name), type, `${name} is a ${type}`);
  }
  await assertPromtoolAccepts(text, t);
  return exp;
}

function nixl(role: 'kv_producer' | 'kv_consumer', id: string): Record<string, unknown> {
  return {
    kv_connector: 'NixlConnector',
    kv_role: role,
    engine_id: `${id}-${role}`,
    kv_connector_extra_config: { backends: ['TCP'], side_channel_port: 0 },
  };
}

const offload = {
  kv_connector: 'OffloadingConnector',
  kv_role: 'kv_both',
  kv_connector_extra_config: { cpu_bytes_to_use: 16 << 20 },
};

describe('/metrics with each connector, checked by promtool', () => {
  it('no connector', async (t) => {
    const s = await serveWith(null);
    try {
      await complete(s.url, {});
      const exp = await scrape(t, s, []);
      assert.equal(sampleValue(exp, 'vllm:request_success_total', { finished_reason: 'length' }), 1);
    } finally {
      await stop(s);
    }
  });

  it('NixlConnector: P and D after a transfer; D counts its prompt as external_kv_transfer', async (t) => {
    const p = await serveWith(nixl('kv_producer', 'scrape'));
    const d = await serveWith(nixl('kv_consumer', 'scrape'));
    try {
      const pOut = await complete(p.url, { max_tokens: 1, kv_transfer_params: { do_remote_decode: true } });
      await complete(d.url, { kv_transfer_params: pOut['kv_transfer_params'] });
      const dExp = await scrape(t, d, NIXL_FAMILIES);
      assert.ok(sampleValue(dExp, 'vllm:nixl_xfer_time_seconds_count') >= 1, 'D timed its READ');
      assert.ok(sampleValue(dExp, 'vllm:nixl_bytes_transferred_sum') > 0);
      assert.equal(sampleValue(dExp, 'vllm:nixl_num_failed_transfers_total'), 0);
      const external = sampleValue(dExp, 'vllm:prompt_tokens_by_source_total', {
        source: 'external_kv_transfer',
      });
      assert.ok(external > 0, 'D loaded prompt tokens from P');
      assert.equal(external, sampleValue(dExp, 'vllm:external_prefix_cache_hits_total'));
      // NIXL does not say where P's KV lived: vLLM's default source, for every cached token
      // (the last prompt token, recomputed for its logits, is loaded but not cached).
      assert.equal(
        cachedBySource(dExp)['external_unspecified'],
        sampleValue(dExp, 'vllm:prompt_tokens_cached_total'),
      );
      assert.ok((cachedBySource(dExp)['external_unspecified'] ?? 0) > 0);
      const pExp = await scrape(t, p, NIXL_FAMILIES);
      assert.equal(
        sampleValue(pExp, 'vllm:prompt_tokens_by_source_total', { source: 'external_kv_transfer' }),
        0,
      );
    } finally {
      await stop(d, p);
    }
  });

  it("OffloadingConnector: vLLM's flat load/store families, and the deprecated ones by transfer_type", async (t) => {
    // Without the local prefix cache the repeat can only come back from the CPU tier.
    const s = await serveWith(offload, { enable_prefix_caching: false });
    try {
      await complete(s.url, {});
      await complete(s.url, {});
      const exp = await scrape(t, s, OFFLOAD_FAMILIES);
      const stored = sampleValue(exp, 'vllm:kv_offload_total_bytes_total', { transfer_type: 'GPU_to_CPU' });
      const loaded = sampleValue(exp, 'vllm:kv_offload_total_bytes_total', { transfer_type: 'CPU_to_GPU' });
      assert.ok(stored > 0 && loaded > 0, `stored ${stored}, loaded ${loaded}`);
      assert.equal(sampleValue(exp, 'vllm:kv_offload_size_sum', { transfer_type: 'CPU_to_GPU' }), loaded);
      assert.ok(sampleValue(exp, 'vllm:kv_offload_total_time_total', { transfer_type: 'CPU_to_GPU' }) > 0);
      // The flat families count the same transfers: loads into GPU, stores out of it.
      assert.equal(sampleValue(exp, 'vllm:kv_offload_load_bytes_total'), loaded);
      assert.equal(sampleValue(exp, 'vllm:kv_offload_store_bytes_total'), stored);
      assert.equal(sampleValue(exp, 'vllm:kv_offload_load_size_sum'), loaded);
      assert.equal(sampleValue(exp, 'vllm:kv_offload_store_size_sum'), stored);
      assert.equal(
        sampleValue(exp, 'vllm:kv_offload_load_time_total'),
        sampleValue(exp, 'vllm:kv_offload_total_time_total', { transfer_type: 'CPU_to_GPU' }),
      );
      assert.equal(
        sampleValue(exp, 'vllm:prompt_tokens_by_source_total', { source: 'external_kv_transfer' }),
        sampleValue(exp, 'vllm:external_prefix_cache_hits_total'),
        'the offloaded prefix counts as external, as in vLLM',
      );
      // Its physical source is the CPU tier: host memory.
      const sources = cachedBySource(exp);
      assert.equal(sources['host'], sampleValue(exp, 'vllm:external_prefix_cache_hits_total'));
      assert.ok((sources['host'] ?? 0) > 0);
      assert.equal(sources['device'], 0, 'no local prefix cache');
      // Two admissions, each looked up once, answered at once; the CPU tier had room.
      assert.equal(sampleValue(exp, 'vllm:kv_offload_lookup_sync_delay_seconds_count'), 2);
      assert.equal(sampleValue(exp, 'vllm:kv_offload_lookup_async_delay_seconds_count'), 0);
      assert.equal(sampleValue(exp, 'vllm:kv_offload_allocation_failure_total'), 0);
      assert.equal(
        sampleValue(exp, 'vllm:kv_offload_cpu_cache_usage_perc'),
        0,
        'every slot written and unpinned',
      );
    } finally {
      await stop(s);
    }
  });

  it('OffloadingConnector tiers: disk hits after the CPU tier is dropped, a full CPU tier, store_threshold', async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'kvc-metrics-fs-'));
    const fs = await serveWith(
      {
        ...offload,
        kv_connector_extra_config: {
          cpu_bytes_to_use: 16 << 20,
          spec_name: 'TieringOffloadingSpec',
          secondary_tiers: [{ type: 'fs', root_dir: dir, timeout_ms: 2000 }],
        },
      },
      { enable_prefix_caching: false },
    );
    try {
      await complete(fs.url, {});
      // Drop the CPU tier until the chunks come back from the fs tier (its writes land asynchronously).
      let exp: Exposition | null = null;
      for (let attempt = 0; attempt < 20; attempt++) {
        assert.ok(await fs.engine.resetPrefixCache({ resetConnector: true }));
        await complete(fs.url, {});
        exp = parseExposition(await (await fetch(`${fs.url}/metrics`)).text());
        if (sampleValue(exp, 'vllm:prompt_tokens_cached_by_source_total', { source: 'disk' }) > 0) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      exp = await scrape(t, fs, OFFLOAD_FAMILIES);
      const sources = cachedBySource(exp);
      assert.ok((sources['disk'] ?? 0) > 0, `disk hits: ${JSON.stringify(sources)}`);
      assert.ok(
        sampleValue(exp, 'vllm:kv_offload_lookup_async_delay_seconds_count') >= 1,
        'the fs lookup was deferred, then answered',
      );
      // Only the prompt's head back in the CPU tier: the next full prompt is split host + disk.
      assert.ok(await fs.engine.resetPrefixCache({ resetConnector: true }));
      await complete(fs.url, { prompt: PROMPT.slice(0, 40) });
      const before = cachedBySource(parseExposition(await (await fetch(`${fs.url}/metrics`)).text()));
      await complete(fs.url, {});
      const after = cachedBySource(await scrape(t, fs, OFFLOAD_FAMILIES));
      const host = (after['host'] ?? 0) - (before['host'] ?? 0);
      const disk = (after['disk'] ?? 0) - (before['disk'] ?? 0);
      assert.ok(host > 0 && disk > 0, `one request from both tiers: host ${host}, disk ${disk}`);
    } finally {
      await stop(fs);
      await rm(dir, { recursive: true, force: true });
    }

    // Two CPU slots for a prompt of several chunks: the rest find no slot.
    const full = await serveWith(
      { ...offload, kv_connector_extra_config: { cpu_bytes_to_use: 2 * 32768 } },
      { enable_prefix_caching: false },
    );
    try {
      await complete(full.url, {});
      const exp = await scrape(t, full, OFFLOAD_FAMILIES);
      assert.ok(sampleValue(exp, 'vllm:kv_offload_allocation_failure_total') >= 1);
      assert.equal(
        sampleValue(exp, 'vllm:kv_offload_store_bytes_total'),
        2 * 32768,
        'the two slots were stored',
      );
    } finally {
      await stop(full);
    }

    // store_threshold 2: the first sight of a chunk skips its store, the second stores it.
    const threshold = await serveWith(
      { ...offload, kv_connector_extra_config: { cpu_bytes_to_use: 16 << 20, store_threshold: 2 } },
      { enable_prefix_caching: false },
    );
    try {
      await complete(threshold.url, {});
      const first = await scrape(t, threshold, [
        ...OFFLOAD_FAMILIES,
        ['vllm:kv_offload_stores_skipped_total', 'counter'],
      ]);
      const skipped = sampleValue(first, 'vllm:kv_offload_stores_skipped_total');
      assert.ok(skipped > 0);
      assert.equal(sampleValue(first, 'vllm:kv_offload_store_bytes_total'), 0);
      await complete(threshold.url, {});
      const second = parseExposition(await (await fetch(`${threshold.url}/metrics`)).text());
      assert.equal(sampleValue(second, 'vllm:kv_offload_stores_skipped_total'), skipped);
      assert.ok(sampleValue(second, 'vllm:kv_offload_store_bytes_total') > 0);
    } finally {
      await stop(threshold);
    }
  });

  it("MultiConnector (NIXL + offloading): both children's families; it advertises its NIXL child", async (t) => {
    const s = await serveWith({
      kv_connector: 'MultiConnector',
      kv_role: 'kv_producer',
      kv_connector_extra_config: {
        connectors: [nixl('kv_producer', 'multi'), { ...offload, kv_role: 'kv_producer' }],
      },
    });
    try {
      await complete(s.url, { max_tokens: 1, kv_transfer_params: { do_remote_decode: true } });
      await scrape(t, s, [...NIXL_FAMILIES, ...OFFLOAD_FAMILIES]);
      const info = (await (await fetch(`${s.url}/kvconnect/info`)).json()) as Record<string, unknown>;
      assert.deepEqual(
        [info['kv_connector'], info['connector'], info['transfer_mode'], typeof info['side_channel_port']],
        ['MultiConnector', 'NixlConnector', 'pull', 'number'],
        'a proxy drives the NIXL flow for it',
      );
    } finally {
      await stop(s);
    }
  });

  it('MoRIIOConnector, NixlPushConnector, ExampleConnector, DecodeBenchConnector', async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'kvc-metrics-'));
    const ports = await moriioPorts();
    const configs: Array<[Record<string, unknown>, ReadonlyArray<[string, string]>]> = [
      [
        moriioOptions({ readMode: false, backend: 'xgmi' }, 'kv_producer', ports).kvTransferConfig as Record<
          string,
          unknown
        >,
        [
          ['vllm:moriio_xfer_time_seconds', 'histogram'],
          ['vllm:moriio_num_failed_transfers_total', 'counter'],
        ],
      ],
      [{ ...nixl('kv_producer', 'push'), kv_connector: 'NixlPushConnector' }, NIXL_FAMILIES],
      [
        {
          kv_connector: 'ExampleConnector',
          kv_role: 'kv_both',
          kv_connector_extra_config: { shared_storage_path: dir },
        },
        [],
      ],
      [{ kv_connector: 'DecodeBenchConnector', kv_role: 'kv_consumer' }, []],
    ];
    try {
      for (const [kv, families] of configs) {
        const s = await serveWith(kv);
        try {
          await complete(s.url, {});
          await scrape(t, s, families);
        } finally {
          await stop(s);
        }
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
