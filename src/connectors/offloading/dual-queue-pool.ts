/**
 * The fs tier's I/O workers (`n_read_threads`, `n_write_threads`), scheduled as vLLM's
 * DualQueueThreadPool schedules its threads: read-priority workers take queued reads
 * first, write-priority workers take queued writes first, and a worker whose own queue is
 * empty takes from the other one, so neither direction starves and a burst of write-through
 * never keeps a load waiting while a read worker is free. Each worker runs one operation at
 * a time; the file system calls themselves run on Node's libuv thread pool.
 */

type Task = () => Promise<void>;

export class DualQueuePool {
  readonly readWorkers: number;
  readonly writeWorkers: number;
  readonly #reads: Task[] = [];
  readonly #writes: Task[] = [];
  #idleRead: number;
  #idleWrite: number;
  #idleWaiters: (() => void)[] = [];

  constructor(readWorkers: number, writeWorkers: number) {
    if (!(readWorkers >= 1 && writeWorkers >= 1)) {
      throw new RangeError(
        `DualQueuePool needs at least one worker of each kind, got ${readWorkers}/${writeWorkers}`,
      );
    }
    this.readWorkers = readWorkers;
    this.writeWorkers = writeWorkers;
    this.#idleRead = readWorkers;
    this.#idleWrite = writeWorkers;
  }

  /** Operations waiting for a worker. */
  get queued(): { reads: number; writes: number } {
    return { reads: this.#reads.length, writes: this.#writes.length };
  }

  /** Operations running now. */
  get running(): number {
    return this.readWorkers - this.#idleRead + this.writeWorkers - this.#idleWrite;
  }

  read<T>(op: () => Promise<T>): Promise<T> {
    return this.#enqueue(this.#reads, op);
  }

  write<T>(op: () => Promise<T>): Promise<T> {
    return this.#enqueue(this.#writes, op);
  }

  /** Resolves once nothing is queued or running. */
  idle(): Promise<void> {
    if (this.running === 0 && this.#reads.length === 0 && this.#writes.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /** Starts queued operations on idle workers of `kind`: their own queue first, then the other. */
  #drain(kind: 'read' | 'write', own: Task[], other: Task[]): void {
    while ((kind === 'read' ? this.#idleRead : this.#idleWrite) > 0) {
      const task = own.shift() ?? other.shift();
      if (!task) break;
      this.#setIdle(kind, -1);
      void task().finally(() => {
        this.#setIdle(kind, 1);
        this.#pump();
      });
    }
  }

  #setIdle(kind: 'read' | 'write', delta: number): void {
    if (kind === 'read') this.#idleRead += delta;
    else this.#idleWrite += delta;
  }

  #enqueue<T>(queue: Task[], op: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      queue.push(() => op().then(resolve, reject));
      this.#pump();
    });
  }

  #pump(): void {
    this.#drain('read', this.#reads, this.#writes);
    this.#drain('write', this.#writes, this.#reads);
    if (this.running === 0 && this.#reads.length === 0 && this.#writes.length === 0) {
      const waiters = this.#idleWaiters;
      this.#idleWaiters = [];
      for (const w of waiters) w();
    }
  }
}
