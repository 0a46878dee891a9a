/**
 * MoRIIO service discovery without ZMQ: instances POST their ping as JSON to
 * http://{proxy}:{discovery-port}/register every few seconds (vLLM pings every 3 s); the
 * proxy turns each into a prefill or decode backend and drops it when pings stop (the ping's
 * shape: src/wire/moriio-discovery.ts). GET /instances lists what is registered.
 */
import { createHttpServer, listen, Router, readJson, sendJson } from '../http/index.ts';
import { MORIIO_DISCOVERY_PATH, type MoRIIODiscoveryAnswer, parseDiscoveryPing } from '../wire/index.ts';
import type { BackendPool } from './backend-pool.ts';
import { PROXY_ROUTES, proxyBodyRules } from './proxy-errors.ts';

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
    .on('POST', MORIIO_DISCOVERY_PATH, async (req, res) => {
      const raw = await readJson(req, proxyBodyRules(64 * 1024, 'PROXY_DISCOVERY_BAD_PING'));
      const backend = pool.register(parseDiscoveryPing(raw));
      const answer: MoRIIODiscoveryAnswer = { ok: true, role: backend.role, url: backend.url, ttl_ms: ttlMs };
      sendJson(res, 200, answer);
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
