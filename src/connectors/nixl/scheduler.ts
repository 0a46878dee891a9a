/**
 * Scheduler side of the NIXL connectors (pull and push,
 * docs/connectors/nixl.md#how-a-request-flows-pull and #how-a-request-flows-push): serves the
 * workers' agent metadata on the side channel, decides what each request loads or sends, and
 * stages per-step work for the workers. Decisions are driven by kv_transfer_params
 * (do_remote_decode on the producer, do_remote_prefill on the consumer), not by kv_role.
 * With bidirectional_kv_xfer (pull), D also keeps each finished request's blocks for
 * decoder_kv_blocks_ttl seconds and answers where they are, and P READs them back when a
 * next turn arrives with those params (docs/connectors/nixl.md#multi-turn-bidirectional).
 */
import { networkInterfaces } from 'node:os';
import type { EngineConfig } from '../../config/types.ts';
import { blocksToLoad, clipToWindows, remotePositions } from '../../connector/block-lists.ts';
import type {
  ConnectorRequest,
  KVConnectorHandshakeMetadata,
  KVConnectorOutput,
  KVTransferParams,
  MatchedTokens,
  RequestFinishedResult,
} from '../../connector/types.ts';
import type { KVCacheBlocks, KVCacheConfig } from '../../kv/interfaces.ts';
import { getLogger } from '../../logging/logger.ts';
import { SideChannelServer } from '../../transfer/index.ts';
import {
  nixlDecodeCacheResult,
  nixlPrefillResult,
  readBlocksExpiryTime,
  readNixlRemote,
  readRemoteNumTokens,
} from '../../wire/index.ts';
import { type NixlOptions, sideChannelPortHint } from './config.ts';
import type { TransferMode } from './handshake.ts';
import type {
  HeartbeatJob,
  NixlStepMetadata,
  RecvJob,
  RegisterJob,
  RemoteEndpoint,
  SendJob,
} from './step-metadata.ts';

const log = getLogger('kvconnect.connectors.nixl.scheduler');

interface Tracked {
  readonly remote: RemoteEndpoint;
  readonly remoteRequestId: string;
}

export class NixlScheduler {
  readonly mode: TransferMode;
  readonly #engineConfig: EngineConfig;
  readonly #kvCacheConfig: KVCacheConfig;
  readonly #opts: NixlOptions;
  #sideChannel: SideChannelServer | null = null;
  #advertised: { host: string; port: number } | null = null;
  #recv: RecvJob[] = [];
  #send: SendJob[] = [];
  #register: RegisterJob[] = [];
  #notProcessed: string[] = [];
  readonly #heartbeatFor = new Map<string, Tracked>();
  #lastHeartbeat = 0;
  /** Push: producer requests handed to workers and not yet reported finished. */
  readonly #pushOutstanding = new Set<string>();

  constructor(
    engineConfig: EngineConfig,
    kvCacheConfig: KVCacheConfig,
    mode: TransferMode,
    opts: NixlOptions,
  ) {
    this.#engineConfig = engineConfig;
    this.#kvCacheConfig = kvCacheConfig;
    this.mode = mode;
    this.#opts = opts;
  }

