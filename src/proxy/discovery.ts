/**
 * MoRIIO service discovery as vLLM's MoRIIO proxy runs it: a ZMQ ROUTER on the discovery
 * port receives each instance's msgpack ping (every 3 s, vLLM's engines and kvconnect's
 * alike; the shape: src/wire/moriio-discovery.ts); the proxy turns each into a prefill or
 * decode backend and drops it when pings stop. A malformed ping is logged and skipped (ZMQ
 * pings get no answer). The proxy's HTTP port lists the registered instances
 * (GET /instances).
 */
import * as zmq from 'zeromq';
import { formatErrorText } from '../errors/index.ts';
import { getLogger } from '../logging/logger.ts';
import { bracketHost } from '../util/host.ts';
import { decodeDiscoveryPing } from '../wire/index.ts';
import type { BackendPool } from './backend-pool.ts';

const log = getLogger('kvconnect.proxy.discovery');

export interface DiscoveryListener {
  port: number;
  /** Pings that were not valid (skipped). */
  readonly rejected: number;
  close(): Promise<void>;
}

function portOf(endpoint: string | null): number {
  const match = /:(\d+)$/.exec(endpoint ?? '');
  if (!match) throw new Error(`the discovery socket reports no port (${endpoint})`);
  return Number(match[1]);
}

export async function startDiscovery(
  pool: BackendPool,
  host: string,
  port: number,
  ttlMs: number,
): Promise<DiscoveryListener> {
  const router = new zmq.Router({ linger: 0 });
  await router.bind(`tcp://${bracketHost(host)}:${port === 0 ? '*' : port}`);
  let rejected = 0;
  const receiving = (async () => {
    try {
      for await (const frames of router) {
        const payload = frames[frames.length - 1];
        if (!payload) continue;
        try {
          const ping = decodeDiscoveryPing(payload);
          if (ping) pool.register(ping);
        } catch (e) {
          rejected++;
          log.warn('Skipping a discovery ping: %s', formatErrorText(e));
        }
      }
    } catch (e) {
      if (!router.closed) log.error('The discovery socket failed: %s', (e as Error).message);
    }
  })();
  const sweep = setInterval(() => pool.expire(), Math.max(100, Math.floor(ttlMs / 4)));
  sweep.unref();
  return {
    port: portOf(router.lastEndpoint),
    get rejected() {
      return rejected;
    },
    close: async () => {
      clearInterval(sweep);
      router.close();
      await receiving;
    },
  };
}
