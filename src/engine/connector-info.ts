/**
 * What an engine tells peers and proxies about its KV connector (served as GET
 * /kvconnect/info): the coordinates a NIXL push decode engine needs to register with this
 * prefill engine (engine id, side channel, parallel sizes). Connectors are duck-typed here
 * because the engine may not import connector implementations (docs/architecture.md#layers).
 */
import type { EngineConfig } from '../config/types.ts';
import type { KVConnectorBase } from '../connector/base.ts';

/** Wire shape (snake_case, as the proxy reads it). */
export interface KVConnectorInfo {
  /** The configured kv_connector name (e.g. NixlConnector, NixlPushConnector). */
  connector: string | null;
  /** The class that implements it (differs for kv_connector_module_path connectors). */
  connector_class: string;
  kv_role: string | null;
  engine_id: string;
  tp_size: number;
  pp_size: number;
  dp_size: number;
  dp_rank: number;
  /** Where peers reach the connector's side channel; null when it has none. */
  side_channel_host: string | null;
  side_channel_port: number | null;
  /** NIXL: 'pull' or 'push'; null for other connectors. */
  transfer_mode: string | null;
  /** Anything the connector adds through its own optional `kvConnectorInfo()`. */
  [key: string]: unknown;
}

/** Optional members a connector may expose for the info endpoint. */
interface AdvertisingConnector {
  readonly sideChannelAddress?: { host: string; port: number } | null;
  kvConnectorInfo?: () => Record<string, unknown> | null;
}

const NIXL_MODES: Readonly<Record<string, string>> = {
  NixlConnector: 'pull',
  NixlPullConnector: 'pull',
  NixlPushConnector: 'push',
};

export function describeConnector(
  config: EngineConfig,
  connector: KVConnectorBase | null,
): KVConnectorInfo | null {
  const kv = config.kvTransferConfig;
  if (!kv || !connector) return null;
  const advertising = connector as KVConnectorBase & AdvertisingConnector;
  const address = advertising.sideChannelAddress ?? null;
  const own = typeof advertising.kvConnectorInfo === 'function' ? advertising.kvConnectorInfo() : null;
  return {
    connector: kv.kv_connector,
    connector_class: connector.constructor.name,
    kv_role: kv.kv_role,
    engine_id: kv.engine_id,
    tp_size: config.parallel.tensorParallelSize,
    pp_size: 1,
    dp_size: config.parallel.dataParallelSize,
    dp_rank: config.parallel.dataParallelRank,
    side_channel_host: address?.host ?? null,
    side_channel_port: address?.port ?? null,
    transfer_mode: NIXL_MODES[kv.kv_connector ?? ''] ?? null,
    ...own,
  };
}