  /** Binds the side channel (docs/transfer.md#side-channel) and serves every rank's handshake payload. */
  async startSideChannel(metadata: Record<number, KVConnectorHandshakeMetadata>): Promise<void> {
    await this.#sideChannel?.close();
    const server = new SideChannelServer({
      host: this.#opts.sideChannelHost,
      port: this.#opts.sideChannelPort,
      getMetadata: (rank) => metadata[rank],
      ...(this.#opts.authSecret ? { secret: this.#opts.authSecret } : {}),
      portHint: sideChannelPortHint(this.#opts),
    });
    const bound = await server.start();
    this.#sideChannel = server;
    this.#advertised = { host: advertisedHost(bound.host), port: bound.port };
    log.info('NIXL side channel listening on %s:%d', bound.host, bound.port);
  }

  /** The host and port peers reach this engine's side channel at (null before startup). */
  get sideChannelAddress(): { host: string; port: number } | null {
    return this.#advertised;
  }

  get tpSize(): number {
    return this.#engineConfig.parallel.tensorParallelSize;
  }

  onNewRequest(req: ConnectorRequest): void {
    const p = req.kvTransferParams;
    if (this.mode !== 'pull' || p?.['do_remote_prefill'] !== true) return;
    const remote = readNixlRemote(p);
    const rid = p['remote_request_id'];
    if (remote && typeof rid === 'string')
      this.#heartbeatFor.set(req.requestId, { remote, remoteRequestId: rid });
  }

  getNumNewMatchedTokens(req: ConnectorRequest, numComputedTokens: number): MatchedTokens {
    const p = req.kvTransferParams;
    let available = 0;
    if (p?.['do_remote_prefill'] === true) {
      available = Math.min(req.numPromptTokens, readRemoteNumTokens(p) ?? req.numPromptTokens);
    } else if (p && this.#isDecodeCache(p)) {
      // A next turn on P: D holds the previous turn's KV (its prompt and its output).
      available = Math.min(req.numPromptTokens, readRemoteNumTokens(p) ?? 0);
    }
    const count = available - numComputedTokens;
    if (count <= 0) return { count: 0, loadAsync: false };
    const threshold = this.#opts.kvRecomputeThreshold;
    if (threshold > 0 && count < threshold) {
      log.debug(
        'Skipping remote pull for %s: %d remote tokens < threshold %d',
        req.requestId,
        count,
        threshold,
      );
      return { count: 0, loadAsync: false };
    }
    return { count, loadAsync: true };
  }

  /** P side, bidirectional: params naming blocks D kept from a previous turn, not yet read. */
  #isDecodeCache(p: KVTransferParams): boolean {
    const ids = p['remote_block_ids'];
    return (
      this.mode === 'pull' &&
      this.#opts.bidirectionalKvXfer &&
      p['do_remote_decode'] === true &&
      p['_remote_blocks_processed'] !== true &&
      Array.isArray(ids) &&
      ids.length > 0 &&
      typeof p['remote_request_id'] === 'string' &&
      readNixlRemote(p) !== null
    );
  }

  updateStateAfterAlloc(req: ConnectorRequest, blocks: KVCacheBlocks, numExternalTokens: number): void {
    const p = req.kvTransferParams;
    if (p && this.#isDecodeCache(p)) {
      // Only one READ per request; with nothing to load (a local hit, or under the
      // threshold) the job is a bare notification that frees D's blocks now.
      req.kvTransferParams = { ...p, do_remote_prefill: false, _remote_blocks_processed: true };
      const local = numExternalTokens > 0 ? blocksToLoad(this.#kvCacheConfig, blocks) : [];
      this.#pullFrom(req, p, readNixlRemote(p)!, local);
      return;
    }
    if (p?.['do_remote_prefill'] !== true) return;
    req.kvTransferParams = { ...p, do_remote_prefill: false };
    const remote = readNixlRemote(p);
    if (!remote) {
      log.warn(
        'Got invalid KVTransferParams: %s. This request will not utilize KVTransfer',
        JSON.stringify(p),
      );
      return;
    }
    const local = numExternalTokens > 0 ? blocksToLoad(this.#kvCacheConfig, blocks) : [];
    if (this.mode === 'push') {
      this.#register.push(this.#registration(req, p, remote, local, numExternalTokens > 0));
      return;
    }
    this.#pullFrom(req, p, remote, local);
  }

  /** Queues a READ of the remote's blocks into `local` (the worker pairs them by token position). */
  #pullFrom(
    req: ConnectorRequest,
    p: KVTransferParams,
    remote: RemoteEndpoint,
    local: ReturnType<typeof blocksToLoad>,
  ): void {
    const remoteRequestId = p['remote_request_id'];
    const remoteIds = p['remote_block_ids'];
    if (typeof remoteRequestId !== 'string' || !Array.isArray(remoteIds)) {
      log.warn(
        'Got invalid KVTransferParams: %s. This request will not utilize KVTransfer',
        JSON.stringify(p),
      );
      return;
    }
    this.#recv.push({
      reqId: req.requestId,
      remoteRequestId,
      remote,
      local,
      remoteBlockIds: normaliseGroups(remoteIds),
      remoteNumTokens: readRemoteNumTokens(p),
      blocksExpiryTime: readBlocksExpiryTime(p),
    });
  }

