/**
 * The retries one client request may take (`--max-retries`, `--retry-deadline-ms`): a
 * prefill or decode leg sent again to another instance, or a stream continued there. Each
 * retry taken is counted in `kvconnect:proxy_retries_total{leg,reason}` and logged.
 */
import { getLogger } from '../logging/logger.ts';
import type { Backend } from './backend.ts';
import type { ProxyMetrics, RetryReason } from './proxy-metrics.ts';

const log = getLogger('kvconnect.proxy.retry-budget');

export type RetryLeg = 'prefill' | 'decode' | 'resume';

export class RetryBudget {
  readonly #max: number;
  readonly #deadline: number;
  readonly #deadlineMs: number;
  readonly #metrics: ProxyMetrics;
  readonly #requestId: string;
  #used = 0;

  constructor(
    limits: { maxRetries: number; retryDeadlineMs: number },
    metrics: ProxyMetrics,
    requestId: string,
    start = Date.now(),
  ) {
    this.#max = limits.maxRetries;
    this.#deadlineMs = limits.retryDeadlineMs;
    this.#deadline = start + limits.retryDeadlineMs;
    this.#metrics = metrics;
    this.#requestId = requestId;
  }

  get used(): number {
    return this.#used;
  }

  /** Whether one more retry may start after `from` failed; counts and logs it when it may. */
  take(leg: RetryLeg, reason: RetryReason, from: Backend, why: string): boolean {
    const what = leg === 'resume' ? 'stream from decode' : `${leg} leg on`;
    if (this.#used >= this.#max) {
      log.warn(
        'request %s: %s %s failed (%s); no retry left (--max-retries %d)',
        this.#requestId,
        what,
        from.url,
        why,
        this.#max,
      );
      return false;
    }
    if (Date.now() > this.#deadline) {
      log.warn(
        'request %s: %s %s failed (%s); past --retry-deadline-ms %d, not retried',
        this.#requestId,
        what,
        from.url,
        why,
        this.#deadlineMs,
      );
      return false;
    }
    this.#used += 1;
    this.#metrics.retries.inc({ leg, reason });
    log.warn(
      'request %s: %s %s failed (%s); %s (retry %d of %d)',
      this.#requestId,
      what,
      from.url,
      why,
      leg === 'resume' ? 'continuing it on another decode instance' : 'retrying on another instance',
      this.#used,
      this.#max,
    );
    return true;
  }
}
