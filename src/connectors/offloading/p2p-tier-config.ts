/**
 * The `p2p` secondary tier's keys, as vLLM's P2P tier reads them: `host`, `port` (defaults
 * from VLLM_P2P_SIDE_CHANNEL_HOST / VLLM_P2P_SIDE_CHANNEL_PORT, the port offset by the
 * data-parallel rank), `backends`, `num_threads`, `unbound_store_timeout_s`; plus kvconnect's
 * `timeout_ms` (the consumer's bound on one fetch) and every tier's `enable_kv_events` /
 * `locality`. Unknown keys are refused (vLLM swallows them).
 */
import { configError } from '../../config/config-error.ts';
import { parseExtraNumber } from '../../config/extra-config.ts';
import { KNOWN_BACKENDS } from '../../transfer/index.ts';
import { type Environment, readEnv } from '../../util/envs.ts';
import { parseCount, parseTimeoutMs } from './tier-fields.ts';

export const DEFAULT_P2P_HOST = 'localhost';
export const DEFAULT_P2P_PORT = 5710;
export const DEFAULT_P2P_NUM_THREADS = 4;
export const DEFAULT_UNBOUND_STORE_TIMEOUT_S = 60;
/** vLLM's consumer waits 30 s for a fetch before it aborts it. */
export const DEFAULT_P2P_FETCH_TIMEOUT_MS = 30_000;

export interface P2PTierSpec {
  type: 'p2p';
  /** null: VLLM_P2P_SIDE_CHANNEL_HOST, else localhost. */
  host: string | null;
  /** Base port; null: VLLM_P2P_SIDE_CHANNEL_PORT, else 5710. */
  port: number | null;
  backends: string[];
  numThreads: number;
  unboundStoreTimeoutS: number;
  timeoutMs: number;
}

const P2P_KEYS = [
  'type',
  'host',
  'port',
  'backends',
  'num_threads',
  'unbound_store_timeout_s',
  'timeout_ms',
  'enable_kv_events',
  'locality',
];

export function parseP2PTier(tier: Record<string, unknown>, where: string): P2PTierSpec {
  for (const key of Object.keys(tier)) {
    if (!P2P_KEYS.includes(key)) {
      throw configError(
        `${where}.${key}`,
        `one of the p2p tier's keys (${P2P_KEYS.join(', ')})`,
        tier[key],
        'Remove it.',
      );
    }
  }
  const rawHost = tier['host'];
  if (rawHost !== undefined && rawHost !== null && (typeof rawHost !== 'string' || rawHost === '')) {
    throw configError(
      `${where}.host`,
      'a host name or IP address',
      rawHost,
      'Use the routable IP peers dial (e.g. the pod IP), or omit it for VLLM_P2P_SIDE_CHANNEL_HOST.',
    );
  }
  const rawPort = tier['port'];
  let port: number | null = null;
  if (rawPort !== undefined && rawPort !== null) {
    const n = parseExtraNumber(rawPort);
    if (n === null || !Number.isInteger(n) || n < 1 || n > 65535) {
      throw configError(
        `${where}.port`,
        'an integer port in 1..65535 (the base; the data-parallel rank is added)',
        rawPort,
        `Use e.g. ${DEFAULT_P2P_PORT}, or omit it for VLLM_P2P_SIDE_CHANNEL_PORT.`,
      );
    }
    port = n;
  }
  const rawBackends = tier['backends'];
  let backends: string[] = ['UCX'];
  if (rawBackends !== undefined && rawBackends !== null) {
    const known = KNOWN_BACKENDS as readonly string[];
    if (
      !Array.isArray(rawBackends) ||
      rawBackends.length === 0 ||
      !rawBackends.every((b) => typeof b === 'string' && known.includes(b.toUpperCase()))
    ) {
      throw configError(
        `${where}.backends`,
        `a non-empty list of ${known.join(', ')} (kvconnect's transfer agent; UCX = choose shm or tcp)`,
        rawBackends,
        'Use ["UCX"] (the default); NIXL plugins such as MOONCAKE or LIBFABRIC do not exist in kvconnect.',
      );
    }
    backends = rawBackends.map((b: string) => b.toUpperCase());
  }
  const rawTimeout = tier['unbound_store_timeout_s'];
  let unboundStoreTimeoutS = DEFAULT_UNBOUND_STORE_TIMEOUT_S;
  if (rawTimeout !== undefined && rawTimeout !== null) {
    const n = parseExtraNumber(rawTimeout);
    if (n === null || !(n > 0)) {
      throw configError(
        `${where}.unbound_store_timeout_s`,
        'a positive number of seconds',
        rawTimeout,
        `Use e.g. ${DEFAULT_UNBOUND_STORE_TIMEOUT_S} (the default); raise it when prefills outlast it.`,
      );
    }
    unboundStoreTimeoutS = n;
  }
  return {
    type: 'p2p',
    host: (rawHost as string | undefined) ?? null,
    port,
    backends,
    numThreads: parseCount(tier, 'num_threads', where, DEFAULT_P2P_NUM_THREADS),
    unboundStoreTimeoutS,
    timeoutMs: parseTimeoutMs(tier, where, DEFAULT_P2P_FETCH_TIMEOUT_MS),
  };
}

/** The control socket this engine binds: host verbatim, port = base + data-parallel rank (as vLLM). */
export function p2pListenAddress(
  spec: P2PTierSpec,
  dataParallelRank: number,
  env?: Environment,
): { host: string; port: number } {
  const host = spec.host ?? readEnv('VLLM_P2P_SIDE_CHANNEL_HOST', env) ?? DEFAULT_P2P_HOST;
  let base = spec.port;
  if (base === null) {
    const raw = readEnv('VLLM_P2P_SIDE_CHANNEL_PORT', env);
    const n = raw === undefined || raw === '' ? DEFAULT_P2P_PORT : Number(raw);
    if (!Number.isInteger(n) || n < 1 || n > 65535) {
      throw configError(
        'VLLM_P2P_SIDE_CHANNEL_PORT',
        'an integer port in 1..65535',
        raw,
        'Unset it for 5710, or set the tier\'s "port".',
      );
    }
    base = n;
  }
  return { host, port: base + dataParallelRank };
}
