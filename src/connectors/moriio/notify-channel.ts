/**
 * MoRIIO's notify channel (vLLM uses ZMQ + msgpack): small JSON control messages, one per
 * line over TCP. Each worker listens on notify_port + dp_local * tp_size + tp_rank. A sender
 * keeps one connection per peer listener open (as vLLM's ZMQ DEALER sockets stay connected),
 * so a message leaves at once, in order, in one wake-up of the peer: a connection per message
 * would cost a handshake, a loop turn before the write and a second wake-up (the accept) of a
 * peer that waits for exactly this message (write_done). A connection that fails or closes is
 * dropped; the next message opens a new one, so a dead peer costs one refused connect.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { KVError } from '../../errors/kv-error.ts';
import { getLogger } from '../../logging/logger.ts';

const log = getLogger('kvconnect.connectors.moriio.notify-channel');
const MAX_LINE = 1 << 20;

export type NotifyMessage =
  | RemoteBlocksMessage
  | { type: 'write_done'; transfer_id: string; tp_rank: number }
  | { type: 'release'; transfer_id: string; consumer_tp_size: number; abort?: boolean };

/** Consumer → producer (WRITE): where to write this transfer's KV, and how to reach this rank. */
export interface RemoteBlocksMessage {
  type: 'remote_blocks';
  req_id: string;
  transfer_id: string;
  block_notify_list: number[];
  /** Token-block position of each listed block (pairs with the producer's blocks). */
  block_positions: number[];
  decode_rank: number;
  decode_tp_rank: number;
  decode_tp_size: number;
  decode_host: string;
  decode_handshake_port: number;
  decode_notify_port: number;
}

export class NotifyServer {
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();

  constructor(onMessage: (m: NotifyMessage) => void) {
    this.#server = createServer((socket) => {
      this.#sockets.add(socket);
      socket.on('close', () => this.#sockets.delete(socket));
      socket.on('error', () => {});
      let buf = '';
      socket.setEncoding('utf8');
      socket.on('data', (chunk: string) => {
        buf += chunk;
        if (buf.length > MAX_LINE) {
          socket.destroy();
          return;
        }
        for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          const m = parseMessage(line);
          if (m) onMessage(m);
          else log.warn('MoRIIO notify listener got an unexpected message: %s', line.slice(0, 120));
        }
      });
    });
  }

  async listen(host: string, port: number, key: string): Promise<number> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', (e: NodeJS.ErrnoException) => {
        if (e.code !== 'EADDRINUSE') return reject(e);
        reject(
          new KVError('MORIIO_PORT_IN_USE', `MoRIIO ${key} ${port} on ${host} is already in use`, {
            field: `kv_connector_extra_config.${key}`,
            hint: `Each worker listens on ${key} + dp_local * tp_size + tp_rank; give every engine on this host its own ${key} range.`,
            details: { host, port },
            cause: e,
          }),
        );
      });
      this.#server.listen(port, host, () => resolve());
    });
    const addr = this.#server.address();
    return typeof addr === 'object' && addr !== null ? addr.port : port;
  }

  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    if (!this.#server.listening) return;
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

function parseMessage(line: string): NotifyMessage | null {
  let m: unknown;
  try {
    m = JSON.parse(line);
  } catch {
    // vLLM also accepts a bare string as the completion of the transfer it names.
    return line.trim() ? { type: 'write_done', transfer_id: line.trim(), tp_rank: 0 } : null;
  }
  const o = m as Record<string, unknown> | null;
  if (typeof o !== 'object' || o === null || typeof o['transfer_id'] !== 'string') return null;
  const t = o['type'];
  return t === 'remote_blocks' || t === 'write_done' || t === 'release' ? (o as NotifyMessage) : null;
}

/** Open connections to peers' notify listeners, by host:port; each resolves once connected. */
const links = new Map<string, { socket: Socket; connected: Promise<void> }>();

function notifyError(host: string, port: number, type: string, e: Error): KVError {
  return new KVError(
    'MORIIO_NOTIFY_FAILED',
    `MoRIIO notify ${type} to ${host}:${port} failed: ${e.message}`,
    {
      hint: 'Check that the peer engine is running and that its notify_port (plus the worker offset) is reachable.',
      cause: e,
    },
  );
}

function linkTo(host: string, port: number, timeoutMs: number): { socket: Socket; connected: Promise<void> } {
  const key = `${host}:${port}`;
  const open = links.get(key);
  if (open && !open.socket.destroyed && !open.socket.readableEnded) return open;
  const socket = connect({ host, port });
  socket.setNoDelay(true);
  // An idle link does not keep the process alive.
  socket.unref();
  const connected = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => socket.destroy(new Error(`no connection within ${timeoutMs} ms`)),
      timeoutMs,
    );
    socket.once('connect', () => {
      clearTimeout(timer);
      resolve();
    });
    socket.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
  connected.catch(() => {});
  // The listener never answers: data would be a protocol error, and the peer closing ends the link.
  socket.on('data', () => socket.destroy());
  socket.on('end', () => socket.destroy());
  socket.on('error', () => {});
  socket.once('close', () => {
    if (links.get(key)?.socket === socket) links.delete(key);
  });
  const link = { socket, connected };
  links.set(key, link);
  return link;
}

/** Sends one message; rejects if the peer cannot be reached within timeoutMs. */
export async function sendNotify(
  host: string,
  port: number,
  message: NotifyMessage,
  timeoutMs = 5000,
): Promise<void> {
  const { socket, connected } = linkTo(host, port, timeoutMs);
  try {
    await connected;
    await new Promise<void>((resolve, reject) => {
      socket.write(`${JSON.stringify(message)}\n`, (e) => (e ? reject(e) : resolve()));
    });
  } catch (e) {
    socket.destroy();
    throw notifyError(host, port, message.type, e as Error);
  }
}
