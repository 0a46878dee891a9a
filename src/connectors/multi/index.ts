/** MultiConnector: several connectors used as one. Loaded lazily by the registry. */
export {
  MultiConnector,
  type MultiConnectorMetadata,
  type MultiConnectorWorkerMetadata,
} from './connector.ts';
export { mergeTransferParams, pythonSetRepr, statsPerChildClass } from './merge.ts';
