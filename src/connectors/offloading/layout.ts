/**
 * How offloaded chunks map onto the paged KV memory and onto tier keys. A chunk is
 * `blocksPerChunk` consecutive GPU blocks of one KV cache group; its bytes in a CPU slot or
 * a tier value are, for each layer of the group in order, the chunk's blocks of that layer.
 * Keys carry the model, the KV layout and the group, then the chunk's last block hash
 * (which fingerprints the whole prefix), so engines with different layouts never collide.
 */
import type { EngineConfig } from '../../config/types.ts';
import { KVError } from '../../errors/kv-error.ts';
import { blockHashHex } from '../../kv/block-hash.ts';
import type { BlockHash, KVCacheConfig } from '../../kv/interfaces.ts';
import type { OffloadingConfig } from './config.ts';

export interface GroupLayout {
  index: number;
  layerNames: readonly string[];
  /** Bytes of one block of one layer (K and V). */
  pageSizeBytes: number;
  /** Bytes of one chunk of this group (every layer). */
  chunkBytes: number;
  keyPrefix: string;
}

export class OffloadLayout {
  readonly gpuBlockSize: number;
  readonly blocksPerChunk: number;
  readonly chunkTokens: number;
  readonly groups: GroupLayout[];
  /** Bytes of one CPU slot: the largest chunk of any group. */
  readonly slotBytes: number;
  readonly numSlots: number;

  constructor(engineConfig: EngineConfig, kvCacheConfig: KVCacheConfig, config: OffloadingConfig) {
    const first = kvCacheConfig.groups[0];
    if (!first) {
      throw new KVError('KV_OFFLOAD_LAYOUT', 'OffloadingConnector needs at least one KV cache group', {
        hint: 'The model has no attention layers to offload.',
      });
    }
    const sizes = new Set(kvCacheConfig.groups.map((g) => g.spec.blockSize));
    if (sizes.size !== 1) {
      throw new KVError(
        'KV_OFFLOAD_LAYOUT',
        `OffloadingConnector needs every KV cache group to use one block size, got ${[...sizes].join(', ')}`,
        { hint: 'Use one --block-size for every layer type (kvconnect presets do).' },
      );
    }
    this.gpuBlockSize = first.spec.blockSize;
    this.blocksPerChunk = config.blocksPerChunk;
    this.chunkTokens = config.blocksPerChunk * this.gpuBlockSize;
    const tp = engineConfig.parallel.tensorParallelSize;
    this.groups = kvCacheConfig.groups.map((g, index) => {
      const s = g.spec;
      return {
        index,
        layerNames: g.layerNames,
        pageSizeBytes: s.pageSizeBytes,
        chunkBytes: g.layerNames.length * s.pageSizeBytes * config.blocksPerChunk,
        keyPrefix: [
          engineConfig.model.model,
          s.dtype,
          `h${s.numKvHeads}`,
          `d${s.headSize}`,
          `b${s.blockSize}`,
          `c${config.blocksPerChunk}`,
          `tp${tp}`,
          `g${index}-${s.kind}-l${g.layerNames.length}`,
        ].join(':'),
      };
    });
    this.slotBytes = Math.max(...this.groups.map((g) => g.chunkBytes));
    this.numSlots = Math.floor(config.cpuBytesToUse / (this.slotBytes * tp));
  }

  chunkKey(group: number, chunkLastHash: BlockHash): string {
    const g = this.groups[group];
    if (!g) throw new RangeError(`no KV cache group ${group}`);
    return `${g.keyPrefix}:${blockHashHex(chunkLastHash)}`;
  }

  /** Hash of the chunk's last block, or null if the chunk is not fully hashed yet. */
  chunkHash(blockHashes: readonly BlockHash[], chunk: number): BlockHash | null {
    return blockHashes[(chunk + 1) * this.blocksPerChunk - 1] ?? null;
  }

  /** Keys of one chunk for every group, or null if it is not fully hashed. */
  chunkKeys(blockHashes: readonly BlockHash[], chunk: number): string[] | null {
    const h = this.chunkHash(blockHashes, chunk);
    if (h === null) return null;
    return this.groups.map((g) => this.chunkKey(g.index, h));
  }
}

/** The KV cache group and block hash (hex) a chunk key names, or null for another string. */
export function parseChunkKey(key: string): { group: number; hashHex: string } | null {
  const m = /:g(\d+)-[a-z_]+-l\d+:([0-9a-f]+)$/.exec(key);
  return m ? { group: Number(m[1]), hashHex: m[2] as string } : null;
}
