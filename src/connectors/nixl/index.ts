/** The NIXL connectors (pull and push) on kvconnect's transfer agent. Loaded lazily by the registry. */

export {
  type NixlOptions,
  parseNixlOptions,
  SIDE_CHANNEL_HOST_ENV,
  SIDE_CHANNEL_PORT_ENV,
} from './config.ts';
export { KV_BOTH_DEPRECATION, NixlConnector, NixlPullConnector, NixlPushConnector } from './connector.ts';
export {
  compatibilityFactors,
  computeCompatibilityHash,
  NIXL_CONNECTOR_VERSION,
  type NixlHandshakePayload,
  type TransferMode,
} from './handshake.ts';
export {
  type HeadPlan,
  type HeadSource,
  planHeads,
  type RankHeads,
  rankKvHeads,
  validateRemoteGeometry,
} from './head-plan.ts';
export { type BlockShape, type HeadCopy, scatterHeads } from './head-scatter.ts';
export { LeaseHeap } from './lease-heap.ts';
export { StagingPool } from './staging-pool.ts';
export { emptyNixlStats, type NixlStatsData, reduceNixlStats } from './stats.ts';
export {
  computeTpMapping,
  consumersPerProducer,
  handshakeTargetRanks,
  type TpMapping,
  tpRatio,
} from './tp-mapping.ts';
