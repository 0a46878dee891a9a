import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildEngineConfig } from '../../src/config/engine-config.ts';
import {
  KV_EVENTS_CONFIG_FIELDS,
  kvEventsConfigFromCli,
  parseKVEventsConfig,
  podKVEventsTopic,
  warnKVEventsConfig,
  withPodTopic,
} from '../../src/config/kv-events-config.ts';
import { offsetEndpointPort, shouldBind } from '../../src/kv-events/endpoint.ts';
import { captureLogs } from '../../src/logging/logger.ts';
import { kvError } from '../helpers/kv-error.ts';

test("defaults are vLLM's; the publisher follows enable_kv_cache_events when unset", () => {
  assert.deepEqual(parseKVEventsConfig({}), {
    enable_kv_cache_events: false,
    publisher: 'null',
    endpoint: 'tcp://*:5557',
    replay_endpoint: null,
    buffer_steps: 10_000,
    hwm: 100_000,
    max_queue_size: 100_000,
    topic: '',
  });
  assert.equal(parseKVEventsConfig({ enable_kv_cache_events: true }).publisher, 'zmq');
  assert.equal(parseKVEventsConfig({ enable_kv_cache_events: true, publisher: 'null' }).publisher, 'null');
  assert.equal(parseKVEventsConfig({ publisher: 'zmq' }).publisher, 'zmq');
  assert.deepEqual(KV_EVENTS_CONFIG_FIELDS, [
    'enable_kv_cache_events',
    'publisher',
    'endpoint',
    'replay_endpoint',
    'buffer_steps',
    'hwm',
    'max_queue_size',
    'topic',
  ]);
});

test('every bad field is named with what was expected, what was received and a fix', () => {
  const cases: [Record<string, unknown>, string, RegExp][] = [
    [
      { enable_kv_cache_events: 'yes' },
      'kv_events_config.enable_kv_cache_events',
      /expected true or false, received "yes"/,
    ],
    [{ publisher: 'kafka' }, 'kv_events_config.publisher', /expected one of "null", "zmq", received "kafka"/],
    [{ endpoint: 'localhost:5557' }, 'kv_events_config.endpoint', /expected a ZeroMQ endpoint/],
    [{ replay_endpoint: 5558 }, 'kv_events_config.replay_endpoint', /expected a string, received 5558/],
    [{ buffer_steps: -1 }, 'kv_events_config.buffer_steps', /expected a non-negative integer, received -1/],
    [{ hwm: 1.5 }, 'kv_events_config.hwm', /received 1.5/],
    [{ max_queue_size: '10' }, 'kv_events_config.max_queue_size', /received "10"/],
    [{ topic: null }, 'kv_events_config.topic', /expected a string, received null/],
  ];
  for (const [input, field, message] of cases) {
    const e = kvError(() => parseKVEventsConfig(input));
    assert.equal(e.field, field);
    assert.match(e.message, message);
    assert.ok(e.hint && e.hint.length > 10, `hint for ${field}`);
  }
  assert.match(kvError(() => parseKVEventsConfig({ publisher: 'zmqq' })).hint ?? '', /did you mean 'zmq'/);
});

test('unknown keys are rejected with a did-you-mean; non-objects too', () => {
  const e = kvError(() => parseKVEventsConfig({ enable_kv_events: true }));
  assert.equal(e.code, 'KV_CONFIG_UNKNOWN_KEY');
  assert.equal(e.message, "Unknown field 'enable_kv_events' in kv_events_config");
  assert.match(e.hint ?? '', /did you mean 'enable_kv_cache_events'/);
  assert.equal(kvError(() => parseKVEventsConfig([1])).field, 'kv_events_config');
});

test('the CLI takes JSON, the dotted form, or both (dotted wins); bad JSON names the flag', () => {
  assert.equal(kvEventsConfigFromCli(undefined, []), null);
  const fromJson = kvEventsConfigFromCli('{"enable_kv_cache_events": true, "topic": "kv"}');
  assert.equal(fromJson?.topic, 'kv');
  const merged = kvEventsConfigFromCli('{"enable_kv_cache_events": true, "topic": "kv"}', [
    { path: 'topic', value: 'other' },
    { path: 'buffer_steps', value: '5' },
  ]);
  assert.equal(merged?.topic, 'other');
  assert.equal(merged?.buffer_steps, 5);
  assert.equal(merged?.publisher, 'zmq');
  const bad = kvError(() => kvEventsConfigFromCli('{enable_kv_cache_events: true}'));
  assert.equal(bad.field, 'kv_events_config');
  const engine = buildEngineConfig({ kv_events_config: '{"enable_kv_cache_events": true}' });
  assert.equal(engine.kvEventsConfig?.publisher, 'zmq');
  assert.equal(buildEngineConfig({}).kvEventsConfig, null);
});

