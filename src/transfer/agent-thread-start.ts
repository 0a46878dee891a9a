/** Starting the worker thread that hosts a ThreadedTransferAgent's TransferAgent. */
import type { Worker } from 'node:worker_threads';
import { KVError, toErrorCode } from '../errors/index.ts';
import { startModuleWorker, waitForWorkerReady } from '../util/start-worker.ts';
import type { AgentThreadData, FromAgentThread, PlainError } from './agent-thread-protocol.ts';
import type { AgentMetadata } from './types.ts';

export function fromPlainError(e: PlainError): KVError {
  return new KVError(
    toErrorCode(e.code, 'TRANSFER_THREAD_ERROR'),
    e.message,
    e.hint === undefined ? {} : { hint: e.hint },
  );
}

/**
 * The entry next to this file (agent-thread-entry.js in dist/, .ts under tsx), or `entry`
 * (AgentSeams.threadEntry), a module next to nothing in particular.
 */
export function startAgentThread(data: AgentThreadData, entry?: URL): Worker {
  // The agent's modules import nothing but each other and Node.js builtins.
  if (entry === undefined) {
    return startModuleWorker(import.meta.url, 'agent-thread-entry', data, { selfContained: true });
  }
  const base = entry.pathname.slice(entry.pathname.lastIndexOf('/') + 1).replace(/\.[cm]?[jt]s$/, '');
  return startModuleWorker(entry.href, base, data, { selfContained: true });
}

export function waitReady(worker: Worker): Promise<AgentMetadata> {
  return waitForWorkerReady(
    worker,
    (msg: FromAgentThread) =>
      msg.type === 'ready'
        ? { ready: msg.metadata }
        : msg.type === 'init-error'
          ? { failed: fromPlainError(msg.error) }
          : undefined,
    (code) =>
      new KVError('TRANSFER_THREAD_FAILED', `transfer thread exited with code ${code} during start-up`, {
        hint: 'See the error printed above; the agent thread could not start.',
      }),
  );
}
