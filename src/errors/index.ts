export {
  type ErrorArea,
  type ErrorCode,
  type ErrorCodeInfo,
  errorCatalog,
  isErrorCode,
  statusOfCode,
  toErrorCode,
} from './codes.ts';
export { type ErrorJson, errorTypeOfStatus, formatErrorJson, formatErrorText } from './format.ts';
export { httpStatusOf, isKVError, KVError, type KVErrorOptions } from './kv-error.ts';
export { pythonRepr } from './python-repr.ts';
