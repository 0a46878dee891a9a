/**
 * One client completion served despite a backend that dies (docs/proxy.md#failover):
 *
 * - the prefill leg runs on a prefill instance; if it fails it is sent to another one, and
 *   when none is left the request falls back to a decode instance alone (local prefill);
 * - the decode leg's answer reaches the client only once it is usable (./decode-relay.ts);
 *   a leg that fails before that is sent to another decode instance: with the same
 *   kv_transfer_params after the first decode instance vanished (refused, reset, cut: P
 *   still leases the blocks, unless that instance already read them), else after running
 *   the prefill leg again;
 * - a stream that fails after its first token is continued on another decode instance
 *   (./stream-resume.ts).
 *
 * Every retry draws on the request's RetryBudget; a backend that failed is not tried
 * again by the same request, except a decode instance whose only fault was a failed KV
 * load (the KV, not the instance, was gone).
 */
import type { ServerResponse } from 'node:http';
import { isDeepStrictEqual } from 'node:util';
import { getLogger } from '../logging/logger.ts';
import { paramsAheadOf } from '../wire/index.ts';
import type { Backend } from './backend.ts';
import type { BackendPool } from './backend-pool.ts';
import { type ConversationKvCache, KvParamsTap } from './conversation-cache.ts';
import { ClientOut, type RelayOutcome, relayDecode } from './decode-relay.ts';
import { type FlowPlan, planFlow } from './flow-plan.ts';
import { kvCacheSourceOf, withDecodeOnlySourcePull } from './offloading-flow.ts';
import type { RouteContext, RoutingPolicy } from './policies.ts';
import { noBackend, upstreamBadResponse, upstreamUnreachable } from './proxy-errors.ts';
import type { FallbackReason, ProxyMetrics, RetryReason } from './proxy-metrics.ts';
import type { Json } from './request-shaping.ts';
import { RetryBudget } from './retry-budget.ts';
import { notResumable, StreamSplice, withTokenIds } from './stream-resume.ts';
import type { ProxyOptions } from './types.ts';
import type { InfoListener, Upstream, UpstreamResponse } from './upstream.ts';
import { relayError, sendLeg } from './upstream-legs.ts';

const log = getLogger('kvconnect.proxy.failover');

export interface FailoverDeps {
  pool: BackendPool;
  /** D's kept KV per conversation_id, for the next turn's prefill (./conversation-cache.ts). */
  conversations: ConversationKvCache;
  policy: RoutingPolicy;
  upstream: Upstream;
  options: ProxyOptions;
  metrics: ProxyMetrics;
}

export interface ClientRequest {
  path: string;
  body: Json;
  requestId: string;
  /** Headers every leg carries (the client's Authorization). */
  headers: Record<string, string>;
  ctx: RouteContext;
  /** The client's x-kv-cache-source-host-port header (OffloadingConnector peer pulls). */
  kvCacheSource?: string | undefined;
  /** Aborted when the client leaves. */
  signal: AbortSignal;
  /** The client's conversation_id (taken out of the body), or null. */
  conversationId: string | null;
  res: ServerResponse;
}

/** Why a prefill leg failed: a fallback reason that is also a retry reason. */
type PrefillFailure = Exclude<FallbackReason, 'no_prefill'>;

/** A prefill leg's end: the decode leg to run, the client answered (or gone), or a failure. */
type PrefillResult =
  | { kind: 'ok'; leg: DecodeLeg }
  | { kind: 'answered' }
  | { kind: 'failed'; reason: PrefillFailure; why: string; status?: number; text?: string; error?: unknown };

/** Where the decode leg goes next: P's answer to reuse, or a decode instance alone. */
type DecodeSource =
  | { kind: 'prefilled'; plan: FlowPlan; params: Json | null }
  | { kind: 'local'; body: Json; headers: Record<string, string> };

/** A decode leg sent on P's kv_transfer_params ahead (NIXL pull), before P answered. */
interface AheadLeg {
  params: Json;
  response: Promise<UpstreamResponse>;
  abort: AbortController;
}

/** A decode leg under way (concurrent flows start it with the prefill leg). */
interface DecodeLeg {
  decode: Backend;
  response: Promise<UpstreamResponse>;
  source: DecodeSource;
}

/**
 * The connector a backend reported. Until its /kvconnect/info has been read it is taken to run
 * vLLM's default, NixlConnector; a connector without a P/D flow is refused by planFlow.
 */
