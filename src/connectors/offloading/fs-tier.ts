/**
 * The `fs` secondary tier (docs/connectors/offloading.md#fs): one file per chunk under
 * `root_dir`, laid out as vLLM lays them out (vllm-key-layout.ts), so engines with the same
 * run configuration that share a directory share blocks. Each file is our frame (integrity
 * header + KV bytes), written atomically (temp file + rename) and skipped when the file
 * already exists, as vLLM does. Reads and writes run on their own workers with read
 * priority (dual-queue-pool.ts). Files that are truncated or fail their checksum are deleted
 * and count as misses. A lookup reads the file's header rather than only stat-ing it, so a
 * file the disk cannot read (EIO) or this process may not read (EACCES) is a miss before any
 * load is promised; a failed write (ENOSPC) stores nothing. A byte bound (`capacity_bytes`)
 * evicts the least recently used files.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, open, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { decodeFrame, encodeFrame, FRAME_HEADER_BYTES, frameHeaderMatches } from './block-frame.ts';
import { DualQueuePool } from './dual-queue-pool.ts';
import { emptyTierStats, type KVTier, type TierEntry, type TierStats } from './kv-tier.ts';
import { parseChunkKey } from './layout.ts';
import { DEFAULT_FS_READ_THREADS, DEFAULT_FS_WRITE_THREADS } from './tier-config.ts';
import { TierHealth } from './tier-health.ts';
import {
  BLOCK_FILE_SUFFIX,
  blockSubPath,
  configDir,
  configFilePath,
  isBlockGroupDir,
  isBlockPrefixDir,
  parseBlockSubPath,
  type RunLayout,
  rankDirName,
  runConfigFileText,
} from './vllm-key-layout.ts';

export interface FsTierOptions {
  rootDir: string;
  /** The run configuration and rank the files are named for. */
  run: RunLayout;
  capacityBytes: number | null;
  timeoutMs: number;
  nReadThreads?: number;
  nWriteThreads?: number;
}

const TEMP_SUFFIX = '.tmp';
/** Temp files older than this were left by a crashed writer. */
const STALE_TEMP_MS = 60_000;

/**
 * The (group, hash) a key is filed under: chunk keys name both; any other key (a caller
 * that uses the tier as a plain store) is filed by the SHA-256 of the key in group 0.
 */
function fileIdOf(key: string): { group: number; hashHex: string } {
  return parseChunkKey(key) ?? { group: 0, hashHex: createHash('sha256').update(key).digest('hex') };
}

export class FsTier implements KVTier {
  readonly kind = 'fs' as const;
  readonly medium = 'STORAGE' as const;
  readonly rootDir: string;
  /** `<root>/<model>_<digest>_r<rank>`: where this engine's block files live. */
  readonly blockDir: string;
  readonly configFile: string;
  readonly capacityBytes: number | null;
  readonly health: TierHealth;
  readonly pool: DualQueuePool;
  readonly #run: RunLayout;

  get timeoutMs(): number {
    return this.health.timeoutMs;
  }
  /** Block file path relative to blockDir → size, least recently used first. */
  readonly #files = new Map<string, number>();
  readonly #keyOfFile = new Map<string, string>();
  readonly #stats = emptyTierStats();
  readonly #ready: Promise<void>;
  #bytes = 0;
  #evicted: string[] = [];

  constructor(options: FsTierOptions) {
    this.rootDir = options.rootDir;
    this.#run = options.run;
    this.blockDir = `${options.rootDir}/${rankDirName(options.run)}`;
    this.configFile = configFilePath(options.rootDir, options.run.fields);
    this.capacityBytes = options.capacityBytes;
    this.health = new TierHealth(`fs tier ${options.rootDir}`, options.timeoutMs);
    this.pool = new DualQueuePool(
      options.nReadThreads ?? DEFAULT_FS_READ_THREADS,
      options.nWriteThreads ?? DEFAULT_FS_WRITE_THREADS,
    );
    this.#ready = this.#start().catch((err) => this.health.failed(err));
  }

  get usedBytes(): number {
    return this.#bytes;
  }

  /** The file a key is stored in. */
  fileOf(key: string): string {
    return `${this.blockDir}/${this.#rel(key)}`;
  }

  async putMany(entries: readonly TierEntry[]): Promise<string[]> {
    await this.#ready;
    const results = await Promise.all(
      entries.map((e) =>
        this.health.run(
          'put',
          () =>
            this.pool.write(async () => {
              await this.#writeAtomic(e.key, e.value);
              this.#stats.puts++;
              this.#stats.putBytes += e.value.byteLength;
              return e.key;
            }),
          () => null,
        ),
      ),
    );
    await this.#enforceCapacity();
    return results.filter((k): k is string => k !== null);
  }

