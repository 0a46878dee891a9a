/*
 * kvops: the engine's kernels besides the matmuls, on the WebAssembly memory and on the
 * matmul's thread pool (kvmatmul.c): prefill and decode attention, the SwiGLU activation, RMSNorm with
 * the residual add before it, RoPE. Each gives the bits of the engine's WebAssembly/JavaScript
 * path (src/engine/model/), so a process with the addon and one without compute the same
 * logits, and every output element is computed by one thread in one order, so the results
 * do not depend on the thread count:
 *
 * - exp is the WebAssembly modules' e^x (src/engine/model/kernels/wasm-simd-ops.ts):
 *   k = round-to-even(x · log2 e), r = x − k · c1 − k · c2, a degree-7 Horner polynomial in
 *   r, times 2^k from its exponent bits, every step one float32 operation (this file is built
 *   with -ffp-contract=off: no fused multiply-add);
 * - softmax sums e^(x − max) in four lanes, element i into lane i % 4 in ascending order,
 *   then ((l0 + l1) + l2) + l3, then the last count % 4 elements one by one, and scales by
 *   1/sum, as wasm-softmax.ts does;
 * - RMSNorm, RoPE and the queries' scaling compute in double where the JavaScript does.
 *
 *   attentionPrefill(memory, qkv, qkvStride, out, outStride, firstRow, len, p0, lo, ctx,
 *                    keysT, values, numHeads, numKvHeads, headDim, window, queryBlock, threads)
 *       src/engine/model/attention.ts's blocks of `queryBlock` query tokens × KV heads, as
 *       tasks on the pool (window 0: full attention)
 *   attentionDecode(memory, kv, table, blockSize, qkv, qkvStride, out, firstRow, len, p0,
 *                   numHeads, numKvHeads, headDim, window, threads)
 *       src/engine/model/decode-attention.ts for a float32 KV tensor (a Float32Array, e.g. over
 *       the KV SharedArrayBuffer), read in place through the Int32Array block table; KV
 *       heads as tasks on the pool, each gathering its K and V once for all the new tokens
 *   swiglu(memory, gateUp, out, rows, inter, threads)
 *       out[r][i] = silu(gateUp[r][i]) · gateUp[r][inter + i]; inter a multiple of 4
 *   rmsnorm(memory, weight, x, add, dst, rows, dim, threads, eps)
 *       add = 0: dst = rmsnorm(x); else x += add (float32) first; weight a Float32Array of dim
 *   gatherKV(memory, kv, table, blockSize, numKvHeads, headDim, lo, ctx, keysT, values, threads)
 *       stages positions [lo, lo + ctx) of one layer's float32 KV tensor (a Float32Array, e.g.
 *       over the KV SharedArrayBuffer; blocks from the Int32Array `table`) as attention.ts's
 *       gather does: V rows as they are, K transposed per head
 *   rope(memory, cos, sin, positions, half, x, stride, rows, heads, threads)
 *       rotates `heads` consecutive head vectors of every row (src/engine/model/rope.ts), with
 *       the cos/sin tables (Float32Array, `half` per position) and an Int32Array of positions
 */
#define _GNU_SOURCE
#include "kvops.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmatmul.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_KVOPS 1

#define AVX2 __attribute__((target("avx2")))

/* e^x for x in [-87, 87], eight lanes, each lane the WebAssembly module's operations. */
AVX2 static inline __m256 exp8(__m256 x) {
  __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps((float)1.4426950408889634)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(k, _mm256_set1_ps(0.693359375f)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(k, _mm256_set1_ps((float)-2.1219444e-4)));
  static const double coefficients[8] = {1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 1.0 / 2, 1, 1};
  __m256 p = _mm256_set1_ps((float)coefficients[0]);
  for (int i = 1; i < 8; i++) p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps((float)coefficients[i]));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* e^max(x − m, −87): one softmax term. */
