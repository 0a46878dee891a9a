/**
 * The shapes two kvconnect processes must agree on, each defined once and imported by both
 * sides (connectors, server, engine, proxy): kv_transfer_params of the P/D protocols,
 * GET /kvconnect/info, MoRIIO's discovery ping, addresses and request ids. A leaf layer:
 * it imports only errors/ (and msgpack for the ping).
 */

export {
  invalidKvTransferParam,
  type KVTransferParams,
} from './kv-transfer-params.ts';
export {
  type BackendInfo,
  CONNECTOR_INFO_PATH,
  type ConnectorAdvertisement,
  type EngineIdentity,
  formatKVConnectorInfo,
  isPdConnector,
  type KVConnectorInfo,
  type KVEventsInfo,
  PD_CONNECTORS,
  type PdConnector,
  parseKVConnectorInfo,
} from './kvconnect-info.ts';
export {
  formatMoRIIORequestId,
  formatMoRIIOZmqAddress,
  isMoRIIOZmqAddress,
  MORIIO_DEFAULT_HANDSHAKE_PORT,
  MORIIO_DEFAULT_NOTIFY_PORT,
  type MoRIIOZmqAddress,
  parseMoRIIORequestId,
  parseMoRIIOZmqAddress,
} from './moriio-address.ts';
export {
  decodeDiscoveryPing,
  encodeDiscoveryPing,
  formatDiscoveryPing,
  MORIIO_PING_INTERVAL_MS,
  type MoRIIODiscoveryPing,
  type MoRIIOInstance,
  type MoRIIOTransferMode,
  parseDiscoveryPing,
} from './moriio-discovery.ts';
export {
  type MoRIIOPeerLayout,
  type MoRIIOPrefillPeer,
  moriioDecodeParams,
  moriioPrefillParams,
  moriioPrefillResult,
  newMoRIIOTransferId,
  readMoRIIOPrefillPeer,
} from './moriio-params.ts';
export {
  NIXL_PREFILL_REQUEST,
  type NixlRemoteEngine,
  type NixlRemotePrefillParams,
  nixlDecodeCacheResult,
  nixlPrefillResult,
  nixlPushDecodeParams,
  readBlocksExpiryTime,
  readNixlRemote,
  readRemoteNumTokens,
} from './nixl-params.ts';
export {
  formatP2PFrame,
  P2P_MAX_FRAME_BYTES,
  type P2PConnectMsg,
  P2PFrameReader,
  type P2PMessage,
  parseP2PMessage,
} from './p2p-messages.ts';
export {
  formatP2PParams,
  invalidP2PParams,
  P2P_ROLE_KEYS,
  type P2PParamError,
  type P2PRoleKey,
  type P2PRoles,
  type P2PSource,
  readP2PRoles,
} from './p2p-params.ts';
export {
  formatParamsAhead,
  PARAMS_AHEAD_HEADER,
  PARAMS_AHEAD_HINT,
  paramsAheadOf,
  wantsParamsAhead,
} from './params-ahead.ts';
export { isRecord } from './values.ts';
