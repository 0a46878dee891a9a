/**
 * The fast matmul: C[M,N] = A[M,K] · B[K,N], all row-major float32 in one WebAssembly
 * memory, computed by the module from wasm-assembler.ts, or by the native addon's
 * `matmulF32` (AVX-512/AVX2 on a pool of `threads` threads, bit-identical, see
 * native/kvmatmul.c) when it is loaded and KVCONNECT_DISABLE_NATIVE_MATMUL is not 1. Weight
 * matrices (`WeightMatrix`) may be stored in float16 or bfloat16 where the native addon
 * computes (`matmulHalf`, the same bits as float32 on the widened values); the WebAssembly
 * kernel has no half-precision loads, so without the addon they are stored widened to
 * float32 (the same values, so the same results, at twice the size). A bump arena hands out
 * 16-byte aligned regions of that memory; `mark`/`release` recycle scratch space per forward.
 */
import { KVError } from '../../../errors/index.ts';
import { readEnv } from '../../../util/envs.ts';
import { nativeAddon, nativeFunctions } from '../../../util/native-addon.ts';
import { type WasmMemory, type WasmModule, wasmApi } from './wasm-api.ts';
import { assembleMatmulModule } from './wasm-assembler.ts';
import { assembleSoftmaxModule } from './wasm-softmax.ts';
import { assembleSwigluModule } from './wasm-swiglu.ts';

type Kernel = (
  a: number,
  b: number,
  c: number,
  k: number,
  n4: number,
  lda: number,
  ldb: number,
  ldc: number,
) => void;

type NativeMatmul = (
  memory: ArrayBuffer,
  m: number,
  n4: number,
  k: number,
  a: number,
  lda: number,
  b: number,
  ldb: number,
  c: number,
  ldc: number,
  threads: number,
) => void;

type NativeMatmulWeight = (
  memory: ArrayBuffer,
  m: number,
  n: number,
  k: number,
  a: number,
  lda: number,
  w: number,
  c: number,
  ldc: number,
  format: number,
  threads: number,
) => void;

interface NativeKernels {
  matmulF32: NativeMatmul;
  matmulWeight: NativeMatmulWeight;
}

/** native/kvops.c: the forward's other kernels, on the matmul's pool (offsets in floats). */
interface NativeOps {
  attentionPrefill(memory: ArrayBuffer, ...args: number[]): void;
  swiglu(
    memory: ArrayBuffer,
    gateUp: number,
    out: number,
    rows: number,
    inter: number,
    threads: number,
  ): void;
  /** rmsnorm(memory, weight, x, add, dst, rows, dim, threads, eps) */
  rmsnorm(memory: ArrayBuffer, weight: Float32Array, ...args: number[]): void;
  /** rope(memory, cos, sin, positions, half, x, stride, rows, heads, threads) */
  rope(
    memory: ArrayBuffer,
    cos: Float32Array,
    sin: Float32Array,
    positions: Int32Array,
    ...args: number[]
  ): void;
  gatherKV(memory: ArrayBuffer, kv: Float32Array, table: Int32Array, ...args: number[]): void;
  attentionDecode(memory: ArrayBuffer, kv: Float32Array, table: Int32Array, ...args: number[]): void;
}

function nativeKernels(): NativeKernels | null {
  if (readEnv('KVCONNECT_DISABLE_NATIVE_MATMUL')) return null;
  return nativeFunctions<NativeKernels>('matmulF32', 'matmulWeight');
}

const native = nativeKernels();
const nativeOps =
  native &&
  nativeFunctions<NativeOps>('attentionPrefill', 'attentionDecode', 'swiglu', 'rmsnorm', 'rope', 'gatherKV');

/** The arguments of WasmRuntime.attentionPrefill (offsets in floats; attention.ts's loop). */
export interface PrefillAttentionArgs {
  qkv: number;
  qkvStride: number;
  out: number;
  outStride: number;
  firstRow: number;
  len: number;
  /** Position of the first new token, and the first visible one; ctx positions from lo are staged. */
  p0: number;
  lo: number;
  ctx: number;
  /** Staged K (per KV head, transposed: [headDim, ctx]) and V ([ctx, numKvHeads × headDim]). */
  keysT: number;
  values: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  /** Sliding window, 0 for full attention. */
  window: number;
  queryBlock: number;
}

