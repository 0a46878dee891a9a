/**
 * Builds a scheduler on the real KV cache manager (src/kv) with the recording connector,
 * and plays the model runner's part: for every scheduled request that reaches the end of
 * its known tokens it "samples" a token that is a pure function of the token sequence, so
 * a recomputed request must continue exactly as it would have.
 */

import { buildEngineConfig } from '../../../../src/config/engine-config.ts';
import type { KVLoadFailurePolicy } from '../../../../src/config/types.ts';
import type { KVConnectorOutput, SchedulerOutput } from '../../../../src/connector/types.ts';
import { emptyConnectorOutput } from '../../../../src/connector/types.ts';
import type { SamplingParams } from '../../../../src/engine/api.ts';
import { Request } from '../../../../src/engine/request.ts';
import { assertInvariants } from '../../../../src/engine/request-lifecycle.ts';
import type { ModelRunnerOutput } from '../../../../src/engine/runner-io.ts';
import { samplingParams } from '../../../../src/engine/sampling-params.ts';
import { Scheduler } from '../../../../src/engine/scheduler/scheduler.ts';
import type { SchedulerOptions, SchedulerUpdate } from '../../../../src/engine/scheduler/types.ts';
import {
  type BlockHasher,
  createBlockHasher,
  createKVCacheManager,
  fullAttentionSpec,
  type PagedKVCacheManager,
} from '../../../../src/kv/index.ts';
import { RecordingConnector } from './recording-connector.ts';

export const EOS = 2;

export interface HarnessOptions {
  blockSize?: number;
  numBlocks?: number;
  maxModelLen?: number;
  maxNumBatchedTokens?: number;
  maxNumSeqs?: number;
  enableChunkedPrefill?: boolean;
  enablePrefixCaching?: boolean;
  withConnector?: boolean;
  policy?: KVLoadFailurePolicy;
  schedulerOptions?: SchedulerOptions;
}

export interface Harness {
  scheduler: Scheduler;
  kv: PagedKVCacheManager;
  connector: RecordingConnector;
  hasher: BlockHasher;
  blockSize: number;
  makeRequest(
    id: string,
    tokens: number[],
    opts?: Partial<SamplingParams> & { kvTransferParams?: Record<string, unknown> },
  ): Request;
  add(
    id: string,
    tokens: number[],
    opts?: Partial<SamplingParams> & { kvTransferParams?: Record<string, unknown> },
  ): Request;
  step(kv?: Partial<KVConnectorOutput>, skipInvariants?: boolean): StepResult;
}

export interface StepResult {
  out: SchedulerOutput;
  update: SchedulerUpdate;
  /** reqId → token sampled this step. */
  sampled: Map<string, number>;
}

export function sampling(opts: Partial<SamplingParams> = {}): SamplingParams {
  return samplingParams({ maxTokens: 16, temperature: 0, ignoreEos: true, ...opts });
}

/** The "model": the next token is a pure function of the sequence (never EOS unless asked). */
export function nextToken(tokens: readonly number[]): number {
  let h = 7;
  for (const t of tokens) h = (h * 31 + t) % 1_000_003;
  return 10 + (h % 200);
}

export function createHarness(opts: HarnessOptions = {}): Harness {
  const blockSize = opts.blockSize ?? 4;
  const maxModelLen = opts.maxModelLen ?? 128;
  const configFor = (withTransfer: boolean) =>
    buildEngineConfig({
      max_model_len: maxModelLen,
      max_num_batched_tokens: opts.maxNumBatchedTokens ?? 64,
      max_num_seqs: opts.maxNumSeqs ?? 16,
      block_size: blockSize,
      num_gpu_blocks: opts.numBlocks ?? 64,
      enable_chunked_prefill: opts.enableChunkedPrefill ?? true,
      kv_transfer_config: withTransfer
        ? {
            kv_connector: 'RecordingConnector',
            kv_role: 'kv_both',
            kv_load_failure_policy: opts.policy ?? 'fail',
          }
        : null,
    } as never);
  const withConnector = opts.withConnector !== false;
  const engineConfig = configFor(withConnector);
  const kvCacheConfig = {
    numBlocks: opts.numBlocks ?? 64,
    tensors: [],
    groups: [
      {
        layerNames: ['model.layers.0.self_attn'],
        spec: fullAttentionSpec({ blockSize, numKvHeads: 1, headSize: 4, dtype: 'float32' }),
      },
    ],
  };
  const kv = createKVCacheManager({
    kvCacheConfig,
    maxModelLen,
    enablePrefixCaching: opts.enablePrefixCaching ?? true,
  });
  const connector = new RecordingConnector(configFor(true), 'scheduler', kvCacheConfig);
  const scheduler = new Scheduler(engineConfig, kv, withConnector ? connector : null, opts.schedulerOptions);
  const hasher = createBlockHasher(blockSize, 'sha256_cbor');
  const makeRequest: Harness['makeRequest'] = (id, tokens, o = {}) => {
    const { kvTransferParams, ...rest } = o;
    return new Request({
      requestId: id,
      promptTokenIds: tokens,
      sampling: sampling(rest),
      eosTokenId: EOS,
      kvTransferParams: kvTransferParams ?? null,
      blockHasher: hasher,
    });
  };
  const harness: Harness = {
    scheduler,
    kv,
    connector,
    hasher,
    blockSize,
    makeRequest,
    add(id, tokens, o) {
      const req = makeRequest(id, tokens, o);
      scheduler.addRequest(req);
      return req;
    },
    step(kvOut, skipInvariants = false) {
      const out = scheduler.schedule();
      if (!skipInvariants) assertInvariants(scheduler);
      const runner = runModel(scheduler, out, kvOut);
      const update = scheduler.updateFromOutput(out, runner.output);
      if (!skipInvariants) assertInvariants(scheduler);
      return { out, update, sampled: runner.sampled };
    },
  };
  return harness;
}

/** Plays the model runner: samples for requests whose known tokens are all computed. */
export function runModel(
  scheduler: Scheduler,
  out: SchedulerOutput,
  kvOut?: Partial<KVConnectorOutput>,
): { output: ModelRunnerOutput; sampled: Map<string, number> } {
  const reqIds = [...out.scheduledNewReqs.map((r) => r.reqId), ...out.scheduledCachedReqs.reqIds];
  const sampled = new Map<string, number>();
  const sampledTokenIds = reqIds.map((id) => {
    const req = scheduler.getRequest(id);
    if (!req || req.numComputedTokens < req.numTokens) return [];
    const token = nextToken(req.allTokenIds);
    sampled.set(id, token);
    return [token];
  });
  return {
    output: {
      reqIds,
      sampledTokenIds,
      logprobs: reqIds.map(() => null),
      topLogprobs: reqIds.map(() => null),
      kvConnectorOutput: kvOut ? { ...emptyConnectorOutput(), ...kvOut } : null,
    },
    sampled,
  };
}

export function tokens(n: number, start = 100): number[] {
  return Array.from({ length: n }, (_, i) => start + i);
}

/** Steps until the scheduler is idle (or `limit` steps), returning every output. */
export function drain(h: Harness, limit = 200): SchedulerUpdate['outputs'] {
  const all: SchedulerUpdate['outputs'] = [];
  for (let i = 0; i < limit && h.scheduler.hasRequests(); i++) all.push(...h.step().update.outputs);
  return all;
}
