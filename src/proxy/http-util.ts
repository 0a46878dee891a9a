/** Small node:http helpers shared by the proxy and its discovery listener. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { formatErrorJson, isKVError } from '../errors/index.ts';
import { statusOf } from './proxy-errors.ts';

const MAX_BODY_BYTES = 64 * 1024 * 1024;

export class BodyTooLarge extends Error {}

export async function readBody(req: IncomingMessage, limit = MAX_BODY_BYTES): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw new BodyTooLarge(`request body is larger than ${limit} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

/** Answers with a KVError (its status from details) or a 500 for anything else. */
export function sendError(res: ServerResponse, e: unknown): void {
  const status = isKVError(e) ? statusOf(e) : 500;
  sendJson(res, status, formatErrorJson(e, status));
}

/** Writes one chunk, waiting for drain (or the client leaving) when the socket buffer is full. */
export async function writeChunk(res: ServerResponse, chunk: Uint8Array): Promise<void> {
  if (res.write(chunk)) return;
  await new Promise<void>((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
  });
}

export function headerValue(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}
