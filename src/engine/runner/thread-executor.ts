/**
 * tp > 1: one worker thread per tensor-parallel rank (./tp-worker.ts). Each step goes to all
 * ranks at once; rank 0's tokens are returned with the connector outputs of every rank
 * aggregated (a request is finished only when every rank reported it).
 */
import type { Worker } from 'node:worker_threads';
import type { EngineConfig } from '../../config/types.ts';
import type { KVConnectorHandshakeMetadata } from '../../connector/types.ts';
import type { KVCacheConfig } from '../../kv/interfaces.ts';
import { startModuleWorker, stopWorker, waitForWorkerReady } from '../../util/start-worker.ts';
import type { ModelRunnerOutput, RunnerInput } from '../runner-io.ts';
import { createAllReduceBuffers } from './all-reduce.ts';
import { type ConnectorOutputAggregator, type ModelExecutor, mergeRankOutputs } from './executor.ts';
import { toPlainEngineConfig } from './plain-config.ts';
import type { FromWorker, ToWorker, TPWorkerData } from './tp-protocol.ts';
import { deserializeError } from './worker-errors.ts';

type WithoutId<T> = T extends unknown ? Omit<T, 'id'> : never;

interface Pending {
  resolve(value: unknown): void;
  reject(error: Error): void;
}

class RankThread {
  readonly worker: Worker;
  readonly #pending = new Map<number, Pending>();
  #nextId = 1;
  #failure: Error | null = null;

  constructor(worker: Worker, onKvWakeup: () => void) {
    this.worker = worker;
    worker.on('message', (msg: FromWorker) => {
      if (msg.type === 'kv-wakeup') return onKvWakeup();
      if (msg.type === 'ready' || msg.type === 'init-error') return;
      const p = this.#pending.get(msg.id);
      if (!p) return;
      this.#pending.delete(msg.id);
      if (msg.type === 'error') p.reject(deserializeError(msg.error));
      else p.resolve(msg.type === 'result' ? msg.output : undefined);
    });
    worker.on('error', (e) => this.#failAll(e));
    worker.on('exit', (code) => this.#failAll(new Error(`tensor-parallel worker exited with code ${code}`)));
  }

  request(message: WithoutId<ToWorker>): Promise<unknown> {
    if (this.#failure) return Promise.reject(this.#failure);
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.worker.postMessage({ ...message, id });
    });
  }

  #failAll(e: Error): void {
    this.#failure ??= e;
    for (const p of this.#pending.values()) p.reject(e);
    this.#pending.clear();
  }
}

export class ThreadExecutor implements ModelExecutor {
  readonly tpSize: number;
  readonly handshakeMetadata: Record<number, KVConnectorHandshakeMetadata>;
  readonly #ranks: RankThread[];
  readonly #aggregator: ConnectorOutputAggregator | null;
  #closed = false;
  #kvWakeup: (() => void) | null = null;

  private constructor(
    workers: Worker[],
    handshakes: Record<number, KVConnectorHandshakeMetadata>,
    aggregator: ConnectorOutputAggregator | null,
  ) {
    const ranks = workers.map((w) => new RankThread(w, () => this.#kvWakeup?.()));
    this.#ranks = ranks;
    this.tpSize = ranks.length;
    this.handshakeMetadata = handshakes;
    this.#aggregator = aggregator;
  }

  static async start(
    engineConfig: EngineConfig,
    kvCacheConfig: KVCacheConfig,
    aggregator: ConnectorOutputAggregator | null,
  ): Promise<ThreadExecutor> {
    const tpSize = engineConfig.parallel.tensorParallelSize;
    const allReduce = createAllReduceBuffers(tpSize);
    const plain = toPlainEngineConfig(engineConfig);
    const workers = Array.from({ length: tpSize }, (_, tpRank) => {
      const workerData: TPWorkerData = { engineConfig: plain, kvCacheConfig, tpRank, tpSize, allReduce };
      return startWorker(workerData);
    });
    const ready = await Promise.allSettled(workers.map(waitReady));
    const failed = ready.find((r) => r.status === 'rejected');
    if (failed) {
      await Promise.all(workers.map((w) => w.terminate()));
      throw (failed as PromiseRejectedResult).reason;
    }
    const handshakes: Record<number, KVConnectorHandshakeMetadata> = {};
    ready.forEach((r, rank) => {
      const meta = (r as PromiseFulfilledResult<KVConnectorHandshakeMetadata | null>).value;
      if (meta) handshakes[rank] = meta;
    });
    return new ThreadExecutor(workers, handshakes, aggregator);
  }

  /** A rank's connector posts a wake-up when its work finished between steps (./tp-worker.ts). */
  setKvWakeup(wakeup: () => void): void {
    this.#kvWakeup = wakeup;
  }

  async execute(input: RunnerInput): Promise<ModelRunnerOutput> {
    const outputs = (await Promise.all(
      this.#ranks.map((r) => r.request({ type: 'execute', input })),
    )) as ModelRunnerOutput[];
    return mergeRankOutputs(outputs, this.#aggregator);
  }

  async shutdown(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.allSettled(this.#ranks.map((r) => r.request({ type: 'shutdown' })));
    // Each rank closes its port after 'shutdown-done' and exits on its own.
    await Promise.all(this.#ranks.map((r) => stopWorker(r.worker)));
  }
}

/** The worker entry next to this file: tp-worker.js in dist/, tp-worker.ts under tsx. */
function startWorker(workerData: TPWorkerData): Worker {
  return startModuleWorker(import.meta.url, 'tp-worker', workerData);
}

function waitReady(worker: Worker): Promise<KVConnectorHandshakeMetadata | null> {
  return waitForWorkerReady(
    worker,
    (msg: FromWorker) =>
      msg.type === 'ready'
        ? { ready: msg.handshake }
        : msg.type === 'init-error'
          ? { failed: deserializeError(msg.error) }
          : undefined,
    (code) => new Error(`tensor-parallel worker exited with code ${code} during start-up`),
  );
}
