/**
 * The transfer agent's contract: what a connector may call, met by the agent that runs on
 * the caller's event loop (agent.ts) and by the one hosted in a worker thread
 * (threaded-agent.ts). test/transfer/helpers/conformance.ts runs the same cases against both.
 */

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
  TransportName,
} from './types.ts';

export interface PostOptions {
  /** Delivered to the remote agent once the transfer completed successfully. */
  readonly notification?: string;
  /** READ only: the grant of the remote owner that covers the blocks. */
  readonly grantKey?: string;
}

export type Descriptors = readonly DescPair[] | readonly BlockListPair[];

export interface TransferAgent {
  readonly name: string;
  readonly engineId: string;
  readonly tpRank: number;
  /** Threads a large same-host copy may use (TransferAgentOptions.copyThreads, resolved). */
  readonly copyThreads: number;
  /** µs its event loop keeps polling after transfer activity (TransferAgentOptions.busyPollUs, resolved; 0 = off). */
  readonly busyPollUs: number;
  /** Registers KV tensors; descriptors name them by id. Throws TRANSFER_BAD_REGION on inconsistent sizes. */
  registerMemory(regions: readonly MemoryRegion[]): void;
  /** Serialisable metadata a peer passes to addRemoteAgent (served by the side channel). */
  metadata(): AgentMetadata;
  /** Registers a peer; returns its agent name, the handle for read/write. */
  addRemoteAgent(meta: AgentMetadata): string;
  removeRemoteAgent(name: string): void;
  /** Which transport reaches this remote agent. */
  transportFor(name: string): TransportName;
  /** Pulls the peer's blocks into local blocks; bad descriptors throw here, everything else ends in status(). */
  read(remoteAgent: string, descs: Descriptors, options?: PostOptions): TransferHandle;
  /** Pushes local blocks into the peer's blocks (which the peer must have granted for writing). */
  write(remoteAgent: string, descs: Descriptors, options?: Omit<PostOptions, 'grantKey'>): TransferHandle;
  status(handle: TransferHandle): TransferStatus;
  /** Forgets a finished transfer (NIXL's release_xfer_handle). */
  releaseHandle(handle: TransferHandle): void;
  /** Resolves when the transfer leaves PROC (DONE or ERR, including its deadline passing). */
  waitFor(handle: TransferHandle): Promise<TransferStatus>;
  /** Resolves once written; rejects (and counts a failure) if the peer is unreachable. */
  sendNotification(remoteAgent: string, message: string): Promise<void>;
  drainNotifications(): Notification[];
  /**
   * `listener` is called (on this thread) when notifications arrived for drainNotifications,
   * so a poller that sleeps between polls can wake; null removes it.
   */
  onNotification(listener: (() => void) | null): void;
  grantRead(key: string, spec: GrantSpec): void;
  grantWrite(key: string, spec: GrantSpec): void;
  /** Peers' READs currently waiting for a grant of this agent to appear. */
  readonly waitingReads: number;
  /**
   * The engine finished writing these blocks (in `regions`, default every registered region
   * that has them): their checksums are computed now and used by later WRITEs and READ grants
   * of them instead of hashing them then (block-records.ts). The content must stay as it is
   * until forgetBlocks; a block changed after its record fails the receiver's check, it is
   * never accepted.
   */
  recordBlocks(blockIds: Iterable<number>, regions?: Iterable<number>): void;
  /** These blocks are given to other content: drops their records. */
  forgetBlocks(blockIds: Iterable<number>): void;
  /** Revokes the read and write grants named `key`; true if one existed. */
  revokeGrant(key: string): boolean;
  /** Moves a lease's expiry (epoch ms); true if a grant with this key exists. */
  renewGrant(key: string, expiresAt: number): boolean;
  /**
   * Resolves once every earlier call has taken effect inside the agent: at once for the
   * in-thread agent, after a round trip for the threaded one (whose grants and posts reach
   * its thread as messages).
   */
  settled(): Promise<void>;
  getStats(): TransferStatsSnapshot;
  /** Returns the snapshot and starts a new interval. */
  resetStats(): TransferStatsSnapshot;
  close(): Promise<void>;
}
