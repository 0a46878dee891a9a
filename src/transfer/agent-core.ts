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
  /** Whether same-host peers are offered a read-only mapping of the KV regions (kv-map.ts). */
  readonly offerKv: boolean;
  readonly regions: ReadonlyMap<number, MemoryRegion>;
  readonly grants: GrantTable;
  readonly outgoingHook: OutgoingHook | undefined;
  deliver(n: Notification): void;
}
