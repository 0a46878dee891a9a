/**
 * Every environment variable kvconnect reads, declared once: its type, its default and what
 * it does (as vLLM's vllm/envs.py). Code in src/ reads the environment only through
 * `readEnv` (test/architecture.test.ts enforces it); docs/environment.md is generated from
 * this table (`node --import tsx scripts/env-doc.ts`).
 *
 * A variable's `parse` turns the raw value (undefined when unset) into what its readers use.
 * Where a bad value is a configuration error with its own code and fix, `parse` hands over
 * the raw string and the reader that owns the setting checks it.
 */

/** The variables a lookup reads: the process's environment, or one a test passes in. */
export type Environment = Readonly<Record<string, string | undefined>>;

export interface EnvVar<T> {
  /** What a value looks like. */
  readonly type: string;
  /** What holds when the variable is unset. */
  readonly default: string;
  /** What it does, in one sentence. */
  readonly doc: string;
  readonly parse: (raw: string | undefined) => T;
}

/** Off unless set to exactly `1`. */
function flag(doc: string): EnvVar<boolean> {
  return { type: '`1` or unset', default: 'off', doc, parse: (raw) => raw === '1' };
}

/** The raw value; its reader checks it. */
function text(type: string, defaultValue: string, doc: string): EnvVar<string | undefined> {
  return { type, default: defaultValue, doc, parse: (raw) => raw };
}

/** A variable vLLM once read and kvconnect ignores (with a warning naming the extra-config key). */
function deprecated(key: string): EnvVar<string | undefined> {
  return text(
    'any',
    'unset',
    `Deprecated and ignored (as in vLLM); a warning says to set \`${key}\` in \`kv_connector_extra_config\` instead.`,
  );
}

