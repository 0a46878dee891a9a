/** fast-check generators of the values the wire formats carry (hosts, ports, ids). */
import fc from 'fast-check';

/** Records as JSON.parse builds them (deepStrictEqual compares prototypes). */
export const PLAIN = { noNullPrototype: true } as const;

const ipv4 = fc.ipV4();
const ipv6 = fc.ipV6();
const hostname = fc.domain();

/** Hosts as engines announce them: IPv4, IPv6 (unbracketed, as vLLM writes it) or a name. */
export const host = fc.oneof(ipv4, ipv6, hostname);
export const port = fc.integer({ min: 1, max: 65535 });
export const zmqAddress = fc.record({ host, handshakePort: port, notifyPort: port }, PLAIN);
export const uuidHex = fc.uuid().map((u) => u.replaceAll('-', ''));
export const size = fc.integer({ min: 1, max: 64 });
export const rank = fc.nat({ max: 63 });
/** Block ids, one list per KV cache group. */
export const blockGroups = fc.array(fc.array(fc.nat({ max: 100_000 }), { maxLength: 8 }), {
  minLength: 1,
  maxLength: 3,
});

/** What crosses between processes: a JSON text. */
export function overTheWire<T>(value: T): unknown {
  return JSON.parse(JSON.stringify(value));
}
