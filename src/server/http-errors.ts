/**
 * HTTP-facing errors: a KVError plus the status it maps to. Every error body is the
 * OpenAI shape produced by formatErrorJson, with the `type` OpenAI clients expect.
 */
import type { ServerResponse } from 'node:http';
import { formatErrorJson, isKVError, KVError, type KVErrorOptions } from '../errors/index.ts';

export class HttpError extends KVError {
  readonly status: number;

  constructor(status: number, code: string, message: string, options: KVErrorOptions = {}) {
    super(code, message, options);
    this.name = 'HttpError';
    this.status = status;
  }
}

const TYPE_BY_STATUS: Record<number, string> = {
  400: 'BadRequestError',
  401: 'AuthenticationError',
  404: 'NotFoundError',
  405: 'BadRequestError',
  413: 'BadRequestError',
  422: 'UnprocessableEntityError',
  503: 'ServiceUnavailableError',
};

export function statusOf(e: unknown): number {
  if (e instanceof HttpError) return e.status;
  return isKVError(e) ? 400 : 500;
}

/** The OpenAI-style error body for `e` (also used inside SSE streams). */
export function errorBody(e: unknown): ReturnType<typeof formatErrorJson> {
  const status = statusOf(e);
  const body = formatErrorJson(e, status);
  body.error.type = TYPE_BY_STATUS[status] ?? (status >= 500 ? 'InternalServerError' : 'BadRequestError');
  return body;
}

export function sendError(res: ServerResponse, e: unknown): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const status = statusOf(e);
  const payload = JSON.stringify(errorBody(e));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
  res.end(payload);
}

export function badRequest(
  message: string,
  param: string,
  hint: string,
  code = 'SERVER_INVALID_REQUEST',
): HttpError {
  return new HttpError(400, code, message, { field: param, hint });
}
