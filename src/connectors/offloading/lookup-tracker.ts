/**
 * store_threshold (docs/connectors/offloading.md#options-kv_connector_extra_config): a block
 * becomes worth offloading only after it has been looked up that many times. Counts live in
 * an LRU bounded to 64000 keys, so a stream of one-off prompts cannot grow it without bound.
 */
import { STORE_THRESHOLD_TRACKER_SIZE } from './config.ts';

export class LookupTracker {
  readonly threshold: number;
  readonly maxSize: number;
  readonly #counts = new Map<string, number>();

  constructor(threshold: number, maxSize = STORE_THRESHOLD_TRACKER_SIZE) {
    this.threshold = threshold;
    this.maxSize = maxSize;
  }

  get enabled(): boolean {
    return this.threshold >= 2;
  }

  get size(): number {
    return this.#counts.size;
  }

  record(key: string): void {
    if (!this.enabled) return;
    const n = (this.#counts.get(key) ?? 0) + 1;
    this.#counts.delete(key);
    this.#counts.set(key, n);
    if (this.#counts.size > this.maxSize) {
      const oldest = this.#counts.keys().next();
      if (!oldest.done) this.#counts.delete(oldest.value);
    }
  }

  count(key: string): number {
    return this.#counts.get(key) ?? 0;
  }

  shouldStore(key: string): boolean {
    return !this.enabled || this.count(key) >= this.threshold;
  }
}
