/**
 * The engine's clock: the time its metrics, request timestamps and KV events read, and the
 * one place where an emulated step is held until its modelled duration has passed.
 *
 * At speedup 1 it is the wall clock and `holdStep` waits for real. At speedup R emulated time
 * is R × the real time since the clock started, plus any jumps: a hold waits 1/R of the
 * modelled time and, when the timer cannot wait that little (under a millisecond), the
 * emulated clock jumps forward instead, so a step never takes less emulated time than modelled.
 *
 * Timers fire late (a millisecond or more on a busy machine), and the engine works between
 * one hold and the next step (outputs, SSE writes, events, the next schedule: milliseconds at
 * a large batch). When a step continues the previous one (the engine says so: some request
 * ran in both), the real time from the previous hold's deadline to this step's start is
 * credited to it (up to half a step), so steps run back to back keep the modelled period
 * instead of drifting by the timer's lateness and the host's per-step work. A step that does
 * not continue one (the first after an idle spell, a new request's prefill on an idle engine)
 * gets no credit, however soon it starts. A step whose own work outlasts the model is not paid
 * back by the next ones: they count from when its work ended.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { wallClockMs } from '../iteration-stats.ts';

/** Node's timers count whole milliseconds: shorter waits are jumped over (speedup > 1). */
const MIN_TIMER_MS = 1;
/** At speedup 1, a step may end this early (real ms) rather than wait a whole timer tick. */
const EARLY_SLACK_MS = 0.2;

export class EngineClock {
  readonly speedup: number;
  readonly #realNow: () => number;
  readonly #wait: (ms: number) => Promise<unknown>;
  readonly #origin: number;
  /** Emulated ms added by jumps (speedup > 1 only). */
  #jumpMs = 0;
  /** Real time the last hold was due. */
  #lastDeadline = Number.NEGATIVE_INFINITY;
  /** Emulated ms of the steps held so far, and how many (for stats and tests). */
  #heldMs = 0;
  #heldSteps = 0;

  /** `realNow` and `wait` (a timer of real ms) are the wall clock's unless a test drives them. */
  constructor(
    speedup = 1,
    realNow: () => number = wallClockMs,
    wait: (ms: number) => Promise<unknown> = sleep,
  ) {
    this.speedup = speedup;
    this.#realNow = realNow;
    this.#wait = wait;
    this.#origin = realNow();
  }

  /** Emulated epoch milliseconds. */
  now(): number {
    const real = this.#realNow();
    if (this.speedup === 1) return real;
    return this.#origin + (real - this.#origin) * this.speedup + this.#jumpMs;
  }

  /** Real-time mark for the start of a step (pass it to holdStep). */
  stepStart(): number {
    return this.#realNow();
  }

  /** Totals of the modelled step time applied so far. */
  stats(): { heldSteps: number; heldMs: number } {
    return { heldSteps: this.#heldSteps, heldMs: this.#heldMs };
  }

  /**
   * Returns once `emulatedMs` of emulated time has passed since `startedAt` (from stepStart).
   * `continues`: the step continues the previous held one (a request ran in both), so the
   * real time since that hold's deadline counts toward this step.
   */
  async holdStep(startedAt: number, emulatedMs: number, continues = false): Promise<void> {
    if (!(emulatedMs > 0)) {
      this.#lastDeadline = Number.NEGATIVE_INFINITY;
      return;
    }
    this.#heldSteps++;
    this.#heldMs += emulatedMs;
    const realMs = emulatedMs / this.speedup;
    // At most half a step, so a late timer is made up for over the next steps instead of in
    // one burst.
    const sinceDeadline = startedAt - this.#lastDeadline;
    const credit = continues && sinceDeadline > 0 ? Math.min(sinceDeadline, realMs / 2) : 0;
    const deadline = startedAt - credit + realMs;
    const floor = this.speedup === 1 ? EARLY_SLACK_MS : MIN_TIMER_MS;
    const workDone = this.#realNow();
    const overran = workDone >= deadline;
    let remaining = deadline - workDone;
    while (remaining >= floor) {
      await this.#wait(Math.max(remaining, MIN_TIMER_MS));
      remaining = deadline - this.#realNow();
    }
    if (remaining > 0 && this.speedup !== 1) {
      // Too short for a timer: move emulated time instead of the real one.
      this.#jumpMs += remaining * this.speedup;
    }
    // A step whose own work outlasted the model (the model is a floor) ends when the work did:
    // the next steps make up for a late timer, never for an overrun.
    this.#lastDeadline = overran ? workDone : deadline;
  }
}
