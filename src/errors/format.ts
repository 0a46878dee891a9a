import { isKVError } from './kv-error.ts';

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

/** The same error as an OpenAI-style JSON error body (used by the HTTP server). */
export function formatErrorJson(
  e: unknown,
  status = 400,
): { error: { message: string; type: string; code: string; hint?: string; param?: string } } {
  const type = status >= 500 ? 'InternalServerError' : 'BadRequestError';
  if (isKVError(e)) {
    return {
      error: {
        message: e.message,
        type,
        code: e.code,
        ...(e.hint ? { hint: e.hint } : {}),
        ...(e.field ? { param: e.field } : {}),
      },
    };
  }
  const message = e instanceof Error ? e.message : String(e);
  return { error: { message, type, code: status >= 500 ? 'INTERNAL_ERROR' : 'BAD_REQUEST' } };
}
