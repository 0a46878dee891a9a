/**
 * How MultiConnector combines its children's kv_transfer_params: disjoint keys, or vLLM's
 * exact key-clash error.
 */

import type { KVTransferParams } from '../../connector/types.ts';
import { pythonRepr } from '../../errors/index.ts';
import { KVError } from '../../errors/kv-error.ts';

/** Python's repr of a set of strings; elements sorted so the message is deterministic. */
export function pythonSetRepr(items: Iterable<string>): string {
  return `{${[...new Set(items)].sort().map(pythonRepr).join(', ')}}`;
}

export function mergeTransferParams(parts: readonly (KVTransferParams | null)[]): KVTransferParams | null {
  let merged: KVTransferParams | null = null;
  for (const part of parts) {
    if (part === null) continue;
    if (merged === null) {
      merged = { ...part };
      continue;
    }
    const clashes = Object.keys(part).filter((k) => Object.hasOwn(merged as KVTransferParams, k));
    if (clashes.length > 0) {
      throw new KVError(
        'KV_MULTI_CONNECTOR_KEY_CLASH',
        `Key clash in kv_transfer_params from multiple connectors: ${pythonSetRepr(clashes)}`,
        {
          details: { clashes: [...clashes].sort() },
          hint: 'Two child connectors of MultiConnector return the same kv_transfer_params keys; combine connectors whose params do not overlap (at most one peer-to-peer connector).',
        },
      );
    }
    Object.assign(merged, part);
  }
  return merged;
}
