/**
 * The built-in connector names (docs/configuration.md#connectors) with their lazy loaders and
 * static capabilities. Each loader is a thunk around a literal dynamic import, so tsc
 * rewrites it for dist/ and nothing is imported until the connector is used.
 *
 * vLLM connectors Node.js cannot run (they need a native library with Python bindings) are
 * listed with `load: null`: they resolve to a loader that fails with
 * KV_CONNECTOR_NOT_IMPLEMENTED naming the kvconnect connector that does the same job, and
 * `supportsHMA` stands in for the class's static (for the HMA rule of a MultiConnector).
 */
import { KVError } from '../errors/kv-error.ts';

export type ConnectorModule = Record<string, unknown>;
export type ConnectorModuleLoader = () => Promise<ConnectorModule>;

export interface BuiltinConnector {
  name: string;
  /** Export of the module that holds the class. */
  className: string;
  /** null when Node.js cannot run it ('unavailable'). */
  load: ConnectorModuleLoader | null;
  /** vLLM's SupportsHMA for this name (docs/configuration.md#connectors); used when `load` is null. */
  supportsHMA: boolean;
  /** 'unavailable': it needs a native library Node.js cannot use. */
  status: 'available' | 'unavailable';
  /** What it needs / what is missing, for docs and errors. */
  needs: string;
  /** The kvconnect connector that does the same job (for 'unavailable'). */
  alternative?: string;
}

export const BUILTIN_CONNECTORS: readonly BuiltinConnector[] = [
  {
    name: 'ExampleConnector',
    className: 'ExampleConnector',
    load: () => import('../connectors/example/index.ts'),
    supportsHMA: false,
    status: 'available',
    needs: 'a shared directory (kv_connector_extra_config.shared_storage_path)',
  },
  {
    name: 'SharedStorageConnector',
    className: 'ExampleConnector',
    load: () => import('../connectors/example/index.ts'),
    supportsHMA: false,
    status: 'available',
    needs: 'the old name of ExampleConnector; same options',
  },
  {
    name: 'ExampleHiddenStatesConnector',
    className: 'ExampleHiddenStatesConnector',
    load: null,
    supportsHMA: true,
    status: 'unavailable',
    needs: "vLLM's extract_hidden_states speculative method, which kvconnect's engine does not have",
    alternative: 'ExampleConnector',
  },
  {
    name: 'LMCacheConnectorV1',
    className: 'LMCacheConnectorV1',
    load: null,
    supportsHMA: false,
    status: 'unavailable',
    needs: 'the LMCache Python package',
    alternative: 'OffloadingConnector',
  },
  {
    name: 'LMCacheMPConnector',
    className: 'LMCacheMPConnector',
    load: null,
    supportsHMA: false,
    status: 'unavailable',
    needs: 'an LMCache multi-process server (Python)',
    alternative: 'OffloadingConnector',
  },
  {
    name: 'NixlConnector',
    className: 'NixlConnector',
    load: () => import('../connectors/nixl/index.ts'),
    supportsHMA: true,
    status: 'available',
    needs: "kvconnect's transfer agent (tcp or shm transport); same as NixlPullConnector",
  },
  {
    name: 'NixlPullConnector',
    className: 'NixlPullConnector',
    load: () => import('../connectors/nixl/index.ts'),
    supportsHMA: true,
    status: 'available',
    needs: "kvconnect's transfer agent (tcp or shm transport)",
  },
  {
    name: 'NixlPushConnector',
    className: 'NixlPushConnector',
    load: () => import('../connectors/nixl/index.ts'),
    supportsHMA: true,
    status: 'available',
    needs: "kvconnect's transfer agent (tcp or shm transport)",
  },
  {
    name: 'MultiConnector',
    className: 'MultiConnector',
    load: () => import('../connectors/multi/index.ts'),
    supportsHMA: true,
    status: 'available',
    needs: 'kv_connector_extra_config.connectors: a list of child configs',
  },
  {
    name: 'MoRIIOConnector',
    className: 'MoRIIOConnector',
    load: () => import('../connectors/moriio/index.ts'),
    supportsHMA: false,
    status: 'available',
    needs: 'kv_connector_extra_config.http_port (the OpenAI HTTP port of this instance)',
  },
  {
    name: 'OffloadingConnector',
    className: 'OffloadingConnector',
    load: () => import('../connectors/offloading/index.ts'),
    supportsHMA: true,
    status: 'available',
    needs: 'kv_connector_extra_config.cpu_bytes_to_use',
  },
  {
    name: 'DecodeBenchConnector',
    className: 'DecodeBenchConnector',
    load: () => import('../connectors/decode-bench/index.ts'),
    supportsHMA: true,
    status: 'available',
    needs: 'nothing (fills KV with synthetic values)',
  },
  {
    name: 'MooncakeConnector',
    className: 'MooncakeConnector',
    load: null,
    supportsHMA: true,
    status: 'unavailable',
    needs: 'the Mooncake Transfer Engine (native RDMA library with Python bindings)',
    alternative: 'NixlPushConnector',
  },
  {
    name: 'MooncakeStoreConnector',
    className: 'MooncakeStoreConnector',
    load: null,
    supportsHMA: true,
    status: 'unavailable',
    needs: 'a Mooncake distributed store (native library with Python bindings)',
    alternative: 'OffloadingConnector',
  },
  {
    name: 'FlexKVConnectorV1',
    className: 'FlexKVConnectorV1',
    load: null,
    supportsHMA: false,
    status: 'unavailable',
    needs: 'the FlexKV Python package',
    alternative: 'OffloadingConnector',
  },
  {
    name: 'SimpleCPUOffloadConnector',
    className: 'SimpleCPUOffloadConnector',
    load: null,
    supportsHMA: true,
    status: 'unavailable',
    needs: "vLLM's CUDA host-copy kernels",
    alternative: 'OffloadingConnector',
  },
  {
    name: 'HF3FSKVConnector',
    className: 'HF3FSKVConnector',
    load: null,
    supportsHMA: false,
    status: 'unavailable',
    needs: 'the DeepSeek 3FS file system client and its metadata server',
    alternative: 'OffloadingConnector',
  },
];

export function getBuiltinConnector(name: string): BuiltinConnector | undefined {
  return BUILTIN_CONNECTORS.find((c) => c.name === name);
}

/** A loader that explains precisely why this name cannot be loaded. */
export function notImplementedLoader(entry: BuiltinConnector): ConnectorModuleLoader {
  return async () => {
    throw notImplementedError(entry);
  };
}

export function notImplementedError(entry: BuiltinConnector): KVError {
  const message = `Connector ${entry.name} is not available in kvconnect: it needs ${entry.needs}, which Node.js cannot load.`;
  return new KVError('KV_CONNECTOR_NOT_IMPLEMENTED', message, {
    field: 'kv_connector',
    hint: `Use ${entry.alternative}, which does the same job in kvconnect (see docs/configuration.md).`,
    details: {
      connector: entry.name,
      status: entry.status,
      ...(entry.alternative ? { alternative: entry.alternative } : {}),
    },
  });
}
