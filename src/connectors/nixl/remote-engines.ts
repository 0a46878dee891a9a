/**
 * The consumer-side (or push producer-side) handshake with a remote engine
 * (docs/connectors/nixl.md#handshake-and-compatibility-hash): fetch the remote rank's payload
 * from its side channel, check the connector version, the compatibility hash and the engine
 * id, check the block geometry, and add the remote agent. One handshake per remote engine is
 * shared by every request waiting on it.
 */
import { KVError } from '../../errors/kv-error.ts';
import type { TransferAgent } from '../../transfer/index.ts';
import { checkCompatibility, fetchRemoteMetadata } from '../../transfer/index.ts';
import {
  decodeAgentMetadata,
  decodeHandshakePayload,
  engineIdMismatch,
  type NixlHandshakePayload,
} from './handshake.ts';
import { validateRemoteGeometry } from './head-plan.ts';
import type { RemoteEndpoint } from './step-metadata.ts';

export interface HandshakeSettings {
  readonly localPayload: NixlHandshakePayload;
  readonly enforceCompat: boolean;
  readonly timeoutMs: number;
  readonly secret: string | undefined;
  readonly mode: 'pull' | 'push';
  /** The model's KV heads (all ranks together), to scale block sizes across TP sizes. */
  readonly totalKvHeads: number;
  /** This engine runs several KV cache groups or sliding-window layers (HMA). */
  readonly hybrid: boolean;
}

export class RemoteEngines {
  readonly #agent: TransferAgent;
  readonly #settings: HandshakeSettings;
  readonly #engines = new Map<string, Promise<string>>();
  /** The handshakes in #engines that have finished. */
  readonly #settled = new WeakSet<Promise<string>>();
  readonly #lastUsed = new Map<string, number>();
  /** Per remote rank: its side channel's clock minus ours (ms), estimated at the handshake. */
  readonly #clockOffsetMs = new Map<string, number>();
  /** Per remote rank: this engine's block size over the remote's (./block-ratio.ts). */
  readonly #blockRatio = new Map<string, number>();

  constructor(agent: TransferAgent, settings: HandshakeSettings) {
    this.#agent = agent;
    this.#settings = settings;
  }

  #failedHandshakes = 0;

  /** Handshakes that failed since the last call (vLLM's num_failed_handshakes). */
  takeFailedHandshakes(): number {
    const n = this.#failedHandshakes;
    this.#failedHandshakes = 0;
    return n;
  }

  /** Resolves with the remote agent name; a failed handshake is retried by the next caller. */
  connect(remote: RemoteEndpoint, tpRank: number): Promise<string> {
    const key = engineKey(remote, tpRank);
    this.#lastUsed.set(key, Date.now());
    let p = this.#engines.get(key);
    if (!p) {
      const started = this.#handshake(remote, tpRank, key);
      this.#engines.set(key, started);
      started.then(
        () => this.#settled.add(started),
        () => {
          this.#engines.delete(key);
          this.#failedHandshakes++;
        },
      );
      p = started;
    }
    return p;
  }

  /**
   * The remote's clock minus this one in ms (vLLM's clock offset: the remote's timestamp
   * against the midpoint of the handshake's round trip); undefined before a handshake.
   */
  clockOffsetMs(remote: RemoteEndpoint, tpRank: number): number | undefined {
    return this.#clockOffsetMs.get(engineKey(remote, tpRank));
  }

  /** This engine's block size over the remote rank's; undefined before a handshake. */
  blockRatio(remote: RemoteEndpoint, tpRank: number): number | undefined {
    return this.#blockRatio.get(engineKey(remote, tpRank));
  }

  async #handshake(remote: RemoteEndpoint, tpRank: number, key: string): Promise<string> {
    const s = this.#settings;
    const sentAt = performance.now();
    const { metadata, remotePerf } = await fetchRemoteMetadata(remote.host, remote.port, tpRank, {
      timeoutMs: s.timeoutMs,
      ...(s.secret ? { secret: s.secret } : {}),
    });
    this.#clockOffsetMs.set(key, remotePerf - (sentAt + performance.now()) / 2);
    const payload = decodeHandshakePayload(metadata);
    checkCompatibility(s.localPayload.compatibility_hash, payload.compatibility_hash, s.enforceCompat);
    const meta = decodeAgentMetadata(payload);
    if (meta.engine_id !== remote.engineId) throw engineIdMismatch(remote.engineId, meta.engine_id);
    const local = s.localPayload.agent_metadata;
    if (meta.tp_size !== remote.tpSize) throw tpSizeMismatch(meta.engine_id, remote.tpSize, meta.tp_size);
    const ratio = validateRemoteGeometry({
      engineId: meta.engine_id,
      mode: s.mode,
      totalKvHeads: s.totalKvHeads,
      hybrid: s.hybrid,
      local: { tpSize: local.tp_size, blockSize: local.block_size, blockLens: local.block_lens },
      remote: { tpSize: meta.tp_size, blockSize: meta.block_size, blockLens: meta.block_lens },
    });
    this.#blockRatio.set(key, ratio);
    return this.#agent.addRemoteAgent(meta.agent);
  }

  /**
   * Drops a finished cached handshake, so the next connect() asks the side channel again:
   * the engine may have restarted under the same id with its agent on another port. One in
   * progress is kept (many failed loads of one engine share a single new handshake).
   */
  forget(remote: RemoteEndpoint, tpRank: number): void {
    const key = engineKey(remote, tpRank);
    const p = this.#engines.get(key);
    if (p && this.#settled.has(p)) this.#engines.delete(key);
  }

  /** Forgets engines idle for longer than `ttlSeconds` (engine_ttl; ≤ 0 disables). */
  evictIdle(ttlSeconds: number): void {
    if (ttlSeconds <= 0) return;
    const now = Date.now();
    for (const [key, used] of this.#lastUsed) {
      if (now - used < ttlSeconds * 1000) continue;
      const p = this.#engines.get(key);
      this.#engines.delete(key);
      this.#lastUsed.delete(key);
      this.#clockOffsetMs.delete(key);
      this.#blockRatio.delete(key);
      p?.then((name) => this.#agent.removeRemoteAgent(name)).catch(() => {});
    }
  }
}

function engineKey(remote: RemoteEndpoint, tpRank: number): string {
  return `${remote.engineId}@${remote.host}:${remote.port}#${tpRank}`;
}

function tpSizeMismatch(engineId: string, expected: number, actual: number): KVError {
  return new KVError(
    'NIXL_TP_SIZE_MISMATCH',
    `Remote engine ${engineId} reports tensor_parallel_size ${actual}, but its kv_transfer_params said tp_size ${expected}`,
    { hint: 'Pass the prefill engine’s kv_transfer_params to the decode engine unchanged.' },
  );
}
