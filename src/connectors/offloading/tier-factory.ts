/** Builds the secondary tiers named in `secondary_tiers`, in order. */

import { FsTier } from './fs-tier.ts';
import type { KVTier } from './kv-tier.ts';
import { ModuleTier } from './module-tier.ts';
import { objKeysOf } from './obj-keys.ts';
import { ObjTier } from './obj-tier.ts';
import { RedisTier } from './redis-tier.ts';
import type { SecondaryTierSpec } from './tier-config.ts';
import type { RunLayout } from './vllm-key-layout.ts';

/** What a tier needs to know about the engine: the run layout its keys are named by. */
export interface TierContext {
  run: RunLayout;
}

export function createSecondaryTier(spec: SecondaryTierSpec, ctx: TierContext): KVTier {
  if (spec.type === 'fs') {
    return new FsTier({
      rootDir: spec.rootDir,
      run: ctx.run,
      capacityBytes: spec.capacityBytes,
      timeoutMs: spec.timeoutMs,
      nReadThreads: spec.nReadThreads,
      nWriteThreads: spec.nWriteThreads,
    });
  }
  if (spec.type === 'module') return ModuleTier.fromSpec(spec, ctx.run);
  if (spec.type === 'obj') return new ObjTier({ spec, ...objKeysOf(ctx.run, spec.prefix) });
  return new RedisTier({
    url: spec.url,
    clusterNodes: spec.clusterNodes,
    timeoutMs: spec.timeoutMs,
    keyPrefix: spec.keyPrefix,
  });
}

export function createSecondaryTiers(specs: readonly SecondaryTierSpec[], ctx: TierContext): KVTier[] {
  return specs.map((s) => createSecondaryTier(s, ctx));
}
