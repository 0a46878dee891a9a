/**
 * The breakdown of one P/D request for `npm run bench -- pd-ttft`: the client's own send and
 * first-chunk times, P's and D's request timelines (GET /kvconnect/timeline/{id},
 * docs/serve.md#request-timelines) and the transfer time their metrics recorded, as one set of
 * events in milliseconds since the client sent the request. All clocks are
 * performance.timeOrigin + performance.now() of processes on one host.
 */

import { sumMetric } from '../src/demo/metrics.ts';
import type { RequestTimeline } from '../src/server/request-timeline.ts';

export type ServerTimeline = RequestTimeline;

export const BREAKDOWN_EVENTS = [
  { key: 'p_received', label: 'P received the request (proxy → P)' },
  { key: 'p_scheduled', label: "P's engine scheduled its prefill" },
  { key: 'p_params_ahead', label: 'P sent its kv_transfer_params ahead (103)' },
  { key: 'p_first_token', label: "P's prefill step ended (token sampled)" },
  { key: 'p_response_end', label: 'P sent its response' },
  { key: 'd_received', label: 'D received the request (proxy → D)' },
  { key: 'd_kv_load_started', label: "D's scheduler started the KV load" },
  { key: 'd_kv_load_finished', label: "D's scheduler saw the KV landed" },
  { key: 'd_scheduled', label: "D's engine scheduled the first step" },
  { key: 'd_first_token', label: "D's first step ended (first token)" },
  { key: 'd_first_chunk', label: 'D wrote the first chunk' },
  { key: 'client_first_chunk', label: 'the client read the first chunk (TTFT)' },
  { key: 'transfer_ms', label: 'the transfer itself, ms (xfer time metric)' },
  { key: 'transfer_wire_ms', label: "… of which on the wire, ms (NIXL: without the wait for P's grant)" },
] as const;

export type BreakdownKey = (typeof BREAKDOWN_EVENTS)[number]['key'];
export type Breakdown = Partial<Record<BreakdownKey, number>>;

/** Seconds and count of the NIXL and MoRIIO transfer-time histograms, summed over P and D. */
export interface XferTotals {
  seconds: number;
  count: number;
  /** NIXL's wire time (the transfer time without a READ's wait for P's grant); MoRIIO's transfer time. */
  wireSeconds: number;
}

const XFER = ['vllm:nixl_xfer_time_seconds', 'vllm:moriio_xfer_time_seconds'];
const WIRE = ['vllm:nixl_xfer_wire_time_seconds', 'vllm:moriio_xfer_time_seconds'];

export function xferTotals(...metricsTexts: string[]): XferTotals {
  let seconds = 0;
  let count = 0;
  let wireSeconds = 0;
  for (const text of metricsTexts) {
    for (const name of XFER) {
      seconds += sumMetric(text, `${name}_sum`);
      count += sumMetric(text, `${name}_count`);
    }
    for (const name of WIRE) wireSeconds += sumMetric(text, `${name}_sum`);
  }
  return { seconds, count, wireSeconds };
}

/**
 * The events of one request, in ms since `client.sentAt`; an event a server did not record is
 * left out. A plain request has no P (`p` null) and its server stands in for D.
 */
export function breakdownOf(
  client: { sentAt: number; firstAt: number },
  p: ServerTimeline | null,
  d: ServerTimeline,
  before: XferTotals | null = null,
  after: XferTotals | null = null,
): Breakdown {
  const out: Breakdown = {};
  const at = (key: BreakdownKey, t: number | null | undefined): void => {
    if (typeof t === 'number') out[key] = t - client.sentAt;
  };
  at('p_received', p?.events.received);
  at('p_scheduled', p?.events.scheduled);
  at('p_params_ahead', p?.events.params_ahead);
  at('p_first_token', p?.events.first_token);
  at('p_response_end', p?.events.response_end);
  at('d_received', d.events.received);
  at('d_kv_load_started', d.events.kv_load_started);
  at('d_kv_load_finished', d.events.kv_load_finished);
  at('d_scheduled', d.events.scheduled);
  at('d_first_token', d.events.first_token);
  at('d_first_chunk', d.events.first_chunk);
  at('client_first_chunk', client.firstAt);
  if (before && after && after.count > before.count) {
    out.transfer_ms = (after.seconds - before.seconds) * 1000;
    out.transfer_wire_ms = (after.wireSeconds - before.wireSeconds) * 1000;
  }
  return out;
}
