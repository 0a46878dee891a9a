/**
 * Shapes shared by the proxy's files. What crosses to the backends (kv_transfer_params,
 * discovery pings, /kvconnect/info) is defined in src/wire/.
 */
import type { MoRIIOTransferMode, PdConnector } from '../wire/index.ts';

export const POLICY_NAMES = ['round_robin', 'least_loaded', 'prefix_aware', 'kv_aware'] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];

export type BackendRole = 'prefill' | 'decode';

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
  kvConnector?: PdConnector;
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
  /** OffloadingConnector: the p2p base port of the prefill engines (llm-d's --p2p-connector-port); else from /kvconnect/info. */
  p2pConnectorPort?: number;
  /** Forces MoRIIO READ or WRITE; otherwise from discovery pings or backend info (default WRITE). */
  moriioMode?: MoRIIOTransferMode;
  /** vLLM's MoRIIO toy proxy sends D `max_tokens - 1`; off by default (token-identical outputs). */
  moriioDecrementMaxTokens: boolean;
  /** No healthy prefill instance, or the prefill leg failed: serve the request on a decode instance alone. */
  prefillFallback: boolean;
  /**
   * NIXL pull: ask P for its kv_transfer_params ahead (a 103 before its prefill runs) and send
   * D then, during P's prefill (docs/proxy.md#params-ahead); a P that does not answer so is
   * waited for as without it.
   */
  paramsAhead: boolean;
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
  paramsAhead: true,
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
