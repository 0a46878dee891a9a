/**
 * What a ThreadedTransferAgent's worker thread runs: it hosts an InThreadTransferAgent on the
 * thread's own event loop, so peers' READs are served and this side's transfers progress while
 * the main thread computes. Commands arrive in order on the parent port; results,
 * notifications and waiting-READ counts go back as messages (sent as they happen) that update
 * the main thread's mirror. agent-thread-entry.ts calls it as it is; a thread entry given as
 * AgentSeams.threadEntry calls it with seams of its own.
 */
import { parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import { isKVError } from '../errors/index.ts';
import { InThreadTransferAgent } from './agent.ts';
import type { AgentObserver, AgentSeams } from './agent-options.ts';
import {
  type AgentThreadData,
  type FromAgentThread,
  type ToAgentThread,
  toPlainError,
} from './agent-thread-protocol.ts';
import type { TransferHandle, TransferStatus } from './types.ts';

function send(msg: FromAgentThread): void {
  parentPort?.postMessage(msg);
}

function flushStats(agent: InThreadTransferAgent): void {
  const delta = agent.resetStats();
  const empty =
    delta.transferDuration.length === 0 &&
    delta.numFailedTransfers === 0 &&
    delta.numFailedNotifications === 0;
  if (!empty) send({ type: 'stats', delta });
}

/**
 * Commands that only change grants or checksum records. When a peer's request finds no grant,
 * those already queued on the port are applied at once, in order (see grantMissed below).
 */
const TABLE_COMMANDS: ReadonlySet<ToAgentThread['type']> = new Set([
  'grant',
  'revoke',
  'renew',
  'record',
  'forget',
]);

/**
 * Commands that grants and records do not depend on (this side's own transfers and
 * notifications): a table command queued after one may be applied before it; the command
 * itself waits for its turn. Any other command (memory, remotes, close) stops the look-ahead.
 */
const INDEPENDENT_COMMANDS: ReadonlySet<ToAgentThread['type']> = new Set(['post', 'notify', 'sync']);

/** A post the thread's agent threw on (closed there, or its own checks failed): the transfer's status. */
function failedPost(e: unknown): TransferStatus {
  const cause = isKVError(e) && e.code === 'TRANSFER_CLOSED' ? 'closed' : 'rejected';
  return { state: 'ERR', failed: [], failedBlockIds: [], cause, reason: toPlainError(e).message };
}

function handle(agent: InThreadTransferAgent, msg: ToAgentThread): void {
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
        send({ type: 'done', id: msg.id, status: failedPost(e) });
        return;
      }
      agent.waitFor(h).then(
        (status) => {
          agent.releaseHandle(h);
          flushStats(agent);
          send({ type: 'done', id: msg.id, status });
        },
        (e: unknown) => send({ type: 'done', id: msg.id, status: failedPost(e) }),
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
    case 'record':
      agent.recordBlocks(msg.blockIds, msg.regions);
      return;
    case 'forget':
      agent.forgetBlocks(msg.blockIds);
      return;
    case 'renew':
      agent.renewGrant(msg.key, msg.expiresAt);
      return;
    case 'sync':
      send({ type: 'synced', id: msg.id });
      return;
    case 'close':
      agent.close().then(() => {
        send({ type: 'closed' });
        // Nothing is left to do: let the thread exit on its own (see stopWorker).
        parentPort?.close();
      });
      return;
  }
}

/** What a thread entry may plug into the hosted agent (AgentSeams: fault injection only). */
export interface AgentThreadPlugs {
  readonly seams?: Pick<AgentSeams, 'outgoing'>;
  /** Wraps the observer the host installs (it must call the host's own). */
  readonly observer?: (own: AgentObserver) => AgentObserver;
}

/** Hosts the agent on this worker thread until the main thread closes it. */
export async function hostAgentThread(plugs: AgentThreadPlugs = {}): Promise<void> {
  const port = parentPort;
  if (!port) throw new Error('the transfer agent host must run in a worker thread');
  const data = workerData as AgentThreadData;
  let agent: InThreadTransferAgent;
  try {
    agent = await InThreadTransferAgent.create(data.options, plugs.seams);
  } catch (e) {
    send({ type: 'init-error', error: toPlainError(e) });
    return;
  }
  const run = (msg: ToAgentThread): void => {
    try {
      handle(agent, msg);
    } catch (e) {
      send({ type: 'command-error', what: msg.type, error: toPlainError(e) });
    }
  };
  // Commands taken off the port by grantMissed, in order; they run before any later one.
  const held: ToAgentThread[] = [];
  // A held command that grants depend on: nothing may pass it.
  let blocked = false;
  const runHeld = (): void => {
    while (held.length > 0) run(held.shift()!);
    blocked = false;
  };
  // Several notifications arriving in one socket read go back as one message.
  let flushing = false;
  const own: AgentObserver = {
    notification: () => {
      if (flushing) return;
      flushing = true;
      queueMicrotask(() => {
        flushing = false;
        const items = agent.drainNotifications();
        if (items.length > 0) send({ type: 'notifications', items });
      });
    },
    waitingReads: (count) => send({ type: 'waiting', count }),
    // The main thread grants, then tells the peer, which then asks: the grant is on the port
    // before the request is on the socket, but this thread may read the socket first (busy
    // while both arrived, the socket is polled first when it was readable earlier). Apply the
    // grant and record commands queued ahead of the request, in order, holding the others.
    grantMissed: () => {
      if (blocked) return false;
      let applied = false;
      for (let got = receiveMessageOnPort(port); got !== undefined; got = receiveMessageOnPort(port)) {
        const msg = got.message as ToAgentThread;
        if (TABLE_COMMANDS.has(msg.type)) {
          run(msg);
          applied = true;
          continue;
        }
        if (held.length === 0) setImmediate(runHeld);
        held.push(msg);
        if (!INDEPENDENT_COMMANDS.has(msg.type)) {
          blocked = true;
          break;
        }
      }
      return applied;
    },
  };
  agent.observe(plugs.observer ? plugs.observer(own) : own);
  port.on('message', (msg: ToAgentThread) => {
    runHeld();
    run(msg);
  });
  send({ type: 'ready', metadata: agent.metadata() });
}
