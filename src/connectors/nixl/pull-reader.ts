/**
 * Pull-mode loads from a producer with this rank's tensor-parallel size
 * (docs/connectors/nixl.md#how-a-request-flows-pull): per request, handshake with the
 * producer rank, READ its blocks straight into the local blocks under the request's grant,
 * and notify it when done. A READ refused because the grant did not exist yet is posted again
 * after a backoff; one whose connection failed is posted once more after a fresh handshake
 * (retry-policy.ts); anything else is a load error, and the producer is told to free the
 * blocks at once.
 */
import { getLogger } from '../../logging/logger.ts';
import type { TransferHandle, TransferStatus } from '../../transfer/index.ts';
import { completionNotification } from './notifications.ts';
import { readRetryDelayMs, shouldReconnect } from './retry-policy.ts';
import { loadTargets, pairLoad, type RecvJob } from './step-metadata.ts';
import type { WorkerContext } from './worker-context.ts';

const log = getLogger('kvconnect.connectors.nixl.pull-reader');

interface Load {
  readonly job: RecvJob;
  handle: TransferHandle | null;
  settled: boolean;
  /** performance.now() of the first READ; retries stop a lease duration after it. */
  firstPostAt: number;
  retries: number;
  retryTimer: NodeJS.Timeout | null;
  /** The handshake was redone once after the connection to P failed. */
  reconnected: boolean;
}

export class PullReader {
  readonly #ctx: WorkerContext;
  readonly #loads = new Map<string, Load>();
  /** Takes over a load whose producer has smaller blocks (staged, ./hetero-reader.ts). */
  readonly #remap: (job: RecvJob) => void;

  constructor(ctx: WorkerContext, remap: (job: RecvJob) => void) {
    this.#ctx = ctx;
    this.#remap = remap;
  }

  get busy(): boolean {
    return this.#loads.size > 0;
  }

  #notification(job: RecvJob): string {
    return completionNotification(job.remoteRequestId, this.#ctx.tpSize);
  }

