/*
 * kvhash: the per-block checksum of src/transfer/checksum-reference.ts, bit for bit (AVX2
 * through GCC vector types when the CPU has it), reading the bytes in place.
 */
#include "kvhash.h"

#include <pthread.h>
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
 * its multiply chains, so the hardware prefetcher alone let memory reads lag well behind a
 * read-only pass on memory that is not in L2; prefetching 2 KiB ahead brings it close (1–4 KiB
 * measured the same). Prefetches never fault, so reading past the end is safe, and they
 * cannot change the result. They are non-temporal (locality 0, prefetchnta): each source line
 * is read once, and a copy of 128 MiB that pulled it into every cache level flushed the code
 * and data of the JavaScript that runs right after (a pulled WRITE's answer, the sender's
 * end), which measured slower (`npm run bench -- transfer-direct --write`, alternated).
 */
#define PREFETCH_BYTES 2048

/*
 * Word i of each 128-byte stripe goes to lane i: lane = imul(lane ^ word, P); lane ^= lane >> 15.
 * The lanes are held in STRIPE / sizeof(VT) vectors of type VT (4 × 256-bit, 2 × 512-bit, or
 * GCC's generic lowering); the result does not depend on VT. STORE(dst, w) may also store each
 * word vector to `dst` as it is hashed: a copy whose bytes are exactly the hashed ones, in one
 * pass over memory (STORE_NONE: hash only, `dst` unused).
 *
 * A step hashes B blocks in lockstep (block j at p + j * stride, its lanes at lanes + j * LANES):
 * stripe s of every block, then stripe s + 1. Each block's chains are independent, so two
 * blocks give the core twice the work to overlap with the memory reads: copy+hash of 64 KiB
 * blocks runs at a libc memcpy's speed, which one block at a time does not reach (the
 * `copy_hash` contestant of docs/BENCHMARKS.md, "Transfer"); four blocks were no faster than
 * two, eight slower.
 */
