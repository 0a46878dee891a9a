/**
 * The set of backends per role: periodic GET /health (dead backends stop receiving
 * traffic and come back when they answer again), GET /kvconnect/info (once for a server
 * without it, a vLLM server; on every healthy round for a kvconnect server, whose restart may
 * have moved its KV event or MoRIIO ports), and MoRIIO instances that appear and expire
 * through discovery pings.
 */
import { getLogger } from '../logging/logger.ts';
import {
  CONNECTOR_INFO_PATH,
  isPdConnector,
  type MoRIIODiscoveryPing,
  PD_CONNECTORS,
  parseKVConnectorInfo,
} from '../wire/index.ts';
import { Backend } from './backend.ts';
import type { BackendRole } from './types.ts';
import type { Upstream } from './upstream.ts';

const log = getLogger('kvconnect.proxy.backend-pool');

/**
 * Failed health checks in a row before a backend stops getting traffic: an overloaded
 * server can miss a deadline while it is serving fine (its engine step holds the event
 * loop), and marking it down would turn its load into 503s. A check also does not count as
 * failed when the backend answered a proxied request since the previous round (it is
 * alive, only busy). A refused connection on a real request still marks it down at once.
 */
const FAILED_CHECKS_TO_MARK_DOWN = 3;

export interface PoolOptions {
  healthIntervalMs: number;
  /** Period of the checks of a backend marked down (Envoy's unhealthy_interval); 0 = with the others. */
  unhealthyIntervalMs?: number;
  healthTimeoutMs: number;
  discoveryTtlMs: number;
  /** Called after a health check or a markDown changed what is known of a backend. */
  onBackendChange?: (backend: Backend) => void;
}

export class BackendPool {
  readonly #backends: Backend[] = [];
  readonly #upstream: Upstream;
  readonly #options: PoolOptions;
  readonly #failedChecks = new Map<Backend, number>();
  #previousRound = 0;
  #timer: NodeJS.Timeout | null = null;
  #downTimer: NodeJS.Timeout | null = null;
  #checkingDown: Promise<void> | null = null;
  #checking: Promise<void> | null = null;

  constructor(upstream: Upstream, options: PoolOptions) {
    this.#upstream = upstream;
    this.#options = options;
  }

  add(url: string, role: BackendRole): Backend {
    const backend = new Backend(url, role, 'cli');
    this.#backends.push(backend);
    return backend;
  }

  all(role?: BackendRole): Backend[] {
    return role === undefined ? [...this.#backends] : this.#backends.filter((b) => b.role === role);
  }

  healthy(role: BackendRole): Backend[] {
    const now = Date.now();
    return this.#backends.filter(
      (b) => b.role === role && b.healthy && (b.registration === null || b.registration.expiresAt > now),
    );
  }

