/**
 * Allocates memory shared with worker threads (a SharedArrayBuffer). With the native addon
 * the bytes live in a sealed memfd (native/kvmem.cc), which a same-host transfer peer can
 * map read-only and copy KV blocks from in one pass (src/transfer/kv-map.ts); without it,
 * or with KVCONNECT_DISABLE_KV_MAP=1, it is a plain SharedArrayBuffer.
 */

import { readEnv } from './envs.ts';
import { nativeFunctions } from './native-addon.ts';

const allocShared = readEnv('KVCONNECT_DISABLE_KV_MAP')
  ? null
  : (nativeFunctions<{ allocShared(size: number): SharedArrayBuffer }>('allocShared')?.allocShared ?? null);

/** True when allocateShared() returns memory a same-host peer can map. */
export const mappableSharedMemory: boolean = allocShared !== null;

/** Zero-filled shared memory of `size` bytes. */
export function allocateShared(size: number): SharedArrayBuffer {
  if (allocShared !== null) {
    try {
      return allocShared(size);
    } catch {
      // No memfd here (old kernel, sandbox): the engine works the same without a peer mapping.
    }
  }
  return new SharedArrayBuffer(size);
}
