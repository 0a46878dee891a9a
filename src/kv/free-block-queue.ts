/**
 * The free list: a doubly-linked list over preallocated Int32Arrays (no allocation per
 * block). Blocks are taken from the head; freed blocks go to the tail, so the head holds
 * the least recently freed block: cached-but-free blocks are evicted in LRU order.
 */
export class FreeBlockQueue {
  readonly #next: Int32Array;
  readonly #prev: Int32Array;
  readonly #inQueue: Uint8Array;
  /** Index `capacity` is the sentinel: next[sentinel] = head, prev[sentinel] = tail. */
  readonly #sentinel: number;
  #size = 0;

  constructor(capacity: number) {
    this.#next = new Int32Array(capacity + 1);
    this.#prev = new Int32Array(capacity + 1);
    this.#inQueue = new Uint8Array(capacity);
    this.#sentinel = capacity;
    this.#next[capacity] = capacity;
    this.#prev[capacity] = capacity;
    for (let id = 0; id < capacity; id++) this.append(id);
  }

  get size(): number {
    return this.#size;
  }

  has(id: number): boolean {
    return this.#inQueue[id] === 1;
  }

  popLeft(): number {
    const s = this.#sentinel;
    const id = this.#next[s]!;
    if (id === s) throw new Error('FreeBlockQueue is empty');
    this.remove(id);
    return id;
  }

  remove(id: number): void {
    if (this.#inQueue[id] !== 1) throw new Error(`block ${id} is not in the free queue`);
    const p = this.#prev[id]!;
    const n = this.#next[id]!;
    this.#next[p] = n;
    this.#prev[n] = p;
    this.#inQueue[id] = 0;
    this.#size--;
  }

  append(id: number): void {
    if (this.#inQueue[id] === 1) throw new Error(`block ${id} is already in the free queue`);
    const s = this.#sentinel;
    const tail = this.#prev[s]!;
    this.#next[tail] = id;
    this.#prev[id] = tail;
    this.#next[id] = s;
    this.#prev[s] = id;
    this.#inQueue[id] = 1;
    this.#size++;
  }

  /** Ids from head (next to be handed out) to tail. */
  toArray(): number[] {
    const out: number[] = [];
    for (let id = this.#next[this.#sentinel]!; id !== this.#sentinel; id = this.#next[id]!) out.push(id);
    return out;
  }
}
