/** `kvconnect demo --json` end to end: exit 0, identical outputs, KV really moved. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { DemoSummary } from '../../src/demo/summary.ts';
import { runDemoCli } from './helpers/run-cli.ts';

test('kvconnect demo --json exits 0 with identical outputs and prints the table and one JSON line', async () => {
  const demo = runDemoCli([
    '--json',
    '--requests',
    '8',
    '--families',
    '2',
    '--concurrency',
    '2',
    '--max-tokens',
    '8',
  ]);
  try {
    const code = await demo.exited;
    assert.equal(code, 0, `exit ${code}\nstdout:\n${demo.out()}\nstderr:\n${demo.err()}`);
    const lines = demo.out().trim().split('\n');
    const summary = JSON.parse(lines.at(-1) ?? '') as DemoSummary;
    assert.equal(summary.connector, 'NixlConnector');
    assert.equal(summary.requests, 8);
    assert.equal(summary.outputs_identical, true);
    assert.equal(summary.identical_count, 8);
    assert.equal(summary.transfer_mode, 'pull');
    assert.equal(summary.moriio_backend, null);
    assert.ok((summary.kv_bytes_moved ?? 0) > 0 && (summary.kv_blocks_moved ?? 0) > 0, 'no KV moved');
    assert.ok(
      summary.prompt_tokens_computed.decode <= summary.requests,
      'D computed more than 1 token a request',
    );
    assert.ok(summary.decode_tokens_loaded > 0, 'D loaded nothing from P');
    assert.ok(summary.prefix_cache_hit_rate.plain > 0, 'shared prefixes should hit the prefix cache');
    assert.ok(summary.ttft_p50_ms.disaggregated > 0 && summary.ttft_p50_ms.plain > 0);
    assert.match(demo.out(), /outputs identical\s+✓ 8\/8/);
    // Two samples (one per family), shown with both completions: readable words, equal token ids.
    assert.equal(summary.samples.length, 2);
    for (const s of summary.samples) {
      assert.equal(s.same_token_ids, true);
      assert.equal(s.disaggregated, s.plain);
      assert.match(s.disaggregated, /[A-Za-z]{2,}/, 'the default model writes words');
      assert.ok(!s.disaggregated.includes('\uFFFD'), 'no broken characters');
      assert.ok(demo.out().includes(`disaggregated │ ${s.disaggregated.replaceAll('\n', ' ⏎ ')}`));
    }
    assert.match(demo.err(), /disaggregated .* 8\/8/);
  } finally {
    demo.killGroup();
  }
});

test('an unknown connector fails with exit 2 and a hint', async () => {
  const unknown = runDemoCli(['--connector', 'NoSuchConnector']);
  try {
    assert.equal(await unknown.exited, 2);
    assert.match(unknown.err(), /error\[DEMO_CONNECTOR_UNSUPPORTED\]: Unknown connector "NoSuchConnector"/);
    assert.match(unknown.err(), /hint: Pass --connector with one of: NixlConnector.*MoRIIOConnector/);
  } finally {
    unknown.killGroup();
  }
});
