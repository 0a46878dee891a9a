/**
 * The HTTP metrics vLLM's API server exports through prometheus-fastapi-instrumentator
 * (`Instrumentator(excluded_handlers=[...]).add()`, i.e. its default metrics): requests by
 * method, status class and route, latency histograms, and request/response sizes. A route
 * is named by its path; a path no route matches is "none"; vLLM's excluded routes are not
 * observed.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Counter, Histogram, type Registry, Summary } from 'prom-client';

/** Routes vLLM's api_server leaves out of the instrumentator. */
export const EXCLUDED_HANDLERS: readonly string[] = [
  '/metrics',
  '/health',
  '/load',
  '/ping',
  '/version',
  '/server_info',
];

/** The instrumentator's default buckets: few for the per-route histogram, many for the global one. */
const LOWR_BUCKETS = [0.1, 0.5, 1];
const HIGHR_BUCKETS = [
  0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 7.5, 10, 30, 60,
];

export class HttpMetrics {
  readonly #requests: Counter;
  readonly #requestSize: Summary;
  readonly #responseSize: Summary;
  readonly #highr: Histogram;
  readonly #lowr: Histogram;
  readonly #routeOf: (url: string) => string | null;

  constructor(registry: Registry, routeOf: (url: string) => string | null) {
    const registers = [registry];
    this.#routeOf = routeOf;
    this.#requests = new Counter({
      name: 'http_requests_total',
      help: 'Total number of requests by method, status and handler.',
      labelNames: ['method', 'status', 'handler'],
      registers,
    });
    this.#requestSize = new Summary({
      name: 'http_request_size_bytes',
      help: 'Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ',
      labelNames: ['handler'],
      percentiles: [],
      registers,
    });
    this.#responseSize = new Summary({
      name: 'http_response_size_bytes',
      help: 'Content length of outgoing responses by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ',
      labelNames: ['handler'],
      percentiles: [],
      registers,
    });
    this.#highr = new Histogram({
      name: 'http_request_duration_highr_seconds',
      help: 'Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ',
      buckets: HIGHR_BUCKETS,
      registers,
    });
    this.#lowr = new Histogram({
      name: 'http_request_duration_seconds',
      help: 'Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ',
      labelNames: ['method', 'handler'],
      buckets: LOWR_BUCKETS,
      registers,
    });
  }

  /** Starts observing one request; the sample is taken when its response ends. */
  track(req: IncomingMessage, res: ServerResponse): void {
    const handler = this.#routeOf(req.url ?? '/') ?? 'none';
    if (EXCLUDED_HANDLERS.includes(handler)) return;
    const started = process.hrtime.bigint();
    const method = req.method ?? 'GET';
    res.once('close', () => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const status = `${Math.floor(res.statusCode / 100)}xx`;
      this.#requests.inc({ method, status, handler });
      this.#lowr.observe({ method, handler }, seconds);
      this.#highr.observe(seconds);
      this.#requestSize.observe({ handler }, Number(req.headers['content-length'] ?? 0) || 0);
      this.#responseSize.observe({ handler }, Number(res.getHeader('content-length') ?? 0) || 0);
    });
  }
}
