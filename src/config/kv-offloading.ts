/**
 * vLLM's `--kv-offloading-size` / `--kv-offloading-backend` shortcuts
 * (VllmConfig._post_init_kv_transfer_config): with a size in GiB, the KV transfer config is
 * created if absent and becomes the offloading connector with role kv_both, whatever
 * connector was configured. `native` is the OffloadingConnector with
 * cpu_bytes_to_use = size × 2³⁰ merged into its extra config; `lmcache` would be vLLM's
 * LMCacheMPConnector, which kvconnect does not have, so it is refused with a fix.
 */
import { KVError } from '../errors/kv-error.ts';
import { getLogger } from '../logging/logger.ts';
import { type Environment, readEnv } from '../util/envs.ts';
import { CONFIG_INVALID } from './config-error.ts';
import { KV_TRANSFER_CONFIG_FIELDS, KVTransferConfig } from './kv-transfer-config.ts';
import type { KVTransferConfigLike } from './types.ts';

const log = getLogger('kvconnect.config.kv-offloading');

export const KV_OFFLOADING_BACKENDS = ['native', 'lmcache'] as const;
export type KVOffloadingBackend = (typeof KV_OFFLOADING_BACKENDS)[number];

export function applyKvOffloading(
  kv: KVTransferConfigLike | null,
  sizeGiB: number | null,
  backend: KVOffloadingBackend,
  env?: Environment,
): KVTransferConfigLike | null {
  if (sizeGiB === null) return kv;
  if (backend === 'lmcache') {
    throw new KVError(
      CONFIG_INVALID,
      "kv_offloading_backend 'lmcache' selects vLLM's LMCacheMPConnector, which kvconnect does not implement",
      {
        field: 'kv_offloading_backend',
        hint: 'Use --kv-offloading-backend native (the OffloadingConnector), or configure an OffloadingConnector with secondary_tiers in --kv-transfer-config.',
        details: { expected: 'native', received: 'lmcache' },
      },
    );
  }
  const simpleOffload = readEnv('VLLM_USE_SIMPLE_KV_OFFLOAD', env);
  if (Number.parseInt(simpleOffload ?? '0', 10) > 0) {
    throw new KVError(
      CONFIG_INVALID,
      "VLLM_USE_SIMPLE_KV_OFFLOAD selects vLLM's SimpleCPUOffloadConnector, which kvconnect does not implement",
      {
        field: 'kv_offloading_backend',
        hint: 'Unset VLLM_USE_SIMPLE_KV_OFFLOAD to use the OffloadingConnector.',
        details: {
          expected: 'VLLM_USE_SIMPLE_KV_OFFLOAD unset or 0',
          received: simpleOffload,
        },
      },
    );
  }
  const fields: Record<string, unknown> = {};
  if (kv) for (const key of KV_TRANSFER_CONFIG_FIELDS) fields[key] = kv[key];
  if (kv?.kv_connector && kv.kv_connector !== 'OffloadingConnector') {
    log.warn(
      '--kv-offloading-size replaces kv_connector %s with OffloadingConnector (as vLLM does)',
      kv.kv_connector,
    );
  }
  return new KVTransferConfig({
    ...fields,
    kv_connector: 'OffloadingConnector',
    kv_role: 'kv_both',
    kv_connector_extra_config: {
      ...(kv?.kv_connector_extra_config ?? {}),
      // vLLM multiplies a float; a byte count is whole.
      cpu_bytes_to_use: Math.floor(sizeGiB * 2 ** 30),
    },
  });
}
