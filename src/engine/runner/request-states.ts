/**
 * The model runner's view of the requests it runs (vLLM's CachedRequestState): token ids,
 * block tables per KV cache group and the computed-token count. The scheduler output is
 * authoritative: numComputedTokens is taken from it every step, so a truncation after
 * invalid blocks or a preemption is followed exactly.
 */
import type { SchedulerOutput } from '../../connector/types.ts';
import { KVError } from '../../errors/kv-error.ts';
import type { PositionLogprobs, SamplingParams } from '../api.ts';
import type { LoRARequest } from '../lora/lora-request.ts';

export interface RunnerRequestState {
  readonly reqId: string;
  /** Prompt plus sampled tokens as far as the runner knows them. */
  tokenIds: number[];
  blockTables: number[][];
  /** Tokens in the KV cache before the current step (from the scheduler). */
  numComputedTokens: number;
  /** Tokens scheduled in the current step. */
  numScheduledTokens: number;
  sampling: SamplingParams;
  /** True if the previous step sampled a token for this request. */
  sampledInLastStep: boolean;
  readonly numPromptTokens: number;
  /** With sampling.promptLogprobs: each prompt position's logprobs as computed (null until then). */
  promptLogprobs: (PositionLogprobs | null)[] | null;
  /** The adapter this request runs with, null for the base model. */
  lora?: LoRARequest | null;
}

export class RunnerRequestStates {
  readonly #states = new Map<string, RunnerRequestState>();

  get size(): number {
    return this.#states.size;
  }

  get(reqId: string): RunnerRequestState | undefined {
    return this.#states.get(reqId);
  }

  /**
   * Applies one scheduler output and returns the scheduled requests in batch order
   * (new requests first, then running ones, as the scheduler lists them).
   */
  update(
    out: SchedulerOutput,
    newRequestSampling: Record<string, SamplingParams>,
    newRequestLora: Record<string, LoRARequest> = {},
  ): RunnerRequestState[] {
    for (const id of out.finishedReqIds) this.#states.delete(id);
    const scheduled: RunnerRequestState[] = [];
    for (const req of out.scheduledNewReqs) {
      const previous = this.#states.get(req.reqId);
      const sampling = newRequestSampling[req.reqId] ?? previous?.sampling;
      if (!sampling) throw runnerError(`No sampling parameters for new request ${req.reqId}`);
      const state: RunnerRequestState = {
        reqId: req.reqId,
        tokenIds: [...req.promptTokenIds],
        blockTables: req.blockIds.map((ids) => [...ids]),
        numComputedTokens: req.numComputedTokens,
        numScheduledTokens: out.numScheduledTokens[req.reqId] ?? 0,
        sampling,
        sampledInLastStep: false,
        lora: newRequestLora[req.reqId] ?? previous?.lora ?? null,
        numPromptTokens: req.promptTokenIds.length,
        promptLogprobs:
          (sampling.promptLogprobs ?? null) === null
            ? null
            : (previous?.promptLogprobs ??
              new Array<PositionLogprobs | null>(req.promptTokenIds.length).fill(null)),
      };
      this.#states.set(req.reqId, state);
      scheduled.push(state);
    }
    const cached = out.scheduledCachedReqs;
    cached.reqIds.forEach((reqId, i) => {
      const state = this.#states.get(reqId);
      if (!state) throw runnerError(`Scheduled request ${reqId} is unknown to the model runner`);
      const numComputed = cached.numComputedTokens[i] ?? state.numComputedTokens;
      const newBlocks = cached.newBlockIds[i] ?? null;
      if (cached.resumedFromPreemption[i]) {
        const tokens = cached.newTokenIds[i];
        if (tokens && tokens.length > 0) state.tokenIds = [...tokens];
        state.blockTables = newBlocks ? newBlocks.map((ids) => [...ids]) : state.blockTables.map(() => []);
      } else {
        const expected = state.numComputedTokens + state.numScheduledTokens;
        // The scheduler rolled the request back (invalid blocks): the token sampled last step was discarded.
        if (numComputed < expected && state.sampledInLastStep) state.tokenIds.length = expected;
        if (newBlocks) {
          newBlocks.forEach((ids, g) => {
            state.blockTables[g]?.push(...ids);
          });
        }
      }
      state.numComputedTokens = numComputed;
      state.numScheduledTokens = out.numScheduledTokens[reqId] ?? 0;
      state.sampledInLastStep = false;
      scheduled.push(state);
    });
    return scheduled;
  }

  /** True when this step computes the request's last known token, so a new one is sampled. */
  static completesSequence(state: RunnerRequestState): boolean {
    return state.numComputedTokens + state.numScheduledTokens >= state.tokenIds.length;
  }

  /** True when this step computes prompt positions whose logprobs are still wanted. */
  static scoresPrompt(state: RunnerRequestState): boolean {
    return state.promptLogprobs !== null && state.numComputedTokens < state.numPromptTokens - 1;
  }

  /** Appends a sampled token right after the tokens computed this step. */
  static appendSampled(state: RunnerRequestState, tokenId: number): void {
    state.tokenIds.length = state.numComputedTokens + state.numScheduledTokens;
    state.tokenIds.push(tokenId);
    state.sampledInLastStep = true;
  }
}

export function runnerError(message: string): KVError {
  return new KVError('KV_RUNNER_STATE_INVALID', message, {
    hint: 'The scheduler and the model runner disagree about a request; this is a bug, please report it with the request id.',
  });
}