/** The element type weights are computed in: the checkpoint's, or the one `--dtype` asks for. */
export type WeightDtype = 'float32' | 'float16' | 'bfloat16';

/** `matmulWeight`'s format argument. */
const WEIGHT_FORMAT: Record<WeightDtype, number> = { float32: 0, float16: 1, bfloat16: 2 };

/** Columns per panel of a weight matrix (native/kvmatmul.c's WEIGHT_PANEL). */
export const WEIGHT_PANEL = 64;

/**
 * A [k, n] weight matrix in the runtime's memory, panel-major: panel q holds columns
 * [64q, 64q + 64) as k rows of 64 contiguous elements (the last panel is as wide as the
 * columns left), so a matmul streams each panel contiguously. `storage` is how its elements
 * are held: float32 (offset in floats) or the half type itself (offset in 2-byte elements).
 */
export interface WeightMatrix {
  readonly offset: number;
  readonly k: number;
  readonly n: number;
  readonly storage: WeightDtype;
}

/** Where element (row i, column j) of `w` lies, in elements from w.offset. */
export function weightIndex(w: WeightMatrix, i: number, j: number): number {
  const first = j - (j % WEIGHT_PANEL);
  return first * w.k + i * Math.min(WEIGHT_PANEL, w.n - first) + (j - first);
}

/** Which kernel computes the engine's matmuls in this process: 'avx512' or 'avx2' (native), or 'wasm-simd'. */
export const matmulImplementation: string = native
  ? String((nativeAddon?.['matmulIsa'] as (() => string) | undefined)?.() ?? 'native')
  : 'wasm-simd';

type Activation = (gate: number, up: number, out: number, bytes: number) => void;

let compiled: WasmModule | undefined;
const compiledHelpers = new Map<() => Uint8Array, WasmModule>();

/** A helper module (SwiGLU, softmax), compiled once; after the matmul module, whose check names a runtime without SIMD. */
function helperModule(assemble: () => Uint8Array): WasmModule {
  matmulModule();
  let module = compiledHelpers.get(assemble);
  if (module === undefined) {
    module = new wasmApi.Module(assemble());
    compiledHelpers.set(assemble, module);
  }
  return module;
}

function matmulModule(): WasmModule {
  if (compiled === undefined) {
    const bytes = assembleMatmulModule();
    if (!wasmApi.validate(bytes)) {
      throw new KVError(
        'WASM_SIMD_UNAVAILABLE',
        'This runtime cannot run the WebAssembly SIMD matmul kernel',
        {
          hint: 'Use Node.js 20 or newer (128-bit WebAssembly SIMD is enabled by default there).',
        },
      );
    }
    compiled = new wasmApi.Module(bytes);
  }
  return compiled;
}

const PAGE = 65536;
/** A multiple of the 12-column register tile, so no panel ends in narrow tiles. */
const PANEL_COLUMNS = 48;
const MAX_PAGES = 65536;

export class WasmRuntime {
  readonly memory: WasmMemory;
  readonly #kernels: [Kernel, Kernel, Kernel, Kernel];
  readonly #swigluKernel: Activation;
  readonly #softmaxKernel: (ptr: number, count: number) => void;
  #top = 16;
  /**
   * The memory's current buffer (replaced only when alloc grows the memory): reading
   * `memory.buffer` costs a call into the engine on every kernel launch.
   */
  #buffer: ArrayBuffer;
  #view: Float32Array;
  #view16: Uint16Array;
  readonly #native: NativeKernels | null;
  readonly #ops: NativeOps | null;
  /**
   * Threads a native matmul may use (this one and threads - 1 pool helpers); results do not
   * depend on it. The WebAssembly kernel computes on this thread alone.
   */
  threads = 1;

