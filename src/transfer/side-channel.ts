/**
 * The side channel: one small TCP listener per engine that serves the agent
 * metadata of each local tensor-parallel rank, so a peer can handshake before transferring.
 * Same framing as the data path; optional HMAC challenge–response with the shared secret.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { type ErrorCode, KVError } from '../errors/index.ts';
import { getLogger } from '../logging/logger.ts';
import { authProof, newNonce, resolveSecret, verifyProof } from './auth.ts';
import { FramedConnection } from './connection.ts';
import { parseSideChannelFrame, type SideChannelFrame } from './messages.ts';
import { ProtocolError } from './protocol-error.ts';

const log = getLogger('kvconnect.transfer.side-channel');

export interface SideChannelOptions {
  readonly host: string;
  /** 0 = any free port (the bound one is what address() returns). */
  readonly port: number;
  /** Metadata of a local rank (any JSON-serialisable value), or undefined if no such rank. */
  readonly getMetadata: (tpRank: number) => unknown;
  readonly secret?: string;
  /** How to tell the user to pick another port (e.g. the env var and config key). */
  readonly portHint?: string;
}

const noPayload = {
  destination(h: SideChannelFrame, length: number): null {
    if (length > 0) throw new ProtocolError(`unexpected payload on '${h.type}'`);
    return null;
  },
};

export class SideChannelServer {
  readonly #opts: SideChannelOptions;
  readonly #secret: string | undefined;
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  #bound: { host: string; port: number } | null = null;

  constructor(opts: SideChannelOptions) {
    this.#opts = opts;
    this.#secret = resolveSecret(opts.secret);
    this.#server = createServer((socket) => this.#serve(socket));
  }

  /** Binds first; resolves with the address actually bound (advertise that one). */
  async start(): Promise<{ host: string; port: number }> {
    const { host, port } = this.#opts;
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', (e: NodeJS.ErrnoException) => {
        if (e.code !== 'EADDRINUSE') return reject(e);
        reject(
          new KVError('SIDE_CHANNEL_PORT_IN_USE', `side channel port ${port} on ${host} is already in use`, {
            hint:
              this.#opts.portHint ??
              `Another engine (or process) holds port ${port}. Choose a free port for the side channel.`,
            details: { host, port },
            cause: e,
          }),
        );
      });
      this.#server.listen(port, host, () => resolve());
    });
    const addr = this.#server.address();
    this.#bound = { host, port: typeof addr === 'object' && addr !== null ? addr.port : port };
    return this.#bound;
  }

  address(): { host: string; port: number } | null {
    return this.#bound;
  }

  #serve(socket: Socket): void {
    this.#sockets.add(socket);
    socket.on('close', () => this.#sockets.delete(socket));
    const nonce = newNonce();
    const timer = setTimeout(() => socket.destroy(), 10_000);
    timer.unref();
    socket.on('close', () => clearTimeout(timer));
    const conn: FramedConnection<SideChannelFrame> = new FramedConnection(
      socket,
      {
        ...noPayload,
        frame: (h) => {
          if (h.type !== 'get_meta') {
            log.warn('side channel got unexpected message %s', h.type);
            throw new ProtocolError(`unexpected message '${h.type}'`);
          }
          const { rank, nonce: clientNonce } = h;
          const secret = this.#secret;
          if (secret !== undefined && !verifyProof(secret, 'client', nonce, clientNonce, h.proof)) {
            conn.send({ type: 'error', reason: 'authentication failed (shared secret mismatch)' });
            socket.end();
            return;
          }
          const metadata = this.#opts.getMetadata(rank);
          if (metadata === undefined) {
            conn.send({ type: 'error', reason: `no tensor-parallel rank ${rank} here` });
            socket.end();
            return;
          }
          conn.send({
            type: 'meta',
            metadata,
            perf: performance.now(),
            ...(secret === undefined ? {} : { proof: authProof(secret, 'server', nonce, clientNonce) }),
          });
          socket.end();
        },
      },
      parseSideChannelFrame,
      `side-channel ${socket.remoteAddress}:${socket.remotePort}`,
    );
    conn.send({ type: 'challenge', nonce, auth: this.#secret !== undefined });
  }

  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    if (!this.#server.listening) return;
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

export interface FetchOptions {
  readonly timeoutMs?: number;
  readonly secret?: string;
}

/** Asks a side channel for one rank's metadata; bounded by timeoutMs (default 5000). */
export function fetchRemoteMetadata(
  host: string,
  port: number,
  tpRank: number,
  options: FetchOptions = {},
): Promise<{ metadata: unknown; remotePerf: number }> {
  const timeoutMs = options.timeoutMs ?? 5000;
  const secret = resolveSecret(options.secret);
  const where = `${host}:${port}`;
  return new Promise((resolve, reject) => {
    const nonce = newNonce();
    let settled = false;
    const fail = (code: ErrorCode, message: string, hint: string): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      reject(new KVError(code, message, { hint, details: { host, port, tpRank } }));
    };
    const socket = connect({ host, port });
    const timer = setTimeout(
      () =>
        fail(
          'SIDE_CHANNEL_TIMEOUT',
          `no handshake answer from side channel ${where} within ${timeoutMs} ms`,
          'Check that the remote engine is running and that remote_host/remote_port point at its side channel.',
        ),
      timeoutMs,
    );
    let serverNonce = '';
    const conn = new FramedConnection<SideChannelFrame>(
      socket,
      {
        ...noPayload,
        frame: (h) => {
          if (h.type === 'challenge') {
            serverNonce = h.nonce;
            if (secret !== undefined && !h.auth) {
              throw new ProtocolError('side channel does not authenticate but a shared secret is configured');
            }
            conn.send({
              type: 'get_meta',
              rank: tpRank,
              nonce,
              ...(secret === undefined ? {} : { proof: authProof(secret, 'client', serverNonce, nonce) }),
            });
          } else if (h.type === 'meta') {
            if (secret !== undefined && !verifyProof(secret, 'server', serverNonce, nonce, h.proof)) {
              throw new ProtocolError('side channel failed authentication (shared secret mismatch)');
            }
            if (settled) return;
            settled = true;
            clearTimeout(timer);
            socket.end();
            resolve({ metadata: h.metadata, remotePerf: h.perf });
          } else if (h.type === 'error') {
            throw new ProtocolError(h.reason);
          } else {
            throw new ProtocolError(`unexpected message '${h.type}'`);
          }
        },
      },
      parseSideChannelFrame,
      `side-channel client ${where}`,
    );
    conn.onClose((reason) =>
      fail(
        'SIDE_CHANNEL_FAILED',
        `handshake with side channel ${where} failed: ${reason}`,
        'Check remote_host/remote_port, that the remote engine is up, and that both use the same shared secret.',
      ),
    );
  });
}