AVX2 static inline __m256 shifted_exp8(__m256 x, __m256 m) {
  return exp8(_mm256_max_ps(_mm256_sub_ps(x, m), _mm256_set1_ps(-87.0f)));
}

AVX2 static inline float shifted_exp1(float x, float m) {
  return _mm256_cvtss_f32(shifted_exp8(_mm256_set1_ps(x), _mm256_set1_ps(m)));
}

/* In-place softmax of row[0..count), count >= 1 (wasm-softmax.ts's order, see the top). */
AVX2 static void softmax_row(float *row, size_t count) {
  size_t vend = count & ~(size_t)3, i = 0;
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (; i + 8 <= vend; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(row + i));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  for (; i < vend; i += 4) m4 = _mm_max_ps(m4, _mm_loadu_ps(row + i));
  float lanes[4];
  _mm_storeu_ps(lanes, m4);
  float m = fmaxf(fmaxf(fmaxf(lanes[0], lanes[1]), lanes[2]), lanes[3]);
  for (; i < count; i++) m = fmaxf(m, row[i]);
  __m256 vm = _mm256_set1_ps(m);
  __m128 acc = _mm_setzero_ps();
  for (i = 0; i + 8 <= vend; i += 8) {
    __m256 e = shifted_exp8(_mm256_loadu_ps(row + i), vm);
    _mm256_storeu_ps(row + i, e);
    acc = _mm_add_ps(acc, _mm256_castps256_ps128(e));
    acc = _mm_add_ps(acc, _mm256_extractf128_ps(e, 1));
  }
  if (i < vend) {
    __m128 e = _mm256_castps256_ps128(shifted_exp8(_mm256_castps128_ps256(_mm_loadu_ps(row + i)), vm));
    _mm_storeu_ps(row + i, e);
    acc = _mm_add_ps(acc, e);
    i += 4;
  }
  _mm_storeu_ps(lanes, acc);
  float sum = ((lanes[0] + lanes[1]) + lanes[2]) + lanes[3];
  for (; i < count; i++) {
    row[i] = shifted_exp1(row[i], m);
    sum = sum + row[i];
  }
  float inv = 1.0f / sum;
  __m256 vinv = _mm256_set1_ps(inv);
  for (i = 0; i + 8 <= count; i += 8) _mm256_storeu_ps(row + i, _mm256_mul_ps(_mm256_loadu_ps(row + i), vinv));
  for (; i < count; i++) row[i] = row[i] * inv;
}

/* ---- Prefill attention -------------------------------------------------------------- */

typedef struct {
  float *mem;
  size_t qkv, qkv_stride, out, out_stride, first_row, len, p0, lo, ctx, keys_t, values;
  size_t num_heads, num_kv_heads, hd, window, query_block, blocks;
  double scale;
} attention_t;

/* Per-thread scratch (queries, scores, outputs of one task), grown as needed, kept. */
static __thread float *scratch;
static __thread size_t scratch_floats;

static float *scratch_for(size_t floats) {
  if (floats > scratch_floats) {
    free(scratch);
    scratch = malloc(floats * sizeof(float));
    scratch_floats = scratch == NULL ? 0 : floats;
  }
  return scratch;
}

