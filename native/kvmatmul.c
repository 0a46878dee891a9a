/*
 * kvmatmul: C[m, n4] = A[m, k] · B[k, n4] in float32, row-major, on the engine's
 * WebAssembly memory, with AVX-512 or AVX2 vectors (16 or 8 lanes where WebAssembly SIMD
 * has 4). KVCONNECT_DISABLE_AVX512=1 keeps it to AVX2.
 *
 * Every element of C is computed exactly as the WebAssembly kernel computes it
 * (src/engine/model/kernels/wasm-assembler.ts): acc = 0, then for p = 0..k-1 in order,
 * acc = acc + (a[i][p] · b[p][j]), one float32 rounding after the multiply and one after the
 * add (no fused multiply-add: this file is built with -ffp-contract=off and the kernel's
 * target enables AVX2 only). The register tiling differs, but the tiling only decides which
 * elements are computed together, never the order of one element's operations, so the
 * results are bit-identical and a model gives the same tokens with or without the addon.
 *
 * Why native: the matmul is most of the engine's CPU profile (docs/BENCHMARKS.md, "Engine"
 * compares the two kernels), and WebAssembly in Node 20 has only 128-bit vectors.
 *
 *   matmulF32(memory, m, n4, k, a, lda, b, ldb, c, ldc)
 *     memory  the ArrayBuffer of the WebAssembly memory holding A, B and C
 *     n4      columns to compute, a multiple of 4 (the caller computes the rest)
 *     a, b, c offsets in floats; lda, ldb, ldc row strides in floats; k >= 1
 *   matmulIsa() -> 'avx512' | 'avx2'   which vectors matmulF32 uses
 */
#include "kvmatmul.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_MATMUL 1

/*
 * One register tile: R rows × V vectors of LANES columns (R·V accumulators, V loads of B and
 * one broadcast of A per step of k), for a vector width given by its intrinsics prefix
 * (_mm: 4 lanes, _mm256: 8, _mm512: 16) and the ISA that the function is compiled for.
 */
#define DEFINE_TILE(NAME, ISA, VEC, PFX, LANES, R, V)                                     \
  __attribute__((target(ISA))) static void NAME(const float *a, size_t lda, const float *b, \
                                                size_t ldb, float *c, size_t ldc, size_t k) { \
    VEC acc[R][V];                                                                         \
    for (int r = 0; r < R; r++)                                                            \
      for (int v = 0; v < V; v++) acc[r][v] = PFX##_setzero_ps();                          \
    for (size_t p = 0; p < k; p++) {                                                       \
      VEC bv[V];                                                                           \
      for (int v = 0; v < V; v++) bv[v] = PFX##_loadu_ps(b + p * ldb + LANES * v);         \
      for (int r = 0; r < R; r++) {                                                        \
        VEC av = PFX##_set1_ps(a[r * lda + p]);                                            \
        for (int v = 0; v < V; v++) acc[r][v] = PFX##_add_ps(acc[r][v], PFX##_mul_ps(av, bv[v])); \
      }                                                                                    \
    }                                                                                      \
    for (int r = 0; r < R; r++)                                                            \
      for (int v = 0; v < V; v++) PFX##_storeu_ps(c + r * ldc + LANES * v, acc[r][v]);     \
  }

/* AVX2: 3 × 8 columns (12 accumulators fit the 16 registers), 8 columns, and the last 4. */
#define TILE256(R, V) DEFINE_TILE(tile_##R##x##V, "avx2", __m256, _mm256, 8, R, V)
#define TILE128(R) DEFINE_TILE(tile4_##R, "avx2", __m128, _mm, 4, R, 1)
/* AVX-512F: 4 × 16 columns (16 of the 32 registers), and 16 columns. */
#define TILE512(R, V) DEFINE_TILE(tile512_##R##x##V, "avx512f", __m512, _mm512, 16, R, V)

TILE256(4, 3)
TILE256(3, 3)
TILE256(2, 3)
TILE256(1, 3)
TILE256(4, 1)
TILE256(3, 1)
TILE256(2, 1)
TILE256(1, 1)
TILE512(4, 4)
TILE512(3, 4)
TILE512(2, 4)
TILE512(1, 4)
TILE512(4, 1)
TILE512(3, 1)
TILE512(2, 1)
TILE512(1, 1)
TILE128(4)
TILE128(3)
TILE128(2)
TILE128(1)

