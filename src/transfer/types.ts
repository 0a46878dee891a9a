/**
 * Plain-data types of the transfer agent. src/transfer/ does not import src/kv: a region is
 * just "numBlocks blocks of blockBytes each, contiguous", which is what a KV tensor is.
 */
import type { TransferFailureCause } from './failure.ts';

/** One registered memory region (a KV tensor): block i is bytes [i*blockBytes, (i+1)*blockBytes). */
export interface MemoryRegion {
  readonly id: number;
  /** A view over a SharedArrayBuffer (or any ArrayBuffer); never copied by the agent. */
  readonly bytes: Uint8Array;
  readonly blockBytes: number;
  readonly numBlocks: number;
}

/** Geometry of a region as published in agent metadata. */
export interface RegionGeometry {
  readonly id: number;
  readonly blockBytes: number;
  readonly numBlocks: number;
}

/** A run of `count` consecutive blocks: local [localFirst, +count) ↔ remote [remoteFirst, +count). */
export interface DescPair {
  readonly localRegion: number;
  readonly localFirst: number;
  readonly remoteRegion: number;
  readonly remoteFirst: number;
  readonly count: number;
}

/** Block lists to be paired element by element, then coalesced into DescPairs. */
export interface BlockListPair {
  readonly localRegion: number;
  readonly localBlockIds: readonly number[];
  readonly remoteRegion: number;
  readonly remoteBlockIds: readonly number[];
}

export type TransportName = 'tcp' | 'shm';

export interface AgentEndpoints {
  readonly tcp: { readonly host: string; readonly port: number };
  /** Present when the agent accepts shm peers: the identity of its host and shm directory. */
  readonly shm?: { readonly hostId: string };
}

/** Serialisable agent metadata (what the side channel serves). */
export interface AgentMetadata {
  readonly protocolVersion: number;
  readonly agentName: string;
  readonly engineId: string;
  readonly tpRank: number;
  readonly compatHash: string;
  readonly endpoints: AgentEndpoints;
  readonly regions: readonly RegionGeometry[];
}

export type TransferState = 'PROC' | 'DONE' | 'ERR';

export interface FailedBlocks {
  readonly region: number;
  readonly blockIds: readonly number[];
}

export interface TransferStatus {
  readonly state: TransferState;
  /** Local block ids that are not valid (ERR only), per local region. */
  readonly failed: readonly FailedBlocks[];
  /** Union of the failed local block ids over all regions, sorted. */
  readonly failedBlockIds: readonly number[];
  /** ERR only: why, from a closed set (failure.ts); decisions switch on this. */
  readonly cause?: TransferFailureCause;
  /** ERR only: the same, in words for people (logs, errors); never parsed. */
  readonly reason?: string;
}

/** Opaque handle of a posted READ or WRITE. */
export interface TransferHandle {
  readonly id: number;
  readonly kind: 'READ' | 'WRITE';
  readonly remoteAgent: string;
}

export interface Notification {
  /** Name of the agent that sent it. */
  readonly agent: string;
  readonly message: string;
}