  /**
   * Starts a load once the handshake with the producer is done. It tells the producer's clock
   * (a READ of blocks about to expire is declined, ./expired-reads.ts) and block size (a
   * smaller one is handed to the staged reader). A failed handshake fails the load, counted
   * once (num_failed_handshakes). A job with no local blocks only tells the producer it may
   * free them.
   */
  start(job: RecvJob): void {
    const ctx = this.#ctx;
    const release = loadTargets(job).length === 0;
    const load: Load = {
      job,
      handle: null,
      settled: false,
      firstPostAt: 0,
      retries: 0,
      retryTimer: null,
      reconnected: false,
    };
    if (!release) this.#loads.set(job.reqId, load);
    const run = async (): Promise<void> => {
      const agentName = await ctx.connect(job.remote);
      if (release) {
        await ctx.agent.sendNotification(agentName, this.#notification(job));
        return;
      }
      if (ctx.expiredReads.decline(job, ctx.clockOffsetMs(job.remote))) {
        this.#fail(load, loadTargets(job));
        return;
      }
      if ((ctx.blockRatio(job.remote) ?? 1) !== 1) {
        this.#loads.delete(job.reqId);
        this.#remap(job);
        return;
      }
      load.firstPostAt = performance.now();
      this.#post(load, agentName);
    };
    run().catch((e: unknown) => {
      const kind = load.handle === null && !release ? 'handshake_failed' : 'notification_failed';
      log.error(
        'NIXL transfer failure: %s | Context: %s',
        kind,
        `request ${job.reqId} from ${job.remote.engineId}: ${String((e as Error)?.message ?? e)}`,
      );
      if (!release) this.#fail(load, loadTargets(job));
    });
  }

  #post(load: Load, agentName: string): void {
    const job = load.job;
    const pairs = pairLoad(this.#ctx.kvCacheConfig, job, 1);
    load.handle = this.#ctx.agent.read(agentName, this.#ctx.regionPairs(pairs.local, pairs.remote), {
      notification: this.#notification(job),
      grantKey: job.remoteRequestId,
    });
    // poll() (the next step) reports it; the engine steps as soon as it settles.
    this.#ctx.wakeWhenSettled(load.handle);
  }

  /** Polls the posted READs (from getFinished): finishes, retries or fails their loads. */
  poll(): void {
    const ctx = this.#ctx;
    for (const load of [...this.#loads.values()]) {
      if (!load.handle) continue;
      const status = ctx.agent.status(load.handle);
      if (status.state === 'PROC') continue;
      const handle = load.handle;
      ctx.agent.releaseHandle(handle);
      if (status.state === 'DONE') {
        load.settled = true;
        this.#loads.delete(load.job.reqId);
        ctx.recvDone(load.job.reqId, []);
      } else if (!this.#retryLater(load, handle.remoteAgent, status) && !this.#reconnect(load, status)) {
        log.error(
          'NIXL transfer failure: transfer_failed | Context: request %s: %s',
          load.job.reqId,
          status.reason ?? '',
        );
        const failed = status.failedBlockIds.length > 0 ? status.failedBlockIds : loadTargets(load.job);
        this.#fail(load, failed);
        // D will not read again (the policy recomputes or fails): let P free its blocks now.
        ctx.agent.sendNotification(handle.remoteAgent, this.#notification(load.job)).catch(() => {});
      }
    }
  }

  /** P refused the READ as retryable: post it again after a backoff, while P's lease could still be running. */
  #retryLater(load: Load, agentName: string, status: TransferStatus): boolean {
    const delay = readRetryDelayMs(
      status,
      load.retries,
      load.firstPostAt,
      this.#ctx.opts.kvLeaseDuration * 1000,
    );
    if (delay === null) return false;
    load.retries++;
    load.handle = null;
    log.warn(
      'NIXL READ for request %s refused (%s); retrying in %d ms (attempt %d)',
      load.job.reqId,
      status.reason ?? '',
      delay,
      load.retries + 1,
    );
    load.retryTimer = setTimeout(() => {
      load.retryTimer = null;
      if (load.settled) return;
      try {
        this.#post(load, agentName);
      } catch (e) {
        log.error(
          'NIXL transfer failure: transfer_failed | Context: request %s: %s',
          load.job.reqId,
          String((e as Error)?.message ?? e),
        );
        this.#fail(load, loadTargets(load.job));
      }
    }, delay);
    return true;
  }

  /**
   * The connection to P failed (refused or lost): P may have restarted under the same
   * engine id with its agent elsewhere, so the cached handshake is dropped and the READ is
   * posted once more after a fresh handshake. A second failure is a load error.
   */
  #reconnect(load: Load, status: TransferStatus): boolean {
    if (!shouldReconnect(status, load.reconnected)) return false;
    const ctx = this.#ctx;
    load.reconnected = true;
    load.handle = null;
    ctx.forget(load.job.remote);
    log.warn(
      'NIXL READ for request %s failed (%s); handshaking with %s again',
      load.job.reqId,
      status.reason ?? '',
      load.job.remote.engineId,
    );
    ctx
      .connect(load.job.remote)
      .then((agentName) => {
        if (!load.settled) this.#post(load, agentName);
      })
      .catch((e: unknown) => {
        log.error(
          'NIXL transfer failure: handshake_failed | Context: request %s from %s: %s',
          load.job.reqId,
          load.job.remote.engineId,
          String((e as Error)?.message ?? e),
        );
        this.#fail(load, loadTargets(load.job));
      });
    return true;
  }

  #fail(load: Load, invalid: readonly number[]): void {
    if (load.settled) return;
    load.settled = true;
    if (load.retryTimer) clearTimeout(load.retryTimer);
    load.retryTimer = null;
    this.#loads.delete(load.job.reqId);
    this.#ctx.recvDone(load.job.reqId, invalid);
  }

  shutdown(): void {
    for (const load of this.#loads.values()) if (load.retryTimer) clearTimeout(load.retryTimer);
  }
}
