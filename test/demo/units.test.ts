/** The demo's pure parts: workload shape, percentiles, output comparison, metrics, progress. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type CompletionResult, tokenIdsOf } from '../../src/demo/client.ts';
import { demoMetricNames, metricDelta, parseReading, sumMetric } from '../../src/demo/metrics.ts';
import { exportsTransferMetrics } from '../../src/demo/options.ts';
import { Progress } from '../../src/demo/progress.ts';
import { pickSamples, renderSamples } from '../../src/demo/samples.ts';
import { nearestRankOf, renderTable, sameOutput, summarize } from '../../src/demo/summary.ts';
import { buildWorkload, familyPrefix, workloadWaves } from '../../src/demo/workload.ts';
import type { KVError } from '../../src/errors/kv-error.ts';

test('the workload interleaves families that share an exact prefix, and waves send each family first alone', () => {
  const w = buildWorkload({ requests: 10, families: 3, prefixLength: 200, maxTokens: 8 });
  assert.equal(w.length, 10);
  for (const r of w) assert.ok(r.prompt.startsWith(familyPrefix(r.family, 200)));
  const prefix = familyPrefix(1, 200);
  assert.ok(prefix.length >= 200 && prefix.length < 320 && prefix.endsWith('.\n'), prefix);
  assert.notEqual(familyPrefix(0, 200), familyPrefix(1, 200));
  assert.equal(new Set(w.map((r) => r.prompt)).size, 10);
  const waves = workloadWaves(w, 4);
  assert.deepEqual(
    waves.map((wave) => wave.map((r) => r.index)),
    [[0], [1], [2], [3, 4, 5, 6], [7, 8, 9]],
  );
});

test('nearestRankOf picks the nearest rank and ignores NaN', () => {
  assert.equal(nearestRankOf([5, 1, 3, Number.NaN, 2, 4], 50), 3);
  assert.equal(nearestRankOf([1, 2, 3, 4, 100], 99), 100);
  assert.ok(Number.isNaN(nearestRankOf([], 50)));
});

test('sameOutput compares text, token ids and log-probabilities', () => {
  const a: CompletionResult = {
    index: 0,
    text: '\uFFFDa',
    tokenIds: [200, 97],
    logprobs: [-0.5, -1],
    finishReason: 'length',
    ttftMs: 1,
    e2eMs: 2,
  };
  assert.equal(sameOutput(a, { ...a, ttftMs: 9 }), true);
  assert.equal(sameOutput(a, { ...a, text: '\uFFFDb', tokenIds: [200, 98] }), false);
  // Two different bytes both decode to U+FFFD: same text, same log-probabilities, different ids.
  assert.equal(sameOutput(a, { ...a, tokenIds: [201, 97] }), false);
  assert.equal(sameOutput(a, { ...a, logprobs: [-2.25, -1] }), false);
  assert.equal(sameOutput(a, { ...a, tokenIds: [200] }), false);
});

test('tokenIdsOf reads token_id:{id} labels and rejects anything else', () => {
  assert.deepEqual(tokenIdsOf(['token_id:200', 'token_id:0', 'token_id:97'], 3, 'http://d'), [200, 0, 97]);
  assert.throws(
    () => tokenIdsOf(['token_id:5', '\uFFFD'], 3, 'http://d'),
    (e: KVError) =>
      e.code === 'DEMO_REQUEST_FAILED' &&
      e.message.includes('Request 3 to http://d') &&
      /return_tokens_as_token_ids/.test(e.hint ?? ''),
  );
});

test('metrics are summed over label sets and differenced (gauges keep the last value)', () => {
  const text = [
    '# HELP vllm:prompt_tokens_total x',
    'vllm:prompt_tokens_total{model_name="tiny",engine="0"} 40',
    'vllm:prompt_tokens_total{model_name="tiny",engine="1"} 2',
    'vllm:prompt_tokens_by_source_total{model_name="tiny",engine="0",source="local_compute"} 40',
    'vllm:prompt_tokens_by_source_total{model_name="tiny",engine="0",source="local_cache_hit"} 7',
    'vllm:prompt_tokens_by_source_total{model_name="tiny",engine="1",source="local_compute"} 2',
    'vllm:nixl_bytes_transferred_sum{model_name="tiny"} 65536',
    'vllm:nixl_bytes_transferred_bucket{le="+Inf"} 1',
    'vllm:kv_cache_usage_perc{model_name="tiny"} 0.25',
  ].join('\n');
  assert.equal(sumMetric(text, 'vllm:prompt_tokens_total'), 42);
  assert.equal(sumMetric(text, 'vllm:prompt_tokens_by_source_total'), 49);
  assert.equal(sumMetric(text, 'vllm:prompt_tokens_by_source_total{source="local_compute"}'), 42);
  assert.equal(sumMetric(text, 'vllm:prompt_tokens_by_source_total{source="local_compute",engine="1"}'), 2);
  assert.equal(sumMetric(text, 'vllm:nixl_bytes_transferred'), 0);
  const before = parseReading(text);
  const after = parseReading(text.replaceAll('} 40', '} 50').replace('0.25', '0'));
  const d = metricDelta(before, after);
  assert.equal(d.promptTokens, 10);
  assert.equal(d.kvBytes, 0);
  assert.equal(d.kvUsage, 0);
});

test('progress rewrites one line on a TTY and prints at most one line per quarter otherwise', () => {
  const tty: string[] = [];
  const p1 = new Progress({ write: (t) => void tty.push(t), isTTY: true });
  for (let i = 0; i <= 8; i++) p1.update('phase', i, 8);
  assert.ok(tty.slice(0, -1).every((t) => t.startsWith('\r\x1b[2K') && !t.includes('\n')));
  assert.equal(tty.at(-1), '\n');
  const plain: string[] = [];
  const p2 = new Progress({ write: (t) => void plain.push(t) });
  for (let i = 0; i <= 8; i++) p2.update('phase', i, 8);
  assert.equal(plain.length, 5);
  assert.ok(plain.every((t) => t.endsWith('\n') && !t.includes('\r')));
});

test('summaries of connectors without transfer metrics say null / n/a, not 0', () => {
  const result: CompletionResult = {
    index: 0,
    text: 'a',
    tokenIds: [97],
    logprobs: [-1],
    finishReason: 'length',
    ttftMs: 5,
    e2eMs: 9,
  };
  const reading = parseReading(
    'vllm:nixl_bytes_transferred_sum 4096\nvllm:nixl_bytes_transferred_count 2\nvllm:nixl_xfer_wire_time_seconds_sum 0.5\nvllm:prompt_tokens_total 1\nvllm:external_prefix_cache_hits_total 30',
  );
  const input = {
    connector: 'X',
    transferMode: 'WRITE',
    moriioBackend: 'xgmi',
    model: 'tiny',
    concurrency: 1,
    bytesPerBlock: 1024,
    disaggregated: { results: [result], wallMs: 10 },
    plain: { results: [result], wallMs: 10 },
    prefill: reading,
    decode: reading,
    reference: reading,
  };
  const without = summarize({ ...input, transferMetrics: false });
  assert.equal(without.kv_bytes_moved, null);
  assert.equal(without.kv_blocks_moved, null);
  assert.equal(without.transfer_gb_per_s, null);
  assert.equal(without.failed_transfers, null);
  assert.equal(without.decode_tokens_loaded, 30);
  const table = renderTable(without);
  assert.match(table, /— X \(WRITE, xgmi\), model tiny/);
  assert.match(table, /KV moved P→D\s+n\/a/);
  assert.match(table, /KV loaded by D\s+30 prompt tokens/);
  const withMetrics = summarize({
    ...input,
    moriioBackend: null,
    transferMode: 'pull',
    transferMetrics: true,
  });
  assert.equal(withMetrics.kv_bytes_moved, 8192);
  assert.equal(withMetrics.kv_blocks_moved, 8);
  assert.equal(withMetrics.kv_transfers, 4);
  assert.equal(withMetrics.failed_transfers, 0);
  assert.match(renderTable(withMetrics), /— X \(pull\), model tiny[\s\S]*8\.0 KiB · 8 blocks · 4 transfers/);
});

test('MoRIIO servers are read through vllm:moriio_*, NIXL through vllm:nixl_*; all export transfer metrics', () => {
  for (const c of ['NixlConnector', 'NixlPullConnector', 'NixlPushConnector', 'MoRIIOConnector'] as const) {
    assert.equal(exportsTransferMetrics(c), true, c);
  }
  const moriio = demoMetricNames('MoRIIOConnector');
  assert.equal(moriio.kvBytes, 'vllm:moriio_bytes_transferred_sum');
  assert.equal(moriio.transfers, 'vllm:moriio_bytes_transferred_count');
  assert.equal(moriio.transferSeconds, 'vllm:moriio_xfer_time_seconds_sum');
  assert.equal(moriio.failedTransfers, 'vllm:moriio_num_failed_transfers_total');
  assert.equal(moriio.abandonedHolds, 'vllm:moriio_num_reaped_sends_total');
  assert.equal(moriio.promptTokens, 'vllm:prompt_tokens_by_source_total{source="local_compute"}');
  assert.equal(demoMetricNames('NixlPushConnector').kvBytes, 'vllm:nixl_bytes_transferred_sum');
  // P's /metrics in MoRIIO WRITE mode: P posted the writes, D posted nothing.
  const pText = [
    'vllm:moriio_bytes_transferred_sum{model_name="tiny"} 49152',
    'vllm:moriio_bytes_transferred_count{model_name="tiny"} 4',
    'vllm:moriio_xfer_time_seconds_sum{model_name="tiny"} 0.004',
    'vllm:moriio_num_failed_transfers_total{model_name="tiny"} 1',
    'vllm:nixl_bytes_transferred_sum{model_name="tiny"} 999',
    'vllm:prompt_tokens_total{model_name="tiny"} 96',
  ].join('\n');
  const dText = 'vllm:moriio_bytes_transferred_sum{model_name="tiny"} 0\nvllm:prompt_tokens_total 1';
  const zero = parseReading('', moriio);
  const prefill = metricDelta(zero, parseReading(pText, moriio));
  const decode = metricDelta(zero, parseReading(dText, moriio));
  assert.equal(prefill.kvBytes, 49152, 'the MoRIIO series, not the NIXL one');
  assert.equal(parseReading(pText).kvBytes, 999, 'the default names are NIXL');
  const result: CompletionResult = {
    index: 0,
    text: 'a',
    tokenIds: [97],
    logprobs: [-1],
    finishReason: 'length',
    ttftMs: 5,
    e2eMs: 9,
  };
  const s = summarize({
    connector: 'MoRIIOConnector',
    transferMode: 'WRITE',
    moriioBackend: 'xgmi',
    transferMetrics: exportsTransferMetrics('MoRIIOConnector'),
    model: 'tiny',
    concurrency: 1,
    bytesPerBlock: 8192 * 4,
    disaggregated: { results: [result], wallMs: 10 },
    plain: { results: [result], wallMs: 10 },
    prefill,
    decode,
    reference: decode,
  });
  assert.equal(s.kv_bytes_moved, 49152);
  assert.equal(s.kv_blocks_moved, 2);
  assert.equal(s.kv_transfers, 4);
  assert.equal(s.transfer_gb_per_s, 0.012);
  assert.equal(s.failed_transfers, 1);
  const table = renderTable(s);
  assert.match(table, /KV moved P→D\s+48\.0 KiB · 2 blocks · 4 transfers/);
  assert.match(table, /transfer throughput\s+0\.012 GB\/s/);
  assert.match(table, /failed transfers\s+1/);
});

test('samples: one per family, both completions shown, compared by token ids (U+FFFD texts can differ)', () => {
  const requests = buildWorkload({ requests: 6, families: 3, prefixLength: 100, maxTokens: 2 });
  const result = (index: number, text: string, tokenIds: number[]): CompletionResult => ({
    index,
    text,
    tokenIds,
    logprobs: tokenIds.map(() => -1),
    finishReason: 'length',
    ttftMs: 1,
    e2eMs: 2,
  });
  const d = requests.map((r) =>
    result(r.index, r.index === 1 ? '\uFFFD' : ' Moses,', [r.index === 1 ? 200 : 5, 6]),
  );
  const p = requests.map((r) =>
    result(r.index, r.index === 1 ? '\uFFFD' : ' Moses,', [r.index === 1 ? 201 : 5, 6]),
  );
  const samples = pickSamples(requests, d, p, 2);
  assert.deepEqual(
    samples.map((s) => [s.index, s.same_token_ids]),
    [
      [0, true],
      [1, false],
    ],
  );
  const text = renderSamples(samples);
  assert.match(
    text,
    /#0 {2}….*⏎ And the LORD said unto\n {6}disaggregated │ {2}Moses,\n {6}plain {9}│ {2}Moses,\n {6}✓ same token ids/,
  );
  assert.match(text, /#1 [\s\S]*✗ token ids differ/);
});
