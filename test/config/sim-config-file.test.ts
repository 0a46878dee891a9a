/**
 * llm-d-inference-sim's configuration language: Go durations, its latency validation rules,
 * and its YAML files — the six published latency profiles (test/fixtures/sim-latency-profiles,
 * copied unchanged) load, and a key kvconnect does not implement is an error naming it.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { buildEmulationConfig, parseKvLink } from '../../src/config/emulation-config.ts';
import { parseGoDuration } from '../../src/config/go-duration.ts';
import { loadSimConfigFile, mergeSimConfig } from '../../src/config/sim-config-file.ts';
import { buildSteering } from '../../src/config/steering-options.ts';
import { KVError } from '../../src/errors/kv-error.ts';
import { captureLogs } from '../../src/logging/logger.ts';

const PROFILES = new URL('../fixtures/sim-latency-profiles/', import.meta.url).pathname;

function yamlFile(text: string): string {
  const path = join(mkdtempSync(join(tmpdir(), 'kvc-sim-yaml-')), 'config.yaml');
  writeFileSync(path, text);
  return path;
}

test('durations are read as Go writes them', () => {
  assert.equal(parseGoDuration('12ms'), 12e6);
  assert.equal(parseGoDuration('250us'), 250e3);
  assert.equal(parseGoDuration('250µs'), 250e3);
  assert.equal(parseGoDuration('1.5s'), 1.5e9);
  assert.equal(parseGoDuration('.5ms'), 0.5e6);
  assert.equal(parseGoDuration('1h30m'), 5400e9);
  assert.equal(parseGoDuration('-3ms'), -3e6);
  assert.equal(parseGoDuration('0'), 0);
  for (const bad of ['100', 'ms', '', '.ms', '5 ms', '3days']) assert.equal(parseGoDuration(bad), null, bad);
});

test('latency options: a duration without a unit names the option and the accepted form', () => {
  assert.throws(
    () => buildEmulationConfig({ 'inter-token-latency': '12' }),
    (e: unknown) => e instanceof KVError && e.field === 'inter-token-latency' && /100ms/.test(e.hint ?? ''),
  );
});

test("latency options: the sim's 30% std-dev rule and non-negative durations", () => {
  assert.throws(
    () => buildEmulationConfig({ 'time-to-first-token': '100ms', 'time-to-first-token-std-dev': '31ms' }),
    (e: unknown) =>
      e instanceof KVError &&
      e.field === 'time-to-first-token-std-dev' &&
      /30% of time-to-first-token/.test(e.message),
  );
  assert.ok(buildEmulationConfig({ 'time-to-first-token': '100ms', 'time-to-first-token-std-dev': '30ms' }));
  assert.throws(() => buildEmulationConfig({ 'prefill-overhead': '-1ms' }), /prefill-overhead/);
  assert.throws(() => buildEmulationConfig({ 'time-factor-under-load': '0.5' }), /time-factor-under-load/);
  assert.throws(() => buildEmulationConfig({ 'latency-calculator': 'linear' }), /latency-calculator/);
  // Prefill and KV-transfer std-devs apply to totals unknown at config time: no upper bound.
  assert.ok(buildEmulationConfig({ 'prefill-time-per-token': '1ms', 'prefill-time-std-dev': '50ms' }));
});

test('latency options: no calculator named but a latency set is the sim\'s legacy "" calculator', () => {
  assert.equal(buildEmulationConfig({}), null);
  assert.equal(buildEmulationConfig({ 'inter-token-latency': '5ms' })?.latencyCalculator, '');
  assert.equal(buildEmulationConfig({ mode: 'echo' })?.latencyCalculator, null);
  assert.throws(
    () => buildEmulationConfig({ 'target-model': 'llama-3.1-8b' }),
    /--latency-calculator roofline/,
  );
  assert.throws(() => buildEmulationConfig({ 'latency-calculator': 'roofline' }), /target-model/);
});

test('the six published latency profiles load unchanged', () => {
  const files = readdirSync(PROFILES).filter((f) => f.endsWith('.yaml'));
  assert.equal(files.length, 6);
  for (const f of files) {
    const file = loadSimConfigFile(join(PROFILES, f));
    const merged = mergeSimConfig(file, { engine: {}, emulation: {} });
    const emulation = buildEmulationConfig(merged.emulation);
    assert.ok(emulation, f);
    assert.equal(emulation.mode, 'random', f);
    assert.equal(file.port, 8000, f);
    assert.ok(emulation.sim.interTokenLatency > 0, f);
    // random mode: the sim's model is the name served, kvconnect's own model runs no weights.
    assert.match(String(merged.engine.served_model_name), /^meta-llama\//, f);
    assert.equal(merged.engine.model, undefined, f);
  }
  const constant = loadSimConfigFile(join(PROFILES, '8b-h100-balanced-constant.yaml'));
  const c = buildEmulationConfig(constant.emulation);
  assert.equal(c?.latencyCalculator, 'constant');
  assert.equal(c?.sim.timeToFirstToken, 100e6);
  assert.equal(c?.sim.timeToFirstTokenStdDev, 20e6);
  assert.equal(c?.sim.kvCacheTransferLatencyStdDev, 400e3);
  assert.equal(c?.sim.timeFactorUnderLoad, 2);
  assert.equal(constant.engine.max_num_seqs, 16);
  const perToken = buildEmulationConfig(
    loadSimConfigFile(join(PROFILES, '70b-h100-tp8-throughput-per-token.yaml')).emulation,
  );
  assert.equal(perToken?.latencyCalculator, 'per-token');
  assert.equal(perToken?.sim.prefillOverhead, 80e6);
  assert.equal(perToken?.sim.prefillTimePerToken, 500e3);
  assert.equal(perToken?.sim.kvCacheTransferTimePerToken, 8e3);
});

test("flags win over the file; in model mode the sim's model is the model loaded", () => {
  const file = loadSimConfigFile(yamlFile('model: tiny\nmax-num-seqs: 4\ninter-token-latency: 5ms\n'));
  const merged = mergeSimConfig(file, {
    engine: { max_num_seqs: '8' },
    emulation: { 'inter-token-latency': '7ms' },
  });
  assert.equal(merged.engine.model, 'tiny');
  assert.equal(merged.engine.max_num_seqs, '8');
  assert.equal(buildEmulationConfig(merged.emulation)?.sim.interTokenLatency, 7e6);
});

test('a sim key kvconnect does not implement is an error naming it; ignored ones are logged', async () => {
  assert.throws(
    () => loadSimConfigFile(yamlFile('model: x\nimage-emission-rate: 10\n')),
    (e: unknown) =>
      e instanceof KVError && e.code === 'KV_CONFIG_UNKNOWN_KEY' && e.field === 'image-emission-rate',
  );
  assert.throws(
    () => loadSimConfigFile(yamlFile('inter-token-latncy: 5ms\n')),
    (e: unknown) => e instanceof KVError && /Did you mean 'inter-token-latency'/.test(e.hint ?? ''),
  );
  assert.throws(() => loadSimConfigFile(yamlFile('served-model-name: [a, b]\n')), /exactly one name/);
  assert.throws(() => loadSimConfigFile(yamlFile('inter-token-latency: [5ms\n')), /valid YAML/);
  const { records } = await captureLogs(() => loadSimConfigFile(yamlFile('enforce-eager: true\n')));
  assert.ok(records.some((r) => /ignoring enforce-eager/.test(r.message)));
});

test("--kv-link: the sim's interconnects by name, or bandwidth and setup latency", () => {
  assert.deepEqual(parseKvLink('ib-ndr'), { name: 'ib-ndr', bandwidthGBs: 40, latencyUs: 1000 });
  assert.deepEqual(parseKvLink('12.5,2ms'), { name: '12.5,2ms', bandwidthGBs: 12.5, latencyUs: 2000 });
  for (const bad of ['infiniband', '0,1ms', '10', '10,2', '10,1ms,3']) {
    assert.throws(
      () => parseKvLink(bad),
      (e: unknown) => e instanceof KVError && e.field === 'kv-link',
      bad,
    );
  }
});

test("the sim's failure-injection, fake-metrics and startup keys load; flags win", () => {
  const file = loadSimConfigFile(
    yamlFile(
      [
        'failure-injection-rate: 20',
        'failure-types: [rate_limit, model_not_found]',
        'startup-duration: 2s',
        'fake-metrics-refresh-interval: 50ms',
        'fake-metrics:',
        '  running-requests: 3',
        '  kv-cache-usage: "squarewave:0.1:0.9:4s"',
        '  loras:',
        '    - \'{"running":"a,b","waiting":"c","timestamp":1257894567}\'',
        '',
      ].join('\n'),
    ),
  );
  const merged = mergeSimConfig(file, {
    engine: {},
    emulation: {},
    steering: { 'failure-injection-rate': '5' },
  });
  const s = buildSteering(merged.steering);
  assert.deepEqual(s.failures, { rate: 5, types: ['rate_limit', 'model_not_found'] });
  assert.equal(s.startupDurationNs, 2e9);
  assert.equal(s.fakeMetricsRefreshMs, 50);
  assert.deepEqual(s.fakeMetrics?.gauges['running-requests'], { kind: 'fixed', value: 3 });
  assert.equal(s.fakeMetrics?.gauges['kv-cache-usage']?.kind, 'function');
  assert.deepEqual(s.fakeMetrics?.loras, [{ running: 'a,b', waiting: 'c', timestamp: 1257894567 }]);
});

test("the sim's lora-modules, max-loras and max-cpu-loras: adapters served, LoRA turned on", () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvc-sim-lora-'));
  const path = join(dir, 'sim.yaml');
  writeFileSync(
    path,
    [
      'max-loras: 2',
      'max-cpu-loras: 5',
      'lora-modules:',
      `- '{"name":"lora1","path":"/path/to/lora1"}'`,
      '- name: lora2',
      '  path: /path/to/lora2',
      '  base_model_name: base',
    ].join('\n'),
  );
  const file = loadSimConfigFile(path);
  assert.deepEqual(file.loraModules, [
    '{"name":"lora1","path":"/path/to/lora1"}',
    '{"name":"lora2","path":"/path/to/lora2","base_model_name":"base"}',
  ]);
  const merged = mergeSimConfig(file, { engine: {}, emulation: {} });
  assert.deepEqual(
    [merged.engine.enable_lora, merged.engine.max_loras, merged.engine.max_cpu_loras],
    [true, 2, 5],
  );
  writeFileSync(path, 'lora-modules: lora1=/x\n');
  assert.throws(
    () => loadSimConfigFile(path),
    (e) => e instanceof KVError && e.field === 'lora-modules',
  );
});
