/**
 * Replays a Mooncake trace through the real scheduler, KV cache manager and (optionally)
 * the OffloadingConnector's CPU tier, without running the model (the engine's simulated
 * executor), and reports the prefix-cache hit ratio for one cache capacity.
 *
 * There is no model, so there is no service time: requests enter in trace order as fast as
 * the scheduler admits them (max_num_seqs, max_num_batched_tokens). The CPU tier's worker
 * side is stood in for: every store and every CPU load it is asked for completes in the
 * step that asked (its scheduler side — index, eviction policy, store threshold — is real).
 */
import type { TraceEntry } from '../bench-serve/trace.ts';
import { buildEngineConfig } from '../config/engine-config.ts';
import { emptyConnectorOutput, type KVConnectorOutput, type SchedulerOutput } from '../connector/types.ts';
import { Engine } from '../engine/engine.ts';
import { samplingParams } from '../engine/sampling-params.ts';
import { KVError } from '../errors/kv-error.ts';
import { firstUnusedId, traceTokens } from './trace-reuse.ts';

export interface SimulationOptions {
  /** Model whose KV geometry sizes the CPU tier's slots (bytes per block). */
  model: string;
  blockSize: number;
  maxNumSeqs: number;
  maxNumBatchedTokens: number;
  /** Tokens generated per request: min(trace output_length, this); at least 1. */
  maxOutputLen: number;
  hashAlgo: 'sha256_cbor' | 'sha256' | 'xxhash_cbor' | 'xxhash';
}

export const SIMULATION_DEFAULTS: SimulationOptions = {
  model: 'tiny',
  blockSize: 512,
  maxNumSeqs: 16,
  maxNumBatchedTokens: 16384,
  maxOutputLen: 1,
  hashAlgo: 'sha256_cbor',
};

/** One capacity point: device blocks (null = enough that nothing is evicted), CPU tier bytes. */
export interface CapacityPoint {
  deviceBlocks: number | null;
  cpuBytes: number | null;
}

export interface SimulationResult {
  device_blocks: number;
  device_unbounded: boolean;
  cpu_bytes: number | null;
  requests: number;
  prompt_tokens: number;
  device_hit_tokens: number;
  cpu_hit_tokens: number;
  hit_ratio: number;
  device_hit_ratio: number;
  cpu_hit_ratio: number;
  steps: number;
  seconds: number;
}

function outputLen(e: TraceEntry, opts: SimulationOptions): number {
  return Math.max(1, Math.min(e.outputLength, opts.maxOutputLen));
}

/** Blocks that hold every request's tokens at once: with that many nothing is ever evicted. */
export function unboundedBlocks(entries: readonly TraceEntry[], opts: SimulationOptions): number {
  let n = 0;
  for (const e of entries) n += Math.ceil((e.inputLength + outputLen(e, opts)) / opts.blockSize);
  return n;
}

/** The offloading worker's report for a step, as if its copies finished at once. */
function offloadWorkerOutput(out: SchedulerOutput): KVConnectorOutput {
  const meta = out.kvConnectorMetadata as { step?: number } | null;
  return {
    ...emptyConnectorOutput(),
    kvConnectorWorkerMeta: {
      offloading: {
        step: meta?.step ?? 0,
        promoted: [],
        failed: [],
        storedSecondary: [],
        evictedSecondary: [],
      },
    },
  };
}

export async function simulate(
  entries: readonly TraceEntry[],
  point: CapacityPoint,
  opts: SimulationOptions = SIMULATION_DEFAULTS,
): Promise<SimulationResult> {
  const started = performance.now();
  const maxLen = entries.reduce((m, e) => Math.max(m, e.inputLength + outputLen(e, opts)), 1);
  const deviceBlocks = point.deviceBlocks ?? unboundedBlocks(entries, opts);
  const needed = Math.ceil(maxLen / opts.blockSize);
  if (deviceBlocks < needed) {
    throw new KVError(
      'SIM_CAPACITY_TOO_SMALL',
      `${deviceBlocks} device blocks cannot hold the trace's longest request`,
      {
        field: 'device_blocks',
        hint: `The longest request needs ${needed} blocks of ${opts.blockSize} tokens; use at least that many.`,
      },
    );
  }
  const offload = point.cpuBytes !== null;
  const config = buildEngineConfig({
    model: opts.model,
    block_size: opts.blockSize,
    num_gpu_blocks: deviceBlocks + 1,
    max_num_seqs: opts.maxNumSeqs,
    max_num_batched_tokens: opts.maxNumBatchedTokens,
    enable_prefix_caching: true,
    prefix_caching_hash_algo: opts.hashAlgo,
    kv_transfer_config: offload
      ? {
          kv_connector: 'OffloadingConnector',
          kv_role: 'kv_both',
          kv_connector_extra_config: { cpu_bytes_to_use: point.cpuBytes },
        }
      : null,
  });
  // The simulation never computes positions, so the trace's longest request may exceed the
  // model's max_position_embeddings (the limit buildEngineConfig enforces for real runs).
  const engine = await Engine.create(
    { ...config, model: { ...config.model, maxModelLen: maxLen } },
    offload ? { connectorOutput: offloadWorkerOutput } : {},
  );
  const uniqueBase = firstUnusedId(entries);
  let steps = 0;
  try {
    const order = [...entries].sort((a, b) => a.timestampMs - b.timestampMs || a.line - b.line);
    let next = 0;
    while (next < order.length || engine.hasWork()) {
      // Keep the queue short: synthesising every prompt up front would hold the whole trace.
      const stats = engine.schedulerStats();
      while (next < order.length && stats.numWaitingReqs + stats.numRunningReqs < 2 * opts.maxNumSeqs) {
        const e = order[next]!;
        engine.addRequest({
          requestId: `trace-${next}`,
          promptTokenIds: traceTokens(e, uniqueBase + next * 1024),
          sampling: samplingParams({ maxTokens: outputLen(e, opts), ignoreEos: true }),
        });
        next++;
        stats.numWaitingReqs++;
      }
      await engine.step();
      steps++;
    }
    const s = engine.schedulerStats();
    const prompt = s.promptTokensTotal > 0 ? s.prefixCacheQueries : 0;
    return {
      device_blocks: deviceBlocks,
      device_unbounded: point.deviceBlocks === null,
      cpu_bytes: point.cpuBytes,
      requests: order.length,
      prompt_tokens: prompt,
      device_hit_tokens: s.prefixCacheHits,
      cpu_hit_tokens: s.externalPrefixCacheHits,
      hit_ratio: ratio(s.prefixCacheHits + s.externalPrefixCacheHits, prompt),
      device_hit_ratio: ratio(s.prefixCacheHits, prompt),
      cpu_hit_ratio: ratio(s.externalPrefixCacheHits, prompt),
      steps,
      seconds: (performance.now() - started) / 1000,
    };
  } finally {
    await engine.shutdown();
  }
}

function ratio(a: number, b: number): number {
  return b === 0 ? 0 : a / b;
}
