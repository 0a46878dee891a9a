export { formatErrorJson, formatErrorText } from './format.ts';
export { isKVError, KVError, type KVErrorOptions } from './kv-error.ts';
