/**
 * Service discovery (docs/connectors/moriio.md#service-discovery): TP rank 0 of a MoRIIO
 * engine (here: its scheduler side) tells the proxy every 3 s that it exists. vLLM sends
 * msgpack over ZMQ; the kvconnect proxy takes the same fields as JSON on POST /register at
 * proxy_ip:proxy_ping_port (the ping's shape: src/wire/moriio-discovery.ts).
 */
import { getLogger } from '../../logging/logger.ts';
import {
  formatDiscoveryPing,
  MORIIO_DISCOVERY_PATH,
  MORIIO_PING_INTERVAL_MS,
  type MoRIIODiscoveryPing,
} from '../../wire/index.ts';
import type { MoRIIOConfig } from './config.ts';

const log = getLogger('kvconnect.connectors.moriio.discovery');

export const MORIIO_MAX_PING_RETRIES = 100;

export function buildPing(cfg: MoRIIOConfig, isProducer: boolean, dpSize: number): MoRIIODiscoveryPing {
  return formatDiscoveryPing({
    producer: isProducer,
    host: cfg.hostIp,
    httpPort: cfg.httpPort,
    zmq: { host: cfg.hostIp, handshakePort: cfg.handshakePort, notifyPort: cfg.notifyPort },
    dpSize,
    tpSize: cfg.tpSize,
    readMode: cfg.readMode,
  });
}

export class DiscoveryPinger {
  readonly #url: string;
  readonly #ping: MoRIIODiscoveryPing;
  readonly #intervalMs: number;
  #timer: NodeJS.Timeout | null = null;
  #failures = 0;
  #sent = 0;

  constructor(
    proxyIp: string,
    proxyPort: number,
    ping: MoRIIODiscoveryPing,
    intervalMs = MORIIO_PING_INTERVAL_MS,
  ) {
    const host = proxyIp.includes(':') ? `[${proxyIp}]` : proxyIp;
    this.#url = `http://${host}:${proxyPort}${MORIIO_DISCOVERY_PATH}`;
    this.#ping = ping;
    this.#intervalMs = intervalMs;
  }

  /** Pings accepted by the proxy so far. */
  get sent(): number {
    return this.#sent;
  }

  start(): void {
    if (this.#timer) return;
    log.info('MoRIIO registering with the proxy at %s every %ds', this.#url, this.#intervalMs / 1000);
    const tick = (): void => {
      void this.#once().finally(() => {
        if (this.#timer) this.#timer = setTimeout(tick, this.#intervalMs).unref();
      });
    };
    this.#timer = setTimeout(tick, 0).unref();
  }

  async #once(): Promise<void> {
    try {
      const res = await fetch(this.#url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(this.#ping),
        signal: AbortSignal.timeout(2000),
      });
      await res.arrayBuffer();
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      this.#failures = 0;
      this.#sent++;
    } catch (e) {
      this.#failures++;
      log.warnOnce('MoRIIO ping to %s failed (will retry): %s', this.#url, (e as Error).message);
      if (this.#failures >= MORIIO_MAX_PING_RETRIES) {
        log.error('Ping failed after %d retries', this.#failures);
        this.stop();
      }
    }
  }

  stop(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
  }
}
