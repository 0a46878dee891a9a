/**
 * Per-request `kv_transfer_params` (docs/serve.md#kv_transfer_params): an object passed
 * through to the engine's connector. Keys the P/D protocols define are type-checked
 * (src/wire/kv-transfer-params.ts) so garbage is a clear 400 instead of a connector failure
 * deep inside the engine; other keys pass through.
 */
import { invalidKvTransferParam, type KVTransferParams } from '../wire/index.ts';
import { badRequest } from './fields.ts';

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
  const params = value as KVTransferParams;
  const bad = invalidKvTransferParam(params);
  if (bad !== null) {
    throw badRequest(
      `Invalid kv_transfer_params.${bad.key}: expected ${bad.expected}, received ${JSON.stringify(bad.received)?.slice(0, 60)}.`,
      `kv_transfer_params.${bad.key}`,
      bad.hint ??
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
