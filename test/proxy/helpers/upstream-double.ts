/**
 * A real HTTP server on 127.0.0.1:0 that speaks just enough of vLLM's protocol to stand
 * in for a prefill or decode server in proxy tests, and records what it received
 * (headers, body, whether the caller hung up before the response ended).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type RunningProxy, resolveProxyOptions, startProxy } from '../../../src/proxy/index.ts';
import type { ProxyOptions } from '../../../src/proxy/types.ts';

export interface Received {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  body: Record<string, unknown>;
  at: number;
  closedEarly: boolean;
}

export type Responder = (rec: Received, res: ServerResponse) => Promise<void> | void;

export const P_RETURNED_PARAMS = {
  do_remote_prefill: true,
  do_remote_decode: false,
  remote_block_ids: [[1, 2, 3]],
  remote_engine_id: 'engine-p',
  remote_request_id: 'cmpl-abc-0-12345678',
  remote_host: '127.0.0.1',
  remote_port: 5600,
  tp_size: 1,
  remote_num_tokens: 20,
  remote_blocks_expiry_time: null,
  transfer_mode: 'pull',
};

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A prefill double: one token, P's kv_transfer_params. */
export function prefillResponder(
  delayMs = 0,
  params: Record<string, unknown> = P_RETURNED_PARAMS,
): Responder {
  return async (_rec, res) => {
    if (delayMs > 0) await sleep(delayMs);
    if (res.destroyed) return;
    json(res, 200, {
      id: 'cmpl-p',
      object: 'text_completion',
      choices: [{ index: 0, text: 'P' }],
      kv_transfer_params: params,
    });
  };
}

/** A decode double: SSE chunks `tok0..tokN-1` with a gap between them, or one JSON body. */
export function decodeResponder(tokens = 3, gapMs = 0): Responder {
  return async (rec, res) => {
    if (rec.body['stream'] !== true) {
      json(res, 200, { id: 'cmpl-d', choices: [{ index: 0, text: 'decoded' }] });
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.flushHeaders();
    for (let i = 0; i < tokens; i++) {
      if (i > 0 && gapMs > 0) await sleep(gapMs);
      if (res.destroyed) return;
      res.write(`data: ${JSON.stringify({ id: 'cmpl-d', choices: [{ index: 0, text: `tok${i}` }] })}\n\n`);
    }
    res.end('data: [DONE]\n\n');
  };
}

export function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

export class UpstreamDouble {
  readonly received: Received[] = [];
  respond: Responder;
  /** Body of GET /kvconnect/info; null answers 404 as a real vLLM server does. */
  info: Record<string, unknown> | null;
  healthy = true;
  /** Delay before answering GET /health (an overloaded server). */
  healthDelayMs = 0;
  readonly #server: Server;
  url = '';

  constructor(respond: Responder, info: Record<string, unknown> | null = null) {
    this.respond = respond;
    this.info = info;
    this.#server = createServer((req, res) => void this.#handle(req, res));
  }

  static async start(
    respond: Responder,
    info: Record<string, unknown> | null = null,
  ): Promise<UpstreamDouble> {
    const d = new UpstreamDouble(respond, info);
    await new Promise<void>((resolve) => d.#server.listen(0, '127.0.0.1', () => resolve()));
    d.url = `http://127.0.0.1:${(d.#server.address() as AddressInfo).port}`;
    return d;
  }

  completions(): Received[] {
    return this.received.filter((r) => r.path.endsWith('completions'));
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req as AsyncIterable<Buffer>) chunks.push(c);
    const text = Buffer.concat(chunks).toString('utf8');
    const path = req.url ?? '/';
    if (req.method === 'GET' && path === '/health') {
      if (this.healthDelayMs > 0) await sleep(this.healthDelayMs);
      json(res, this.healthy ? 200 : 503, {});
      return;
    }
    if (req.method === 'GET' && path === '/kvconnect/info') {
      if (this.info === null) json(res, 404, { detail: 'Not Found' });
      else json(res, 200, this.info);
      return;
    }
    if (req.method === 'GET' && path === '/v1/models') {
      json(res, 200, { object: 'list', data: [{ id: 'tiny', object: 'model' }] });
      return;
    }
    const rec: Received = {
      method: req.method ?? '',
      path,
      headers: req.headers,
      body: text ? (JSON.parse(text) as Record<string, unknown>) : {},
      at: performance.now(),
      closedEarly: false,
    };
    this.received.push(rec);
    res.on('close', () => {
      if (!res.writableFinished) rec.closedEarly = true;
    });
    await this.respond(rec, res);
  }
}

export async function waitFor(cond: () => boolean, timeoutMs = 3000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** A proxy in front of these doubles for the length of `fn`; closes the proxy and the doubles after. */
export async function withProxy(
  p: UpstreamDouble[],
  d: UpstreamDouble[],
  extra: Partial<ProxyOptions>,
  fn: (url: string, proxy: RunningProxy) => Promise<void>,
): Promise<void> {
  const proxy = await startProxy(
    resolveProxyOptions({ prefill: p.map((x) => x.url), decode: d.map((x) => x.url), port: 0, ...extra }),
  );
  try {
    await fn(proxy.url, proxy);
  } finally {
    await proxy.close();
    for (const x of [...p, ...d]) await x.close();
  }
}
