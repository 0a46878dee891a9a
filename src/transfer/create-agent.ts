/** One way for connectors to get a transfer agent: on the caller's event loop, or in a worker thread. */
import { InThreadTransferAgent } from './agent.ts';
import type { TransferAgentOptions } from './agent-options.ts';
import { EmulatedLinkAgent, type EmulatedLinkSpec } from './emulated-link.ts';
import { ThreadedTransferAgent } from './threaded-agent.ts';
import type { TransferAgent } from './transfer-agent.ts';

export interface CreateAgentOptions extends TransferAgentOptions {
  /**
   * Host the agent in a worker thread, so peers are served and transfers progress while the
   * caller's event loop is busy (an engine step). Test hooks are functions and cannot cross
   * into the thread: with `thread`, they are ignored.
   */
  readonly thread?: boolean;
  /** Emulated deployments: hold each transfer's completion as this link would (emulated-link.ts). */
  readonly emulatedLink?: EmulatedLinkSpec | null;
}

export async function createTransferAgent(options: CreateAgentOptions): Promise<TransferAgent> {
  const { thread, testHooks, emulatedLink, ...rest } = options;
  const agent = thread
    ? await ThreadedTransferAgent.create(rest)
    : await InThreadTransferAgent.create(testHooks === undefined ? rest : { ...rest, testHooks });
  return emulatedLink ? new EmulatedLinkAgent(agent, emulatedLink) : agent;
}