/* One block of query tokens × one KV head: attention.ts's loop body. Later blocks go first. */
AVX2 static void attention_task(const void *arg, uint32_t index) {
  const attention_t *A = arg;
  size_t group = A->num_heads / A->num_kv_heads, hd = A->hd;
  size_t b = A->blocks - 1 - index / A->num_kv_heads, h = index % A->num_kv_heads;
  size_t t0 = b * A->query_block, t1 = t0 + A->query_block < A->len ? t0 + A->query_block : A->len;
  size_t rows = (t1 - t0) * group;
  size_t k_lo = A->lo;
  if (A->window != 0 && A->p0 + t0 + 1 > A->window && A->p0 + t0 + 1 - A->window > k_lo)
    k_lo = A->p0 + t0 + 1 - A->window;
  size_t k_hi = A->p0 + t1 - 1, kn = k_hi - k_lo + 1;
  float *q = scratch_for(rows * hd * 2 + rows * kn);
  if (q == NULL) abort(); /* out of memory: nothing sensible to return mid-forward */
  float *outputs = q + rows * hd, *scores = outputs + rows * hd;
  float *mem = A->mem;
  for (size_t t = t0; t < t1; t++) {
    const float *src = mem + A->qkv + (A->first_row + t) * A->qkv_stride + h * group * hd;
    float *dst = q + (t - t0) * group * hd;
    for (size_t i = 0; i < group * hd; i++) dst[i] = (float)((double)src[i] * A->scale);
  }
  kvmatmul_local(rows, kn, hd, q, hd, mem + A->keys_t + h * hd * A->ctx + (k_lo - A->lo), A->ctx, scores, kn);
  for (size_t r = 0; r < rows; r++) {
    size_t p = A->p0 + t0 + r / group;
    size_t first = A->window != 0 && p + 1 > A->window ? p + 1 - A->window : 0;
    size_t from = first > k_lo ? first - k_lo : 0, to = p - k_lo;
    float *row = scores + r * kn;
    softmax_row(row + from, to - from + 1);
    if (from > 0) memset(row, 0, from * sizeof(float));
    if (to + 1 < kn) memset(row + to + 1, 0, (kn - to - 1) * sizeof(float));
  }
  size_t row_size = A->num_kv_heads * hd;
  kvmatmul_local(rows, hd, kn, scores, kn, mem + A->values + (k_lo - A->lo) * row_size + h * hd, row_size,
                 outputs, hd);
  for (size_t t = t0; t < t1; t++)
    memcpy(mem + A->out + (A->first_row + t) * A->out_stride + h * group * hd, outputs + (t - t0) * group * hd,
           group * hd * sizeof(float));
}

/* ---- Decode attention ------------------------------------------------------------------- */

typedef struct {
  float *mem;
  const float *kv;
  const int32_t *table;
  size_t block_size, qkv, qkv_stride, out, first_row, len, p0, num_heads, num_kv_heads, hd, window;
  size_t lo; /* the first position any new token sees */
  double scale;
} decode_t;

/*
 * One KV head for all the new tokens: K (transposed) and V of the positions they see,
 * [lo, p0 + len), gathered once from where the block table has them, then per new token the
 * bits of decode-attention.ts (scores K · qᵀ summed over the head dimension in float32, the
 * softmax above, then probabilities · V as the matmul sums it). A token's keys and values
 * are a window of the gathered ones: the matmuls' results do not depend on the row stride.
 */
AVX2 static void decode_task(const void *arg, uint32_t h) {
  const decode_t *D = arg;
  size_t group = D->num_heads / D->num_kv_heads, hd = D->hd, bs = D->block_size, rs = D->num_kv_heads * hd;
  size_t lo = D->lo, hi = D->p0 + D->len - 1, span = hi - lo + 1;
  size_t widest = D->window != 0 && D->window < span ? D->window : span; /* the last token's keys */
  float *q = scratch_for(group * hd + 2 * span * hd + group * widest);
  if (q == NULL) abort(); /* out of memory: nothing sensible to return mid-forward */
  float *keys_t = q + group * hd, *values = keys_t + span * hd, *scores = values + span * hd;
  for (size_t j = lo; j <= hi; j++) {
    const float *k = D->kv + ((size_t)D->table[j / bs] * 2 * bs + j % bs) * rs + h * hd;
    memcpy(values + (j - lo) * hd, k + bs * rs, hd * sizeof(float));
    for (size_t d = 0; d < hd; d++) keys_t[d * span + (j - lo)] = k[d];
  }
  for (size_t t = 0; t < D->len; t++) {
    size_t p = D->p0 + t, first = D->window != 0 && p + 1 > D->window ? p + 1 - D->window : 0, n = p - first + 1;
    const float *kt = keys_t + (first - lo), *v = values + (first - lo) * hd;
    const float *src = D->mem + D->qkv + (D->first_row + t) * D->qkv_stride + h * group * hd;
    for (size_t i = 0; i < group * hd; i++) q[i] = (float)((double)src[i] * D->scale);
    size_t n4 = n & ~(size_t)3;
    if (n4 > 0) kvmatmul_local(group, n4, hd, q, hd, kt, span, scores, n);
    for (size_t g = 0; g < group; g++) {
      for (size_t j = n4; j < n; j++) {
        float acc = 0;
        for (size_t d = 0; d < hd; d++) acc = acc + q[g * hd + d] * kt[d * span + j];
        scores[g * n + j] = acc;
      }
      softmax_row(scores + g * n, n);
    }
    float *out = D->mem + D->out + (D->first_row + t) * D->num_heads * hd + h * group * hd;
    kvmatmul_local(group, hd, n, scores, n, v, hd, out, hd);
  }
}

