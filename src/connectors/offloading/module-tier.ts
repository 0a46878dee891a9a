/**
 * An out-of-tree secondary tier (`type` + `module_path`,
 * docs/connectors/offloading.md#out-of-tree-modules): the module's class is constructed with
 * `{ options, run }` — its `secondary_tiers` entry and the run layout (vllm-key-layout.ts)
 * its keys may be named by — and must implement `putMany`, `getMany`, `hasMany` and
 * `deleteMany` of KVTier (kv-tier.ts); `close`, `takeEvicted` and `medium` are optional.
 * Every call runs under the tier's `timeout_ms`: a module that throws or hangs answers
 * "miss", like a built-in tier that is down.
 */
import { emptyTierStats, type KVTier, type TierEntry, type TierStats } from './kv-tier.ts';
import { checkPluginShape } from './plugin-module.ts';
import type { ModuleTierSpec } from './tier-config.ts';
import { TierHealth } from './tier-health.ts';
import type { RunLayout } from './vllm-key-layout.ts';

/** What an out-of-tree tier class implements. */
export interface ModuleTierInstance {
  medium?: 'CPU' | 'STORAGE';
  putMany(entries: readonly TierEntry[]): Promise<readonly string[]>;
  getMany(keys: readonly string[]): Promise<readonly (Uint8Array | null)[]>;
  hasMany(keys: readonly string[]): Promise<readonly boolean[]>;
  deleteMany(keys: readonly string[]): Promise<void>;
  takeEvicted?(): string[];
  close?(): Promise<void>;
}

export const MODULE_TIER_METHODS = ['putMany', 'getMany', 'hasMany', 'deleteMany'] as const;

export class ModuleTier implements KVTier {
  readonly kind: string;
  readonly medium: 'CPU' | 'STORAGE';
  readonly health: TierHealth;
  readonly impl: ModuleTierInstance;
  readonly #stats = emptyTierStats();

  /** `name` names the tier in logs; `origin` says where it came from (its module). */
  constructor(impl: ModuleTierInstance, name: string, origin: string, timeoutMs: number) {
    checkPluginShape(
      impl,
      MODULE_TIER_METHODS,
      `Tier ${name} (${origin})`,
      'kv_connector_extra_config.secondary_tiers',
    );
    this.impl = impl;
    this.kind = name;
    this.medium = impl.medium === 'CPU' ? 'CPU' : 'STORAGE';
    this.health = new TierHealth(`${name} tier (${origin})`, timeoutMs);
  }

  /** The tier of a `secondary_tiers` entry with `module_path`. */
  static fromSpec(spec: ModuleTierSpec, run: RunLayout): ModuleTier {
    const Impl = spec.tierClass as unknown as new (args: {
      options: Record<string, unknown>;
      run: RunLayout;
    }) => ModuleTierInstance;
    return new ModuleTier(
      new Impl({ options: spec.options, run }),
      spec.className,
      spec.modulePath,
      spec.timeoutMs,
    );
  }

  get timeoutMs(): number {
    return this.health.timeoutMs;
  }

  async putMany(entries: readonly TierEntry[]): Promise<string[]> {
    const stored = await this.health.run(
      'put',
      async () => [...(await this.impl.putMany(entries))],
      () => [],
    );
    const set = new Set(stored);
    for (const e of entries) {
      if (!set.has(e.key)) continue;
      this.#stats.puts++;
      this.#stats.putBytes += e.value.byteLength;
    }
    return stored;
  }

  async getMany(keys: readonly string[]): Promise<(Uint8Array | null)[]> {
    this.#stats.gets += keys.length;
    const values = await this.health.run(
      'get',
      async () => [...(await this.impl.getMany(keys))],
      () => keys.map(() => null),
    );
    const out = keys.map((_, i) => (values[i] instanceof Uint8Array ? (values[i] as Uint8Array) : null));
    for (const v of out) {
      if (v === null) continue;
      this.#stats.hits++;
      this.#stats.getBytes += v.byteLength;
    }
    return out;
  }

  async hasMany(keys: readonly string[]): Promise<boolean[]> {
    const has = await this.health.run(
      'has',
      async () => [...(await this.impl.hasMany(keys))],
      () => keys.map(() => false),
    );
    return keys.map((_, i) => has[i] === true);
  }

  deleteMany(keys: readonly string[]): Promise<void> {
    return this.health.run(
      'delete',
      () => this.impl.deleteMany(keys),
      () => undefined,
    );
  }

  stats(): TierStats {
    return { ...this.#stats, errors: this.health.failures };
  }

  takeEvicted(): string[] {
    return this.impl.takeEvicted?.() ?? [];
  }

  async close(): Promise<void> {
    await this.impl.close?.();
  }
}
