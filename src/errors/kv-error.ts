/**
 * The one error type of kvconnect. `message` is the exact vLLM string where vLLM has one
 * (tests assert it verbatim); `hint` says how to fix it; `code` is stable for programs.
 */
export interface KVErrorOptions {
  hint?: string;
  cause?: unknown;
  /** Dotted path of the offending config field, when the error is about configuration. */
  field?: string;
  /** Extra machine-readable details (expected/received values, ids, ...). */
  details?: Record<string, unknown>;
}

export class KVError extends Error {
  readonly code: string;
  readonly hint: string | undefined;
  readonly field: string | undefined;
  readonly details: Record<string, unknown> | undefined;

  constructor(code: string, message: string, options: KVErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'KVError';
    this.code = code;
    this.hint = options.hint;
    this.field = options.field;
    this.details = options.details;
  }

  /** Plain-data form for HTTP bodies, logs and structured clone. */
  toJSON(): { code: string; message: string; hint?: string; field?: string } {
    return {
      code: this.code,
      message: this.message,
      ...(this.hint === undefined ? {} : { hint: this.hint }),
      ...(this.field === undefined ? {} : { field: this.field }),
    };
  }
}

export function isKVError(e: unknown): e is KVError {
  return e instanceof KVError;
}
