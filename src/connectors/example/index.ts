/** ExampleConnector (alias SharedStorageConnector): KV of whole prompts in a shared folder. */
export { type ExampleConnectorConfig, parseExampleConfig } from './config.ts';
export { ExampleConnector } from './connector.ts';
export { encodeKVFile, type KVFileHeader, type KVFileShape, readBlock, readKVFileHeader } from './kv-file.ts';
export type { ExampleStatsData } from './stats.ts';
export type { ExampleConnectorMetadata, ExampleLoadJob, ExampleSaveJob } from './step-metadata.ts';
export {
  alignToBlockSize,
  layerFileName,
  layoutTag,
  promptKey,
  StorageLayout,
  storedTokenCount,
} from './storage-layout.ts';
