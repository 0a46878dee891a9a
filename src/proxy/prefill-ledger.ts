/**
 * Prompt tokens routed to each backend and not yet prefilled there: the queue a new request
 * would wait behind. A routed request adds a ticket (its uncached tokens, and the hash of
 * its last full block); the ticket is settled when that block's BlockStored arrives (the
 * engine caches a block once the step that computes it is scheduled). A request finishes
 * only after its prefill, so a backend never holds more tickets than requests in flight:
 * at 0 in flight its tickets are dropped, and above that the oldest go first (requests
 * that ended without their events, e.g. aborted while queued).
 */

interface Ticket {
  marker: bigint | null;
  tokens: number;
}

export class PrefillLedger {
  readonly #tickets = new Map<string, Ticket[]>();

  /** `tokens` uncached prompt tokens routed to `backend`; `marker` = hash of the last full block (null: none). */
  add(backend: string, tokens: number, marker: bigint | null): void {
    if (tokens <= 0) return;
    let list = this.#tickets.get(backend);
    if (!list) {
      list = [];
      this.#tickets.set(backend, list);
    }
    list.push({ marker, tokens });
  }

  /** BlockStored from `backend`: the tickets whose last block is among `hashes` are prefilled. */
  stored(backend: string, hashes: readonly bigint[]): void {
    const list = this.#tickets.get(backend);
    if (!list || list.length === 0) return;
    const markers = new Set<bigint>();
    for (const t of list) if (t.marker !== null) markers.add(t.marker);
    const done = new Set(hashes.filter((h) => markers.has(h)));
    if (done.size > 0) {
      this.#tickets.set(
        backend,
        list.filter((t) => t.marker === null || !done.has(t.marker)),
      );
    }
  }

  /** Uncached prompt tokens still queued on `backend`, given how many of its requests are in flight. */
  queuedTokens(backend: string, inFlight: number): number {
    const list = this.#tickets.get(backend);
    if (!list) return 0;
    if (list.length > inFlight) list.splice(0, list.length - Math.max(0, inFlight));
    let sum = 0;
    for (const t of list) sum += t.tokens;
    return sum;
  }

  /** Requests routed to `backend` whose prefill has not been reported yet. */
  queuedRequests(backend: string): number {
    return this.#tickets.get(backend)?.length ?? 0;
  }

  clear(backend: string): void {
    this.#tickets.delete(backend);
  }
}
