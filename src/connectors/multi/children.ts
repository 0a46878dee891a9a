/**
 * MultiConnector's children (docs/connectors/multi.md): built from
 * `kv_connector_extra_config.connectors`, in order, each with the parent's engine config but
 * its own transfer config.
 *
 * Connector construction is synchronous while class loading is asynchronous (lazy imports),
 * so resolved child classes are kept in a process-wide cache: when every child's class is
 * already cached the children are built in the constructor; otherwise they are built as soon
 * as the classes are loaded (see MultiConnector.ready()).
 */
import { multiConnectorChildren } from '../../config/multi-connector-config.ts';
import type { EngineConfig, KVTransferConfigLike } from '../../config/types.ts';
import type { KVConnectorBase, KVConnectorClass } from '../../connector/base.ts';
import { resolveConnectorClass } from '../../connector/class-resolver.ts';
import type { KVConnectorRole } from '../../connector/types.ts';
import { KVError } from '../../errors/kv-error.ts';
import type { KVCacheConfig } from '../../kv/interfaces.ts';

const classCache = new Map<string, KVConnectorClass>();

function cacheKey(config: KVTransferConfigLike): string {
  return `${config.kv_connector_module_path ?? ''}\u0000${config.kv_connector ?? ''}`;
}

export interface ChildSpec {
  config: KVTransferConfigLike;
  engineConfig: EngineConfig;
}

/** The ordered child configs, each wrapped in a copy of the parent engine config. */
export function childSpecs(parent: EngineConfig): ChildSpec[] {
  const transfer = parent.kvTransferConfig;
  if (!transfer) return [];
  return multiConnectorChildren(transfer).map((config) => ({
    config,
    engineConfig: { ...parent, kvTransferConfig: config },
  }));
}

/** Loads (and caches) the class of every child, recursively for nested MultiConnectors. */
export async function resolveChildClasses(
  specs: readonly Pick<ChildSpec, 'config'>[],
): Promise<KVConnectorClass[]> {
  const classes: KVConnectorClass[] = [];
  for (const spec of specs) {
    const key = cacheKey(spec.config);
    let cls = classCache.get(key);
    if (!cls) {
      cls = await resolveConnectorClass(spec.config);
      classCache.set(key, cls);
    }
    classes.push(cls);
  }
  return classes;
}

export function cachedChildClasses(specs: readonly ChildSpec[]): KVConnectorClass[] | null {
  const classes: KVConnectorClass[] = [];
  for (const spec of specs) {
    const cls = classCache.get(cacheKey(spec.config));
    if (!cls) return null;
    classes.push(cls);
  }
  return classes;
}

/** True when the list is non-empty and every child class supports HMA. */
export function allSupportHMA(classes: readonly KVConnectorClass[]): boolean {
  return classes.length > 0 && classes.every((c) => c.supportsHMA === true);
}

/** vLLM's assertion: with HMA on, every child must support it. */
export function checkChildrenHMA(parent: EngineConfig, classes: readonly KVConnectorClass[]): void {
  if (parent.scheduler.disableHybridKvCacheManager === false && !allSupportHMA(classes)) {
    const without = classes.filter((c) => c.supportsHMA !== true).map((c) => c.name);
    throw new KVError(
      'KV_MULTI_CONNECTOR_HMA',
      'HMA should not be enabled unless all sub-connectors support it',
      {
        field: 'disable_hybrid_kv_cache_manager',
        hint: `${without.join(', ') || 'No child'} lacks HMA support: start with --disable-hybrid-kv-cache-manager, or use only children that support HMA.`,
      },
    );
  }
}

export function buildChildren(
  specs: readonly ChildSpec[],
  classes: readonly KVConnectorClass[],
  role: KVConnectorRole,
  kvCacheConfig: KVCacheConfig,
): KVConnectorBase[] {
  return specs.map((spec, i) => {
    const Concrete = classes[i] as unknown as new (
      e: EngineConfig,
      r: KVConnectorRole,
      k: KVCacheConfig,
    ) => KVConnectorBase;
    return new Concrete(spec.engineConfig, role, kvCacheConfig);
  });
}
