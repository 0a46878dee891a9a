/** ExampleConnector's kv_connector_extra_config (docs/connectors/example.md). */
import os from 'node:os';
import path from 'node:path';
import { type ExtraConfigSchema, readExtraConfig } from '../../config/extra-config.ts';

export interface ExampleConnectorConfig {
  /** Folder holding one sub-folder per stored prompt. Default: the OS temp directory. */
  sharedStoragePath: string;
}

export const EXAMPLE_EXTRA_CONFIG = {
  connector: 'ExampleConnector',
  fields: {
    shared_storage_path: {
      type: 'string',
      nonEmpty: true,
      hint: 'Set "shared_storage_path" to a directory every engine sharing the KV can read and write, e.g. "/mnt/kv".',
    },
  },
} as const satisfies ExtraConfigSchema;

export function parseExampleConfig(extra: Record<string, unknown>): ExampleConnectorConfig {
  const dir = readExtraConfig(EXAMPLE_EXTRA_CONFIG, extra).shared_storage_path;
  return { sharedStoragePath: dir === undefined ? os.tmpdir() : path.resolve(dir) };
}
