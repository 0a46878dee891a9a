/**
 * Lease expiries in a binary min-heap. Renewals push a new entry and leave the old one to be
 * skipped when popped (lazy deletion), so a heartbeated entry never blocks the reaping of
 * later, already expired ones (vLLM #58222 assumed insertion order = expiry order).
 */
interface Entry {
  readonly key: string;
  readonly expiresAt: number;
}

export class LeaseHeap {
  readonly #heap: Entry[] = [];
  readonly #current = new Map<string, number>();

  get size(): number {
    return this.#current.size;
  }

  has(key: string): boolean {
    return this.#current.has(key);
  }

  expiryOf(key: string): number | undefined {
    return this.#current.get(key);
  }

  /** Starts a lease, or moves it (extend only unless `allowShorten`). Returns the expiry in force. */
  set(key: string, expiresAt: number, allowShorten = true): number {
    const cur = this.#current.get(key);
    if (cur !== undefined && !allowShorten && expiresAt <= cur) return cur;
    this.#current.set(key, expiresAt);
    this.#push({ key, expiresAt });
    return expiresAt;
  }

  delete(key: string): boolean {
    return this.#current.delete(key);
  }

  /** Removes and returns every key whose lease ended at or before `now`. */
  popExpired(now: number): string[] {
    const out: string[] = [];
    while (this.#heap.length > 0 && this.#heap[0]!.expiresAt <= now) {
      const top = this.#pop();
      if (this.#current.get(top.key) === top.expiresAt) {
        this.#current.delete(top.key);
        out.push(top.key);
      }
    }
    return out;
  }

  #push(e: Entry): void {
    const h = this.#heap;
    h.push(e);
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (h[parent]!.expiresAt <= h[i]!.expiresAt) break;
      [h[parent], h[i]] = [h[i]!, h[parent]!];
      i = parent;
    }
  }

  #pop(): Entry {
    const h = this.#heap;
    const top = h[0]!;
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && h[l]!.expiresAt < h[m]!.expiresAt) m = l;
        if (r < h.length && h[r]!.expiresAt < h[m]!.expiresAt) m = r;
        if (m === i) break;
        [h[m], h[i]] = [h[i]!, h[m]!];
        i = m;
      }
    }
    return top;
  }
}
