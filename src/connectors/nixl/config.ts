/**
 * kv_connector_extra_config of the NIXL connectors (docs/connectors/nixl.md#configuration)
 * plus the side-channel environment variables, parsed once into plain, validated options.
 */
import { type ExtraConfigSchema, readExtraConfig } from '../../config/extra-config.ts';
import type { EngineConfig } from '../../config/types.ts';
import { KVError } from '../../errors/kv-error.ts';
import { KNOWN_BACKENDS, MAX_BUSY_POLL_US } from '../../transfer/index.ts';
import { type Environment, type EnvName, readEnv } from '../../util/envs.ts';

export const DEFAULT_SIDE_CHANNEL_PORT = 5600;
export const SIDE_CHANNEL_HOST_ENV = 'VLLM_NIXL_SIDE_CHANNEL_HOST' satisfies EnvName;
export const SIDE_CHANNEL_PORT_ENV = 'VLLM_NIXL_SIDE_CHANNEL_PORT' satisfies EnvName;

export interface NixlOptions {
  /** Transfer backends as vLLM names them: UCX (= choose automatically), TCP, SHM. */
  readonly backends: readonly string[];
  readonly numThreads: number;
  /** Seconds P keeps a request's blocks without hearing from D. */
  readonly kvLeaseDuration: number;
  /**
   * Fewer remote tokens than this are recomputed instead of pulled (P→D and, bidirectional,
   * D→P); 0 = always pull. vLLM's default: 64 with bidirectional_kv_xfer, else 0.
   */
  readonly kvRecomputeThreshold: number;
  /** Pull: D pins each finished request's blocks for a next turn's prefill to READ back. */
  readonly bidirectionalKvXfer: boolean;
  /** Seconds D holds those blocks (no heartbeats renew it). */
  readonly decoderKvBlocksTtl: number;
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
   * yet (the engine grants in the step that finished the request, before its answer leaves).
   */
  readonly grantWaitMs: number;
  /**
   * Host the transfer agent in a worker thread so transfers progress while the engine
   * computes a step (kvconnect extension; default false).
   */
  readonly transferThread: boolean;
  /**
   * µs the transfer agent's event loop keeps polling after transfer activity (kvconnect
   * extension; undefined = KVCONNECT_BUSY_POLL_US, else the agent's default: 100 on the
   * engine's loop, 0 in a thread).
   */
  readonly busyPollUs: number | undefined;
}

/** The wait the transfer agent uses: never more than half the transfer timeout. */
export function effectiveGrantWaitMs(opts: NixlOptions): number {
  return Math.min(opts.grantWaitMs, Math.floor((opts.transferTimeout * 1000) / 2));
}

/** NIXL's keys (docs/connectors/nixl.md), read by the one extra-config reader. */
export const NIXL_EXTRA_CONFIG = {
  connector: 'NixlConnector',
  code: 'NIXL_BAD_EXTRA_CONFIG',
  fields: {
    backends: { type: 'custom' },
    num_threads: { type: 'integer', default: 4, min: 1 },
    kv_lease_duration: { type: 'number', default: 30, min: 0.001 },
    kv_recompute_threshold: { type: 'integer', min: 0 },
    enforce_handshake_compat: { type: 'boolean', default: true },
    engine_ttl: { type: 'number', default: 3600 },
    side_channel_host: { type: 'string', nonEmpty: true },
    side_channel_port: { type: 'integer', min: 0, max: 65535 },
    auth_secret: { type: 'string' },
    handshake_timeout: { type: 'number', default: 5, min: 0.01 },
    transfer_timeout: { type: 'number', default: 30, min: 0.01 },
    grant_wait_ms: { type: 'number', default: 5000, min: 0 },
    transfer_thread: { type: 'boolean', default: true },
    busy_poll_us: { type: 'integer', min: 0, max: MAX_BUSY_POLL_US },
    bidirectional_kv_xfer: { type: 'boolean', default: false },
    enable_cross_layers_blocks: {
      type: 'ignored',
      why: 'KV memory is one buffer per layer; cross-layer blocks are a GPU layout choice',
    },
    decoder_kv_blocks_ttl: { type: 'number', default: 480, min: 0.001 },
    push_registration_timeout: {
      type: 'ignored',
      why: 'NixlPushConnector releases unfulfilled registrations by their lease instead',
    },
  },
} as const satisfies ExtraConfigSchema;

function bad(key: string, message: string, hint: string): KVError {
  return new KVError('NIXL_BAD_EXTRA_CONFIG', message, { field: `kv_connector_extra_config.${key}`, hint });
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
  env?: Environment,
): NixlOptions {
  const v = readExtraConfig(NIXL_EXTRA_CONFIG, extra);
  const envPort = readEnv(SIDE_CHANNEL_PORT_ENV, env);
  const portFromConfig = v.side_channel_port !== undefined;
  let port: number;
  if (v.side_channel_port !== undefined) {
    port = v.side_channel_port;
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
  const host = v.side_channel_host ?? readEnv(SIDE_CHANNEL_HOST_ENV, env) ?? 'localhost';
  return {
    backends: backendList(extra),
    numThreads: v.num_threads,
    kvLeaseDuration: v.kv_lease_duration,
    kvRecomputeThreshold: v.kv_recompute_threshold ?? (v.bidirectional_kv_xfer ? 64 : 0),
    bidirectionalKvXfer: v.bidirectional_kv_xfer,
    decoderKvBlocksTtl: v.decoder_kv_blocks_ttl,
    enforceHandshakeCompat: v.enforce_handshake_compat,
    engineTtl: v.engine_ttl,
    sideChannelHost: host === 'localhost' ? '127.0.0.1' : host,
    sideChannelPort: port,
    portFromConfig,
    authSecret: v.auth_secret === undefined || v.auth_secret === '' ? undefined : v.auth_secret,
    handshakeTimeout: v.handshake_timeout,
    transferTimeout: v.transfer_timeout,
    grantWaitMs: Math.min(v.grant_wait_ms, 2 ** 31 - 1),
    transferThread: v.transfer_thread,
    busyPollUs: v.busy_poll_us,
  };
}

/** vLLM refuses bidirectional transfer in push mode (P WRITEs; nothing would READ D's blocks back). */
export function refuseBidirectionalPush(opts: NixlOptions): void {
  if (!opts.bidirectionalKvXfer) return;
  throw new KVError(
    'NIXL_BAD_EXTRA_CONFIG',
    'Bidirectional KV transfer is not supported for NIXL push connector.',
    {
      field: 'kv_connector_extra_config.bidirectional_kv_xfer',
      hint: 'kv_connector_extra_config.bidirectional_kv_xfer: expected false with NixlPushConnector, received true. Use "kv_connector": "NixlConnector" (pull) for multi-turn reuse from the decode instance, or remove bidirectional_kv_xfer.',
    },
  );
}

/** How the port-in-use error tells the user to pick another port. */
export function sideChannelPortHint(opts: NixlOptions): string {
  return (
    `Port ${opts.sideChannelPort} is taken (another engine on this host?). Set ${SIDE_CHANNEL_PORT_ENV} ` +
    `to another base port, or kv_connector_extra_config.side_channel_port (0 = any free port).`
  );
}
