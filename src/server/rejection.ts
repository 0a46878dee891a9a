/**
 * docs/scheduler.md#delayed-free-and-aborts: a request rejected before admission that carried
 * do_remote_prefill=true must still reach the engine, so the connector's requestFinished runs
 * and the prefill peer frees the blocks it pinned. Uses the engine's own method when it has
 * one, else submits vLLM's dummy request (one token, max_tokens 1) and aborts it immediately.
 */
import type { KVTransferParams } from '../connector/types.ts';
import type { AsyncEngineLike } from '../engine/api.ts';
import { rejectedKvTransferRequest } from '../engine/sampling-params.ts';
import { getLogger } from '../logging/logger.ts';

const log = getLogger('kvconnect.server.rejection');

export async function notifyKvTransferRequestRejected(
  engine: AsyncEngineLike,
  requestId: string,
  params: KVTransferParams,
): Promise<void> {
  try {
    if (typeof engine.notifyKvTransferRequestRejected === 'function') {
      engine.notifyKvTransferRequestRejected(requestId, params);
      return;
    }
    const controller = new AbortController();
    const stream = engine.generate(rejectedKvTransferRequest(requestId, params), controller.signal);
    const iterator = stream[Symbol.asyncIterator]();
    const first = iterator.next();
    controller.abort();
    engine.abort(requestId);
    let step = await first;
    while (!step.done) step = await iterator.next();
  } catch (e) {
    log.warn('Could not notify the engine of rejected request %s: %s', requestId, (e as Error).message);
  }
}
