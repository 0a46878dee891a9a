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