function connectorOf(backend: Backend): string {
  return backend.info?.connector ?? 'NixlConnector';
}

export class RequestFailover {
  readonly #deps: FailoverDeps;
  readonly #r: ClientRequest;
  readonly #budget: RetryBudget;
  readonly #splice: StreamSplice | null;
  /** The body decode legs start from: the client's, plus return_token_ids for a resumable stream. */
  readonly #decodeBody: Json;
  readonly #out: ClientOut;
  /** D's params from this conversation's previous turn, for the prefill leg. */
  readonly #turnParams: Json | null;
  readonly #failedPrefill = new Set<Backend>();
  readonly #failedDecode = new Set<Backend>();
  #local: { reason: FallbackReason | null; why: string } | null = null;
  /** How the request is served (a resumed stream keeps its first flow). */
  #flow: 'disaggregated' | 'decode_only' = 'disaggregated';

  constructor(deps: FailoverDeps, r: ClientRequest) {
    this.#deps = deps;
    this.#r = r;
    this.#budget = new RetryBudget(deps.options, deps.metrics, r.requestId);
    const kind = r.path.endsWith('/chat/completions') ? 'chat' : 'completion';
    const why = deps.options.streamResume ? notResumable(kind, r.body) : 'resuming is off';
    this.#splice = why === null ? new StreamSplice(kind, r.body) : null;
    this.#decodeBody = this.#splice ? withTokenIds(r.body) : r.body;
    const conversation = r.conversationId;
    this.#turnParams = conversation === null ? null : deps.conversations.take(conversation);
    const tap =
      conversation === null ? null : new KvParamsTap((p) => deps.conversations.put(conversation, p));
    this.#out = new ClientOut(r.res, r.requestId, tap);
  }

  async serve(): Promise<void> {
    const { pool, options } = this.#deps;
    if (this.#prefills().length === 0) {
      if (!options.prefillFallback) throw noBackend('prefill');
      // No prefill instance at all is a deployment without disaggregation, not a fallback.
      const none = pool.all('prefill').length === 0;
      this.#fallBack(none ? null : 'no_prefill', 'no healthy prefill instance');
    }
    let source: DecodeSource | null = this.#local ? this.#localSource() : null;
    for (;;) {
      let leg: DecodeLeg | null;
      if (source === null) {
        leg = await this.#prefill();
        if (leg === null) return; // answered (P's client error), or the client left
      } else {
        const decode = this.#pickDecode();
        leg = { decode, response: this.#sendDecode(decode, source), source };
      }
      this.#flow = leg.source.kind === 'local' ? 'decode_only' : 'disaggregated';
      const outcome = await this.#decodeAttempt(leg);
      if (outcome.ok || this.#r.signal.aborted) return;
      if (this.#splice?.started) {
        await this.#resume(leg.decode, outcome);
        return;
      }
      this.#splice?.reset();
      if (outcome.reason !== 'kv_load') this.#failedDecode.add(leg.decode);
      const another = this.#deps.pool.candidates('decode', this.#failedDecode).length > 0;
      if (!another || !this.#budget.take('decode', outcome.reason, leg.decode, outcome.why)) {
        await this.#giveUp(leg.decode, outcome);
        return;
      }
      source = this.#nextSource(leg.source, outcome.reason);
    }
  }

  /** After a failed decode leg: reuse P's answer while its lease can hold, else prefill again. */
  #nextSource(previous: DecodeSource, reason: RetryReason): DecodeSource | null {
    if (previous.kind === 'local') return previous;
    const vanished = reason === 'connect' || reason === 'interrupted';
    if (previous.plan.concurrent || !vanished || previous.params === null) return null;
    return previous;
  }

  /**
   * The prefill instances this request may still try: the healthy ones; when every one is
   * marked down, those too (panic routing), so a restarted server is used by the first
   * request that reaches it. Without the fallback, every request tries them before answering
   * 503. With it, a request that finds one refusing falls back to local prefill, but a down
   * instance may also be a host that does not answer at all (a connect timeout before the
   * fallback): so only one request at a time tries each, and the others fall back at once.
   */
  #prefills(): Backend[] {
    const { pool, options } = this.#deps;
    const candidates = pool.candidates('prefill', this.#failedPrefill);
    if (!options.prefillFallback) return candidates;
    return candidates.filter((b) => b.healthy || !b.trial);
  }

  /** A decode-only request's body: with a named source peer, the decode instance pulls from it. */
  #localBody(body: Json, decode: Backend): Json {
    const { p2pConnectorPort } = this.#deps.options;
    const src = kvCacheSourceOf(this.#r.kvCacheSource, this.#backends(), p2pConnectorPort);
    return withDecodeOnlySourcePull(body, this.#r.requestId, src, decode, p2pConnectorPort);
  }

  #backends(): Backend[] {
    return [...this.#deps.pool.all('prefill'), ...this.#deps.pool.all('decode')];
  }

  #localSource(): DecodeSource {
    return { kind: 'local', body: this.#decodeBody, headers: { 'x-request-id': this.#r.requestId } };
  }

  #fallBack(reason: FallbackReason | null, why: string): void {
    this.#local = { reason, why };
    if (reason !== null) this.#deps.metrics.fallbacks.inc({ reason });
  }

  /**
   * The decode instance of the next leg, counted in flight from now (least_loaded must see it
   * while the prefill leg runs) until #decodeAttempt ends, or the leg is given up before it.
   */
  #pickDecode(): Backend {
    const decodes = this.#deps.pool.candidates('decode', this.#failedDecode);
    if (decodes.length === 0) throw noBackend('decode');
    const decode = this.#deps.policy.select('decode', decodes, this.#r.ctx);
    decode.inFlight += 1;
    return decode;
  }

