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
 * one hold and the next step (outputs, events, the next schedule). The real time from one
 * hold's deadline to the start of the next step is credited (up to half a step) to that step
 * when it starts right after the hold, so steps run back to back keep the modelled period
 * instead of drifting by the timer's lateness and the host's per-step work; the first step
 * after an idle spell gets no credit.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { wallClockMs } from '../iteration-stats.ts';

/** Node's timers count whole milliseconds: shorter waits are jumped over (speedup > 1). */
const MIN_TIMER_MS = 1;
/** A step starting within this long (real ms) after the previous hold ended follows it. */
const CONTINUATION_MS = 2;
/** At speedup 1, a step may end this early (real ms) rather than wait a whole timer tick. */
const EARLY_SLACK_MS = 0.2;

export class EngineClock {
  readonly speedup: number;
  readonly #realNow: () => number;
  readonly #origin: number;
  /** Emulated ms added by jumps (speedup > 1 only). */
  #jumpMs = 0;
  /** Real time the last hold was due, and how late its timer fired (real ms). */
  #lastDeadline = Number.NEGATIVE_INFINITY;
  #lastLateness = 0;
  /** Emulated ms of the steps held so far, and how many (for stats and tests). */
  #heldMs = 0;
  #heldSteps = 0;

  constructor(speedup = 1, realNow: () => number = wallClockMs) {
    this.speedup = speedup;
    this.#realNow = realNow;
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

  /** Returns once `emulatedMs` of emulated time has passed since `startedAt` (from stepStart). */
  async holdStep(startedAt: number, emulatedMs: number): Promise<void> {
    if (!(emulatedMs > 0)) {
      this.#lastLateness = 0;
      return;
    }
    this.#heldSteps++;
    this.#heldMs += emulatedMs;
    const realMs = emulatedMs / this.speedup;
    // Credit the last timer's lateness only to a step that followed it at once (not to the
    // first step after an idle spell), and at most half a step, so a late timer is made up
    // for over the next steps instead of in one burst.
    const sinceDeadline = startedAt - this.#lastDeadline;
    const followed = sinceDeadline - this.#lastLateness <= CONTINUATION_MS;
    const credit = followed ? Math.min(sinceDeadline, realMs / 2) : 0;
    const deadline = startedAt - credit + realMs;
    const floor = this.speedup === 1 ? EARLY_SLACK_MS : MIN_TIMER_MS;
    let remaining = deadline - this.#realNow();
    while (remaining >= floor) {
      await sleep(Math.max(remaining, MIN_TIMER_MS));
      remaining = deadline - this.#realNow();
    }
    if (remaining > 0 && this.speedup !== 1) {
      // Too short for a timer: move emulated time instead of the real one.
      this.#jumpMs += remaining * this.speedup;
      remaining = 0;
    }
    this.#lastDeadline = deadline;
    this.#lastLateness = Math.max(0, -remaining);
  }
}
