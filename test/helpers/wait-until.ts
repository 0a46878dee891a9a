/**
 * Waiting on a condition instead of sleeping a fixed time: a loaded machine makes any fixed
 * sleep too short sometimes, while a condition is either reached or reported with what it was.
 */

export interface WaitOptions {
  /** Give up after this long (default 10 s: generous, only a broken run waits that long). */
  readonly timeoutMs?: number;
  /** Poll interval (default 10 ms). */
  readonly intervalMs?: number;
}

/** Resolves with the first truthy value of `probe()`; rejects naming `what` when the time is up. */
export async function waitUntil<T>(
  what: string,
  probe: () => T | Promise<T>,
  options: WaitOptions = {},
): Promise<NonNullable<T>> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const intervalMs = options.intervalMs ?? 10;
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  for (;;) {
    last = await probe();
    if (last) return last as NonNullable<T>;
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last value: ${String(last)})`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** Resolves after `ms`; only for pacing a workload, never before asserting a state. */
export function pause(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