/* ---- SwiGLU ---------------------------------------------------------------------------- */

typedef struct {
  float *mem;
  size_t gate_up, out, rows, inter, rows_per_task;
} swiglu_t;

/* out = (g · up) / (1 + e^clamp(−g, ±87)), wasm-swiglu.ts's operations per lane. */
AVX2 static void swiglu_task(const void *arg, uint32_t index) {
  const swiglu_t *S = arg;
  size_t r0 = index * S->rows_per_task, r1 = r0 + S->rows_per_task < S->rows ? r0 + S->rows_per_task : S->rows;
  const __m256 sign = _mm256_set1_ps(-0.0f), hi = _mm256_set1_ps(87.0f), lo = _mm256_set1_ps(-87.0f),
               one = _mm256_set1_ps(1.0f);
  for (size_t r = r0; r < r1; r++) {
    const float *gate = S->mem + S->gate_up + r * 2 * S->inter, *up = gate + S->inter;
    float *out = S->mem + S->out + r * S->inter;
    size_t i = 0;
    for (; i + 8 <= S->inter; i += 8) {
      __m256 g = _mm256_loadu_ps(gate + i);
      __m256 e = exp8(_mm256_max_ps(_mm256_min_ps(_mm256_xor_ps(g, sign), hi), lo));
      __m256 v = _mm256_div_ps(_mm256_mul_ps(g, _mm256_loadu_ps(up + i)), _mm256_add_ps(one, e));
      _mm256_storeu_ps(out + i, v);
    }
    for (; i < S->inter; i += 4) {
      __m256 g = _mm256_castps128_ps256(_mm_loadu_ps(gate + i));
      __m256 u = _mm256_castps128_ps256(_mm_loadu_ps(up + i));
      __m256 e = exp8(_mm256_max_ps(_mm256_min_ps(_mm256_xor_ps(g, sign), hi), lo));
      _mm_storeu_ps(out + i, _mm256_castps256_ps128(_mm256_div_ps(_mm256_mul_ps(g, u), _mm256_add_ps(one, e))));
    }
  }
}

#endif /* HAVE_KVOPS */

/* ---- RMSNorm (plain C: its sum is sequential in double, as the JavaScript's) ---------- */

typedef struct {
  float *mem;
  const float *weight;
  double eps;
  size_t x, add, dst, rows, dim, rows_per_task;
} rmsnorm_t;

static void rmsnorm_task(const void *arg, uint32_t index) {
  const rmsnorm_t *N = arg;
  size_t r0 = index * N->rows_per_task, r1 = r0 + N->rows_per_task < N->rows ? r0 + N->rows_per_task : N->rows;
  for (size_t r = r0; r < r1; r++) {
    float *x = N->mem + N->x + r * N->dim, *dst = N->mem + N->dst + r * N->dim;
    if (N->add != 0) {
      const float *add = N->mem + N->add + r * N->dim;
      for (size_t i = 0; i < N->dim; i++) x[i] = x[i] + add[i];
    }
    double ss = 0;
    for (size_t i = 0; i < N->dim; i++) ss += (double)x[i] * (double)x[i];
    double inv = 1 / sqrt(ss / (double)N->dim + N->eps);
    for (size_t i = 0; i < N->dim; i++) dst[i] = (float)((double)x[i] * inv * (double)N->weight[i]);
  }
}

