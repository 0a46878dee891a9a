/**
 * The messages of the transfer layer's two protocols, as a discriminated union on `type`,
 * and the one place a peer's JSON header is checked field by field before any handler sees
 * it (docs/transfer.md#wire-protocols specifies them). A header that does not match its
 * type's shape is a ProtocolError: the connection that sent it is closed.
 *
 * Hand-written rather than a schema library: this runs once per data frame on the latency
 * path, and the shapes are a dozen flat objects.
 */
import { isTransferFailureCause, TRANSFER_FAILURE_CAUSES, type TransferFailureCause } from './failure.ts';
import { ProtocolError } from './protocol-error.ts';

/**
 * Version of the agent protocol, published in AgentMetadata: agents of different versions
 * refuse each other in addRemoteAgent. 3: typed message names, same-host KV mapping.
 * 4: `mapped` frames (several pieces of mapped KV in one frame). 5: pulled WRITEs (a same-host
 * receiver copies a WRITE of recorded blocks itself, through the sender's lease table).
 * 6: `xfer_err` carries the failure's cause (failure.ts) beside its reason.
 */
export const TRANSFER_PROTOCOL_VERSION = 6;

/** [region, first block, block count]: one run of a READ or WRITE, in the receiver's regions. */
export type WireRun = readonly [number, number, number];

/** A region of this agent's KV memory that a same-host peer may map read-only (see kv-map.ts). */
export interface ExposedRegion {
  readonly region: number;
  readonly pid: number;
  readonly fd: number;
  /** Identity of the memory file, checked by the peer after opening it. */
  readonly ino: number;
  readonly dev: number;
  /** Size of the whole memory file, and where this region lies in it. */
  readonly size: number;
  readonly offset: number;
  readonly length: number;
}

export type AgentFrame =
  | { readonly type: 'challenge'; readonly nonce: string; readonly auth: boolean }
  | {
      readonly type: 'hello';
      readonly agent: string;
      readonly engine: string;
      readonly nonce: string;
      readonly transport: 'tcp' | 'shm';
      readonly proof?: string;
      readonly ring?: string;
      readonly kv?: readonly ExposedRegion[];
      /** The client's lease table, offered with its KV: the server may pull the client's WRITEs. */
      readonly leases?: ExposedRegion;
    }
  | {
      readonly type: 'welcome';
      readonly agent: string;
      readonly proof?: string;
      readonly ring?: string;
      readonly kv?: readonly ExposedRegion[];
      /** The server's lease table (lease-table.ts), mappable like a region; `region` is 0. */
      readonly leases?: ExposedRegion;
      /** The client's regions this server mapped. */
      readonly mapped?: readonly number[];
      /** The server mapped the client's KV and lease table: it can pull the client's WRITEs. */
      readonly pulls?: boolean;
    }
  | { readonly type: 'ready'; readonly mapped?: readonly number[] }
  | { readonly type: 'error'; readonly reason: string }
  | {
      readonly type: 'read';
      readonly xfer: number;
      readonly runs: readonly WireRun[];
      readonly grant?: string;
    }
  | {
      readonly type: 'write';
      readonly xfer: number;
      readonly runs: readonly WireRun[];
      readonly notif?: string;
      /**
       * A pulled WRITE: the key of the READ grant the sender published for the receiver in its
       * lease table, and the sender's runs (`src[i]` holds what goes to `runs[i]`).
       */
      readonly pull?: string;
      readonly src?: readonly WireRun[];
    }
  | DataFrame
  | MappedFrame
  | { readonly type: 'write_end'; readonly xfer: number }
  | {
      readonly type: 'write_done';
      readonly xfer: number;
      readonly bad: readonly (readonly [number, number])[];
    }
  | {
      readonly type: 'xfer_err';
      readonly xfer: number;
      readonly cause: TransferFailureCause;
      readonly reason: string;
    }
  /** The receiver could not pull the WRITE (why): the sender sends its blocks instead. */
  | { readonly type: 'pull_declined'; readonly xfer: number; readonly reason: string }
  | { readonly type: 'notif'; readonly message: string }
  | { readonly type: 'ack'; readonly count: number };

