/**
 * What one engine step actually ran, as a step-time model needs it: per scheduled sequence
 * the tokens computed, the context they attend to and whether the step completes its prompt
 * or one more output token. Built from the SchedulerOutput right after schedule() (which has
 * already advanced each request's computed-token count).
 */
import type { SchedulerOutput } from '../../connector/types.ts';

export interface ScheduledSeq {
  reqId: string;
  /** Tokens computed for this sequence in this step. */
  numNewTokens: number;
  /** Tokens already in the KV cache before this step (cached prefix included). */
  contextBefore: number;
  numPromptTokens: number;
  /** Prompt tokens found in a prefix cache (local or through a connector) at first scheduling. */
  numCachedPromptTokens: number;
  /** First step of the request (its prefill starts here). */
  firstChunk: boolean;
  /** The step samples the request's first output token. */
  firstToken: boolean;
  /** The step samples one more output token (a decode, or the end of a recomputation). */
  decode: boolean;
  /** The request arrived with do_remote_prefill: its prompt KV came from a prefill server. */
  remotePrefill: boolean;
}

export interface StepBatch {
  seqs: ScheduledSeq[];
  /** The engine's max-num-seqs (the sim's load factor scales up to it). */
  maxNumSeqs: number;
}

/** The scheduler's view of one request, as the batch builder reads it. */
export interface BatchRequestView {
  numComputedTokens: number;
  numTokens: number;
  numPromptTokens: number;
  numOutputTokens: number;
  metrics: { numCachedTokens: number };
}

export function buildStepBatch(
  out: SchedulerOutput,
  lookup: (reqId: string) => BatchRequestView | undefined,
  isRemotePrefill: (reqId: string) => boolean,
  maxNumSeqs: number,
): StepBatch {
  const fresh = new Set(out.scheduledNewReqs.map((r) => r.reqId));
  const seqs: ScheduledSeq[] = [];
  for (const [reqId, n] of Object.entries(out.numScheduledTokens)) {
    const req = lookup(reqId);
    if (!req || n <= 0) continue;
    const samples = req.numComputedTokens >= req.numTokens;
    const contextBefore = req.numComputedTokens - n;
    seqs.push({
      reqId,
      numNewTokens: n,
      contextBefore,
      numPromptTokens: req.numPromptTokens,
      numCachedPromptTokens: req.metrics.numCachedTokens,
      firstChunk: fresh.has(reqId),
      firstToken: samples && req.numOutputTokens === 0,
      decode: samples && req.numOutputTokens > 0,
      remotePrefill: isRemotePrefill(reqId),
    });
  }
  return { seqs, maxNumSeqs };
}

/** Maps the batch a step ran to the step's duration in (emulated) milliseconds. */
export interface StepTimeModel {
  readonly name: string;
  stepMs(batch: StepBatch): number;
}

/** A scheduled sequence described by hand (benchmarks, tests): a one-token step unless overridden. */
export function scheduledSeq(over: Partial<ScheduledSeq> = {}): ScheduledSeq {
  return {
    reqId: 'seq',
    numNewTokens: 1,
    contextBefore: 0,
    numPromptTokens: 256,
    numCachedPromptTokens: 0,
    firstChunk: false,
    firstToken: false,
    decode: false,
    remotePrefill: false,
    ...over,
  };
}
