/** What the agent's connection handlers share with the agent (kept plain to avoid cycles). */
import type { OutgoingTransform } from './block-io.ts';
import type { BlockRecords } from './block-records.ts';
import type { GrantTable } from './grants.ts';
import type { LeaseTable } from './lease-table.ts';
import type { MemoryRegion, Notification } from './types.ts';

export interface AgentCore {
  readonly agentName: string;
  readonly engineId: string;
  readonly secret: string | undefined;
  readonly shmDir: string;
  readonly ringBytes: number;
  readonly chunkBytes: number;
  readonly handshakeTimeoutMs: number;
  /** Whether same-host peers are offered a read-only mapping of the KV regions (kv-map.ts). */
  readonly offerKv: boolean;
  readonly regions: ReadonlyMap<number, MemoryRegion>;
  readonly grants: GrantTable;
  /** The published READ grants and their checksums (lease-table.ts); null before memory is registered. */
  leases(): LeaseTable | null;
  /** Checksums the engine recorded when it finished writing blocks (block-records.ts). */
  readonly records: BlockRecords;
  /** Whether same-host peers are offered the lease table, so they serve their own READs (direct-read.ts). */
  readonly offerLeases: boolean;
  /** AgentSeams.outgoing: replaces outgoing block bytes after they were hashed (fault injection). */
  readonly outgoing: OutgoingTransform | undefined;
  /** Threads a large same-host copy may use (TransferAgentOptions.copyThreads, resolved). */
  readonly copyThreads: number;
  /** Transfer activity on a peer connection: keeps the event loop polling a while (busy-poll.ts). */
  activity(): void;
  deliver(n: Notification): void;
  /** A peer's request found no covering grant: true when grants issued meanwhile were applied (AgentObserver.grantMissed). */
  grantMissed(): boolean;
}
