/**
 * The model runner of one tensor-parallel rank: applies the scheduler output to its request
 * state, drives the worker-side connector hooks around the forward pass in vLLM's order, and
 * samples the next token of every sequence whose last known token was computed this step.
 *
 * With tp > 1 every rank samples: the all-reduce gives every rank bit-identical logits and
 * the generators advance identically, so all ranks agree on every token without a broadcast
 * (the executor returns rank 0's tokens).
 */
import type { KVConnectorBase } from '../../connector/base.ts';
import type { PagedKVMemory } from '../../kv/interfaces.ts';
import type { SamplingParams } from '../api.ts';
import {
  type ForwardBatch,
  type ForwardHooks,
  type ForwardModel,
  logitsRows,
  type SequenceInBatch,
} from '../model/forward-batch.ts';
import { SeededRandom } from '../model/prng.ts';
import type { ModelRunnerOutput, RunnerInput } from '../runner-io.ts';
import { needsLogitsProcessing, processLogits } from '../sampler/logits-processors.ts';
import type { SampledToken } from '../sampler/sampler.ts';
import { positionLogprobs } from '../sampler/sampler.ts';
import type { StructuredOutputBackend } from '../structured/backend.ts';
import type { RequestGrammar } from '../structured/matcher.ts';
import { WorkerConnectorSteps } from './connector-steps.ts';
import { type RunnerRequestState, RunnerRequestStates, runnerError } from './request-states.ts';

/** Samples one token from one row of logits (adapter over src/engine/sampler). */
export interface TokenSampler {
  /** `processed`: the row after logits processing, sampled from; logprobs come from `logits`. */
  sample(
    logits: Float32Array,
    params: SamplingParams,
    rng: SeededRandom,
    processed?: Float32Array | null,
  ): SampledToken;
}

export interface ModelRunnerParts {
  model: ForwardModel;
  kv: PagedKVMemory;
  connector: KVConnectorBase | null;
  sampler: TokenSampler;
  vocabSize: number;
  /** Engine seed: requests without their own seed draw from one generator seeded with it. */
  seed: number;
  allReduce?: (x: Float32Array) => void | Promise<void>;
  /** Emulation without weights: the token each completed sequence gets instead of sampling. */
  nextToken?: (reqId: string) => number;
  /** Applies requests' structured-output constraints (absent: a constrained request is an error). */
  structured?: StructuredOutputBackend;
}

export class ModelRunner {
  readonly kv: PagedKVMemory;
  readonly connector: KVConnectorBase | null;
  readonly #model: ForwardModel;
  readonly #sampler: TokenSampler;
  readonly #vocabSize: number;
  readonly #connectorSteps: WorkerConnectorSteps | null;
  readonly #allReduce: ((x: Float32Array) => void | Promise<void>) | undefined;
  readonly #nextToken: ((reqId: string) => number) | undefined;
  readonly #states = new RunnerRequestStates();
  readonly structured: StructuredOutputBackend | null;
  /** Grammar state of the running requests with a structured-output constraint. */
  readonly #grammars = new Map<string, RequestGrammar>();
  readonly #generators = new Map<string, SeededRandom>();
  readonly #sharedGenerator: SeededRandom;
  /** Block size of each KV cache group (which blocks a step fills). */
  readonly #blockSizes: number[];

  constructor(parts: ModelRunnerParts) {
    this.#model = parts.model;
    this.kv = parts.kv;
    this.#blockSizes = parts.kv.kvCacheConfig.groups.map((g) => g.spec.blockSize);
    this.connector = parts.connector;
    this.#sampler = parts.sampler;
    this.#vocabSize = parts.vocabSize;
    this.#allReduce = parts.allReduce;
    this.#nextToken = parts.nextToken;
    this.structured = parts.structured ?? null;
    this.#connectorSteps = parts.connector ? new WorkerConnectorSteps(parts.connector) : null;
    this.#sharedGenerator = new SeededRandom(parts.seed);
  }

  /** Number of requests whose state the runner holds (running or preempted). */
  get numRequests(): number {
    return this.#states.size;
  }

