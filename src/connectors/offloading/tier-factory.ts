/** Builds the secondary tiers named in `secondary_tiers`, in order. */

import { FsTier } from './fs-tier.ts';
import type { KVTier } from './kv-tier.ts';
import { ModuleTier } from './module-tier.ts';
import { objKeysOf } from './obj-keys.ts';
import { ObjTier } from './obj-tier.ts';
import { P2PTier } from './p2p-tier.ts';
import { p2pListenAddress } from './p2p-tier-config.ts';
import { RedisTier } from './redis-tier.ts';
import type { SecondaryTierSpec } from './tier-config.ts';
import { configDigest, type RunLayout } from './vllm-key-layout.ts';

/** Upper bound of the p2p tier's staging region. */
const P2P_STAGING_MAX_BYTES = 256 << 20;

/** What the p2p tier needs to know about the engine. */
export interface P2PEngineContext {
  dataParallelRank: number;
  /** Bytes of one CPU slot (the largest chunk of any group) and how many the CPU tier has. */
  slotBytes: number;
  numSlots: number;
  /** NONE_HASH, hex: the seed peers compare in the handshake. */
  hashSeed: string;
}

/** What a tier needs to know about the engine: the run layout its keys are named by. */
export interface TierContext {
  run: RunLayout;
  /** Required by a p2p tier. */
  p2p?: P2PEngineContext;
}

export function createSecondaryTier(spec: SecondaryTierSpec, ctx: TierContext, index = 0): KVTier {
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
  if (spec.type === 'p2p') {
    const engine = ctx.p2p;
    if (!engine) throw new Error('the p2p tier needs TierContext.p2p');
    const { host, port } = p2pListenAddress(spec, engine.dataParallelRank);
    return new P2PTier({
      host,
      port,
      backends: spec.backends,
      numThreads: spec.numThreads,
      unboundStoreTimeoutMs: spec.unboundStoreTimeoutS * 1000,
      timeoutMs: spec.timeoutMs,
      blockLen: engine.slotBytes,
      numBlocks: Math.max(1, Math.min(engine.numSlots, Math.floor(P2P_STAGING_MAX_BYTES / engine.slotBytes))),
      fingerprint: configDigest(ctx.run.fields),
      hashSeed: engine.hashSeed,
      field: `kv_connector_extra_config.secondary_tiers[${index}]`,
    });
  }
  return new RedisTier({
    url: spec.url,
    clusterNodes: spec.clusterNodes,
    timeoutMs: spec.timeoutMs,
    keyPrefix: spec.keyPrefix,
  });
}

export function createSecondaryTiers(specs: readonly SecondaryTierSpec[], ctx: TierContext): KVTier[] {
  return specs.map((s, i) => createSecondaryTier(s, ctx, i));
}
