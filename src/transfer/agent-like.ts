/**
 * The surface of a transfer agent the NIXL connector relies on, met both by the in-thread
 * TransferAgent and by ThreadedTransferAgent (the agent hosted in a worker thread).
 */
import type { PostOptions } from './agent.ts';
import type { GrantSpec } from './grants.ts';
import type { TransferStatsSnapshot } from './stats.ts';
import type {
  AgentMetadata,
  BlockListPair,
  DescPair,
  MemoryRegion,
  Notification,
  TransferHandle,
  TransferStatus,
} from './types.ts';

export interface TransferAgentLike {
  readonly name: string;
  readonly engineId: string;
  readonly tpRank: number;
  registerMemory(regions: readonly MemoryRegion[]): void;
  metadata(): AgentMetadata;
  addRemoteAgent(meta: AgentMetadata): string;
  removeRemoteAgent(name: string): void;
  transportFor(name: string): 'tcp' | 'shm';
  read(
    remoteAgent: string,
    descs: readonly DescPair[] | readonly BlockListPair[],
    options?: PostOptions,
  ): TransferHandle;
  write(
    remoteAgent: string,
    descs: readonly DescPair[] | readonly BlockListPair[],
    options?: Omit<PostOptions, 'grantKey'>,
  ): TransferHandle;
  status(handle: TransferHandle): TransferStatus;
  releaseHandle(handle: TransferHandle): void;
  waitFor(handle: TransferHandle): Promise<TransferStatus>;
  sendNotification(remoteAgent: string, message: string): Promise<void>;
  drainNotifications(): Notification[];
  grantRead(key: string, spec: GrantSpec): void;
  grantWrite(key: string, spec: GrantSpec): void;
  readonly waitingReads: number;
  revokeGrant(key: string): boolean;
  renewGrant(key: string, expiresAt: number): boolean;
  getStats(): TransferStatsSnapshot;
  resetStats(): TransferStatsSnapshot;
  close(): Promise<void>;
}
