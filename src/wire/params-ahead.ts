/**
 * kv_transfer_params ahead (docs/proxy.md#params-ahead): a proxy that sends a prefill request
 * with PARAMS_AHEAD_HEADER asks the prefill server to tell it the kv_transfer_params of its
 * answer before the prefill runs, as a `103 Early Hints` informational response carrying them
 * in PARAMS_AHEAD_HINT. The final response is unchanged (and carries the same params), so a
 * server that ignores the header, as vLLM's does, only makes the proxy wait for it.
 */
import type { KVTransferParams } from './kv-transfer-params.ts';

/** Request header: `1` asks for the params ahead. */
export const PARAMS_AHEAD_HEADER = 'x-kvconnect-params-ahead';

/** Header of the 103 response: the params as JSON. */
export const PARAMS_AHEAD_HINT = 'x-kvconnect-kv-transfer-params';

export function wantsParamsAhead(value: string | string[] | undefined): boolean {
  return value === '1';
}

/** The params as a header value: JSON with every character outside ASCII escaped. */
export function formatParamsAhead(params: KVTransferParams): string {
  return JSON.stringify(params).replace(
    /[\u007f-\uffff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/** The params of a 103's headers; null when it carries none or they are not a JSON object. */
export function paramsAheadOf(
  headers: Record<string, string | string[] | undefined>,
): KVTransferParams | null {
  const raw = headers[PARAMS_AHEAD_HINT];
  if (typeof raw !== 'string') return null;
  try {
    const value: unknown = JSON.parse(raw);
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as KVTransferParams)
      : null;
  } catch {
    return null;
  }
}
