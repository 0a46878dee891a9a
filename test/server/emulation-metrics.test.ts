/**
 * An emulating server states its emulated deployment in /metrics: kvconnect:emulation_info,
 * the KV byte scale and the emulated link, read back from a real scrape (and through
 * promtool when it is installed); a server that does not emulate has none of them.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildEmulationConfig } from '../../src/config/emulation-config.ts';
import { buildEngineConfig } from '../../src/config/engine-config.ts';
import { AsyncEngine } from '../../src/engine/async-engine.ts';
import { createServer } from '../../src/server/index.ts';
import { assertPromtoolAccepts, parseExposition, sampleValue } from './helpers/prom-text.ts';
import { serve, stop } from './helpers/served.ts';

test('--kv-bytes-scale and --kv-link are stated in /metrics under kvconnect:*', async (t) => {
  const config = buildEngineConfig({ model: 'tiny', num_gpu_blocks: 32, max_model_len: 256 });
  config.emulation = buildEmulationConfig(
    { mode: 'random', 'target-model': 'llama-3.1-8b', 'kv-bytes-scale': '16', 'kv-link': 'ib-ndr' },
    config.model.seed,
  );
  const engine = await AsyncEngine.create(config);
  const server = createServer({ engine });
  try {
    const { url } = await server.start('127.0.0.1', 0);
    const text = await (await fetch(`${url}/metrics`)).text();
    const exp = parseExposition(text);
    const labels = { model_name: 'tiny', engine: '0' };
    assert.equal(sampleValue(exp, 'kvconnect:kv_bytes_scale', labels), 16);
    // ib-ndr: llm-d-inference-sim's 40 GB/s with 1 ms setup.
    assert.equal(sampleValue(exp, 'kvconnect:kv_link_bandwidth_bytes_per_second', labels), 40e9);
    assert.equal(sampleValue(exp, 'kvconnect:kv_link_setup_latency_seconds', labels), 0.001);
    // The link's counters are there from 0 (the P/D test counts real transfers).
    for (const name of ['transfers', 'bytes', 'modelled_seconds', 'held_transfers', 'held_seconds']) {
      assert.equal(sampleValue(exp, `kvconnect:kv_link_${name}_total`, labels), 0, name);
      assert.equal(exp.types.get(`kvconnect:kv_link_${name}_total`), 'counter', name);
    }
    const info = exp.samples.filter((s) => s.name === 'kvconnect:emulation_info');
    assert.equal(info.length, 1);
    assert.equal(info[0]?.value, 1);
    assert.deepEqual(info[0]?.labels, {
      ...labels,
      latency_calculator: 'None',
      mode: 'random',
      speedup: '1',
      target_model: 'llama-3.1-8b',
      target_accelerator: 'None',
      target_tp: 'None',
      kv_bytes_scale: '16',
      kv_link: 'ib-ndr',
    });
    assert.equal(exp.types.get('kvconnect:kv_bytes_scale'), 'gauge');
    await assertPromtoolAccepts(text, t);
  } finally {
    await server.close();
    await engine.shutdown();
  }
});

test('a server that does not emulate states no kvconnect:emulation series', async () => {
  const served = await serve();
  try {
    const text = await (await fetch(`${served.url}/metrics`)).text();
    assert.doesNotMatch(text, /^kvconnect:(emulation_info|kv_bytes_scale|kv_link_)/m);
  } finally {
    await stop(served);
  }
});
