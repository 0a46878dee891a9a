/*
 * kvmatmul: C[m, n] = A[m, k] · B[k, n] with A and C float32 and B float32, float16 or
 * bfloat16, row-major, on the engine's WebAssembly memory, with AVX-512 or AVX2 vectors
 * (16 or 8 lanes where WebAssembly SIMD has 4), on one or more threads.
 * KVCONNECT_DISABLE_AVX512=1 keeps it to AVX2.
 *
 * Every element of C is computed exactly as the WebAssembly kernel computes it
 * (src/engine/model/kernels/wasm-assembler.ts): acc = 0, then for p = 0..k-1 in order,
 * acc = acc + (a[i][p] · b[p][j]), one float32 rounding after the multiply and one after the
 * add (no fused multiply-add: this file is built with -ffp-contract=off and the kernels'
 * targets enable AVX2/AVX-512F and F16C only). A half-precision B element is widened to
 * float32 exactly before the multiply, so a half matrix gives the bits the float32 kernel
 * gives on its widened copy. The register tiling and the split between threads differ, but
 * they only decide which elements are computed together and by which thread, never the order
 * of one element's operations: the results are bit-identical for any thread count, and a
 * model gives the same tokens with or without the addon. The last n % 4 columns of a half B
 * are summed in double precision, as the engine's JavaScript does for those of a float32 B.
 *
 * Threads: a persistent pool (threads - 1 helpers, started on first use, never per call)
 * takes blocks of C (rows × columns; never a slice of the k reduction) from a shared counter
 * while the calling thread takes them too. Helpers spin briefly after a call, then sleep on
 * a condition variable; a product too small to pay for waking them stays on the calling
 * thread (PARALLEL_MIN_MACS, WAKE_MIN_MACS below). The caller waits for the last block. One call uses the pool at a
 * time: a concurrent call (another tensor-parallel rank's thread) computes on its own thread.
 * kvpool_run (kvmatmul.h) lends the same pool to the engine's other kernels (kvops.c): any
 * task function over a block index, under the same rule for waking helpers.
 *
 *   matmulF32(memory, m, n4, k, a, lda, b, ldb, c, ldc[, threads])
 *     memory  the ArrayBuffer of the WebAssembly memory holding A, B and C
 *     n4      columns to compute, a multiple of 4 (the caller computes the rest)
 *     a, b, c offsets in floats; lda, ldb, ldc row strides in floats; k >= 1
 *   matmulWeight(memory, m, n, k, a, lda, w, c, ldc, format, threads)
 *     B is a weight matrix, panel-major (WEIGHT_PANEL below), of float32 (format 0),
 *     float16 (1) or bfloat16 (2) elements starting at element offset w; all n columns are
 *     computed
 *   matmulIsa() -> 'avx512' | 'avx2'   which vectors the kernels use
 *   matmulPoolSize() -> number          helper threads started so far (diagnostics, tests)
 */
#define _GNU_SOURCE
#include "kvmatmul.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { FMT_F32 = 0, FMT_F16 = 1, FMT_BF16 = 2 };

static bool usable = false;

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_MATMUL 1

/* B loads: LANES elements at p widened to float32 (exact for float16 and bfloat16). */
#define LD512_F32(p) _mm512_loadu_ps(p)
#define LD512_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define LD512_BF16(p) \
  _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define LD256_F32(p) _mm256_loadu_ps(p)
#define LD256_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define LD256_BF16(p) \
  _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))
#define LD128_F32(p) _mm_loadu_ps(p)
#define LD128_F16(p) _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(p)))
#define LD128_BF16(p) \
  _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(_mm_loadl_epi64((const __m128i *)(p))), 16))

/*
 * One register tile: R rows × V vectors of LANES columns (R·V accumulators, V loads of B and
 * one broadcast of A per step of k), for a vector width given by its intrinsics prefix
 * (_mm: 4 lanes, _mm256: 8, _mm512: 16), the B element type BT and its widening load.
 */
