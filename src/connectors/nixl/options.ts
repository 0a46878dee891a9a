/**
 * kv_connector_extra_config of the NIXL connectors (spec §5.1.2) plus the side-channel
 * environment variables, parsed once into plain, validated options.
 */
import type { EngineConfig } from '../../config/types.ts';
import { KVError } from '../../errors/kv-error.ts';
import { KNOWN_BACKENDS } from '../../transfer/index.ts';

export const DEFAULT_SIDE_CHANNEL_PORT = 5600;
export const SIDE_CHANNEL_HOST_ENV = 'VLLM_NIXL_SIDE_CHANNEL_HOST';
export const SIDE_CHANNEL_PORT_ENV = 'VLLM_NIXL_SIDE_CHANNEL_PORT';

export interface NixlOptions {
  /** Transfer backends as vLLM names them: UCX (= choose automatically), TCP, SHM. */
  readonly backends: readonly string[];
  readonly numThreads: number;
  /** Seconds P keeps a request's blocks without hearing from D. */
  readonly kvLeaseDuration: number;
  readonly kvRecomputeThreshold: number;
  readonly enforceHandshakeCompat: boolean;
  readonly engineTtl: number;
  /** Host to bind (and advertise) the side channel and the transfer agent on. */
  readonly sideChannelHost: string;
  /** Side-channel port actually requested (data-parallel offset applied; 0 = any free port). */
  readonly sideChannelPort: number;
  /** Whether the port came from kv_connector_extra_config (else from the environment/default). */
  readonly portFromConfig: boolean;
  readonly authSecret: string | undefined;
  /** kvconnect extensions: bounds on the handshake and on one transfer (seconds). */
  readonly handshakeTimeout: number;
  readonly transferTimeout: number;
  /**
   * Milliseconds a peer's READ may wait on this engine for a read grant that does not exist
   * yet (the grant is created one engine step after the answer naming it left).
   */
  readonly grantWaitMs: number;
  /**
   * Host the transfer agent in a worker thread so transfers progress while the engine
   * computes a step (kvconnect extension; default false).
   */
  readonly transferThread: boolean;
}

/** The wait the transfer agent uses: never more than half the transfer timeout. */
export function effectiveGrantWaitMs(opts: NixlOptions): number {
  return Math.min(opts.grantWaitMs, Math.floor((opts.transferTimeout * 1000) / 2));
}

const KNOWN_KEYS = new Set([
  'backends',
  'num_threads',
  'kv_lease_duration',
  'kv_recompute_threshold',
  'enforce_handshake_compat',
  'engine_ttl',
  'side_channel_host',
  'side_channel_port',
  'auth_secret',
  'handshake_timeout',
  'transfer_timeout',
  'grant_wait_ms',
  'transfer_thread',
  'enable_cross_layers_blocks',
  'bidirectional_kv_xfer',
  'decoder_kv_blocks_ttl',
  'push_registration_timeout',
]);

function bad(key: string, message: string, hint: string): KVError {
  return new KVError('NIXL_BAD_EXTRA_CONFIG', message, { field: `kv_connector_extra_config.${key}`, hint });
}

function num(extra: Record<string, unknown>, key: string, def: number, min: number, integer = false): number {
  const v = extra[key];
  if (v === undefined || v === null) return def;
  const n = typeof v === 'string' && v.trim() !== '' ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isFinite(n) || n < min || (integer && !Number.isInteger(n))) {
    throw bad(
      key,
      `kv_connector_extra_config.${key} must be ${integer ? 'an integer' : 'a number'} ≥ ${min}, got ${JSON.stringify(v)}`,
      `Set ${key} to ${integer ? 'an integer' : 'a number'} ≥ ${min} (default ${def}).`,
    );
  }
  return n;
}

function bool(extra: Record<string, unknown>, key: string, def: boolean): boolean {
  const v = extra[key];
  if (v === undefined || v === null) return def;
  if (typeof v === 'boolean') return v;
  if (typeof v === 'string' && /^(true|false)$/i.test(v)) return v.toLowerCase() === 'true';
  throw bad(
    key,
    `kv_connector_extra_config.${key} must be true or false, got ${JSON.stringify(v)}`,
    `Set ${key} to true or false.`,
  );
}

function backendList(extra: Record<string, unknown>): string[] {
  const v = extra['backends'];
  if (v === undefined || v === null) return ['UCX'];
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || list.length === 0) {
    throw bad(
      'backends',
      'kv_connector_extra_config.backends must be a non-empty list of backend names',
      'Use e.g. ["UCX"] (automatic), ["TCP"] or ["SHM"].',
    );
  }
  return list.map((b) => {
    const name = String(b).toUpperCase();
    if (!(KNOWN_BACKENDS as readonly string[]).includes(name)) {
      throw bad(
        'backends',
        `Unknown NIXL backend '${String(b)}'. Available backends: TCP, SHM, UCX (UCX = choose automatically)`,
        'Set kv_connector_extra_config.backends to a list of "TCP", "SHM" or "UCX".',
      );
    }
    return name;
  });
}