typedef void (*tile_fn)(const float *, size_t, const float *, size_t, float *, size_t, size_t);
static const tile_fn wide[4] = {tile_1x3, tile_2x3, tile_3x3, tile_4x3};
static const tile_fn narrow[4] = {tile_1x1, tile_2x1, tile_3x1, tile_4x1};
static const tile_fn quarter[4] = {tile4_1, tile4_2, tile4_3, tile4_4};
static const tile_fn wide512[4] = {tile512_1x4, tile512_2x4, tile512_3x4, tile512_4x4};
static const tile_fn narrow512[4] = {tile512_1x1, tile512_2x1, tile512_3x1, tile512_4x1};
static bool use512 = false;

/* Columns per panel: the slice of B streamed for one row block stays in L1/L2. */
#define PANEL 128

static void matmul(const float *a, size_t lda, const float *b, size_t ldb, float *c, size_t ldc,
                   size_t m, size_t n4, size_t k) {
  for (size_t j0 = 0; j0 < n4; j0 += PANEL) {
    size_t jn = n4 - j0 < PANEL ? n4 - j0 : PANEL;
    for (size_t i = 0; i < m; i += 4) {
      size_t rows = m - i < 4 ? m - i : 4;
      const float *ai = a + i * lda;
      float *ci = c + i * ldc + j0;
      const float *bj = b + j0;
      size_t j = 0;
      if (use512) {
        for (; j + 64 <= jn; j += 64) wide512[rows - 1](ai, lda, bj + j, ldb, ci + j, ldc, k);
        for (; j + 16 <= jn; j += 16) narrow512[rows - 1](ai, lda, bj + j, ldb, ci + j, ldc, k);
      }
      for (; j + 24 <= jn; j += 24) wide[rows - 1](ai, lda, bj + j, ldb, ci + j, ldc, k);
      for (; j + 8 <= jn; j += 8) narrow[rows - 1](ai, lda, bj + j, ldb, ci + j, ldc, k);
      if (j < jn) quarter[rows - 1](ai, lda, bj + j, ldb, ci + j, ldc, k);
    }
  }
}
#endif

static bool usable = false;

bool kvmatmul_init(void) {
#ifdef HAVE_AVX2_MATMUL
  __builtin_cpu_init();
  usable = __builtin_cpu_supports("avx2");
  use512 = usable && __builtin_cpu_supports("avx512f") && getenv("KVCONNECT_DISABLE_AVX512") == NULL;
#endif
  return usable;
}

napi_value kv_matmul_isa(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value out;
  napi_create_string_utf8(env, !usable ? "none" : use512 ? "avx512" : "avx2", NAPI_AUTO_LENGTH, &out);
  return out;
}

napi_value kv_matmul_f32(napi_env env, napi_callback_info info) {
  size_t argc = 10;
  napi_value argv[10];
  int64_t v[9];
  void *data = NULL;
  size_t bytes = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 10 ||
      napi_get_arraybuffer_info(env, argv[0], &data, &bytes) != napi_ok) {
    napi_throw_type_error(env, NULL, "matmulF32(memory, m, n4, k, a, lda, b, ldb, c, ldc) takes an ArrayBuffer and 9 integers");
    return NULL;
  }
  for (int i = 0; i < 9; i++) {
    if (napi_get_value_int64(env, argv[i + 1], &v[i]) != napi_ok || v[i] < 0) {
      napi_throw_type_error(env, NULL, "matmulF32: sizes, offsets and strides must be non-negative integers");
      return NULL;
    }
  }
  int64_t m = v[0], n4 = v[1], k = v[2], a = v[3], lda = v[4], b = v[5], ldb = v[6], c = v[7], ldc = v[8];
  size_t floats = bytes / 4;
  /* Bounds: the last element each operand touches must lie inside the memory. */
  bool ok = usable && n4 % 4 == 0 && k >= 1 && (m == 0 || n4 == 0 ||
            ((uint64_t)(a + (m - 1) * lda + k) <= floats &&
             (uint64_t)(b + (k - 1) * ldb + n4) <= floats &&
             (uint64_t)(c + (m - 1) * ldc + n4) <= floats));
  if (!ok) {
    napi_throw_range_error(env, NULL, "matmulF32: the operands do not fit in the memory (or no AVX2)");
    return NULL;
  }
#ifdef HAVE_AVX2_MATMUL
  if (m > 0 && n4 > 0) {
    float *f = (float *)data;
    matmul(f + a, (size_t)lda, f + b, (size_t)ldb, f + c, (size_t)ldc, (size_t)m, (size_t)n4, (size_t)k);
  }
#endif
  return NULL;
}
