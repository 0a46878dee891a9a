/** Public API of the KV cache core. */
export * from './block-hash.ts';
export * from './block-hasher.ts';
export { BlockPool, type BlockPoolOptions, KVBlock } from './block-pool.ts';
export type { ExtraKey } from './cbor-block-key.ts';
export * from './dtype.ts';
export type * from './interfaces.ts';
export { emptyBlockList, KVCacheBlockList } from './kv-cache-blocks.ts';
export * from './kv-cache-config.ts';
export * from './kv-cache-manager.ts';
export * from './paged-memory.ts';
export * from './specs.ts';