  #send(
    backend: Backend,
    path: string,
    body: Json,
    headers: Record<string, string>,
    signal: AbortSignal = this.#r.signal,
    onInfo?: InfoListener,
  ): Promise<UpstreamResponse> {
    return sendLeg(
      this.#deps,
      `${backend.url}${path}`,
      backend,
      body,
      { ...this.#r.headers, ...headers },
      signal,
      this.#r.signal,
      onInfo,
    );
  }

  #sendDecode(decode: Backend, source: DecodeSource): Promise<UpstreamResponse> {
    const response =
      source.kind === 'local'
        ? this.#send(decode, this.#r.path, this.#localBody(source.body, decode), source.headers)
        : this.#send(decode, this.#r.path, source.plan.decodeBody(source.params), source.plan.decodeHeaders);
    response.catch(() => undefined);
    return response;
  }

  /**
   * The prefill leg on one prefill instance after another; returns the decode leg to run,
   * or null when the request was answered here. Falls back to a decode instance alone when
   * no prefill instance is left (or the retries are spent).
   */
  async #prefill(): Promise<DecodeLeg | null> {
    const { policy, options } = this.#deps;
    for (;;) {
      if (this.#local) {
        const source = this.#localSource();
        const decode = this.#pickDecode();
        log.warn(
          'request %s served by decode %s alone (local prefill): %s',
          this.#r.requestId,
          decode.url,
          this.#local.why,
        );
        return { decode, response: this.#sendDecode(decode, source), source };
      }
      const prefills = this.#prefills();
      if (prefills.length === 0) {
        // Every prefill instance is down and another request is trying the one left.
        if (!options.prefillFallback) throw noBackend('prefill');
        this.#fallBack('no_prefill', 'no healthy prefill instance');
        continue;
      }
      const prefill = policy.select('prefill', prefills, this.#r.ctx);
      const decode = this.#pickDecode();
      const trial = !prefill.healthy && options.prefillFallback;
      if (trial) prefill.trial = true;
      const result = await this.#planAndPrefill(prefill, decode)
        .catch((e: unknown) => {
          decode.inFlight -= 1;
          throw e;
        })
        .finally(() => {
          if (trial) prefill.trial = false;
        });
      if (result.kind !== 'ok') decode.inFlight -= 1;
      if (result.kind === 'answered') return null;
      if (result.kind === 'ok') return result.leg;
      this.#failedPrefill.add(prefill);
      log.warn('prefill %s failed for request %s (%s)', prefill.url, this.#r.requestId, result.why);
      const another = this.#prefills().length > 0;
      if (another && this.#budget.take('prefill', result.reason, prefill, result.why)) continue;
      if (!options.prefillFallback) {
        if (result.status !== undefined) relayError(this.#r.res, result.status, result.text ?? '', prefill);
        else throw result.error;
        return null;
      }
      this.#fallBack(result.reason, `prefill ${prefill.url} ${result.why}`);
    }
  }

  /** Plans the flow of the connector for this pair and runs its prefill leg. */
  async #planAndPrefill(prefill: Backend, decode: Backend): Promise<PrefillResult> {
    const { options } = this.#deps;
    const connector = options.kvConnector ?? connectorOf(prefill);
    if (options.kvConnector === undefined && connectorOf(decode) !== connector) {
      log.warnOnce(
        'prefill %s runs %s but decode %s runs %s; using the prefill flow',
        prefill.url,
        connector,
        decode.url,
        connectorOf(decode),
      );
    }
    const plan = planFlow({
      connector,
      body: this.#decodeBody,
      prefill,
      decode,
      requestId: this.#r.requestId,
      push: options.push,
      moriioMode: options.moriioMode,
      moriioDecrementMaxTokens: options.moriioDecrementMaxTokens,
      p2pConnectorPort: options.p2pConnectorPort,
      kvCacheSource: kvCacheSourceOf(this.#r.kvCacheSource, this.#backends(), options.p2pConnectorPort),
      turnParams: this.#turnParams,
      paramsAhead: options.paramsAhead,
    });
    return this.#prefillLeg(prefill, decode, plan);
  }

  async #prefillLeg(prefill: Backend, decode: Backend, plan: FlowPlan): Promise<PrefillResult> {
    const { options } = this.#deps;
    const prefillAbort = new AbortController();
    const decodeAbort = new AbortController();
    const source: DecodeSource = { kind: 'prefilled', plan, params: null };
    const signal = AbortSignal.any([
      this.#r.signal,
      prefillAbort.signal,
      AbortSignal.timeout(options.prefillTimeoutMs),
    ]);
    const failed = (
      reason: PrefillFailure,
      why: string,
      extra: { status?: number; text?: string; error?: unknown } = {},
    ) => {
      prefillAbort.abort(new Error('prefill given up'));
      decodeAbort.abort(new Error('prefill failed'));
      return { kind: 'failed' as const, reason, why, ...extra };
    };
    // NIXL pull with params ahead: D is sent when P announces its kv_transfer_params (a 103
    // before its prefill runs), and kept if P's answer carries the same ones.
    let ahead: AheadLeg | null = null;
    const onInfo: InfoListener | undefined = plan.paramsAhead
      ? (info) => {
          const params = ahead === null && info.statusCode === 103 ? paramsAheadOf(info.headers) : null;
          if (params === null) return;
          const abort = new AbortController();
          const response = this.#send(
            decode,
            this.#r.path,
            plan.decodeBody(params),
            plan.decodeHeaders,
            AbortSignal.any([this.#r.signal, decodeAbort.signal, abort.signal]),
          );
          response.catch(() => undefined);
          ahead = { params, response, abort };
        }
      : undefined;
    prefill.inFlight += 1;
    // P first: its prefill is the longer leg, and D (sent right after in the concurrent flows)
    // has until P's prefill ends to be admitted and registered.
    const prefilled = this.#send(
      prefill,
      this.#r.path,
      plan.prefillBody,
      plan.prefillHeaders,
      signal,
      onInfo,
    );
    const concurrent = plan.concurrent
      ? this.#send(
          decode,
          this.#r.path,
          plan.decodeBody(null),
          plan.decodeHeaders,
          AbortSignal.any([this.#r.signal, decodeAbort.signal]),
        )
      : null;
    concurrent?.catch(() => undefined);
    try {
      let text: string;
      let status: number;
      try {
        const res = await prefilled;
        status = res.status;
        text = await res.body.text();
      } catch (e) {
        if (this.#r.signal.aborted) {
          decodeAbort.abort(new Error('client left'));
          return { kind: 'answered' };
        }
        if (signal.aborted) {
          return failed('timeout', `no answer within ${options.prefillTimeoutMs} ms`, { error: e });
        }
        return failed('connect', (e as Error).message, { error: e });
      }
      if (status >= 500) return failed('status', `answered ${status}`, { status, text });
      if (status !== 200) {
        decodeAbort.abort(new Error('prefill failed'));
        relayError(this.#r.res, status, text, prefill);
        return { kind: 'answered' };
      }
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        const error = upstreamBadResponse('prefill', prefill.url, 'the body is not JSON');
        return failed('bad_response', 'sent a body that is not JSON', { error });
      }
      const returned = (json as { kv_transfer_params?: unknown } | null)?.kv_transfer_params;
      const params = typeof returned === 'object' && returned !== null ? (returned as Json) : null;
      if (params === null && !plan.concurrent) {
        log.warnOnce(
          'prefill %s returned no kv_transfer_params; decode will recompute the prompt',
          prefill.url,
        );
      }
      source.params = params;
      return {
        kind: 'ok',
        leg: {
          decode,
          response: concurrent ?? this.#aheadResponse(ahead, params) ?? this.#sendDecode(decode, source),
          source,
        },
      };
    } finally {
      prefill.inFlight -= 1;
    }
  }

  /**
   * The decode leg sent on P's params ahead, if P answered the same params; else that leg is
   * aborted (D frees what it allocated) and null is returned, for D to be sent P's answer.
   */
  #aheadResponse(ahead: AheadLeg | null, params: Json | null): Promise<UpstreamResponse> | null {
    if (ahead === null) return null;
    if (params !== null && isDeepStrictEqual(params, ahead.params)) return ahead.response;
    log.warn(
      'request %s: prefill answered other kv_transfer_params than it announced ahead; sending decode again',
      this.#r.requestId,
    );
    ahead.abort.abort(new Error('prefill answered other kv_transfer_params'));
    return null;
  }

  /** Sends (or awaits) the decode leg and relays its answer. */
  async #decodeAttempt(leg: DecodeLeg): Promise<RelayOutcome> {
    try {
      let up: UpstreamResponse;
      try {
        up = await leg.response;
      } catch (e) {
        return { ok: false, reason: 'connect', why: (e as Error).message };
      }
      const outcome = await relayDecode(up, this.#out, this.#splice);
      if (outcome.ok) {
        this.#deps.metrics.requests.inc({ flow: this.#flow });
      } else if (outcome.reason === 'interrupted' && !this.#r.signal.aborted) {
        this.#deps.pool.markDown(leg.decode, outcome.why);
      }
      return outcome;
    } finally {
      leg.decode.inFlight -= 1;
    }
  }

  /** The stream broke after its first token: continue it on other decode instances. */
  async #resume(failed: Backend, first: Extract<RelayOutcome, { ok: false }>): Promise<void> {
    const splice = this.#splice!;
    let from = failed;
    let outcome: Extract<RelayOutcome, { ok: false }> = first;
    for (let k = 1; ; k++) {
      this.#failedDecode.add(from);
      if (!this.#budget.take('resume', outcome.reason, from, outcome.why)) break;
      if (this.#deps.pool.candidates('decode', this.#failedDecode).length === 0) {
        log.warn('request %s: no other decode instance to continue its stream on', this.#r.requestId);
        break;
      }
      const decode = this.#pickDecode();
      const next = splice.continuation(await this.#maxModelLen(decode));
      if ('why' in next) {
        decode.inFlight -= 1;
        log.warn('request %s: its stream cannot be continued: %s', this.#r.requestId, next.why);
        break;
      }
      splice.beginContinuation();
      const response = this.#send(decode, '/v1/completions', next.body, {
        'x-request-id': `${this.#r.requestId}-resume-${k}`,
      });
      response.catch(() => undefined);
      const result = await this.#decodeAttempt({ decode, response, source: this.#localSource() });
      if (result.ok || this.#r.signal.aborted) return;
      from = decode;
      outcome = result;
    }
    if (!this.#out.gone) {
      await this.#out.failStream(upstreamUnreachable('decode', from.url, new Error(outcome.why)));
    }
  }

  /** A chat stream sent without max tokens continues up to the decode server's max_model_len. */
  async #maxModelLen(decode: Backend): Promise<number | null> {
    try {
      const { json } = await this.#deps.upstream.getJson(`${decode.url}/v1/models`, 5_000);
      const len = (json as { data?: Array<{ max_model_len?: unknown }> } | null)?.data?.[0]?.max_model_len;
      return typeof len === 'number' ? len : null;
    } catch {
      return null;
    }
  }

  /**
   * No retry left for a decode leg that failed before its first byte: its error status and
   * body as they came, else 502 (503 when no decode instance could be reached at all).
   */
  async #giveUp(decode: Backend, outcome: Extract<RelayOutcome, { ok: false }>): Promise<void> {
    if (outcome.status !== undefined) {
      relayError(this.#r.res, outcome.status, outcome.text ?? '', decode);
      return;
    }
    // Every decode instance was down and the panic attempts found none either.
    const none = outcome.reason === 'connect' && this.#deps.pool.healthy('decode').length === 0;
    const error = none
      ? noBackend('decode')
      : upstreamUnreachable('decode', decode.url, new Error(outcome.why));
    throw error; // nothing reached the client yet: an HTTP error status
  }
}
