/**
 * The shm ring's part of the optional native addon (native/kvshm.c, loaded by
 * src/util/native-addon.ts), which maps a /dev/shm file into this process. With it, the shm
 * ring is plain memory shared by both processes: one copy on each side, no syscalls on
 * the data path. Without it (not built, not Linux, or KVCONNECT_DISABLE_NATIVE=1), the
 * ring falls back to positional file I/O. Both sides use the same file and control
 * frames, so a native peer and a pure-JS peer interoperate.
 */
import { DISABLE_NATIVE_ENV, nativeAddon, nativeAddonReason, nativeFunctions } from '../util/native-addon.ts';

export interface KvShmBinding {
  /** Maps `size` bytes of `path`: create=true creates and reserves the file (read-write), false maps an existing one read-only. */
  map(path: string, size: number, create: boolean): ArrayBuffer;
  /** Detaches the buffer (all views become empty) and unmaps it. */
  release(buffer: ArrayBuffer): void;
}

export { DISABLE_NATIVE_ENV };

function load(): { binding: KvShmBinding | null; reason: string } {
  if (nativeAddon === null) return { binding: null, reason: nativeAddonReason };
  const binding = nativeFunctions<KvShmBinding>('map', 'release');
  return binding === null
    ? { binding: null, reason: 'the addon does not export map/release' }
    : { binding, reason: 'loaded' };
}

const loaded = load();

/** The addon, or null when the pure-JS ring is in use. */
export const nativeShm: KvShmBinding | null = loaded.binding;

/** Which shm ring implementation this process uses, and why. */
export function shmRingImplementation(): { readonly native: boolean; readonly reason: string } {
  return { native: loaded.binding !== null, reason: loaded.reason };
}
