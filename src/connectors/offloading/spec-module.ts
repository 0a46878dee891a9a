/**
 * An out-of-tree offloading spec (`spec_name` + `spec_module_path`,
 * docs/connectors/offloading.md#out-of-tree-modules). vLLM's OffloadingSpec builds the
 * scheduler's manager and the workers' handlers; kvconnect's CPU tier, scheduler and worker
 * are its own, so a JavaScript spec supplies the parts that vary: the secondary tiers
 * (`secondaryTiers()`, tier objects as an out-of-tree tier implements them) and/or the CPU
 * tier's eviction policy (`evictionPolicy(capacity)`). Its class is constructed with
 * `{ extraConfig, run }`. Tiers listed in `secondary_tiers` come after the spec's own.
 */
import type { EvictionPolicy } from './eviction-policy.ts';
import { ModuleTier, type ModuleTierInstance } from './module-tier.ts';
import type { PluginClass } from './plugin-module.ts';
import { DEFAULT_TIER_TIMEOUT_MS } from './tier-config.ts';
import type { RunLayout } from './vllm-key-layout.ts';

/** A spec implements at least one of these. */
export const SPEC_METHODS = ['secondaryTiers', 'evictionPolicy'] as const;

export interface OffloadingSpecInstance {
  secondaryTiers?(): readonly ModuleTierInstance[];
  evictionPolicy?(capacity: number): EvictionPolicy;
}

export class OutOfTreeSpec {
  readonly name: string;
  readonly impl: OffloadingSpecInstance;

  constructor(name: string, specClass: PluginClass, extraConfig: Record<string, unknown>, run: RunLayout) {
    const Impl = specClass as unknown as new (args: {
      extraConfig: Record<string, unknown>;
      run: RunLayout;
    }) => OffloadingSpecInstance;
    this.name = name;
    this.impl = new Impl({ extraConfig, run });
  }

  /** The spec's secondary tiers (none when it has no `secondaryTiers`). */
  tiers(): ModuleTier[] {
    const tiers = this.impl.secondaryTiers?.() ?? [];
    return tiers.map(
      (t, i) => new ModuleTier(t, `${this.name}[${i}]`, `spec ${this.name}`, DEFAULT_TIER_TIMEOUT_MS),
    );
  }

  /** The spec's eviction policy class for the CPU tier, or null to use `eviction_policy`. */
  policyClass(): PluginClass | null {
    const impl = this.impl;
    if (typeof impl.evictionPolicy !== 'function') return null;
    return function SpecPolicy(capacity: number) {
      return impl.evictionPolicy!(capacity);
    } as unknown as PluginClass;
  }
}
