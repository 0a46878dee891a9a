/**
 * A threaded agent's thread entry for tests (agent-faults.ts): hosts the agent exactly as
 * src/transfer/agent-thread-entry.ts does, and acts on fault notifications as they arrive.
 */
import { hostAgentThread } from '../../src/transfer/agent-thread-host.ts';
import { CRASH_NOTIFICATION, STALL_PREFIX } from './agent-faults.ts';

void hostAgentThread({
  observer: (own) => ({
    ...own,
    notification: (n) => {
      if (n.message.startsWith(STALL_PREFIX)) {
        const ms = Number(n.message.slice(STALL_PREFIX.length));
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
      } else if (n.message === CRASH_NOTIFICATION) {
        setTimeout(() => {
          throw new Error('transfer thread crashed on request (test)');
        });
      }
      own.notification?.(n);
    },
  }),
});
