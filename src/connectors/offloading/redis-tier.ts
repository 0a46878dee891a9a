/**
 * The `redis` secondary tier: a Redis/Valkey server or a Redis Cluster through
 * @redis/client. Values are raw bytes in a checksummed frame (./block-frame.ts); commands
 * issued together are pipelined by the client. Every operation is bounded by `timeoutMs`:
 * when Redis is down or slow the tier answers "miss", warns once per outage and counts it,
 * while the client reconnects in the background.
 */
import { createClient, createCluster, RESP_TYPES } from '@redis/client';
import { decodeFrame, encodeFrame } from './block-frame.ts';
import { emptyTierStats, type KVTier, type TierEntry, type TierStats } from './kv-tier.ts';
import { TierHealth } from './tier-health.ts';

export interface RedisTierOptions {
  /** Single server URL, or null with clusterNodes. */
  url: string | null;
  clusterNodes: string[];
  timeoutMs: number;
  keyPrefix: string;
}

/** The commands this tier uses, common to the single-server and the cluster client. */
interface RedisCommands {
  set(key: string, value: Buffer): Promise<unknown>;
  get(key: string): Promise<Buffer | null>;
  exists(key: string): Promise<number>;
  del(key: string): Promise<number>;
  connect(): Promise<unknown>;
  destroy(): void;
  on(event: 'error', listener: (err: Error) => void): unknown;
  readonly isReady: boolean;
}

const RECONNECT_BACKOFF_MS = 500;
const BUFFER_REPLIES = { [RESP_TYPES.BLOB_STRING]: Buffer } as const;

function reconnectStrategy(retries: number): number {
  return Math.min(50 * (retries + 1), RECONNECT_BACKOFF_MS);
}

export class RedisTier implements KVTier {
  readonly kind = 'redis' as const;
  readonly medium = 'STORAGE' as const;
  readonly options: RedisTierOptions;
  readonly health: TierHealth;

  get timeoutMs(): number {
    return this.health.timeoutMs;
  }
  readonly #stats = emptyTierStats();
  #client: RedisCommands | null = null;
  /** The client while connect() runs (it retries until Redis answers or close() destroys it). */
  #pendingClient: RedisCommands | null = null;
  #connecting: Promise<void> | null = null;
  #lastConnectFailure = 0;
  #closed = false;

  constructor(options: RedisTierOptions) {
    this.options = options;
    const where = options.clusterNodes.length > 0 ? `cluster ${options.clusterNodes.join(',')}` : options.url;
    this.health = new TierHealth(`redis tier ${where}`, options.timeoutMs);
  }

  redisKey(key: string): string {
    return `${this.options.keyPrefix}:${key}`;
  }

  async putMany(entries: readonly TierEntry[]): Promise<string[]> {
    if (entries.length === 0) return [];
    return this.health.run(
      'put',
      async () => {
        const client = await this.#ready();
        await Promise.all(entries.map((e) => client.set(this.redisKey(e.key), encodeFrame(e.key, e.value))));
        for (const e of entries) {
          this.#stats.puts++;
          this.#stats.putBytes += e.value.byteLength;
        }
        return entries.map((e) => e.key);
      },
      () => [],
    );
  }

  async getMany(keys: readonly string[]): Promise<(Uint8Array | null)[]> {
    if (keys.length === 0) return [];
    return this.health.run(
      'get',
      async () => {
        const client = await this.#ready();
        const frames = await Promise.all(keys.map((k) => client.get(this.redisKey(k))));
        return frames.map((frame, i) => {
          const key = keys[i] as string;
          this.#stats.gets++;
          if (frame === null) return null;
          const payload = decodeFrame(key, frame);
          if (payload === null) {
            this.#stats.corrupt++;
            client.del(this.redisKey(key)).catch(() => undefined);
            return null;
          }
          this.#stats.hits++;
          this.#stats.getBytes += payload.byteLength;
          return payload;
        });
      },
      () => keys.map(() => null),
    );
  }

  async hasMany(keys: readonly string[]): Promise<boolean[]> {
    if (keys.length === 0) return [];
    return this.health.run(
      'has',
      async () => {
        const client = await this.#ready();
        const found = await Promise.all(keys.map((k) => client.exists(this.redisKey(k))));
        return found.map((n) => n > 0);
      },
      () => keys.map(() => false),
    );
  }

  async deleteMany(keys: readonly string[]): Promise<void> {
    if (keys.length === 0) return;
    await this.health.run(
      'delete',
      async () => {
        const client = await this.#ready();
        await Promise.all(keys.map((k) => client.del(this.redisKey(k))));
      },
      () => undefined,
    );
  }

  stats(): TierStats {
    return { ...this.#stats, errors: this.health.failures };
  }

  takeEvicted(): string[] {
    return [];
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const client of [this.#client, this.#pendingClient]) {
      try {
        client?.destroy();
      } catch {}
    }
    this.#client = null;
    this.#pendingClient = null;
  }

  /** The connected client; connects lazily and at most every RECONNECT_BACKOFF_MS after a failure. */
  async #ready(): Promise<RedisCommands> {
    if (this.#closed) throw new Error('redis tier is closed');
    if (this.#client?.isReady) return this.#client;
    if (this.#client && !this.#connecting) throw new Error('not connected (reconnecting)');
    if (!this.#connecting) {
      if (Date.now() - this.#lastConnectFailure < RECONNECT_BACKOFF_MS) throw new Error('not connected');
      this.#connecting = this.#connect().finally(() => {
        this.#connecting = null;
      });
    }
    await this.#connecting;
    if (!this.#client?.isReady) throw new Error('not connected');
    return this.#client;
  }

  async #connect(): Promise<void> {
    const socket = { connectTimeout: Math.max(this.options.timeoutMs, 1000), reconnectStrategy };
    const client: RedisCommands =
      this.options.clusterNodes.length > 0
        ? (createCluster({
            rootNodes: this.options.clusterNodes.map((url) => ({ url })),
            defaults: { socket, disableOfflineQueue: true },
          }).withTypeMapping(BUFFER_REPLIES) as unknown as RedisCommands)
        : (createClient({
            ...(this.options.url === null ? {} : { url: this.options.url }),
            socket,
            disableOfflineQueue: true,
          }).withTypeMapping(BUFFER_REPLIES) as unknown as RedisCommands);
    client.on('error', (err) => this.health.failed(err));
    this.#pendingClient = client;
    try {
      await client.connect();
      this.#pendingClient = null;
      if (this.#closed) {
        client.destroy();
        return;
      }
      this.#client = client;
    } catch (err) {
      this.#pendingClient = null;
      this.#lastConnectFailure = Date.now();
      try {
        client.destroy();
      } catch {}
      throw err;
    }
  }
}
