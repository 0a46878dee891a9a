/** Combining connector stats: the engine sums them over ranks and steps, MultiConnector per child class. */
import { isRecord } from '../wire/index.ts';
import type { KVConnectorStatsData } from './types.ts';

/** Numbers add up, arrays concatenate, objects merge recursively, anything else: the later wins. */
export function mergeStats(into: KVConnectorStatsData, from: KVConnectorStatsData): KVConnectorStatsData {
  const out: KVConnectorStatsData = { ...into };
  for (const [key, value] of Object.entries(from)) {
    const prev = out[key];
    if (typeof prev === 'number' && typeof value === 'number') out[key] = prev + value;
    else if (Array.isArray(prev) && Array.isArray(value)) out[key] = [...prev, ...value];
    else if (isRecord(prev) && isRecord(value)) out[key] = mergeStats(prev, value);
    else out[key] = value;
  }
  return out;
}
