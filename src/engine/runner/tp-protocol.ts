/**
 * Messages between the engine thread and a tensor-parallel worker thread. Everything is
 * plain data (structured clone); the KV memory and the all-reduce buffers are
 * SharedArrayBuffers handed over once, in workerData.
 */
import type {
  CacheConfig,
  KVTransferConfigFields,
  ModelConfig,
  ParallelConfig,
  SchedulerConfig,
} from '../../config/types.ts';
import type { KVConnectorHandshakeMetadata } from '../../connector/types.ts';
import type { KVCacheConfig } from '../../kv/interfaces.ts';
import type { ModelRunnerOutput, RunnerInput } from '../runner-io.ts';
import type { AllReduceBuffers } from './all-reduce.ts';

/** EngineConfig without class instances: the transfer config travels as its fields. */
export interface PlainEngineConfig {
  model: ModelConfig;
  cache: CacheConfig;
  scheduler: SchedulerConfig;
  parallel: ParallelConfig;
  kvTransferFields: KVTransferConfigFields | null;
}

export interface TPWorkerData {
  engineConfig: PlainEngineConfig;
  kvCacheConfig: KVCacheConfig;
  tpRank: number;
  tpSize: number;
  allReduce: AllReduceBuffers;
}

export interface SerializedError {
  code: string;
  message: string;
  hint?: string;
  stack?: string;
}

export type ToWorker = { type: 'execute'; id: number; input: RunnerInput } | { type: 'shutdown'; id: number };

export type FromWorker =
  | { type: 'ready'; handshake: KVConnectorHandshakeMetadata | null }
  | { type: 'init-error'; error: SerializedError }
  | { type: 'result'; id: number; output: ModelRunnerOutput }
  | { type: 'error'; id: number; error: SerializedError }
  | { type: 'shutdown-done'; id: number }
  /** The rank's connector finished work between steps (KVConnectorBase.wakeEngine): step now. */
  | { type: 'kv-wakeup' };
