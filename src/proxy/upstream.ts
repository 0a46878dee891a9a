/**
 * HTTP to the backends: one keep-alive undici Agent, JSON posts with an abort signal, and
 * small JSON GETs for health and info. Bodies are returned as undici readables so the
 * caller can stream them through without buffering.
 */
import { Agent, type Dispatcher, request } from 'undici';

export interface UpstreamResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Dispatcher.ResponseData['body'];
}

/**
 * Idle connections to a backend are dropped after 4 s, before any backend drops them (ours
 * keep them 65 s, uvicorn 5 s), so a request never goes out on a socket being closed.
 */
const IDLE = { keepAliveTimeout: 4_000, keepAliveMaxTimeout: 4_000 } as const;

/** Called with each informational (1xx) response that precedes the final one. */
export type InfoListener = (info: {
  statusCode: number;
  headers: Record<string, string | string[] | undefined>;
}) => void;

export class Upstream {
  readonly #agent = new Agent({ ...IDLE, connections: 256 });
  /**
   * Health and info probes get their own connections: on the request pool they would queue
   * behind up to 256 long requests and time out, and a busy backend would look dead.
   */
  readonly #probes = new Agent({ ...IDLE, connections: 2 });

  /**
   * One POST; a connection reset before any response is retried once on a fresh connection:
   * a server closes an idle keep-alive connection when its timer fires, and a request already
   * on the way is lost unprocessed (seen under load, where the server's timers run late).
   */
  postJson(
    url: string,
    body: unknown,
    headers: Record<string, string>,
    signal: AbortSignal,
    onInfo?: InfoListener,
  ): Promise<UpstreamResponse> {
    return retryOnReset(signal, () => this.#post(url, body, headers, signal, onInfo));
  }

  async #post(
    url: string,
    body: unknown,
    headers: Record<string, string>,
    signal: AbortSignal,
    onInfo: InfoListener | undefined,
  ): Promise<UpstreamResponse> {
    const res = await request(url, {
      method: 'POST',
      dispatcher: this.#agent,
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      signal,
      headersTimeout: 0,
      bodyTimeout: 0,
      ...(onInfo ? { onInfo } : {}),
    });
    return { status: res.statusCode, headers: res.headers, body: res.body };
  }

  /** One GET, retried once after a connection reset like postJson. */
  get(
    url: string,
    signal: AbortSignal,
    headers: Record<string, string> = {},
    dispatcher: Dispatcher = this.#agent,
  ): Promise<UpstreamResponse> {
    return retryOnReset(signal, async () => {
      const res = await request(url, { method: 'GET', dispatcher, headers, signal });
      return { status: res.statusCode, headers: res.headers, body: res.body };
    });
  }

  /** A probe (health, info): GET with a deadline; the body is parsed as JSON when it is JSON, else text. */
  async getJson(url: string, timeoutMs: number): Promise<{ status: number; json: unknown }> {
    const res = await this.get(url, AbortSignal.timeout(timeoutMs), {}, this.#probes);
    const text = await res.body.text();
    try {
      return { status: res.status, json: text.length > 0 ? JSON.parse(text) : null };
    } catch {
      return { status: res.status, json: text };
    }
  }

  async close(): Promise<void> {
    await Promise.all([this.#agent.destroy(), this.#probes.destroy()]);
  }
}

async function retryOnReset<T>(signal: AbortSignal, attempt: () => Promise<T>): Promise<T> {
  try {
    return await attempt();
  } catch (e) {
    const code = (e as { code?: unknown }).code;
    if (signal.aborted || (code !== 'ECONNRESET' && code !== 'UND_ERR_SOCKET')) throw e;
    return await attempt();
  }
}