test("vLLM's start-up warnings", async () => {
  const { records } = await captureLogs(() => {
    warnKVEventsConfig(parseKVEventsConfig({ enable_kv_cache_events: true }), false);
    warnKVEventsConfig(parseKVEventsConfig({ publisher: 'zmq' }), true);
    warnKVEventsConfig(parseKVEventsConfig({ enable_kv_cache_events: true }), true);
  });
  assert.deepEqual(
    records.filter((r) => r.level === 'warn').map((r) => r.message),
    [
      'KV cache events are on, but prefix caching is not enabled. Use --enable-prefix-caching to enable.',
      'KV cache events are disabled, but the scheduler is configured to publish them. Modify KVEventsConfig.enable_kv_cache_events to True to enable.',
    ],
  );
});

test("endpoints: vLLM's bind-or-connect rule and the data-parallel offset", () => {
  assert.ok(shouldBind('tcp://*:5557'));
  assert.ok(shouldBind('tcp://[::]:5557'));
  assert.ok(shouldBind('ipc:///tmp/kv'));
  assert.ok(shouldBind('inproc://kv'));
  assert.ok(!shouldBind('tcp://127.0.0.1:5557'));
  assert.equal(offsetEndpointPort('tcp://*:5557', 0, 'f'), 'tcp://*:5557');
  assert.equal(offsetEndpointPort('tcp://*:5557', 3, 'f'), 'tcp://*:5560');
  assert.equal(offsetEndpointPort('inproc://kv', 2, 'f'), 'inproc://kv_dp2');
  assert.equal(offsetEndpointPort(null, 2, 'f'), null);
  const e = kvError(() => offsetEndpointPort('ipc:///tmp/kv', 1, 'kv_events_config.endpoint'));
  assert.equal(e.message, "Invalid endpoint: must contain 'inproc' or 'tcp'");
  assert.equal(e.field, 'kv_events_config.endpoint');
});

test("POD_IP gives llm-d's topic kv@<pod-ip>:<port>@<model> when events publish without a topic", async () => {
  const on = parseKVEventsConfig({ enable_kv_cache_events: true });
  const server = { port: 8000, model: 'Qwen/Qwen3-0.6B' };
  assert.equal(podKVEventsTopic('10.244.0.5', 8000, 'Qwen/Qwen3-0.6B'), 'kv@10.244.0.5:8000@Qwen/Qwen3-0.6B');
  assert.equal(
    withPodTopic(on, server, { POD_IP: '10.244.0.5' })?.topic,
    'kv@10.244.0.5:8000@Qwen/Qwen3-0.6B',
  );
  assert.equal(withPodTopic(on, server, { POD_IP: ' fd00::7 ' })?.topic, 'kv@fd00::7:8000@Qwen/Qwen3-0.6B');
  // Nothing to derive: POD_IP unset or empty, no config, events off, or a topic configured.
  assert.equal(withPodTopic(on, server, {})?.topic, '');
  assert.equal(withPodTopic(on, server, { POD_IP: '' })?.topic, '');
  assert.equal(withPodTopic(null, server, { POD_IP: '10.0.0.1' }), null);
  const off = parseKVEventsConfig({ enable_kv_cache_events: false });
  assert.equal(withPodTopic(off, server, { POD_IP: '10.0.0.1' })?.topic, '');
  const mine = parseKVEventsConfig({ enable_kv_cache_events: true, topic: 'kv@mine' });
  assert.equal(withPodTopic(mine, server, { POD_IP: '10.0.0.1' })?.topic, 'kv@mine');
  // The rest of the config is kept.
  assert.deepEqual(withPodTopic(on, server, { POD_IP: '10.0.0.1' }), {
    ...on,
    topic: 'kv@10.0.0.1:8000@Qwen/Qwen3-0.6B',
  });

  const e = kvError(() => withPodTopic(on, server, { POD_IP: 'my-pod' }));
  assert.equal(e.field, 'POD_IP');
  assert.match(
    e.message,
    /^Invalid value for POD_IP: expected an IPv4 or IPv6 address .*, received "my-pod"$/,
  );
  assert.match(e.hint ?? '', /status\.podIP/);

  // Port 0 is only known after listen: no topic, and a warning that says so.
  const { records, result } = await captureLogs(() =>
    withPodTopic(on, { port: 0, model: 'm' }, { POD_IP: '10.0.0.1' }),
  );
  assert.equal(result?.topic, '');
  assert.match(records.find((r) => r.level === 'warn')?.message ?? '', /POD_IP is set but --port is 0/);
});