/**
 * Blocks [block, block+count) of run `run` of transfer `xfer`, with one checksum each. The
 * bytes follow as the payload (tcp), sit in the sender's ring (`ring`), or are read by the
 * receiver straight from the sender's mapped KV memory (`src`: never on the wire, where such
 * pieces travel in `mapped` frames; see mappedPieces).
 */
export interface DataFrame {
  readonly type: 'data';
  readonly xfer: number;
  readonly run: number;
  readonly block: number;
  readonly count: number;
  readonly sums: readonly number[];
  readonly ring?: { readonly offset: number; readonly length: number };
  readonly src?: { readonly region: number; readonly offset: number };
  /** First frame of a READ only: µs the server held the READ before serving it (grant wait). */
  readonly held?: number;
}

/** [run, first block in the run, block count, sender's region, byte offset in it]: one piece of a `mapped` frame. */
export type MappedPart = readonly [number, number, number, number, number];

/**
 * Pieces of one transfer that the receiver copies straight from the sender's mapped KV (same
 * host), with one checksum per block, in order. One frame (one header to encode and parse,
 * one wake-up, one write) stands for what would be a `data` frame with `src` per piece.
 */
export interface MappedFrame {
  readonly type: 'mapped';
  readonly xfer: number;
  readonly parts: readonly MappedPart[];
  readonly sums: readonly number[];
  /** As in DataFrame: on the first frame of a READ only. */
  readonly held?: number;
}

/** The `data` frames a `mapped` frame stands for, in order (`held` on the first). */
export function mappedPieces(f: MappedFrame): DataFrame[] {
  let at = 0;
  return f.parts.map(([run, block, count, region, offset], i) => {
    const sums = f.sums.slice(at, at + count);
    at += count;
    const piece: Mutable<DataFrame> = {
      type: 'data',
      xfer: f.xfer,
      run,
      block,
      count,
      sums,
      src: { region, offset },
    };
    if (i === 0 && f.held !== undefined) piece.held = f.held;
    return piece;
  });
}

export type SideChannelFrame =
  | { readonly type: 'challenge'; readonly nonce: string; readonly auth: boolean }
  | { readonly type: 'get_meta'; readonly rank: number; readonly nonce: string; readonly proof?: string }
  | { readonly type: 'meta'; readonly metadata: unknown; readonly perf: number; readonly proof?: string }
  | { readonly type: 'error'; readonly reason: string };

/** Largest string field a peer may send (names, nonces, proofs, reasons, notifications). */
const MAX_STRING = 4096;
/** Largest number of runs in one READ/WRITE (a transfer's descriptors after coalescing). */
export const MAX_DESCRIPTORS = 1 << 14;

type Raw = Readonly<Record<string, unknown>>;
/** A message under construction (hot paths set optional fields one by one instead of spreading objects). */
export type Mutable<T> = { -readonly [K in keyof T]: T[K] };

function fail(raw: Raw, key: string, expected: string): never {
  throw new ProtocolError(`field '${key}' of '${String(raw['type'])}' must be ${expected}`);
}

/** Field `key` of `from` (default: the message itself) as a non-negative integer; errors name the message `raw`. */
function uint(raw: Raw, key: string, from: Raw = raw): number {
  const v = from[key];
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) fail(raw, key, 'a non-negative integer');
  return v;
}

function str(raw: Raw, key: string): string {
  const v = raw[key];
  if (typeof v !== 'string' || v.length > MAX_STRING) fail(raw, key, 'a string');
  return v;
}

function optStr<K extends string>(raw: Raw, key: K): { [P in K]?: string } {
  return (raw[key] === undefined ? {} : { [key]: str(raw, key) }) as { [P in K]?: string };
}

function uintList(raw: Raw, key: string, max: number): number[] {
  const v = raw[key];
  if (!Array.isArray(v) || v.length > max) fail(raw, key, `a list of at most ${max} integers`);
  for (const x of v)
    if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0) fail(raw, key, 'integers');
  return v as number[];
}

