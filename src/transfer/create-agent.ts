/** One way for connectors to get a transfer agent: on the caller's event loop, or in a worker thread. */
import { InThreadTransferAgent } from './agent.ts';
import type { TransferAgentOptions } from './agent-options.ts';
import { ThreadedTransferAgent } from './threaded-agent.ts';
import type { TransferAgent } from './transfer-agent.ts';

export interface CreateAgentOptions extends TransferAgentOptions {
  /**
   * Host the agent in a worker thread, so peers are served and transfers progress while the
   * caller's event loop is busy (an engine step). Test hooks are functions and cannot cross
   * into the thread: with `thread`, they are ignored.
   */
  readonly thread?: boolean;
}

export async function createTransferAgent(options: CreateAgentOptions): Promise<TransferAgent> {
  const { thread, testHooks, ...rest } = options;
  if (thread) return ThreadedTransferAgent.create(rest);
  return InThreadTransferAgent.create(testHooks === undefined ? rest : { ...rest, testHooks });
}
