/**
 * MoRIIO service discovery without ZMQ: instances POST their ping as JSON to
 * http://{proxy}:{discovery-port}/register every few seconds (vLLM pings every 3 s); the
 * proxy turns each into a prefill or decode backend and drops it when pings stop.
 * GET /instances lists what is registered.
 */
import { createHttpServer, listen, Router, readJson, sendJson } from '../http/index.ts';
import type { BackendPool } from './backend-pool.ts';
import { badPing, PROXY_ROUTES, proxyBodyRules } from './proxy-errors.ts';
import type { DiscoveryPing } from './types.ts';

const ZMQ_ADDRESS = /^host:[^,]+,handshake:\d+,notify:\d+$/;

export function parsePing(raw: unknown): DiscoveryPing {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw badPing('the body must be a JSON object');
  const p = raw as Record<string, unknown>;
  if (p['type'] !== 'P' && p['type'] !== 'D')
    throw badPing(`type must be "P" or "D", got ${JSON.stringify(p['type'])}`);
  const http = p['http_address'];
  if (typeof http !== 'string' || !/^[^\s/]+:\d+$/.test(http)) {
    throw badPing(`http_address must be "ip:port", got ${JSON.stringify(http)}`);
  }
  const zmq = p['zmq_address'];
  if (typeof zmq !== 'string' || !ZMQ_ADDRESS.test(zmq)) {
    throw badPing(`zmq_address must be "host:IP,handshake:PORT,notify:PORT", got ${JSON.stringify(zmq)}`);
  }
  const size = (key: string): number => {
    const v = p[key] ?? 1;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
      throw badPing(`${key} must be a positive integer, got ${JSON.stringify(v)}`);
    }
    return v;
  };
  const mode = typeof p['transfer_mode'] === 'string' ? p['transfer_mode'].toUpperCase() : 'WRITE';
  if (mode !== 'READ' && mode !== 'WRITE') {
    throw badPing(`transfer_mode must be "READ" or "WRITE", got ${JSON.stringify(p['transfer_mode'])}`);
  }
  return {
    type: p['type'],
    http_address: http,
    zmq_address: zmq,
    dp_size: size('dp_size'),
    tp_size: size('tp_size'),
    transfer_mode: mode,
  };
}

export interface DiscoveryListener {
  port: number;
  close(): Promise<void>;
}

export async function startDiscovery(
  pool: BackendPool,
  host: string,
  port: number,
  ttlMs: number,
): Promise<DiscoveryListener> {
  const router = new Router(PROXY_ROUTES)
    .on('POST', '/register', async (req, res) => {
      const raw = await readJson(req, proxyBodyRules(64 * 1024, 'PROXY_DISCOVERY_BAD_PING'));
      const backend = pool.register(parsePing(raw));
      sendJson(res, 200, { ok: true, role: backend.role, url: backend.url, ttl_ms: ttlMs });
    })
    .on('GET', '/instances', (_req, res) => {
      pool.expire();
      sendJson(res, 200, {
        instances: pool
          .all()
          .filter((b) => b.source === 'discovery')
          .map((b) => b.describe()),
      });
    });
  const listening = await listen(createHttpServer(router.listener()), port, host);
  const sweep = setInterval(() => pool.expire(), Math.max(100, Math.floor(ttlMs / 4)));
  sweep.unref();
  return {
    port: listening.port,
    close: async () => {
      clearInterval(sweep);
      await listening.close();
    },
  };
}