function optUintList<K extends string>(raw: Raw, key: K): { [P in K]?: number[] } {
  return (raw[key] === undefined ? {} : { [key]: uintList(raw, key, MAX_DESCRIPTORS) }) as {
    [P in K]?: number[];
  };
}

function object(raw: Raw, key: string): Raw {
  const v = raw[key];
  if (typeof v !== 'object' || v === null || Array.isArray(v)) fail(raw, key, 'an object');
  return v as Raw;
}

function tuples(raw: Raw, key: string, width: number, min: number): number[][] {
  const v = raw[key];
  if (!Array.isArray(v) || v.length < min || v.length > MAX_DESCRIPTORS) {
    fail(raw, key, `a list of ${min} to ${MAX_DESCRIPTORS} entries`);
  }
  for (const t of v) {
    if (!Array.isArray(t) || t.length !== width) fail(raw, key, `a list of ${width}-tuples`);
    for (const x of t) {
      if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0) fail(raw, key, 'non-negative integers');
    }
  }
  return v as number[][];
}

/** One mappable memory offer (an entry of `kv`, or `leases`). */
function exposedEntry(raw: Raw, key: string, entry: unknown): ExposedRegion {
  if (typeof entry !== 'object' || entry === null) fail(raw, key, 'a mappable region');
  const e = entry as Raw;
  return {
    region: uint(raw, 'region', e),
    pid: uint(raw, 'pid', e),
    fd: uint(raw, 'fd', e),
    ino: uint(raw, 'ino', e),
    dev: uint(raw, 'dev', e),
    size: uint(raw, 'size', e),
    offset: uint(raw, 'offset', e),
    length: uint(raw, 'length', e),
  };
}

function exposed(raw: Raw): { kv?: ExposedRegion[] } {
  if (raw['kv'] === undefined) return {};
  const list = raw['kv'];
  if (!Array.isArray(list) || list.length > MAX_DESCRIPTORS) fail(raw, 'kv', 'a list of regions');
  return { kv: list.map((entry: unknown) => exposedEntry(raw, 'kv', entry)) };
}

function leases(raw: Raw): { leases?: ExposedRegion } {
  return raw['leases'] === undefined ? {} : { leases: exposedEntry(raw, 'leases', raw['leases']) };
}

/** A READ or WRITE request, with its optional string field `opt` (field by field: a hot path). */
function request<T extends 'read' | 'write'>(
  raw: Raw,
  type: T,
  opt: 'grant' | 'notif',
): Extract<AgentFrame, { type: T }> {
  const runs = tuples(raw, 'runs', 3, 1);
  const f: Record<string, unknown> = { type, xfer: uint(raw, 'xfer'), runs };
  if (raw[opt] !== undefined) f[opt] = str(raw, opt);
  if (type === 'write' && raw['pull'] !== undefined) {
    f['pull'] = str(raw, 'pull');
    const src = tuples(raw, 'src', 3, 1);
    if (src.length !== runs.length) fail(raw, 'src', 'one run of the sender per run');
    f['src'] = src;
  }
  return f as Extract<AgentFrame, { type: T }>;
}

/** Hot path (one per data frame): built field by field, as object spreads cost microseconds here (Node 20). */
function dataFrame(raw: Raw): DataFrame {
  const count = uint(raw, 'count');
  const sums = uintList(raw, 'sums', MAX_DESCRIPTORS);
  if (count === 0 || sums.length !== count) fail(raw, 'sums', 'one checksum per block');
  const frame: Mutable<DataFrame> = {
    type: 'data',
    xfer: uint(raw, 'xfer'),
    run: uint(raw, 'run'),
    block: uint(raw, 'block'),
    count,
    sums,
  };
  if (raw['held'] !== undefined) frame.held = uint(raw, 'held');
  if (raw['ring'] !== undefined) {
    const ring = object(raw, 'ring');
    frame.ring = { offset: uint(raw, 'offset', ring), length: uint(raw, 'length', ring) };
  }
  return frame;
}

