/**
 * Same-host KV mapping: a region whose bytes live in a sealed memfd (allocated by
 * src/util/shared-memory.ts) is offered to a peer in the handshake, and the peer maps it
 * read-only, so a chunk crosses with one copy, from this process's KV straight into the
 * peer's. Which chunk, and when, is still this agent's decision: the peer copies only runs
 * it was sent after this agent checked its grant (docs/transfer.md#same-host-kv-mapping
 * says what the mapping exposes and why that is acceptable).
 */
import { nativeFunctions } from '../util/native-addon.ts';
import type { ExposedRegion } from './messages.ts';
import type { MemoryRegion } from './types.ts';

interface KvMapBinding {
  sharedInfo(view: Uint8Array): [fd: number, offset: number, size: number, ino: number, dev: number] | null;
  mapShared(pid: number, fd: number, size: number, ino: number, dev: number): ArrayBuffer;
  release(buffer: ArrayBuffer): void;
}

const binding = nativeFunctions<KvMapBinding>('sharedInfo', 'mapShared', 'release');

/** `view` as an offer a same-host peer can map (as `region`), or null when it is not in mappable memory. */
export function exposedBytes(view: Uint8Array, region: number): ExposedRegion | null {
  const info = binding?.sharedInfo(view) ?? null;
  if (info === null || !info.every((x) => Number.isSafeInteger(x))) return null;
  const [fd, offset, size, ino, dev] = info;
  return { region, pid: process.pid, fd, ino, dev, size, offset, length: view.length };
}

/** The regions a same-host peer may map: those backed by mappable memory, when offering is on. */
export function exposedRegions(regions: Iterable<MemoryRegion>): ExposedRegion[] {
  const out: ExposedRegion[] = [];
  for (const r of regions) {
    const offer = exposedBytes(r.bytes.subarray(0, r.numBlocks * r.blockBytes), r.id);
    if (offer !== null) out.push(offer);
  }
  return out;
}

/** A peer's offered regions, mapped read-only here. */
export class PeerKvMap {
  readonly #views = new Map<number, Uint8Array>();
  readonly #buffers: ArrayBuffer[] = [];

  /**
   * Maps what it can of `offered` (a region that cannot be mapped, e.g. another pid
   * namespace, is left out and travels through the ring). Null when nothing could be mapped.
   */
  static map(offered: readonly ExposedRegion[]): PeerKvMap | null {
    if (binding === null || offered.length === 0) return null;
    const map = new PeerKvMap();
    const files = new Map<string, ArrayBuffer | null>();
    for (const r of offered) {
      const key = `${r.pid}:${r.fd}:${r.ino}:${r.dev}`;
      let buffer = files.get(key);
      if (buffer === undefined) {
        try {
          buffer = binding.mapShared(r.pid, r.fd, r.size, r.ino, r.dev);
          map.#buffers.push(buffer);
        } catch {
          buffer = null;
        }
        files.set(key, buffer);
      }
      if (buffer === null || r.offset + r.length > buffer.byteLength) continue;
      map.#views.set(r.region, new Uint8Array(buffer, r.offset, r.length));
    }
    if (map.#views.size > 0) return map;
    map.close();
    return null;
  }

  /** Ids of the peer's regions mapped here. */
  get regions(): number[] {
    return [...this.#views.keys()];
  }

  /** `length` bytes of the peer's region at `offset`, or null outside what is mapped. */
  view(region: number, offset: number, length: number): Uint8Array | null {
    const v = this.#views.get(region);
    if (!v || offset + length > v.length) return null;
    return v.subarray(offset, offset + length);
  }

  close(): void {
    this.#views.clear();
    for (const b of this.#buffers.splice(0)) binding?.release(b);
  }
}

/** True when a view lies in memory a same-host peer can map (so shm moves it with one copy). */
export function isMappableRegion(bytes: Uint8Array): boolean {
  return binding !== null && binding.sharedInfo(bytes) !== null;
}