/** Parses the extra config and the environment; `env` is injectable for tests. */
export function parseNixlOptions(
  extra: Record<string, unknown>,
  engineConfig: EngineConfig | null,
  env: NodeJS.ProcessEnv = process.env,
): NixlOptions {
  if (bool(extra, 'bidirectional_kv_xfer', false)) {
    throw bad(
      'bidirectional_kv_xfer',
      'kv_connector_extra_config.bidirectional_kv_xfer (turn-2 KV reuse from the decode instance) is not supported by kvconnect',
      'Remove bidirectional_kv_xfer (or set it to false); decode instances do not pin their blocks for a next prefill.',
    );
  }
  const envPort = env[SIDE_CHANNEL_PORT_ENV];
  const portFromConfig = extra['side_channel_port'] !== undefined && extra['side_channel_port'] !== null;
  let port: number;
  if (portFromConfig) {
    port = num(extra, 'side_channel_port', DEFAULT_SIDE_CHANNEL_PORT, 0, true);
  } else {
    port = envPort === undefined || envPort === '' ? DEFAULT_SIDE_CHANNEL_PORT : Number(envPort);
    if (!Number.isInteger(port) || port < 0 || port > 65535) {
      throw new KVError(
        'NIXL_BAD_SIDE_CHANNEL_PORT',
        `${SIDE_CHANNEL_PORT_ENV}=${envPort} is not a port number`,
        {
          hint: `Set ${SIDE_CHANNEL_PORT_ENV} to a port (default ${DEFAULT_SIDE_CHANNEL_PORT}) or kv_connector_extra_config.side_channel_port.`,
        },
      );
    }
    // vLLM: one listener per engine at base port + data-parallel index.
    if (port !== 0) port += engineConfig?.parallel.dataParallelRank ?? 0;
  }
  if (port > 65535)
    throw bad('side_channel_port', `side channel port ${port} is above 65535`, 'Pick a lower port.');
  const hostRaw = extra['side_channel_host'] ?? env[SIDE_CHANNEL_HOST_ENV] ?? 'localhost';
  if (typeof hostRaw !== 'string' || hostRaw === '') {
    throw bad(
      'side_channel_host',
      'kv_connector_extra_config.side_channel_host must be a host name or IP',
      'Use e.g. "127.0.0.1" or the routable IP of this host.',
    );
  }
  const secret = extra['auth_secret'];
  if (secret !== undefined && secret !== null && typeof secret !== 'string') {
    throw bad(
      'auth_secret',
      'kv_connector_extra_config.auth_secret must be a string',
      'Use the same secret string on both engines.',
    );
  }
  return {
    backends: backendList(extra),
    numThreads: num(extra, 'num_threads', 4, 1, true),
    kvLeaseDuration: num(extra, 'kv_lease_duration', 30, 0.001),
    kvRecomputeThreshold: num(extra, 'kv_recompute_threshold', 64, 0, true),
    enforceHandshakeCompat: bool(extra, 'enforce_handshake_compat', true),
    engineTtl: num(extra, 'engine_ttl', 3600, Number.NEGATIVE_INFINITY),
    sideChannelHost: hostRaw === 'localhost' ? '127.0.0.1' : hostRaw,
    sideChannelPort: port,
    portFromConfig,
    authSecret: typeof secret === 'string' && secret !== '' ? secret : undefined,
    handshakeTimeout: num(extra, 'handshake_timeout', 5, 0.01),
    transferTimeout: num(extra, 'transfer_timeout', 30, 0.01),
    grantWaitMs: Math.min(num(extra, 'grant_wait_ms', 5000, 0), 2 ** 31 - 1),
    transferThread: bool(extra, 'transfer_thread', false),
  };
}

/** Keys this connector does not know (reported as warnings by check-config, not errors). */
export function unknownNixlKeys(extra: Record<string, unknown>): string[] {
  return Object.keys(extra).filter((k) => !KNOWN_KEYS.has(k));
}

/** How the port-in-use error tells the user to pick another port. */
export function sideChannelPortHint(opts: NixlOptions): string {
  return (
    `Port ${opts.sideChannelPort} is taken (another engine on this host?). Set ${SIDE_CHANNEL_PORT_ENV} ` +
    `to another base port, or kv_connector_extra_config.side_channel_port (0 = any free port).`
  );
}
