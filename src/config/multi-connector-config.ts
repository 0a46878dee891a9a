/**
 * MultiConnector's children (docs/connectors/multi.md):
 * `kv_connector_extra_config.connectors` is an ordered list of full transfer configs. A child
 * without its own engine_id gets the parent's.
 */
import { configError } from './config-error.ts';
import { KVTransferConfig } from './kv-transfer-config.ts';
import type { KVTransferConfigLike } from './types.ts';

export const MULTI_CONNECTOR_NAME = 'MultiConnector';

/** Child configs, validated; an absent list is empty. Field paths point into the parent. */
export function multiConnectorChildren(parent: KVTransferConfigLike): KVTransferConfig[] {
  const list = parent.kv_connector_extra_config['connectors'];
  if (list === undefined) return [];
  const field = 'kv_connector_extra_config.connectors';
  if (!Array.isArray(list)) {
    throw configError(
      field,
      'a list of connector configs',
      list,
      'Write "connectors": [{"kv_connector":"NixlConnector","kv_role":"kv_both"}, ...].',
    );
  }
  return list.map((child, i) => {
    if (typeof child !== 'object' || child === null || Array.isArray(child)) {
      throw configError(
        `${field}[${i}]`,
        'a connector config object',
        child,
        'Each entry is a full kv_transfer_config.',
      );
    }
    return KVTransferConfig.fromObject(
      { engine_id: parent.engine_id, ...(child as Record<string, unknown>) },
      `${field}[${i}]`,
    );
  });
}