#define DEFINE_TILE(NAME, ISA, VEC, PFX, LANES, R, V, BT, LOADB)                           \
  __attribute__((target(ISA))) static void NAME(const float *a, size_t lda, const void *bv0, \
                                                size_t ldb, float *c, size_t ldc, size_t k) { \
    const BT *b = (const BT *)bv0;                                                          \
    VEC acc[R][V];                                                                          \
    for (int r = 0; r < R; r++)                                                             \
      for (int v = 0; v < V; v++) acc[r][v] = PFX##_setzero_ps();                           \
    for (size_t p = 0; p < k; p++) {                                                        \
      VEC bv[V];                                                                            \
      for (int v = 0; v < V; v++) bv[v] = LOADB(b + p * ldb + LANES * v);                   \
      for (int r = 0; r < R; r++) {                                                         \
        VEC av = PFX##_set1_ps(a[r * lda + p]);                                             \
        for (int v = 0; v < V; v++) acc[r][v] = PFX##_add_ps(acc[r][v], PFX##_mul_ps(av, bv[v])); \
      }                                                                                     \
    }                                                                                       \
    for (int r = 0; r < R; r++)                                                             \
      for (int v = 0; v < V; v++) PFX##_storeu_ps(c + r * ldc + LANES * v, acc[r][v]);      \
  }

/*
 * The tiles of one B format F: AVX-512F 4 × 64 columns (16 of the 32 registers) and 16
 * columns; AVX2 3 × 8 columns (12 accumulators fit the 16 registers), 8 columns, and 4.
 */
