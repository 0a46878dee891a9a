/**
 * Writing responses on node:http: JSON and text bodies, errors in OpenAI's error shape with
 * the status their code declares (src/errors/codes.ts), and chunks that respect
 * back-pressure.
 */
import type { ServerResponse } from 'node:http';
import { formatErrorJson, httpStatusOf } from '../errors/index.ts';
import { drained } from '../util/drained.ts';

export function sendJson(
  res: ServerResponse,
  status: number,
  value: unknown,
  headers: Record<string, string> = {},
): void {
  sendText(res, status, JSON.stringify(value), 'application/json', headers);
}

export function sendText(
  res: ServerResponse,
  status: number,
  text: string,
  contentType: string,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, {
    'content-type': contentType,
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

/** Answers `e` with its declared status; once headers are out there is nothing to answer, so the socket closes. */
export function sendError(res: ServerResponse, e: unknown): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  sendJson(res, httpStatusOf(e), formatErrorJson(e));
}

/** Writes one chunk; resolves at once, or when the socket drains (or closes) if its buffer is full. */
export function writeChunk(res: ServerResponse, chunk: Uint8Array | string): Promise<void> {
  if (res.destroyed || res.writableEnded) return Promise.resolve();
  if (res.write(chunk)) return Promise.resolve();
  return drained(res);
}

/**
 * Sends a `103 Early Hints` informational response with `headers` ahead of the final one.
 * node:http's writeEarlyHints sends nothing without a `link` hint, so the status line goes
 * straight to the socket, as node:http writes its own `100 Continue`: only while the
 * response holds its socket (node:http hands a connection to one response at a time) and has
 * not begun. Returns false when it could not be sent.
 */
export function writeEarlyHints(res: ServerResponse, headers: Record<string, string>): boolean {
  const socket = res.socket;
  if (res.headersSent || socket === null || socket.destroyed || !socket.writable) return false;
  let head = 'HTTP/1.1 103 Early Hints\r\n';
  for (const [name, value] of Object.entries(headers)) {
    if (/[\r\n]/.test(name) || /[\r\n]/.test(value)) throw new Error(`header ${name} has a line break`);
    head += `${name}: ${value}\r\n`;
  }
  socket.write(`${head}\r\n`, 'latin1');
  return true;
}