export const ENV_VARS = {
  KVCONNECT_LOG_LEVEL: text(
    '`debug`, `info`, `warn` or `error`, any case',
    '`info` (`warn` for the servers `kvconnect demo` starts)',
    'The level below which log lines are dropped; any other value means `info`.',
  ),
  KVCONNECT_DISABLE_NATIVE: flag(
    'Do not load the native addon (nor build it at install): WebAssembly and JavaScript do its work.',
  ),
  KVCONNECT_DISABLE_NATIVE_MATMUL: flag(
    'The engine uses the WebAssembly matmul and its WebAssembly/JavaScript forward kernels even when the native addon is loaded.',
  ),
  KVCONNECT_DISABLE_AVX512: {
    type: 'any value, or unset',
    default: 'off',
    doc: 'The native matmul and block hash use AVX2 even on a CPU with AVX-512 (read by the native addon itself).',
    parse: (raw: string | undefined): boolean => raw !== undefined,
  },
  KVCONNECT_DISABLE_NATIVE_HASH: flag(
    'Block checksums use WebAssembly (or JavaScript) even when the native addon is loaded.',
  ),
  KVCONNECT_DISABLE_WASM_HASH: flag(
    'Without the native hash, block checksums use plain JavaScript instead of WebAssembly.',
  ),
  KVCONNECT_DISABLE_KV_MAP: flag(
    'KV memory is a plain SharedArrayBuffer, not a memfd a same-host transfer peer can map (no one-copy shm transfers).',
  ),
  KVCONNECT_DISABLE_DIRECT_READ: flag(
    'Transfer agents do not offer their lease table: every same-host READ asks the owner (the request way).',
  ),
  KVCONNECT_DISABLE_WRITE_PULL: flag(
    'Transfer agents send every WRITE; a same-host receiver never pulls recorded blocks.',
  ),
  KVCONNECT_DISABLE_SOCKET_ADOPT: flag(
    'Accepted transfer connections are read the plain way (one copy per payload chunk).',
  ),
  KVCONNECT_COPY_THREADS: text(
    'whole number, 1 to 16',
    '`1`',
    'Copy threads of a transfer agent created without `copyThreads`: a large same-host transfer shares its copy among them.',
  ),
  KVCONNECT_BUSY_POLL_US: text(
    'whole number of µs, 0 to 100000',
    '`100` (`0` for an agent in its own thread)',
    'How long a transfer agent created without `busyPollUs` keeps its event loop polling after transfer activity; `0` = off.',
  ),
  KVCONNECT_TRANSFER_SECRET: text(
    'string',
    'none',
    'Shared secret of transfer agents created without `secret`: peers must prove they know it (HMAC); empty means none.',
  ),
  KVCONNECT_V8_INTERRUPT_BUDGET: text(
    'whole number of bytes ≥ 1024, or `0`',
    "V8's own (67584)",
    "V8's interrupt budget that kvconnect's processes set at startup (`tuneJit()`): smaller optimizes transfer code sooner.",
  ),
  KVCONNECT_KV_EVENTS_ARRAY_LIKE: flag(
    'KV cache events are published as tagged arrays (vLLM before PR #42892) instead of maps.',
  ),
  KVCONNECT_KV_EVENTS_HEARTBEAT_S: text(
    'seconds (a number ≥ 0)',
    '`1`',
    'A KV event publisher with a `replay_endpoint` sends an empty batch after this long without one; `0` = no heartbeats.',
  ),
  VLLM_ALLOW_LONG_MAX_MODEL_LEN: flag(
    "Accept a `--max-model-len` above the model's derived maximum (as vLLM; positions past it are unreliable).",
  ),
  VLLM_SERVER_DEV_MODE: {
    type: 'integer',
    default: '`0`',
    doc: "Any non-zero value turns on vLLM's development endpoints (`POST /reset_prefix_cache`; with `--enable-sleep-mode`, `POST /sleep`, `POST /wake_up`, `GET /is_sleeping`) and kvconnect's request timelines (`GET /kvconnect/timeline`).",
    parse: (raw: string | undefined): boolean => {
      const n = Number.parseInt(raw ?? '0', 10);
      return Number.isFinite(n) && n !== 0;
    },
  },
  VLLM_ALLOW_RUNTIME_LORA_UPDATING: {
    type: '`1`/`true` or unset',
    default: 'off',
    doc: 'Serves `POST /v1/load_lora_adapter` and `/v1/unload_lora_adapter` (as vLLM; paths only under `--lora-allowed-dirs`).',
    parse: (raw: string | undefined): boolean => ['1', 'true'].includes((raw ?? '0').trim().toLowerCase()),
  },
  VLLM_DISABLE_REQUEST_ID_RANDOMIZATION: flag(
    "Internal request ids are the client's, without vLLM's random suffix.",
  ),
  VLLM_USE_SIMPLE_KV_OFFLOAD: text(
    'integer',
    '`0`',
    "Above 0, vLLM's `--kv-offloading-size` would select SimpleCPUOffloadConnector, which kvconnect refuses with a config error.",
  ),
  VLLM_NIXL_SIDE_CHANNEL_HOST: text(
    'host name or address',
    '`localhost`',
    "NixlConnector's side-channel host when `kv_connector_extra_config.side_channel_host` is not set.",
  ),
  VLLM_NIXL_SIDE_CHANNEL_PORT: text(
    'port, 0 to 65535',
    '`5600`',
    "NixlConnector's side-channel base port (plus the data-parallel rank) when `side_channel_port` is not set.",
  ),
  VLLM_P2P_SIDE_CHANNEL_HOST: text(
    'host name or address',
    '`localhost`',
    "The OffloadingConnector p2p tier's control-socket host (bound and announced verbatim) when the tier's `host` is not set.",
  ),
  VLLM_P2P_SIDE_CHANNEL_PORT: text(
    'port, 0 to 65535',
    '`5710`',
    "The OffloadingConnector p2p tier's control-socket base port (plus the data-parallel rank) when the tier's `port` is not set.",
  ),
  VLLM_MORIIO_CONNECTOR_READ_MODE: deprecated('read_mode'),
  VLLM_MORIIO_QP_PER_TRANSFER: deprecated('qp_per_transfer'),
  VLLM_MORIIO_POST_BATCH_SIZE: deprecated('post_batch_size'),
  VLLM_MORIIO_NUM_WORKERS: deprecated('num_workers'),
  POD_IP: text(
    'IP address',
    'unset',
    "The pod's address (Kubernetes downward API `status.podIP`): `kvconnect serve` publishing KV events without a `topic` uses llm-d's `kv@<POD_IP>:<port>@<served model name>`.",
  ),
  PYTHONHASHSEED: text(
    'string',
    '`vllm-none-hash` for SHA-256 hashing, else a random per-process seed',
    "Seed of NONE_HASH, the parent hash of every prompt's first block (as vLLM).",
  ),
  OPENAI_API_KEY: text(
    'string',
    'none',
    "Bearer token the proxy sends to its backends, and `kvconnect bench serve`'s default `--api-key`.",
  ),
} as const satisfies Record<string, EnvVar<unknown>>;

export type EnvName = keyof typeof ENV_VARS;

export type EnvValue<N extends EnvName> = ReturnType<(typeof ENV_VARS)[N]['parse']>;

/** The value of variable `name` in `env` (the process's environment unless a test passes one). */
export function readEnv<N extends EnvName>(name: N, env: Environment = process.env): EnvValue<N> {
  return ENV_VARS[name].parse(env[name]) as EnvValue<N>;
}

/** The process's whole environment, to hand on to a child process. */
export function processEnvironment(): NodeJS.ProcessEnv {
  return process.env;
}
