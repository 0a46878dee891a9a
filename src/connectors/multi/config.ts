/**
 * MultiConnector's kv_connector_extra_config (docs/connectors/multi.md): `connectors`, the
 * ordered child transfer configs, read by the config layer's one reader of them.
 */
import { randomUUID } from 'node:crypto';
import type { ExtraConfigSchema } from '../../config/extra-config.ts';
import { multiConnectorChildren } from '../../config/multi-connector-config.ts';
import type { EngineConfig, KVTransferConfigLike } from '../../config/types.ts';

export const MULTI_EXTRA_CONFIG: ExtraConfigSchema = {
  connector: 'MultiConnector',
  fields: { connectors: { type: 'custom' } },
};

/** The children's configs, each checked; throws the config error of the first bad one. */
export function parseMultiConfig(
  extra: Record<string, unknown>,
  engineConfig: EngineConfig,
): { connectors: ReturnType<typeof multiConnectorChildren> } {
  const parent = {
    engine_id: engineConfig.kvTransferConfig?.engine_id ?? randomUUID(),
    kv_connector_extra_config: extra,
  };
  return { connectors: multiConnectorChildren(parent as unknown as KVTransferConfigLike) };
}
