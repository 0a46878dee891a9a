/**
 * Service discovery (docs/connectors/moriio.md#service-discovery): TP rank 0 of a MoRIIO
 * engine (here: its scheduler side) tells the proxy every 3 s that it exists, as vLLM does:
 * a msgpack ping from a ZMQ DEALER to the proxy's ROUTER at proxy_ip:proxy_ping_port (the
 * ping's shape: src/wire/moriio-discovery.ts), so vLLM's MoRIIO proxy and kvconnect's both
 * see kvconnect engines.
 */
import * as zmq from 'zeromq';
import { getLogger } from '../../logging/logger.ts';
import { bracketHost } from '../../util/host.ts';
import {
  encodeDiscoveryPing,
  formatDiscoveryPing,
  MORIIO_PING_INTERVAL_MS,
  type MoRIIODiscoveryPing,
} from '../../wire/index.ts';
import type { MoRIIOConfig } from './config.ts';

const log = getLogger('kvconnect.connectors.moriio.discovery');

const SEND_TIMEOUT_MS = 2000;

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
  readonly #endpoint: string;
  readonly #ping: Uint8Array;
  readonly #intervalMs: number;
  #socket: zmq.Dealer | null = null;
  #timer: NodeJS.Timeout | null = null;
  #failures = 0;
  #sent = 0;

  constructor(
    proxyIp: string,
    proxyPort: number,
    ping: MoRIIODiscoveryPing,
    intervalMs = MORIIO_PING_INTERVAL_MS,
  ) {
    this.#endpoint = `tcp://${bracketHost(proxyIp)}:${proxyPort}`;
    this.#ping = encodeDiscoveryPing(ping);
    this.#intervalMs = intervalMs;
  }

  /** Pings handed to a connected proxy so far. */
  get sent(): number {
    return this.#sent;
  }

  start(): void {
    if (this.#timer) return;
    // A send with no proxy connected waits at most this long, then counts as a failed ping.
    this.#socket = new zmq.Dealer({ linger: 0, sendTimeout: SEND_TIMEOUT_MS, reconnectInterval: 500 });
    this.#socket.connect(this.#endpoint);
    log.info('MoRIIO registering with the proxy at %s every %ds', this.#endpoint, this.#intervalMs / 1000);
    const tick = (): void => {
      void this.#once().finally(() => {
        if (this.#timer) this.#timer = setTimeout(tick, this.#intervalMs).unref();
      });
    };
    this.#timer = setTimeout(tick, 0).unref();
  }

  async #once(): Promise<void> {
    const socket = this.#socket;
    if (!socket) return;
    try {
      await socket.send(this.#ping);
      this.#failures = 0;
      this.#sent++;
    } catch (e) {
      if (this.#socket === null) return;
      // vLLM's pinger retries an unreachable proxy for as long as it runs.
      this.#failures++;
      log.warnOnce('MoRIIO ping to %s not delivered (will retry): %s', this.#endpoint, (e as Error).message);
    }
  }

  /** Consecutive pings not delivered. */
  get failures(): number {
    return this.#failures;
  }

  stop(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#socket?.close();
    this.#socket = null;
  }
}
