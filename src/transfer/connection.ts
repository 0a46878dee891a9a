/**
 * A framed socket: frames out (prefix+header corked together with payload views, so payload
 * bytes go from the caller's memory to the kernel without a user-space copy), frames in via
 * FrameDecoder. Any framing or protocol error closes this connection only, and is logged.
 */
import { Socket } from 'node:net';
import { getLogger } from '../logging/logger.ts';
import { drained } from '../util/drained.ts';
import { readEnv } from '../util/envs.ts';
import {
  encodePrefixAndHeader,
  FrameDecoder,
  type FrameSink,
  type Header,
  type HeaderParser,
} from './frame-codec.ts';
import { ProtocolError } from './protocol-error.ts';

const log = getLogger('kvconnect.transfer.connection');

/**
 * send() asks the caller to wait once this much is queued in Node (not yet in the kernel).
 * 'drain' fires only when that queue is empty, so whatever the caller does before its next
 * send (hashing the next chunk) runs while only the kernel's socket buffer feeds the peer.
 * One 4 MiB chunk keeps that gap shorter than the buffer; a larger threshold (several
 * chunks hashed in a burst) starved the receiver and measured lower tcp throughput.
 */
const DRAIN_THRESHOLD = 4 << 20;

/** A framed socket whose protocol's messages are `F`; received headers are checked by `parse`. */
export class FramedConnection<F extends Header> {
  readonly socket: Socket;
  readonly label: string;
  readonly #decoder: FrameDecoder<F>;
  #closed = false;
  #closeReason = '';
  readonly #closeListeners: ((reason: string) => void)[] = [];

  readonly #activity: (() => void) | undefined;

  /** `activity`, when given, is called whenever bytes arrive (before they are decoded) or a frame is sent. */
  constructor(
    socket: Socket,
    sink: FrameSink<F>,
    parse: HeaderParser<F>,
    label: string,
    activity?: () => void,
  ) {
    this.socket = socket;
    this.label = label;
    this.#activity = activity;
    socket.setNoDelay(true);
    this.#decoder = new FrameDecoder(sink, parse);
    socket.on('data', (chunk: Buffer) => this.feed(chunk));
    socket.on('error', (e) => {
      if (!this.#closed) this.#closeReason = e.message;
    });
    socket.on('close', () => this.#markClosed(this.#closeReason || 'connection closed by peer'));
  }

  /** Decodes bytes read from the socket; a framing or protocol error closes the connection. */
  feed(chunk: Uint8Array, direct = false): void {
    if (this.#closed) return;
    this.#activity?.();
    try {
      if (direct) this.#decoder.directFilled(chunk.length);
      else this.#decoder.push(chunk);
    } catch (e) {
      const msg = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
      log.warn('closing connection %s: %s', this.label, msg);
      this.close(msg);
    }
  }

  directTarget(): Uint8Array | null {
    return this.#closed ? null : this.#decoder.directTarget();
  }

  get closed(): boolean {
    return this.#closed;
  }

  get closeReason(): string {
    return this.#closeReason;
  }

  onClose(listener: (reason: string) => void): void {
    if (this.#closed) listener(this.#closeReason);
    else this.#closeListeners.push(listener);
  }

  /** Writes one frame; resolves at once unless the socket buffer is over the drain threshold. */
  send(header: F, payload: readonly Uint8Array[] = []): Promise<void> | undefined {
    if (this.#closed) throw new ProtocolError(`connection ${this.label} is closed: ${this.#closeReason}`);
    this.#activity?.();
    let length = 0;
    for (const p of payload) length += p.length;
    const s = this.socket;
    if (payload.length === 0) {
      s.write(encodePrefixAndHeader(header, 0));
    } else {
      s.cork();
      s.write(encodePrefixAndHeader(header, length));
      for (const p of payload) s.write(p);
      s.uncork();
    }
    return s.writableLength < DRAIN_THRESHOLD ? undefined : drained(s);
  }

  close(reason: string): void {
    if (this.#closed) return;
    this.#closeReason = reason;
    this.socket.destroy();
    this.#markClosed(reason);
  }

  #markClosed(reason: string): void {
    if (this.#closed && this.#closeListeners.length === 0) return;
    this.#closed = true;
    const listeners = this.#closeListeners.splice(0);
    for (const l of listeners) l(reason);
  }
}

/**
 * Socket `onread` options that let the kernel write payload bytes straight into the
 * destination view (no intermediate Buffer) whenever a payload with a destination is being
 * received; other bytes go through a reused scratch buffer. Only sockets we create with
 * net.connect can take this option (accepted sockets cannot).
 */
export function zeroCopyRead(connection: () => FramedConnection<Header> | undefined): {
  buffer: () => Uint8Array;
  callback: (n: number, buf: Uint8Array) => boolean;
} {
  const scratch = Buffer.allocUnsafe(256 << 10);
  return {
    buffer: () => connection()?.directTarget() ?? scratch,
    callback: (n, buf) => {
      connection()?.feed(buf.subarray(0, n), buf !== scratch);
      return true;
    },
  };
}

type ZeroCopyRead = ReturnType<typeof zeroCopyRead>;

/**
 * Node lets only sockets it creates itself read into caller-chosen buffers (`onread`), not
 * the sockets a server accepts. This moves the handle of an accepted socket (from a server
 * created with `pauseOnConnect`, so nothing was read yet) into a new Socket that has
 * `onread`, and retires the accepted one, so WRITE payloads land in KV memory the way
 * READ payloads do. `_handle` is not public API: if it is missing or anything fails, the
 * accepted socket is used as it is (each payload chunk is then copied once).
 */
export function adoptAcceptedSocket(accepted: Socket, onread: ZeroCopyRead): Socket {
  const holder = accepted as unknown as { _handle?: { readStart?: unknown } | null };
  const handle = holder._handle;
  if (!readEnv('KVCONNECT_DISABLE_SOCKET_ADOPT') && handle && typeof handle.readStart === 'function') {
    try {
      const socket = new Socket({ handle, onread, readable: true, writable: true } as ConstructorParameters<
        typeof Socket
      >[0]);
      holder._handle = null;
      accepted.destroy();
      return socket;
    } catch (e) {
      log.debug('cannot adopt an accepted socket (%s); reading it with a copy', String(e));
    }
  }
  accepted.resume();
  return accepted;
}
