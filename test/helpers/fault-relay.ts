/**
 * A fault-injecting TCP relay for tests, between a client and one target on loopback. Each
 * direction can flow, be delayed, be held (a stall: bytes stay queued and the sender feels
 * back-pressure once the kernel buffers fill) or be dropped (a black hole); connections can
 * be cut with a RST, or left half-open (the target side closed, the client side silent).
 *
 * With `frames`, both directions are decoded as the transfer agent's frames and each frame
 * goes through the hook, which may rewrite its header or payload (corruption), hold it and
 * everything after it, optionally after forwarding part of its payload (a peer that stops
 * mid-frame), or cut the connection after part of it.
 */
import { connect, createServer, type Socket } from 'node:net';
import { encodePrefixAndHeader, FrameDecoder } from '../../src/transfer/frame-codec.ts';
import { type AgentFrame, parseAgentFrame } from '../../src/transfer/messages.ts';

/** up = client → target, down = target → client. */
export type Direction = 'up' | 'down';
export type FlowState = 'flow' | 'hold' | 'drop';

export type FrameAction =
  | { readonly action: 'forward'; readonly header?: AgentFrame; readonly payload?: Uint8Array }
  | { readonly action: 'hold'; readonly forwardBytes?: number }
  | { readonly action: 'cut'; readonly forwardBytes?: number };

/** `index` counts the frames of this connection in this direction from 1. */
export type FrameHook = (
  dir: Direction,
  header: AgentFrame,
  payload: Uint8Array | null,
  index: number,
) => FrameAction;

export interface FaultRelayOptions {
  readonly targetPort: number;
  readonly targetHost?: string;
  readonly frames?: FrameHook;
  /** Without `frames`: sees every chunk before it is forwarded (it may change the relay's state). */
  readonly tap?: (dir: Direction, chunk: Buffer) => void;
}

/** Bytes a pipe queues (delayed) before it stops reading from its sender. */
const QUEUE_LIMIT = 1 << 20;

/** One direction of one connection: an ordered queue drained while the state allows. */
class Pipe {
  state: FlowState = 'flow';
  delayMs = 0;
  bytes = 0;
  readonly #queue: { buf: Uint8Array; due: number }[] = [];
  readonly #source: Socket;
  readonly #dest: Socket;
  #timer: NodeJS.Timeout | null = null;

  constructor(source: Socket, dest: Socket) {
    this.#source = source;
    this.#dest = dest;
    dest.on('drain', () => this.pump());
  }

  push(buf: Uint8Array): void {
    if (this.state === 'drop') return;
    this.#queue.push({ buf, due: Date.now() + this.delayMs });
    this.pump();
  }

  set(state: FlowState): void {
    this.state = state;
    if (state === 'drop') this.#queue.length = 0;
    this.pump();
  }

