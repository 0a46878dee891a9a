/**
 * Loads the optional native addon (native/kvshm.c, built at install by
 * scripts/build-native.mjs) that maps a /dev/shm file into this process. With it, the shm
 * ring is plain memory shared by both processes: one copy on each side, no syscalls on
 * the data path. Without it (not built, not Linux, or KVCONNECT_DISABLE_NATIVE=1), the
 * ring falls back to positional file I/O. Both sides use the same file and control
 * frames, so a native peer and a pure-JS peer interoperate.
 */
import { createRequire } from 'node:module';

export interface KvShmBinding {
  /** Maps `size` bytes of `path`: create=true creates and reserves the file (read-write), false maps an existing one read-only. */
  map(path: string, size: number, create: boolean): ArrayBuffer;
  /** Detaches the buffer (all views become empty) and unmaps it. */
  release(buffer: ArrayBuffer): void;
}

export const DISABLE_NATIVE_ENV = 'KVCONNECT_DISABLE_NATIVE';

/** Relative to this file in src/transfer/ and in dist/transfer/ alike. */
const ADDON_PATH = '../../native/build/Release/kvshm.node';

function load(): { binding: KvShmBinding | null; reason: string } {
  if (process.env[DISABLE_NATIVE_ENV] === '1') return { binding: null, reason: `${DISABLE_NATIVE_ENV}=1` };
  if (process.platform !== 'linux') return { binding: null, reason: `not Linux (${process.platform})` };
  try {
    const mod = createRequire(import.meta.url)(ADDON_PATH) as Partial<KvShmBinding>;
    if (typeof mod.map !== 'function' || typeof mod.release !== 'function') {
      return { binding: null, reason: 'the addon does not export map/release' };
    }
    return { binding: mod as KvShmBinding, reason: 'loaded' };
  } catch (e) {
    const msg = e instanceof Error ? e.message.split('\n')[0] : String(e);
    return { binding: null, reason: `not built (${msg}); run \`node scripts/build-native.mjs\`` };
  }
}

const loaded = load();

/** The addon, or null when the pure-JS ring is in use. */
export const nativeShm: KvShmBinding | null = loaded.binding;

/** Which shm ring implementation this process uses, and why. */
export function shmRingImplementation(): { readonly native: boolean; readonly reason: string } {
  return { native: loaded.binding !== null, reason: loaded.reason };
}
