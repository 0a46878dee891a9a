/**
 * --show-hidden-metrics-for-version as vLLM reads it: a PEP 440 version or an error naming the
 * field; hidden families served only when it names the previous minor release, compared as
 * text; with vLLM's current (empty) list a scrape is the same either way.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { EngineStats } from '../../src/engine/api.ts';
import { KVError } from '../../src/errors/index.ts';
import {
  HIDDEN_METRICS,
  parseShowHiddenMetricsForVersion,
  previousMinor,
  showHiddenMetrics,
} from '../../src/server/hidden-metrics.ts';
import { ServerMetrics } from '../../src/server/metrics.ts';
import { REFERENCE_VLLM_VERSION } from '../../src/server/vllm-version.ts';

function metrics(version: string | null, hidden?: readonly string[]): ServerMetrics {
  return new ServerMetrics({
    modelName: 'm',
    maxModelLen: 64,
    cacheInfo: {},
    connectorMetrics: [],
    readStats: () => ({}) as EngineStats,
    showHiddenMetricsForVersion: version,
    ...(hidden ? { hiddenMetrics: hidden } : {}),
  });
}

describe('--show-hidden-metrics-for-version', () => {
  it('takes what packaging.version.parse takes, and refuses the rest naming the field', () => {
    for (const ok of ['0.31', '0.31.0', '0.32.0rc1', 'v1.0', '1!2.0.post1.dev3', ' 0.31 ', '0.31+local.1'])
      assert.equal(parseShowHiddenMetricsForVersion(ok), ok);
    assert.equal(parseShowHiddenMetricsForVersion(undefined), null);
    for (const bad of ['latest', '', '0.31-foo', '0..31', '.31']) {
      assert.throws(
        () => parseShowHiddenMetricsForVersion(bad),
        (e: unknown) =>
          e instanceof KVError &&
          e.field === 'show_hidden_metrics_for_version' &&
          e.message.startsWith(`Invalid version: '${bad}'`),
        bad,
      );
    }
  });

  it("shows hidden metrics only for the previous minor release, as vLLM's _prev_minor_version_was", () => {
    assert.equal(previousMinor('0.32.0'), '0.31');
    assert.equal(previousMinor('1.0.0'), '0.0');
    assert.equal(previousMinor('2.3.1'), '2.2');
    assert.equal(showHiddenMetrics(previousMinor(REFERENCE_VLLM_VERSION)), true);
    assert.equal(showHiddenMetrics('0.31', '0.32.0'), true);
    for (const other of ['0.31.0', '0.30', '0.32', null])
      assert.equal(showHiddenMetrics(other, '0.32.0'), false);
  });

  it('a hidden family is served only with the flag; vLLM currently hides none', () => {
    const previous = previousMinor(REFERENCE_VLLM_VERSION);
    const name = 'vllm:num_requests_running';
    assert.equal(metrics(null, [name]).registry.getSingleMetric(name), undefined);
    assert.equal(metrics('0.1', [name]).registry.getSingleMetric(name), undefined);
    assert.ok(metrics(previous, [name]).registry.getSingleMetric(name));
    assert.deepEqual(HIDDEN_METRICS, []);
    const names = (m: ServerMetrics) => m.registry.getMetricsAsArray().map((x) => x.name);
    assert.deepEqual(names(metrics(null)), names(metrics(previous)));
  });
});
