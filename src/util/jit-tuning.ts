/**
 * An opt-in V8 setting for processes that host transfer agents: how soon V8 optimizes their
 * JavaScript.
 *
 * V8 optimizes a function once it has run a given amount of bytecode (its "interrupt budget",
 * 67584 bytes in Node 20) a few times over; until then the function runs in the interpreter
 * or in baseline code. A transfer's per-transfer work (descriptors, grants, leases, frames,
 * checks) is many small functions called a few times per transfer, so with V8's budget a
 * fresh agent needs thousands of transfers before its one-block latency settles
 * (docs/transfer.md "JIT warm-up"; `npm run bench -- transfer-warmup` measures it against
 * a smaller budget). With `KVCONNECT_V8_INTERRUPT_BUDGET=8192` it settles sooner, but the
 * compiles come sooner and share the cores: the first few hundred transfers are slower, and
 * so are a short-lived server's first requests.
 * So kvconnect keeps V8's budget unless the variable is set; `tuneJit()`, which kvconnect's
 * processes (`kvconnect serve`, `proxy`, `demo`, the benchmarks) call at startup, applies it.
 * A library user who hosts agents in a process of their own may call it first thing.
 *
 * The flag is process-wide (worker threads started later, such as the threaded transfer
 * agent's, use it too) and changes only when code is optimized, never what it computes.
 */
import { setFlagsFromString } from 'node:v8';
import { type Environment, type EnvName, readEnv } from './envs.ts';

export const V8_INTERRUPT_BUDGET_ENV = 'KVCONNECT_V8_INTERRUPT_BUDGET' satisfies EnvName;

/** V8's own budget in Node 20, in bytes of bytecode (for messages; kvconnect does not set it). */
export const V8_OWN_INTERRUPT_BUDGET = 67584;

/** The smallest budget taken: below it V8 would spend its time deciding what to optimize. */
export const MIN_V8_INTERRUPT_BUDGET = 1024;

/**
 * The budget `env` asks for: null (keep V8's own) when the variable is unset, empty or `0`, else
 * the number; throws a RangeError that says how to fix a bad value.
 */
export function interruptBudgetFrom(env?: Environment): number | null {
  const raw = readEnv(V8_INTERRUPT_BUDGET_ENV, env);
  if (raw === undefined || raw.trim() === '') return null;
  const value = Number(raw);
  if (value === 0) return null;
  if (!(Number.isSafeInteger(value) && value >= MIN_V8_INTERRUPT_BUDGET)) {
    throw new RangeError(
      `${V8_INTERRUPT_BUDGET_ENV} (environment) must be a whole number of bytes ≥ ${MIN_V8_INTERRUPT_BUDGET}, ` +
        `or 0 for V8's own budget, got ${JSON.stringify(raw)}; unset it to keep V8's own (${V8_OWN_INTERRUPT_BUDGET})`,
    );
  }
  return value;
}

let applied: { budget: number | null } | undefined;

/**
 * Sets V8's interrupt budget for this process from `KVCONNECT_V8_INTERRUPT_BUDGET`, once (later
 * calls return what the first one did). Returns the budget set, or null when V8's own was kept.
 */
export function tuneJit(): number | null {
  if (applied === undefined) {
    const budget = interruptBudgetFrom();
    if (budget !== null) setFlagsFromString(`--interrupt-budget=${budget}`);
    applied = { budget };
  }
  return applied.budget;
}
