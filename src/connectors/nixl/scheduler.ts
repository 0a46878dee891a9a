/**
 * Scheduler side of the NIXL connectors (pull and push,
 * docs/connectors/nixl.md#how-a-request-flows-pull and #how-a-request-flows-push): serves the
 * workers' agent metadata on the side channel, decides what each request loads or sends, and
 * stages per-step work for the workers. Decisions are driven by kv_transfer_params
 * (do_remote_decode on the producer, do_remote_prefill on the consumer), not by kv_role.
 */
import { networkInterfaces } from 'node:os';
import type { EngineConfig } from '../../config/types.ts';
import { blocksToLoad, clipToWindows, pairByPosition, remotePositions } from '../../connector/block-lists.ts';
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
import { nixlPrefillResult, readNixlRemote, readRemoteNumTokens } from '../../wire/index.ts';
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
    if (p?.['do_remote_prefill'] !== true) return { count: 0, loadAsync: false };
    const available = Math.min(req.numPromptTokens, readRemoteNumTokens(p) ?? req.numPromptTokens);
    const count = available - numComputedTokens;
    return count > 0 ? { count, loadAsync: true } : { count: 0, loadAsync: false };
  }

  updateStateAfterAlloc(req: ConnectorRequest, blocks: KVCacheBlocks, numExternalTokens: number): void {
    const p = req.kvTransferParams;
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
    const remoteRequestId = p['remote_request_id'];
    const remoteIds = p['remote_block_ids'];
    if (typeof remoteRequestId !== 'string' || !Array.isArray(remoteIds)) {
      log.warn(
        'Got invalid KVTransferParams: %s. This request will not utilize KVTransfer',
        JSON.stringify(p),
      );
      return;
    }
    const remoteLists = normaliseGroups(remoteIds);
    const pairs = pairByPosition(
      local,
      remotePositions(this.#kvCacheConfig, remoteLists, readRemoteNumTokens(p)),
    );
    this.#recv.push({
      reqId: req.requestId,
      remoteRequestId,
      remote,
      localBlockIds: pairs.local,
      remoteBlockIds: pairs.remote,
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
    if (p?.['do_remote_decode'] !== true) return { delayFree: false, kvTransferParams: null };
    if (req.status !== 'FINISHED_LENGTH_CAPPED' && req.status !== 'FINISHED_STOPPED') {
      this.#notProcessed.push(req.requestId);
      return { delayFree: false, kvTransferParams: null };
    }
    const clipped = clipToWindows(this.#kvCacheConfig, blockIds);
    const delay = clipped.some((g) => g.some((id) => id !== 0));
    if (delay) {
      const blocks = remotePositions(this.#kvCacheConfig, clipped, req.numComputedTokens);
      this.#send.push({ reqId: req.requestId, blocks, leaseSeconds: this.#opts.kvLeaseDuration });
      if (this.mode === 'push') this.#pushOutstanding.add(req.requestId);
    }
    const where = this.#advertised ?? { host: this.#opts.sideChannelHost, port: this.#opts.sideChannelPort };
    return {
      delayFree: delay,
      kvTransferParams: nixlPrefillResult({
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
      }),
    };
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
      localBlockIds: [],
      remoteBlockIds: [],
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
