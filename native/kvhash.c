/*
 * kvhash: the per-block checksum of src/transfer/checksum-reference.ts, bit for bit (AVX2
 * through GCC vector types when the CPU has it), reading the bytes in place.
 */
#include "kvhash.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- block checksum: must stay bit-identical to src/transfer/checksum-reference.ts ---- */

#define LANES 32
#define STRIPE (LANES * 4)
#define LANE_PRIME 0x85ebca77u

/*
 * How far ahead of the stripe being hashed to prefetch. The loop is bound by the latency of
 * its multiply chains, so the hardware prefetcher alone let memory reads lag: 6.4–7.0 GB/s on
 * 256 MiB that is not in L2. Prefetching 2 KiB ahead: 9.9–10.7 GB/s (1–4 KiB all within
 * 9.8–10.7; a read-only pass is 11.7). Prefetches never fault, so reading past the end is safe,
 * and they cannot change the result.
 */
#define PREFETCH_BYTES 2048

/*
 * Word i of each 128-byte stripe goes to lane i: lane = imul(lane ^ word, P); lane ^= lane >> 15.
 * The lanes are held in STRIPE / sizeof(VT) vectors of type VT (4 × 256-bit, 2 × 512-bit, or
 * GCC's generic lowering); the result does not depend on VT. STORE(dst, w) may also store each
 * word vector to `dst` as it is hashed: a copy whose bytes are exactly the hashed ones, in one
 * pass over memory (STORE_NONE: hash only, `dst` unused).
 */
#define DEFINE_STEP(name, attr, VT, STORE)                                                  \
  attr static void name(uint32_t *lanes, uint8_t *dst, const uint8_t *p, size_t stripes) { \
    enum { W = sizeof(VT), N = STRIPE / sizeof(VT) };                                       \
    VT acc[N], w;                                                                           \
    memcpy(acc, lanes, STRIPE);                                                             \
    for (size_t s = 0; s < stripes; s++, p += STRIPE, dst += STRIPE) {                     \
      __builtin_prefetch(p + PREFETCH_BYTES);                                               \
      __builtin_prefetch(p + PREFETCH_BYTES + 64);                                          \
      _Pragma("GCC unroll 4") for (int k = 0; k < N; k++) {                                 \
        memcpy(&w, p + k * W, W);                                                           \
        STORE(dst + k * W, w);                                                              \
        acc[k] = (acc[k] ^ w) * LANE_PRIME;                                                 \
        acc[k] ^= acc[k] >> 15;                                                             \
      }                                                                                     \
    }                                                                                       \
    memcpy(lanes, acc, STRIPE);                                                             \
  }

#define STORE_NONE(p, w) ((void)(p))
#define STORE_PLAIN(p, w) memcpy((p), &(w), sizeof(w))

typedef uint32_t v8u32 __attribute__((vector_size(32)));

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
/* Streaming stores: the destination is not read for ownership first (as a memcpy of a large
 * block does), which would add a third stream over memory. Need a dst aligned to the vector. */
#define STORE_STREAM256(p, w) _mm256_stream_si256((__m256i *)(void *)(p), (__m256i)(w))
#define STORE_STREAM512(p, w) _mm512_stream_si512((void *)(p), (__m512i)(w))
#define AVX2 __attribute__((target("avx2")))
#define AVX512 __attribute__((target("avx512f")))
typedef uint32_t v16u32 __attribute__((vector_size(64)));
DEFINE_STEP(step_avx2, AVX2, v8u32, STORE_NONE)
DEFINE_STEP(copy_step_avx2, AVX2, v8u32, STORE_PLAIN)
DEFINE_STEP(copy_stream_avx2, AVX2, v8u32, STORE_STREAM256)
#define HAVE_AVX2_STEP 1
/*
 * 512-bit vectors with full-cache-line streaming stores: copy+hash of 128 MiB against a libc
 * memcpy of the same size, see docs/BENCHMARKS.md ("Transfer", copy_hash).
 */
