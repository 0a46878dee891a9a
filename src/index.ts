/**
 * kvconnect's public API: `import { KVConnectorBase, KVConnectorFactory, ... } from 'kvconnect'`.
 * External connectors subclass KVConnectorBase imported from here.
 */
export {
  buildEngineConfig,
  ENGINE_OPTIONS,
  type EngineOptions,
  KVTransferConfig,
  type ModelInfo,
  resolveModelInfo,
} from './config/index.ts';
export {
  type KVEventsConfigFields,
  kvEventsConfigFromCli,
  parseKVEventsConfig,
} from './config/kv-events-config.ts';
export type {
  CacheConfig,
  EngineConfig,
  KVLoadFailurePolicy,
  KVRole,
  KVTransferConfigFields,
  KVTransferConfigLike,
  ModelConfig,
  ParallelConfig,
  SchedulerConfig,
} from './config/types.ts';
export {
  BUILTIN_CONNECTORS,
  type BuiltinConnector,
  emptyConnectorOutput,
  type HMADecision,
  KVConnectorBase,
  type KVConnectorClass,
  KVConnectorFactory,
  KVConnectorRole,
  resolveHybridKvCacheManager,
} from './connector/index.ts';
export type { ConnectorMetricSpec, ConnectorMetricType } from './connector/metric-specs.ts';
export type {
  ConnectorRequest,
  ForwardContext,
  KVConnectorHandshakeMetadata,
  KVConnectorMetadata,
  KVConnectorOutput,
  KVConnectorStatsData,
  KVConnectorWorkerMetadata,
  KVTransferParams,
  MatchedTokens,
  RequestFinishedResult,
  SchedulerOutput,
} from './connector/types.ts';
export {
  type ErrorCode,
  errorCatalog,
  formatErrorJson,
  formatErrorText,
  httpStatusOf,
  isKVError,
  KVError,
  type KVErrorOptions,
} from './errors/index.ts';
export type { KVCacheBlocks, KVCacheConfig, PagedKVMemory } from './kv/interfaces.ts';
export {
  decodeBatch,
  encodeBatch,
  type KVEventBatch,
  KVEventSubscriber,
  type WireKVEvent,
  ZmqEventPublisher,
} from './kv-events/index.ts';
export { tuneJit, V8_INTERRUPT_BUDGET_ENV } from './util/jit-tuning.ts';
export {
  type ConnectorAdvertisement,
  type KVConnectorInfo,
  PD_CONNECTORS,
  type PdConnector,
} from './wire/index.ts';
