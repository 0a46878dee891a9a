/** The settings of a transfer agent (in-thread or threaded), and what its host may plug into it. */
import type { OutgoingTransform } from './block-io.ts';
import type { Notification } from './types.ts';

export interface TransferAgentOptions {
  readonly engineId: string;
  /** Default: `${engineId}-rank${tpRank}`. */
  readonly agentName?: string;
  readonly tpRank?: number;
  /** Published in metadata for the caller's handshake check (see checkCompatibility). */
  readonly compatHash?: string;
  /** Listen address for peers (default 127.0.0.1) and port (default 0 = any free port). */
  readonly host?: string;
  readonly port?: number;
  /** Host published in metadata (default: host, or 127.0.0.1 when host is 0.0.0.0/::). */
  readonly advertiseHost?: string;
  /** vLLM backend names: 'UCX' (auto, default), 'TCP', 'SHM'. */
  readonly backends?: readonly string[];
  /** Shared secret; default from env KVCONNECT_TRANSFER_SECRET; none = no authentication. */
  readonly secret?: string;
  readonly shmDir?: string;
  /** Size of each shm staging ring (sparse file). Default 64 MiB. */
  readonly ringBytes?: number;
  /** Largest data frame / ring chunk. Default 4 MiB. */
  readonly chunkBytes?: number;
  /**
   * Offer same-host (shm) peers a read-only mapping of the registered KV memory, so a chunk
   * crosses with one copy (regions must be allocated by util/shared-memory.ts). Default true.
   */
  readonly offerKvMapping?: boolean;
  readonly transferTimeoutMs?: number;
  readonly connectTimeoutMs?: number;
  /**
   * How long a peer's READ naming a grant this agent has not created yet waits for it
   * before being refused (0 = refuse at once). Default 5000 ms.
   */
  readonly grantWaitMs?: number;
  /** READs one peer may have waiting for grants at once. Default 256. */
  readonly maxWaitingReadsPerPeer?: number;
  /**
   * Threads a large same-host copy may use (a direct READ, or a pulled WRITE on the receiver):
   * its blocks are shared out between them, each copied and hashed by one (at least 2 MiB per
   * thread; native addon only). Default: KVCONNECT_COPY_THREADS, else 1. The NIXL connector
   * passes its `num_threads`, capped at the machine's cores.
   */
  readonly copyThreads?: number;
  /**
   * How long (µs) the agent's event loop keeps polling instead of sleeping after transfer
   * activity on its connections (a frame sent, bytes received), so a reply is picked up without a wake-up
   * (busy-poll.ts). 0 = off. Default: KVCONNECT_BUSY_POLL_US, else 100 (0 for a threaded agent,
   * where polling was measured slower: docs/transfer.md "Busy polling").
   */
  readonly busyPollUs?: number;
}

/**
 * Code plugged into an agent, given apart from its settings (functions and modules, not
 * configuration). kvconnect itself never passes any: they are the seams through which tests
 * inject faults (test/transfer/helpers/agent-faults.ts).
 */
export interface AgentSeams {
  /**
   * Agent on the caller's loop: what leaves instead of each outgoing chunk's bytes, after their
   * checksums were computed. While set, the agent offers no lease table and pulls no WRITE, so
   * every chunk passes through it.
   */
  readonly outgoing?: OutgoingTransform;
  /**
   * Threaded agent: the module its thread runs instead of agent-thread-entry; it calls
   * hostAgentThread (agent-thread-host.ts), which can plug seams into the agent it hosts.
   */
  readonly threadEntry?: URL;
}

/** Called when a notification arrives or the number of waiting READs changes (the agent thread forwards them). */
export interface AgentObserver {
  /** Called synchronously as the notification is received, after it was queued for drainNotifications. */
  notification?(n: Notification): void;
  waitingReads?(count: number): void;
  /**
   * A peer's READ or WRITE found no grant that covers it. A host that feeds the agent grants
   * from elsewhere applies those already issued (the agent thread: the grant commands queued on
   * its port) and returns true when it applied any, and the request is checked again: a grant
   * made before the peer was told about the blocks holds when its request arrives, even if the
   * request is read first.
   */
  grantMissed?(): boolean;
}