#define TILES(F, BT, ISA512, ISA256)                                              \
  DEFINE_TILE(F##_z1x4, ISA512, __m512, _mm512, 16, 1, 4, BT, LD512_##F)          \
  DEFINE_TILE(F##_z2x4, ISA512, __m512, _mm512, 16, 2, 4, BT, LD512_##F)          \
  DEFINE_TILE(F##_z3x4, ISA512, __m512, _mm512, 16, 3, 4, BT, LD512_##F)          \
  DEFINE_TILE(F##_z4x4, ISA512, __m512, _mm512, 16, 4, 4, BT, LD512_##F)          \
  DEFINE_TILE(F##_z1x1, ISA512, __m512, _mm512, 16, 1, 1, BT, LD512_##F)          \
  DEFINE_TILE(F##_z2x1, ISA512, __m512, _mm512, 16, 2, 1, BT, LD512_##F)          \
  DEFINE_TILE(F##_z3x1, ISA512, __m512, _mm512, 16, 3, 1, BT, LD512_##F)          \
  DEFINE_TILE(F##_z4x1, ISA512, __m512, _mm512, 16, 4, 1, BT, LD512_##F)          \
  DEFINE_TILE(F##_y1x3, ISA256, __m256, _mm256, 8, 1, 3, BT, LD256_##F)           \
  DEFINE_TILE(F##_y2x3, ISA256, __m256, _mm256, 8, 2, 3, BT, LD256_##F)           \
  DEFINE_TILE(F##_y3x3, ISA256, __m256, _mm256, 8, 3, 3, BT, LD256_##F)           \
  DEFINE_TILE(F##_y4x3, ISA256, __m256, _mm256, 8, 4, 3, BT, LD256_##F)           \
  DEFINE_TILE(F##_y1x1, ISA256, __m256, _mm256, 8, 1, 1, BT, LD256_##F)           \
  DEFINE_TILE(F##_y2x1, ISA256, __m256, _mm256, 8, 2, 1, BT, LD256_##F)           \
  DEFINE_TILE(F##_y3x1, ISA256, __m256, _mm256, 8, 3, 1, BT, LD256_##F)           \
  DEFINE_TILE(F##_y4x1, ISA256, __m256, _mm256, 8, 4, 1, BT, LD256_##F)           \
  DEFINE_TILE(F##_x1, ISA256, __m128, _mm, 4, 1, 1, BT, LD128_##F)                \
  DEFINE_TILE(F##_x2, ISA256, __m128, _mm, 4, 2, 1, BT, LD128_##F)                \
  DEFINE_TILE(F##_x3, ISA256, __m128, _mm, 4, 3, 1, BT, LD128_##F)                \
  DEFINE_TILE(F##_x4, ISA256, __m128, _mm, 4, 4, 1, BT, LD128_##F)                \
  static const kernels_t kernels_##F = {                                          \
      sizeof(BT),                                                                 \
      {F##_z1x4, F##_z2x4, F##_z3x4, F##_z4x4},                                   \
      {F##_z1x1, F##_z2x1, F##_z3x1, F##_z4x1},                                   \
      {F##_y1x3, F##_y2x3, F##_y3x3, F##_y4x3},                                   \
      {F##_y1x1, F##_y2x1, F##_y3x1, F##_y4x1},                                   \
      {F##_x1, F##_x2, F##_x3, F##_x4},                                           \
  };

typedef void (*tile_fn)(const float *, size_t, const void *, size_t, float *, size_t, size_t);
typedef struct {
  size_t esize; /* bytes of one B element */
  tile_fn wide512[4], narrow512[4], wide[4], narrow[4], quarter[4];
} kernels_t;

TILES(F32, float, "avx512f", "avx2")
TILES(F16, uint16_t, "avx512f", "avx2,f16c")
TILES(BF16, uint16_t, "avx512f", "avx2")

static bool use512 = false;
#endif

/* Exact widening of one B element (the scalar column tail). */
static float widen(const char *b, size_t index, int format) {
  float f;
  if (format == FMT_F32) {
    memcpy(&f, b + index * 4, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, b + index * 2, 2);
  uint32_t bits;
  if (format == FMT_BF16) {
    bits = (uint32_t)h << 16;
  } else {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f) {
      bits = sign | 0x7f800000 | (mant << 13);
    } else if (exp != 0) {
      bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
      bits = sign;
    } else { /* subnormal: normalise */
      int e = -1;
      do {
        e++;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ff) << 13);
    }
  }
  memcpy(&f, &bits, 4);
  return f;
}

typedef struct {
#ifdef HAVE_AVX2_MATMUL
  const kernels_t *kern;
#endif
  int format;
  const float *a;
  size_t lda;
  const char *b; /* bytes */
  size_t ldb;    /* elements (row-major B) */
  bool panel_major; /* B is a weight: panels of WEIGHT_PANEL columns, ldb unused */
  float *c;
  size_t ldc;
  size_t m, n, k;
  size_t rows_per_block, cols_per_block, row_blocks;
} __attribute__((aligned(64))) job_t; /* the helpers read it on the caller's stack: no line shared with what it writes */

/*
 * Weights are panel-major: panel q holds columns [64q, 64q + 64) as k rows of 64 contiguous
 * elements (the last panel is as wide as the columns left), so one tile streams a contiguous
 * run of memory instead of k short pieces a row stride apart.
 */
#define WEIGHT_PANEL 64

/*
 * Columns [0, width) of rows [0, rows) (rows <= 4): C at c (row stride ldc), B at b (row
 * stride ldb), widest tiles first; the last width % 4 columns in double precision.
 */
static void run_tiles(const job_t *J, const float *ai, size_t rows, const char *b, size_t ldb, float *c,
                      size_t width) {
  size_t vec_end = width & ~(size_t)3;
  size_t j = 0;
#ifdef HAVE_AVX2_MATMUL
  const kernels_t *K = J->kern;
  size_t lda = J->lda, ldc = J->ldc, k = J->k, es = K->esize;
  if (use512) {
    for (; j + 64 <= vec_end; j += 64) K->wide512[rows - 1](ai, lda, b + j * es, ldb, c + j, ldc, k);
    for (; j + 16 <= vec_end; j += 16) K->narrow512[rows - 1](ai, lda, b + j * es, ldb, c + j, ldc, k);
  }
  for (; j + 24 <= vec_end; j += 24) K->wide[rows - 1](ai, lda, b + j * es, ldb, c + j, ldc, k);
  for (; j + 8 <= vec_end; j += 8) K->narrow[rows - 1](ai, lda, b + j * es, ldb, c + j, ldc, k);
  if (j < vec_end) K->quarter[rows - 1](ai, lda, b + j * es, ldb, c + j, ldc, k);
#endif
  /* The engine's JavaScript sums the columns after the last multiple of 4 in double. */
  for (j = vec_end; j < width; j++) {
    for (size_t r = 0; r < rows; r++) {
      double s = 0;
      for (size_t p = 0; p < J->k; p++)
        s += (double)ai[r * J->lda + p] * (double)widen(b, p * ldb + j, J->format);
      c[r * J->ldc + j] = (float)s;
    }
  }
}

/* Rows [i0, i1) × columns [j0, j1) of C, in 4-row tiles. */
static void run_block(const job_t *J, size_t i0, size_t i1, size_t j0, size_t j1) {
#ifdef HAVE_AVX2_MATMUL
  size_t es = J->kern->esize;
#else
  size_t es = J->format == FMT_F32 ? 4 : 2;
#endif
  for (size_t i = i0; i < i1; i += 4) {
    size_t rows = i1 - i < 4 ? i1 - i : 4;
    const float *ai = J->a + i * J->lda;
    float *ci = J->c + i * J->ldc;
    if (!J->panel_major) {
      run_tiles(J, ai, rows, J->b + j0 * es, J->ldb, ci + j0, j1 - j0);
      continue;
    }
    for (size_t j = j0; j < j1;) {
      size_t q = j / WEIGHT_PANEL, first = q * WEIGHT_PANEL;
      size_t pw = J->n - first < WEIGHT_PANEL ? J->n - first : WEIGHT_PANEL;
      size_t end = first + pw < j1 ? first + pw : j1;
      const char *panel = J->b + (first * J->k + (j - first)) * es;
      run_tiles(J, ai, rows, panel, pw, ci + j, end - j);
      j = end;
    }
  }
}

static void run_block_index(const job_t *J, uint32_t index) {
  size_t cb = index / J->row_blocks, rb = index % J->row_blocks;
  size_t i0 = rb * J->rows_per_block, j0 = cb * J->cols_per_block;
  size_t i1 = i0 + J->rows_per_block < J->m ? i0 + J->rows_per_block : J->m;
  size_t j1 = j0 + J->cols_per_block < J->n ? j0 + J->cols_per_block : J->n;
  run_block(J, i0, i1, j0, j1);
}

/* ---- The thread pool ---------------------------------------------------------------- */

#define MAX_THREADS 64
/*
 * When a call is split. Below PARALLEL_MIN_MACS multiply-adds it stays on its own thread.
 * Between that and WAKE_MIN_MACS it is split only while the helpers are still spinning
 * after the previous product (joining costs them nothing): waking a sleeping helper costs the
 * caller a futex system call and the helper a trip through the scheduler, together longer
 * than such a product takes on one thread (on a virtual machine most of all). So a small
 * model's batch-1 decode, all of whose products are below WAKE_MIN_MACS, never wakes a
 * helper, while a larger model wakes them at its first large product and keeps them busy
 * through the rest of the forward pass.
 */
#define PARALLEL_MIN_MACS (1u << 18)
#define WAKE_MIN_MACS (1u << 20)
/* How long an idle helper spins before it sleeps. */
#define SPIN_NS 100000

/* The claim word: generation (16 bits) | block count (24) | next block (24). */
static _Atomic uint64_t claim;
static _Atomic uint32_t blocks_done;
static _Atomic int helpers_joined;
static _Atomic int sleepers;
static _Atomic int helpers_wanted;
/* The work of the current generation: pool_task(pool_ctx, i) for every block i. */
static kvpool_task_fn pool_task;
static const void *pool_ctx;
static int helpers_started;
static uint32_t generation;
static pthread_mutex_t pool_owner = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t sleep_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sleep_cv = PTHREAD_COND_INITIALIZER;

#define CLAIM_GEN(v) ((uint32_t)((v) >> 48))
#define CLAIM_COUNT(v) ((uint32_t)((v) >> 24) & 0xffffffu)
#define CLAIM_NEXT(v) ((uint32_t)(v) & 0xffffffu)

static inline void cpu_relax(void) {
#ifdef HAVE_AVX2_MATMUL
  _mm_pause();
#endif
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Takes blocks of generation `gen` until none is left. A block's parameters are read only
 * after it is claimed: the caller cannot publish the next job before this block is done.
 */
static void take_blocks(uint32_t gen) {
  uint64_t v = atomic_load_explicit(&claim, memory_order_acquire);
  for (;;) {
    if (CLAIM_GEN(v) != gen || CLAIM_NEXT(v) >= CLAIM_COUNT(v)) return;
    if (atomic_compare_exchange_weak_explicit(&claim, &v, v + 1, memory_order_acq_rel, memory_order_acquire)) {
      pool_task(pool_ctx, CLAIM_NEXT(v));
      atomic_fetch_add_explicit(&blocks_done, 1, memory_order_release);
      v = atomic_load_explicit(&claim, memory_order_acquire);
    }
  }
}

static void *helper_main(void *arg) {
  (void)arg;
  uint32_t seen = CLAIM_GEN(atomic_load(&claim));
  for (;;) {
    uint64_t started = now_ns();
    unsigned spins = 0;
    while (CLAIM_GEN(atomic_load_explicit(&claim, memory_order_acquire)) == seen) {
      cpu_relax();
      if ((++spins & 255) != 0 || now_ns() - started < SPIN_NS) continue;
      pthread_mutex_lock(&sleep_mu);
      atomic_fetch_add(&sleepers, 1);
      while (CLAIM_GEN(atomic_load(&claim)) == seen) pthread_cond_wait(&sleep_cv, &sleep_mu);
      atomic_fetch_sub(&sleepers, 1);
      pthread_mutex_unlock(&sleep_mu);
    }
    seen = CLAIM_GEN(atomic_load_explicit(&claim, memory_order_acquire));
    /* A call asks for threads - 1 helpers; the others sit this one out. */
    if (atomic_fetch_add(&helpers_joined, 1) < helpers_wanted) take_blocks(seen);
  }
  return NULL;
}

static int start_helpers(int wanted) {
  while (helpers_started < wanted && helpers_started < MAX_THREADS - 1) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&t, &attr, helper_main, NULL);
    pthread_attr_destroy(&attr);
    if (err != 0) break;
#ifdef __linux__
    pthread_setname_np(t, "kvmatmul"); /* how top -H and /proc/<pid>/task/<tid>/comm show it */
#endif
    helpers_started++;
  }
  return helpers_started < wanted ? helpers_started : wanted;
}

/* True when `wanted` helpers are started and none sleeps (the caller holds pool_owner). */
static bool helpers_awake(int wanted) {
  return helpers_started >= wanted && atomic_load_explicit(&sleepers, memory_order_acquire) == 0;
}

/*
 * True when a call of `cost` multiply-adds (or their equivalent) on `threads` threads should
 * use the pool; then the caller owns it (pool_owner held) until pool_dispatch returns.
 */
static bool pool_acquire(int threads, double cost) {
  if (threads <= 1 || cost < PARALLEL_MIN_MACS || pthread_mutex_trylock(&pool_owner) != 0) return false;
  if (cost < WAKE_MIN_MACS && !helpers_awake(threads - 1)) {
    pthread_mutex_unlock(&pool_owner);
    return false;
  }
  return true;
}

/* Runs task(ctx, i) for i < nblocks on the pool and this thread; releases the pool. */
static void pool_dispatch(kvpool_task_fn task, const void *ctx, uint32_t nblocks, int threads) {
  int helpers = start_helpers(threads - 1);
  pool_task = task;
  pool_ctx = ctx;
  helpers_wanted = helpers;
  atomic_store(&helpers_joined, 0);
  atomic_store(&blocks_done, 0);
  generation = (generation + 1) & 0xffff;
  atomic_store(&claim, ((uint64_t)generation << 48) | ((uint64_t)nblocks << 24));
  if (atomic_load(&sleepers) > 0) {
    pthread_mutex_lock(&sleep_mu);
    pthread_cond_broadcast(&sleep_cv);
    pthread_mutex_unlock(&sleep_mu);
  }
  take_blocks(generation);
  for (unsigned spins = 0; atomic_load_explicit(&blocks_done, memory_order_acquire) < nblocks; spins++) {
    if (spins < 4096) cpu_relax();
    else sched_yield(); /* a helper was descheduled mid-block (a busy machine) */
  }
  pthread_mutex_unlock(&pool_owner);
}

/*
 * Cuts a call into tasks once it is known how many threads run it (1: this thread alone)
 * and returns their count.
 */
typedef uint32_t (*pool_plan_fn)(void *ctx, int threads);

/*
 * The pool's one dispatch: runs task(ctx, i) for every i < count on up to `threads` threads
 * when `cost` pays for the helpers and the pool is free, else on this thread in order. With
 * a plan, count is what the plan returns for the threads the call got.
 */
static void pool_run(kvpool_task_fn task, void *ctx, pool_plan_fn plan, uint32_t count, int threads,
                     double cost) {
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  bool parallel = (plan != NULL || count >= 2) && pool_acquire(threads, cost);
  if (plan != NULL) count = plan(ctx, parallel ? threads : 1);
  if (parallel && count >= 2 && count <= 0xffffff) {
    pool_dispatch(task, ctx, count, threads);
    return;
  }
  if (parallel) pthread_mutex_unlock(&pool_owner);
  for (uint32_t i = 0; i < count; i++) task(ctx, i);
}

void kvpool_run(kvpool_task_fn task, const void *ctx, uint32_t count, int threads, double cost) {
  pool_run(task, (void *)ctx, NULL, count, threads, cost); /* no plan: ctx is only read */
}

static void matmul_task(const void *ctx, uint32_t index) { run_block_index((const job_t *)ctx, index); }

/*
 * The blocks of C for `threads` threads: smaller column blocks until every thread has
 * several to take; a weight's blocks stay whole panels, so no two threads read parts of one
 * cache line of it.
 */
static uint32_t matmul_plan(void *ctx, int threads) {
  job_t *J = ctx;
  J->row_blocks = (J->m + J->rows_per_block - 1) / J->rows_per_block;
  size_t min_cols = J->panel_major ? WEIGHT_PANEL : 16;
  while (threads > 1 && J->cols_per_block > min_cols &&
         J->row_blocks * ((J->n + J->cols_per_block - 1) / J->cols_per_block) < (size_t)threads * 8)
    J->cols_per_block /= 2;
  return (uint32_t)(J->row_blocks * ((J->n + J->cols_per_block - 1) / J->cols_per_block));
}

/* Runs `J` on up to `threads` threads (this one included); blocks as described above. */
static void run_job(job_t *J, int threads) {
  pool_run(matmul_task, J, matmul_plan, 0, threads, (double)J->m * (double)J->n * (double)J->k);
}

bool kvmatmul_local(size_t m, size_t n, size_t k, const float *a, size_t lda, const float *b, size_t ldb,
                    float *c, size_t ldc) {
#ifdef HAVE_AVX2_MATMUL
  if (!usable) return false;
  job_t J = {0};
  J.kern = &kernels_F32;
  J.format = FMT_F32;
  J.a = a;
  J.lda = lda;
  J.b = (const char *)b;
  J.ldb = ldb;
  J.c = c;
  J.ldc = ldc;
  J.m = m;
  J.n = n;
  J.k = k;
  if (m > 0 && n > 0 && k > 0) run_block(&J, 0, m, 0, n);
  return true;
#else
  (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc;
  return false;
#endif
}

/* ---- N-API ---------------------------------------------------------------------------- */

bool kvmatmul_init(void) {
#ifdef HAVE_AVX2_MATMUL
  __builtin_cpu_init();
  usable = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
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

napi_value kv_matmul_pool_size(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value out;
  pthread_mutex_lock(&pool_owner);
  int started = helpers_started;
  pthread_mutex_unlock(&pool_owner);
  napi_create_int32(env, started, &out);
  return out;
}

bool kv_read_args(napi_env env, napi_callback_info info, const char *usage, void **data, size_t *bytes,
                  kv_typed_arg *typed, size_t ntyped, int64_t *v, size_t count, size_t optional, double *d,
                  size_t ndoubles) {
  size_t argc = KV_MAX_ARGS, fixed = 1 + ntyped + count + ndoubles;
  napi_value argv[KV_MAX_ARGS];
  char msg[240];
  bool ok = fixed <= KV_MAX_ARGS && napi_get_cb_info(env, info, &argc, argv, NULL, NULL) == napi_ok &&
            argc >= fixed - optional && argc <= fixed && napi_get_arraybuffer_info(env, argv[0], data, bytes) == napi_ok;
  for (size_t i = 0; ok && i < ntyped; i++) {
    napi_typedarray_type type;
    ok = napi_get_typedarray_info(env, argv[1 + i], &type, &typed[i].length, &typed[i].data, NULL, NULL) == napi_ok &&
         type == typed[i].type;
  }
  for (size_t i = 0; ok && i < count && 1 + ntyped + i < argc; i++)
    ok = napi_get_value_int64(env, argv[1 + ntyped + i], &v[i]) == napi_ok && v[i] >= 0;
  for (size_t i = 0; ok && i < ndoubles; i++) ok = napi_get_value_double(env, argv[1 + ntyped + count + i], &d[i]) == napi_ok;
  if (!ok) {
    snprintf(msg, sizeof msg, "%s: an ArrayBuffer, then typed arrays as named, then non-negative integers", usage);
    napi_throw_type_error(env, NULL, msg);
  }
  return ok;
}

/* Fills J from offsets in elements (a, c: floats; b: elements of `esize` bytes). */
static void set_operands(job_t *J, void *data, size_t esize, int64_t m, int64_t n, int64_t k, int64_t a,
                         int64_t lda, int64_t b, int64_t ldb, int64_t c, int64_t ldc) {
  float *f = (float *)data;
  J->a = f + a;
  J->lda = (size_t)lda;
  J->b = (const char *)data + (size_t)b * esize;
  J->ldb = (size_t)ldb;
  J->c = f + c;
  J->ldc = (size_t)ldc;
  J->m = (size_t)m;
  J->n = (size_t)n;
  J->k = (size_t)k;
  J->rows_per_block = m <= 64 ? (size_t)(m > 0 ? m : 1) : 64;
  J->cols_per_block = 128;
}

int kvpool_threads(int64_t t) { return t < 1 ? 1 : t > MAX_THREADS ? MAX_THREADS : (int)t; }

napi_value kv_matmul_f32(napi_env env, napi_callback_info info) {
  static const char usage[] = "matmulF32(memory, m, n4, k, a, lda, b, ldb, c, ldc[, threads])";
  void *data = NULL;
  size_t bytes = 0;
  int64_t v[10] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  if (!kv_read_args(env, info, usage, &data, &bytes, NULL, 0, v, 10, 1, NULL, 0)) return NULL;
  int64_t m = v[0], n4 = v[1], k = v[2], a = v[3], lda = v[4], b = v[5], ldb = v[6], c = v[7], ldc = v[8];
  uint64_t floats = bytes / 4;
  bool ok = usable && n4 % 4 == 0 && k >= 1 && (m == 0 || n4 == 0 ||
            ((uint64_t)(a + (m - 1) * lda + k) <= floats && (uint64_t)(b + (k - 1) * ldb + n4) <= floats &&
             (uint64_t)(c + (m - 1) * ldc + n4) <= floats));
  if (!ok) {
    napi_throw_range_error(env, NULL,
                           "matmulF32: the operands do not fit in the memory, n4 is not a multiple of 4 or k is 0 "
                           "(or no AVX2)");
    return NULL;
  }
#ifdef HAVE_AVX2_MATMUL
  job_t J = {0};
  set_operands(&J, data, 4, m, n4, k, a, lda, b, ldb, c, ldc);
  J.kern = &kernels_F32;
  J.format = FMT_F32;
  if (m > 0 && n4 > 0) run_job(&J, kvpool_threads(v[9]));
#endif
  return NULL;
}

napi_value kv_matmul_weight(napi_env env, napi_callback_info info) {
  static const char usage[] = "matmulWeight(memory, m, n, k, a, lda, w, c, ldc, format, threads)";
  void *data = NULL;
  size_t bytes = 0;
  int64_t v[10] = {0};
  if (!kv_read_args(env, info, usage, &data, &bytes, NULL, 0, v, 10, 0, NULL, 0)) return NULL;
  int64_t m = v[0], n = v[1], k = v[2], a = v[3], lda = v[4], w = v[5], c = v[6], ldc = v[7], format = v[8];
  if (format != FMT_F32 && format != FMT_F16 && format != FMT_BF16) {
    napi_throw_range_error(env, NULL, "matmulWeight: format must be 0 (float32), 1 (float16) or 2 (bfloat16)");
    return NULL;
  }
  size_t esize = format == FMT_F32 ? 4 : 2;
  uint64_t floats = bytes / 4, elements = bytes / esize;
  bool ok = usable && k >= 1 && (m == 0 || n == 0 ||
            ((uint64_t)(a + (m - 1) * lda + k) <= floats && (uint64_t)(w + k * n) <= elements &&
             (uint64_t)(c + (m - 1) * ldc + n) <= floats));
  if (!ok) {
    napi_throw_range_error(env, NULL, "matmulWeight: the operands do not fit in the memory or k is 0 (or no AVX2)");
    return NULL;
  }
#ifdef HAVE_AVX2_MATMUL
  job_t J = {0};
  set_operands(&J, data, esize, m, n, k, a, lda, w, 0, c, ldc);
  J.panel_major = true;
  J.kern = format == FMT_F32 ? &kernels_F32 : format == FMT_F16 ? &kernels_F16 : &kernels_BF16;
  J.format = (int)format;
  if (m > 0 && n > 0) run_job(&J, kvpool_threads(v[9]));
#endif
  return NULL;
}
