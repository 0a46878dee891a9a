/**
 * Entry of one tensor-parallel worker thread: builds this rank's model shard, KV memory and
 * worker-side connector, reports its handshake metadata, then runs steps on request.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { SharedMemoryAllReduce } from './all-reduce.ts';
import { fromPlainEngineConfig } from './plain-config.ts';
import { setUpRank } from './rank-setup.ts';
import type { FromWorker, ToWorker, TPWorkerData } from './tp-protocol.ts';
import { serializeError } from './worker-errors.ts';

async function main(): Promise<void> {
  const port = parentPort;
  if (!port) throw new Error('tp-worker.ts must run in a worker thread');
  const data = workerData as TPWorkerData;
  const post = (msg: FromWorker): void => port.postMessage(msg);
  let rank: Awaited<ReturnType<typeof setUpRank>>;
  try {
    const allReduce = new SharedMemoryAllReduce(data.allReduce, data.tpRank);
    rank = await setUpRank(
      fromPlainEngineConfig(data.engineConfig),
      data.kvCacheConfig,
      data.tpRank,
      data.tpSize,
      (x) => allReduce.allReduce(x),
    );
  } catch (e) {
    post({ type: 'init-error', error: serializeError(e) });
    return;
  }
  // The connector's wake-ups reach the engine thread, one message until the next step.
  let wakeupSent = false;
  rank.runner.connector?.setEngineWakeup(() => {
    if (wakeupSent) return;
    wakeupSent = true;
    post({ type: 'kv-wakeup' });
  });
  // Steps run one at a time, in arrival order, like vLLM's worker busy loop.
  let queue: Promise<void> = Promise.resolve();
  port.on('message', (msg: ToWorker) => {
    if (msg.type === 'execute') wakeupSent = false;
    queue = queue.then(async () => {
      if (msg.type === 'shutdown') {
        await rank.runner.shutdown();
        post({ type: 'shutdown-done', id: msg.id });
        port.close();
        return;
      }
      try {
        post({ type: 'result', id: msg.id, output: await rank.runner.execute(msg.input) });
      } catch (e) {
        post({ type: 'error', id: msg.id, error: serializeError(e) });
      }
    });
  });
  post({ type: 'ready', handshake: rank.handshake });
}

void main();
