/**
 * GET /kvconnect/info (docs/serve.md#endpoints, docs/proxy.md#which-flow-get-kvconnectinfo):
 * which connector a kvconnect server runs and where its peers reach it, so a proxy picks the
 * P/D flow and the push coordinates without being told. The server builds it from its engine
 * and what the connector advertises; the proxy reads it back.
 */
import { isMoRIIOZmqAddress } from './moriio-address.ts';
import { isRecord } from './values.ts';

export const CONNECTOR_INFO_PATH = '/kvconnect/info';

/** The P/D protocols a proxy drives (docs/proxy.md#flows-and-their-exact-parameters). */
export const PD_CONNECTORS = [
  'NixlConnector',
  'NixlPushConnector',
  'MoRIIOConnector',
  'OffloadingConnector',
] as const;
export type PdConnector = (typeof PD_CONNECTORS)[number];

export function isPdConnector(name: unknown): name is PdConnector {
  return (PD_CONNECTORS as readonly unknown[]).includes(name);
}

/** Where an engine publishes KV cache events (docs/kv-events.md). */
export interface KVEventsInfo {
  endpoint: string;
  replay_endpoint: string | null;
  topic: string;
  block_size: number;
  prefix_caching_hash_algo: string;
}

/**
 * What a connector adds to GET /kvconnect/info (KVConnectorBase.advertise()). A MultiConnector
 * advertises the union of its children's (the first child to name a key wins).
 */
export interface ConnectorAdvertisement {
  /** The P/D protocol a proxy drives for this engine (one of PD_CONNECTORS for kvconnect's proxy). */
  connector?: string;
  /** An identity of the connector's own (MoRIIO: host_ip:handshake_port); replaces kv_transfer_config.engine_id. */
  engine_id?: string;
  /** Where peers reach the connector's side channel. */
  side_channel_host?: string;
  side_channel_port?: number;
  /** NIXL: pull or push; MoRIIO: READ or WRITE. */
  transfer_mode?: string;
  pp_size?: number;
  /** Anything else peers or proxies need (MoRIIO: zmq_address, http_address, backend). */
  [key: string]: unknown;
}

/** The engine's side of the answer, from its configuration. */
export interface EngineIdentity {
  /** The configured kv_connector; null without one. */
  kvConnector: string | null;
  /** The class that implements it (differs for kv_connector_module_path connectors). */
  connectorClass: string | null;
  kvRole: string | null;
  engineId: string | null;
  servedModelName: string;
  tpSize: number;
  dpSize: number;
  dpRank: number;
  kvEvents: KVEventsInfo | null;
}

/** The body of GET /kvconnect/info: vLLM-style names (kv_connector, tensor_parallel_size) beside the proxy's. */
export type KVConnectorInfo = {
  /** The proxy's key: the P/D protocol the connector advertises, else the configured kv_connector. */
  connector: string | null;
  connector_class: string | null;
  kv_connector: string | null;
  kv_role: string | null;
  engine_id: string | null;
  served_model_name: string;
  tensor_parallel_size: number;
  data_parallel_rank: number;
  tp_size: number;
  pp_size: number;
  dp_size: number;
  dp_rank: number;
  side_channel_host: string | null;
  side_channel_port: number | null;
  transfer_mode: string | null;
  kv_events: KVEventsInfo | null;
  [key: string]: unknown;
};

/** The answer: the advertisement's keys, then the engine's (which the connector cannot override). */
export function formatKVConnectorInfo(
  engine: EngineIdentity,
  advertised: ConnectorAdvertisement | null,
): KVConnectorInfo {
  const a = advertised ?? {};
  return {
    ...a,
    connector: typeof a.connector === 'string' ? a.connector : engine.kvConnector,
    connector_class: engine.connectorClass,
    kv_connector: engine.kvConnector,
    kv_role: engine.kvRole,
    engine_id: typeof a.engine_id === 'string' ? a.engine_id : engine.engineId,
    served_model_name: engine.servedModelName,
    tensor_parallel_size: engine.tpSize,
    data_parallel_rank: engine.dpRank,
    tp_size: engine.tpSize,
    pp_size: typeof a.pp_size === 'number' ? a.pp_size : 1,
    dp_size: engine.dpSize,
    dp_rank: engine.dpRank,
    side_channel_host: typeof a.side_channel_host === 'string' ? a.side_channel_host : null,
    side_channel_port: typeof a.side_channel_port === 'number' ? a.side_channel_port : null,
    transfer_mode: typeof a.transfer_mode === 'string' ? a.transfer_mode : null,
    kv_events: engine.kvEvents,
  };
}

/** What a proxy reads of a backend's answer: every key but `connector` optional. */
export interface BackendInfo {
  /** null: a kvconnect server without a KV connector. */
  connector: string | null;
  kv_role?: string;
  engine_id?: string;
  /** The base model's served name (a request naming another model names a LoRA adapter). */
  served_model_name?: string;
  tp_size?: number;
  pp_size?: number;
  dp_size?: number;
  side_channel_host?: string;
  side_channel_port?: number;
  /** A valid MoRIIO zmq address (./moriio-address.ts). */
  zmq_address?: string;
  transfer_mode?: string;
  /** OffloadingConnector: the p2p tier's control host and ports (docs/connectors/offloading.md#p2p). */
  p2p_host?: string;
  p2p_port?: number;
  p2p_base_port?: number;
  kv_events?: (Pick<KVEventsInfo, 'endpoint'> & Partial<KVEventsInfo>) | null;
}

const STRING_KEYS = [
  'kv_role',
  'engine_id',
  'served_model_name',
  'side_channel_host',
  'transfer_mode',
  'p2p_host',
] as const;
const POSITIVE_KEYS = [
  'tp_size',
  'pp_size',
  'dp_size',
  'side_channel_port',
  'p2p_port',
  'p2p_base_port',
] as const;

/**
 * Reads an answer of GET /kvconnect/info: null unless it is an object whose `connector` is a
 * string or null. A key of the wrong type is left out (the proxy then uses its default or flag).
 */
export function parseKVConnectorInfo(raw: unknown): BackendInfo | null {
  if (!isRecord(raw)) return null;
  const connector = raw['connector'];
  if (typeof connector !== 'string' && connector !== null) return null;
  const info: BackendInfo = { connector };
  for (const key of STRING_KEYS) {
    const v = raw[key];
    if (typeof v === 'string') info[key] = v;
  }
  for (const key of POSITIVE_KEYS) {
    const v = raw[key];
    if (typeof v === 'number' && Number.isInteger(v) && v > 0) info[key] = v;
  }
  const zmq = raw['zmq_address'];
  if (typeof zmq === 'string' && isMoRIIOZmqAddress(zmq)) info.zmq_address = zmq;
  const events = raw['kv_events'];
  if (events === null) info.kv_events = null;
  else if (isRecord(events) && typeof events['endpoint'] === 'string') {
    const e: NonNullable<BackendInfo['kv_events']> = { endpoint: events['endpoint'] };
    const replay = events['replay_endpoint'];
    if (typeof replay === 'string' || replay === null) e.replay_endpoint = replay;
    if (typeof events['topic'] === 'string') e.topic = events['topic'];
    const blockSize = events['block_size'];
    if (typeof blockSize === 'number' && Number.isInteger(blockSize) && blockSize > 0)
      e.block_size = blockSize;
    const algo = events['prefix_caching_hash_algo'];
    if (typeof algo === 'string') e.prefix_caching_hash_algo = algo;
    info.kv_events = e;
  }
  return info;
}
