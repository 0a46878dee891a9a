/**
 * Per-block checksum: a 53-bit multiply–xorshift hash over 32 u32 lanes. Three
 * implementations give identical values, the first available is used:
 * - the optional native addon (native/kvhash.c, `hash`/`hashBlocks`/`copyHash`), which reads the block
 *   in place, SharedArrayBuffer included (off with KVCONNECT_DISABLE_NATIVE_HASH=1, or with
 *   KVCONNECT_DISABLE_NATIVE=1 which turns off the whole addon);
 * - WebAssembly SIMD (8 × i32x4) emitted by wasm-hash-module.ts. WASM cannot read the
 *   caller's SharedArrayBuffer in place, so each block is copied in 64 KiB pieces into the
 *   module's scratch memory (which stays in L1/L2) and hashed there, so every byte is read
 *   twice;
 * - plain JS (checksum-reference.ts).
 *
 * Adequacy: it guards against bugs, torn or short reads and memory corruption, not against
 * an adversary (the shared secret authenticates peers). Any change confined to one aligned
 * 4-byte word (hence any single flipped byte) is always detected, because every lane step is
 * a bijection for a fixed input word and the fold keeps a bijective term per lane; other
 * changes collide with probability about 2^-32 per lane touched, far below CRC-32's
 * 2^-32 for the same kind of multi-burst damage.
 */

import { readEnv } from '../util/envs.ts';
import { nativeFunctions } from '../util/native-addon.ts';
import { foldLanes, initLanes, referenceHash } from './checksum-reference.ts';
import { copyBytes } from './copy-bytes.ts';
import {
  DATA_OFFSET,
  hashModuleBytes,
  SCRATCH_BYTES,
  STATE_LANES,
  STRIPE_BYTES,
} from './wasm-hash-module.ts';

/** The WebAssembly members used here (the project's TS lib setting does not declare them). */
interface WasmApi {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object, imports: object) => { exports: Record<string, unknown> };
}

interface WasmHasher {
  readonly update: (length: number) => void;
  readonly lanes: Uint32Array;
  readonly scratch: Uint8Array;
}

function instantiate(): WasmHasher | null {
  if (readEnv('KVCONNECT_DISABLE_WASM_HASH')) return null;
  try {
    const api = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;
    const instance = new api.Instance(new api.Module(hashModuleBytes()), {});
    const memory = instance.exports['mem'] as { buffer: ArrayBuffer };
    return {
      update: instance.exports['update'] as (length: number) => void,
      lanes: new Uint32Array(memory.buffer, 0, STATE_LANES),
      scratch: new Uint8Array(memory.buffer, DATA_OFFSET, SCRATCH_BYTES),
    };
  } catch {
    return null;
  }
}

/** The hash exports of native/kvhash.c (absent from an addon built before them). */
interface NativeHash {
  hash(bytes: Uint8Array): number;
  hashBlocks(bytes: Uint8Array, blockBytes: number, count: number, out: Float64Array): void;
  copyHash(dst: Uint8Array, src: Uint8Array, blockBytes: number, count: number, out: Float64Array): void;
}

const native = readEnv('KVCONNECT_DISABLE_NATIVE_HASH')
  ? null
  : nativeFunctions<NativeHash>('hash', 'hashBlocks', 'copyHash');
const wasm = instantiate();

/** The several-runs, several-threads copy of native/kvhash.c (absent from an addon built before it). */
interface NativeCopyRuns {
  copyHashRuns(
    dsts: readonly Uint8Array[] | null,
    srcs: readonly Uint8Array[],
    blockBytes: readonly number[],
    out: Float64Array,
    threads: number,
  ): void;
}

const nativeRuns = native === null ? null : nativeFunctions<NativeCopyRuns>('copyHashRuns');

/** Which implementation runs here. */
export const checksumImplementation: 'native' | 'wasm-simd' | 'js' = native
  ? 'native'
  : wasm
    ? 'wasm-simd'
    : 'js';

export function blockChecksum(bytes: Uint8Array): number {
  return native ? native.hash(bytes) : wasmChecksum(bytes);
}

/** The WebAssembly path (plain JS without WebAssembly), whatever `native` says: for tests. */
export function wasmChecksum(bytes: Uint8Array): number {
  if (!wasm) return referenceHash(bytes);
  const { update, lanes, scratch } = wasm;
  initLanes(lanes);
  const length = bytes.length;
  let pos = 0;
  while (pos < length) {
    const n = Math.min(SCRATCH_BYTES, length - pos);
    scratch.set(bytes.subarray(pos, pos + n));
    const padded = Math.ceil(n / STRIPE_BYTES) * STRIPE_BYTES;
    if (padded > n) scratch.fill(0, n, padded);
    update(padded);
    pos += n;
  }
  return foldLanes(lanes, length);
}

let batchOut = new Float64Array(64);