DEFINE_STEP(step_avx512, AVX512, v16u32, STORE_NONE)
DEFINE_STEP(copy_stream_avx512, AVX512, v16u32, STORE_STREAM512)
#define HAVE_AVX512_STEP 1
#endif
DEFINE_STEP(step_generic, , v8u32, STORE_NONE)
DEFINE_STEP(copy_step_generic, , v8u32, STORE_PLAIN)

typedef void (*step_fn)(uint32_t *, uint8_t *, const uint8_t *, size_t);
static step_fn hash_step = step_generic;
static step_fn copy_step_stripes = copy_step_generic;
static step_fn copy_stream_stripes = NULL;

/* Copying with streaming stores needs the destination aligned to this many bytes. */
static uintptr_t stream_align = 32;

/* Hashes whole stripes (the destination pointer of a hash-only step is never written). */
static void step_stripes(uint32_t *lanes, const uint8_t *p, size_t stripes) {
  hash_step(lanes, (uint8_t *)p, p, stripes);
}

static uint32_t fmix(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  return h ^ (h >> 16);
}

static void init_lanes(uint32_t *lanes) {
  for (uint32_t j = 0; j < LANES; j++) lanes[j] = ((j + 1) * 0x9e3779b1u) ^ 0x5bd1e995u;
}

/* Steps over `length` bytes; only the last call for a block may pass a length that is not whole stripes. */
static void step_bytes(uint32_t *lanes, const uint8_t *p, size_t length) {
  size_t whole = length / STRIPE;
  step_stripes(lanes, p, whole);
  size_t rest = length - whole * STRIPE;
  if (rest > 0) {
    uint8_t tail[STRIPE] = {0};
    memcpy(tail, p + whole * STRIPE, rest);
    step_stripes(lanes, tail, 1);
  }
}

static double fold_lanes(const uint32_t *lanes, size_t length) {
  uint32_t lo = (uint32_t)length;
  uint32_t hi = (uint32_t)((uint64_t)length >> 32);
  for (uint32_t j = 0; j < LANES; j++) {
    uint32_t v = lanes[j];
    lo ^= fmix(v ^ ((j + 1) * 0x27d4eb2fu));
    hi = (hi ^ fmix(v + j)) * 0x165667b1u + 1;
  }
  return (double)(fmix(hi) & 0x1fffffu) * 4294967296.0 + (double)lo;
}

double kvhash_block(const uint8_t *p, size_t length) {
  uint32_t lanes[LANES];
  init_lanes(lanes);
  step_bytes(lanes, p, length);
  return fold_lanes(lanes, length);
}

/*
 * Copies a block and returns the checksum of the bytes copied, in one pass: each word is
 * hashed as it is stored, so the copy is exactly what was hashed (a block that changes at
 * the source during the copy fails its check), at the speed of the copy.
 */
double kvhash_copy_block(uint8_t *dst, const uint8_t *src, size_t length) {
  uint32_t lanes[LANES];
  init_lanes(lanes);
  size_t whole = length / STRIPE;
  if (copy_stream_stripes != NULL && ((uintptr_t)dst & (stream_align - 1)) == 0) {
    copy_stream_stripes(lanes, dst, src, whole);
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    _mm_sfence();
#endif
  } else {
    copy_step_stripes(lanes, dst, src, whole);
  }
  size_t rest = length - whole * STRIPE;
  if (rest > 0) {
    memcpy(dst + whole * STRIPE, src + whole * STRIPE, rest);
    step_bytes(lanes, dst + whole * STRIPE, rest);
  }
  return fold_lanes(lanes, length);
}

/* The bytes of a Uint8Array argument (any backing store, shared or not). */
bool uint8_arg(napi_env env, napi_value v, const uint8_t **data, size_t *length) {
  bool is_ta = false;
  napi_typedarray_type type;
  void *ptr = NULL;
  if (napi_is_typedarray(env, v, &is_ta) != napi_ok || !is_ta ||
      napi_get_typedarray_info(env, v, &type, length, &ptr, NULL, NULL) != napi_ok ||
      type != napi_uint8_array) {
    return false;
  }
  *data = (const uint8_t *)ptr;
  return true;
}