/* ---- RoPE (plain C: double products, as the JavaScript's) ----------------------------- */

typedef struct {
  float *mem;
  const float *cos, *sin;
  const int32_t *positions;
  size_t half, x, stride, rows, heads, rows_per_task;
} rope_t;

/* Rotates `heads` vectors of 2 · half floats per row: (x1, x2) -> (x1 c − x2 s, x2 c + x1 s). */
static void rope_task(const void *arg, uint32_t index) {
  const rope_t *R = arg;
  size_t r0 = index * R->rows_per_task, r1 = r0 + R->rows_per_task < R->rows ? r0 + R->rows_per_task : R->rows;
  size_t half = R->half;
  for (size_t r = r0; r < r1; r++) {
    const float *c = R->cos + (size_t)R->positions[r] * half, *s = R->sin + (size_t)R->positions[r] * half;
    for (size_t h = 0; h < R->heads; h++) {
      float *v = R->mem + R->x + r * R->stride + h * 2 * half;
      for (size_t i = 0; i < half; i++) {
        double x1 = v[i], x2 = v[i + half];
        v[i] = (float)(x1 * c[i] - x2 * s[i]);
        v[i + half] = (float)(x2 * c[i] + x1 * s[i]);
      }
    }
  }
}

/* ---- Staging K and V for prefill attention ---------------------------------------------- */

typedef struct {
  float *mem;
  const float *kv;
  const int32_t *table;
  size_t block_size, row_size, num_kv_heads, hd, lo, ctx, keys_t, values, first_block;
} gather_t;

/* One block of the table: its V rows as they are, its K rows transposed per head. */
static void gather_task(const void *arg, uint32_t index) {
  const gather_t *G = arg;
  size_t b = G->first_block + index, bs = G->block_size, rs = G->row_size;
  size_t j0 = b * bs > G->lo ? b * bs : G->lo, hi = G->lo + G->ctx - 1;
  size_t j1 = b * bs + bs - 1 < hi ? b * bs + bs - 1 : hi;
  size_t n = j1 - j0 + 1;
  const float *k = G->kv + ((size_t)G->table[b] * 2 * bs + (j0 - b * bs)) * rs;
  memcpy(G->mem + G->values + (j0 - G->lo) * rs, k + bs * rs, n * rs * sizeof(float));
  for (size_t h = 0; h < G->num_kv_heads; h++)
    for (size_t d = 0; d < G->hd; d++) {
      float *dst = G->mem + G->keys_t + h * G->hd * G->ctx + d * G->ctx + (j0 - G->lo);
      const float *src = k + h * G->hd + d;
      for (size_t i = 0; i < n; i++) dst[i] = src[i * rs];
    }
}

/* ---- N-API ----------------------------------------------------------------------------- */


/* Row blocks of about `floats` elements each, at least one row. */
static size_t rows_per_task(size_t row_floats, size_t floats) {
  size_t n = floats / (row_floats > 0 ? row_floats : 1);
  return n > 0 ? n : 1;
}

/* True when blocks [b0, b1] of `table` are whole blocks (K and V) of a KV tensor of kv_length floats. */
static bool blocks_in_tensor(const int32_t *table, size_t b0, size_t b1, size_t bs, size_t rs, size_t kv_length) {
  for (size_t b = b0; b <= b1; b++)
    if (table[b] < 0 || ((uint64_t)table[b] + 1) * 2 * bs * rs > kv_length) return false;
  return true;
}

static napi_value range_error(napi_env env, const char *msg) {
  napi_throw_range_error(env, NULL, msg);
  return NULL;
}

