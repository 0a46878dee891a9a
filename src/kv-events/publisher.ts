/**
 * KV event publishers (vLLM's EventPublisherFactory): "null" drops batches; "zmq" sends each
 * batch on a PUB socket as `[topic, seq (8-byte big-endian), msgpack payload]` and keeps the
 * last `buffer_steps` payloads for an optional ROUTER replay socket. A DEALER asks for
 * replay with `["", start_seq]` and receives every buffered batch with seq >= start as
 * `["", seq, payload]`, then the end marker `["", END_SEQ, ""]`.
 *
 * With a replay socket the publisher also serves what a router that starts late needs
 * (docs/kv-events.md "Snapshots, heartbeats and epochs"): `["", "snapshot"]` is answered with
 * the current cache state as ordinary batches `["", topic, resume_seq, payload]` (AllBlocksCleared,
 * then every resident block), then `["", "", END_SEQ, epoch]`; `resume_seq` is the first live
 * batch the snapshot does not hold. After `KVCONNECT_KV_EVENTS_HEARTBEAT_S` without a batch it
 * publishes an empty one, which takes the next sequence number like any batch.
 *
 * vLLM's publish() blocks the scheduler when its queue is full; here publish() never blocks
 * the engine: a batch that would exceed `max_queue_size` is dropped and counted. Its sequence
 * number is taken all the same, so subscribers see the gap (and resynchronise).
 */
import { randomUUID } from 'node:crypto';
import * as zmq from 'zeromq';
import { type KVEventsConfigFields, kvEventsPublishing } from '../config/kv-events-config.ts';
import { KVError } from '../errors/kv-error.ts';
import { getLogger } from '../logging/logger.ts';
import { type Environment, readEnv } from '../util/envs.ts';
import { KVCacheState } from './cache-state.ts';
import { END_SEQ, offsetEndpointPort, SNAPSHOT_REQUEST, seqBytes, shouldBind } from './endpoint.ts';
import { encodeBatch, type KVEventBatch, type KVEventsLayout } from './wire.ts';

const log = getLogger('kvconnect.kv-events.publisher');

export interface EventPublisher {
  /** Queues one batch (the data-parallel rank is filled in when null). */
  publish(batch: KVEventBatch): void;
  shutdown(): Promise<void>;
  /** Batches published, and dropped because the queue was full. */
  stats(): PublisherStats;
}

export interface PublisherStats {
  published: number;
  dropped: number;
  queued: number;
  buffered: number;
  heartbeats: number;
  snapshots: number;
  /** Blocks the snapshot table holds (0 without a replay socket). */
  trackedBlocks: number;
}

export interface ZmqPublisherOptions {
  /** Seconds without a batch before an empty one is sent (with a replay socket); 0 = none. */
  heartbeatSeconds?: number;
}

export class NullEventPublisher implements EventPublisher {
  publish(): void {}
  async shutdown(): Promise<void> {}
  stats(): PublisherStats {
    return {
      published: 0,
      dropped: 0,
      queued: 0,
      buffered: 0,
      heartbeats: 0,
      snapshots: 0,
      trackedBlocks: 0,
    };
  }
}

/** KVCONNECT_KV_EVENTS_HEARTBEAT_S, checked. */
export function heartbeatSecondsFromEnv(env?: Environment): number {
  const raw = readEnv('KVCONNECT_KV_EVENTS_HEARTBEAT_S', env);
  if (raw === undefined || raw === '') return 1;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 0) {
    throw new KVError(
      'KV_CONFIG_INVALID',
      `Invalid value for KVCONNECT_KV_EVENTS_HEARTBEAT_S: expected a number of seconds >= 0, received ${JSON.stringify(raw)}`,
      {
        field: 'KVCONNECT_KV_EVENTS_HEARTBEAT_S',
        hint: 'Set it to the seconds between heartbeats of an idle publisher (e.g. 1), or 0 for none.',
      },
    );
  }
  return n;
}

export class ZmqEventPublisher implements EventPublisher {
  readonly endpoint: string;
  readonly replayEndpoint: string | null;
  /** This publisher's lifetime id (a UUID's 16 bytes): a restarted publisher has another. */
  readonly epoch: Buffer;
  readonly #pub: zmq.Publisher;
  readonly #replay: zmq.Router | null;
  readonly #topic: Buffer;
  readonly #layout: KVEventsLayout;
  readonly #rank: number;
  readonly #maxQueue: number;
  readonly #bufferSteps: number;
  /** [seq, payload] waiting to be sent. */
  #queue: [bigint, Uint8Array][] = [];
  /** Ring of [seq, payload] for replay, oldest first. */
  #buffer: [bigint, Uint8Array][] = [];
  /** The sequence number of the next batch published (sent or dropped). */
  #nextSeq = 0n;
  #published = 0;
  #dropped = 0;
  #heartbeats = 0;
  #snapshots = 0;
  /** The resident blocks, for snapshots (with a replay socket only). */
  readonly #state: KVCacheState | null;
  #lastPublishAt = Date.now();
  #heartbeatTimer: NodeJS.Timeout | null = null;
  #sending: Promise<void> | null = null;
  #replayLoop: Promise<void> | null = null;
  #closed = false;

