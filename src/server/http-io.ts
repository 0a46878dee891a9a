/** Reading bounded JSON bodies and writing JSON responses with node:http. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { HttpError } from './http-errors.ts';

export const DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024;

/** Reads the whole body, refusing (413) past `limit` bytes without buffering the excess. */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length'] ?? Number.NaN);
    if (Number.isFinite(declared) && declared > limit) {
      req.resume();
      reject(tooLarge(declared, limit));
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let failed = false;
    req.on('data', (chunk: Buffer) => {
      if (failed) return;
      size += chunk.length;
      if (size > limit) {
        failed = true;
        chunks.length = 0;
        reject(tooLarge(size, limit));
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (!failed) resolve(Buffer.concat(chunks, size));
    });
    req.on('error', (e) => {
      if (!failed) reject(e);
      failed = true;
    });
  });
}

function tooLarge(size: number, limit: number): HttpError {
  return new HttpError(
    413,
    'SERVER_BODY_TOO_LARGE',
    `Request body too large: ${size} bytes exceeds the limit of ${limit} bytes.`,
    {
      hint: 'Send a shorter prompt, or start the server with a larger maxBodyBytes.',
    },
  );
}

export async function readJson(req: IncomingMessage, limit: number): Promise<unknown> {
  const body = await readBody(req, limit);
  try {
    return JSON.parse(body.toString('utf8'));
  } catch (e) {
    throw new HttpError(400, 'SERVER_INVALID_JSON', `Invalid JSON in request body: ${(e as Error).message}`, {
      hint: 'Send a JSON object with Content-Type: application/json.',
    });
  }
}

export function sendJson(
  res: ServerResponse,
  status: number,
  value: unknown,
  headers: Record<string, string> = {},
): void {
  const payload = JSON.stringify(value);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(payload),
    ...headers,
  });
  res.end(payload);
}

export function sendText(res: ServerResponse, status: number, text: string, contentType: string): void {
  res.writeHead(status, { 'content-type': contentType, 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
