/**
 * MoRIIOConnector: the configuration is complete (./config.ts); the transfer runtime is
 * not implemented yet, so construction fails after validating the config.
 */
import type { EngineConfig } from '../../config/types.ts';
import { KVConnectorBase } from '../../connector/base.ts';
import type {
  ConnectorRequest,
  KVConnectorMetadata,
  KVConnectorRole,
  MatchedTokens,
  SchedulerOutput,
} from '../../connector/types.ts';
import { KVError } from '../../errors/kv-error.ts';
import type { KVCacheBlocks, KVCacheConfig } from '../../kv/interfaces.ts';
import { type MoRIIOConfig, parseMoRIIOConfig } from './config.ts';

export * from './config.ts';

function notImplemented(): KVError {
  return new KVError(
    'KV_CONNECTOR_NOT_IMPLEMENTED',
    'Connector MoRIIOConnector is not implemented yet in this version of kvconnect (its configuration is validated, its transfer runtime is missing).',
    {
      field: 'kv_connector',
      hint: 'Use NixlConnector for P/D transfer until the MoRIIO runtime lands; `kvconnect check-config` validates MoRIIO configs today.',
    },
  );
}

export class MoRIIOConnector extends KVConnectorBase {
  static override supportsHMA = false;

  static override validateExtraConfig(
    extra: Record<string, unknown>,
    engineConfig: EngineConfig,
  ): MoRIIOConfig {
    return parseMoRIIOConfig(extra, engineConfig);
  }

  readonly moriioConfig: MoRIIOConfig;

  constructor(engineConfig: EngineConfig, role: KVConnectorRole, kvCacheConfig: KVCacheConfig) {
    super(engineConfig, role, kvCacheConfig);
    this.moriioConfig = parseMoRIIOConfig(this.kvTransferConfig.kv_connector_extra_config, engineConfig);
    throw notImplemented();
  }

  startLoadKv(): never {
    throw notImplemented();
  }
  waitForLayerLoad(): never {
    throw notImplemented();
  }
  saveKvLayer(): never {
    throw notImplemented();
  }
  waitForSave(): never {
    throw notImplemented();
  }
  getNumNewMatchedTokens(_request: ConnectorRequest, _numComputedTokens: number): MatchedTokens {
    throw notImplemented();
  }
  updateStateAfterAlloc(
    _request: ConnectorRequest,
    _blocks: KVCacheBlocks,
    _numExternalTokens: number,
  ): void {
    throw notImplemented();
  }
  buildConnectorMeta(_schedulerOutput: SchedulerOutput): KVConnectorMetadata {
    throw notImplemented();
  }
}
