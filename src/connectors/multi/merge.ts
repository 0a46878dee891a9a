/**
 * How MultiConnector combines its children's answers: kv_transfer_params (disjoint keys, or
 * vLLM's exact key-clash error) and stats (one entry per child class name).
 */
import { pythonRepr } from '../../config/config-error.ts';
import type { KVConnectorStatsData, KVTransferParams } from '../../connector/types.ts';
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

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Numbers add, arrays concatenate, objects merge recursively, anything else: the later wins. */
export function mergeStatsData(into: KVConnectorStatsData, from: KVConnectorStatsData): KVConnectorStatsData {
  const out: KVConnectorStatsData = { ...into };
  for (const [key, value] of Object.entries(from)) {
    const prev = out[key];
    if (typeof prev === 'number' && typeof value === 'number') out[key] = prev + value;
    else if (Array.isArray(prev) && Array.isArray(value)) out[key] = [...prev, ...value];
    else if (isRecord(prev) && isRecord(value)) out[key] = mergeStatsData(prev, value);
    else out[key] = value;
  }
  return out;
}

/** `{childClassName: stats}`; children of the same class are aggregated. Null when empty. */
export function statsPerChildClass(
  entries: readonly { className: string; stats: KVConnectorStatsData | null }[],
): KVConnectorStatsData | null {
  const out: Record<string, KVConnectorStatsData> = {};
  for (const { className, stats } of entries) {
    if (!stats) continue;
    const prev = out[className];
    out[className] = prev ? mergeStatsData(prev, stats) : { ...stats };
  }
  return Object.keys(out).length > 0 ? out : null;
}
