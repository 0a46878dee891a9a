/**
 * How soon V8 optimizes the JavaScript of a process that hosts transfer agents.
 *
 * V8 optimizes a function once it has run a given amount of bytecode (its "interrupt budget",
 * 67584 bytes in Node 20) a few times over; until then the function runs in the interpreter
 * or in baseline code. A transfer's per-transfer work (descriptors, grants, leases, frames,
 * checks) is many small functions called a few times per transfer, so with V8's budget a
 * fresh agent needs 5000–9000 transfers before its one-block latency settles
 * (docs/BENCHMARKS.md, "JIT warm-up"; `npm run bench -- transfer-warmup` measures both
 * budgets). With a smaller budget it settles after about half as many: the compiles come
 * sooner, so its first few hundred transfers are slower and the next thousands faster (even
 * over the first thousand). kvconnect's processes (`kvconnect serve`, `proxy`, `demo`, the
 * benchmarks) therefore set a smaller budget at startup: `tuneJit()`.
 * `KVCONNECT_V8_INTERRUPT_BUDGET` overrides it (a number of bytes; `0` keeps V8's default).
 * A library user who hosts agents in a process of their own may call `tuneJit()` first thing.
 *
 * The flag is process-wide (worker threads started later, such as the threaded transfer
 * agent's, use it too) and changes only when code is optimized, never what it computes.
 */
import { setFlagsFromString } from 'node:v8';

export const V8_INTERRUPT_BUDGET_ENV = 'KVCONNECT_V8_INTERRUPT_BUDGET';

/** kvconnect's budget, in bytes of bytecode (V8's is 67584 in Node 20). */
export const DEFAULT_V8_INTERRUPT_BUDGET = 8192;

/** The smallest budget taken: below it V8 would spend its time deciding what to optimize. */
export const MIN_V8_INTERRUPT_BUDGET = 1024;

/**
 * The budget `env` asks for: kvconnect's default when the variable is unset or empty, null for
 * `0` (keep V8's own), else the number; throws a RangeError that says how to fix a bad value.
 */
export function interruptBudgetFrom(env: NodeJS.ProcessEnv = process.env): number | null {
  const raw = env[V8_INTERRUPT_BUDGET_ENV];
  if (raw === undefined || raw.trim() === '') return DEFAULT_V8_INTERRUPT_BUDGET;
  const value = Number(raw);
  if (value === 0) return null;
  if (!(Number.isSafeInteger(value) && value >= MIN_V8_INTERRUPT_BUDGET)) {
    throw new RangeError(
      `${V8_INTERRUPT_BUDGET_ENV} (environment) must be a whole number of bytes ≥ ${MIN_V8_INTERRUPT_BUDGET}, ` +
        `or 0 for V8's own budget, got ${JSON.stringify(raw)}; unset it for kvconnect's default (${DEFAULT_V8_INTERRUPT_BUDGET})`,
    );
  }
  return value;
}

let applied: { budget: number | null } | undefined;

/**
 * Sets V8's interrupt budget for this process from `KVCONNECT_V8_INTERRUPT_BUDGET` (else
 * kvconnect's default), once; later calls return what the first one set. Returns the budget
 * set, or null when V8's own was kept.
 */
export function tuneJit(): number | null {
  if (applied === undefined) {
    const budget = interruptBudgetFrom();
    if (budget !== null) setFlagsFromString(`--interrupt-budget=${budget}`);
    applied = { budget };
  }
  return applied.budget;
}
