/** Errors cross the thread boundary as plain data and become KVErrors again on the other side. */
import { toErrorCode } from '../../errors/codes.ts';
import { KVError } from '../../errors/kv-error.ts';
import type { SerializedError } from './tp-protocol.ts';

export function serializeError(e: unknown): SerializedError {
  if (e instanceof KVError) {
    return {
      code: e.code,
      message: e.message,
      ...(e.hint ? { hint: e.hint } : {}),
      ...(e.stack ? { stack: e.stack } : {}),
    };
  }
  const err = e instanceof Error ? e : new Error(String(e));
  return { code: 'KV_WORKER_ERROR', message: err.message, ...(err.stack ? { stack: err.stack } : {}) };
}

export function deserializeError(s: SerializedError): KVError {
  const error = new KVError(toErrorCode(s.code, 'KV_WORKER_ERROR'), s.message, {
    hint: s.hint ?? 'See the tensor-parallel worker stack in the cause.',
  });
  if (s.stack) error.stack = `${error.stack}\n    --- in tensor-parallel worker ---\n${s.stack}`;
  return error;
}
