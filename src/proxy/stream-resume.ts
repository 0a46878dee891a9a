/**
 * Resuming a stream whose decode instance failed mid-way (docs/proxy.md#failover).
 *
 * The decode leg of a resumable stream is sent with vLLM's `return_token_ids`, so every
 * chunk names the token ids it carries and the first one the prompt's ids. StreamSplice
 * reads the events on their way to the client: it records those ids, removes them when the
 * client did not ask for them, and holds back the events that carry no token (a chat
 * stream's role chunk) so that a leg failing before its first token is retried, not resumed.
 * After a failure it builds the continuation: a streamed `/v1/completions` request whose
 * prompt is the original prompt's token ids plus the ids already sent, with the sampling
 * parameters of the client and the remaining `max_tokens`. A chat stream continues through
 * the completions endpoint too: the prompt ids are the chat template's rendering the server
 * reported, so the continuation sees exactly the tokens an uninterrupted run would have.
 * Its chunks are rewritten into the original stream (id, created, model, object, chat
 * deltas, logprob text offsets, usage), so the client reads one response.
 */
import type { Json } from './request-shaping.ts';

/** Keys of a chat body that mean the same in a completions body. */
const SAMPLING_KEYS = [
  'model',
  'temperature',
  'top_p',
  'top_k',
  'min_p',
  'seed',
  'stop',
  'stop_token_ids',
  'ignore_eos',
  'presence_penalty',
  'frequency_penalty',
  'repetition_penalty',
  'logit_bias',
  'allowed_token_ids',
  'bad_words',
  'skip_special_tokens',
  'spaces_between_special_tokens',
  'include_stop_str_in_output',
  'stream_options',
  'cache_salt',
  'user',
  'return_tokens_as_token_ids',
] as const;

/** A grammar's state or several choices cannot be carried into a continuation. */
const NOT_RESUMABLE_KEYS = [
  'response_format',
  'guided_json',
  'guided_regex',
  'guided_choice',
  'guided_grammar',
  'structured_outputs',
  'tools',
  'best_of',
] as const;

const COMPLETIONS_DEFAULT_MAX_TOKENS = 16;

export type StreamKind = 'completion' | 'chat';

/** Penalties that count only output tokens: a continuation sees the sent tokens as prompt. */
const OUTPUT_PENALTY_KEYS = ['presence_penalty', 'frequency_penalty'] as const;

/**
 * Why a stream of this body cannot be resumed, or null when it can: several choices or
 * prompts (each choice is its own stream), a grammar or tools (the server's parser state
 * cannot be carried over), chat logprobs (the completions endpoint names each token by its
 * text in a dict; the chat shape's ordered entries and bytes cannot be rebuilt exactly from
 * it), or a presence or frequency penalty (they count only output tokens, so the
 * continuation would sample from other logits, greedy included). Such a stream is failed
 * over only before its first event reaches the client.
 */
export function notResumable(kind: StreamKind, body: Json): string | null {
  if (body['stream'] !== true) return 'not streamed';
  const n = body['n'];
  if (n !== undefined && n !== null && n !== 1) return 'n > 1';
  for (const key of NOT_RESUMABLE_KEYS) {
    if (body[key] !== undefined && body[key] !== null) return `${key} is set`;
  }
  if (kind === 'chat' && body['logprobs'] === true) return 'chat logprobs';
  const prompt = body['prompt'];
  if (kind === 'completion' && Array.isArray(prompt) && prompt.some((p) => typeof p !== 'number'))
    return 'several prompts';
  for (const key of OUTPUT_PENALTY_KEYS) {
    const value = body[key];
    if (typeof value === 'number' && value !== 0) return `${key} is set`;
  }
  return null;
}

/** The body the decode leg of a resumable stream is sent (the client's plus return_token_ids). */
export function withTokenIds(body: Json): Json {
  return body['return_token_ids'] === true ? body : { ...body, return_token_ids: true };
}

/** The error an SSE event carries (a server ending its stream on a failure), or null. */
export function eventError(event: Json): { code: string | undefined; message: string } | null {
  const error = event['error'] as { kvconnect_code?: unknown; message?: unknown } | undefined;
  if (!error || typeof error !== 'object') return null;
  return {
    code: typeof error.kvconnect_code === 'string' ? error.kvconnect_code : undefined,
    message: typeof error.message === 'string' ? error.message : JSON.stringify(error),
  };
}

