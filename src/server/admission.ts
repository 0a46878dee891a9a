/**
 * Bounded admission: at most `capacity` engine requests (choices) in flight; beyond that
 * the server answers 503 at once instead of queueing without limit.
 */
import { KVError } from '../errors/index.ts';

export class AdmissionGate {
  readonly capacity: number;
  #inFlight = 0;

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  /** Reserves `count` slots or throws a 503. */
  acquire(count: number): void {
    if (this.#inFlight + count > this.capacity) {
      throw new KVError(
        'SERVER_QUEUE_FULL',
        `The server is overloaded: ${this.#inFlight} requests in flight, capacity ${this.capacity}.`,
        {
          hint: 'Retry later with backoff, send fewer concurrent requests, or raise maxQueue / --max-num-seqs.',
        },
      );
    }
    this.#inFlight += count;
  }

  release(count: number): void {
    this.#inFlight = Math.max(0, this.#inFlight - count);
  }
}
