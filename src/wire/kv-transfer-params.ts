/**
 * `kv_transfer_params` (docs/serve.md#kv_transfer_params): the per-request object a P/D
 * proxy sends each server and a prefill server returns. The keys vLLM's P/D protocols define
 * have one type each, checked here for every connector; the shapes of each protocol are in
 * ./nixl-params.ts and ./moriio-params.ts.
 */

import { invalidP2PParams } from './p2p-params.ts';

/** Per-request connector parameters: JSON, connector-specific beyond the keys below. */
export type KVTransferParams = Record<string, unknown>;

type Check = (v: unknown) => boolean;

const isNonNegInt = (v: unknown): boolean => typeof v === 'number' && Number.isInteger(v) && v >= 0;
const orNull =
  (check: Check): Check =>
  (v) =>
    v === null || check(v);
const isBlockIds: Check = (v) =>
  Array.isArray(v) && (v.every(isNonNegInt) || v.every((g) => Array.isArray(g) && g.every(isNonNegInt)));
const isPositiveInt: Check = (v) => isNonNegInt(v) && (v as number) >= 1;

/** The known keys: what each must be (null is always allowed: "not set"). */
const KV_TRANSFER_PARAM_TYPES: Readonly<Record<string, { check: Check; expected: string }>> = {
  do_remote_prefill: { check: orNull((v) => typeof v === 'boolean'), expected: 'a boolean' },
  do_remote_decode: { check: orNull((v) => typeof v === 'boolean'), expected: 'a boolean' },
  remote_engine_id: { check: orNull((v) => typeof v === 'string'), expected: 'a string' },
  remote_request_id: { check: orNull((v) => typeof v === 'string'), expected: 'a string' },
  remote_host: { check: orNull((v) => typeof v === 'string'), expected: 'a host name or IP string' },
  remote_port: {
    check: orNull((v) => isNonNegInt(v) && (v as number) <= 65535),
    expected: 'an integer port in 0..65535',
  },
  remote_block_ids: {
    check: orNull(isBlockIds),
    expected: 'a list of block ids, or one list per KV cache group',
  },
  tp_size: { check: orNull(isPositiveInt), expected: 'a positive integer' },
  pp_size: { check: orNull(isPositiveInt), expected: 'a positive integer' },
  remote_num_tokens: { check: orNull(isNonNegInt), expected: 'a non-negative integer' },
  remote_blocks_expiry_time: {
    check: orNull((v) => typeof v === 'number' && Number.isFinite(v)),
    expected: 'a number (seconds on the remote engine clock)',
  },
  remote_dp_rank: { check: orNull(isNonNegInt), expected: 'a non-negative integer' },
  transfer_id: { check: orNull((v) => typeof v === 'string'), expected: 'a string' },
};

/** The first known key whose value has the wrong type, or null when all are well-typed. */
export function invalidKvTransferParam(
  params: KVTransferParams,
): { key: string; expected: string; received: unknown; hint?: string } | null {
  for (const [key, spec] of Object.entries(KV_TRANSFER_PARAM_TYPES)) {
    if (Object.hasOwn(params, key) && !spec.check(params[key]))
      return { key, expected: spec.expected, received: params[key] };
  }
  return invalidP2PParams(params);
}
