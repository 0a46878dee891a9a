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

export class Upstream {
  readonly #agent = new Agent({ keepAliveTimeout: 30_000, connections: 256 });

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
  ): Promise<UpstreamResponse> {
    return retryOnReset(signal, () => this.#post(url, body, headers, signal));
  }

  async #post(
    url: string,
    body: unknown,
    headers: Record<string, string>,
    signal: AbortSignal,
  ): Promise<UpstreamResponse> {
    const res = await request(url, {
      method: 'POST',
      dispatcher: this.#agent,
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      signal,
      headersTimeout: 0,
      bodyTimeout: 0,
    });
    return { status: res.statusCode, headers: res.headers, body: res.body };
  }

  /** One GET, retried once after a connection reset like postJson. */
  get(url: string, signal: AbortSignal, headers: Record<string, string> = {}): Promise<UpstreamResponse> {
    return retryOnReset(signal, async () => {
      const res = await request(url, { method: 'GET', dispatcher: this.#agent, headers, signal });
      return { status: res.statusCode, headers: res.headers, body: res.body };
    });
  }

  /** GET with a deadline; the body is parsed as JSON when it is JSON, else returned as text. */
  async getJson(url: string, timeoutMs: number): Promise<{ status: number; json: unknown }> {
    const res = await this.get(url, AbortSignal.timeout(timeoutMs));
    const text = await res.body.text();
    try {
      return { status: res.status, json: text.length > 0 ? JSON.parse(text) : null };
    } catch {
      return { status: res.status, json: text };
    }
  }

  async close(): Promise<void> {
    await this.#agent.destroy();
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