/** What one upstream event means for the client stream. */
export type SpliceStep =
  | { kind: 'forward'; events: string[] }
  | { kind: 'hold' }
  | { kind: 'error'; code: string | undefined; message: string }
  | { kind: 'done' };

interface Head {
  id: unknown;
  created: unknown;
  model: unknown;
}

export class StreamSplice {
  readonly kind: StreamKind;
  readonly #body: Json;
  readonly #clientWantsIds: boolean;
  #promptIds: number[] | null = null;
  readonly #emitted: number[] = [];
  /** Ids of held chunks: tokens whose text the server holds back (part of a character). */
  #pendingIds: number[] = [];
  #textLength = 0;
  #head: Head | null = null;
  #held: string[] = [];
  #sent = false;
  #finished = false;
  #tracked = true;
  #continuation = false;

  constructor(kind: StreamKind, body: Json) {
    this.kind = kind;
    this.#body = body;
    this.#clientWantsIds = body['return_token_ids'] === true;
  }

  /** Whether any event reached the client (from then on a failure is resumed, not retried). */
  get started(): boolean {
    return this.#sent;
  }

  get finished(): boolean {
    return this.#finished;
  }

  /** Token ids sent to the client so far. */
  get emitted(): readonly number[] {
    return this.#emitted;
  }

