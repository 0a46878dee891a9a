/**
 * Fault injection into a threaded agent's thread, through AgentSeams.threadEntry: the thread
 * runs fixtures/agent-fault-thread.ts, which hosts the agent as kvconnect's own entry does and, on
 * receiving one of these notifications, stalls or crashes the thread. Production code never
 * imports this module or that entry.
 */

/** The thread entry to pass as `threadEntry`. */
export const FAULTY_THREAD_ENTRY = new URL('../fixtures/agent-fault-thread.ts', import.meta.url);

/** A notification `${STALL_PREFIX}<ms>` blocks the receiving agent's thread for <ms> while it is received. */
export const STALL_PREFIX = 'fault:stall-thread:';

/** This notification makes the receiving agent's thread throw an uncaught error, as a bug in it would. */
export const CRASH_NOTIFICATION = 'fault:crash-thread';
