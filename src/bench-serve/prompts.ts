/**
 * Synthetic prompts. There is no tokenizer in the load generator, so a "token" is one
 * short word from a fixed vocabulary followed by a space; real token counts depend on the
 * model's tokenizer and are read back from the server's `usage` when it sends it.
 */

import { mulberry32 } from '../util/mulberry32.ts';
import { TRACE_BLOCK_TOKENS, type TraceEntry } from './trace.ts';

const VOCAB =
  'the of and to in is was for on as with by at from his her an that which or are this be had not but were have they one all their been has more when who will no if out so said what up its about into than them can only other new some could time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people how too little state good very make world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three'.split(
    ' ',
  );

export function words(count: number, rand: () => number): string {
  const out: string[] = [];
  for (let i = 0; i < count; i++) out.push(VOCAB[Math.floor(rand() * VOCAB.length)]!);
  return out.length > 0 ? `${out.join(' ')} ` : '';
}

export interface PlannedRequest {
  prompt: string;
  /** Intended prompt length in "tokens" (words). */
  promptLen: number;
  maxTokens: number;
  /** Offset from the start of the run, or null to send as soon as allowed. */
  arrivalMs: number | null;
}

/** Lengths drawn uniformly in [len*(1-ratio), len*(1+ratio)], at least 1. */
function drawLength(len: number, ratio: number, rand: () => number): number {
  const lo = Math.max(1, Math.floor(len * (1 - ratio)));
  const hi = Math.max(lo, Math.ceil(len * (1 + ratio)));
  return lo + Math.floor(rand() * (hi - lo + 1));
}

export function randomRequests(
  count: number,
  inputLen: number,
  outputLen: number,
  rangeRatio: number,
  seed: number,
): PlannedRequest[] {
  const rand = mulberry32(seed);
  return Array.from({ length: count }, () => {
    const promptLen = drawLength(inputLen, rangeRatio, rand);
    return {
      prompt: words(promptLen, rand),
      promptLen,
      maxTokens: drawLength(outputLen, rangeRatio, rand),
      arrivalMs: null,
    };
  });
}

export interface TraceReplayOptions {
  /** Tokens per hash block in the replay (the trace's own blocks are 512 tokens). */
  blockTokens: number;
  /** Multiplies timestamps (0.1 replays ten times faster). */
  timeScale: number;
  maxRequests: number;
  maxOutputLen?: number;
}

/**
 * Replays trace entries: each hash id becomes `blockTokens` words generated from the id
 * alone, so equal ids give equal text and shared prefixes survive; the prompt is cut to
 * the scaled input length.
 */
export function traceRequests(entries: readonly TraceEntry[], opts: TraceReplayOptions): PlannedRequest[] {
  const blocks = new Map<number, string[]>();
  const blockWords = (id: number): string[] => {
    let b = blocks.get(id);
    if (!b) {
      b = words(opts.blockTokens, mulberry32(id * 2654435761 + 1))
        .trimEnd()
        .split(' ');
      blocks.set(id, b);
    }
    return b;
  };
  const scale = opts.blockTokens / TRACE_BLOCK_TOKENS;
  return entries.slice(0, opts.maxRequests).map((e) => {
    const promptLen = Math.max(1, Math.ceil(e.inputLength * scale));
    const all: string[] = [];
    for (const id of e.hashIds) {
      if (all.length >= promptLen) break;
      all.push(...blockWords(id));
    }
    const filler = mulberry32(e.line);
    while (all.length < promptLen) all.push(words(1, filler).trim());
    const out = Math.max(1, e.outputLength);
    return {
      prompt: `${all.slice(0, promptLen).join(' ')} `,
      promptLen,
      maxTokens: opts.maxOutputLen === undefined ? out : Math.min(out, opts.maxOutputLen),
      arrivalMs: e.timestampMs * opts.timeScale,
    };
  });
}
