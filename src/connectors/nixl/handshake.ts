/**
 * Wire types of the NIXL connectors: the handshake payload the side channel serves, the
 * compatibility hash over the factors that exist in kvconnect
 * (docs/connectors/nixl.md#handshake-and-compatibility-hash), and the connector version (7:
 * transfer mode is part of the hash).
 */
import { createHash } from 'node:crypto';
import { resolveModelInfo } from '../../config/model-info.ts';
import type { EngineConfig } from '../../config/types.ts';
import { KVError } from '../../errors/kv-error.ts';
import type { KVCacheConfig } from '../../kv/interfaces.ts';
import type { AgentMetadata } from '../../transfer/index.ts';

export const NIXL_CONNECTOR_VERSION = 7;
export const KVCONNECT_VERSION = '0.1.0';

export type TransferMode = 'pull' | 'push';

/** What one worker (tp rank) publishes and the side channel serves. */
export interface NixlAgentMetadata {
  readonly engine_id: string;
  readonly tp_rank: number;
  readonly tp_size: number;
  readonly block_size: number;
  readonly num_blocks: number;
  readonly block_lens: readonly number[];
  readonly kv_cache_layout: 'NHD';
  readonly agent: AgentMetadata;
}

export interface NixlHandshakePayload {
  readonly compatibility_hash: string;
  readonly connector_version: number;
  readonly agent_metadata: NixlAgentMetadata;
}

export function compatibilityFactors(
  engineConfig: EngineConfig,
  kvCacheConfig: KVCacheConfig,
  mode: TransferMode,
): Record<string, unknown> {
  const hf = safeHfConfig(engineConfig.model.model);
  const spec = kvCacheConfig.groups[0]?.spec;
  return {
    kvconnect_version: KVCONNECT_VERSION,
    nixl_connector_version: NIXL_CONNECTOR_VERSION,
    model: engineConfig.model.model,
    dtype: spec?.dtype ?? engineConfig.cache.cacheDtype,
    num_kv_heads: hf?.num_key_value_heads ?? spec?.numKvHeads ?? null,
    head_size: hf?.head_dim ?? spec?.headSize ?? null,
    num_hidden_layers: hf?.num_hidden_layers ?? null,
    cache_dtype: engineConfig.cache.cacheDtype,
    is_hma_enabled: kvCacheConfig.groups.length > 1,
    transfer_mode: mode,
  };
}

function safeHfConfig(model: string) {
  try {
    return resolveModelInfo(model).hfConfig;
  } catch {
    return null;
  }
}

/** SHA-256 over the sorted factors (the same inputs give the same hash on every host). */
export function computeCompatibilityHash(factors: Record<string, unknown>): string {
  const sorted = Object.fromEntries(
    Object.keys(factors)
      .sort()
      .map((k) => [k, factors[k]]),
  );
  return createHash('sha256').update(JSON.stringify(sorted)).digest('hex');
}

/** Two-phase decode: the envelope first, so a schema change fails with a clear message. */
export function decodeHandshakePayload(raw: unknown): NixlHandshakePayload {
  const p = raw as Partial<NixlHandshakePayload> | null;
  if (typeof p !== 'object' || p === null || typeof p.compatibility_hash !== 'string') {
    throw new KVError(
      'NIXL_HANDSHAKE_DECODE_FAILED',
      `Failed to decode NixlHandshakePayload. This likely indicates an incompatibility between connector version. Error: ${describe(raw)}`,
      {
        hint: 'Run the same kvconnect version on prefill and decode engines, and check remote_host/remote_port.',
      },
    );
  }
  return p as NixlHandshakePayload;
}

export function decodeAgentMetadata(payload: NixlHandshakePayload): NixlAgentMetadata {
  const m = payload.agent_metadata as Partial<NixlAgentMetadata> | undefined;
  if (
    typeof m !== 'object' ||
    m === null ||
    typeof m.engine_id !== 'string' ||
    typeof m.agent !== 'object' ||
    !Array.isArray(m.block_lens)
  ) {
    throw new KVError(
      'NIXL_AGENT_METADATA_DECODE_FAILED',
      `Failed to decode NixlAgentMetadata. Error: ${describe(m)}`,
      {
        hint: 'Run the same kvconnect version on prefill and decode engines.',
      },
    );
  }
  return m as NixlAgentMetadata;
}

export function engineIdMismatch(expected: string, actual: string): KVError {
  return new KVError(
    'NIXL_ENGINE_ID_MISMATCH',
    `Remote NIXL agent engine ID mismatch. Expected ${expected},received ${actual}.`,
    {
      hint: 'remote_host/remote_port reached another engine: set VLLM_NIXL_SIDE_CHANNEL_HOST (or side_channel_host) to the routable address of the prefill host and give each engine its own side-channel port.',
      details: { expected, actual },
    },
  );
}

function describe(v: unknown): string {
  try {
    return `unexpected value ${JSON.stringify(v)?.slice(0, 200) ?? String(v)}`;
  } catch {
    return `unexpected value of type ${typeof v}`;
  }
}
