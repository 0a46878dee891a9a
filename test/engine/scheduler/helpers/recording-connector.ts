/**
 * A real connector (KVConnectorBase subclass) whose scheduler-side answers each test
 * scripts, and which records every call in order. Worker-side hooks do nothing: these
 * tests drive the scheduler's protocol, not transfers.
 */
import { KVConnectorBase } from '../../../../src/connector/base.ts';
import type {
  ConnectorRequest,
  KVConnectorMetadata,
  KVConnectorOutput,
  MatchedTokens,
  RequestFinishedResult,
  SchedulerOutput,
} from '../../../../src/connector/types.ts';
import type { KVCacheBlocks } from '../../../../src/kv/interfaces.ts';

export interface RecordedCall {
  method: string;
  requestId?: string;
  /** Method-specific details (numComputedTokens, block ids, ...). */
  detail?: unknown;
}

export type MatchScript =
  | MatchedTokens
  | ((req: ConnectorRequest, numComputedTokens: number) => MatchedTokens);

export class RecordingConnector extends KVConnectorBase {
  static override supportsHMA = false;

  readonly calls: RecordedCall[] = [];
  /** Per request: what getNumNewMatchedTokens answers (default: nothing to load). */
  readonly matches = new Map<string, MatchScript>();
  /** Requests whose blocks the connector keeps after requestFinished (until finished_sending). */
  readonly delayFree = new Set<string>();
  /** Per request: kv_transfer_params returned by requestFinished. */
  readonly finishParams = new Map<string, Record<string, unknown>>();
  pendingPushWork = false;

  startLoadKv(): void {}
  waitForLayerLoad(): void {}
  saveKvLayer(): void {}
  waitForSave(): void {}

  override onNewRequest(request: ConnectorRequest): void {
    this.calls.push({ method: 'onNewRequest', requestId: request.requestId });
  }

  getNumNewMatchedTokens(request: ConnectorRequest, numComputedTokens: number): MatchedTokens {
    const script = this.matches.get(request.requestId);
    const answer =
      script === undefined
        ? { count: 0, loadAsync: false }
        : typeof script === 'function'
          ? script(request, numComputedTokens)
          : script;
    this.calls.push({
      method: 'getNumNewMatchedTokens',
      requestId: request.requestId,
      detail: { numComputedTokens, answer },
    });
    return answer;
  }

  updateStateAfterAlloc(request: ConnectorRequest, blocks: KVCacheBlocks, numExternalTokens: number): void {
    this.calls.push({
      method: 'updateStateAfterAlloc',
      requestId: request.requestId,
      detail: { blockIds: blocks.getBlockIds(), numExternalTokens },
    });
  }

  buildConnectorMeta(schedulerOutput: SchedulerOutput): KVConnectorMetadata {
    this.calls.push({
      method: 'buildConnectorMeta',
      detail: {
        scheduled: Object.keys(schedulerOutput.numScheduledTokens),
        finished: [...schedulerOutput.finishedReqIds],
        blockHashes: Object.fromEntries(
          schedulerOutput.scheduledNewReqs.map((r) => [r.reqId, r.promptTokenIds.length]),
        ),
      },
    });
    return { step: this.calls.filter((c) => c.method === 'buildConnectorMeta').length };
  }

  override updateConnectorOutput(output: KVConnectorOutput): void {
    this.calls.push({
      method: 'updateConnectorOutput',
      detail: { sending: output.finishedSending, recving: output.finishedRecving },
    });
  }

  override requestFinished(request: ConnectorRequest, blockIds: number[][]): RequestFinishedResult {
    this.calls.push({
      method: 'requestFinished',
      requestId: request.requestId,
      detail: { blockIds: blockIds.map((g) => [...g]), status: request.status },
    });
    return {
      delayFree: this.delayFree.has(request.requestId),
      kvTransferParams: this.finishParams.get(request.requestId) ?? null,
    };
  }

  override hasPendingPushWork(): boolean {
    return this.pendingPushWork;
  }

  /** Method names of the calls so far, optionally only those about one request. */
  methods(requestId?: string): string[] {
    return this.calls
      .filter((c) => requestId === undefined || c.requestId === requestId)
      .map((c) => c.method);
  }

  callsOf(method: string, requestId?: string): RecordedCall[] {
    return this.calls.filter(
      (c) => c.method === method && (requestId === undefined || c.requestId === requestId),
    );
  }
}
