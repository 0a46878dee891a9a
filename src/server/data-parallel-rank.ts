/**
 * vLLM's `X-data-parallel-rank` request header: a request carrying it runs on that
 * data-parallel engine. Read as vLLM reads it: a value Python's `int()` does not parse is
 * ignored (the request is balanced as usual); an integer outside [0, data_parallel_size) is a
 * 400 with vLLM's message. With `serve --data-parallel-size N` the N engines of the process
 * are eligible; a process that is one rank of an external group (`--data-parallel-rank R`)
 * validates the rank and serves it itself, as vLLM's external load-balancing client does.
 */
import type { IncomingMessage } from 'node:http';
import type { AsyncEngineLike } from '../engine/api.ts';
import { KVError } from '../errors/index.ts';

export const DATA_PARALLEL_RANK_HEADER = 'x-data-parallel-rank';

// Python's int(str): optional sign, digits with single underscores between them, outer spaces.
const PY_INT = /^\s*[+-]?\d+(?:_\d+)*\s*$/;

/** The header's rank, or null when absent or not an integer (vLLM then ignores it). */
export function requestedDataParallelRank(req: IncomingMessage): number | null {
  const header = req.headers[DATA_PARALLEL_RANK_HEADER];
  const value = Array.isArray(header) ? header[0] : header;
  if (value === undefined || !PY_INT.test(value)) return null;
  return Number(value.replaceAll('_', '').trim());
}

/**
 * The engine that serves `req`: `own` without the header, else the in-process engine of the
 * requested rank (`peers`, the process's engines; `own` when the process runs one rank).
 */
export function engineForRequest(
  req: IncomingMessage,
  own: AsyncEngineLike,
  peers: readonly AsyncEngineLike[],
): AsyncEngineLike {
  const rank = requestedDataParallelRank(req);
  if (rank === null) return own;
  const size = own.config.parallel.dataParallelSize;
  if (!Number.isSafeInteger(rank) || rank < 0 || rank >= size) {
    throw new KVError('SERVER_INVALID_REQUEST', `data_parallel_rank ${rank} is out of range [0, ${size}).`, {
      hint: `Send X-data-parallel-rank between 0 and ${size - 1}, or leave the header out to let the server choose.`,
    });
  }
  return peers.find((e) => e.config.parallel.dataParallelRank === rank) ?? own;
}
