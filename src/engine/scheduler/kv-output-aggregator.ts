/**
 * Merges the KV connector outputs of all tensor-parallel ranks into one (vLLM's
 * KVOutputAggregator, docs/engine.md#tensor-parallelism). A request is reported finished
 * only once every rank has reported it; counts persist across steps. A rank may change the
 * expected count (expectedFinishedCount > 0): new ids use the new count, ids already being
 * counted keep their remaining count (as vLLM does).
 */
import { mergeStats } from '../../connector/stats.ts';
import type { KVConnectorOutput, KVConnectorStatsData } from '../../connector/types.ts';
import type { KVCacheEvent } from '../../kv/interfaces.ts';

export class KVOutputAggregator {
  #expectedFinishedCount: number;
  readonly #sendRemaining = new Map<string, number>();
  readonly #recvRemaining = new Map<string, number>();

  constructor(expectedFinishedCount: number) {
    this.#expectedFinishedCount = expectedFinishedCount;
  }

  get expectedCount(): number {
    return this.#expectedFinishedCount;
  }

  /** `outputs` has one entry per rank (null = that rank reported no connector output). */
  aggregate(outputs: readonly (KVConnectorOutput | null)[]): KVConnectorOutput {
    const finishedSending: string[] = [];
    const finishedRecving: string[] = [];
    const invalid = new Set<number>();
    let stats: KVConnectorStatsData | null = null;
    let workerMeta: Record<string, unknown> | null = null;
    const eventLists: KVCacheEvent[][] = [];
    for (const out of outputs) {
      if (!out) continue;
      if (out.expectedFinishedCount > 0 && out.expectedFinishedCount !== this.#expectedFinishedCount) {
        this.#expectedFinishedCount = out.expectedFinishedCount;
      }
      this.#count(out.finishedSending, this.#sendRemaining, finishedSending);
      this.#count(out.finishedRecving, this.#recvRemaining, finishedRecving);
      for (const id of out.invalidBlockIds) invalid.add(id);
      if (out.kvConnectorStats) stats = mergeStats(stats ?? {}, out.kvConnectorStats);
      if (out.kvConnectorWorkerMeta) workerMeta = { ...(workerMeta ?? {}), ...out.kvConnectorWorkerMeta };
      if (out.kvCacheEvents) eventLists.push(out.kvCacheEvents);
    }
    return {
      finishedSending: finishedSending.length > 0 ? finishedSending : null,
      finishedRecving: finishedRecving.length > 0 ? finishedRecving : null,
      invalidBlockIds: [...invalid].sort((a, b) => a - b),
      kvConnectorStats: stats,
      kvCacheEvents: eventLists.length > 0 ? commonEvents(eventLists) : null,
      kvConnectorWorkerMeta: workerMeta,
      expectedFinishedCount: 0,
    };
  }

  #count(ids: readonly string[] | null, remaining: Map<string, number>, done: string[]): void {
    for (const id of ids ?? []) {
      const left = (remaining.get(id) ?? this.#expectedFinishedCount) - 1;
      if (left <= 0) {
        remaining.delete(id);
        done.push(id);
      } else {
        remaining.set(id, left);
      }
    }
  }
}

/** Events every reporting rank emitted (vLLM's get_common_events), in the first rank's order. */
function commonEvents(lists: readonly KVCacheEvent[][]): KVCacheEvent[] {
  const [first, ...rest] = lists;
  if (!first) return [];
  const counts = rest.map((list) => {
    const m = new Map<string, number>();
    for (const e of list) m.set(eventKey(e), (m.get(eventKey(e)) ?? 0) + 1);
    return m;
  });
  return first.filter((e) => {
    const key = eventKey(e);
    if (!counts.every((m) => (m.get(key) ?? 0) > 0)) return false;
    for (const m of counts) m.set(key, (m.get(key) ?? 0) - 1);
    return true;
  });
}

function eventKey(e: KVCacheEvent): string {
  return JSON.stringify(e, (_k, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v));
}