napi_value kv_hash(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  const uint8_t *data = NULL;
  size_t length = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 1 ||
      !uint8_arg(env, argv[0], &data, &length)) {
    napi_throw_type_error(env, NULL, "hash(bytes) takes a Uint8Array");
    return NULL;
  }
  napi_value out;
  napi_create_double(env, kvhash_block(data, length), &out);
  return out;
}

/*
 * Reads the (blockBytes, count, out: Float64Array) arguments at argv[0..2] of `name` and checks
 * that `count` blocks fit in `bytes` bytes and in `out`; throws and returns false otherwise.
 */
static bool block_args(napi_env env, const char *name, napi_value *argv, size_t bytes, int64_t *block_bytes,
                       int64_t *count, double **out) {
  napi_typedarray_type out_type;
  size_t out_length = 0;
  void *out_ptr = NULL;
  char msg[160];
  if (napi_get_value_int64(env, argv[0], block_bytes) != napi_ok ||
      napi_get_value_int64(env, argv[1], count) != napi_ok ||
      napi_get_typedarray_info(env, argv[2], &out_type, &out_length, &out_ptr, NULL, NULL) != napi_ok ||
      out_type != napi_float64_array) {
    snprintf(msg, sizeof msg, "%s: blockBytes and count must be integers and out a Float64Array", name);
    napi_throw_type_error(env, NULL, msg);
    return false;
  }
  if (*block_bytes <= 0 || *count < 0 || (uint64_t)*count > out_length ||
      (uint64_t)*block_bytes * (uint64_t)*count > bytes) {
    snprintf(msg, sizeof msg, "%s: the blocks do not fit in the bytes or in out", name);
    napi_throw_range_error(env, NULL, msg);
    return false;
  }
  *out = (double *)out_ptr;
  return true;
}

napi_value kv_hash_blocks(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  const uint8_t *data = NULL;
  size_t length = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 4 ||
      !uint8_arg(env, argv[0], &data, &length)) {
    napi_throw_type_error(env, NULL, "hashBlocks(bytes, blockBytes, count, out) takes a Uint8Array first");
    return NULL;
  }
  int64_t block_bytes = 0, count = 0;
  double *out = NULL;
  if (!block_args(env, "hashBlocks", argv + 1, length, &block_bytes, &count, &out)) return NULL;
  for (int64_t i = 0; i < count; i++) out[i] = kvhash_block(data + i * block_bytes, (size_t)block_bytes);
  return NULL;
}

napi_value kv_copy_hash(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  const uint8_t *dst = NULL, *src = NULL;
  size_t dst_length = 0, src_length = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 5 ||
      !uint8_arg(env, argv[0], &dst, &dst_length) || !uint8_arg(env, argv[1], &src, &src_length)) {
    napi_throw_type_error(env, NULL, "copyHash(dst, src, blockBytes, count, out) takes two Uint8Arrays first");
    return NULL;
  }
  int64_t block_bytes = 0, count = 0;
  double *out = NULL;
  size_t fit = dst_length < src_length ? dst_length : src_length;
  if (!block_args(env, "copyHash", argv + 2, fit, &block_bytes, &count, &out)) return NULL;
  for (int64_t i = 0; i < count; i++) {
    size_t at = (size_t)(i * block_bytes);
    out[i] = kvhash_copy_block((uint8_t *)dst + at, src + at, (size_t)block_bytes);
  }
  return NULL;
}

void kvhash_init(void) {
#ifdef HAVE_AVX2_STEP
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) {
    hash_step = step_avx2;
    copy_step_stripes = copy_step_avx2;
    copy_stream_stripes = copy_stream_avx2;
  }
#endif
#ifdef HAVE_AVX512_STEP
  if (__builtin_cpu_supports("avx512f") && getenv("KVCONNECT_DISABLE_AVX512") == NULL) {
    hash_step = step_avx512;
    copy_stream_stripes = copy_stream_avx512;
    stream_align = 64;
  }
#endif
}
