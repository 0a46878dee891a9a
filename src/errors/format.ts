import type { ErrorCode } from './codes.ts';
import { httpStatusOf, isKVError } from './kv-error.ts';

/** The one formatter: CLI text is the message, then the hint on its own line. */
export function formatErrorText(e: unknown): string {
  if (isKVError(e)) {
    const lines = [`error[${e.code}]: ${e.message}`];
    if (e.hint) lines.push(`hint: ${e.hint}`);
    return lines.join('\n');
  }
  if (e instanceof Error) return `error: ${e.message}`;
  return `error: ${String(e)}`;
}

/** The `type` OpenAI's clients map each status to. */
const TYPE_BY_STATUS: Record<number, string> = {
  400: 'BadRequestError',
  401: 'AuthenticationError',
  404: 'NotFoundError',
  405: 'BadRequestError',
  413: 'BadRequestError',
  422: 'UnprocessableEntityError',
  429: 'RateLimitError',
  503: 'ServiceUnavailableError',
};

/**
 * vLLM's ErrorResponse body: `{error: {message, type, param, code}}` with `code` the HTTP
 * status as an integer (vLLM's ErrorInfo). kvconnect's stable error code (errors/codes.ts)
 * rides beside it as `kvconnect_code`, with the `hint` that says how to fix it.
 */
export interface ErrorJson {
  error: {
    message: string;
    type: string;
    param: string | null;
    code: number;
    kvconnect_code: ErrorCode;
    hint?: string;
  };
}

/** The body's `type` for an HTTP status, as OpenAI's clients name it. */
export function errorTypeOfStatus(status: number): string {
  return TYPE_BY_STATUS[status] ?? (status >= 500 ? 'InternalServerError' : 'BadRequestError');
}

/** The same error as an OpenAI-style JSON error body (HTTP replies, SSE error events, check-config --json). */
export function formatErrorJson(e: unknown): ErrorJson {
  const status = httpStatusOf(e);
  const type = errorTypeOfStatus(status);
  if (isKVError(e)) {
    return {
      error: {
        message: e.message,
        type: e.errorType ?? type,
        param: e.field ?? null,
        code: status,
        kvconnect_code: e.code,
        ...(e.hint ? { hint: e.hint } : {}),
      },
    };
  }
  const message = e instanceof Error ? e.message : String(e);
  return { error: { message, type, param: null, code: status, kvconnect_code: 'INTERNAL_ERROR' } };
}
