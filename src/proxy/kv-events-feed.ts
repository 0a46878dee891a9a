/**
 * Subscribes the proxy to every backend's KV events and keeps the block index current. The
 * publisher's address comes from the backend's GET /kvconnect/info (`kv_events`, kvconnect
 * servers) or from `--kv-events URL=ENDPOINT` (vLLM servers, which do not say where they
 * publish). A wildcard bind address (`*`, 0.0.0.0, ::) is replaced by the backend's host.
 * The subscriber rebuilds the backend's blocks from its publisher's snapshot when it joins
 * (a proxy started late) and whenever the stream says its view is stale: a gap beyond the
 * replay buffer, a publisher restart (a new epoch), a silent publisher
 * (../kv-events/subscriber.ts); a publisher that serves no snapshot (vLLM) is caught up from
 * its replay buffer instead. After new endpoints in its /kvconnect/info (read on every health
 * round) or an unhealthy spell its entries are dropped. BlockStored also
 * settles the prefill ledger's tickets (the routed prompts that were still to compute).
 */

import { KVEventSubscriber, type KVEventSubscriberStats } from '../kv-events/subscriber.ts';
import type { KVEventBatch } from '../kv-events/wire.ts';
import { getLogger } from '../logging/logger.ts';
import { bracketHost } from '../util/host.ts';
import type { Backend } from './backend.ts';
import type { KvBlockIndex } from './kv-index.ts';
import { PrefillLedger } from './prefill-ledger.ts';

const log = getLogger('kvconnect.proxy.kv-events-feed');

export interface KvEventsSource {
  endpoint: string;
  replayEndpoint: string | null;
  topic: string;
  blockSize: number;
  hashAlgo: string;
}

export interface KvEventsDefaults {
  /** backend URL → publisher endpoint, for backends that do not report one. */
  endpoints: ReadonlyMap<string, string>;
  blockSize: number;
  hashAlgo: string;
}

/** `tcp://*:5557` or `tcp://0.0.0.0:5557` as published by `host`. */
export function reachableEndpoint(endpoint: string, host: string): string {
  return endpoint.replace(/^tcp:\/\/(\*|0\.0\.0\.0|\[::\]|::)(?=:\d+$)/, `tcp://${bracketHost(host)}`);
}

function sameSource(a: KvEventsSource, b: KvEventsSource): boolean {
  return a.endpoint === b.endpoint && a.replayEndpoint === b.replayEndpoint && a.topic === b.topic;
}

export class KvEventsFeed {
  readonly index: KvBlockIndex;
  readonly ledger = new PrefillLedger();
  readonly #defaults: KvEventsDefaults;
  readonly #subs = new Map<string, { sub: KVEventSubscriber; source: KvEventsSource }>();

  constructor(index: KvBlockIndex, defaults: KvEventsDefaults) {
    this.index = index;
    this.#defaults = defaults;
  }

  /** Where `backend` publishes, if known: the publisher followed (whose blocks the index holds), else the one reported. */
  sourceOf(backend: Backend): KvEventsSource | null {
    return this.#subs.get(backend.url)?.source ?? this.#reported(backend);
  }

  /** Where `backend`'s /kvconnect/info or --kv-events says it publishes. */
  #reported(backend: Backend): KvEventsSource | null {
    const info = backend.info?.kv_events;
    const endpoint = info?.endpoint ?? this.#defaults.endpoints.get(backend.url);
    if (!endpoint) return null;
    const replay = info?.replay_endpoint ?? null;
    return {
      endpoint: reachableEndpoint(endpoint, backend.host),
      replayEndpoint: replay ? reachableEndpoint(replay, backend.host) : null,
      topic: info?.topic ?? '',
      blockSize: info?.block_size ?? this.#defaults.blockSize,
      hashAlgo: info?.prefix_caching_hash_algo ?? this.#defaults.hashAlgo,
    };
  }

  /**
   * Starts following `backend`; a no-op when its publisher is unknown or already followed. When
   * it now publishes somewhere else (restarted on other ports), what it held is forgotten and
   * the new publisher followed.
   */
  attach(backend: Backend): void {
    const source = this.#reported(backend);
    if (!source) return;
    const url = backend.url;
    const followed = this.#subs.get(url);
    if (followed) {
      if (sameSource(followed.source, source)) return;
      log.info('%s now publishes KV events on %s (was %s)', url, source.endpoint, followed.source.endpoint);
      this.#subs.delete(url);
      void followed.sub.close();
      this.forget(backend);
    }
    // A publisher no longer followed (replaced above) may still hand over a batch: drop it.
    const current = () => this.#subs.get(url)?.sub === sub;
    const sub = KVEventSubscriber.start({
      endpoint: source.endpoint,
      replayEndpoint: source.replayEndpoint,
      topic: source.topic,
      onBatch: (batch) => {
        if (current()) this.apply(url, batch);
      },
      onReset: () => {
        if (current()) this.forget(backend);
      },
    });
    this.#subs.set(url, { sub, source });
    log.info('following KV events of %s on %s', url, source.endpoint);
    void sub.resync();
  }

  /** How the subscription to `url`'s events fares (snapshots, heartbeats, epoch), if followed. */
  subscriberStats(url: string): KVEventSubscriberStats | null {
    return this.#subs.get(url)?.sub.stats() ?? null;
  }

  /** One batch of `url`'s events: what it holds, and which routed prompts it has prefilled. */
  apply(url: string, batch: KVEventBatch): void {
    this.index.apply(url, batch);
    for (const e of batch.events) if (e.type === 'BlockStored') this.ledger.stored(url, e.blockHashes);
  }

  /** The backend stopped answering: what it held may be gone (a restart empties the cache). */
  forget(backend: Backend): void {
    this.index.clear(backend.url);
    this.ledger.clear(backend.url);
  }

  async close(): Promise<void> {
    await Promise.all([...this.#subs.values()].map(({ sub }) => sub.close()));
    this.#subs.clear();
  }
}