  private constructor(
    pub: zmq.Publisher,
    replay: zmq.Router | null,
    config: KVEventsConfigFields,
    rank: number,
    layout: KVEventsLayout,
    heartbeatSeconds: number,
  ) {
    this.#pub = pub;
    this.#replay = replay;
    this.endpoint = pub.lastEndpoint ?? config.endpoint;
    this.replayEndpoint = replay ? (replay.lastEndpoint ?? config.replay_endpoint) : null;
    this.epoch = Buffer.from(randomUUID().replaceAll('-', ''), 'hex');
    this.#topic = Buffer.from(config.topic, 'utf8');
    this.#layout = layout;
    this.#rank = rank;
    this.#maxQueue = config.max_queue_size;
    this.#bufferSteps = config.buffer_steps;
    this.#state = replay ? new KVCacheState() : null;
    if (replay) {
      this.#replayLoop = this.#serveReplay(replay);
      if (heartbeatSeconds > 0) this.#startHeartbeats(heartbeatSeconds * 1000);
    }
  }

  /** Binds (or connects) the sockets; a bad or busy endpoint is a KVError naming the field. */
  static async start(
    config: KVEventsConfigFields,
    dataParallelRank = 0,
    layout: KVEventsLayout = 'map',
    options: ZmqPublisherOptions = {},
  ): Promise<ZmqEventPublisher> {
    const heartbeatSeconds = options.heartbeatSeconds ?? heartbeatSecondsFromEnv();
    const endpoint = offsetEndpointPort(config.endpoint, dataParallelRank, 'kv_events_config.endpoint')!;
    const replayEndpoint = offsetEndpointPort(
      config.replay_endpoint,
      dataParallelRank,
      'kv_events_config.replay_endpoint',
    );
    const pub = new zmq.Publisher({ sendHighWaterMark: config.hwm, linger: 0 });
    let replay: zmq.Router | null = null;
    try {
      await openSocket(pub, endpoint, 'kv_events_config.endpoint');
      if (replayEndpoint) {
        replay = new zmq.Router({ linger: 0 });
        await openSocket(replay, replayEndpoint, 'kv_events_config.replay_endpoint', true);
      }
    } catch (e) {
      pub.close();
      replay?.close();
      throw e;
    }
    const publisher = new ZmqEventPublisher(pub, replay, config, dataParallelRank, layout, heartbeatSeconds);
    log.info(
      'Publishing KV cache events on %s%s',
      publisher.endpoint,
      publisher.replayEndpoint ? ` (replay on ${publisher.replayEndpoint})` : '',
    );
    return publisher;
  }

