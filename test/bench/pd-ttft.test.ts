/**
 * `npm run bench -- pd-ttft`'s own logic, without servers: the list flags (modes, transports,
 * sizes against the model's context) and the breakdown built from two server timelines and
 * the transfer metrics.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { planPdTtft } from '../../bench/_pd-ttft-plan.ts';
import { breakdownOf, type ServerTimeline, xferTotals } from '../../bench/_pd-ttft-timeline.ts';
import { TimelineRecorder } from '../../src/server/request-timeline.ts';

const ALL = {
  modes: 'nixl-pull,nixl-push,moriio-write,moriio-read',
  transports: 'tcp,shm',
  sizes: '16,1008',
};

describe('planPdTtft', () => {
  test('every mode over every transport, sizes ascending and distinct', () => {
    const r = planPdTtft({ ...ALL, sizes: '512, 16,512' }, 1024, 2);
    assert.ok(r.ok);
    assert.equal(r.plan.pairs.length, 8);
    assert.deepEqual(r.plan.pairs.slice(0, 2), [
      { mode: 'nixl-pull', transport: 'tcp', label: 'nixl-pull/tcp' },
      { mode: 'nixl-pull', transport: 'shm', label: 'nixl-pull/shm' },
    ]);
    assert.deepEqual(r.plan.sizes, [16, 512]);
  });

  test('an unknown mode or transport, or a bad size, names the flag and what it takes', () => {
    assert.deepEqual(planPdTtft({ ...ALL, modes: 'nixl-pull,nixl' }, 1024, 2), {
      ok: false,
      problem:
        "--modes expects a comma-separated list of 'nixl-pull', 'nixl-push', 'moriio-write', 'moriio-read', got 'nixl' in 'nixl-pull,nixl'",
    });
    assert.deepEqual(planPdTtft({ ...ALL, transports: 'rdma' }, 1024, 2), {
      ok: false,
      problem: "--transports expects a comma-separated list of 'tcp', 'shm', got 'rdma' in 'rdma'",
    });
    const bad = planPdTtft({ ...ALL, sizes: '16,0' }, 1024, 2);
    assert.ok(!bad.ok && bad.problem.startsWith('--sizes expects a comma-separated list of prompt lengths'));
  });

  test("a size past the model's context says how far it may go", () => {
    assert.deepEqual(planPdTtft({ ...ALL, sizes: '16,2048' }, 1024, 2), {
      ok: false,
      problem:
        "--sizes: a 2048-token prompt plus --max-tokens 2 exceeds the model's max_model_len 1024 (use sizes up to 1022, or a model with a longer context)",
    });
  });
});

describe('the breakdown', () => {
  /** A timeline received at 0 with these events (the rest not recorded). */
  const timeline = (events: Partial<ServerTimeline['events']>): ServerTimeline => {
    const t = new TimelineRecorder('x', 0).timeline;
    Object.assign(t.events, events);
    return t;
  };

  test('events in ms since the client sent the request; the transfer from the metrics', () => {
    const metrics = (sum: number, count: number, wire: number) =>
      [
        `vllm:nixl_xfer_time_seconds_sum{engine="0",model_name="m"} ${sum}`,
        `vllm:nixl_xfer_time_seconds_count{engine="0",model_name="m"} ${count}`,
        `vllm:nixl_xfer_wire_time_seconds_sum{engine="0",model_name="m"} ${wire}`,
        'vllm:nixl_xfer_time_seconds_bucket{le="0.001"} 99',
      ].join('\n');
    const before = xferTotals(metrics(0.01, 1, 0.008), '');
    const after = xferTotals(metrics(0.013, 2, 0.01), '');
    assert.deepEqual(before, { seconds: 0.01, count: 1, wireSeconds: 0.008 });
    const p = timeline({ received: 1001, scheduled: 1002, first_token: 1050, response_end: 1051 });
    const d = timeline({
      received: 1053,
      kv_load_started: 1054,
      kv_load_finished: 1058,
      scheduled: 1058.5,
      first_token: 1060,
      first_chunk: 1060.2,
      response_end: 1061,
    });
    const b = breakdownOf({ sentAt: 1000, firstAt: 1061 }, p, d, before, after);
    const rounded = Object.fromEntries(Object.entries(b).map(([k, v]) => [k, Number(v.toFixed(3))]));
    assert.deepEqual(rounded, {
      p_received: 1,
      p_scheduled: 2,
      p_first_token: 50,
      p_response_end: 51,
      d_received: 53,
      d_kv_load_started: 54,
      d_kv_load_finished: 58,
      d_scheduled: 58.5,
      d_first_token: 60,
      d_first_chunk: 60.2,
      client_first_chunk: 61,
      transfer_ms: 3,
      transfer_wire_ms: 2,
    });
  });

  test('a plain request has no P, no load and no transfer', () => {
    const b = breakdownOf(
      { sentAt: 0, firstAt: 9 },
      null,
      timeline({ received: 1, scheduled: 2, first_token: 8, first_chunk: 8.5 }),
    );
    assert.deepEqual(Object.keys(b).sort(), [
      'client_first_chunk',
      'd_first_chunk',
      'd_first_token',
      'd_received',
      'd_scheduled',
    ]);
  });
});
