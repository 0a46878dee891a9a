/** ExampleConnector's kv_connector_extra_config (spec §5.10). */
import os from 'node:os';
import path from 'node:path';
import { configError } from '../../config/config-error.ts';

export interface ExampleConnectorConfig {
  /** Folder holding one sub-folder per stored prompt. Default: the OS temp directory. */
  sharedStoragePath: string;
}

export function parseExampleConfig(extra: Record<string, unknown>): ExampleConnectorConfig {
  const value = extra['shared_storage_path'];
  if (value === undefined || value === null) return { sharedStoragePath: os.tmpdir() };
  if (typeof value !== 'string' || value === '') {
    throw configError(
      'kv_connector_extra_config.shared_storage_path',
      'a non-empty directory path',
      value,
      'Set "shared_storage_path" to a directory every engine sharing the KV can read and write, e.g. "/mnt/kv".',
    );
  }
  return { sharedStoragePath: path.resolve(value) };
}
