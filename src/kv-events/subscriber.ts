/**
 * A KV event subscriber as routers write them for vLLM: SUB on the publisher's endpoint,
 * batches handed over in sequence order, and the rule that keeps what the owner learnt equal
 * to the publisher's cache (docs/kv-events.md "Snapshots, heartbeats and epochs"):
 *
 * - a gap in the sequence is filled from the replay ROUTER; a gap the replay buffer no longer
 *   covers, a sequence that goes back, the first batch after the connection dropped, and a
 *   heartbeat that stopped coming all call for a **resync**: the owner forgets (`onReset`) and
 *   is handed the publisher's snapshot (AllBlocksCleared, then every resident block), then the
 *   live batches from the snapshot's resume point on, nothing missing and nothing twice;
 * - the snapshot's epoch says whether the publisher is the one followed before (a reconnect)
 *   or a new process (a restart);
 * - a publisher that serves no snapshot (vLLM today, or one without a replay socket) is
 *   followed as before: after a restart the owner forgets and the stream is replayed from 0.
 *   A publisher restart then shows as the sequence going back below what was seen, or as the
 *   first batch after the connection dropped: a subscriber that reconnects late (a loaded
 *   machine) first hears a new publisher when its sequence has already reached or passed the
 *   old one's, which the sequence alone cannot tell from a gap or from the old publisher
 *   going on.
 */
import * as zmq from 'zeromq';
import { getLogger } from '../logging/logger.ts';
import { END_SEQ, SNAPSHOT_REQUEST, seqBytes } from './endpoint.ts';
import { decodeBatch, type KVEventBatch } from './wire.ts';

const log = getLogger('kvconnect.kv-events.subscriber');
const REPLAY_TIMEOUT_MS = 1000;
/** Without a word from a publisher that sends heartbeats for this long, it counts as gone. */
export const DEFAULT_HEARTBEAT_TIMEOUT_MS = 10_000;

export interface KVEventSubscriberOptions {
  endpoint: string;
  replayEndpoint?: string | null;
  topic?: string;
  /** Every batch in sequence order: live, replayed, and the batches of a snapshot. */
  onBatch: (batch: KVEventBatch, seq: bigint) => void;
  /** Everything learnt from the publisher so far is stale (a restart, a resync, a silent publisher). */
  onReset?: () => void;
  /** See DEFAULT_HEARTBEAT_TIMEOUT_MS; 0 = never. Armed once a heartbeat was heard. */
  heartbeatTimeoutMs?: number;
}

export interface KVEventSubscriberStats {
  received: number;
  decodeErrors: number;
  resets: number;
  lastSeq: number;
  /** Empty batches heard (a publisher's heartbeats). */
  heartbeats: number;
  /** Snapshots applied, and how many of them came from a new publisher (its epoch changed). */
  snapshots: number;
  epochChanges: number;
  /** The epoch of the publisher followed (hex), once a snapshot said it. */
  epoch: string | null;
}

/** One snapshot as the replay socket answered it. */
interface Snapshot {
  resume: bigint;
  epoch: Buffer;
  payloads: Buffer[];
}

