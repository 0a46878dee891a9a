/**
 * Reading requests on node:http: bounded bodies (413 past the limit, without buffering the
 * excess), JSON bodies (400 when unparsable) and single header values. The codes are the
 * caller's, so the server and the proxy keep their own names under one convention.
 */
import type { IncomingMessage } from 'node:http';
import { type ErrorCode, KVError } from '../errors/index.ts';

export interface BodyRules {
  maxBytes: number;
  /** Raised with status 413 when the body exceeds maxBytes. */
  tooLarge: ErrorCode;
  /** Raised with status 400 when the body is not JSON. */
  invalidJson: ErrorCode;
  /** How to raise the limit, for the 413's hint. */
  limitHint: string;
}

export function readBody(req: IncomingMessage, rules: BodyRules): Promise<Buffer> {
  const limit = rules.maxBytes;
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length'] ?? Number.NaN);
    if (Number.isFinite(declared) && declared > limit) {
      req.resume();
      reject(tooLarge(rules, declared));
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
        reject(tooLarge(rules, size));
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

function tooLarge(rules: BodyRules, size: number): KVError {
  return new KVError(
    rules.tooLarge,
    `Request body too large: ${size} bytes exceeds the limit of ${rules.maxBytes} bytes.`,
    { hint: rules.limitHint, details: { size, limit: rules.maxBytes } },
  );
}

export async function readJson(req: IncomingMessage, rules: BodyRules): Promise<unknown> {
  const body = await readBody(req, rules);
  try {
    return JSON.parse(body.toString('utf8'));
  } catch (e) {
    throw new KVError(rules.invalidJson, `Invalid JSON in request body: ${(e as Error).message}`, {
      hint: 'Send a JSON object with Content-Type: application/json.',
    });
  }
}

export function headerValue(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}
