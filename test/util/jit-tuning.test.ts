/**
 * src/util/jit-tuning.ts: the opt-in V8 interrupt budget (KVCONNECT_V8_INTERRUPT_BUDGET) that
 * kvconnect's processes apply at startup, and the usage error for a bad value, in the real
 * binary (spawned: the budget is set once per process).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { interruptBudgetFrom, V8_INTERRUPT_BUDGET_ENV } from '../../src/util/jit-tuning.ts';

const run = promisify(execFile);
const MESSAGE = (got: string) =>
  `KVCONNECT_V8_INTERRUPT_BUDGET (environment) must be a whole number of bytes ≥ 1024, or 0 for V8's own budget, ` +
  `got ${JSON.stringify(got)}; unset it to keep V8's own (67584)`;

test("the budget: V8's own unless the variable names one", () => {
  assert.equal(interruptBudgetFrom({}), null);
  assert.equal(interruptBudgetFrom({ [V8_INTERRUPT_BUDGET_ENV]: '' }), null);
  assert.equal(interruptBudgetFrom({ [V8_INTERRUPT_BUDGET_ENV]: '0' }), null);
  assert.equal(interruptBudgetFrom({ [V8_INTERRUPT_BUDGET_ENV]: '8192' }), 8192);
  assert.equal(interruptBudgetFrom({ [V8_INTERRUPT_BUDGET_ENV]: '1024' }), 1024);
  for (const bad of ['abc', '512', '1.5', '-1', '8k']) {
    assert.throws(
      () => interruptBudgetFrom({ [V8_INTERRUPT_BUDGET_ENV]: bad }),
      new RangeError(MESSAGE(bad)),
    );
  }
});

test('the kvconnect binary takes a good budget and refuses a bad one with exit 2', async () => {
  const cli = (value: string) =>
    run(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'check-config', '--help'], {
      env: { ...process.env, [V8_INTERRUPT_BUDGET_ENV]: value },
    });
  for (const good of ['0', '4096']) {
    const ok = await cli(good);
    assert.match(ok.stdout, /^Usage: kvconnect check-config/m, good);
  }
  const bad = await cli('lots').catch((e: { code: number; stderr: string }) => e);
  assert.equal((bad as { code: number }).code, 2);
  assert.equal((bad as { stderr: string }).stderr, `error: ${MESSAGE('lots')}\n`);
});
