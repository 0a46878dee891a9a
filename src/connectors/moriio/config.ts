/**
 * MoRIIO's `kv_connector_extra_config` (spec §5.2.3–5.2.4): parsed exactly as vLLM parses
 * it (Python `int()` / `float()` / `str().lower()` semantics), plus one port formula used
 * for every listener and every dial.
 */
import { networkInterfaces } from 'node:os';
import { CONFIG_INVALID, configError, didYouMean, pythonRepr, pythonStr } from '../../config/config-error.ts';
import type { EngineConfig } from '../../config/types.ts';
import { KVError } from '../../errors/kv-error.ts';
import { getLogger } from '../../logging/logger.ts';

const log = getLogger('kvconnect.connectors.moriio');

export const MORIIO_DEFAULT_HANDSHAKE_PORT = 6301;
export const MORIIO_DEFAULT_NOTIFY_PORT = 61005;
export const MORIIO_DEFAULT_TRANSFER_TIMEOUT_S = 30;
export const MORIIO_DEFAULT_DEFER_TIMEOUT_S = 60;
export const MORIIO_BACKENDS = ['rdma', 'xgmi'] as const;
export type MoRIIOBackend = (typeof MORIIO_BACKENDS)[number];

/** Deprecated environment variables and the extra-config key that replaced each. */
export const MORIIO_DEPRECATED_ENV: Readonly<Record<string, string>> = {
  VLLM_MORIIO_CONNECTOR_READ_MODE: 'read_mode',
  VLLM_MORIIO_QP_PER_TRANSFER: 'qp_per_transfer',
  VLLM_MORIIO_POST_BATCH_SIZE: 'post_batch_size',
  VLLM_MORIIO_NUM_WORKERS: 'num_workers',
};

const KNOWN_KEYS = [
  'http_port',
  'handshake_port',
  'notify_port',
  'proxy_ip',
  'proxy_ping_port',
  'read_mode',
  'backend',
  'qp_per_transfer',
  'post_batch_size',
  'num_workers',
  'transfer_timeout',
  'defer_timeout',
  'host_ip',
];

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
  /** `{host_ip}:{handshake_port}`; MoRIIO overrides kv_transfer_config.engine_id with it. */
  engineId: string;
  /** Data-parallel rank folded to this node (`global % dp_local`; the global rank when dp_local is 0). */
  dpRankLocal: number;
  tpSize: number;
}

/** The one port-offset formula (spec §5.2.4 fixes vLLM's stride inconsistency): `dp_local * tp_size + tp_rank`. */
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

/** Python `int(x)`: ints, floats (truncated) and integer strings (surrounding spaces allowed). */
function pyInt(
  extra: Record<string, unknown>,
  key: string,
  fallback: number | undefined,
  example: string,
): number {
  const v = extra[key];
  if (v === undefined && fallback !== undefined) return fallback;
  if (typeof v === 'number' && Number.isFinite(v)) return Math.trunc(v);
  if (typeof v === 'boolean') return v ? 1 : 0;
  if (typeof v === 'string' && /^\s*[+-]?\d+(_\d+)*\s*$/.test(v)) return Number(v.trim().replaceAll('_', ''));
  throw configError(`${FIELD}.${key}`, 'an integer', v, `Set "${key}": ${example} in ${FIELD}.`);
}

function pyFloat(extra: Record<string, unknown>, key: string, fallback: number): number {
  const v = extra[key];
  if (v === undefined) return fallback;
  const n =
    typeof v === 'number' ? v : typeof v === 'string' && v.trim() !== '' ? Number(v.trim()) : Number.NaN;
  if (!Number.isFinite(n) || n <= 0) {
    throw configError(
      `${FIELD}.${key}`,
      'a positive number of seconds',
      v,
      `Set "${key}": ${fallback} (seconds) in ${FIELD}.`,
    );
  }
  return n;
}

