/** One way for connectors to get a transfer agent: on the caller's event loop, or in a worker thread. */
import { InThreadTransferAgent } from './agent.ts';
import type { AgentSeams, TransferAgentOptions } from './agent-options.ts';
import { EmulatedLinkAgent, type EmulatedLinkSpec } from './emulated-link.ts';
import { ThreadedTransferAgent } from './threaded-agent.ts';
import type { TransferAgent } from './transfer-agent.ts';

export interface CreateAgentOptions extends TransferAgentOptions {
  /**
   * Host the agent in a worker thread, so peers are served and transfers progress while the
   * caller's event loop is busy (an engine step).
   */
  readonly thread?: boolean;
  /** Emulated deployments: hold each transfer's completion as this link would (emulated-link.ts). */
  readonly emulatedLink?: EmulatedLinkSpec | null;
}

/** How a connector's worker gets its agent: createTransferAgent, or what its connector class plugs in instead. */
export type AgentFactory = (options: CreateAgentOptions) => Promise<TransferAgent>;

/**
 * An agent on the caller's loop, or in a worker thread. `seams` are for fault injection only
 * (AgentSeams): `outgoing` applies on the caller's loop, `threadEntry` to a threaded agent.
 */
export async function createTransferAgent(
  options: CreateAgentOptions,
  seams: AgentSeams = {},
): Promise<TransferAgent> {
  const { thread, emulatedLink, ...rest } = options;
  if (thread && seams.outgoing) {
    throw new Error('AgentSeams.outgoing cannot cross into an agent thread: plug it in through threadEntry');
  }
  const agent = thread
    ? await ThreadedTransferAgent.create(rest, seams)
    : await InThreadTransferAgent.create(rest, seams);
  return emulatedLink ? new EmulatedLinkAgent(agent, emulatedLink) : agent;
}
