/**
 * GET /kvconnect/info: which connector this backend runs, so a proxy can pick the P/D flow
 * without being told. Side-channel coordinates come from the engine when it advertises them.
 */
import type { AsyncEngineLike } from '../engine/api.ts';

/** Optional engine method: connector coordinates a peer needs (e.g. NIXL side channel). */
export interface ConnectorInfoSource {
  kvConnectorInfo?: () => Record<string, unknown> | null;
}

export interface BackendInfo {
  engine_id: string | null;
  kv_connector: string | null;
  kv_role: string | null;
  served_model_name: string;
  tensor_parallel_size: number;
  data_parallel_rank: number;
  side_channel_host: string | null;
  side_channel_port: number | null;
  [key: string]: unknown;
}

export function backendInfo(engine: AsyncEngineLike, servedModelName: string): BackendInfo {
  const kv = engine.config.kvTransferConfig;
  const extra = (engine as AsyncEngineLike & ConnectorInfoSource).kvConnectorInfo?.() ?? {};
  const host = extra['side_channel_host'];
  const port = extra['side_channel_port'];
  return {
    ...extra,
    engine_id: kv?.engine_id ?? null,
    kv_connector: kv?.kv_connector ?? null,
    kv_role: kv?.kv_role ?? null,
    served_model_name: servedModelName,
    tensor_parallel_size: engine.config.parallel.tensorParallelSize,
    data_parallel_rank: engine.config.parallel.dataParallelRank,
    side_channel_host: typeof host === 'string' ? host : null,
    side_channel_port: typeof port === 'number' ? port : null,
  };
}
