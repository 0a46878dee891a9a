/** ZeroMQ endpoint rules of vLLM's ZmqEventPublisher (vllm/distributed/kv_events.py). */
import { KVError } from '../errors/kv-error.ts';

/** 8-byte big-endian sequence number, as every frame carries it. */
export function seqBytes(seq: bigint): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt.asUintN(64, seq));
  return b;
}

/** The replay end marker: -1 as a signed 8-byte big-endian integer. */
export const END_SEQ = Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);

/** The replay-socket request for a snapshot of the cache state (vLLM PR #50134's `b"snapshot"`). */
export const SNAPSHOT_REQUEST = Buffer.from('snapshot', 'latin1');

/** vLLM binds when the endpoint has a wildcard, `::`, or is ipc/inproc; else it connects. */
export function shouldBind(endpoint: string): boolean {
  return (
    endpoint.includes('*') ||
    endpoint.includes('::') ||
    endpoint.startsWith('ipc://') ||
    endpoint.startsWith('inproc://')
  );
}

/** Data-parallel ranks get their own endpoints: tcp port + rank, or an inproc `_dp{rank}` suffix. */
export function offsetEndpointPort(
  endpoint: string | null,
  dataParallelRank: number,
  field: string,
): string | null {
  if (!endpoint || dataParallelRank === 0) return endpoint;
  if (endpoint.includes('inproc')) return `${endpoint}_dp${dataParallelRank}`;
  if (endpoint.includes('tcp')) {
    const colon = endpoint.lastIndexOf(':');
    const port = Number(endpoint.slice(colon + 1));
    if (colon < 0 || !Number.isInteger(port)) {
      throw new KVError('KV_EVENTS_ENDPOINT_INVALID', `Invalid endpoint: ${endpoint} has no port to offset`, {
        field,
        hint: `With data_parallel_rank ${dataParallelRank} the port is offset by the rank; give a numeric port, e.g. tcp://*:5557.`,
      });
    }
    return `${endpoint.slice(0, colon)}:${port + dataParallelRank}`;
  }
  throw new KVError('KV_EVENTS_ENDPOINT_INVALID', "Invalid endpoint: must contain 'inproc' or 'tcp'", {
    field,
    hint: 'With data parallelism, KV event endpoints must be tcp://HOST:PORT or inproc://NAME.',
  });
}
