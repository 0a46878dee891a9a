/**
 * The decode leg's answer on its way to the client. Nothing is written to the client until
 * the answer is known to be usable: a JSON body is read whole first, and a stream's events
 * pass through StreamSplice, which holds back the ones that carry no token. So a leg that
 * fails before its first token (refused, reset, 5xx, an error event such as a failed KV
 * load, a body cut short) leaves the client untouched and can be retried elsewhere; a
 * stream that fails later is reported as started, for the caller to resume.
 */
import type { ServerResponse } from 'node:http';
import { formatErrorJson } from '../errors/index.ts';
import { writeChunk } from '../http/index.ts';
import type { KvParamsTap } from './conversation-cache.ts';
import type { RetryReason } from './proxy-metrics.ts';
import type { Json } from './request-shaping.ts';
import { sseData } from './sse.ts';
import type { StreamSplice } from './stream-resume.ts';
import { eventError } from './stream-resume.ts';
import type { UpstreamResponse } from './upstream.ts';

/** Our servers' code for a failed KV load under kv_load_failure_policy=fail. */
const KV_LOAD_FAILED = 'KV_LOAD_FAILED';

export type RelayOutcome =
  | { ok: true }
  | { ok: false; reason: RetryReason; why: string; status?: number; text?: string };

/** The client's response: written once the first usable bytes are known. */
export class ClientOut {
  readonly #res: ServerResponse;
  readonly #requestId: string;
  /** Reads D's kv_transfer_params on the way (multi-turn, ./conversation-cache.ts). */
  readonly #tap: KvParamsTap | null;
  #streaming = false;

  constructor(res: ServerResponse, requestId: string, tap: KvParamsTap | null = null) {
    this.#res = res;
    this.#requestId = requestId;
    this.#tap = tap;
  }

  get gone(): boolean {
    return this.#res.destroyed;
  }

  /** A whole answer (JSON, or an error status) with the backend's status and content type. */
  whole(status: number, contentType: string, body: Uint8Array): void {
    if (status < 300) this.#tap?.whole(body);
    this.#res.writeHead(status, { 'content-type': contentType, 'x-request-id': this.#requestId });
    this.#res.end(body);
  }

  /** A chunk of the backend's stream, passed through as it is. */
  async chunk(chunk: Uint8Array): Promise<void> {
    this.#tap?.chunk(chunk);
    await this.events([chunk]);
  }

  /** One event of the backend's stream that the relay splits, as it arrives (read for the tap). */
  upstreamEvent(data: string): void {
    this.#tap?.event(data);
  }

  /** Events the proxy writes (a spliced stream's, a failed stream's end); the tap reads the backend's instead. */
  async events(events: readonly (string | Uint8Array)[]): Promise<void> {
    if (!this.#streaming) {
      this.#streaming = true;
      this.#res.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache',
        'x-request-id': this.#requestId,
      });
      // The headers leave with the first event, in one write (the client reads both at once).
      if (events.length === 0) this.#res.flushHeaders();
    }
    for (const e of events) {
      if (this.#res.destroyed) return;
      await writeChunk(this.#res, e);
    }
  }

  /** Ends a stream that cannot go on with an error event, as a server ends a failed stream. */
  async failStream(error: unknown): Promise<void> {
    await this.events([`data: ${JSON.stringify(formatErrorJson(error))}\n\n`, 'data: [DONE]\n\n']);
    this.#res.end();
  }

  end(): void {
    this.#res.end();
  }
}

function failure(
  reason: RetryReason,
  why: string,
  extra: { status?: number; text?: string } = {},
): RelayOutcome {
  return { ok: false, reason, why, ...extra };
}

/** The retry reason of a backend's error: a failed KV load, else its error status. */
function reasonOf(code: string | undefined): RetryReason {
  return code === KV_LOAD_FAILED ? 'kv_load' : 'status';
}

/** The stable error code of a server's error body (`kvconnect_code`; `code` is the HTTP status, as vLLM's). */
function errorCodeOf(text: string): string | undefined {
  try {
    const code = (JSON.parse(text) as { error?: { kvconnect_code?: unknown } }).error?.kvconnect_code;
    return typeof code === 'string' ? code : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Passes one decode answer to the client. `splice` is null for a request whose stream is not
 * resumed (it then passes through byte for byte once its first byte arrived).
 */
export async function relayDecode(
  up: UpstreamResponse,
  out: ClientOut,
  splice: StreamSplice | null,
): Promise<RelayOutcome> {
  if (up.status >= 500) {
    const text = await up.body.text().catch(() => '');
    return failure(reasonOf(errorCodeOf(text)), `answered ${up.status}`, { status: up.status, text });
  }
  const contentType = String(up.headers['content-type'] ?? 'application/json');
  if (!contentType.startsWith('text/event-stream')) {
    let body: Uint8Array;
    try {
      body = new Uint8Array(await up.body.arrayBuffer());
    } catch (e) {
      return failure('interrupted', `its answer broke off (${(e as Error).message})`);
    }
    out.whole(up.status, contentType, body);
    return { ok: true };
  }
  return splice === null ? passThrough(up, out) : spliced(up, out, splice);
}

async function passThrough(up: UpstreamResponse, out: ClientOut): Promise<RelayOutcome> {
  const chunks = (up.body as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]();
  let next: IteratorResult<Uint8Array>;
  try {
    next = await chunks.next();
  } catch (e) {
    return failure('interrupted', `its stream broke off before its first byte (${(e as Error).message})`);
  }
  if (next.done) return failure('interrupted', 'its stream ended before its first event');
  // A stream that opens with an error event (a failed KV load) has not started: retry it.
  const opening = firstEventError(next.value);
  if (opening !== null) {
    up.body.destroy();
    return failure(reasonOf(opening.code), `sent an error event: ${opening.message}`);
  }
  try {
    while (!next.done) {
      await out.chunk(next.value);
      if (out.gone) break;
      next = await chunks.next();
    }
  } catch {
    // Started and not resumable: the client's stream ends where the backend's did.
  }
  out.end();
  return { ok: true };
}

/** The error of a first chunk that opens with an SSE error event (`data: {"error": ...}`), else null. */
function firstEventError(chunk: Uint8Array): { code: string | undefined; message: string } | null {
  const text = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength).toString();
  const match = /^data: ?(\{"error".*?)\r?\n\r?\n/s.exec(text);
  if (!match) return null;
  try {
    return eventError(JSON.parse(match[1]!) as Json);
  } catch {
    return null;
  }
}

async function spliced(up: UpstreamResponse, out: ClientOut, splice: StreamSplice): Promise<RelayOutcome> {
  try {
    for await (const data of sseData(up.body as AsyncIterable<Uint8Array>)) {
      out.upstreamEvent(data);
      const step = splice.accept(data);
      if (step.kind === 'forward') {
        await out.events(step.events);
        if (out.gone) return { ok: true };
      } else if (step.kind === 'error') {
        up.body.destroy();
        return failure(reasonOf(step.code), `sent an error event: ${step.message}`);
      } else if (step.kind === 'done') {
        await out.events([...splice.flushHeld(), 'data: [DONE]\n\n']);
        out.end();
        return { ok: true };
      }
    }
  } catch (e) {
    return failure('interrupted', `its stream broke off (${(e as Error).message})`);
  }
  if (!splice.finished) return failure('interrupted', 'its stream ended early');
  await out.events([...splice.flushHeld(), 'data: [DONE]\n\n']);
  out.end();
  return { ok: true };
}