#define DEFINE_STEP(name, attr, B, VT, STORE)                                                     \
  attr static void name(uint32_t *lanes, uint8_t *dst, const uint8_t *p, size_t stride,            \
                        size_t stripes) {                                                          \
    enum { W = sizeof(VT), N = STRIPE / sizeof(VT) };                                              \
    VT acc[B][N], w;                                                                               \
    (void)stride;                                                                                  \
    memcpy(acc, lanes, sizeof acc);                                                                \
    for (size_t s = 0; s < stripes; s++, p += STRIPE, dst += STRIPE) {                            \
      _Pragma("GCC unroll 2") for (int j = 0; j < B; j++) {                                        \
        const uint8_t *pj = p + j * stride;                                                        \
        __builtin_prefetch(pj + PREFETCH_BYTES, 0, 0);                                             \
        __builtin_prefetch(pj + PREFETCH_BYTES + 64, 0, 0);                                        \
        _Pragma("GCC unroll 4") for (int k = 0; k < N; k++) {                                      \
          memcpy(&w, pj + k * W, W);                                                               \
          STORE(dst + j * stride + k * W, w);                                                      \
          acc[j][k] = (acc[j][k] ^ w) * LANE_PRIME;                                                \
          acc[j][k] ^= acc[j][k] >> 15;                                                            \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
    memcpy(lanes, acc, sizeof acc);                                                                \
  }

/* A step for one block (NAME_1) and for two in lockstep (NAME_2). */
#define DEFINE_STEPS(name, attr, VT, STORE)   \
  DEFINE_STEP(name##_1, attr, 1, VT, STORE) \
  DEFINE_STEP(name##_2, attr, 2, VT, STORE)

/* The steps of one vector type: hash only, copy, copy with streaming stores; one and two blocks. */
#define STORE_NONE(p, w) ((void)(p))
#define STORE_PLAIN(p, w) memcpy((p), &(w), sizeof(w))

typedef void (*step_fn)(uint32_t *lanes, uint8_t *dst, const uint8_t *p, size_t stride, size_t stripes);
/* [0]: one block, [1]: two blocks in lockstep. */
struct steps {
  step_fn hash[2], copy[2], stream[2];
  /* Streaming stores need the destination aligned to this many bytes. */
  uintptr_t align;
};

typedef uint32_t v8u32 __attribute__((vector_size(32)));

DEFINE_STEPS(hash_generic, , v8u32, STORE_NONE)
DEFINE_STEPS(copy_generic, , v8u32, STORE_PLAIN)
static const struct steps generic_steps = {
    {hash_generic_1, hash_generic_2}, {copy_generic_1, copy_generic_2}, {NULL, NULL}, 1};

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
/* Streaming stores: the destination is not read for ownership first (as a memcpy of a large
 * block does), which would add a third stream over memory. Need a dst aligned to the vector. */
#define STORE_STREAM256(p, w) _mm256_stream_si256((__m256i *)(void *)(p), (__m256i)(w))
#define STORE_STREAM512(p, w) _mm512_stream_si512((void *)(p), (__m512i)(w))
#define AVX2 __attribute__((target("avx2")))
#define AVX512 __attribute__((target("avx512f")))
typedef uint32_t v16u32 __attribute__((vector_size(64)));
DEFINE_STEPS(hash_avx2, AVX2, v8u32, STORE_NONE)
DEFINE_STEPS(copy_avx2, AVX2, v8u32, STORE_PLAIN)
DEFINE_STEPS(stream_avx2, AVX2, v8u32, STORE_STREAM256)
static const struct steps avx2_steps = {
    {hash_avx2_1, hash_avx2_2}, {copy_avx2_1, copy_avx2_2}, {stream_avx2_1, stream_avx2_2}, 32};
/* 512-bit vectors with full-cache-line streaming stores. */
DEFINE_STEPS(hash_avx512, AVX512, v16u32, STORE_NONE)
DEFINE_STEPS(stream_avx512, AVX512, v16u32, STORE_STREAM512)
/* An unaligned destination takes AVX2's plain copy (the result is the same for every width). */
static const struct steps avx512_steps = {
    {hash_avx512_1, hash_avx512_2}, {copy_avx2_1, copy_avx2_2}, {stream_avx512_1, stream_avx512_2}, 64};
#define HAVE_X86_STEPS 1
#define STORE_FENCE() _mm_sfence()
#else
#define STORE_FENCE() ((void)0)
#endif

static const struct steps *steps = &generic_steps;

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

/* Steps over the last `rest` (< STRIPE) bytes of a block, zero-padded to a stripe. */
static void step_tail(uint32_t *lanes, const uint8_t *p, size_t rest) {
  if (rest == 0) return;
  uint8_t tail[STRIPE] = {0};
  memcpy(tail, p, rest);
  steps->hash[0](lanes, tail, tail, 0, 1);
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

/*
 * out[i] = the checksum of block i of `count` blocks of `length` bytes at `src`. With a `dst`,
 * also copies each block there while hashing it (one pass: the copy is exactly what was hashed,
 * so a block that changes at the source during the copy fails its check). Blocks go two at a
 * time (see DEFINE_STEP), an odd last one alone.
 */
static void hash_blocks(double *out, uint8_t *dst, const uint8_t *src, size_t length, size_t count) {
  size_t whole = length / STRIPE, rest = length - whole * STRIPE;
  const step_fn *fn = steps->hash;
  bool streaming = false;
  if (dst != NULL) {
    uintptr_t a = steps->align - 1;
    streaming = steps->stream[0] != NULL && ((uintptr_t)dst & a) == 0 && (count == 1 || (length & a) == 0);
    fn = streaming ? steps->stream : steps->copy;
  }
  for (size_t i = 0; i < count;) {
    size_t n = count - i >= 2 ? 2 : 1;
    size_t at = i * length;
    uint32_t lanes[2 * LANES];
    for (size_t j = 0; j < n; j++) init_lanes(lanes + j * LANES);
    fn[n - 1](lanes, dst != NULL ? dst + at : (uint8_t *)src + at, src + at, length, whole);
    for (size_t j = 0; j < n; j++) {
      size_t tail = at + j * length + whole * STRIPE;
      if (dst != NULL && rest > 0) memcpy(dst + tail, src + tail, rest);
      step_tail(lanes + j * LANES, (dst != NULL ? dst : src) + tail, rest);
      out[i + j] = fold_lanes(lanes + j * LANES, length);
    }
    i += n;
  }
  if (streaming) STORE_FENCE();
}

double kvhash_block(const uint8_t *p, size_t length) {
  double out;
  hash_blocks(&out, NULL, p, length, 1);
  return out;
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
  hash_blocks(out, NULL, data, (size_t)block_bytes, (size_t)count);
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
  hash_blocks(out, (uint8_t *)dst, src, (size_t)block_bytes, (size_t)count);
  return NULL;
}

/*
 * copyHashRuns: the copy-and-hash of several runs (a direct READ's descriptors) in one call,
 * shared out between `threads` threads (this one and threads - 1 helpers). One core's copy is
 * far from the memory's bandwidth on many machines (a libc memcpy on two threads can move
 * twice what one does), so a large same-host transfer on two threads takes about half the
 * time. The runs are cut into pieces of about 1 MiB that the threads take in turn from a
 * shared counter: a helper that starts late (its CPU busy or halted) takes fewer pieces, and
 * the call is never much slower than one thread. Every byte is copied once, by one thread,
 * and hashed as it is stored. Helpers get raw pointers only (no N-API); the call returns after
 * joining them, so the views stay valid throughout.
 */
#define MAX_COPY_THREADS 16
#define COPY_PIECE_BYTES (1u << 20)

struct copy_piece {
  uint8_t *dst;
  const uint8_t *src;
  size_t block_bytes, count;
  double *out;
};

struct copy_work {
  const struct copy_piece *pieces;
  size_t npieces;
  size_t next; /* the next piece to take (atomic) */
};

static void *copy_work_run(void *arg) {
  struct copy_work *w = arg;
  for (;;) {
    size_t i = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED);
    if (i >= w->npieces) return NULL;
    const struct copy_piece *p = &w->pieces[i];
    hash_blocks(p->out, p->dst, p->src, p->block_bytes, p->count);
  }
}

/*
 * copyHashRuns(dsts: Uint8Array[] | null, srcs: Uint8Array[], blockBytes: number[], out: Float64Array, threads)
 * With dsts null, hashes the runs in place (the same sharing out, nothing copied).
 */
napi_value kv_copy_hash_runs(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  uint32_t n = 0, nsrc = 0, nbb = 0;
  int32_t threads = 1;
  napi_typedarray_type out_type;
  size_t out_length = 0;
  void *out_ptr = NULL;
  napi_valuetype first_type = napi_undefined;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 5 ||
      napi_typeof(env, argv[0], &first_type) != napi_ok) {
    napi_throw_type_error(env, NULL, "copyHashRuns(dsts, srcs, blockBytes, out, threads) takes five arguments");
    return NULL;
  }
  bool hash_only = first_type == napi_null;
  /* Hashing in place: the sources stand in for the destinations while checking. */
  napi_value dsts = hash_only ? argv[1] : argv[0];
  if (napi_get_array_length(env, dsts, &n) != napi_ok || napi_get_array_length(env, argv[1], &nsrc) != napi_ok ||
      napi_get_array_length(env, argv[2], &nbb) != napi_ok || n != nsrc || n != nbb ||
      napi_get_typedarray_info(env, argv[3], &out_type, &out_length, &out_ptr, NULL, NULL) != napi_ok ||
      out_type != napi_float64_array || napi_get_value_int32(env, argv[4], &threads) != napi_ok) {
    napi_throw_type_error(env, NULL,
                          "copyHashRuns(dsts, srcs, blockBytes, out, threads) takes three arrays of the same "
                          "length (dsts may be null), a Float64Array and an integer");
    return NULL;
  }
  /* First pass: check every run and count its pieces. Second pass: the pieces, in order. */
  size_t npieces = 0, blocks = 0, k = 0;
  struct copy_piece *pieces = NULL;
  double *out = (double *)out_ptr;
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t i = 0; i < n; i++) {
      napi_value d, s, b;
      const uint8_t *dst = NULL, *src = NULL;
      size_t dlen = 0, slen = 0;
      int64_t bb = 0;
      if (napi_get_element(env, dsts, i, &d) != napi_ok || napi_get_element(env, argv[1], i, &s) != napi_ok ||
          napi_get_element(env, argv[2], i, &b) != napi_ok || !uint8_arg(env, d, &dst, &dlen) ||
          !uint8_arg(env, s, &src, &slen) || napi_get_value_int64(env, b, &bb) != napi_ok || bb <= 0 ||
          dlen != slen || dlen % (uint64_t)bb != 0) {
        free(pieces);
        napi_throw_range_error(env, NULL,
                               "copyHashRuns: each dst and src must be Uint8Arrays of the same length, a whole "
                               "number of blockBytes (> 0) blocks");
        return NULL;
      }
      size_t count = dlen / (size_t)bb;
      size_t per = COPY_PIECE_BYTES / (size_t)bb > 0 ? COPY_PIECE_BYTES / (size_t)bb : 1;
      if (pass == 0) {
        npieces += (count + per - 1) / per;
        blocks += count;
        continue;
      }
      for (size_t from = 0; from < count; from += per) {
        size_t m = count - from < per ? count - from : per;
        uint8_t *to = hash_only ? NULL : (uint8_t *)dst + from * (size_t)bb;
        pieces[k++] = (struct copy_piece){to, src + from * (size_t)bb, (size_t)bb, m, out};
        out += m;
      }
    }
    if (pass == 0) {
      if (blocks > out_length) {
        napi_throw_range_error(env, NULL, "copyHashRuns: out is shorter than the runs' blocks");
        return NULL;
      }
      pieces = calloc(npieces > 0 ? npieces : 1, sizeof *pieces);
      if (pieces == NULL) {
        napi_throw_error(env, NULL, "copyHashRuns: out of memory");
        return NULL;
      }
    }
  }
  if (threads < 1) threads = 1;
  if (threads > MAX_COPY_THREADS) threads = MAX_COPY_THREADS;
  if ((size_t)threads > npieces) threads = npieces > 0 ? (int32_t)npieces : 1;
  struct copy_work work = {pieces, npieces, 0};
  pthread_t helpers[MAX_COPY_THREADS];
  bool started[MAX_COPY_THREADS] = {false};
  for (int32_t t = 1; t < threads; t++) started[t] = pthread_create(&helpers[t], NULL, copy_work_run, &work) == 0;
  copy_work_run(&work);
  for (int32_t t = 1; t < threads; t++)
    if (started[t]) pthread_join(helpers[t], NULL);
  free(pieces);
  return NULL;
}

void kvhash_init(void) {
#ifdef HAVE_X86_STEPS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) steps = &avx2_steps;
  if (__builtin_cpu_supports("avx512f") && getenv("KVCONNECT_DISABLE_AVX512") == NULL) steps = &avx512_steps;
#endif
}
