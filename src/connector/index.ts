export { KVConnectorBase, type KVConnectorClass, type MaybePromise } from './base.ts';
export {
  addCachedTokens,
  CACHE_HIT_SOURCES,
  type CachedTokensBySource,
  type CacheHitSource,
  slowestSource,
  trimCachedTokens,
} from './cache-hit-source.ts';
export { importConnectorModule, KVConnectorFactory, resolveModuleSpecifier } from './factory.ts';
export {
  applyHMADecision,
  HMA_AUTO_DISABLE_WARNING,
  type HMADecision,
  type HMAReason,
  resolveHybridKvCacheManager,
} from './hma.ts';
export type { ConnectorMetricSpec, ConnectorMetricType } from './metric-specs.ts';
export { BUILTIN_CONNECTORS, type BuiltinConnector, getBuiltinConnector } from './registry.ts';
export * from './types.ts';
