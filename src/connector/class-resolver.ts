/**
 * How a connector built from other connectors (MultiConnector) loads their classes. The
 * factory installs its resolver when it loads; a composite connector asks here instead of
 * importing the factory, whose registry loads that connector lazily (an import cycle).
 */
import type { KVTransferConfigLike } from '../config/types.ts';
import { KVError } from '../errors/kv-error.ts';
import type { KVConnectorClass } from './base.ts';

export type ConnectorClassResolver = (config: KVTransferConfigLike) => Promise<KVConnectorClass>;

let resolver: ConnectorClassResolver | null = null;

export function installConnectorClassResolver(resolve: ConnectorClassResolver): void {
  resolver = resolve;
}

export function resolveConnectorClass(config: KVTransferConfigLike): Promise<KVConnectorClass> {
  if (resolver === null) {
    return Promise.reject(
      new KVError(
        'KV_CONNECTOR_FACTORY_MISSING',
        'No connector factory is loaded to resolve child connectors',
        {
          hint: 'Create composite connectors through KVConnectorFactory.createConnector.',
        },
      ),
    );
  }
  return resolver(config);
}
