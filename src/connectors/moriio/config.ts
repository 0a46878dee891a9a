/**
 * MoRIIO's `kv_connector_extra_config`
 * (docs/connectors/moriio.md#options-kv_connector_extra_config): vLLM's keys and defaults,
 * read by the one extra-config reader (`backend` keeps vLLM's exact check and message), plus
 * one port formula used for every listener and every dial.
 */
import { networkInterfaces } from 'node:os';
import { CONFIG_INVALID, pythonStr } from '../../config/config-error.ts';
import { type ExtraConfigSchema, readExtraConfig } from '../../config/extra-config.ts';
import type { EngineConfig } from '../../config/types.ts';
import { pythonRepr } from '../../errors/index.ts';
import { KVError } from '../../errors/kv-error.ts';
import { getLogger } from '../../logging/logger.ts';
import { MAX_BUSY_POLL_US } from '../../transfer/index.ts';
import { type Environment, type EnvName, readEnv } from '../../util/envs.ts';
import { MORIIO_DEFAULT_HANDSHAKE_PORT, MORIIO_DEFAULT_NOTIFY_PORT } from '../../wire/index.ts';

const log = getLogger('kvconnect.connectors.moriio.config');

export const MORIIO_DEFAULT_TRANSFER_TIMEOUT_S = 30;
export const MORIIO_DEFAULT_DEFER_TIMEOUT_S = 60;
export const MORIIO_BACKENDS = ['rdma', 'xgmi'] as const;
export type MoRIIOBackend = (typeof MORIIO_BACKENDS)[number];

/** Deprecated environment variables and the extra-config key that replaced each. */
const MORIIO_DEPRECATED_ENV = {
  VLLM_MORIIO_CONNECTOR_READ_MODE: 'read_mode',
  VLLM_MORIIO_QP_PER_TRANSFER: 'qp_per_transfer',
  VLLM_MORIIO_POST_BATCH_SIZE: 'post_batch_size',
  VLLM_MORIIO_NUM_WORKERS: 'num_workers',
} as const satisfies Partial<Record<EnvName, string>>;

/** MoRIIO's keys (docs/configuration.md), read by the one extra-config reader. */
export const MORIIO_EXTRA_CONFIG = {
  connector: 'MoRIIOConnector',
  fields: {
    http_port: { type: 'integer', min: 1, max: 65535 },
    // vLLM fills the two base ports in when missing or falsy (0, "").
    handshake_port: {
      type: 'integer',
      default: MORIIO_DEFAULT_HANDSHAKE_PORT,
      min: 1,
      max: 65535,
      falsyIsDefault: true,
    },
    notify_port: {
      type: 'integer',
      default: MORIIO_DEFAULT_NOTIFY_PORT,
      min: 1,
      max: 65535,
      falsyIsDefault: true,
    },
    proxy_ip: { type: 'string', default: '' },
    proxy_ping_port: { type: 'integer', default: 0, min: 0, max: 65535 },
    read_mode: { type: 'boolean', default: false },
    backend: { type: 'custom' },
    qp_per_transfer: { type: 'integer', default: 1 },
    post_batch_size: { type: 'integer', default: -1 },
    num_workers: { type: 'integer', default: 1 },
    transfer_timeout: { type: 'number', default: MORIIO_DEFAULT_TRANSFER_TIMEOUT_S, min: 0, aboveMin: true },
    defer_timeout: { type: 'number', default: MORIIO_DEFAULT_DEFER_TIMEOUT_S, min: 0, aboveMin: true },
    host_ip: { type: 'string' },
    transfer_thread: { type: 'boolean', default: true },
    busy_poll_us: { type: 'integer', min: 0, max: MAX_BUSY_POLL_US },
  },
} as const satisfies ExtraConfigSchema;

export interface MoRIIOConfig {
  httpPort: number;
  handshakePort: number;
  notifyPort: number;
  proxyIp: string;
  proxyPingPort: number;
  readMode: boolean;
  backend: MoRIIOBackend;
  qpPerTransfer: number;
  postBatchSize: number;
  numWorkers: number;
  transferTimeoutS: number;
  deferTimeoutS: number;
  hostIp: string;
  /** kvconnect: host the transfer agent in a worker thread (as NixlConnector's `transfer_thread`). */
  transferThread: boolean;
  /** kvconnect: µs the agent's loop polls after transfer activity (undefined = KVCONNECT_BUSY_POLL_US, else the agent's default). */
  busyPollUs: number | undefined;
  /** `{host_ip}:{handshake_port}`; MoRIIO overrides kv_transfer_config.engine_id with it. */
  engineId: string;
  /** Data-parallel rank folded to this node (`global % dp_local`; the global rank when dp_local is 0). */
  dpRankLocal: number;
  tpSize: number;
}

/**
 * The one port-offset formula (docs/connectors/moriio.md#ports: it fixes vLLM's stride
 * inconsistency): `dp_local * tp_size + tp_rank`.
 */
export function moriioPortOffset(dpRankLocal: number, tpSize: number, tpRank: number): number {
  return dpRankLocal * tpSize + tpRank;
}

