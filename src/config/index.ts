export {
  closestNames,
  configError,
  describeValue,
  didYouMean,
  pythonStr,
} from './config-error.ts';
export {
  type DottedArg,
  deepMerge,
  dottedArgsToObject,
  extractDottedArgs,
  parseDottedValue,
} from './dotted-args.ts';
export { buildEngineConfig, type EngineOptionsInput, resolveEngineOptions } from './engine-config.ts';
export {
  DEFAULT_KV_CACHE_MEMORY_BYTES,
  defaultEngineOptions,
  ENGINE_OPTION_NAMES,
  ENGINE_OPTIONS,
  type EngineOptionDef,
  type EngineOptionKind,
  type EngineOptions,
  optionFlag,
} from './engine-options.ts';
export { expandJsonHumanReadableNumbers, parseHumanReadableInt } from './human-readable.ts';
export {
  KV_LOAD_FAILURE_POLICIES,
  KV_ROLES,
  KV_TRANSFER_CONFIG_FIELDS,
  KVTransferConfig,
  parseConfigJson,
} from './kv-transfer-config.ts';
export { type ModelInfo, resolveModelInfo } from './model-info.ts';
export * from './model-presets.ts';
export { MULTI_CONNECTOR_NAME, multiConnectorChildren } from './multi-connector-config.ts';
export type * from './types.ts';