  async getMany(keys: readonly string[]): Promise<(Uint8Array | null)[]> {
    await this.#ready;
    return Promise.all(
      keys.map((key) =>
        this.health.run(
          'get',
          () => this.pool.read(() => this.#read(key)),
          () => null,
        ),
      ),
    );
  }

  async hasMany(keys: readonly string[]): Promise<boolean[]> {
    await this.#ready;
    return Promise.all(
      keys.map((key) =>
        this.health.run(
          'has',
          () => this.pool.read(() => this.#readable(key)),
          () => false,
        ),
      ),
    );
  }

  async deleteMany(keys: readonly string[]): Promise<void> {
    await this.#ready;
    await Promise.all(
      keys.map((k) =>
        this.health.run(
          'delete',
          () => this.pool.write(() => this.#remove(this.#rel(k))),
          () => undefined,
        ),
      ),
    );
  }

  stats(): TierStats {
    return { ...this.#stats, errors: this.#stats.errors + this.health.failures };
  }

  takeEvicted(): string[] {
    const out = this.#evicted;
    this.#evicted = [];
    return out;
  }

  async close(): Promise<void> {
    await this.#ready;
    await this.pool.idle();
  }

  #rel(key: string): string {
    const { group, hashHex } = fileIdOf(key);
    return blockSubPath(hashHex, group);
  }

  /** The file exists and its header, read from disk, is this key's with the file's length. */
  async #readable(key: string): Promise<boolean> {
    let handle: Awaited<ReturnType<typeof open>>;
    try {
      handle = await open(this.fileOf(key), 'r');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
      throw err;
    }
    try {
      const header = Buffer.alloc(FRAME_HEADER_BYTES);
      const { bytesRead } = await handle.read(header, 0, FRAME_HEADER_BYTES, 0);
      const { size } = await handle.stat();
      return bytesRead === FRAME_HEADER_BYTES && frameHeaderMatches(key, header, size);
    } finally {
      await handle.close();
    }
  }

  async #read(key: string): Promise<Uint8Array | null> {
    this.#stats.gets++;
    const rel = this.#rel(key);
    let bytes: Buffer;
    try {
      bytes = await readFile(`${this.blockDir}/${rel}`);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
    const payload = decodeFrame(key, bytes);
    if (payload === null) {
      this.#stats.corrupt++;
      await this.#remove(rel);
      return null;
    }
    this.#touch(rel, bytes.byteLength, key);
    this.#stats.hits++;
    this.#stats.getBytes += payload.byteLength;
    return payload;
  }

  /** Writes the frame unless a complete file is already there (another engine stored it). */
  async #writeAtomic(key: string, value: Uint8Array): Promise<void> {
    const rel = this.#rel(key);
    const file = `${this.blockDir}/${rel}`;
    const frameBytes = FRAME_HEADER_BYTES + value.byteLength;
    const existing = await stat(file).catch(() => null);
    if (existing?.isFile() && existing.size === frameBytes) {
      this.#touch(rel, frameBytes, key);
      return;
    }
    await mkdir(path.dirname(file), { recursive: true });
    const tmp = `${file}_${process.pid}${randomBytes(4).toString('hex')}${TEMP_SUFFIX}`;
    try {
      await writeFile(tmp, encodeFrame(key, value));
      await rename(tmp, file);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
    this.#touch(rel, frameBytes, key);
  }

  #touch(rel: string, size: number, key: string | null): void {
    const old = this.#files.get(rel);
    if (old !== undefined) {
      this.#bytes -= old;
      this.#files.delete(rel);
    }
    this.#files.set(rel, size);
    this.#bytes += size;
    if (key !== null) this.#keyOfFile.set(rel, key);
  }

  async #remove(rel: string): Promise<void> {
    const size = this.#files.get(rel);
    if (size !== undefined) {
      this.#bytes -= size;
      this.#files.delete(rel);
    }
    this.#keyOfFile.delete(rel);
    await rm(`${this.blockDir}/${rel}`, { force: true });
  }

  async #enforceCapacity(): Promise<void> {
    if (this.capacityBytes === null) return;
    while (this.#bytes > this.capacityBytes && this.#files.size > 0) {
      const oldest = this.#files.keys().next().value as string;
      const key = this.#keyOfFile.get(oldest);
      await this.#remove(oldest);
      this.#stats.evictions++;
      if (key !== undefined) this.#evicted.push(key);
    }
  }

  /** Writes config.json (first writer wins), learns the files already stored, drops stale temp files. */
  async #start(): Promise<void> {
    await mkdir(configDir(this.rootDir, this.#run.fields), { recursive: true });
    try {
      await writeFile(this.configFile, `${runConfigFileText(this.#run.fields)}`, { flag: 'wx' });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    await mkdir(this.blockDir, { recursive: true });
    const found: { rel: string; size: number; mtime: number }[] = [];
    for (const rel of await this.#walk()) {
      const file = `${this.blockDir}/${rel}`;
      const st = await stat(file).catch(() => null);
      if (!st?.isFile()) continue;
      if (rel.endsWith(TEMP_SUFFIX)) {
        if (Date.now() - st.mtimeMs > STALE_TEMP_MS) await rm(file, { force: true });
        continue;
      }
      if (parseBlockSubPath(rel)) found.push({ rel, size: st.size, mtime: st.mtimeMs });
    }
    found.sort((a, b) => a.mtime - b.mtime);
    for (const f of found) if (!this.#files.has(f.rel)) this.#touch(f.rel, f.size, null);
    await this.#enforceCapacity();
  }

  /** Relative paths of the files two directory levels below blockDir (`hhh/hh_gN/*`). */
  async #walk(): Promise<string[]> {
    const out: string[] = [];
    const list = (dir: string) => readdir(dir).catch(() => [] as string[]);
    for (const a of await list(this.blockDir)) {
      if (!isBlockPrefixDir(a)) continue;
      for (const b of await list(`${this.blockDir}/${a}`)) {
        if (!isBlockGroupDir(b)) continue;
        for (const name of await list(`${this.blockDir}/${a}/${b}`)) {
          if (name.endsWith(BLOCK_FILE_SUFFIX) || name.endsWith(TEMP_SUFFIX)) out.push(`${a}/${b}/${name}`);
        }
      }
    }
    return out;
  }
}
