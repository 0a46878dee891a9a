/** MultiConnector: several connectors used as one. Loaded lazily by the registry. */
export { MultiConnector } from './connector.ts';
export { statsPerChildClass } from './stats.ts';
export type { MultiConnectorMetadata, MultiConnectorWorkerMetadata } from './step-metadata.ts';
export { mergeTransferParams, pythonSetRepr } from './transfer-params.ts';