  async execute(input: RunnerInput): Promise<ModelRunnerOutput> {
    const out = input.schedulerOutput;
    const steps = this.#connectorSteps;
    if (steps) await steps.handlePreemptions(out);
    for (const id of out.finishedReqIds) {
      this.#generators.delete(id);
      this.#grammars.get(id)?.dispose();
      this.#grammars.delete(id);
    }
    const scheduled = this.#states.update(out, input.newRequestSampling, input.newRequestLora);
    const hasForward = out.totalNumScheduledTokens > 0;
    const result: ModelRunnerOutput = {
      reqIds: [],
      sampledTokenIds: [],
      logprobs: [],
      topLogprobs: [],
      kvConnectorOutput: null,
    };
    if (steps) {
      steps.blocksAllocated(out);
      await steps.beginStep(out, hasForward);
    }
    try {
      if (hasForward) await this.#forwardAndSample(scheduled, steps, result);
    } catch (e) {
      this.connector?.clearConnectorMetadata();
      throw e;
    }
    if (steps) result.kvConnectorOutput = await steps.endStep(out, hasForward);
    return result;
  }

  async #forwardAndSample(
    scheduled: RunnerRequestState[],
    steps: WorkerConnectorSteps | null,
    result: ModelRunnerOutput,
  ): Promise<void> {
    const running = scheduled.filter((s) => s.numScheduledTokens > 0);
    const batch = buildForwardBatch(running);
    const hooks: ForwardHooks = steps ? steps.forwardHooks() : {};
    if (this.#allReduce) hooks.allReduce = this.#allReduce;
    const logits = await this.#model.forward(batch, this.kv, hooks);
    steps?.blocksFilled(running, this.#blockSizes);
    let row = 0;
    for (const [k, state] of running.entries()) {
      const sequence = batch.sequences[k] as SequenceInBatch;
      const rows = logitsRows(sequence);
      if (sequence.allLogits) this.#scorePrompt(state, logits, row, rows);
      row += rows;
      result.reqIds.push(state.reqId);
      const completes = RunnerRequestStates.completesSequence(state);
      // The prompt's logprobs travel with the first sampled token, once.
      const sendPrompt =
        completes && state.promptLogprobs !== null && state.tokenIds.length === state.numPromptTokens;
      if (state.promptLogprobs !== null) {
        result.promptLogprobs ??= [];
        result.promptLogprobs[k] = sendPrompt ? state.promptLogprobs : null;
      }
      if (!completes) {
        result.sampledTokenIds.push([]);
        result.logprobs.push(null);
        result.topLogprobs.push(null);
        continue;
      }
      const rowLogits = logits.subarray((row - 1) * this.#vocabSize, row * this.#vocabSize);
      // Only a grammar makes sampling wait (for its mask): the others sample synchronously.
      const token = this.#nextToken
        ? { tokenId: this.#nextToken(state.reqId), logprob: 0, topLogprobs: null }
        : state.sampling.structuredOutputs
          ? await this.#sampleConstrained(state, rowLogits)
          : this.#sampler.sample(
              rowLogits,
              state.sampling,
              this.#generatorFor(state),
              this.#processed(state, rowLogits),
            );
      RunnerRequestStates.appendSampled(state, token.tokenId);
      const wantsLogprobs = state.sampling.logprobs !== null;
      result.sampledTokenIds.push([token.tokenId]);
      result.logprobs.push(wantsLogprobs ? [token.logprob ?? 0] : null);
      result.topLogprobs.push(wantsLogprobs ? [token.topLogprobs ?? []] : null);
    }
  }

  /** The row after the request's logits processors, or null when it has none. */
  #processed(state: RunnerRequestState, rowLogits: Float32Array): Float32Array | null {
    if (!needsLogitsProcessing(state.sampling)) return null;
    return processLogits(rowLogits, state.sampling, {
      promptTokenIds: state.tokenIds.slice(0, state.numPromptTokens),
      outputTokenIds: outputTokenIds(state),
    });
  }

  /**
   * Samples a request with a structured-output constraint: after its logits processors, its
   * grammar's mask applies, and the grammar then advances past the token.
   */
  async #sampleConstrained(state: RunnerRequestState, rowLogits: Float32Array): Promise<SampledToken> {
    let processed = this.#processed(state, rowLogits);
    const grammar = await this.#grammarFor(state);
    if (grammar && !grammar.terminated) {
      const mask = await grammar.nextMask();
      processed ??= Float32Array.from(rowLogits);
      grammar.maskLogits(processed, mask);
    }
    const token = this.#sampler.sample(rowLogits, state.sampling, this.#generatorFor(state), processed);
    grammar?.accept(token.tokenId);
    return token;
  }

  /** Logprobs of the prompt tokens these rows predict (row i predicts the token after position from + i). */
  #scorePrompt(state: RunnerRequestState, logits: Float32Array, firstRow: number, rows: number): void {
    const lp = state.promptLogprobs;
    if (lp === null) return;
    const from = state.numComputedTokens + state.numScheduledTokens - rows;
    for (let i = 0; i < rows; i++) {
      const target = from + i + 1;
      if (target >= state.numPromptTokens) break;
      const row = logits.subarray((firstRow + i) * this.#vocabSize, (firstRow + i + 1) * this.#vocabSize);
      lp[target] = positionLogprobs(
        row,
        state.tokenIds[target] as number,
        state.sampling.promptLogprobs ?? 0,
      );
    }
  }

  /** The request's grammar state, created on its first sampled token (past any output it has). */
  async #grammarFor(state: RunnerRequestState): Promise<RequestGrammar | null> {
    const params = state.sampling.structuredOutputs;
    if (!params) return null;
    let grammar = this.#grammars.get(state.reqId);
    if (!grammar) {
      if (!this.structured)
        throw runnerError(
          `Request ${state.reqId} has a structured-output constraint but this runner has no grammar backend`,
        );
      grammar = await this.structured.matcher(params, outputTokenIds(state));
      this.#grammars.set(state.reqId, grammar);
    }
    return grammar;
  }

  #generatorFor(state: RunnerRequestState): SeededRandom {
    const seed = state.sampling.seed;
    if (seed === null) return this.#sharedGenerator;
    let rng = this.#generators.get(state.reqId);
    if (!rng) {
      rng = new SeededRandom(seed);
      this.#generators.set(state.reqId, rng);
    }
    return rng;
  }

  async shutdown(): Promise<void> {
    await this.connector?.shutdown();
  }
}