/** `base + dp_local * tp_size + tp_rank`: a worker's listener port, and the port a peer dials. */
export function moriioPort(base: number, dpRankLocal: number, tpSize: number, tpRank: number): number {
  return base + moriioPortOffset(dpRankLocal, tpSize, tpRank);
}

export function foldLocalRank(globalRank: number, dpSizeLocal: number): number {
  return dpSizeLocal === 0 ? globalRank : globalRank % dpSizeLocal;
}

const FIELD = 'kv_connector_extra_config';

/** The backend exactly as vLLM checks it: `str(v).lower()`, no trimming. */
export function parseMoRIIOBackend(value: unknown): MoRIIOBackend {
  const backend = pythonStr(value === undefined ? 'rdma' : value).toLowerCase();
  if ((MORIIO_BACKENDS as readonly string[]).includes(backend)) return backend as MoRIIOBackend;
  throw new KVError(
    'KV_MORIIO_BACKEND_INVALID',
    `Invalid MoRIIO backend ${pythonRepr(backend)} in kv_connector_extra_config; must be one of 'rdma' or 'xgmi'.`,
    {
      field: `${FIELD}.backend`,
      hint: `Use "backend": "rdma" between nodes or "backend": "xgmi" within one node, or remove the key (default rdma). Case is ignored but spaces are not${backend.trim() !== backend ? ' (this value has leading/trailing whitespace)' : ''}.`,
      details: { expected: MORIIO_BACKENDS, received: backend },
    },
  );
}

/** Warns once per variable that is set; their values are ignored. */
export function warnDeprecatedMoRIIOEnv(env?: Environment): string[] {
  const names = Object.keys(MORIIO_DEPRECATED_ENV) as (keyof typeof MORIIO_DEPRECATED_ENV)[];
  const found = names.filter((name) => readEnv(name, env) !== undefined);
  for (const name of found) {
    log.warnOnce(
      'The environment variable %s is deprecated and ignored. Set %s inside kv_transfer_config.kv_connector_extra_config instead.',
      name,
      pythonRepr(MORIIO_DEPRECATED_ENV[name]),
    );
  }
  return found;
}

function defaultHostIp(): string {
  for (const addrs of Object.values(networkInterfaces())) {
    for (const a of addrs ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return '127.0.0.1';
}

/**
 * Parses and validates MoRIIO's extra config for an engine
 * (docs/connectors/moriio.md#options-kv_connector_extra_config).
 */
export function parseMoRIIOConfig(extra: Record<string, unknown>, engineConfig: EngineConfig): MoRIIOConfig {
  warnDeprecatedMoRIIOEnv();
  if (extra['http_port'] === undefined) {
    throw new KVError(
      'KV_MORIIO_HTTP_PORT_REQUIRED',
      'kv_connector_extra_config.http_port is required for MoRIIOConnector',
      {
        field: `${FIELD}.http_port`,
        hint: `MoRIIO advertises this instance's HTTP port to the proxy. Add it, e.g. --kv-transfer-config '{"kv_connector":"MoRIIOConnector","kv_role":"kv_producer","kv_connector_extra_config":{"http_port":8000}}' (the same port the server listens on).`,
        details: { expected: 'an integer port', received: 'nothing' },
      },
    );
  }
  const backend = parseMoRIIOBackend(extra['backend']);
  const v = readExtraConfig(MORIIO_EXTRA_CONFIG, extra);
  const { parallel } = engineConfig;
  const dpRankLocal = foldLocalRank(parallel.dataParallelRank, parallel.dataParallelSizeLocal);
  const tpSize = parallel.tensorParallelSize;
  for (const [key, base] of [
    ['handshake_port', v.handshake_port],
    ['notify_port', v.notify_port],
  ] as const) {
    const highest = moriioPort(
      base,
      Math.max(dpRankLocal, parallel.dataParallelSizeLocal - 1),
      tpSize,
      tpSize - 1,
    );
    if (highest > 65535) {
      throw new KVError(
        CONFIG_INVALID,
        `MoRIIO ${key} ${base} plus the per-worker offset exceeds 65535 (highest port ${highest})`,
        {
          field: `${FIELD}.${key}`,
          hint: `Each worker listens on ${key} + dp_local * tp_size + tp_rank; choose a lower ${key}.`,
        },
      );
    }
  }
  const hostIp = v.host_ip === undefined || v.host_ip === '' ? defaultHostIp() : v.host_ip;
  return {
    httpPort: v.http_port!,
    handshakePort: v.handshake_port,
    notifyPort: v.notify_port,
    proxyIp: v.proxy_ip,
    proxyPingPort: v.proxy_ping_port,
    readMode: v.read_mode,
    backend,
    qpPerTransfer: v.qp_per_transfer,
    postBatchSize: v.post_batch_size,
    numWorkers: v.num_workers,
    transferTimeoutS: v.transfer_timeout,
    deferTimeoutS: v.defer_timeout,
    hostIp,
    transferThread: v.transfer_thread,
    busyPollUs: v.busy_poll_us,
    engineId: `${hostIp}:${v.handshake_port}`,
    dpRankLocal,
    tpSize,
  };
}
