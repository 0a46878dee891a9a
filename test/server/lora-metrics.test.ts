/**
 * The server's LoRA metrics from the engine's stats: vllm:lora_requests_info gets the row of
 * each iteration's running / waiting adapters set to the current time (vLLM's label order,
 * one row per combination seen, promtool-clean), and requests held back by --max-loras count
 * as `deferred` in vllm:num_requests_waiting_by_reason.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { EngineStats } from '../../src/engine/api.ts';
import { emptyPromptTokenStats, type IterationStats } from '../../src/engine/iteration-stats.ts';
import { ServerMetrics } from '../../src/server/metrics.ts';
import { assertPromtoolAccepts, parseExposition, sampleValue } from './helpers/prom-text.ts';

const stats: EngineStats = {
  numRequestsRunning: 2,
  numRequestsWaiting: 5,
  kvCacheUsage: 0.25,
  promptTokensTotal: 0,
  generationTokensTotal: 0,
  prefixCacheQueriesTotal: 0,
  prefixCacheHitsTotal: 0,
  externalPrefixCacheQueriesTotal: 0,
  externalPrefixCacheHitsTotal: 0,
  numPreemptionsTotal: 0,
  numRequestsWaitingForRemoteKvs: 1,
  numRequestsWaitingForLora: 2,
  kvConnectorStats: null,
};

function iteration(running: string[], waiting: string[]): IterationStats {
  return {
    kind: 'step',
    numGenerationTokens: 0,
    promptTokens: emptyPromptTokenStats(),
    timeToFirstTokensSeconds: [],
    interTokenLatenciesSeconds: [],
    finished: [],
    kvConnectorStats: null,
    loraAdapters: { running, waiting },
  };
}

const metricsWith = (maxLoras: number | null) =>
  new ServerMetrics({
    modelName: 'm',
    maxModelLen: 128,
    cacheInfo: {},
    connectorMetrics: [],
    readStats: () => stats,
    maxLoras,
  });

test('vllm:lora_requests_info rows per iteration, and LoRA-deferred waiting requests', async (t) => {
  const metrics = metricsWith(2);
  const before = Date.now() / 1000;
  metrics.recordIteration(iteration(['sql'], ['poetry', 'math']));
  metrics.recordIteration(iteration(['sql', 'poetry'], []));
  metrics.recordIteration(iteration(['sql'], ['poetry', 'math']));
  const { body } = await metrics.render();
  const lines = body.split('\n').filter((l) => l.startsWith('vllm:lora_requests_info{'));
  assert.deepEqual(
    lines.map((l) => l.slice(0, l.indexOf('}') + 1)),
    [
      'vllm:lora_requests_info{max_lora="2",waiting_lora_adapters="poetry,math",running_lora_adapters="sql"}',
      'vllm:lora_requests_info{max_lora="2",waiting_lora_adapters="",running_lora_adapters="sql,poetry"}',
    ],
  );
  const exp = parseExposition(body);
  for (const s of exp.samples.filter((x) => x.name === 'vllm:lora_requests_info'))
    assert.ok(s.value >= before - 1 && s.value <= Date.now() / 1000 + 1, String(s.value));
  const deferred = sampleValue(exp, 'vllm:num_requests_waiting_by_reason', { reason: 'deferred' });
  const capacity = sampleValue(exp, 'vllm:num_requests_waiting_by_reason', { reason: 'capacity' });
  assert.deepEqual([deferred, capacity], [3, 2]);
  await assertPromtoolAccepts(body, t);
});

test('without --enable-lora the family is absent', async () => {
  const metrics = metricsWith(null);
  metrics.recordIteration(iteration(['x'], []));
  assert.doesNotMatch((await metrics.render()).body, /lora_requests_info/);
});