napi_value kv_attention_prefill(napi_env env, napi_callback_info info) {
  static const char usage[] =
      "attentionPrefill(memory, qkv, qkvStride, out, outStride, firstRow, len, p0, lo, ctx, keysT, values, "
      "numHeads, numKvHeads, headDim, window, queryBlock, threads)";
  void *data = NULL;
  size_t bytes = 0;
  int64_t v[17] = {0};
  if (!kv_read_args(env, info, usage, &data, &bytes, NULL, 0, v, 17, 0, NULL, 0)) return NULL;
#ifdef HAVE_KVOPS
  attention_t A = {
      .mem = data,
      .qkv = (size_t)v[0],
      .qkv_stride = (size_t)v[1],
      .out = (size_t)v[2],
      .out_stride = (size_t)v[3],
      .first_row = (size_t)v[4],
      .len = (size_t)v[5],
      .p0 = (size_t)v[6],
      .lo = (size_t)v[7],
      .ctx = (size_t)v[8],
      .keys_t = (size_t)v[9],
      .values = (size_t)v[10],
      .num_heads = (size_t)v[11],
      .num_kv_heads = (size_t)v[12],
      .hd = (size_t)v[13],
      .window = (size_t)v[14],
      .query_block = (size_t)v[15],
  };
  uint64_t floats = bytes / 4;
  size_t rows_end = A.first_row + A.len, q_dim = A.num_heads * A.hd, row_size = A.num_kv_heads * A.hd;
  bool ok = A.len >= 1 && A.hd >= 1 && A.num_kv_heads >= 1 && A.num_heads % A.num_kv_heads == 0 &&
            A.query_block >= 1 && A.p0 + A.len == A.lo + A.ctx && A.lo <= A.p0 &&
            A.qkv + (rows_end - 1) * A.qkv_stride + q_dim <= floats &&
            A.out + (rows_end - 1) * A.out_stride + q_dim <= floats && A.keys_t + row_size * A.ctx <= floats &&
            A.values + A.ctx * row_size <= floats;
  if (!ok) return range_error(env, "attentionPrefill: the operands do not fit in the memory or the shape is invalid");
  A.blocks = (A.len + A.query_block - 1) / A.query_block;
  A.scale = 1 / sqrt((double)A.hd);
  double cost = 2.0 * (double)A.num_heads * (double)A.hd * (double)A.len * (double)A.ctx / 2;
  kvpool_run(attention_task, &A, (uint32_t)(A.blocks * A.num_kv_heads), kvpool_threads(v[16]), cost);
#else
  return range_error(env, "attentionPrefill: needs x86-64");
#endif
  return NULL;
}

napi_value kv_swiglu(napi_env env, napi_callback_info info) {
  static const char usage[] = "swiglu(memory, gateUp, out, rows, inter, threads)";
  void *data = NULL;
  size_t bytes = 0;
  int64_t v[5] = {0};
  if (!kv_read_args(env, info, usage, &data, &bytes, NULL, 0, v, 5, 0, NULL, 0)) return NULL;
#ifdef HAVE_KVOPS
  swiglu_t S = {.mem = data, .gate_up = (size_t)v[0], .out = (size_t)v[1], .rows = (size_t)v[2], .inter = (size_t)v[3]};
  uint64_t floats = bytes / 4;
  if (S.inter % 4 != 0 || S.gate_up + S.rows * 2 * S.inter > floats || S.out + S.rows * S.inter > floats)
    return range_error(env, "swiglu: inter is not a multiple of 4 or the operands do not fit in the memory");
  if (S.rows == 0 || S.inter == 0) return NULL;
  S.rows_per_task = rows_per_task(S.inter, 8192);
  size_t tasks = (S.rows + S.rows_per_task - 1) / S.rows_per_task;
  kvpool_run(swiglu_task, &S, (uint32_t)tasks, kvpool_threads(v[4]), 8.0 * (double)S.rows * (double)S.inter);
#else
  return range_error(env, "swiglu: needs x86-64");
#endif
  return NULL;
}

