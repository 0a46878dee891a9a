/**
 * Shapes shared by the proxy's files. Wire objects (kv_transfer_params, discovery pings,
 * /kvconnect/info) keep vLLM's snake_case names.
 */

export const CONNECTOR_KINDS = ['NixlConnector', 'NixlPushConnector', 'MoRIIOConnector'] as const;
export type ConnectorKind = (typeof CONNECTOR_KINDS)[number];

export const POLICY_NAMES = ['round_robin', 'least_loaded', 'prefix_aware', 'kv_aware'] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

export type BackendRole = 'prefill' | 'decode';
export type MoriioMode = 'READ' | 'WRITE';

/**
 * NIXL side-channel coordinates of a prefill instance (push flow,
 * docs/proxy.md#nixl-push-nixlpushconnector--concurrent).
 */
export interface PushCoordinates {
  engineId?: string;
  host?: string;
  port?: number;
  tpSize?: number;
  ppSize?: number;
}

export interface ProxyOptions {
  prefill: string[];
  decode: string[];
  port: number;
  host: string;
  policy: PolicyName;
  /** Forces the flow; when absent each backend is asked via GET /kvconnect/info. */
  kvConnector?: ConnectorKind;
  /** Port of the MoRIIO discovery listener (HTTP POST /register); absent = no discovery. */
  discoveryPort?: number;
  discoveryHost: string;
  /** A discovered instance is dropped when no ping arrived for this long. */
  discoveryTtlMs: number;
  healthIntervalMs: number;
  healthTimeoutMs: number;
  /** Chunk size of the prefix hasher used by `prefix_aware`. */
  prefixChunkBytes: number;
  prefixCacheEntries: number;
  /** Applied to every prefill instance for NIXL push when given (overrides /kvconnect/info). */
  push: PushCoordinates;
  /** Forces MoRIIO READ or WRITE; otherwise from discovery pings or backend info (default WRITE). */
  moriioMode?: MoriioMode;
  /** vLLM's MoRIIO toy proxy sends D `max_tokens - 1`; off by default (token-identical outputs). */
  moriioDecrementMaxTokens: boolean;
  /** No healthy prefill instance, or the prefill leg failed: serve the request on a decode instance alone. */
  prefillFallback: boolean;
  /** Deadline of the prefill leg (ms); past it the request falls back (or fails, without fallback). */
  prefillTimeoutMs: number;
  /** Retries of one request (src/proxy/retry-budget.ts): legs sent to another instance, streams resumed. */
  maxRetries: number;
  /** No retry or resume starts later than this after the request arrived (ms). */
  retryDeadlineMs: number;
  /** Continue a stream whose decode instance failed mid-way on another one (src/proxy/stream-resume.ts). */
  streamResume: boolean;
  /** Period of the health checks of backends marked down (ms; 0 = with the others). */
  unhealthyIntervalMs: number;
  /** kv_aware: the model's tokenizer (a directory with tokenizer.json, or a preset name). */
  tokenizer?: string;
  /** kv_aware: backend URL → KV events endpoint, for backends that do not report one (vLLM). */
  kvEvents?: Record<string, string>;
  /** kv_aware: block size and hash algorithm of backends that do not report theirs. */
  kvEventsBlockSize: number;
  kvEventsHashAlgo: string;
  /** kv_aware's cost (src/proxy/kv-cost.ts): queued-prefill tokens one cached prompt token is worth. */
  kvAwareOverlapCredit: number;
  /** kv_aware's cost: tokens charged per request in flight on a backend past its prefill. */
  kvAwareRunningCost: number;
}

export const PROXY_DEFAULTS = {
  host: '127.0.0.1',
  policy: 'round_robin' as PolicyName,
  discoveryHost: '0.0.0.0',
  discoveryTtlMs: 10_000,
  healthIntervalMs: 2_000,
  healthTimeoutMs: 1_000,
  prefixChunkBytes: 64,
  prefixCacheEntries: 100_000,
  moriioDecrementMaxTokens: false,
  prefillFallback: true,
  prefillTimeoutMs: 60_000,
  maxRetries: 3,
  retryDeadlineMs: 30_000,
  streamResume: true,
  unhealthyIntervalMs: 250,
  kvEventsBlockSize: 16,
  kvEventsHashAlgo: 'sha256_cbor',
  kvAwareOverlapCredit: 1,
  kvAwareRunningCost: 4,
} as const;

/** What the proxy reads from a backend's GET /kvconnect/info (all optional but `connector`). */
export interface BackendInfo {
  connector: ConnectorKind | string;
  kv_role?: string;
  engine_id?: string;
  tp_size?: number;
  pp_size?: number;
  dp_size?: number;
  side_channel_host?: string;
  side_channel_port?: number;
  zmq_address?: string;
  transfer_mode?: string;
  /** Where the backend publishes KV cache events (kvconnect servers). */
  kv_events?: {
    endpoint: string;
    replay_endpoint?: string | null;
    topic?: string;
    block_size?: number;
    prefix_caching_hash_algo?: string;
  } | null;
}

/**
 * The MoRIIO discovery ping (docs/proxy.md#moriio-discovery-wire-format), sent as JSON
 * instead of msgpack-over-ZMQ.
 */
export interface DiscoveryPing {
  type: 'P' | 'D';
  http_address: string;
  zmq_address: string;
  dp_size: number;
  tp_size: number;
  transfer_mode: MoriioMode;
}
