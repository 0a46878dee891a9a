/** What the agent's connection handlers share with the agent (kept plain to avoid cycles). */
import type { OutgoingHook } from './block-io.ts';
import type { GrantTable } from './grants.ts';
import type { MemoryRegion, Notification } from './types.ts';

export interface AgentCore {
  readonly agentName: string;
  readonly engineId: string;
  readonly secret: string | undefined;
  readonly shmDir: string;
  readonly ringBytes: number;
  readonly chunkBytes: number;
  readonly handshakeTimeoutMs: number;
  readonly regions: ReadonlyMap<number, MemoryRegion>;
  readonly grants: GrantTable;
  readonly outgoingHook: OutgoingHook | undefined;
  deliver(n: Notification): void;
}

/** Largest number of descriptors one READ/WRITE request may carry. */
export const MAX_DESCRIPTORS = 1 << 14;
