/**
 * GET /kvconnect/info: which connector this backend runs, so a proxy can pick the P/D flow
 * without being told, and the coordinates a NIXL push decode engine needs (engine id, side
 * channel, parallel sizes). The engine supplies them through its optional kvConnectorInfo();
 * the vLLM-style names (kv_connector, tensor_parallel_size, ...) are kept alongside the
 * proxy's (connector, tp_size, ...).
 */
import { emulationInfo } from '../config/emulation-config.ts';
import type { AsyncEngineLike } from '../engine/api.ts';

/** Kept for importers of the earlier name: the engine's optional info method. */
export type ConnectorInfoSource = Pick<AsyncEngineLike, 'kvConnectorInfo'>;

export interface BackendInfo {
  /** The proxy's key: the configured kv_connector, null without one. */
  connector: string | null;
  engine_id: string | null;
  kv_connector: string | null;
  kv_role: string | null;
  served_model_name: string;
  tensor_parallel_size: number;
  data_parallel_rank: number;
  tp_size: number;
  pp_size: number;
  dp_size: number;
  side_channel_host: string | null;
  side_channel_port: number | null;
  transfer_mode: string | null;
  [key: string]: unknown;
}

export function backendInfo(engine: AsyncEngineLike, servedModelName: string): BackendInfo {
  const kv = engine.config.kvTransferConfig;
  const parallel = engine.config.parallel;
  const extra: Record<string, unknown> = engine.kvConnectorInfo?.() ?? {};
  const host = extra['side_channel_host'];
  const port = extra['side_channel_port'];
  const mode = extra['transfer_mode'];
  // A connector may define its own identity (MoRIIO: host_ip:handshake_port) — it wins.
  const engineId = typeof extra['engine_id'] === 'string' ? extra['engine_id'] : (kv?.engine_id ?? null);
  return {
    ...extra,
    connector: kv?.kv_connector ?? null,
    engine_id: engineId,
    kv_connector: kv?.kv_connector ?? null,
    kv_role: kv?.kv_role ?? null,
    served_model_name: servedModelName,
    tensor_parallel_size: parallel.tensorParallelSize,
    data_parallel_rank: parallel.dataParallelRank,
    tp_size: parallel.tensorParallelSize,
    pp_size: typeof extra['pp_size'] === 'number' ? extra['pp_size'] : 1,
    dp_size: parallel.dataParallelSize,
    side_channel_host: typeof host === 'string' ? host : null,
    side_channel_port: typeof port === 'number' ? port : null,
    transfer_mode: typeof mode === 'string' ? mode : null,
    kv_events: engine.kvEventsInfo?.() ?? null,
    // Emulated deployments (docs/emulation.md): the model of time, tokens and KV size.
    emulation: emulationInfo(engine.config.emulation),
  };
}
