/**
 * Copies bytes into (or out of) KV memory. V8 copies to and from a SharedArrayBuffer with
 * relaxed atomic word moves, and byte by byte when source and destination are not equally
 * aligned (a payload after its frame header): several times slower than memcpy even when
 * aligned, many times when not. The native addon's copyBytes is libc memcpy; without the
 * addon, TypedArray.set.
 */
import { nativeFunctions } from '../util/native-addon.ts';

/** The addon's libc memcpy: copies all of `src` to the start of `dst`. */
export interface NativeCopy {
  copyBytes(dst: Uint8Array, src: Uint8Array): void;
}

const copy = nativeFunctions<NativeCopy>('copyBytes')?.copyBytes ?? null;

/** Copies all of `src` into `dst` at `offset`. */
export function copyBytes(dst: Uint8Array, src: Uint8Array, offset = 0): void {
  if (copy !== null) copy(offset === 0 ? dst : dst.subarray(offset), src);
  else dst.set(src, offset);
}