/** Checksums of `count` consecutive blocks starting at byte 0 of `bytes` (one native call). */
export function blockChecksums(bytes: Uint8Array, blockBytes: number, count: number): number[] {
  const out = new Array<number>(count);
  if (native && count > 0 && blockBytes > 0 && blockBytes * count <= bytes.length) {
    if (batchOut.length < count) batchOut = new Float64Array(count);
    native.hashBlocks(bytes, blockBytes, count, batchOut);
    for (let i = 0; i < count; i++) out[i] = batchOut[i]!;
    return out;
  }
  for (let i = 0; i < count; i++)
    out[i] = blockChecksum(bytes.subarray(i * blockBytes, (i + 1) * blockBytes));
  return out;
}

/** Writes the checksums of `count` consecutive blocks starting at byte 0 of `bytes` into `out`. */
export function blockChecksumsInto(
  bytes: Uint8Array,
  blockBytes: number,
  count: number,
  out: Float64Array,
): void {
  if (native && count > 0 && blockBytes > 0 && blockBytes * count <= bytes.length && count <= out.length) {
    native.hashBlocks(bytes, blockBytes, count, out);
    return;
  }
  out.set(blockChecksums(bytes, blockBytes, count));
}

/**
 * Copies `count` blocks of `src` into `dst` and returns the checksums of what was copied. The
 * native path hashes each word as it stores it (one pass over memory, streaming stores), so
 * the copy is exactly what was hashed; without it, a copy then a hash.
 */
export function copyAndChecksum(
  dst: Uint8Array,
  src: Uint8Array,
  blockBytes: number,
  count: number,
): number[] {
  if (batchOut.length < count) batchOut = new Float64Array(count);
  const out = batchOut.subarray(0, count);
  copyAndChecksumInto(dst, src, blockBytes, count, out);
  return Array.from(out);
}

/** copyAndChecksum() writing the checksums into `out` (at least `count` long) instead of a new array. */
export function copyAndChecksumInto(
  dst: Uint8Array,
  src: Uint8Array,
  blockBytes: number,
  count: number,
  out: Float64Array,
): void {
  if (native && count > 0 && blockBytes * count <= Math.min(dst.length, src.length) && count <= out.length) {
    native.copyHash(dst, src, blockBytes, count, out);
    return;
  }
  copyBytes(dst, src.subarray(0, blockBytes * count));
  blockChecksumsInto(dst, blockBytes, count, out);
}

/** One run of a multi-run hash: `count` blocks of `blockBytes` from the start of `src`. */
export interface HashRun {
  readonly src: Uint8Array;
  readonly blockBytes: number;
  readonly count: number;
}

/** One run of a multi-run copy: the same blocks, copied to the start of `dst`. */
export interface CopyRun extends HashRun {
  readonly dst: Uint8Array;
}

/** Below this many bytes per thread, a helper thread costs more than it saves. */
export const MIN_BYTES_PER_COPY_THREAD = 2 << 20;

/** How many threads a copy of `bytes` may use when `allowed` are allowed (1 when small, or without the addon). */
export function copyThreadsFor(bytes: number, allowed: number): number {
  if (nativeRuns === null || allowed <= 1) return 1;
  return Math.max(1, Math.min(allowed, Math.floor(bytes / MIN_BYTES_PER_COPY_THREAD)));
}

/** The run's whole blocks of `view`. */
const whole = (view: Uint8Array, r: HashRun): Uint8Array => view.subarray(0, r.blockBytes * r.count);

/**
 * The runs, their checksums in `out` one after the other: with the addon and `threads` > 1 in
 * one native call whose blocks are shared out between that many threads (native/kvhash.c
 * `copyHashRuns`, copying to `dstOf(run)` unless it is null), else run by run through `one`.
 */
function eachRun<R extends HashRun>(
  runs: readonly R[],
  out: Float64Array,
  threads: number,
  dstOf: ((r: R) => Uint8Array) | null,
  one: (r: R, out: Float64Array) => void,
): void {
  if (nativeRuns !== null && threads > 1) {
    const dsts = dstOf === null ? null : runs.map((r) => whole(dstOf(r), r));
    const srcs = runs.map((r) => whole(r.src, r));
    nativeRuns.copyHashRuns(
      dsts,
      srcs,
      runs.map((r) => r.blockBytes),
      out,
      threads,
    );
    return;
  }
  let at = 0;
  for (const r of runs) {
    one(r, out.subarray(at, at + r.count));
    at += r.count;
  }
}

/** copyAndChecksumInto() for several runs, the checksums in `out` one after the other, on `threads` threads. */
export function copyAndChecksumRuns(runs: readonly CopyRun[], out: Float64Array, threads = 1): void {
  eachRun(
    runs,
    out,
    threads,
    (r) => r.dst,
    (r, o) => copyAndChecksumInto(r.dst, r.src, r.blockBytes, r.count, o),
  );
}

/** blockChecksumsInto() for several runs, the checksums in `out` one after the other, on `threads` threads (nothing copied). */
export function checksumRuns(runs: readonly HashRun[], out: Float64Array, threads = 1): void {
  eachRun(runs, out, threads, null, (r, o) => blockChecksumsInto(r.src, r.blockBytes, r.count, o));
}