  pump(): void {
    if (this.#timer) {
      clearTimeout(this.#timer);
      this.#timer = null;
    }
    while (this.state === 'flow' && this.#queue.length > 0 && !this.#dest.destroyed) {
      const head = this.#queue[0]!;
      const wait = head.due - Date.now();
      if (wait > 0) {
        this.#timer = setTimeout(() => this.pump(), wait);
        break;
      }
      this.#queue.shift();
      this.bytes += head.buf.length;
      if (!this.#dest.write(head.buf)) break;
    }
    // Back-pressure: stop reading from the sender while held, or while much waits here.
    let queued = 0;
    for (const q of this.#queue) queued += q.buf.length;
    if (this.state === 'hold' || queued > QUEUE_LIMIT || this.#dest.writableNeedDrain) this.#source.pause();
    else this.#source.resume();
  }
}

interface Link {
  readonly client: Socket;
  readonly upstream: Socket;
  readonly up: Pipe;
  readonly down: Pipe;
  /** The target side is gone but the client side must stay open (cut with FIN, or half-open). */
  keepClient: boolean;
}

export interface FaultRelay {
  readonly port: number;
  /** Connections accepted so far. */
  readonly connections: number;
  /** Bytes forwarded in each direction, over all connections. */
  bytes(dir: Direction): number;
  /** Frames decoded, both directions (with `frames` only). */
  readonly frames: number;
  /** Sets the state of a direction for current and future connections. */
  set(dir: Direction | 'both', state: FlowState): void;
  delay(dir: Direction | 'both', ms: number): void;
  /** Resets every connection (RST on both sides). */
  cutAll(): void;
  /** Closes the target side of every connection and drops whatever the client sends: half-open. */
  abandonTargets(): void;
  close(): Promise<void>;
}

export async function startFaultRelay(options: FaultRelayOptions): Promise<FaultRelay> {
  const links = new Set<Link>();
  const states: Record<Direction, FlowState> = { up: 'flow', down: 'flow' };
  const delays: Record<Direction, number> = { up: 0, down: 0 };
  const totals: Record<Direction, number> = { up: 0, down: 0 };
  let accepted = 0;
  let frames = 0;

  const server = createServer((client) => {
    accepted++;
    const upstream = connect({ host: options.targetHost ?? '127.0.0.1', port: options.targetPort });
    const link: Link = {
      client,
      upstream,
      up: new Pipe(client, upstream),
      down: new Pipe(upstream, client),
      keepClient: false,
    };
    for (const dir of ['up', 'down'] as const) {
      link[dir].state = states[dir];
      link[dir].delayMs = delays[dir];
    }
    links.add(link);
    if (options.frames) {
      const hook = options.frames;
      const counted: FrameHook = (dir, h, p, i) => {
        frames++;
        return hook(dir, h, p, i);
      };
      decode(link, 'up', counted);
      decode(link, 'down', counted);
    } else {
      const tap = options.tap;
      client.on('data', (d: Buffer) => {
        tap?.('up', d);
        link.up.push(d);
      });
      upstream.on('data', (d: Buffer) => {
        tap?.('down', d);
        link.down.push(d);
      });
    }
    const end = (): void => {
      totals.up += link.up.bytes;
      totals.down += link.down.bytes;
      link.up.bytes = 0;
      link.down.bytes = 0;
      links.delete(link);
      client.destroy();
      upstream.destroy();
    };
    client.on('close', end);
    upstream.on('close', () => {
      if (!link.keepClient) end();
    });
    for (const s of [client, upstream]) s.on('error', () => {});
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const addr = server.address();
  const each = (dir: Direction | 'both', f: (d: Direction) => void): void => {
    for (const d of dir === 'both' ? (['up', 'down'] as const) : [dir]) f(d);
  };
  return {
    port: typeof addr === 'object' && addr ? addr.port : 0,
    get connections() {
      return accepted;
    },
    get frames() {
      return frames;
    },
    bytes: (dir) => totals[dir] + [...links].reduce((n, l) => n + l[dir].bytes, 0),
    set: (dir, state) =>
      each(dir, (d) => {
        states[d] = state;
        for (const l of links) l[d].set(state);
      }),
    delay: (dir, ms) =>
      each(dir, (d) => {
        delays[d] = ms;
        for (const l of links) l[d].delayMs = ms;
      }),
    cutAll: () => {
      for (const l of links) {
        l.client.resetAndDestroy();
        l.upstream.resetAndDestroy();
      }
    },
    abandonTargets: () => {
      for (const l of links) {
        l.keepClient = true;
        l.up.set('drop');
        l.down.set('drop');
        l.upstream.destroy();
      }
    },
    close: async () => {
      for (const l of links) {
        l.client.destroy();
        l.upstream.destroy();
      }
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** Re-frames one direction's traffic through the hook. */
function decode(link: Link, dir: Direction, hook: FrameHook): void {
  const pipe = link[dir];
  const source = dir === 'up' ? link.client : link.upstream;
  const sink = dir === 'up' ? link.upstream : link.client;
  let index = 0;
  const decoder = new FrameDecoder<AgentFrame>(
    {
      destination: (_h, len) => (len > 0 ? new Uint8Array(len) : null),
      frame: (h, payload) => {
        const act = hook(dir, h, payload, ++index);
        const body = act.action === 'forward' && act.payload ? act.payload : payload;
        const length = payload?.length ?? 0;
        pipe.push(encodePrefixAndHeader(act.action === 'forward' && act.header ? act.header : h, length));
        if (act.action === 'forward') {
          if (body) pipe.push(body);
          return;
        }
        const n = Math.min(act.forwardBytes ?? 0, length);
        if (payload && n > 0) pipe.push(payload.subarray(0, n));
        if (act.action === 'cut') {
          // The receiving side sees the frame end early with a FIN; the sending side is reset.
          if (dir === 'down') link.keepClient = true;
          pipe.set('drop');
          sink.end();
          source.resetAndDestroy();
          return;
        }
        pipe.set('hold');
        if (payload && n < length) pipe.push(payload.subarray(n));
      },
    },
    parseAgentFrame,
  );
  source.on('data', (d) => {
    try {
      decoder.push(d);
    } catch {
      link.client.resetAndDestroy();
      link.upstream.resetAndDestroy();
    }
  });
}
