/** Builds the secondary tiers named in `secondary_tiers`, in order. */

import { FsTier } from './fs-tier.ts';
import type { KVTier } from './kv-tier.ts';
import { RedisTier } from './redis-tier.ts';
import type { SecondaryTierSpec } from './tier-config.ts';

export function createSecondaryTier(spec: SecondaryTierSpec): KVTier {
  if (spec.type === 'fs') {
    return new FsTier({ path: spec.path, capacityBytes: spec.capacityBytes, timeoutMs: spec.timeoutMs });
  }
  return new RedisTier({
    url: spec.url,
    clusterNodes: spec.clusterNodes,
    timeoutMs: spec.timeoutMs,
    keyPrefix: spec.keyPrefix,
  });
}

export function createSecondaryTiers(specs: readonly SecondaryTierSpec[]): KVTier[] {
  return specs.map(createSecondaryTier);
}