  /** `useNative: false` keeps this runtime on the WebAssembly kernel (tests compare the two). */
  constructor(initialBytes = 1 << 20, useNative = true) {
    this.#native = useNative ? native : null;
    this.#ops = useNative ? nativeOps : null;
    this.memory = new wasmApi.Memory({
      initial: Math.max(1, Math.ceil(initialBytes / PAGE)),
      maximum: MAX_PAGES,
    });
    this.#buffer = this.memory.buffer;
    const instance = new wasmApi.Instance(matmulModule(), { env: { memory: this.memory } });
    const e = instance.exports as Record<string, Kernel>;
    this.#kernels = [e.mm1 as Kernel, e.mm2 as Kernel, e.mm3 as Kernel, e.mm4 as Kernel];
    this.#view = new Float32Array(this.#buffer);
    this.#view16 = new Uint16Array(this.#buffer);
    const helper = (assemble: () => Uint8Array, fn: string): unknown =>
      new wasmApi.Instance(helperModule(assemble), { env: { memory: this.memory } }).exports[fn];
    this.#swigluKernel = helper(assembleSwigluModule, 'swiglu') as Activation;
    this.#softmaxKernel = helper(assembleSoftmaxModule, 'softmax') as (ptr: number, count: number) => void;
  }

  /** In-place softmax of the `count` ≥ 1 floats at float offset `row` (wasm-softmax.ts). */
  softmax(row: number, count: number): void {
    this.#softmaxKernel(row * 4, count);
  }

  /** out[i] = silu(gate[i]) · up[i] for i < n (float offsets). */
  swiglu(gate: number, up: number, out: number, n: number): void {
    const vec = n & ~3;
    if (vec > 0) this.#swigluKernel(gate * 4, up * 4, out * 4, vec * 4);
    const mem = this.f32;
    for (let i = vec; i < n; i++) {
      const g = mem[gate + i] as number;
      mem[out + i] = (g / (1 + Math.exp(-g))) * (mem[up + i] as number);
    }
  }

  /** out[r] = silu(gate[r]) · up[r] for rows of [gate | up] (2 · inter floats) at gateUp, out rows of inter. */
  swigluRows(gateUp: number, out: number, rows: number, inter: number): void {
    if (this.#ops !== null && inter % 4 === 0) {
      this.#ops.swiglu(this.#buffer, gateUp, out, rows, inter, this.threads);
      return;
    }
    for (let r = 0; r < rows; r++)
      this.swiglu(gateUp + r * 2 * inter, gateUp + r * 2 * inter + inter, out + r * inter, inter);
  }

  /** True when the attention kernels, rmsnorm, rope and gatherKV run natively (else the caller computes them). */
  get nativeOps(): boolean {
    return this.#ops !== null;
  }

  /**
   * Prefill attention of one sequence from staged K/V (native/kvops.c, on the matmul's pool;
   * the bits of attention.ts's loop). Only where `nativeOps` is true.
   */
  attentionPrefill(a: PrefillAttentionArgs): void {
    (this.#ops as NativeOps).attentionPrefill(
      this.#buffer,
      a.qkv,
      a.qkvStride,
      a.out,
      a.outStride,
      a.firstRow,
      a.len,
      a.p0,
      a.lo,
      a.ctx,
      a.keysT,
      a.values,
      a.numHeads,
      a.numKvHeads,
      a.headDim,
      a.window,
      a.queryBlock,
      this.threads,
    );
  }

