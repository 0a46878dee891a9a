/**
 * MultiConnector's stats (docs/connectors/multi.md): `{childClassName: stats}`, children of
 * one class aggregated, as vLLM's MultiConnector reports them.
 */
import { mergeStats } from '../../connector/stats.ts';
import type { KVConnectorStatsData } from '../../connector/types.ts';

/** `{childClassName: stats}`; children of the same class are aggregated. Null when empty. */
export function statsPerChildClass(
  entries: readonly { className: string; stats: KVConnectorStatsData | null }[],
): KVConnectorStatsData | null {
  const out: Record<string, KVConnectorStatsData> = {};
  for (const { className, stats } of entries) {
    if (!stats) continue;
    const prev = out[className];
    out[className] = prev ? mergeStats(prev, stats) : { ...stats };
  }
  return Object.keys(out).length > 0 ? out : null;
}