function mappedFrame(raw: Raw): MappedFrame {
  const parts = tuples(raw, 'parts', 5, 1) as unknown as MappedPart[];
  const sums = uintList(raw, 'sums', MAX_DESCRIPTORS);
  let blocks = 0;
  for (const p of parts) {
    if (p[2] === 0) fail(raw, 'parts', 'pieces of at least one block');
    blocks += p[2];
  }
  if (sums.length !== blocks) fail(raw, 'sums', 'one checksum per block of the parts');
  const frame: Mutable<MappedFrame> = { type: 'mapped', xfer: uint(raw, 'xfer'), parts, sums };
  if (raw['held'] !== undefined) frame.held = uint(raw, 'held');
  return frame;
}

/** Checks a header of the agent protocol; throws ProtocolError unless it is a well-formed message. */
export function parseAgentFrame(raw: Raw): AgentFrame {
  switch (raw['type']) {
    case 'challenge':
      return { type: 'challenge', nonce: str(raw, 'nonce'), auth: raw['auth'] === true };
    case 'hello': {
      const transport = raw['transport'];
      if (transport !== 'tcp' && transport !== 'shm') fail(raw, 'transport', "'tcp' or 'shm'");
      return {
        type: 'hello',
        agent: str(raw, 'agent'),
        engine: str(raw, 'engine'),
        nonce: str(raw, 'nonce'),
        transport,
        ...optStr(raw, 'proof'),
        ...optStr(raw, 'ring'),
        ...exposed(raw),
        ...leases(raw),
      };
    }
    case 'welcome':
      return {
        type: 'welcome',
        agent: str(raw, 'agent'),
        ...optStr(raw, 'proof'),
        ...optStr(raw, 'ring'),
        ...exposed(raw),
        ...leases(raw),
        ...optUintList(raw, 'mapped'),
        ...(raw['pulls'] === true ? { pulls: true } : {}),
      };
    case 'ready':
      return { type: 'ready', ...optUintList(raw, 'mapped') };
    case 'error':
      return { type: 'error', reason: str(raw, 'reason') };
    case 'read':
      return request(raw, 'read', 'grant');
    case 'write':
      return request(raw, 'write', 'notif');
    case 'data':
      return dataFrame(raw);
    case 'mapped':
      return mappedFrame(raw);
    case 'write_end':
      return { type: 'write_end', xfer: uint(raw, 'xfer') };
    case 'write_done':
      return {
        type: 'write_done',
        xfer: uint(raw, 'xfer'),
        bad: tuples(raw, 'bad', 2, 0) as unknown as [number, number][],
      };
    case 'xfer_err': {
      const cause = raw['cause'];
      if (!isTransferFailureCause(cause)) fail(raw, 'cause', `one of ${TRANSFER_FAILURE_CAUSES.join(', ')}`);
      return { type: 'xfer_err', xfer: uint(raw, 'xfer'), cause, reason: str(raw, 'reason') };
    }
    case 'pull_declined':
      return { type: 'pull_declined', xfer: uint(raw, 'xfer'), reason: str(raw, 'reason') };
    case 'notif':
      return { type: 'notif', message: str(raw, 'message') };
    case 'ack': {
      const count = uint(raw, 'count');
      if (count === 0) fail(raw, 'count', 'at least 1');
      return { type: 'ack', count };
    }
    default:
      throw new ProtocolError(`unknown message '${String(raw['type'])}'`);
  }
}

/** Checks a header of the side-channel protocol. */
export function parseSideChannelFrame(raw: Raw): SideChannelFrame {
  switch (raw['type']) {
    case 'challenge':
      return { type: 'challenge', nonce: str(raw, 'nonce'), auth: raw['auth'] === true };
    case 'get_meta':
      return { type: 'get_meta', rank: uint(raw, 'rank'), nonce: str(raw, 'nonce'), ...optStr(raw, 'proof') };
    case 'meta': {
      const perf = raw['perf'];
      if (typeof perf !== 'number' || !Number.isFinite(perf)) fail(raw, 'perf', 'a number');
      return { type: 'meta', metadata: raw['metadata'], perf, ...optStr(raw, 'proof') };
    }
    case 'error':
      return { type: 'error', reason: str(raw, 'reason') };
    default:
      throw new ProtocolError(`unexpected message '${String(raw['type'])}'`);
  }
}