napi_value kv_rmsnorm(napi_env env, napi_callback_info info) {
  static const char usage[] = "rmsnorm(memory, weight, x, add, dst, rows, dim, threads, eps)";
  void *data = NULL;
  size_t bytes = 0;
  kv_typed_arg weight = {napi_float32_array, NULL, 0};
  double eps = 0;
  int64_t v[6] = {0};
  if (!kv_read_args(env, info, usage, &data, &bytes, &weight, 1, v, 6, 0, &eps, 1)) return NULL;
  rmsnorm_t N = {.mem = data,
                 .weight = weight.data,
                 .eps = eps,
                 .x = (size_t)v[0],
                 .add = (size_t)v[1],
                 .dst = (size_t)v[2],
                 .rows = (size_t)v[3],
                 .dim = (size_t)v[4]};
  uint64_t floats = bytes / 4, span = (uint64_t)N.rows * N.dim;
  if (weight.length < N.dim || N.x + span > floats || N.add + span > floats || N.dst + span > floats)
    return range_error(env, "rmsnorm: the operands do not fit in the memory or the weight is shorter than dim");
  if (N.rows == 0 || N.dim == 0) return NULL;
  N.rows_per_task = rows_per_task(N.dim, 4096);
  size_t tasks = (N.rows + N.rows_per_task - 1) / N.rows_per_task;
  kvpool_run(rmsnorm_task, &N, (uint32_t)tasks, kvpool_threads(v[5]), 4.0 * (double)span);
  return NULL;
}

napi_value kv_rope(napi_env env, napi_callback_info info) {
  static const char usage[] = "rope(memory, cos, sin, positions, half, x, stride, rows, heads, threads)";
  void *data = NULL;
  size_t bytes = 0;
  kv_typed_arg t[3] = {{napi_float32_array, NULL, 0}, {napi_float32_array, NULL, 0}, {napi_int32_array, NULL, 0}};
  int64_t v[6] = {0};
  if (!kv_read_args(env, info, usage, &data, &bytes, t, 3, v, 6, 0, NULL, 0)) return NULL;
  rope_t R = {.mem = data,
              .cos = t[0].data,
              .sin = t[1].data,
              .positions = t[2].data,
              .half = (size_t)v[0],
              .x = (size_t)v[1],
              .stride = (size_t)v[2],
              .rows = (size_t)v[3],
              .heads = (size_t)v[4]};
  if (R.rows == 0 || R.heads == 0 || R.half == 0) return NULL;
  uint64_t floats = bytes / 4, table = t[0].length < t[1].length ? t[0].length : t[1].length;
  bool ok = t[2].length >= R.rows && R.x + (R.rows - 1) * R.stride + R.heads * 2 * R.half <= floats;
  for (size_t r = 0; ok && r < R.rows; r++)
    ok = R.positions[r] >= 0 && ((uint64_t)R.positions[r] + 1) * R.half <= table;
  if (!ok) return range_error(env, "rope: the operands do not fit in the memory or a position is beyond the tables");
  R.rows_per_task = rows_per_task(R.heads * 2 * R.half, 4096);
  size_t tasks = (R.rows + R.rows_per_task - 1) / R.rows_per_task;
  kvpool_run(rope_task, &R, (uint32_t)tasks, kvpool_threads(v[5]), 4.0 * (double)R.rows * R.heads * 2 * R.half);
  return NULL;
}