  /**
   * dst = RMSNorm(x) · weight over `rows` rows of `dim`, x += add first when add ≠ 0 (native,
   * the bits of the engine's JavaScript). Only where `nativeOps` is true.
   */
  rmsnorm(
    weight: Float32Array,
    eps: number,
    x: number,
    add: number,
    dst: number,
    rows: number,
    dim: number,
  ): void {
    (this.#ops as NativeOps).rmsnorm(this.#buffer, weight, x, add, dst, rows, dim, this.threads, eps);
  }

  /**
   * Rotates `heads` consecutive vectors of 2 · half floats in each of `rows` rows (row r at
   * x + r · stride, at position positions[r]) with cos/sin tables of `half` per position
   * (native, the bits of rope.ts). Only where `nativeOps` is true.
   */
  rope(
    cos: Float32Array,
    sin: Float32Array,
    positions: Int32Array,
    half: number,
    x: number,
    stride: number,
    rows: number,
    heads: number,
  ): void {
    const ops = this.#ops as NativeOps;
    ops.rope(this.#buffer, cos, sin, positions, half, x, stride, rows, heads, this.threads);
  }

  /**
   * Stages positions [lo, lo + ctx) of one layer's float32 KV tensor `kv` (blocks of
   * `blockSize` from `table`) for attentionPrefill: K transposed per head at keysT, V rows at
   * values (native, attention.ts's layout). Only where `nativeOps` is true.
   */
  gatherKV(
    kv: Float32Array,
    table: Int32Array,
    blockSize: number,
    numKvHeads: number,
    headDim: number,
    lo: number,
    ctx: number,
    keysT: number,
    values: number,
  ): void {
    const ops = this.#ops as NativeOps;
    ops.gatherKV(
      this.#buffer,
      kv,
      table,
      blockSize,
      numKvHeads,
      headDim,
      lo,
      ctx,
      keysT,
      values,
      this.threads,
    );
  }

  /**
   * Decode attention of one sequence's `len` new tokens (rows from firstRow of the q/k/v
   * output at qkv, stride qkvStride; positions from numComputedTokens), reading K/V in place from a layer's
   * float32 KV tensor `kv` through `table`, into rows of numHeads × headDim at out (native, the
   * bits of decode-attention.ts; window 0: full attention). Only where `nativeOps` is true.
   */
  attentionDecode(
    kv: Float32Array,
    table: Int32Array,
    blockSize: number,
    a: Pick<PrefillAttentionArgs, 'qkv' | 'qkvStride' | 'out' | 'firstRow' | 'len'> & {
      numComputedTokens: number;
    },
    shape: { numHeads: number; numKvHeads: number; headDim: number },
    window: number,
  ): void {
    (this.#ops as NativeOps).attentionDecode(
      this.#buffer,
      kv,
      table,
      blockSize,
      a.qkv,
      a.qkvStride,
      a.out,
      a.firstRow,
      a.len,
      a.numComputedTokens,
      shape.numHeads,
      shape.numKvHeads,
      shape.headDim,
      window,
      this.threads,
    );
  }

  /** Float32 view of the whole memory (re-created after the memory grows). */
  get f32(): Float32Array {
    if (this.#view.buffer !== this.#buffer) this.#view = new Float32Array(this.#buffer);
    return this.#view;
  }

  /** 16-bit view of the whole memory (half-precision weights; re-created after the memory grows). */
  get u16(): Uint16Array {
    if (this.#view16.buffer !== this.#buffer) this.#view16 = new Uint16Array(this.#buffer);
    return this.#view16;
  }

  /** How this runtime stores weights of `dtype`: the half type where the native kernel reads it, else float32. */
  weightStorage(dtype: WeightDtype): WeightDtype {
    return this.#native !== null ? dtype : 'float32';
  }

  /**
   * Allocates a [k, n] weight matrix stored as `storage` (its elements are left to the
   * caller), starting on a 64-byte cache line.
   */
  allocWeight(k: number, n: number, storage: WeightDtype): WeightMatrix {
    this.#top = Math.ceil(this.#top / 64) * 64;
    if (storage === 'float32') return { offset: this.alloc(k * n), k, n, storage };
    return { offset: this.alloc(Math.ceil((k * n) / 2)) * 2, k, n, storage };
  }

  /** C[m, w.n] = A[m, w.k] · W, A and C float32 with row strides lda and ldc (in floats). */
  matmulWeight(m: number, a: number, lda: number, w: WeightMatrix, c: number, ldc: number): void {
    if (m === 0 || w.n === 0) return;
    if (this.#native !== null) {
      this.#native.matmulWeight(
        this.#buffer,
        m,
        w.n,
        w.k,
        a,
        lda,
        w.offset,
        c,
        ldc,
        WEIGHT_FORMAT[w.storage],
        this.threads,
      );
      return;
    }
    if (w.storage !== 'float32') throw new Error(`internal: a ${w.storage} weight without the native kernel`);
    for (let first = 0; first < w.n; first += WEIGHT_PANEL) {
      const width = Math.min(WEIGHT_PANEL, w.n - first);
      this.matmul(m, width, w.k, a, lda, w.offset + first * w.k, width, c + first, ldc);
    }
  }

  /** Allocates `count` floats; returns their offset in floats (16-byte aligned). */
  alloc(count: number): number {
    const start = this.#top;
    const end = start + Math.ceil((count * 4) / 16) * 16;
    if (end > this.#buffer.byteLength) {
      const pages = Math.ceil((end - this.#buffer.byteLength) / PAGE);
      if (this.#buffer.byteLength / PAGE + pages > MAX_PAGES) {
        throw new KVError(
          'MODEL_OUT_OF_MEMORY',
          `The model needs more than 4 GiB of WebAssembly memory (${end} bytes)`,
          {
            hint: 'Use a smaller model or a larger tensor-parallel size.',
          },
        );
      }
      this.memory.grow(pages);
      this.#buffer = this.memory.buffer;
    }
    this.#top = end;
    return start / 4;
  }

  /** Copies `data` into a new region; returns its offset in floats. */
  upload(data: Float32Array): number {
    const off = this.alloc(data.length);
    this.f32.set(data, off);
    return off;
  }

  mark(): number {
    return this.#top;
  }

  release(mark: number): void {
    this.#top = mark;
  }

  /** C = A · B with offsets and leading dimensions in floats. */
  matmul(
    m: number,
    n: number,
    k: number,
    a: number,
    lda: number,
    b: number,
    ldb: number,
    c: number,
    ldc: number,
  ): void {
    if (this.#native !== null && m > 0 && k > 0) {
      const n4 = n & ~3;
      if (n4 > 0) this.#native.matmulF32(this.#buffer, m, n4, k, a, lda, b, ldb, c, ldc, this.threads);
      if (n4 < n) this.#matmulPanel(m, n - n4, k, a, lda, b + n4, ldb, c + n4, ldc);
      return;
    }
    // Column panels keep the slice of B being streamed small enough to stay in cache.
    for (let j = 0; j < n; j += PANEL_COLUMNS) {
      this.#matmulPanel(m, Math.min(PANEL_COLUMNS, n - j), k, a, lda, b + j, ldb, c + j, ldc);
    }
  }

  #matmulPanel(
    m: number,
    n: number,
    k: number,
    a: number,
    lda: number,
    b: number,
    ldb: number,
    c: number,
    ldc: number,
  ): void {
    if (m === 0 || n === 0) return;
    const mem = this.f32;
    if (k === 0) {
      for (let i = 0; i < m; i++) mem.fill(0, c + i * ldc, c + i * ldc + n);
      return;
    }
    const vecCols = n & ~3;
    if (vecCols > 0) {
      let i = 0;
      for (; i + 4 <= m; i += 4) {
        this.#kernels[3](
          (a + i * lda) * 4,
          b * 4,
          (c + i * ldc) * 4,
          k,
          vecCols * 4,
          lda * 4,
          ldb * 4,
          ldc * 4,
        );
      }
      const rest = m - i;
      if (rest > 0) {
        (this.#kernels[rest - 1] as Kernel)(
          (a + i * lda) * 4,
          b * 4,
          (c + i * ldc) * 4,
          k,
          vecCols * 4,
          lda * 4,
          ldb * 4,
          ldc * 4,
        );
      }
    }
    for (let j = vecCols; j < n; j++) {
      for (let i = 0; i < m; i++) {
        let s = 0;
        const ar = a + i * lda;
        for (let p = 0; p < k; p++) s += (mem[ar + p] as number) * (mem[b + p * ldb + j] as number);
        mem[c + i * ldc + j] = s;
      }
    }
  }
}
