/**
 * KvLoadFaults on the connector output of a step: a failed load stays finished with its
 * blocks invalid, a stalled one is reported only once its time has passed, the draws follow
 * the rates (seeded), and bad settings are config errors naming the field.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildKvLoadFaults } from '../../src/config/fault-injection.ts';
import { emptyConnectorOutput, type KVConnectorOutput } from '../../src/connector/types.ts';
import { KvLoadFaults } from '../../src/engine/kv-load-faults.ts';
import { setLogLevel } from '../../src/logging/logger.ts';
import { kvError } from '../helpers/kv-error.ts';

setLogLevel('error');

const recv = (...ids: string[]): KVConnectorOutput => ({ ...emptyConnectorOutput(), finishedRecving: ids });
const blocks = (id: string): number[] => [Number(id.slice(1)) * 10, Number(id.slice(1)) * 10 + 1];

test('a failed load is still finished, with every loaded block invalid', () => {
  const f = new KvLoadFaults({ failureRate: 100, stallRate: 0, stallNs: 0 });
  const out = f.apply({ ...recv('r1', 'r2'), invalidBlockIds: [5] }, blocks);
  assert.deepEqual(out?.finishedRecving, ['r1', 'r2']);
  assert.deepEqual(out?.invalidBlockIds, [5, 10, 11, 20, 21]);
});

test('a stalled load is reported once its time has passed, even in a step with no output', () => {
  let now = 1000;
  const f = new KvLoadFaults({ failureRate: 0, stallRate: 100, stallNs: 500e6 }, 0, () => now);
  assert.equal(f.apply(recv('r1'), blocks)?.finishedRecving, null);
  assert.equal(f.stalled, 1);
  now = 1499;
  assert.equal(f.apply(null, blocks), null);
  now = 1500;
  assert.deepEqual(f.apply(null, blocks)?.finishedRecving, ['r1']);
  assert.equal(f.stalled, 0);
});

test('draws follow the rates; off changes nothing', () => {
  const off = new KvLoadFaults({ failureRate: 0, stallRate: 0, stallNs: 0 });
  const output = recv('r1');
  assert.equal(off.apply(output, blocks), output);
  const f = new KvLoadFaults({ failureRate: 25, stallRate: 25, stallNs: 1e12 }, 7);
  let failed = 0;
  let stalled = 0;
  const n = 2000;
  for (let i = 0; i < n; i++) {
    const out = f.apply(recv(`r${i}`), blocks);
    if (out?.finishedRecving === null) stalled++;
    else if ((out?.invalidBlockIds.length ?? 0) > 0) failed++;
  }
  const sigma = Math.sqrt(n * 0.25 * 0.75);
  assert.ok(Math.abs(failed - n / 4) <= 4 * sigma, `failed ${failed}`);
  assert.ok(Math.abs(stalled - n / 4) <= 4 * sigma, `stalled ${stalled}`);
});

test('settings are validated by name', () => {
  assert.deepEqual(
    buildKvLoadFaults({
      'kv-load-failure-rate': '10',
      'kv-load-stall-rate': '5',
      'kv-load-stall-duration': '2s',
    }),
    { failureRate: 10, stallRate: 5, stallNs: 2e9 },
  );
  for (const [values, field] of [
    [{ 'kv-load-failure-rate': '-1' }, 'kv-load-failure-rate'],
    [{ 'kv-load-stall-rate': '10' }, 'kv-load-stall-duration'],
    [{ 'kv-load-stall-duration': 'soon' }, 'kv-load-stall-duration'],
    [
      { 'kv-load-failure-rate': '70', 'kv-load-stall-rate': '40', 'kv-load-stall-duration': '1s' },
      'kv-load-stall-rate',
    ],
  ] as const) {
    assert.equal(kvError(() => buildKvLoadFaults(values)).field, field);
  }
});