/**
 * Whether the batch numbered `seq` comes from a new publisher: its sequence went back below
 * what may still arrive twice (`dupFloor`), or it is the first batch since the connection to
 * the publisher dropped. The latter holds even when `seq` happens to continue the old sequence
 * (the new publisher got exactly that far before the reconnect): the sequence cannot tell, so a
 * same-publisher reconnect costs one reset and replay (one snapshot, with a snapshot
 * publisher) rather than a restart's stale entries being kept.
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
  /** Live messages, replays and resyncs run one at a time, in this chain. */
  #serial: Promise<unknown> = Promise.resolve();
  #received = 0;
  #decodeErrors = 0;
  #resets = 0;
  #heartbeats = 0;
  #snapshots = 0;
  #epochChanges = 0;
  /** null until a snapshot was asked for; false when the publisher serves none. */
  #servesSnapshots: boolean | null = null;
  #epoch: Buffer | null = null;
  /** The connection to the publisher dropped since the last reset: it may be a new process now. */
  #publisherLost = false;
  #lastHeardAt = Date.now();
  /** The silence was reported (the owner forgot); cleared by the next message. */
  #silent = false;
  readonly #watchdog: NodeJS.Timeout | null = null;

  private constructor(opts: KVEventSubscriberOptions, sub: zmq.Subscriber) {
    this.#opts = opts;
    this.#sub = sub;
    sub.events.on('disconnect', () => {
      this.#publisherLost = true;
    });
    const timeout = opts.heartbeatTimeoutMs ?? DEFAULT_HEARTBEAT_TIMEOUT_MS;
    if (timeout > 0) {
      this.#watchdog = setInterval(() => this.#checkHeartbeat(timeout), Math.max(1, timeout / 4));
      this.#watchdog.unref();
    }
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

  stats(): KVEventSubscriberStats {
    return {
      received: this.#received,
      decodeErrors: this.#decodeErrors,
      resets: this.#resets,
      lastSeq: Number(this.#last),
      heartbeats: this.#heartbeats,
      snapshots: this.#snapshots,
      epochChanges: this.#epochChanges,
      epoch: this.#epoch?.toString('hex') ?? null,
    };
  }

  /** Asks the replay socket for everything from `start` on (e.g. 0 to catch up after joining late). */
  replayFrom(start: bigint): Promise<void> {
    return this.#exclusive(async () => {
      await this.#replay(start, true);
    });
  }

  /**
   * Rebuilds the owner's view from the publisher's snapshot (what a router that starts late
   * does first). Without a snapshot (a publisher that serves none, or no answer), the owner
   * forgets and the replay buffer is read from 0 instead. True when a snapshot was applied.
   */
  resync(): Promise<boolean> {
    return this.#exclusive(async () => {
      if (await this.#resync('requested')) return true;
      this.#forget();
      await this.#replay(0n, true);
      return false;
    });
  }

  close(): Promise<void> {
    if (this.#watchdog) clearInterval(this.#watchdog);
    this.#sub.close();
    this.#dealer?.close();
    return this.#loop;
  }

  #exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#serial.then(fn, fn);
    this.#serial = next.catch(() => {});
    return next;
  }

  /** A publisher heard from before (heartbeats included) went silent: what it held may be gone. */
  #checkHeartbeat(timeoutMs: number): void {
    if (this.#heartbeats === 0 || this.#silent) return;
    if (Date.now() - this.#lastHeardAt < timeoutMs) return;
    this.#silent = true;
    this.#publisherLost = true;
    void this.#exclusive(async () => {
      log.warn(
        'No KV events or heartbeat from %s for %d ms: forgetting its blocks until it is heard again',
        this.#opts.endpoint,
        timeoutMs,
      );
      this.#resets++;
      this.#opts.onReset?.();
    });
  }

  async #run(): Promise<void> {
    try {
      for await (const frames of this.#sub) {
        if (frames.length !== 3) continue;
        this.#lastHeardAt = Date.now();
        this.#silent = false;
        await this.#exclusive(() => this.#onLive(frames[1] as Buffer, frames[2] as Buffer));
      }
    } catch (e) {
      if (!this.#sub.closed)
        log.error('KV event subscriber %s stopped: %s', this.#opts.endpoint, (e as Error).message);
    }
  }

  async #onLive(seqFrame: Buffer, payload: Buffer): Promise<void> {
    if (seqFrame.length !== 8) return;
    const seq = seqFrame.readBigUInt64BE();
    if (publisherRestarted(seq, this.#dupFloor, this.#publisherLost)) {
      this.#publisherLost = false;
      log.info(
        'KV event publisher %s may have restarted (sequence %s after %s)',
        this.#opts.endpoint,
        String(seq),
        String(this.#last),
      );
      if (await this.#resync('reconnect or restart')) {
        // The batch is in the snapshot (resume > seq), or comes after it.
        if (seq <= this.#last) return;
      } else {
        this.#forget();
      }
    } else if (seq <= this.#last) return;
    if (seq > this.#last + 1n) {
      const snapshots = this.#servesSnapshots !== false && !!this.#opts.replayEndpoint;
      // With snapshots, a replay that cannot close the gap is not applied: the snapshot is.
      if (!(await this.#replay(this.#last + 1n, !snapshots)) && snapshots) {
        log.info(
          'KV event gap from %s beyond the replay buffer (%s..%s)',
          this.#opts.endpoint,
          String(this.#last + 1n),
          String(seq - 1n),
        );
        if (await this.#resync('gap')) {
          if (seq <= this.#last) return;
        } else await this.#replay(this.#last + 1n, true);
      }
    }
    if (seq > this.#last) this.#deliver(payload, seq);
    if (seq === this.#last) this.#dupFloor = this.#last - 1n;
  }

  /** The owner forgets; the sequence starts over. */
  #forget(): void {
    this.#resets++;
    this.#last = -1n;
    this.#dupFloor = -1n;
    this.#opts.onReset?.();
  }

  /**
   * Replays from `start`, handing over what comes after what was seen. True when the buffer
   * still held `start` (the run continues what was seen without a hole); when it did not, the
   * batches are handed over only if `acceptHole`.
   */
  async #replay(start: bigint, acceptHole: boolean): Promise<boolean> {
    const endpoint = this.#opts.replayEndpoint;
    if (!endpoint) return false;
    const dealer = this.#dealerSocket(endpoint);
    const floor = this.#last;
    let covered: boolean | null = null;
    try {
      await dealer.send(['', seqBytes(start)]);
      while (true) {
        const [, seq, payload] = (await dealer.receive()) as [Buffer, Buffer, Buffer];
        if (seq.equals(END_SEQ)) break;
        const s = seq.readBigUInt64BE();
        covered ??= s <= start;
        if ((covered || acceptHole) && s > this.#last) this.#deliver(payload, s);
      }
      this.#dupFloor = floor;
    } catch (e) {
      this.#dropDealer(dealer, e);
    }
    return covered ?? false;
  }

  /** The snapshot; 'unsupported' when the publisher serves none; null when it refused or did not answer. */
  async #fetchSnapshot(): Promise<Snapshot | 'unsupported' | null> {
    const endpoint = this.#opts.replayEndpoint;
    if (!endpoint) return null;
    const dealer = this.#dealerSocket(endpoint);
    const payloads: Buffer[] = [];
    let resume: bigint | null = null;
    try {
      await dealer.send(['', SNAPSHOT_REQUEST]);
      while (true) {
        const frames = (await dealer.receive()) as Buffer[];
        // A publisher without snapshots reads the request as a replay from far ahead: the 3-frame end marker alone.
        if (frames.length === 3 && frames[1]!.equals(END_SEQ)) return 'unsupported';
        if (frames.length !== 4) throw new Error(`snapshot reply of ${frames.length} frames`);
        const [, , seq, payload] = frames as [Buffer, Buffer, Buffer, Buffer];
        if (seq.equals(END_SEQ)) {
          // Refused (its state is over its cap): no epoch.
          if (payload.length === 0 || resume === null) return null;
          return { resume, epoch: payload, payloads };
        }
        resume = seq.readBigUInt64BE();
        payloads.push(payload);
      }
    } catch (e) {
      this.#dropDealer(dealer, e);
      return null;
    }
  }

  /**
   * Forgets and applies the snapshot; the live stream goes on from its resume point. False,
   * with nothing changed, when the publisher serves no snapshot.
   */
  async #resync(why: string): Promise<boolean> {
    if (this.#servesSnapshots === false) return false;
    const snapshot = await this.#fetchSnapshot();
    if (snapshot === 'unsupported') {
      log.info('KV event publisher %s serves no snapshots: following it by replay only', this.#opts.endpoint);
      this.#servesSnapshots = false;
      return false;
    }
    if (!snapshot) return false;
    this.#servesSnapshots = true;
    this.#resets++;
    this.#opts.onReset?.();
    if (this.#epoch && !this.#epoch.equals(snapshot.epoch)) {
      this.#epochChanges++;
      log.info(
        'KV event publisher %s restarted (epoch %s, was %s)',
        this.#opts.endpoint,
        snapshot.epoch.toString('hex'),
        this.#epoch.toString('hex'),
      );
    }
    this.#epoch = snapshot.epoch;
    this.#snapshots++;
    this.#publisherLost = false;
    const at = snapshot.resume - 1n;
    for (const payload of snapshot.payloads) this.#deliver(payload, at);
    this.#last = at;
    log.info(
      'KV event state of %s rebuilt from a snapshot (%s: %d batches, resuming at %s)',
      this.#opts.endpoint,
      why,
      snapshot.payloads.length,
      String(snapshot.resume),
    );
    // What was published since is in the replay buffer; live batches below the resume point
    // that are still on their way are in the snapshot: skipped, not taken for a restart.
    await this.#replay(snapshot.resume, false);
    this.#dupFloor = -1n;
    return true;
  }

  #dealerSocket(endpoint: string): zmq.Dealer {
    if (!this.#dealer) {
      // A replay socket that went away must not hold a request forever (a DEALER waits for a peer).
      this.#dealer = new zmq.Dealer({
        linger: 0,
        sendTimeout: REPLAY_TIMEOUT_MS,
        receiveTimeout: REPLAY_TIMEOUT_MS,
        reconnectInterval: 100,
      });
      this.#dealer.connect(endpoint);
    }
    return this.#dealer;
  }

  /** A lost reply would desynchronise the next request/reply pair: start a fresh socket. */
  #dropDealer(dealer: zmq.Dealer, e: unknown): void {
    if (!dealer.closed)
      log.warn('KV event replay from %s failed: %s', this.#opts.replayEndpoint, (e as Error).message);
    dealer.close();
    if (this.#dealer === dealer) this.#dealer = null;
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
    if (batch.events.length === 0) this.#heartbeats++;
    this.#received++;
    this.#opts.onBatch(batch, seq);
  }
}
