import { type ErrorCode, statusOfCode } from './codes.ts';

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
  /** The error body's `type` when vLLM names it other than by status (e.g. `InvalidUserInput`). */
  errorType?: string;
}

export class KVError extends Error {
  readonly code: ErrorCode;
  readonly hint: string | undefined;
  readonly field: string | undefined;
  readonly details: Record<string, unknown> | undefined;
  readonly errorType: string | undefined;

  constructor(code: ErrorCode, message: string, options: KVErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'KVError';
    this.code = code;
    this.hint = options.hint;
    this.field = options.field;
    this.details = options.details;
    this.errorType = options.errorType;
  }

  /** The HTTP status declared for this code in the catalog (src/errors/codes.ts). */
  get status(): number {
    return statusOfCode(this.code);
  }

  /** Plain-data form for HTTP bodies, logs and structured clone. */
  toJSON(): { code: ErrorCode; message: string; hint?: string; field?: string } {
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

/** The HTTP status of any thrown value: its code's declared status, or 500 for anything else. */
export function httpStatusOf(e: unknown): number {
  return e instanceof KVError ? e.status : 500;
}
