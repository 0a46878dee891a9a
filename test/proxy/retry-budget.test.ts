/**
 * RetryBudget: the --max-retries and --retry-deadline-ms limits one request's retries draw on,
 * and the kvconnect:proxy_retries_total count of the retries it allowed.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setLogLevel } from '../../src/logging/logger.ts';
import { Backend } from '../../src/proxy/backend.ts';
import { ProxyMetrics } from '../../src/proxy/proxy-metrics.ts';
import { RetryBudget } from '../../src/proxy/retry-budget.ts';

setLogLevel('silent');

const backend = new Backend('http://127.0.0.1:1', 'decode', 'cli', true);

async function retriesCounted(metrics: ProxyMetrics): Promise<number> {
  const { values } = await metrics.retries.get();
  return values.reduce((sum, v) => sum + v.value, 0);
}

test('--max-retries: the retries after the last allowed one are refused and not counted', async () => {
  const metrics = new ProxyMetrics();
  const budget = new RetryBudget({ maxRetries: 2, retryDeadlineMs: 60_000 }, metrics, 'r1');
  assert.equal(budget.take('prefill', 'connect', backend, 'refused'), true);
  assert.equal(budget.take('decode', 'status', backend, 'answered 500'), true);
  assert.equal(budget.take('resume', 'interrupted', backend, 'cut'), false);
  assert.equal(budget.used, 2);
  assert.equal(await retriesCounted(metrics), 2);
  const { values } = await metrics.retries.get();
  assert.deepEqual(
    values.map((v) => v.labels).sort((a, b) => String(a.leg).localeCompare(String(b.leg))),
    [
      { leg: 'decode', reason: 'status' },
      { leg: 'prefill', reason: 'connect' },
    ],
  );
});

test('--max-retries 0: no retry at all', async () => {
  const metrics = new ProxyMetrics();
  const budget = new RetryBudget({ maxRetries: 0, retryDeadlineMs: 60_000 }, metrics, 'r2');
  assert.equal(budget.take('decode', 'connect', backend, 'refused'), false);
  assert.equal(budget.used, 0);
  assert.equal(await retriesCounted(metrics), 0);
});

test('--retry-deadline-ms: no retry starts after the deadline, whatever retries are left', async () => {
  const metrics = new ProxyMetrics();
  const arrived = Date.now();
  const within = new RetryBudget({ maxRetries: 3, retryDeadlineMs: 60_000 }, metrics, 'r3', arrived);
  assert.equal(within.take('decode', 'connect', backend, 'refused'), true);
  const late = new RetryBudget({ maxRetries: 3, retryDeadlineMs: 1_000 }, metrics, 'r4', arrived - 5_000);
  assert.equal(late.take('decode', 'connect', backend, 'refused'), false);
  assert.equal(late.used, 0);
  assert.equal(await retriesCounted(metrics), 1);
});