napi_value kv_gather_kv(napi_env env, napi_callback_info info) {
  static const char usage[] = "gatherKV(memory, kv, table, blockSize, numKvHeads, headDim, lo, ctx, keysT, values, threads)";
  void *data = NULL;
  size_t bytes = 0;
  kv_typed_arg t[2] = {{napi_float32_array, NULL, 0}, {napi_int32_array, NULL, 0}};
  int64_t v[8] = {0};
  if (!kv_read_args(env, info, usage, &data, &bytes, t, 2, v, 8, 0, NULL, 0)) return NULL;
  size_t kv_length = t[0].length, table_length = t[1].length;
  gather_t G = {.mem = data,
                .kv = t[0].data,
                .table = t[1].data,
                .block_size = (size_t)v[0],
                .num_kv_heads = (size_t)v[1],
                .hd = (size_t)v[2],
                .lo = (size_t)v[3],
                .ctx = (size_t)v[4],
                .keys_t = (size_t)v[5],
                .values = (size_t)v[6]};
  G.row_size = G.num_kv_heads * G.hd;
  if (G.ctx == 0 || G.row_size == 0) return NULL;
  size_t bs = G.block_size, last_block = bs == 0 ? 0 : (G.lo + G.ctx - 1) / bs;
  uint64_t floats = bytes / 4, span = (uint64_t)G.row_size * G.ctx;
  bool ok = bs >= 1 && last_block < table_length && G.keys_t + span <= floats && G.values + span <= floats;
  G.first_block = ok ? G.lo / bs : 0;
  ok = ok && blocks_in_tensor(G.table, G.first_block, last_block, bs, G.row_size, kv_length);
  if (!ok) return range_error(env, "gatherKV: the operands do not fit in the memory or a block is beyond the KV tensor");
  kvpool_run(gather_task, &G, (uint32_t)(last_block - G.first_block + 1), kvpool_threads(v[7]), 2.0 * (double)span);
  return NULL;
}

napi_value kv_attention_decode(napi_env env, napi_callback_info info) {
  static const char usage[] =
      "attentionDecode(memory, kv, table, blockSize, qkv, qkvStride, out, firstRow, len, p0, numHeads, "
      "numKvHeads, headDim, window, threads)";
  void *data = NULL;
  size_t bytes = 0;
  kv_typed_arg t[2] = {{napi_float32_array, NULL, 0}, {napi_int32_array, NULL, 0}};
  int64_t v[12] = {0};
  if (!kv_read_args(env, info, usage, &data, &bytes, t, 2, v, 12, 0, NULL, 0)) return NULL;
#ifdef HAVE_KVOPS
  size_t kv_length = t[0].length, table_length = t[1].length;
  decode_t D = {.mem = data,
                .kv = t[0].data,
                .table = t[1].data,
                .block_size = (size_t)v[0],
                .qkv = (size_t)v[1],
                .qkv_stride = (size_t)v[2],
                .out = (size_t)v[3],
                .first_row = (size_t)v[4],
                .len = (size_t)v[5],
                .p0 = (size_t)v[6],
                .num_heads = (size_t)v[7],
                .num_kv_heads = (size_t)v[8],
                .hd = (size_t)v[9],
                .window = (size_t)v[10]};
  size_t bs = D.block_size, rows_end = D.first_row + D.len, q_dim = D.num_heads * D.hd;
  size_t rs = D.num_kv_heads * D.hd, hi = D.p0 + D.len - 1;
  uint64_t floats = bytes / 4;
  bool ok = D.len >= 1 && bs >= 1 && D.hd >= 1 && D.num_kv_heads >= 1 && D.num_heads % D.num_kv_heads == 0 &&
       hi / bs < table_length && D.qkv + (rows_end - 1) * D.qkv_stride + q_dim <= floats &&
       D.out + (rows_end - 1) * q_dim + q_dim <= floats;
  size_t lo = D.window != 0 && D.p0 + 1 > D.window ? D.p0 + 1 - D.window : 0;
  D.lo = lo;
  ok = ok && blocks_in_tensor(D.table, lo / bs, hi / bs, bs, rs, kv_length);
  if (!ok) return range_error(env, "attentionDecode: the operands do not fit in the memory or the KV tensor, or the shape is invalid");
  D.scale = 1 / sqrt((double)D.hd);
  double cost = 2.0 * (double)D.len * (double)q_dim * (double)(hi + 1 - lo);
  kvpool_run(decode_task, &D, (uint32_t)D.num_kv_heads, kvpool_threads(v[11]), cost);
#else
  return range_error(env, "attentionDecode: needs x86-64");
#endif
  return NULL;
}
