/**
 * KV event publishers (vLLM's EventPublisherFactory): "null" drops batches; "zmq" sends each
 * batch on a PUB socket as `[topic, seq (8-byte big-endian), msgpack payload]` and keeps the
 * last `buffer_steps` payloads for an optional ROUTER replay socket. A DEALER asks for
 * replay with `["", start_seq]` and receives every buffered batch with seq >= start as
 * `["", seq, payload]`, then the end marker `["", END_SEQ, ""]`.
 *
 * vLLM's publish() blocks the scheduler when its queue is full; here publish() never blocks
 * the engine: a batch that would exceed `max_queue_size` is dropped and counted.
 */
import * as zmq from 'zeromq';
import { type KVEventsConfigFields, kvEventsPublishing } from '../config/kv-events-config.ts';
import { KVError } from '../errors/kv-error.ts';
import { getLogger } from '../logging/logger.ts';
import { type Environment, readEnv } from '../util/envs.ts';
import { END_SEQ, offsetEndpointPort, seqBytes, shouldBind } from './endpoint.ts';
import { encodeBatch, type KVEventBatch, type KVEventsLayout } from './wire.ts';

const log = getLogger('kvconnect.kv-events.publisher');

export interface EventPublisher {
  /** Queues one batch (the data-parallel rank is filled in when null). */
  publish(batch: KVEventBatch): void;
  shutdown(): Promise<void>;
  /** Batches published, and dropped because the queue was full. */
  stats(): { published: number; dropped: number; queued: number; buffered: number };
}

export class NullEventPublisher implements EventPublisher {
  publish(): void {}
  async shutdown(): Promise<void> {}
  stats() {
    return { published: 0, dropped: 0, queued: 0, buffered: 0 };
  }
}

export class ZmqEventPublisher implements EventPublisher {
  readonly endpoint: string;
  readonly replayEndpoint: string | null;
  readonly #pub: zmq.Publisher;
  readonly #replay: zmq.Router | null;
  readonly #topic: Buffer;
  readonly #layout: KVEventsLayout;
  readonly #rank: number;
  readonly #maxQueue: number;
  readonly #bufferSteps: number;
  #queue: Uint8Array[] = [];
  /** Ring of [seq, payload] for replay, oldest first. */
  #buffer: [bigint, Uint8Array][] = [];
  #seq = 0n;
  #published = 0;
  #dropped = 0;
  #sending: Promise<void> | null = null;
  #replayLoop: Promise<void> | null = null;
  #closed = false;

  private constructor(
    pub: zmq.Publisher,
    replay: zmq.Router | null,
    config: KVEventsConfigFields,
    rank: number,
    layout: KVEventsLayout,
  ) {
    this.#pub = pub;
    this.#replay = replay;
    this.endpoint = pub.lastEndpoint ?? config.endpoint;
    this.replayEndpoint = replay ? (replay.lastEndpoint ?? config.replay_endpoint) : null;
    this.#topic = Buffer.from(config.topic, 'utf8');
    this.#layout = layout;
    this.#rank = rank;
    this.#maxQueue = config.max_queue_size;
    this.#bufferSteps = config.buffer_steps;
    if (replay) this.#replayLoop = this.#serveReplay(replay);
  }

  /** Binds (or connects) the sockets; a bad or busy endpoint is a KVError naming the field. */
  static async start(
    config: KVEventsConfigFields,
    dataParallelRank = 0,
    layout: KVEventsLayout = 'map',
  ): Promise<ZmqEventPublisher> {
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
    const publisher = new ZmqEventPublisher(pub, replay, config, dataParallelRank, layout);
    log.info(
      'Publishing KV cache events on %s%s',
      publisher.endpoint,
      publisher.replayEndpoint ? ` (replay on ${publisher.replayEndpoint})` : '',
    );
    return publisher;
  }

  publish(batch: KVEventBatch): void {
    if (this.#closed) throw new Error('Publisher is closed');
    if (this.#maxQueue > 0 && this.#queue.length >= this.#maxQueue) {
      this.#dropped++;
      log.warnOnce(
        'KV event queue is full (max_queue_size); dropping batches until the publisher catches up.',
      );
      return;
    }
    const rank = batch.dataParallelRank ?? this.#rank;
    this.#queue.push(encodeBatch({ ...batch, dataParallelRank: rank }, this.#layout));
    this.#sending ??= this.#drain().finally(() => {
      this.#sending = null;
    });
  }

  stats() {
    return {
      published: this.#published,
      dropped: this.#dropped,
      queued: this.#queue.length,
      buffered: this.#buffer.length,
    };
  }

  /** Sends what is queued (best effort, like vLLM's one-second grace), then closes the sockets. */
  async shutdown(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const sending = this.#sending;
    if (sending) await Promise.race([sending, new Promise((r) => setTimeout(r, 1000).unref())]);
    this.#pub.close();
    this.#replay?.close();
    await this.#replayLoop;
  }

  async #drain(): Promise<void> {
    while (this.#queue.length > 0 && !this.#pub.closed) {
      const payload = this.#queue.shift()!;
      const seq = this.#seq++;
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
