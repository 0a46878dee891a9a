/**
 * What the parts of a NIXL worker share (the pull readers, the push producer and consumer):
 * this rank's transfer agent with its KV tensors registered, the handshakes with remote
 * engines, the producer's leases, and how to reach the remote rank this rank talks to. Built
 * once per worker, when the model runner registers the KV caches.
 */
import { totalKvHeads } from '../../config/model-info.ts';
import type { EngineConfig } from '../../config/types.ts';
import { kvRegions } from '../../connector/kv-regions.ts';
import type { KVCacheConfig, PagedKVMemory } from '../../kv/interfaces.ts';
import {
  type AgentFactory,
  type BlockListPair,
  copyThreadsUpTo,
  type TransferAgent,
  type TransferHandle,
} from '../../transfer/index.ts';
import { effectiveGrantWaitMs, type NixlOptions } from './config.ts';
import { ExpiredReads } from './expired-reads.ts';
import {
  compatibilityFactors,
  computeCompatibilityHash,
  NIXL_CONNECTOR_VERSION,
  type NixlHandshakePayload,
  type TransferMode,
} from './handshake.ts';
import { ProducerLeases } from './producer-leases.ts';
import { RemoteEngines } from './remote-engines.ts';
import type { RemoteEndpoint } from './step-metadata.ts';
import { handshakeTargetRanks } from './tp-mapping.ts';

export interface WorkerContext {
  readonly agent: TransferAgent;
  readonly engines: RemoteEngines;
  readonly tpRank: number;
  readonly tpSize: number;
  readonly opts: NixlOptions;
  readonly kvCacheConfig: KVCacheConfig;
  readonly leases: ProducerLeases;
  /** Reads of D's kept blocks declined because they were about to expire. */
  readonly expiredReads: ExpiredReads;
  /** The model's KV heads over all ranks. */
  readonly totalKvHeads: number;
  /** This rank's handshake payload, served on the side channel. */
  readonly payload: NixlHandshakePayload;
  regionPairs(localIds: readonly number[], remoteIds: readonly number[]): BlockListPair[];
  /** Handshakes (once per remote rank) with the rank of `remote` this rank talks to; resolves with its agent name. */
  connect(remote: RemoteEndpoint): Promise<string>;
  /** Drops the cached handshake with `remote` (the rank connect() uses). */
  forget(remote: RemoteEndpoint): void;
  /** `remote`'s clock minus this one (ms), known once connect() resolved. */
  clockOffsetMs(remote: RemoteEndpoint): number | undefined;
  /** This engine's block size over `remote`'s, known once connect() resolved. */
  blockRatio(remote: RemoteEndpoint): number | undefined;
  /** A load ended: `invalidBlockIds` empty when every block arrived. */
  recvDone(reqId: string, invalidBlockIds: readonly number[]): void;
  /** Wakes the engine when `handle` settles (a READ or WRITE ended between steps): it should step now. */
  wakeWhenSettled(handle: TransferHandle): void;
}

export interface WorkerContextInput {
  readonly engineConfig: EngineConfig;
  readonly kvCacheConfig: KVCacheConfig;
  readonly mode: TransferMode;
  readonly opts: NixlOptions;
  readonly tpRank: number;
  readonly memory: PagedKVMemory;
  readonly createAgent: AgentFactory;
  readonly recvDone: WorkerContext['recvDone'];
  /** Ends the engine's idle wait. */
  readonly wake: () => void;
}

/** Starts this rank's agent, registers its KV tensors and builds the handshake payload and the context. */
export async function openWorkerContext(input: WorkerContextInput): Promise<WorkerContext> {
  const { engineConfig, kvCacheConfig, mode, opts, tpRank, memory } = input;
  const tpSize = engineConfig.parallel.tensorParallelSize;
  const engineId = engineConfig.kvTransferConfig?.engine_id ?? 'engine';
  const hash = computeCompatibilityHash(compatibilityFactors(engineConfig, kvCacheConfig, mode));
  const agent = await input.createAgent({
    engineId,
    tpRank,
    compatHash: hash,
    host: opts.sideChannelHost,
    port: 0,
    backends: opts.backends,
    ...(opts.authSecret ? { secret: opts.authSecret } : {}),
    transferTimeoutMs: opts.transferTimeout * 1000,
    grantWaitMs: effectiveGrantWaitMs(opts),
    connectTimeoutMs: opts.handshakeTimeout * 1000,
    // vLLM's num_threads (UCX progress threads): here the threads a large same-host copy may use.
    copyThreads: copyThreadsUpTo(opts.numThreads),
    ...(opts.busyPollUs === undefined ? {} : { busyPollUs: opts.busyPollUs }),
    thread: opts.transferThread,
    // Emulated deployments (serve --kv-link): completions held as the target's link would.
    emulatedLink: engineConfig.emulation?.kvLink
      ? { ...engineConfig.emulation.kvLink, speedup: engineConfig.emulation.speedup }
      : null,
  });
  agent.registerMemory(kvRegions(memory));
  const payload: NixlHandshakePayload = {
    compatibility_hash: hash,
    connector_version: NIXL_CONNECTOR_VERSION,
    agent_metadata: {
      engine_id: engineId,
      tp_rank: tpRank,
      tp_size: tpSize,
      block_size: kvCacheConfig.groups[0]?.spec.blockSize ?? 16,
      num_blocks: memory.numBlocks,
      block_lens: memory.tensors.map((t) => t.blockBytes),
      kv_cache_layout: 'NHD',
      agent: agent.metadata(),
    },
  };
  const kvHeads = totalKvHeads(engineConfig.model.model);
  const engines = new RemoteEngines(agent, {
    localPayload: payload,
    enforceCompat: opts.enforceHandshakeCompat,
    timeoutMs: opts.handshakeTimeout * 1000,
    secret: opts.authSecret,
    mode,
    totalKvHeads: kvHeads,
    hybrid: kvCacheConfig.groups.length !== 1 || kvCacheConfig.groups[0]?.spec.kind !== 'full_attention',
  });
  const regionIds = memory.tensors.map((t) => t.index);
  const targetRank = (remote: RemoteEndpoint): number =>
    handshakeTargetRanks(tpSize, tpRank, remote.tpSize)[0] ?? 0;
  return {
    agent,
    engines,
    tpRank,
    tpSize,
    opts,
    kvCacheConfig,
    leases: new ProducerLeases(agent, opts.kvLeaseDuration, tpSize),
    expiredReads: new ExpiredReads(),
    totalKvHeads: kvHeads,
    payload,
    regionPairs: (localIds, remoteIds) =>
      regionIds.map((r) => ({
        localRegion: r,
        localBlockIds: localIds,
        remoteRegion: r,
        remoteBlockIds: remoteIds,
      })),
    connect: (remote) => engines.connect(remote, targetRank(remote)),
    forget: (remote) => engines.forget(remote, targetRank(remote)),
    clockOffsetMs: (remote) => engines.clockOffsetMs(remote, targetRank(remote)),
    blockRatio: (remote) => engines.blockRatio(remote, targetRank(remote)),
    recvDone: input.recvDone,
    wakeWhenSettled: (handle) => void agent.waitFor(handle).then(input.wake, input.wake),
  };
}
