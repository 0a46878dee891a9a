/**
 * src/util/jit-tuning.ts: the V8 interrupt budget kvconnect's processes set at startup, its
 * override (KVCONNECT_V8_INTERRUPT_BUDGET) and the usage error for a bad one, in the real
 * binary (spawned: the budget is set once per process).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { promisify } from 'node:util';
import {
  DEFAULT_V8_INTERRUPT_BUDGET,
  interruptBudgetFrom,
  V8_INTERRUPT_BUDGET_ENV,
} from '../../src/util/jit-tuning.ts';

const run = promisify(execFile);

test("the budget: kvconnect's by default, V8's own for 0, else the number", () => {
  assert.equal(interruptBudgetFrom({}), DEFAULT_V8_INTERRUPT_BUDGET);
  assert.equal(interruptBudgetFrom({ [V8_INTERRUPT_BUDGET_ENV]: '' }), DEFAULT_V8_INTERRUPT_BUDGET);
  assert.equal(interruptBudgetFrom({ [V8_INTERRUPT_BUDGET_ENV]: '0' }), null);
  assert.equal(interruptBudgetFrom({ [V8_INTERRUPT_BUDGET_ENV]: '16384' }), 16384);
  assert.equal(interruptBudgetFrom({ [V8_INTERRUPT_BUDGET_ENV]: '1024' }), 1024);
  for (const bad of ['abc', '512', '1.5', '-1', '8k']) {
    assert.throws(
      () => interruptBudgetFrom({ [V8_INTERRUPT_BUDGET_ENV]: bad }),
      new RangeError(
        `KVCONNECT_V8_INTERRUPT_BUDGET (environment) must be a whole number of bytes ≥ 1024, or 0 for V8's own budget, ` +
          `got ${JSON.stringify(bad)}; unset it for kvconnect's default (8192)`,
      ),
    );
  }
});

test('the kvconnect binary takes a good override and refuses a bad one with exit 2', async () => {
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
  assert.equal(
    (bad as { stderr: string }).stderr,
    `error: KVCONNECT_V8_INTERRUPT_BUDGET (environment) must be a whole number of bytes ≥ 1024, or 0 for V8's own budget, got "lots"; unset it for kvconnect's default (8192)\n`,
  );
});
