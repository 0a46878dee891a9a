/**
 * A KV event subscriber as routers write them for vLLM: SUB on the publisher's endpoint,
 * batches handed over in sequence order. A gap in the sequence (a slow joiner, a dropped
 * message) is filled from the replay ROUTER, if there is one; a sequence that goes back
 * below what was seen means the publisher restarted (a new engine with an empty cache), so
 * `onReset` runs before the new publisher's batches. So does the first batch after the
 * connection to the publisher dropped: a subscriber that reconnects late (a loaded machine)
 * first hears a new publisher when its sequence has already reached or passed the old one's,
 * which the sequence alone cannot tell from a gap or from the old publisher going on.
 */
import * as zmq from 'zeromq';
import { getLogger } from '../logging/logger.ts';
import { END_SEQ, seqBytes } from './endpoint.ts';
import { decodeBatch, type KVEventBatch } from './wire.ts';

const log = getLogger('kvconnect.kv-events.subscriber');
const REPLAY_TIMEOUT_MS = 1000;

export interface KVEventSubscriberOptions {
  endpoint: string;
  replayEndpoint?: string | null;
  topic?: string;
  onBatch: (batch: KVEventBatch, seq: bigint) => void;
  /** The publisher restarted: everything learnt from it so far is stale. */
  onReset?: () => void;
}

/**
 * Whether the batch numbered `seq` comes from a new publisher: its sequence went back below
 * what may still arrive twice (`dupFloor`), or it is the first batch since the connection to
 * the publisher dropped. The latter holds even when `seq` happens to continue the old sequence
 * (the new publisher got exactly that far before the reconnect): the sequence cannot tell, so a
 * same-publisher reconnect costs one reset and replay rather than a restart's stale entries
 * being kept.
 */
export function publisherRestarted(seq: bigint, dupFloor: bigint, publisherLost: boolean): boolean {
  return seq <= dupFloor || publisherLost;
}

export class KVEventSubscriber {
  readonly #opts: KVEventSubscriberOptions;
  readonly #sub: zmq.Subscriber;
  #dealer: zmq.Dealer | null = null;
  #last = -1n;
  /** Batches (dupFloor, last] may arrive again live after a replay: skip them. */
  #dupFloor = -1n;
  #loop: Promise<void>;
  #received = 0;
  #decodeErrors = 0;
  #resets = 0;
  /** The connection to the publisher dropped since the last reset: it may be a new process now. */
  #publisherLost = false;

  private constructor(opts: KVEventSubscriberOptions, sub: zmq.Subscriber) {
    this.#opts = opts;
    this.#sub = sub;
    sub.events.on('disconnect', () => {
      this.#publisherLost = true;
    });
    this.#loop = this.#run();
  }

  /** Connects (ZeroMQ reconnects on its own if the publisher is not up yet or restarts). */
  static start(opts: KVEventSubscriberOptions): KVEventSubscriber {
    const sub = new zmq.Subscriber({ linger: 0, reconnectInterval: 100 });
    sub.connect(opts.endpoint);
    sub.subscribe(opts.topic ?? '');
    return new KVEventSubscriber(opts, sub);
  }

  get lastSeq(): bigint {
    return this.#last;
  }

  stats(): { received: number; decodeErrors: number; resets: number; lastSeq: number } {
    return {
      received: this.#received,
      decodeErrors: this.#decodeErrors,
      resets: this.#resets,
      lastSeq: Number(this.#last),
    };
  }

  /** Asks the replay socket for everything from `start` on (e.g. 0 to catch up after joining late). */
  async replayFrom(start: bigint): Promise<void> {
    const endpoint = this.#opts.replayEndpoint;
    if (!endpoint) return;
    if (!this.#dealer) {
      this.#dealer = new zmq.Dealer({ linger: 0, receiveTimeout: REPLAY_TIMEOUT_MS, reconnectInterval: 100 });
      this.#dealer.connect(endpoint);
    }
    const dealer = this.#dealer;
    const floor = this.#last;
    try {
      await dealer.send(['', seqBytes(start)]);
      while (true) {
        const [, seq, payload] = (await dealer.receive()) as [Buffer, Buffer, Buffer];
        if (seq.equals(END_SEQ)) break;
        const s = seq.readBigUInt64BE();
        if (s > this.#last) this.#deliver(payload, s);
      }
      this.#dupFloor = floor;
    } catch (e) {
      if (!dealer.closed) log.warn('KV event replay from %s failed: %s', endpoint, (e as Error).message);
      // A lost reply would desynchronise the next request/reply pair: start a fresh socket.
      dealer.close();
      if (this.#dealer === dealer) this.#dealer = null;
    }
  }

  close(): Promise<void> {
    this.#sub.close();
    this.#dealer?.close();
    return this.#loop;
  }

  async #run(): Promise<void> {
    try {
      for await (const frames of this.#sub) {
        if (frames.length !== 3) continue;
        const seq = (frames[1] as Buffer).readBigUInt64BE();
        const restarted = publisherRestarted(seq, this.#dupFloor, this.#publisherLost);
        if (seq <= this.#last && !restarted) continue;
        if (restarted) {
          this.#publisherLost = false;
          this.#resets++;
          log.info(
            'KV event publisher %s restarted (sequence %s after %s)',
            this.#opts.endpoint,
            String(seq),
            String(this.#last),
          );
          this.#last = -1n;
          this.#dupFloor = -1n;
          this.#opts.onReset?.();
        }
        if (seq > this.#last + 1n) await this.replayFrom(this.#last + 1n);
        if (seq > this.#last) this.#deliver(frames[2] as Buffer, seq);
        if (seq === this.#last) this.#dupFloor = this.#last - 1n;
      }
    } catch (e) {
      if (!this.#sub.closed)
        log.error('KV event subscriber %s stopped: %s', this.#opts.endpoint, (e as Error).message);
    }
  }

  #deliver(payload: Uint8Array, seq: bigint): void {
    this.#last = seq;
    let batch: KVEventBatch;
    try {
      batch = decodeBatch(payload);
    } catch (e) {
      this.#decodeErrors++;
      log.warnOnce('Undecodable KV event batch from %s: %s', this.#opts.endpoint, (e as Error).message);
      return;
    }
    this.#received++;
    this.#opts.onBatch(batch, seq);
  }
}
