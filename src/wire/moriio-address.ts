/**
 * How MoRIIO engines are addressed between processes (docs/connectors/moriio.md#addressing-the-peer):
 * the zmq address `host:IP,handshake:PORT,notify:PORT` an engine announces (discovery ping,
 * GET /kvconnect/info), and the request id the proxy builds from the two peers' addresses,
 * `___prefill_addr_{zmq}___decode_addr_{zmq}_{32 hex}`, which both engines parse back.
 */
import { randomUUID } from 'node:crypto';
import { KVError } from '../errors/kv-error.ts';
import { pythonRepr } from '../errors/python-repr.ts';
import { portOf } from './values.ts';

/** vLLM's defaults for kv_connector_extra_config.handshake_port and notify_port. */
export const MORIIO_DEFAULT_HANDSHAKE_PORT = 6301;
export const MORIIO_DEFAULT_NOTIFY_PORT = 61005;

export interface MoRIIOZmqAddress {
  readonly host: string;
  readonly handshakePort: number;
  readonly notifyPort: number;
}

const PREFILL_RE = /___prefill_addr_(.+?)___decode_addr_/;
/** The API server may append `-{suffix}` to the id it was given (request-id randomisation, choices). */
const DECODE_RE = /___decode_addr_(.+)_[0-9a-f]{32}(?:-.*)?$/;

function malformedMoRIIOAddress(addr: string): KVError {
  return new KVError(
    'MORIIO_MALFORMED_ADDRESS',
    `Malformed zmq_address ${pythonRepr(addr)}: expected 'host:IP,handshake:PORT,notify:PORT' format`,
    {
      hint: 'The proxy embeds each peer as host:IP,handshake:PORT,notify:PORT in the request id; check the instances registered with the proxy (or send remote_host/remote_handshake_port/remote_notify_port in kv_transfer_params).',
      details: { address: addr },
    },
  );
}

/** `host:IP,handshake:PORT,notify:PORT`; each segment splits on its first ':' (IPv6-safe). */
export function parseMoRIIOZmqAddress(addr: string): MoRIIOZmqAddress {
  const fields = new Map<string, string>();
  for (const segment of addr.split(',')) {
    const i = segment.indexOf(':');
    if (i <= 0) throw malformedMoRIIOAddress(addr);
    fields.set(segment.slice(0, i), segment.slice(i + 1));
  }
  const host = fields.get('host');
  const handshakePort = portOf(fields.get('handshake'));
  const notifyPort = portOf(fields.get('notify'));
  if (!host || handshakePort === null || notifyPort === null) throw malformedMoRIIOAddress(addr);
  return { host, handshakePort, notifyPort };
}

/** True when `addr` parses as a zmq address that can be embedded in a request id. */
export function isMoRIIOZmqAddress(addr: string): boolean {
  try {
    formatMoRIIOZmqAddress(parseMoRIIOZmqAddress(addr));
    return true;
  } catch {
    return false;
  }
}

/**
 * The text form of an address. A host that the parser could not read back (empty, or holding
 * ',' or the request id's `___` separators) is refused here rather than sent.
 */
export function formatMoRIIOZmqAddress(a: MoRIIOZmqAddress): string {
  const text = `host:${a.host},handshake:${a.handshakePort},notify:${a.notifyPort}`;
  if (
    a.host === '' ||
    /[,\s]|___/.test(a.host) ||
    portOf(a.handshakePort) === null ||
    portOf(a.notifyPort) === null
  )
    throw malformedMoRIIOAddress(text);
  return text;
}

/** 32 random hex digits: the uuid4 hex vLLM's proxy appends to the request id. */
function newUuidHex(): string {
  return randomUUID().replaceAll('-', '');
}

/** The X-Request-Id of a MoRIIO request, naming both peers. */
export function formatMoRIIORequestId(
  prefill: MoRIIOZmqAddress,
  decode: MoRIIOZmqAddress,
  uuidHex = newUuidHex(),
): string {
  return `___prefill_addr_${formatMoRIIOZmqAddress(prefill)}___decode_addr_${formatMoRIIOZmqAddress(decode)}_${uuidHex}`;
}

/** The two addresses a request id embeds, or null when it carries none. Throws on a malformed address. */
export function parseMoRIIORequestId(
  requestId: string,
): { prefill: MoRIIOZmqAddress; decode: MoRIIOZmqAddress } | null {
  const p = PREFILL_RE.exec(requestId);
  const d = DECODE_RE.exec(requestId);
  if (!p?.[1] || !d?.[1]) return null;
  return { prefill: parseMoRIIOZmqAddress(p[1]), decode: parseMoRIIOZmqAddress(d[1]) };
}
