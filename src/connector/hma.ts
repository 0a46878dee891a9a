/**
 * The hybrid KV cache manager (HMA) decision
 * (docs/configuration.md#hybrid-kv-cache-manager-hma). kvconnect's CPU engine supports hybrid
 * KV caches, so only the connector rule applies:
 *  - `true` (--disable-hybrid-kv-cache-manager): off.
 *  - `null` (auto) with a connector lacking HMA support: off, with vLLM's warning.
 *  - `false` (--no-disable-hybrid-kv-cache-manager): on; an unsupported connector then fails
 *    in KVConnectorFactory.createConnector (and in `kvconnect check-config`).
 *  - otherwise on.
 * With HMA off, the KV-cache core promotes a hybrid model's sliding-window layers to full
 * attention (one KV cache group); this module only decides the flag.
 */
import type { EngineConfig } from '../config/types.ts';
import { getLogger } from '../logging/logger.ts';
import { KVConnectorFactory } from './factory.ts';

const log = getLogger('kvconnect.connector.hma');

export const HMA_AUTO_DISABLE_WARNING =
  'Turning off hybrid kv cache manager because `--kv-transfer-config` selects a KV connector that does not support it. Impact: hybrid SSM models (e.g. Jamba, Bamba) require HMA and will fail at startup without it; models with sliding window attention will run with reduced performance. To add HMA support to a KV connector, subclass `SupportsHMA` defined in kv_connector/v1/base.py (for MultiConnector, all child connectors must support HMA).';

export type HMAReason =
  | 'explicitly-disabled'
  | 'explicitly-enabled'
  | 'auto-connector-unsupported'
  | 'auto-connector-supported'
  | 'auto-no-connector';

export interface HMADecision {
  /** The resolved `disable_hybrid_kv_cache_manager`. */
  disableHybridKvCacheManager: boolean;
  enabled: boolean;
  reason: HMAReason;
  /** One sentence for reports. */
  explanation: string;
  /** The connector's HMA support, when a transfer config is set. */
  connectorSupportsHMA: boolean | null;
}

export async function resolveHybridKvCacheManager(engineConfig: EngineConfig): Promise<HMADecision> {
  const setting = engineConfig.scheduler.disableHybridKvCacheManager;
  const transfer = engineConfig.kvTransferConfig;
  const supports = transfer?.kv_connector ? await KVConnectorFactory.supportsHMAConfig(transfer) : null;
  const connector = transfer?.kv_connector ?? null;
  if (setting === true) {
    return decision(true, 'explicitly-disabled', 'disabled by --disable-hybrid-kv-cache-manager', supports);
  }
  if (setting === false) {
    return decision(
      false,
      'explicitly-enabled',
      'forced on by --no-disable-hybrid-kv-cache-manager',
      supports,
    );
  }
  if (supports === false) {
    log.warn(HMA_AUTO_DISABLE_WARNING);
    return decision(
      true,
      'auto-connector-unsupported',
      `auto: turned off because ${connector} does not support HMA`,
      supports,
    );
  }
  if (supports === true) {
    return decision(false, 'auto-connector-supported', `auto: on, ${connector} supports HMA`, supports);
  }
  return decision(false, 'auto-no-connector', 'auto: on, no KV connector is configured', supports);
}

function decision(
  disable: boolean,
  reason: HMAReason,
  explanation: string,
  supports: boolean | null,
): HMADecision {
  return {
    disableHybridKvCacheManager: disable,
    enabled: !disable,
    reason,
    explanation,
    connectorSupportsHMA: supports,
  };
}

/** A copy of `engineConfig` with the tri-state resolved to the decision. */
export function applyHMADecision(engineConfig: EngineConfig, d: HMADecision): EngineConfig {
  return {
    ...engineConfig,
    scheduler: { ...engineConfig.scheduler, disableHybridKvCacheManager: d.disableHybridKvCacheManager },
  };
}
