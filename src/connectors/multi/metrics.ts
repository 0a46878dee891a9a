/**
 * MultiConnector's metrics: the union of its children's (docs/connectors/multi.md). Its stats
 * are `{childClassName: stats}` (./merge.ts), so each child's specs are read within its class
 * name; children of one class share one stats entry, so a metric of theirs is bound once.
 */
import { multiConnectorChildren } from '../../config/multi-connector-config.ts';
import type { KVTransferConfigLike } from '../../config/types.ts';
import type { ConnectorMetricSpec } from '../../connector/metric-specs.ts';
import { resolveChildClasses } from './children.ts';

export async function multiConnectorMetricSpecs(
  config: KVTransferConfigLike,
): Promise<ConnectorMetricSpec[]> {
  const children = multiConnectorChildren(config);
  const classes = await resolveChildClasses(children.map((child) => ({ config: child })));
  const specs: ConnectorMetricSpec[] = [];
  const bound = new Set<string>();
  for (const [i, cls] of classes.entries()) {
    for (const spec of (await cls.metricSpecs?.(children[i]!)) ?? []) {
      const id = `${cls.name}\u0000${spec.name}`;
      if (bound.has(id)) continue;
      bound.add(id);
      specs.push({ ...spec, within: [cls.name, ...(spec.within ?? [])] });
    }
  }
  return specs;
}
