/**
 * Worker-thread entry hosting a real TransferAgent for ThreadedTransferAgent. It runs on its
 * own event loop, so peers' READs are served and this side's transfers progress while the
 * main thread computes. Commands arrive in order on the parent port; results go back as
 * messages that update the main thread's mirror.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { TransferAgent } from './agent.ts';
import {
  type AgentThreadData,
  type FromAgentThread,
  type ToAgentThread,
  toPlainError,
} from './agent-thread-protocol.ts';
import type { TransferHandle, TransferStatus } from './types.ts';

const port = parentPort;
if (!port) throw new Error('agent-thread-entry must run in a worker thread');
const data = workerData as AgentThreadData;

function send(msg: FromAgentThread): void {
  port?.postMessage(msg);
}

function flushStats(agent: TransferAgent): void {
  const delta = agent.resetStats();
  const empty =
    delta.transferDuration.length === 0 &&
    delta.numFailedTransfers === 0 &&
    delta.numFailedNotifications === 0;
  if (!empty) send({ type: 'stats', delta });
}

function failedPost(reason: string): TransferStatus {
  return { state: 'ERR', failed: [], failedBlockIds: [], reason };
}

function handle(agent: TransferAgent, msg: ToAgentThread): void {
  switch (msg.type) {
    case 'register':
      agent.registerMemory(
        msg.regions.map((r) => ({
          id: r.id,
          bytes: new Uint8Array(r.buffer, r.byteOffset, r.byteLength),
          blockBytes: r.blockBytes,
          numBlocks: r.numBlocks,
        })),
      );
      return;
    case 'add-remote':
      agent.addRemoteAgent(msg.meta);
      return;
    case 'remove-remote':
      agent.removeRemoteAgent(msg.name);
      return;
    case 'post': {
      let h: TransferHandle;
      try {
        const notification = msg.notification === undefined ? {} : { notification: msg.notification };
        h =
          msg.kind === 'READ'
            ? agent.read(msg.remoteAgent, msg.descs, {
                ...notification,
                ...(msg.grantKey === undefined ? {} : { grantKey: msg.grantKey }),
              })
            : agent.write(msg.remoteAgent, msg.descs, notification);
      } catch (e) {
        send({ type: 'done', id: msg.id, status: failedPost(toPlainError(e).message) });
        return;
      }
      agent.waitFor(h).then(
        (status) => {
          agent.releaseHandle(h);
          flushStats(agent);
          send({ type: 'done', id: msg.id, status });
        },
        (e: unknown) => send({ type: 'done', id: msg.id, status: failedPost(toPlainError(e).message) }),
      );
      return;
    }
    case 'notify':
      agent.sendNotification(msg.remoteAgent, msg.message).then(
        () => send({ type: 'notify-result', id: msg.id }),
        (e: unknown) => {
          flushStats(agent);
          send({ type: 'notify-result', id: msg.id, error: toPlainError(e) });
        },
      );
      return;
    case 'grant':
      if (msg.kind === 'read') agent.grantRead(msg.key, msg.spec);
      else agent.grantWrite(msg.key, msg.spec);
      return;
    case 'revoke':
      agent.revokeGrant(msg.key);
      return;
    case 'renew':
      agent.renewGrant(msg.key, msg.expiresAt);
      return;
    case 'close':
      agent.close().then(() => {
        send({ type: 'closed' });
        // Nothing is left to do: let the thread exit on its own (see stopWorker).
        port?.close();
      });
      return;
    case 'crash-for-test':
      setTimeout(() => {
        throw new Error('transfer thread crashed on request (test)');
      });
      return;
  }
}

async function main(): Promise<void> {
  let agent: TransferAgent;
  try {
    agent = await TransferAgent.create(data.options);
  } catch (e) {
    send({ type: 'init-error', error: toPlainError(e) });
    return;
  }
  let waiting = 0;
  const sweep = setInterval(() => {
    const items = agent.drainNotifications();
    if (items.length > 0) send({ type: 'notifications', items });
    if (agent.waitingReads !== waiting) {
      waiting = agent.waitingReads;
      send({ type: 'waiting', count: waiting });
    }
  }, data.pollMs);
  port?.on('message', (msg: ToAgentThread) => {
    if (msg.type === 'close') clearInterval(sweep);
    try {
      handle(agent, msg);
    } catch (e) {
      send({ type: 'command-error', what: msg.type, error: toPlainError(e) });
    }
  });
  send({ type: 'ready', metadata: agent.metadata() });
}

void main();
