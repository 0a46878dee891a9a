/**
 * GET /kvconnect/info (src/wire/kvconnect-info.ts): which connector this backend runs, so a
 * proxy can pick the P/D flow without being told, and the coordinates its peers need. The
 * engine's configuration gives the identity; the connector adds what it advertises.
 */
import { emulationInfo } from '../config/emulation-config.ts';
import type { AsyncEngineLike } from '../engine/api.ts';
import { formatKVConnectorInfo, type KVConnectorInfo } from '../wire/index.ts';

export function backendInfo(engine: AsyncEngineLike, servedModelName: string): KVConnectorInfo {
  const kv = engine.config.kvTransferConfig;
  const parallel = engine.config.parallel;
  const connector = engine.kvConnectorDescription?.() ?? null;
  const info = formatKVConnectorInfo(
    {
      kvConnector: kv?.kv_connector ?? null,
      connectorClass: connector?.connectorClass ?? null,
      kvRole: kv?.kv_role ?? null,
      engineId: kv?.engine_id ?? null,
      servedModelName,
      tpSize: parallel.tensorParallelSize,
      dpSize: parallel.dataParallelSize,
      dpRank: parallel.dataParallelRank,
      kvEvents: engine.kvEventsInfo?.() ?? null,
    },
    connector?.advertised ?? null,
  );
  // Emulated deployments (docs/emulation.md): the model of time, tokens and KV size.
  return { ...info, emulation: emulationInfo(engine.config.emulation) };
}
