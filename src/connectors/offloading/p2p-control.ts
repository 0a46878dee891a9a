/**
 * The p2p tier's control channel: one TCP connection per pair of peers carrying the framed
 * msgpack messages of src/wire/p2p-messages.ts (vLLM uses a ZMQ socket for the same role).
 * A malformed frame closes the connection: a peer that cannot speak the protocol is gone.
 */
import net from 'node:net';
import { getLogger } from '../../logging/logger.ts';
import { formatP2PFrame, P2PFrameReader, type P2PMessage } from '../../wire/index.ts';

const log = getLogger('kvconnect.connectors.offloading.p2p-control');

export class P2PConnection {
  readonly socket: net.Socket;
  /** host:port of the remote end as this side knows it. */
  peerId: string;
  #closed = false;
  readonly #reader = new P2PFrameReader();
  onMessage: (msg: P2PMessage) => void = () => {};
  readonly #closeHandlers: (() => void)[] = [];

  constructor(socket: net.Socket, peerId: string) {
    this.socket = socket;
    this.peerId = peerId;
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => {
      let msgs: P2PMessage[];
      try {
        msgs = this.#reader.push(chunk);
      } catch (err) {
        log.warn(
          'p2p peer %s sent a malformed message (%s); closing the connection',
          this.peerId,
          String(err),
        );
        this.close();
        return;
      }
      for (const m of msgs) this.onMessage(m);
    });
    socket.on('error', () => {});
    socket.on('close', () => this.#onClosed());
  }

  get closed(): boolean {
    return this.#closed;
  }

  onClose(fn: () => void): void {
    if (this.#closed) fn();
    else this.#closeHandlers.push(fn);
  }

  send(msg: P2PMessage): boolean {
    if (this.#closed) return false;
    this.socket.write(formatP2PFrame(msg));
    return true;
  }

  close(): void {
    this.socket.destroy();
    this.#onClosed();
  }

  #onClosed(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const fn of this.#closeHandlers.splice(0)) fn();
  }
}

/** Dials a peer's control socket; rejects after `timeoutMs` or on refusal. */
export function dialP2P(host: string, port: number, timeoutMs: number): Promise<P2PConnection> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`connect to ${host}:${port} timed out after ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      resolve(new P2PConnection(socket, `${host}:${port}`));
    });
    socket.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

/** Listens on host:port; each accepted connection is handed to `onConnection`. */
export function listenP2P(
  host: string,
  port: number,
  onConnection: (conn: P2PConnection) => void,
): Promise<net.Server> {
  return new Promise((resolve, reject) => {
    const server = net.createServer((socket) => {
      onConnection(new P2PConnection(socket, `${socket.remoteAddress}:${socket.remotePort}`));
    });
    server.once('error', reject);
    server.listen({ host, port, exclusive: true }, () => {
      server.off('error', reject);
      resolve(server);
    });
  });
}
