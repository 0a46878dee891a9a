/**
 * Shapes of the configuration every layer reads. Parsing and validation live next to
 * this file (src/config/). Wire names are snake_case (vLLM's); code uses camelCase.
 */
import type { EmulationConfig } from './emulation-config.ts';
import type { KvLoadFaultConfig } from './fault-injection.ts';
import type { KVEventsConfigFields } from './kv-events-config.ts';

/** The KV cache's element type once `cache_dtype` is resolved (`auto` → the model's dtype). */
export type KVCacheDtype = 'float32' | 'float16' | 'bfloat16';
/** vLLM's `--dtype` names (half = float16, float = float32). */
export type ModelDtypeName = 'auto' | 'half' | 'float16' | 'bfloat16' | 'float' | 'float32';
/** `--dtype` with vLLM's aliases resolved; auto = as the checkpoint stores each tensor. */
export type ModelDtype = 'auto' | 'float16' | 'bfloat16' | 'float32';
/** vLLM's `prefix_caching_hash_algo` names (see docs/kv-cache.md). */
export type HashAlgo = 'sha256' | 'sha256_cbor' | 'xxhash' | 'xxhash_cbor';

export type KVRole = 'kv_producer' | 'kv_consumer' | 'kv_both';
export type KVLoadFailurePolicy = 'fail' | 'recompute';

/** vLLM's KVTransferConfig fields, snake_case as on the wire (docs/configuration.md#kv_transfer_config). */
export interface KVTransferConfigFields {
  kv_connector: string | null;
  engine_id: string;
  kv_buffer_device: string;
  kv_buffer_size: number;
  kv_role: KVRole | null;
  kv_rank: number | null;
  kv_parallel_size: number;
  kv_ip: string;
  kv_port: number;
  kv_connector_extra_config: Record<string, unknown>;
  kv_connector_module_path: string | null;
  enable_permute_local_kv: boolean;
  kv_load_failure_policy: KVLoadFailurePolicy;
}

export interface ModelConfig {
  /** Preset name (`tiny`, `tiny-hybrid`, `small`) or a directory with config.json + model.safetensors. */
  model: string;
  servedModelName: string;
  maxModelLen: number;
  seed: number;
  /** The weights' dtype (`--dtype`); absent = auto. */
  dtype?: ModelDtype;
}

export interface CacheConfig {
  blockSize: number;
  /** Explicit number of KV blocks (wins over the byte budget when set). */
  numGpuBlocks: number | null;
  kvCacheMemoryBytes: number | null;
  cacheDtype: KVCacheDtype;
  enablePrefixCaching: boolean;
  prefixCachingHashAlgo: HashAlgo;
  /** vLLM's --kv-offloading-size (GiB) and --kv-offloading-backend; already applied to kvTransferConfig. */
  kvOffloadingSize: number | null;
  kvOffloadingBackend: 'native' | 'lmcache';
}

export interface SchedulerConfig {
  maxNumSeqs: number;
  maxNumBatchedTokens: number;
  enableChunkedPrefill: boolean;
  /** Tri-state: null = auto (vLLM's rule, docs/configuration.md#hybrid-kv-cache-manager-hma). */
  disableHybridKvCacheManager: boolean | null;
}

/** vLLM's LoRAConfig: present only with --enable-lora. */
export interface LoRAConfig {
  maxLoras: number;
  maxCpuLoras: number;
  maxLoraRank: number;
}

export interface ParallelConfig {
  tensorParallelSize: number;
  /** `--num-threads`: threads of one rank's matmuls; absent or null = sized by the machine. */
  numThreads?: number | null;
  dataParallelSize: number;
  dataParallelRank: number;
  dataParallelSizeLocal: number;
}

/** A validated transfer config (implemented by the KVTransferConfig class). */
export interface KVTransferConfigLike extends Readonly<KVTransferConfigFields> {
  readonly isKvProducer: boolean;
  readonly isKvConsumer: boolean;
  readonly isKvTransferInstance: boolean;
  getFromExtraConfig<T>(key: string, defaultValue: T): T | unknown;
}

/** The whole engine configuration (vLLM's VllmConfig, reduced to what kvconnect runs). */
export interface EngineConfig {
  model: ModelConfig;
  cache: CacheConfig;
  scheduler: SchedulerConfig;
  parallel: ParallelConfig;
  kvTransferConfig: KVTransferConfigLike | null;
  /** LoRA adapters (--enable-lora); absent or null = off. */
  lora?: LoRAConfig | null;
  /** `--kv-events-config` (vLLM's KVEventsConfig); absent or null = no KV events. */
  kvEventsConfig?: KVEventsConfigFields | null;
  /** Emulated deployment (step-time model, token mode, speedup); absent or null = none. */
  emulation?: EmulationConfig | null;
  /** Injected KV-load failures and stalls (`--kv-load-failure-rate`, ...); absent or null = none. */
  kvLoadFaults?: KvLoadFaultConfig | null;
}