/** The forward batch of the scheduled requests: their new tokens, back to back. */
/**
 * The request's output tokens up to this step's end (a copy: built only for a logits
 * processor or a new grammar, not on every decode step).
 */
function outputTokenIds(state: RunnerRequestState): number[] {
  return state.tokenIds.slice(state.numPromptTokens, state.numComputedTokens + state.numScheduledTokens);
}

export function buildForwardBatch(running: readonly RunnerRequestState[]): ForwardBatch {
  const total = running.reduce((n, s) => n + s.numScheduledTokens, 0);
  const tokenIds = new Int32Array(total);
  const sequences: SequenceInBatch[] = [];
  let start = 0;
  for (const state of running) {
    const from = state.numComputedTokens;
    const to = from + state.numScheduledTokens;
    if (to > state.tokenIds.length) {
      throw runnerError(
        `Request ${state.reqId} is scheduled up to token ${to} but only ${state.tokenIds.length} tokens are known`,
      );
    }
    for (let i = from; i < to; i++) tokenIds[start + i - from] = state.tokenIds[i] as number;
    sequences.push({
      start,
      len: state.numScheduledTokens,
      numComputedTokens: from,
      blockTables: state.blockTables,
      computeLogits: RunnerRequestStates.completesSequence(state),
      allLogits: RunnerRequestStates.scoresPrompt(state),
      lora: state.lora ?? null,
    });
    start += state.numScheduledTokens;
  }
  return { tokenIds, sequences };
}
