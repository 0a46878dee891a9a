/**
 * Multi-turn reuse of the decode instance's KV (NixlConnector with bidirectional_kv_xfer,
 * docs/proxy.md#multi-turn-conversation_id), as vLLM's multi-turn P/D proxy does it: a
 * request that names a `conversation_id` (a top-level body field, not forwarded to the
 * engines) has the kv_transfer_params D returned at the end of its previous turn sent to P
 * with the next turn, so P READs the earlier turns' KV back from D instead of computing it.
 * An entry is used once and expires after CONVERSATION_TTL_MS, kept below D's default
 * decoder_kv_blocks_ttl (480 s) so P is not sent blocks D has already freed.
 */
import { LruMap } from '../util/lru-map.ts';
import type { Json } from './request-shaping.ts';
import { SseSplitter } from './sse.ts';

/** vLLM's proxy keeps an entry 450 s: less than D's default TTL of 480 s. */
export const CONVERSATION_TTL_MS = 450_000;
/** At most this many conversations are remembered; the oldest go first. */
export const MAX_CONVERSATIONS = 100_000;

/** Removes `conversation_id` from the client's body; returns it when it is a non-empty string. */
export function takeConversationId(body: Json): string | null {
  const id = body['conversation_id'];
  delete body['conversation_id'];
  return typeof id === 'string' && id !== '' ? id : null;
}

export class ConversationKvCache {
  readonly #entries: LruMap<string, { params: Json; at: number }>;
  readonly #ttlMs: number;

  constructor(ttlMs = CONVERSATION_TTL_MS, max = MAX_CONVERSATIONS) {
    this.#ttlMs = ttlMs;
    this.#entries = new LruMap(max);
  }

  get size(): number {
    return this.#entries.size;
  }

  /** D's params of the conversation's previous turn (single use), or null when none or stale. */
  take(conversationId: string, now = Date.now()): Json | null {
    const e = this.#entries.get(conversationId);
    this.#entries.delete(conversationId);
    return e && now - e.at <= this.#ttlMs ? { ...e.params } : null;
  }

  /** Remembers D's returned params when they name blocks D kept (do_remote_decode). */
  put(conversationId: string, params: Json, now = Date.now()): void {
    if (params['do_remote_decode'] !== true) return;
    this.#entries.set(conversationId, { params: { ...params }, at: now });
  }
}

/** The prefill leg's params of a turn: D's kept blocks to READ back, as vLLM's proxy sends them. */
export function turnPrefillParams(previous: Json): Json {
  return { ...previous, do_remote_decode: true, do_remote_prefill: false };
}

/**
 * Reads the kv_transfer_params of a decode answer as it passes to the client: a whole JSON
 * body, the chunks of a stream passed through as they come (split here, only an incomplete
 * event held), or the events of a stream the relay splits itself.
 */
export class KvParamsTap {
  readonly #onParams: (params: Json) => void;
  #events: SseSplitter | null = null;

  constructor(onParams: (params: Json) => void) {
    this.#onParams = onParams;
  }

  whole(body: Uint8Array): void {
    this.#found(Buffer.from(body).toString());
  }

  /** A chunk of a stream passed through byte for byte: cut anywhere. */
  chunk(bytes: Uint8Array): void {
    this.#events ??= new SseSplitter();
    for (const data of this.#events.push(bytes)) this.#found(data);
  }

  /** The data payload of one event of a stream the relay splits (./sse.ts). */
  event(data: string): void {
    this.#found(data);
  }

  #found(json: string): void {
    if (!json.includes('"kv_transfer_params"')) return;
    try {
      const params = (JSON.parse(json) as { kv_transfer_params?: unknown }).kv_transfer_params;
      if (typeof params === 'object' && params !== null && !Array.isArray(params))
        this.#onParams(params as Json);
    } catch {
      // Not JSON: nothing to remember.
    }
  }
}