function checkPort(key: string, port: number): number {
  if (port < 1 || port > 65535) {
    throw configError(
      `${FIELD}.${key}`,
      'a TCP port in 1..65535',
      port,
      `Pick a free port, e.g. "${key}": 8000.`,
    );
  }
  return port;
}

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

/** `str(v).lower().strip() in ('true', '1')`. */
export function parseMoRIIOReadMode(value: unknown): boolean {
  const s = pythonStr(value === undefined ? 'false' : value)
    .toLowerCase()
    .trim();
  return s === 'true' || s === '1';
}

/** Warns once per variable that is set; their values are ignored. */
export function warnDeprecatedMoRIIOEnv(env: NodeJS.ProcessEnv = process.env): string[] {
  const found = Object.keys(MORIIO_DEPRECATED_ENV).filter((name) => env[name] !== undefined);
  for (const name of found) {
    log.warnOnce(
      'The environment variable %s is deprecated and ignored. Set %s inside kv_transfer_config.kv_connector_extra_config instead.',
      name,
      pythonRepr(MORIIO_DEPRECATED_ENV[name]!),
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

/** Parses and validates MoRIIO's extra config for an engine (spec §5.2.3). */
export function parseMoRIIOConfig(extra: Record<string, unknown>, engineConfig: EngineConfig): MoRIIOConfig {
  warnDeprecatedMoRIIOEnv();
  for (const key of Object.keys(extra)) {
    if (!KNOWN_KEYS.includes(key)) {
      const suggestion = didYouMean(key, KNOWN_KEYS);
      log.warnOnce(
        'Ignoring unknown MoRIIO option %s in kv_connector_extra_config%s',
        pythonRepr(key),
        suggestion ? ` (${suggestion})` : '',
      );
    }
  }
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
  const httpPort = checkPort('http_port', pyInt(extra, 'http_port', undefined, '8000'));
  // vLLM fills these in when missing or falsy (0, "", null).
  const handshakePort = checkPort(
    'handshake_port',
    extra['handshake_port']
      ? pyInt(extra, 'handshake_port', undefined, '6301')
      : MORIIO_DEFAULT_HANDSHAKE_PORT,
  );
  const notifyPort = checkPort(
    'notify_port',
    extra['notify_port'] ? pyInt(extra, 'notify_port', undefined, '61005') : MORIIO_DEFAULT_NOTIFY_PORT,
  );
  const { parallel } = engineConfig;
  const dpRankLocal = foldLocalRank(parallel.dataParallelRank, parallel.dataParallelSizeLocal);
  const tpSize = parallel.tensorParallelSize;
  for (const [key, base] of [
    ['handshake_port', handshakePort],
    ['notify_port', notifyPort],
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
  const proxyIp = extra['proxy_ip'] === undefined ? '' : pythonStr(extra['proxy_ip']);
  const hostIp =
    extra['host_ip'] === undefined || extra['host_ip'] === '' ? defaultHostIp() : pythonStr(extra['host_ip']);
  return {
    httpPort,
    handshakePort,
    notifyPort,
    proxyIp,
    proxyPingPort: pyInt(extra, 'proxy_ping_port', 0, '36367'),
    readMode: parseMoRIIOReadMode(extra['read_mode']),
    backend,
    qpPerTransfer: pyInt(extra, 'qp_per_transfer', 1, '1'),
    postBatchSize: pyInt(extra, 'post_batch_size', -1, '-1'),
    numWorkers: pyInt(extra, 'num_workers', 1, '1'),
    transferTimeoutS: pyFloat(extra, 'transfer_timeout', MORIIO_DEFAULT_TRANSFER_TIMEOUT_S),
    deferTimeoutS: pyFloat(extra, 'defer_timeout', MORIIO_DEFAULT_DEFER_TIMEOUT_S),
    hostIp,
    engineId: `${hostIp}:${handshakePort}`,
    dpRankLocal,
    tpSize,
  };
}
