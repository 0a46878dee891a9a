/**
 * `kvconnect demo --connector MoRIIOConnector` end to end, in WRITE mode (xgmi backend: shm
 * transport) and READ mode (rdma backend: tcp transport): exit 0, identical outputs, D
 * computes at most one prompt token per request, and the transfer figures (read from the
 * vllm:moriio_* series of P in WRITE mode, of D in READ mode) are real numbers.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { DemoSummary } from '../../src/demo/summary.ts';
import { runDemoCli } from './helpers/run-cli.ts';

const SMALL = ['--requests', '6', '--families', '2', '--concurrency', '2', '--max-tokens', '6'];

async function runMoriio(extra: string[]): Promise<{ summary: DemoSummary; out: string; err: string }> {
  const demo = runDemoCli(['--connector', 'MoRIIOConnector', '--json', ...SMALL, ...extra]);
  try {
    const code = await demo.exited;
    assert.equal(code, 0, `exit ${code}\nstdout:\n${demo.out()}\nstderr:\n${demo.err()}`);
    const summary = JSON.parse(demo.out().trim().split('\n').at(-1) ?? '') as DemoSummary;
    return { summary, out: demo.out(), err: demo.err() };
  } finally {
    demo.killGroup();
  }
}

function assertDisaggregated(summary: DemoSummary): void {
  assert.equal(summary.connector, 'MoRIIOConnector');
  assert.equal(summary.requests, 6);
  assert.equal(summary.outputs_identical, true);
  assert.equal(summary.identical_count, 6);
  assert.deepEqual(summary.mismatches, []);
  assert.ok(
    summary.prompt_tokens_computed.decode <= summary.requests,
    `D computed ${summary.prompt_tokens_computed.decode} prompt tokens for ${summary.requests} requests`,
  );
  assert.ok(summary.decode_tokens_loaded > 0, 'D loaded nothing from P');
  assert.ok(summary.prompt_tokens_computed.prefill > 0, 'P computed nothing');
  assert.equal(summary.prompt_tokens_computed.prefill, summary.prompt_tokens_computed.plain);
  // Every prompt block moves (D has nothing cached), at least a block per request.
  assert.equal(typeof summary.kv_bytes_moved, 'number');
  assert.ok((summary.kv_blocks_moved ?? 0) >= summary.requests, `moved ${summary.kv_blocks_moved} blocks`);
  assert.ok((summary.kv_transfers ?? 0) >= summary.requests, `${summary.kv_transfers} transfers`);
  assert.ok((summary.transfer_gb_per_s ?? 0) > 0, `throughput ${summary.transfer_gb_per_s}`);
  assert.equal(summary.failed_transfers, 0);
}

/** The table shows figures, not n/a, for the transfer rows. */
function assertTableFigures(out: string): void {
  assert.match(out, /KV moved P→D\s+[\d.]+ (KiB|MiB|B) · \d+ blocks · \d+ transfers/);
  assert.match(out, /transfer throughput\s+[\d.]+ GB\/s/);
  assert.match(out, /failed transfers\s+0/);
  assert.doesNotMatch(out, /n\/a/);
}

test('MoRIIO WRITE mode (default, xgmi): exit 0, outputs identical, D computes ≤ 1 prompt token a request', async () => {
  const { summary, out } = await runMoriio([]);
  assertDisaggregated(summary);
  assert.equal(summary.transfer_mode, 'WRITE', 'P reports WRITE in GET /kvconnect/info');
  assert.equal(summary.moriio_backend, 'xgmi');
  assert.match(out, /kvconnect demo — MoRIIOConnector \(WRITE, xgmi\)/);
  assertTableFigures(out);
  assert.match(out, /outputs identical\s+✓ 6\/6/);
});

test('MoRIIO READ mode (rdma): exit 0, outputs identical, D computes ≤ 1 prompt token a request', async () => {
  const { summary, out } = await runMoriio(['--moriio-read-mode', '--moriio-backend', 'rdma']);
  assertDisaggregated(summary);
  assert.equal(summary.transfer_mode, 'READ', 'P reports READ in GET /kvconnect/info');
  assert.equal(summary.moriio_backend, 'rdma');
  assert.match(out, /kvconnect demo — MoRIIOConnector \(READ, rdma\)/);
  assertTableFigures(out);
});