  /**
   * Where a request of this role may go, minus `exclude` (backends this request already failed
   * on): the healthy ones; when none is healthy, every live one anyway (Envoy's panic
   * routing): a backend marked down may be back before its next health check, and trying it
   * costs one refused connection, while answering 503 fails the request for sure.
   */
  candidates(role: BackendRole, exclude: ReadonlySet<Backend> = new Set()): Backend[] {
    const healthy = this.healthy(role).filter((b) => !exclude.has(b));
    if (healthy.length > 0) return healthy;
    const now = Date.now();
    return this.#backends.filter(
      (b) =>
        b.role === role && !exclude.has(b) && (b.registration === null || b.registration.expiresAt > now),
    );
  }

  /** Registers or refreshes a MoRIIO instance from a discovery ping. */
  register(ping: MoRIIODiscoveryPing): Backend {
    const role: BackendRole = ping.type === 'P' ? 'prefill' : 'decode';
    const probe = new Backend(ping.http_address, role, 'discovery', true);
    let backend = this.#backends.find((b) => b.url === probe.url && b.role === role);
    if (!backend) {
      backend = probe;
      this.#backends.push(backend);
      log.info('discovered %s instance %s (zmq %s)', role, backend.url, ping.zmq_address);
    }
    backend.register(ping, this.#options.discoveryTtlMs, Date.now());
    backend.info ??= { connector: 'MoRIIOConnector', transfer_mode: ping.transfer_mode };
    return backend;
  }

  /** Drops discovered instances whose pings stopped. */
  expire(now = Date.now()): void {
    for (let i = this.#backends.length - 1; i >= 0; i--) {
      const b = this.#backends[i]!;
      if (b.source === 'discovery' && b.registration !== null && b.registration.expiresAt <= now) {
        this.#backends.splice(i, 1);
        log.warn(
          '%s instance %s expired: no discovery ping for %d ms',
          b.role,
          b.url,
          this.#options.discoveryTtlMs,
        );
      }
    }
  }

  start(): void {
    if (this.#timer) return;
    this.#timer = setInterval(() => void this.checkAll(), this.#options.healthIntervalMs);
    this.#timer.unref();
    const every = this.#options.unhealthyIntervalMs ?? 0;
    if (every > 0 && every < this.#options.healthIntervalMs) {
      this.#downTimer = setInterval(() => void this.#checkDown(), every);
      this.#downTimer.unref();
    }
  }

  /** The backends marked down are checked more often, so a restarted one is back at once. */
  #checkDown(): Promise<void> {
    if (this.#checking || this.#checkingDown) return this.#checking ?? this.#checkingDown!;
    const down = this.#backends.filter((b) => b.source === 'cli' && !b.healthy);
    if (down.length === 0) return Promise.resolve();
    this.#checkingDown = Promise.all(down.map((b) => this.#check(b, 0)))
      .then(() => undefined)
      .finally(() => {
        this.#checkingDown = null;
      });
    return this.#checkingDown;
  }

  /** One round of health checks (concurrent calls share the round in progress). */
  checkAll(): Promise<void> {
    this.#checking ??= (async () => {
      this.expire();
      const since = this.#previousRound;
      this.#previousRound = Date.now();
      await Promise.all(this.#backends.filter((b) => b.source === 'cli').map((b) => this.#check(b, since)));
    })().finally(() => {
      this.#checking = null;
    });
    return this.#checking;
  }

  async close(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    if (this.#downTimer) clearInterval(this.#downTimer);
    this.#timer = null;
    this.#downTimer = null;
    await this.#checking;
    await this.#checkingDown;
  }

  /** Marks a backend dead right away (e.g. connection refused) instead of waiting for the next check. */
  markDown(backend: Backend, why: string): void {
    if (!backend.healthy) return;
    backend.healthy = false;
    log.warn('%s instance %s marked unhealthy: %s', backend.role, backend.url, why);
    this.#options.onBackendChange?.(backend);
  }

  /** A request to a backend marked down succeeded: it is back, whatever the last health check said. */
  markUp(backend: Backend): void {
    if (backend.healthy) return;
    backend.healthy = true;
    this.#failedChecks.set(backend, 0);
    log.info('%s instance %s answered a request: marked healthy', backend.role, backend.url);
    this.#options.onBackendChange?.(backend);
  }

  async #check(backend: Backend, since: number): Promise<void> {
    let ok = false;
    let why = '';
    try {
      const res = await this.#upstream.getJson(`${backend.url}/health`, this.#options.healthTimeoutMs);
      ok = res.status === 200;
      why = `GET /health answered ${res.status}`;
    } catch (e) {
      why = e instanceof Error ? e.message : String(e);
      // Slow, not dead: it answered real requests since the last round.
      ok = backend.healthy && since > 0 && backend.answeredAt >= since;
    }
    if (ok && !backend.healthy) log.info('%s instance %s is healthy', backend.role, backend.url);
    const failed = ok ? 0 : (this.#failedChecks.get(backend) ?? 0) + 1;
    this.#failedChecks.set(backend, failed);
    // Never checked healthy yet (start-up): one failure is enough to keep it out.
    const down = failed >= FAILED_CHECKS_TO_MARK_DOWN || (!ok && !backend.healthy);
    if (down) this.markDown(backend, why);
    else if (!ok)
      log.debug(
        '%s instance %s failed a health check (%s); %d more and it is marked down',
        backend.role,
        backend.url,
        why,
        FAILED_CHECKS_TO_MARK_DOWN - failed,
      );
    if (ok && !backend.infoFallback) await this.#fetchInfo(backend);
    backend.healthy = ok || !down;
    this.#options.onBackendChange?.(backend);
  }

  /**
   * Reads the backend's /kvconnect/info. A backend that answered it before keeps its last info
   * when it does not answer it now (slow, or restarting); one that never did and answers 404
   * (or something else) is taken for a vLLM server running NixlConnector, once. A connector
   * without a P/D flow is kept as reported (its requests are refused) and logged as an error.
   */
  async #fetchInfo(backend: Backend): Promise<void> {
    const known = backend.info !== null;
    try {
      const res = await this.#upstream.getJson(
        `${backend.url}${CONNECTOR_INFO_PATH}`,
        this.#options.healthTimeoutMs,
      );
      const info = res.status === 200 ? parseKVConnectorInfo(res.json) : null;
      if (info?.connector === null) {
        // A kvconnect server without a KV connector (a plain instance): keep what it reports.
        backend.info = { ...info, connector: 'NixlConnector' };
        return;
      }
      if (info) {
        const before = backend.info?.connector;
        backend.info = info;
        if (!isPdConnector(info.connector) && before !== info.connector) {
          log.error(
            '%s instance %s runs %s, for which the proxy has no P/D flow (supported: %s); requests routed to it are refused (502 PROXY_CONNECTOR_UNSUPPORTED)',
            backend.role,
            backend.url,
            info.connector,
            PD_CONNECTORS.join(', '),
          );
        }
        return;
      }
    } catch {
      return; // unreachable or slow: ask again on the next health round
    }
    if (known) return;
    backend.info = { connector: 'NixlConnector' };
    backend.infoFallback = true;
    log.info(
      '%s instance %s does not serve GET /kvconnect/info (a vLLM server?); assuming NixlConnector. Pass --kv-connector to choose.',
      backend.role,
      backend.url,
    );
  }
}
