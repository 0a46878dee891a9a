/** EngineConfig ↔ plain data, so it can cross into worker threads (classes do not clone). */
import { KV_TRANSFER_CONFIG_FIELDS, KVTransferConfig } from '../../config/kv-transfer-config.ts';
import type { EngineConfig, KVTransferConfigFields } from '../../config/types.ts';
import type { PlainEngineConfig } from './tp-protocol.ts';

export function toPlainEngineConfig(config: EngineConfig): PlainEngineConfig {
  const kv = config.kvTransferConfig;
  let kvTransferFields: KVTransferConfigFields | null = null;
  if (kv) {
    const fields: Record<string, unknown> = {};
    for (const key of KV_TRANSFER_CONFIG_FIELDS) fields[key] = kv[key];
    kvTransferFields = fields as unknown as KVTransferConfigFields;
  }
  return {
    model: config.model,
    cache: config.cache,
    scheduler: config.scheduler,
    parallel: config.parallel,
    kvTransferFields,
  };
}

export function fromPlainEngineConfig(plain: PlainEngineConfig): EngineConfig {
  return {
    model: plain.model,
    cache: plain.cache,
    scheduler: plain.scheduler,
    parallel: plain.parallel,
    kvTransferConfig: plain.kvTransferFields ? new KVTransferConfig(plain.kvTransferFields) : null,
  };
}
