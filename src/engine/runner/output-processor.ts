/**
 * Turns the scheduler's per-step EngineCoreOutputs into the public RequestOutputDeltas
 * (vLLM's OutputProcessor): incremental detokenization and stop strings. A stop string
 * ends the request (the engine aborts it in the scheduler as FINISHED_STOPPED) and is not
 * part of the returned text. Text that could still become a stop string, or that ends in an
 * incomplete UTF-8 sequence, is held back until it is decided.
 */
import type { KVTransferParams } from '../../connector/types.ts';
import { IncrementalText } from '../../tokenizer/detokenizer.ts';
import type { RequestOutputDelta, SamplingParams, TokenizerLike } from '../api.ts';
import type { EngineCoreOutput } from '../scheduler/types.ts';

interface TextState {
  sampling: SamplingParams;
  tokenIds: number[];
  /** The text of the visible tokens, decoded a few tokens at a time. */
  text: IncrementalText;
  /** Characters already streamed. */
  emitted: number;
  maxStopLength: number;
  /** Set once a stop string matched: the final text length. */
  stoppedAt: number | null;
}

export interface ProcessedOutput {
  delta: RequestOutputDelta;
  /** A stop string matched: the caller must finish the request in the scheduler. */
  stopStringMatched: boolean;
}

export class OutputProcessor {
  readonly #tokenizer: TokenizerLike;
  readonly #states = new Map<string, TextState>();

  constructor(tokenizer: TokenizerLike) {
    this.#tokenizer = tokenizer;
  }

  addRequest(requestId: string, sampling: SamplingParams): void {
    this.#states.set(requestId, {
      sampling,
      tokenIds: [],
      text: new IncrementalText(this.#tokenizer),
      emitted: 0,
      maxStopLength: Math.max(0, ...sampling.stop.map((s) => s.length)),
      stoppedAt: null,
    });
  }

  has(requestId: string): boolean {
    return this.#states.has(requestId);
  }

  removeRequest(requestId: string): void {
    this.#states.delete(requestId);
  }

  process(out: EngineCoreOutput): ProcessedOutput {
    const state = this.#states.get(out.requestId);
    if (!state) throw new Error(`OutputProcessor: unknown request ${out.requestId}`);
    let newTokenIds = out.newTokenIds;
    let logprobs = out.logprobs;
    let topLogprobs = out.topLogprobs;
    let stopStringMatched = false;
    let stopReason: string | number | null = out.stopTokenId;
    let finished = out.finished;
    let finishReason = out.finishReason;
    let text = '';
    for (let i = 0; i < out.newTokenIds.length; i++) {
      state.tokenIds.push(out.newTokenIds[i] as number);
      text = state.text.textOf(this.#visibleTokens(state, out, finished));
      // vLLM checks stop strings only once min_tokens were generated.
      const stop =
        state.tokenIds.length > (state.sampling.minTokens ?? 0)
          ? findStop(text, state.sampling.stop, Math.max(0, state.emitted - state.maxStopLength))
          : null;
      if (stop !== null) {
        state.stoppedAt = stop.at;
        stopReason = stop.stop;
        stopStringMatched = !out.finished;
        finished = true;
        finishReason = 'stop';
        newTokenIds = out.newTokenIds.slice(0, i + 1);
        logprobs = logprobs?.slice(0, i + 1) ?? null;
        topLogprobs = topLogprobs?.slice(0, i + 1) ?? null;
        break;
      }
    }
    if (out.newTokenIds.length === 0) text = state.text.textOf(this.#visibleTokens(state, out, finished));
    const end = finished ? (state.stoppedAt ?? text.length) : safeEnd(text, state.maxStopLength);
    const newText = end > state.emitted ? text.slice(state.emitted, end) : '';
    state.emitted = Math.max(state.emitted, end);
    if (finished) this.#states.delete(out.requestId);
    const delta: RequestOutputDelta = {
      requestId: out.requestId,
      newTokenIds,
      newText,
      logprobs,
      topLogprobs,
      finished,
      finishReason,
      kvTransferParams: (out.kvTransferParams ?? null) as KVTransferParams | null,
      // The scheduler's copy, made for this output.
      metrics: out.metrics,
    };
    if (out.promptLogprobs) delta.promptLogprobs = out.promptLogprobs;
    if (finished && finishReason === 'stop') delta.stopReason = stopReason;
    if (out.error) delta.error = out.error;
    return { delta, stopStringMatched };
  }

  /** A stop token (not EOS) stays out of the text, as vLLM does by default. */
  #visibleTokens(state: TextState, out: EngineCoreOutput, finished: boolean): number[] {
    const ids = state.tokenIds;
    const last = ids[ids.length - 1];
    const isStopToken =
      finished &&
      last !== undefined &&
      ((out.stopTokenId !== null && last === out.stopTokenId) ||
        (!state.sampling.ignoreEos && last === this.#tokenizer.eosTokenId));
    return isStopToken ? ids.slice(0, -1) : ids;
  }
}

/** The earliest stop string (searching from `from`) and where it starts, or null. */
function findStop(text: string, stops: readonly string[], from: number): { at: number; stop: string } | null {
  let best: { at: number; stop: string } | null = null;
  for (const stop of stops) {
    if (stop.length === 0) continue;
    const at = text.indexOf(stop, from);
    if (at >= 0 && (best === null || at < best.at)) best = { at, stop };
  }
  return best;
}

/** How much of `text` is safe to stream: not a possible stop-string prefix, no partial character. */
function safeEnd(text: string, maxStopLength: number): number {
  let end = text.length - Math.max(0, maxStopLength - 1);
  while (end > 0 && text.charCodeAt(end - 1) === 0xfffd) end--;
  return Math.max(0, end);
}