  publish(batch: KVEventBatch): void {
    if (this.#closed) throw new Error('Publisher is closed');
    // The state follows every batch, dropped or not: a snapshot is the cache as it is.
    this.#state?.apply(batch.events);
    this.#lastPublishAt = Date.now();
    const seq = this.#nextSeq++;
    if (this.#maxQueue > 0 && this.#queue.length >= this.#maxQueue) {
      this.#dropped++;
      log.warnOnce(
        'KV event queue is full (max_queue_size); dropping batches until the publisher catches up.',
      );
      return;
    }
    const rank = batch.dataParallelRank ?? this.#rank;
    this.#queue.push([seq, encodeBatch({ ...batch, dataParallelRank: rank }, this.#layout)]);
    this.#sending ??= this.#drain().finally(() => {
      this.#sending = null;
    });
  }

  /** The sequence number the next batch takes (one past the last published or dropped). */
  get nextSeq(): bigint {
    return this.#nextSeq;
  }

  stats(): PublisherStats {
    return {
      published: this.#published,
      dropped: this.#dropped,
      queued: this.#queue.length,
      buffered: this.#buffer.length,
      heartbeats: this.#heartbeats,
      snapshots: this.#snapshots,
      trackedBlocks: this.#state?.size ?? 0,
    };
  }

  /** An empty batch whenever `intervalMs` passed without one (checked at a quarter of it). */
  #startHeartbeats(intervalMs: number): void {
    this.#heartbeatTimer = setInterval(
      () => {
        if (this.#closed || Date.now() - this.#lastPublishAt < intervalMs) return;
        this.#heartbeats++;
        this.publish({ ts: Date.now() / 1000, events: [], dataParallelRank: null });
      },
      Math.max(1, intervalMs / 4),
    );
    this.#heartbeatTimer.unref();
  }

  /** Sends what is queued (best effort, like vLLM's one-second grace), then closes the sockets. */
  async shutdown(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#heartbeatTimer) clearInterval(this.#heartbeatTimer);
    const sending = this.#sending;
    if (sending) await Promise.race([sending, new Promise((r) => setTimeout(r, 1000).unref())]);
    this.#pub.close();
    this.#replay?.close();
    await this.#replayLoop;
  }

  async #drain(): Promise<void> {
    while (this.#queue.length > 0 && !this.#pub.closed) {
      const [seq, payload] = this.#queue.shift()!;
      try {
        await this.#pub.send([this.#topic, seqBytes(seq), payload]);
        this.#published++;
      } catch (e) {
        if (this.#pub.closed) return;
        log.error('Error in publisher: %s', (e as Error).message);
      }
      if (this.#bufferSteps > 0) {
        this.#buffer.push([seq, payload]);
        if (this.#buffer.length > this.#bufferSteps) this.#buffer.shift();
      }
    }
  }

  async #serveReplay(router: zmq.Router): Promise<void> {
    try {
      for await (const frames of router) {
        if (frames.length !== 3) {
          log.warn('Invalid replay request: %d frames', frames.length);
          continue;
        }
        const [client, , start] = frames as [Buffer, Buffer, Buffer];
        if (start.equals(SNAPSHOT_REQUEST)) {
          await this.#serveSnapshot(router, client);
          continue;
        }
        const startSeq = start.length === 8 ? start.readBigUInt64BE() : 0n;
        for (const [seq, payload] of [...this.#buffer]) {
          if (seq >= startSeq) await router.send([client, '', seqBytes(seq), payload]);
        }
        await router.send([client, '', END_SEQ, '']);
      }
    } catch (e) {
      if (!router.closed) log.error('Error in replay: %s', (e as Error).message);
    }
  }

  /**
   * The cache state at this instant, every batch encoded before the first is sent (live
   * publishing goes on while they are): `resume` is the first live batch it does not hold.
   * A state over its cap is refused: the end marker alone, without the epoch.
   */
  async #serveSnapshot(router: zmq.Router, client: Buffer): Promise<void> {
    const batches = this.#state?.snapshot() ?? null;
    if (!batches) {
      log.warn('KV cache snapshot refused: the state table is over its cap (see docs/kv-events.md)');
      await router.send([client, '', '', END_SEQ, '']);
      return;
    }
    const resume = seqBytes(this.#nextSeq);
    const ts = Date.now() / 1000;
    const payloads = batches.map((events) =>
      encodeBatch({ ts, events, dataParallelRank: this.#rank }, this.#layout),
    );
    this.#snapshots++;
    for (const payload of payloads) await router.send([client, '', this.#topic, resume, payload]);
    await router.send([client, '', '', END_SEQ, this.epoch]);
  }
}

async function openSocket(
  socket: zmq.Socket,
  endpoint: string,
  field: string,
  alwaysBind = false,
): Promise<void> {
  try {
    if (alwaysBind || shouldBind(endpoint)) await socket.bind(endpoint);
    else socket.connect(endpoint);
  } catch (e) {
    throw new KVError(
      'KV_EVENTS_ENDPOINT_FAILED',
      `Cannot open ${endpoint} for KV events: ${(e as Error).message}`,
      {
        field,
        hint: 'Use a free address (tcp://127.0.0.1:* picks any free port) or stop the process that holds it.',
        cause: e,
      },
    );
  }
}

/** vLLM's EventPublisherFactory.create: a null publisher unless events are enabled with "zmq". */
export async function createEventPublisher(
  config: KVEventsConfigFields | null | undefined,
  dataParallelRank = 0,
  layout: KVEventsLayout = kvEventsLayoutFromEnv(),
): Promise<EventPublisher> {
  if (!config || !kvEventsPublishing(config)) return new NullEventPublisher();
  return ZmqEventPublisher.start(config, dataParallelRank, layout);
}

/** KVCONNECT_KV_EVENTS_ARRAY_LIKE=1 selects the tagged-array layout of vLLM before PR #42892. */
export function kvEventsLayoutFromEnv(env?: Environment): KVEventsLayout {
  return readEnv('KVCONNECT_KV_EVENTS_ARRAY_LIKE', env) ? 'array' : 'map';
}
