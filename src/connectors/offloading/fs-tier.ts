/**
 * The `fs` secondary tier: one file per chunk, named by the SHA-256 of its key
 * (content-addressed), written atomically (temp file + rename) so a crash never leaves a
 * half file under a real name. A byte bound evicts the least recently used files. Files
 * that are truncated or fail their checksum are deleted and count as misses. A lookup
 * reads the file's header rather than only stat-ing it, so a file the disk cannot read
 * (EIO) or this process may not read (EACCES) is a miss before any load is promised.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, open, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { decodeFrame, encodeFrame, FRAME_HEADER_BYTES, frameHeaderMatches } from './block-frame.ts';
import { emptyTierStats, type KVTier, type TierEntry, type TierStats } from './kv-tier.ts';
import { TierHealth } from './tier-health.ts';

export interface FsTierOptions {
  path: string;
  capacityBytes: number | null;
  timeoutMs: number;
}

const SUFFIX = '.kv';
/** Temp files older than this were left by a crashed writer. */
const STALE_TEMP_MS = 60_000;

export class FsTier implements KVTier {
  readonly kind = 'fs' as const;
  readonly medium = 'STORAGE' as const;
  readonly root: string;
  readonly capacityBytes: number | null;
  readonly health: TierHealth;

  get timeoutMs(): number {
    return this.health.timeoutMs;
  }
  /** file name → size, least recently used first. */
  readonly #files = new Map<string, number>();
  readonly #keyOfFile = new Map<string, string>();
  readonly #stats = emptyTierStats();
  readonly #ready: Promise<void>;
  #bytes = 0;
  #evicted: string[] = [];

  constructor(options: FsTierOptions) {
    this.root = options.path;
    this.capacityBytes = options.capacityBytes;
    this.health = new TierHealth(`fs tier ${options.path}`, options.timeoutMs);
    this.#ready = this.#scan().catch((err) => this.health.failed(err));
  }

  get usedBytes(): number {
    return this.#bytes;
  }

  fileOf(key: string): string {
    const name = createHash('sha256').update(key).digest('hex') + SUFFIX;
    return path.join(this.root, name.slice(0, 2), name);
  }

  async putMany(entries: readonly TierEntry[]): Promise<string[]> {
    await this.#ready;
    const results = await Promise.all(
      entries.map((e) =>
        this.health.run(
          'put',
          async () => {
            await this.#writeAtomic(e.key, encodeFrame(e.key, e.value));
            this.#stats.puts++;
            this.#stats.putBytes += e.value.byteLength;
            return e.key;
          },
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
          () => this.#read(key),
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
          () => this.#readable(key),
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
          () => this.#remove(this.fileOf(k)),
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
    const file = this.fileOf(key);
    let bytes: Buffer;
    try {
      bytes = await readFile(file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
    const payload = decodeFrame(key, bytes);
    if (payload === null) {
      this.#stats.corrupt++;
      await this.#remove(file);
      return null;
    }
    this.#touch(path.basename(file), bytes.byteLength, key);
    this.#stats.hits++;
    this.#stats.getBytes += payload.byteLength;
    return payload;
  }

  async #writeAtomic(key: string, frame: Buffer): Promise<void> {
    const file = this.fileOf(key);
    await mkdir(path.dirname(file), { recursive: true });
    const tmp = `${file}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
    try {
      await writeFile(tmp, frame);
      await rename(tmp, file);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
    this.#touch(path.basename(file), frame.byteLength, key);
  }

  #touch(name: string, size: number, key: string | null): void {
    const old = this.#files.get(name);
    if (old !== undefined) {
      this.#bytes -= old;
      this.#files.delete(name);
    }
    this.#files.set(name, size);
    this.#bytes += size;
    if (key !== null) this.#keyOfFile.set(name, key);
  }

  async #remove(file: string): Promise<void> {
    const name = path.basename(file);
    const size = this.#files.get(name);
    if (size !== undefined) {
      this.#bytes -= size;
      this.#files.delete(name);
    }
    this.#keyOfFile.delete(name);
    await rm(file, { force: true });
  }

  async #enforceCapacity(): Promise<void> {
    if (this.capacityBytes === null) return;
    while (this.#bytes > this.capacityBytes && this.#files.size > 0) {
      const oldest = this.#files.keys().next().value as string;
      const key = this.#keyOfFile.get(oldest);
      await this.#remove(path.join(this.root, oldest.slice(0, 2), oldest));
      this.#stats.evictions++;
      if (key !== undefined) this.#evicted.push(key);
    }
  }

  /** Learns the files already in the directory (oldest modification first) and drops stale temp files. */
  async #scan(): Promise<void> {
    await mkdir(this.root, { recursive: true });
    const found: { name: string; size: number; mtime: number }[] = [];
    for (const dir of await readdir(this.root)) {
      const sub = path.join(this.root, dir);
      if (dir.length !== 2) continue;
      let names: string[];
      try {
        names = await readdir(sub);
      } catch {
        continue;
      }
      for (const name of names) {
        const file = path.join(sub, name);
        if (name.includes('.tmp-')) {
          const st = await stat(file).catch(() => null);
          if (st && Date.now() - st.mtimeMs > STALE_TEMP_MS) await rm(file, { force: true });
          continue;
        }
        if (!name.endsWith(SUFFIX)) continue;
        const st = await stat(file).catch(() => null);
        if (st?.isFile()) found.push({ name, size: st.size, mtime: st.mtimeMs });
      }
    }
    found.sort((a, b) => a.mtime - b.mtime);
    for (const f of found) if (!this.#files.has(f.name)) this.#touch(f.name, f.size, null);
    await this.#enforceCapacity();
  }
}
