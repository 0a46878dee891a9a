/** Public API of the transfer layer (used by src/connectors/nixl/ and src/connectors/moriio/). */
export { InThreadTransferAgent } from './agent.ts';
export { copyThreadsUpTo, MAX_BUSY_POLL_US } from './agent-checks.ts';
export type { AgentSeams, TransferAgentOptions } from './agent-options.ts';
export { resolveSecret, SECRET_ENV } from './auth.ts';
export { type BackendChoice, chooseTransport, KNOWN_BACKENDS, resolveBackends } from './backends.ts';
export { blockChecksum, blockChecksums } from './checksum.ts';
export { checkCompatibility, compatibilityMismatchMessage } from './compat.ts';
export { type AgentFactory, type CreateAgentOptions, createTransferAgent } from './create-agent.ts';
export { coalesceBlockLists, validateDescPairs } from './descriptors.ts';
export { linkStatsData, takeLinkStats } from './emulated-link.ts';
export {
  isRetryableCause,
  TRANSFER_FAILURE_CAUSES,
  type TransferFailure,
  type TransferFailureCause,
} from './failure.ts';
export type { GrantSpec } from './grants.ts';
export { isMappableRegion } from './kv-map.ts';
export { TRANSFER_PROTOCOL_VERSION } from './messages.ts';
export { DISABLE_NATIVE_ENV, shmRingImplementation } from './native-shm.ts';
export {
  type FetchOptions,
  fetchRemoteMetadata,
  type SideChannelOptions,
  SideChannelServer,
} from './side-channel.ts';
export type { TransferStatsSnapshot } from './stats.ts';
export { type ThreadedAgentOptions, ThreadedTransferAgent } from './threaded-agent.ts';
export type { Descriptors, PostOptions, TransferAgent } from './transfer-agent.ts';
export type * from './types.ts';
