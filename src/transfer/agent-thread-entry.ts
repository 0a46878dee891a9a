/** The worker-thread entry of ThreadedTransferAgent: hosts its agent (agent-thread-host.ts). */
import { hostAgentThread } from './agent-thread-host.ts';

void hostAgentThread();
