/** ExampleConnector (alias SharedStorageConnector): KV of whole prompts in a shared folder. */
export { type ExampleConnectorConfig, parseExampleConfig } from './config.ts';
export { ExampleConnector } from './example-connector.ts';
export { encodeKVFile, type KVFileHeader, type KVFileShape, readBlock, readKVFileHeader } from './kv-file.ts';
export type { ExampleConnectorMetadata, ExampleLoadJob, ExampleSaveJob } from './metadata.ts';
export {
  alignToBlockSize,
  layerFileName,
  layoutTag,
  promptKey,
  StorageLayout,
  storedTokenCount,
} from './storage-layout.ts';
