/**
 * Injected KV-load faults for P/D tests (`--kv-load-failure-rate`, `--kv-load-stall-rate`,
 * `--kv-load-stall-duration`): applied to what the connector's workers report each step, so
 * every connector's real load path runs and only its outcome is overridden. A load picked to
 * fail is reported finished with its loaded blocks invalid — the scheduler then recomputes or
 * fails the request per `kv_load_failure_policy`, exactly as for a real failed READ. A load
 * picked to stall is reported finished only `stallNs` later (wall clock). Picks come from a
 * seeded generator, one draw per load.
 */
import type { KvLoadFaultConfig } from '../config/fault-injection.ts';
import { emptyConnectorOutput, type KVConnectorOutput } from '../connector/types.ts';
import { getLogger } from '../logging/logger.ts';
import { mulberry32 } from '../util/mulberry32.ts';

const log = getLogger('kvconnect.engine.kv-load-faults');

export class KvLoadFaults {
  #config: KvLoadFaultConfig;
  readonly #random: () => number;
  /** Stalled loads: request id → wall-clock ms when their completion is reported. */
  readonly #held = new Map<string, number>();
  readonly #now: () => number;

  constructor(config: KvLoadFaultConfig, seed = 0, now: () => number = Date.now) {
    this.#config = config;
    this.#random = mulberry32(seed ^ 0x10ad_fa17);
    this.#now = now;
  }

  get config(): KvLoadFaultConfig {
    return this.#config;
  }

  set config(c: KvLoadFaultConfig) {
    this.#config = c;
  }

  /** Loads held back right now. */
  get stalled(): number {
    return this.#held.size;
  }

  /**
   * The step's connector output with the faults applied. `loadedBlocks(id)` returns the
   * blocks the request's load wrote (those past its local prefix hit).
   */
  apply(
    output: KVConnectorOutput | null,
    loadedBlocks: (reqId: string) => number[],
  ): KVConnectorOutput | null {
    const { failureRate, stallRate, stallNs } = this.#config;
    const now = this.#now();
    const released: string[] = [];
    for (const [id, at] of this.#held) {
      if (at > now) continue;
      this.#held.delete(id);
      released.push(id);
    }
    const finished = output?.finishedRecving ?? [];
    if (released.length === 0 && (finished.length === 0 || (failureRate === 0 && stallRate === 0))) {
      return output;
    }
    const out = output ? { ...output } : emptyConnectorOutput();
    const keep: string[] = [];
    const invalid = new Set(out.invalidBlockIds);
    for (const id of finished) {
      const r = this.#random() * 100;
      if (r < failureRate) {
        const blocks = loadedBlocks(id);
        for (const b of blocks) invalid.add(b);
        log.warn('Injected KV load failure for request %s (%d blocks invalid)', id, blocks.length);
        keep.push(id);
      } else if (r < failureRate + stallRate) {
        this.#held.set(id, now + stallNs / 1e6);
        log.warn('Injected KV load stall for request %s (%d ms)', id, stallNs / 1e6);
      } else {
        keep.push(id);
      }
    }
    keep.push(...released);
    out.finishedRecving = keep.length > 0 ? keep : null;
    out.invalidBlockIds = [...invalid].sort((a, b) => a - b);
    return out;
  }
}
