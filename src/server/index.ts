export { AdmissionGate } from './admission.ts';
export { backendInfo } from './info.ts';
export { ServerMetrics } from './metrics.ts';
export { notifyKvTransferRequestRejected } from './rejection.ts';
export {
  createServer,
  DEFAULT_MAX_QUEUE,
  type KVServer,
  type ListeningAddress,
  packageVersion,
  type ServerOptions,
} from './server.ts';