  #registration(
    req: ConnectorRequest,
    p: KVTransferParams,
    remote: RemoteEndpoint,
    local: ReturnType<typeof blocksToLoad>,
    wait: boolean,
  ): RegisterJob {
    const me = this.#advertised ?? { host: this.#opts.sideChannelHost, port: this.#opts.sideChannelPort };
    const rid = p['remote_request_id'];
    return {
      reqId: req.requestId,
      remote,
      wait,
      registration: {
        request_id: req.requestId,
        remote_request_id: typeof rid === 'string' ? rid : null,
        decode_engine_id: this.#engineConfig.kvTransferConfig?.engine_id ?? '',
        decode_host: me.host,
        decode_port: me.port,
        decode_tp_size: this.tpSize,
        blocks: local,
      },
    };
  }

  requestFinished(req: ConnectorRequest, blockIds: number[][]): RequestFinishedResult {
    this.#heartbeatFor.delete(req.requestId);
    const p = req.kvTransferParams;
    if (p?.['do_remote_prefill'] === true) {
      // A consumer request that never reached updateStateAfterAlloc (aborted or rejected):
      // release the producer's blocks now instead of leaving them to the lease.
      this.#releaseUnloaded(req, p);
      return { delayFree: false, kvTransferParams: null };
    }
    const isPrefill = p?.['do_remote_decode'] === true;
    // vLLM: D keeps the blocks of any request that came with params (bidirectional only).
    const keepOnDecode =
      !isPrefill && this.mode === 'pull' && this.#opts.bidirectionalKvXfer && Object.keys(p ?? {}).length > 0;
    if (!isPrefill && !keepOnDecode) return { delayFree: false, kvTransferParams: null };
    if (req.status !== 'FINISHED_LENGTH_CAPPED' && req.status !== 'FINISHED_STOPPED') {
      this.#notProcessed.push(req.requestId);
      return { delayFree: false, kvTransferParams: null };
    }
    const { finished, delay } = this.#handoff(req, blockIds);
    // D's blocks wait for a client-driven next turn: a fixed TTL, no heartbeats.
    const holdSeconds = isPrefill ? this.#opts.kvLeaseDuration : this.#opts.decoderKvBlocksTtl;
    if (delay) {
      const blocks = remotePositions(this.#kvCacheConfig, finished.blockIds, req.numComputedTokens);
      this.#send.push({ reqId: req.requestId, blocks, leaseSeconds: holdSeconds });
      if (this.mode === 'push') this.#pushOutstanding.add(req.requestId);
    }
    if (isPrefill) return { delayFree: delay, kvTransferParams: nixlPrefillResult(finished) };
    // Seconds on this scheduler's clock, the clock the side channel reports to a reader.
    const expiryTime = delay ? performance.now() / 1000 + holdSeconds : null;
    return { delayFree: delay, kvTransferParams: nixlDecodeCacheResult({ ...finished, expiryTime }) };
  }

  /**
   * A prefill request's params before the step that finishes it (pull mode: D reads, and its
   * READ waits at this engine's agent for the grant requestFinished's hand-off makes), equal
   * to what requestFinished will return. Push mode has D registered already: null.
   */
  paramsAhead(req: ConnectorRequest, blockIds: number[][]): KVTransferParams | null {
    if (this.mode !== 'pull' || req.kvTransferParams?.['do_remote_decode'] !== true) return null;
    return nixlPrefillResult(this.#handoff(req, blockIds).finished);
  }

  /**
   * What a finished request hands off: its blocks (clipped to the windows) and where they are;
   * `delay`: some block is real, so the blocks wait for the peer.
   */
  #handoff(req: ConnectorRequest, blockIds: number[][]) {
    const clipped = clipToWindows(this.#kvCacheConfig, blockIds);
    const delay = clipped.some((g) => g.some((id) => id !== 0));
    const where = this.#advertised ?? { host: this.#opts.sideChannelHost, port: this.#opts.sideChannelPort };
    const finished = {
      remote: {
        engineId: this.#engineConfig.kvTransferConfig?.engine_id ?? '',
        host: where.host,
        port: where.port,
        tpSize: this.tpSize,
      },
      requestId: req.requestId,
      blockIds: clipped,
      numTokens: delay ? req.numComputedTokens : 0,
      mode: this.mode,
    };
    return { finished, delay };
  }

  #releaseUnloaded(req: ConnectorRequest, p: KVTransferParams): void {
    const remote = readNixlRemote(p);
    if (!remote) return;
    if (this.mode === 'push') {
      this.#register.push(this.#registration(req, p, remote, [], false));
      return;
    }
    const rid = p['remote_request_id'];
    if (typeof rid !== 'string') return;
    this.#recv.push({
      reqId: req.requestId,
      remoteRequestId: rid,
      remote,
      local: [],
      remoteBlockIds: [],
      remoteNumTokens: null,
    });
  }

  buildConnectorMeta(): NixlStepMetadata {
    const meta: NixlStepMetadata = {
      reqsToRecv: this.#recv,
      reqsToSend: this.#send,
      reqsToRegister: this.#register,
      reqsNotProcessed: this.#notProcessed,
      heartbeats: this.#dueHeartbeats(),
    };
    this.#recv = [];
    this.#send = [];
    this.#register = [];
    this.#notProcessed = [];
    return meta;
  }

  #dueHeartbeats(): HeartbeatJob[] {
    const intervalMs =
      Math.floor(this.#opts.kvLeaseDuration / 6) * 1000 || (this.#opts.kvLeaseDuration * 1000) / 6;
    const now = performance.now();
    if (this.#heartbeatFor.size === 0 || now - this.#lastHeartbeat < intervalMs) return [];
    this.#lastHeartbeat = now;
    const byEngine = new Map<string, HeartbeatJob>();
    for (const t of this.#heartbeatFor.values()) {
      const key = `${t.remote.engineId}@${t.remote.host}:${t.remote.port}`;
      const job = byEngine.get(key) ?? { remote: t.remote, remoteRequestIds: [] };
      byEngine.set(key, job);
      job.remoteRequestIds.push(t.remoteRequestId);
    }
    return [...byEngine.values()];
  }

  updateConnectorOutput(out: KVConnectorOutput): void {
    for (const id of out.finishedRecving ?? []) this.#heartbeatFor.delete(id);
    for (const id of out.finishedSending ?? []) this.#pushOutstanding.delete(id);
  }

  /** Finished requests whose blocks the workers have not granted (pull) or pushed yet. */
  hasStagedSends(): boolean {
    return this.#send.length > 0;
  }

  hasPendingPushWork(): boolean {
    return this.mode === 'push' && (this.#pushOutstanding.size > 0 || this.#register.length > 0);
  }

  async shutdown(): Promise<void> {
    await this.#sideChannel?.close();
    this.#sideChannel = null;
  }
}

function normaliseGroups(v: unknown[]): number[][] {
  if (v.length > 0 && v.every((x) => typeof x === 'number')) return [v as number[]];
  return v.map((g) => (Array.isArray(g) ? g.filter((x): x is number => Number.isInteger(x)) : []));
}

function advertisedHost(bound: string): string {
  if (bound !== '0.0.0.0' && bound !== '::') return bound;
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return '127.0.0.1';
}
