/**
 * The engine clock on virtual time (no wall clock): a run of steps that continue one another
 * keeps the modelled period exactly, however late the timers fire and however long the host
 * works between steps; a step that continues nothing (a request arriving at an idle engine)
 * takes the whole modelled time from its start; speedup jumps over waits shorter than a timer.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EngineClock } from '../../../src/engine/timing/engine-clock.ts';

/** Virtual real time: every timer fires `lateMs` late. */
function virtualTime(lateMs: number): {
  now: () => number;
  wait: (ms: number) => Promise<void>;
  work: (ms: number) => void;
} {
  let t = 1000;
  return {
    now: () => t,
    wait: async (ms) => {
      t += ms + lateMs;
    },
    work: (ms) => {
      t += ms;
    },
  };
}

test('continued steps keep the modelled period despite late timers and host work between them', async () => {
  const time = virtualTime(0.7);
  const clock = new EngineClock(1, time.now, time.wait);
  const model = 13;
  const ends: number[] = [];
  for (let step = 0; step < 20; step++) {
    const start = clock.stepStart();
    time.work(0.4); // the step's own computation
    await clock.holdStep(start, model, step > 0);
    ends.push(time.now());
    // Outputs, SSE writes of a large batch and the next schedule: 3 ms of host work.
    time.work(3);
  }
  const periods = ends.slice(1).map((end, i) => end - (ends[i] as number));
  // Every step ends one modelled period after the previous one (each timer's lateness recurs).
  for (const p of periods) assert.ok(Math.abs(p - model) < 1e-9, `period ${p}`);
  assert.deepEqual(clock.stats(), { heldSteps: 20, heldMs: 20 * model });
});

test('a step that continues nothing takes the whole modelled time from its start', async () => {
  const time = virtualTime(0);
  const clock = new EngineClock(1, time.now, time.wait);
  await clock.holdStep(clock.stepStart(), 12, false);
  // The next request arrives 1 ms after the previous one finished: no credit for that gap.
  time.work(1);
  const start = clock.stepStart();
  await clock.holdStep(start, 90, false);
  assert.equal(time.now() - start, 90);
  // Continuing, the credit is capped at half the step.
  time.work(50);
  const next = clock.stepStart();
  await clock.holdStep(next, 12, true);
  assert.equal(time.now() - next, 6);
});

test('speedup: emulated time runs R× the real time, and waits under a timer tick are jumped', async () => {
  const time = virtualTime(0);
  const clock = new EngineClock(10, time.now, time.wait);
  const e0 = clock.now();
  await clock.holdStep(clock.stepStart(), 50, false); // 5 real ms
  assert.equal(clock.now() - e0, 50);
  const e1 = clock.now();
  await clock.holdStep(clock.stepStart(), 4, false); // 0.4 real ms: too short for a timer
  assert.equal(time.now() - 1005, 0, 'no real wait');
  assert.ok(Math.abs(clock.now() - e1 - 4) < 1e-9, `emulated ${clock.now() - e1}`);
});

test('a step whose work outlasts the model is not paid back by the steps after it', async () => {
  const time = virtualTime(0);
  const clock = new EngineClock(1, time.now, time.wait);
  const start = clock.stepStart();
  time.work(40); // a prefill's real work: longer than its modelled 25 ms
  await clock.holdStep(start, 25, false);
  assert.equal(time.now() - start, 40, 'the model is a floor');
  time.work(1);
  const next = clock.stepStart();
  await clock.holdStep(next, 12, true);
  // Credited the 1 ms of host work since the overrun ended, not the 15 ms overrun itself.
  assert.equal(time.now() - next, 11);
});