  /** A leg failed before anything reached the client: forget what it sent. */
  reset(): void {
    if (this.#sent) return;
    this.#held = [];
    this.#pendingIds = [];
    this.#promptIds = null;
    this.#head = null;
    this.#emitted.length = 0;
    this.#textLength = 0;
  }

  /** The next events come from a continuation (a /v1/completions stream). */
  beginContinuation(): void {
    this.#continuation = true;
    this.#held = [];
    this.#pendingIds = [];
  }

  /** One upstream event's `data:` payload. */
  accept(data: string): SpliceStep {
    if (data === '[DONE]') return { kind: 'done' };
    let event: Json;
    try {
      event = JSON.parse(data) as Json;
    } catch {
      this.#tracked = false;
      return this.#forward(data, true);
    }
    const error = eventError(event);
    if (error) return { kind: 'error', ...error };
    const choices = Array.isArray(event['choices']) ? (event['choices'] as Json[]) : [];
    const choice = choices[0];
    if (choice === undefined) {
      const out = this.#continuation ? { ...event, ...this.#identity(event) } : event;
      this.#rewriteUsage(out);
      return this.#forward(JSON.stringify(out), true);
    }
    if (!this.#continuation) this.#readOriginal(event, choice);
    const ids = choice['token_ids'];
    const hasText = textOf(choice).length > 0;
    if (Array.isArray(ids)) this.#pendingIds.push(...(ids as number[]));
    else if (hasText) this.#tracked = false;
    if (choice['finish_reason'] !== null && choice['finish_reason'] !== undefined) this.#finished = true;
    // A chunk is sent once its text is whole: a token that ends inside a character (text held
    // back by the server) waits with its chunk, and is generated again if the leg fails first.
    const carries = hasText || this.#finished;
    if (carries) {
      this.#emitted.push(...this.#pendingIds);
      this.#pendingIds = [];
    }
    const out = this.#continuation ? this.#rewrite(event, choice) : event;
    if (!this.#clientWantsIds) stripIds(out);
    this.#rewriteUsage(out);
    return this.#forward(JSON.stringify(out), carries);
  }

  /**
   * The continuation's body, or why there is none (the server did not report token ids,
   * or no prompt ids arrived). `maxModelLen` bounds a chat request sent without max tokens.
   */
  continuation(maxModelLen: number | null): { body: Json } | { why: string } {
    if (!this.#tracked) return { why: 'the decode server did not report the token ids of its chunks' };
    if (this.#promptIds === null) return { why: 'the decode server did not report the prompt token ids' };
    const prompt = [...this.#promptIds, ...this.#emitted];
    const requested =
      this.kind === 'completion'
        ? numberOr(this.#body['max_tokens'], COMPLETIONS_DEFAULT_MAX_TOKENS)
        : numberOr(this.#body['max_completion_tokens'] ?? this.#body['max_tokens'], null);
    const limit = requested ?? (maxModelLen === null ? null : maxModelLen - this.#promptIds.length);
    if (limit === null) return { why: "the decode server's max_model_len is unknown" };
    const remaining = limit - this.#emitted.length;
    if (remaining < 1) return { why: 'no tokens remain' };
    const base: Json = {};
    if (this.kind === 'completion') Object.assign(base, this.#body);
    else for (const key of SAMPLING_KEYS) if (this.#body[key] !== undefined) base[key] = this.#body[key];
    for (const key of ['kv_transfer_params', 'echo', 'max_completion_tokens', 'n', 'suffix', 'min_tokens'])
      delete base[key];
    // min_tokens holds back EOS and stop tokens while the output is shorter: what is left of it.
    const minTokens = numberOr(this.#body['min_tokens'], 0) - this.#emitted.length;
    if (minTokens > 0) base['min_tokens'] = minTokens;
    return {
      body: { ...base, prompt, max_tokens: remaining, stream: true, return_token_ids: true },
    };
  }

  /** The events held back, for a stream that ends without a token (e.g. max_tokens reached). */
  flushHeld(): string[] {
    const held = this.#held;
    this.#held = [];
    this.#emitted.push(...this.#pendingIds);
    this.#pendingIds = [];
    if (held.length > 0) this.#sent = true;
    return held;
  }

  #forward(json: string, carries: boolean): SpliceStep {
    const event = `data: ${json}\n\n`;
    if (!carries) {
      this.#held.push(event);
      return { kind: 'hold' };
    }
    const events = [...this.#held, event];
    this.#held = [];
    this.#sent = true;
    return { kind: 'forward', events };
  }

  /** The original stream's id, created and model, and the prompt's ids (first chunk). */
  #readOriginal(event: Json, choice: Json): void {
    this.#head ??= { id: event['id'], created: event['created'], model: event['model'] };
    const prompt = this.kind === 'chat' ? event['prompt_token_ids'] : choice['prompt_token_ids'];
    if (this.#promptIds === null && Array.isArray(prompt)) this.#promptIds = prompt as number[];
    this.#textLength += textOf(choice).length;
  }

  /** The original stream's id, object, created and model, for a continuation's event. */
  #identity(event: Json): Json {
    const head = this.#head ?? { id: event['id'], created: event['created'], model: event['model'] };
    const object = this.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    return { id: head.id, object, created: head.created, model: head.model };
  }

  /** A continuation chunk (completions shape) in the shape and identity of the original stream. */
  #rewrite(event: Json, choice: Json): Json {
    const text = textOf(choice);
    const head = this.#identity(event);
    const finish = choice['finish_reason'] ?? null;
    const ids = choice['token_ids'];
    const idsField = Array.isArray(ids) ? { token_ids: ids } : {};
    let out: Json;
    if (this.kind === 'chat') {
      out = {
        ...head,
        choices: [
          {
            index: 0,
            delta: text === '' && finish !== null ? {} : { content: text },
            logprobs: null,
            finish_reason: finish,
            stop_reason: choice['stop_reason'] ?? null,
            ...idsField,
          },
        ],
      };
    } else {
      const logprobs = choice['logprobs'] as { text_offset?: unknown } | null | undefined;
      if (logprobs && Array.isArray(logprobs.text_offset)) {
        logprobs.text_offset = (logprobs.text_offset as number[]).map((o) => o + this.#textLength);
      }
      const { prompt_token_ids: _ignored, ...rest } = choice;
      out = {
        ...event,
        id: head.id,
        created: head.created,
        model: head.model,
        choices: [{ ...rest, index: 0 }],
      };
    }
    if (event['usage'] !== undefined) out['usage'] = event['usage'];
    this.#textLength += text.length;
    return out;
  }

  /** Usage after a resume counts the original prompt and every token the client got. */
  #rewriteUsage(event: Json): void {
    if (!this.#continuation || event['usage'] === undefined || event['usage'] === null) return;
    if (this.#promptIds === null) return;
    const prompt = this.#promptIds.length;
    const completion = this.#emitted.length;
    event['usage'] = {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
    };
  }
}

function textOf(choice: Json): string {
  const text = choice['text'] ?? (choice['delta'] as Json | undefined)?.['content'];
  return typeof text === 'string' ? text : '';
}

function numberOr<T>(value: unknown, fallback: T): number | T {
  return typeof value === 'number' && Number.isFinite(value) ? value : fallback;
}

function stripIds(event: Json): void {
  delete event['prompt_token_ids'];
  for (const c of Array.isArray(event['choices']) ? (event['choices'] as Json[]) : []) {
    delete c['token_ids'];
    delete c['prompt_token_ids'];
  }
}
