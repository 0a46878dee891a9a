/**
 * Busy polling: keeps an agent's event loop from sleeping for a short window after transfer
 * activity on its connections (a frame sent, bytes received), so the next frame is picked up
 * by a loop that is already running instead of one the kernel must wake.
 *
 * Why: a peer's frame that finds this process asleep costs a wake-up on top of the socket's
 * own cost, and on a virtual machine each wake-up of an idle vCPU is a VM exit and entry.
 * Polling lowers a one-block round trip's p50 and raises its p99 (docs/transfer.md "Busy
 * polling" has the figures). UCX does the same
 * (its caller progresses the worker in a loop; NIXL's UCX backend runs a progress thread).
 *
 * How: while the window is open, one `setImmediate` callback per loop turn re-arms itself, so
 * libuv polls its sockets with a zero timeout instead of blocking. Other callbacks (the
 * engine's timers, HTTP requests) run in between as usual: polling burns this thread's idle
 * time, it does not hold the thread. The window closes `windowUs` after the last activity;
 * nothing polls while the agent is idle. 0 turns it off. The immediate stays referenced: an
 * unreferenced one would let libuv block in its poll again, which is what this avoids.
 * While a window is open it keeps the process alive, at most `windowUs` past the last activity.
 */
export class BusyPoll {
  readonly windowUs: number;
  readonly #windowMs: number;
  readonly #now: () => number;
  #last = 0;
  #timer: NodeJS.Immediate | null = null;
  #turns = 0;

  /** `now` (ms) is the clock the window is measured on; tests pass their own. */
  constructor(windowUs: number, now: () => number = () => performance.now()) {
    this.windowUs = windowUs;
    this.#windowMs = windowUs / 1000;
    this.#now = now;
  }

  /** Transfer activity: (re)opens the window. */
  readonly touch = (): void => {
    if (this.windowUs === 0) return;
    this.#last = this.#now();
    this.#timer ??= setImmediate(this.#turn);
  };

  readonly #turn = (): void => {
    this.#turns++;
    this.#timer = this.#now() - this.#last < this.#windowMs ? setImmediate(this.#turn) : null;
  };

  /** Whether the loop is being kept awake now. */
  get polling(): boolean {
    return this.#timer !== null;
  }

  /** Loop turns spent polling so far (for tests and stats). */
  get turns(): number {
    return this.#turns;
  }

  /** Closes the window now (the agent is closing). */
  stop(): void {
    if (this.#timer !== null) clearImmediate(this.#timer);
    this.#timer = null;
  }
}
