/** Public API of the transfer layer (used by src/connectors/nixl/). */
export {
  type PostOptions,
  TRANSFER_PROTOCOL_VERSION,
  TransferAgent,
  type TransferAgentOptions,
} from './agent.ts';
export { resolveSecret, SECRET_ENV } from './auth.ts';
export { type BackendChoice, chooseTransport, KNOWN_BACKENDS, resolveBackends } from './backends.ts';
export { blockChecksum, blockChecksums } from './checksum.ts';
export { checkCompatibility, compatibilityMismatchMessage } from './compat.ts';
export { coalesceBlockLists, validateDescPairs } from './descriptors.ts';
export type { GrantSpec } from './grants.ts';
export { DISABLE_NATIVE_ENV, shmRingImplementation } from './native-shm.ts';
export {
  type FetchOptions,
  fetchRemoteMetadata,
  type SideChannelOptions,
  SideChannelServer,
} from './side-channel.ts';
export type { TransferStatsSnapshot } from './stats.ts';
export * from './threaded.ts';
export type * from './types.ts';
