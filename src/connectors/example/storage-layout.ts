/**
 * Where ExampleConnector keeps a prompt's KV
 * (docs/connectors/example.md#what-is-stored-and-the-lookup-rule): one folder per prompt key
 * under `shared_storage_path`, one file per layer. A folder only ever appears complete:
 * layers are written into a private staging folder that is renamed into place once every
 * layer is written, so a lookup (the folder exists) never trusts a half-written entry.
 */
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

/** vLLM's align_to_block_size: `(n - 1) // bs * bs`, clamped at 0. */
export function alignToBlockSize(numTokens: number, blockSize: number): number {
  return Math.max(0, Math.floor((numTokens - 1) / blockSize) * blockSize);
}

/** Tokens of a prompt that are stored and looked up: align_to_block_size(len(prompt) - 1). */
export function storedTokenCount(promptLength: number, blockSize: number): number {
  return alignToBlockSize(promptLength - 1, blockSize);
}

function digest(algorithm: 'md5' | 'sha256') {
  return createHash(algorithm);
}

/**
 * The prompt key: hex md5 (SHA-256 where md5 is unavailable, e.g. FIPS mode) of
 *   the token ids as little-endian int64 bytes (what vLLM hashes), then
 *   `|layout:<layoutTag>` in UTF-8 (model, dtype and block size: entries of another model or
 *   layout are simply not found, instead of failing to load), then
 *   `|salt:<cacheSalt>` in UTF-8 when the request has a cache salt.
 */
export function promptKey(tokenIds: readonly number[], layoutTag: string, cacheSalt?: string): string {
  const bytes = Buffer.alloc(tokenIds.length * 8);
  tokenIds.forEach((t, i) => {
    bytes.writeBigInt64LE(BigInt(t), i * 8);
  });
  let hash: ReturnType<typeof digest>;
  try {
    hash = digest('md5');
  } catch {
    hash = digest('sha256');
  }
  hash.update(bytes);
  hash.update(`|layout:${layoutTag}`, 'utf8');
  if (cacheSalt) hash.update(`|salt:${cacheSalt}`, 'utf8');
  return hash.digest('hex');
}

/** The layout part of the key: `<model>/<dtype>/<blockSize>`. */
export function layoutTag(model: string, dtype: string, blockSize: number): string {
  return `${model}/${dtype}/${blockSize}`;
}

/** Layer names are dotted identifiers; anything else is replaced so it stays one file name. */
export function layerFileName(layerName: string): string {
  return `${layerName.replace(/[^A-Za-z0-9._-]/g, '_')}.kv`;
}

export class StorageLayout {
  readonly root: string;

  constructor(root: string) {
    this.root = root;
  }

  folder(key: string): string {
    return path.join(this.root, key);
  }

  layerFile(key: string, layerName: string): string {
    return path.join(this.folder(key), layerFileName(layerName));
  }

  /** True when a complete entry for `key` is published (a cheap existence check). */
  has(key: string): boolean {
    return fs.existsSync(this.folder(key));
  }

  /** A fresh private folder to write an entry into before publishing it. */
  createStaging(key: string): string {
    fs.mkdirSync(this.root, { recursive: true });
    const dir = path.join(this.root, `${key}.staging-${process.pid}-${randomBytes(4).toString('hex')}`);
    fs.mkdirSync(dir);
    return dir;
  }

  /**
   * Renames the staging folder into place. If another writer published the same key first,
   * its entry wins and ours is discarded. Returns true when ours was published.
   */
  publish(staging: string, key: string): boolean {
    try {
      fs.renameSync(staging, this.folder(key));
      return true;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'EEXIST' || code === 'ENOTEMPTY' || code === 'EPERM') {
        fs.rmSync(staging, { recursive: true, force: true });
        return false;
      }
      throw e;
    }
  }

  discard(staging: string): void {
    fs.rmSync(staging, { recursive: true, force: true });
  }
}
