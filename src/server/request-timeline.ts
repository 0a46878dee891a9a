/**
 * Request timelines, a development aid (served with VLLM_SERVER_DEV_MODE=1, like vLLM's other
 * development endpoints): for each recent generation request, when this server received it,
 * when its engine started and finished loading the request's KV from a peer, scheduled its
 * first step and produced its first token, and when the first chunk and the end of the
 * response were written. `GET /kvconnect/timeline?request_id=<X-Request-Id>` answers one; the
 * prefill and decode servers of one P/D request share the X-Request-Id the proxy sent both,
 * so their two timelines and the client's own times make one breakdown (`npm run bench --
 * pd-ttft`). Times are wall-clock ms with sub-millisecond resolution
 * (performance.timeOrigin + performance.now(): comparable between processes of one host).
 * docs/serve.md#request-timelines.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { RequestOutputDelta } from '../engine/api.ts';
import { wallClockMs } from '../engine/iteration-stats.ts';
import { KVError } from '../errors/index.ts';
import { sendJson } from '../http/index.ts';
import { LruMap } from '../util/lru-map.ts';

export const TIMELINE_PATH = '/kvconnect/timeline';
/** Timelines kept (the oldest is dropped first). */
export const TIMELINES_KEPT = 1024;

export interface RequestTimeline {
  request_id: string;
  events: {
    /** The request reached the route (headers read). */
    received: number;
    /** The engine parked it to load its KV from a peer (null: no remote load). */
    kv_load_started: number | null;
    /** The engine's scheduler learned that load finished. */
    kv_load_finished: number | null;
    /** The engine first scheduled it to compute. */
    scheduled: number | null;
    /** Its kv_transfer_params went out ahead, in a 103 (null: not asked, or not known ahead). */
    params_ahead: number | null;
    /** The server got the engine's first token (the end of that step). */
    first_token: number | null;
    /** The first chunk of a stream was written to the socket (null: not streamed). */
    first_chunk: number | null;
    /** The response was complete (its last byte written). */
    response_end: number | null;
  };
}

/** Records one request's events; the first choice's engine milestones are taken. */
export class TimelineRecorder {
  readonly timeline: RequestTimeline;

  constructor(requestId: string, now: number = wallClockMs()) {
    this.timeline = {
      request_id: requestId,
      events: {
        received: now,
        kv_load_started: null,
        kv_load_finished: null,
        scheduled: null,
        params_ahead: null,
        first_token: null,
        first_chunk: null,
        response_end: null,
      },
    };
  }

  delta(delta: RequestOutputDelta): void {
    const e = this.timeline.events;
    const m = delta.metrics.milestones;
    if (m) {
      e.kv_load_started ??= m.kvLoadStartedAt;
      e.kv_load_finished ??= m.kvLoadFinishedAt;
      e.scheduled ??= m.scheduledAt;
    }
    if (e.first_token === null && delta.newTokenIds.length > 0) e.first_token = wallClockMs();
  }

  paramsAhead(): void {
    this.timeline.events.params_ahead ??= wallClockMs();
  }

  firstChunk(): void {
    this.timeline.events.first_chunk ??= wallClockMs();
  }

  end(): void {
    this.timeline.events.response_end ??= wallClockMs();
  }
}

/** The last TIMELINES_KEPT requests' timelines, by X-Request-Id (a repeated id keeps the latest). */
export class RequestTimelines {
  readonly #byId: LruMap<string, RequestTimeline>;

  constructor(capacity = TIMELINES_KEPT) {
    this.#byId = new LruMap(capacity);
  }

  /** Starts the timeline of `requestId`, received at `receivedAt` (wall-clock ms). */
  start(requestId: string, receivedAt: number = wallClockMs()): TimelineRecorder {
    const recorder = new TimelineRecorder(requestId, receivedAt);
    this.#byId.set(requestId, recorder.timeline);
    return recorder;
  }

  get(requestId: string): RequestTimeline | undefined {
    return this.#byId.get(requestId);
  }

  /** GET /kvconnect/timeline?request_id=ID: the timeline, or a 400 / 404 naming what is wrong. */
  handle(req: IncomingMessage, res: ServerResponse): void {
    const id = new URL(req.url ?? '/', 'http://server').searchParams.get('request_id');
    if (id === null || id === '') {
      throw new KVError(
        'SERVER_INVALID_REQUEST',
        'GET /kvconnect/timeline needs ?request_id=<X-Request-Id>.',
        {
          field: 'request_id',
          hint: 'Pass the X-Request-Id the generation request was sent (and answered) with.',
        },
      );
    }
    const timeline = this.#byId.get(id);
    if (!timeline) {
      throw new KVError('SERVER_TIMELINE_NOT_FOUND', `No timeline for request id ${JSON.stringify(id)}.`, {
        field: 'request_id',
        hint: `This server keeps the timelines of its last ${this.#byId.capacity} generation requests, by their X-Request-Id; a request sent without the header got a random one (the response's X-Request-Id header).`,
      });
    }
    sendJson(res, 200, timeline);
  }
}
