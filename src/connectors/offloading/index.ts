/**
 * OffloadingConnector and its tiers (docs/connectors/offloading.md). Loaded lazily by the
 * connector registry.
 */
export * from './config.ts';
export { OffloadingConnector } from './connector.ts';
export { CpuTier, type CpuTierOptions } from './cpu-tier.ts';
export { createEvictionPolicy, type EvictionPolicy, type InsertResult } from './eviction-policy.ts';
export { FsTier, type FsTierOptions } from './fs-tier.ts';
export { emptyTierStats, type KVTier, type TierEntry, type TierStats } from './kv-tier.ts';
export { p2pHeldBlocks } from './p2p-hub.ts';
export { RedisTier, type RedisTierOptions } from './redis-tier.ts';
export type * from './stats.ts';
export { createSecondaryTier, createSecondaryTiers, type TierContext } from './tier-factory.ts';
export * from './vllm-key-layout.ts';
