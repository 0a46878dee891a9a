/**
 * Bounded-time tier operations: every I/O races a timeout, and a failure or timeout turns
 * into the caller's fallback ("miss"). The first failure of an outage logs one warning; the
 * first success after it logs the recovery. Counters feed the connector's metrics.
 */
import { getLogger } from '../../logging/logger.ts';

const log = getLogger('kvconnect.connectors.offloading.tier-health');

export class TierTimeoutError extends Error {
  constructor(what: string, ms: number) {
    super(`${what} did not answer within ${ms} ms`);
    this.name = 'TierTimeoutError';
  }
}

export class TierHealth {
  readonly name: string;
  readonly timeoutMs: number;
  failures = 0;
  timeouts = 0;
  outages = 0;
  #down = false;

  constructor(name: string, timeoutMs: number) {
    this.name = name;
    this.timeoutMs = timeoutMs;
  }

  get isDown(): boolean {
    return this.#down;
  }

  /** Runs `op` within the timeout; on failure returns `fallback()` (never rejects). */
  async run<T>(what: string, op: () => Promise<T>, fallback: () => T): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new TierTimeoutError(`${this.name} ${what}`, this.timeoutMs)),
        this.timeoutMs,
      );
      timer.unref?.();
    });
    try {
      const result = await Promise.race([op(), timeout]);
      this.recovered();
      return result;
    } catch (err) {
      this.failed(err);
      return fallback();
    } finally {
      clearTimeout(timer);
    }
  }

  recovered(): void {
    if (!this.#down) return;
    this.#down = false;
    log.info('%s answers again; offloaded KV is used again', this.name);
  }

  failed(err: unknown): void {
    this.failures++;
    if (err instanceof TierTimeoutError) this.timeouts++;
    if (this.#down) return;
    this.#down = true;
    this.outages++;
    const reason = err instanceof Error ? err.message : String(err);
    log.warn(
      '%s is unavailable (%s); offload lookups count as misses and the engine recomputes until it answers again',
      this.name,
      reason,
    );
  }
}
