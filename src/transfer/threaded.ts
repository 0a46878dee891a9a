/** Entry of the threaded transfer agent (the lead re-exports it from index.ts). */
export type { TransferAgentLike } from './agent-like.ts';
export { type ThreadedAgentOptions, ThreadedTransferAgent } from './threaded-agent.ts';
