/**
 * Per-request `kv_transfer_params` (docs/serve.md#kv_transfer_params): an object passed
 * through to the engine's connector. Keys the P/D protocols define are type-checked here so
 * garbage is a clear 400 instead of a connector failure deep inside the engine; other keys
 * pass through.
 */
import type { KVTransferParams } from '../connector/types.ts';
import { badRequest } from './fields.ts';

type Check = (v: unknown) => boolean;

const isBoolOrNull: Check = (v) => v === null || typeof v === 'boolean';
const isStringOrNull: Check = (v) => v === null || typeof v === 'string';
const isNonNegInt = (v: unknown): boolean => typeof v === 'number' && Number.isInteger(v) && v >= 0;
const isPortOrNull: Check = (v) => v === null || (isNonNegInt(v) && (v as number) <= 65535);
const isIntOrNull: Check = (v) => v === null || isNonNegInt(v);
const isBlockIds: Check = (v) =>
  v === null ||
  (Array.isArray(v) && (v.every(isNonNegInt) || v.every((g) => Array.isArray(g) && g.every(isNonNegInt))));

const KNOWN_KEYS: Record<string, { check: Check; expected: string }> = {
  do_remote_prefill: { check: isBoolOrNull, expected: 'a boolean' },
  do_remote_decode: { check: isBoolOrNull, expected: 'a boolean' },
  remote_engine_id: { check: isStringOrNull, expected: 'a string' },
  remote_request_id: { check: isStringOrNull, expected: 'a string' },
  remote_host: { check: isStringOrNull, expected: 'a host name or IP string' },
  remote_port: { check: isPortOrNull, expected: 'an integer port in 0..65535' },
  remote_block_ids: { check: isBlockIds, expected: 'a list of block ids, or one list per KV cache group' },
  tp_size: {
    check: (v) => v === null || (isNonNegInt(v) && (v as number) >= 1),
    expected: 'a positive integer',
  },
  pp_size: {
    check: (v) => v === null || (isNonNegInt(v) && (v as number) >= 1),
    expected: 'a positive integer',
  },
  remote_num_tokens: { check: isIntOrNull, expected: 'a non-negative integer' },
  remote_dp_rank: { check: isIntOrNull, expected: 'a non-negative integer' },
  transfer_id: { check: isStringOrNull, expected: 'a string' },
};

export function parseKvTransferParams(value: unknown): KVTransferParams | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw badRequest(
      'kv_transfer_params must be a JSON object.',
      'kv_transfer_params',
      'Pass the object a prefill server returned, e.g. {"do_remote_decode": true} on the prefill leg.',
      'SERVER_INVALID_KV_TRANSFER_PARAMS',
    );
  }
  const params = value as Record<string, unknown>;
  for (const [key, spec] of Object.entries(KNOWN_KEYS)) {
    if (!Object.hasOwn(params, key) || spec.check(params[key])) continue;
    throw badRequest(
      `Invalid kv_transfer_params.${key}: expected ${spec.expected}, received ${JSON.stringify(params[key])?.slice(0, 60)}.`,
      `kv_transfer_params.${key}`,
      'Forward the kv_transfer_params of the prefill response unchanged; do not edit them by hand.',
      'SERVER_INVALID_KV_TRANSFER_PARAMS',
    );
  }
  return params;
}

/**
 * True when rejecting this request must still tell the engine, so the prefill peer frees its
 * blocks (docs/scheduler.md#delayed-free-and-aborts).
 */
export function needsRejectionNotice(params: unknown): params is KVTransferParams {
  return (
    typeof params === 'object' &&
    params !== null &&
    (params as Record<string, unknown>)['do_remote_prefill'] === true
  );
}
