/*
 * kvshm: maps a file of a shared-memory directory (/dev/shm) into this process and hands
 * it to JavaScript as an external ArrayBuffer, so two processes on one host can move KV
 * blocks with one memcpy per side. The JS side (src/transfer/native-shm.ts) falls back to
 * positional file I/O when this addon is missing.
 *
 *   map(path, size, create) -> ArrayBuffer
 *     create=true : creates the file (O_EXCL, mode 0600) and reserves `size` bytes with
 *                   posix_fallocate, so a full tmpfs fails here (ENOSPC) instead of
 *                   raising SIGBUS on a later page fault; mapped read-write.
 *     create=false: opens an existing file, checks it holds at least `size` bytes, maps it
 *                   read-only.
 *   release(buffer)  detaches the ArrayBuffer (every view becomes empty); the mapping is
 *                    unmapped by the finalizer once the engine drops its backing store.
 *   hash(bytes) -> number
 *                    the block checksum of src/transfer/checksum-reference.ts, read in place
 *                    (also from a SharedArrayBuffer, which WebAssembly cannot address).
 *   hashBlocks(bytes, blockBytes, count, out)
 *                    writes the checksums of `count` consecutive blocks into the Float64Array
 *                    `out`, in one call.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
  void *addr;
  size_t size;
} mapping_t;

static napi_value throw_errno(napi_env env, const char *what, int err) {
  char msg[256];
  snprintf(msg, sizeof msg, "kvshm %s: %s", what, strerror(err));
  napi_throw_error(env, "KVSHM_OS_ERROR", msg);
  return NULL;
}

static void finalize_mapping(napi_env env, void *data, void *hint) {
  (void)data;
  mapping_t *m = (mapping_t *)hint;
  int64_t adjusted;
  munmap(m->addr, m->size);
  napi_adjust_external_memory(env, -(int64_t)m->size, &adjusted);
  free(m);
}

static napi_value kv_map(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 3) {
    napi_throw_type_error(env, NULL, "map(path, size, create) takes three arguments");
    return NULL;
  }
  char path[4096];
  size_t path_len = 0;
  if (napi_get_value_string_utf8(env, argv[0], path, sizeof path, &path_len) != napi_ok ||
      path_len == 0 || path_len >= sizeof path - 1) {
    napi_throw_type_error(env, NULL, "path must be a non-empty string");
    return NULL;
  }
  int64_t size = 0;
  if (napi_get_value_int64(env, argv[1], &size) != napi_ok || size <= 0 ||
      size > ((int64_t)1 << 40)) {
    napi_throw_range_error(env, NULL, "size must be a positive byte count");
    return NULL;
  }
  bool create = false;
  if (napi_get_value_bool(env, argv[2], &create) != napi_ok) {
    napi_throw_type_error(env, NULL, "create must be a boolean");
    return NULL;
  }

  int fd = create ? open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)
                  : open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return throw_errno(env, "open", errno);
  if (create) {
    int err = posix_fallocate(fd, 0, (off_t)size);
    if (err != 0) {
      close(fd);
      unlink(path);
      return throw_errno(env, "posix_fallocate", err);
    }
  } else {
    struct stat st;
    if (fstat(fd, &st) != 0) {
      int err = errno;
      close(fd);
      return throw_errno(env, "fstat", err);
    }
    if (st.st_size < size) {
      close(fd);
      napi_throw_range_error(env, "KVSHM_SHORT_FILE", "kvshm map: the file is smaller than the ring");
      return NULL;
    }
  }
  void *addr = mmap(NULL, (size_t)size, create ? PROT_READ | PROT_WRITE : PROT_READ,
                    MAP_SHARED, fd, 0);
  int map_err = errno;
  close(fd);
  if (addr == MAP_FAILED) {
    if (create) unlink(path);
    return throw_errno(env, "mmap", map_err);
  }

  mapping_t *m = (mapping_t *)malloc(sizeof *m);
  if (m == NULL) {
    munmap(addr, (size_t)size);
    return throw_errno(env, "malloc", ENOMEM);
  }
  m->addr = addr;
  m->size = (size_t)size;
  napi_value buffer;
  if (napi_create_external_arraybuffer(env, addr, (size_t)size, finalize_mapping, m, &buffer) != napi_ok) {
    munmap(addr, (size_t)size);
    free(m);
    napi_throw_error(env, NULL, "kvshm map: cannot create the ArrayBuffer");
    return NULL;
  }
  int64_t adjusted;
  napi_adjust_external_memory(env, size, &adjusted);
  return buffer;
}

static napi_value kv_release(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool is_ab = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 1 ||
      napi_is_arraybuffer(env, argv[0], &is_ab) != napi_ok || !is_ab) {
    napi_throw_type_error(env, NULL, "release(buffer) takes the ArrayBuffer returned by map");
    return NULL;
  }
  bool detached = false;
  napi_is_detached_arraybuffer(env, argv[0], &detached);
  if (!detached && napi_detach_arraybuffer(env, argv[0]) != napi_ok) {
    napi_throw_error(env, NULL, "kvshm release: cannot detach the ArrayBuffer");
    return NULL;
  }
  return NULL;
}

/* ---- block checksum: must stay bit-identical to src/transfer/checksum-reference.ts ---- */

#define LANES 32
#define STRIPE (LANES * 4)
#define LANE_PRIME 0x85ebca77u

typedef uint32_t v8u32 __attribute__((vector_size(32)));

/* Word i of each 128-byte stripe goes to lane i: lane = imul(lane ^ word, P); lane ^= lane >> 15. */
#define DEFINE_STEP(name, attr)                                                   \
  attr static void name(uint32_t *lanes, const uint8_t *p, size_t stripes) {      \
    v8u32 a, b, c, d, w;                                                          \
    memcpy(&a, lanes, 32);                                                        \
    memcpy(&b, lanes + 8, 32);                                                    \
    memcpy(&c, lanes + 16, 32);                                                   \
    memcpy(&d, lanes + 24, 32);                                                   \
    for (size_t s = 0; s < stripes; s++, p += STRIPE) {                           \
      memcpy(&w, p, 32);                                                          \
      a = (a ^ w) * LANE_PRIME;                                                   \
      a ^= a >> 15;                                                               \
      memcpy(&w, p + 32, 32);                                                     \
      b = (b ^ w) * LANE_PRIME;                                                   \
      b ^= b >> 15;                                                               \
      memcpy(&w, p + 64, 32);                                                     \
      c = (c ^ w) * LANE_PRIME;                                                   \
      c ^= c >> 15;                                                               \
      memcpy(&w, p + 96, 32);                                                     \
      d = (d ^ w) * LANE_PRIME;                                                   \
      d ^= d >> 15;                                                               \
    }                                                                             \
    memcpy(lanes, &a, 32);                                                        \
    memcpy(lanes + 8, &b, 32);                                                    \
    memcpy(lanes + 16, &c, 32);                                                   \
    memcpy(lanes + 24, &d, 32);                                                   \
  }

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
DEFINE_STEP(step_avx2, __attribute__((target("avx2"))))
#define HAVE_AVX2_STEP 1
#endif
DEFINE_STEP(step_generic, )

typedef void (*step_fn)(uint32_t *, const uint8_t *, size_t);
static step_fn step_stripes = step_generic;

static uint32_t fmix(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  return h ^ (h >> 16);
}

static double block_hash(const uint8_t *p, size_t length) {
  uint32_t lanes[LANES];
  for (uint32_t j = 0; j < LANES; j++) lanes[j] = ((j + 1) * 0x9e3779b1u) ^ 0x5bd1e995u;
  size_t whole = length / STRIPE;
  step_stripes(lanes, p, whole);
  size_t rest = length - whole * STRIPE;
  if (rest > 0) {
    uint8_t tail[STRIPE] = {0};
    memcpy(tail, p + whole * STRIPE, rest);
    step_stripes(lanes, tail, 1);
  }
  uint32_t lo = (uint32_t)length;
  uint32_t hi = (uint32_t)((uint64_t)length >> 32);
  for (uint32_t j = 0; j < LANES; j++) {
    uint32_t v = lanes[j];
    lo ^= fmix(v ^ ((j + 1) * 0x27d4eb2fu));
    hi = (hi ^ fmix(v + j)) * 0x165667b1u + 1;
  }
  return (double)(fmix(hi) & 0x1fffffu) * 4294967296.0 + (double)lo;
}

/* The bytes of a Uint8Array argument (any backing store, shared or not). */
static bool uint8_arg(napi_env env, napi_value v, const uint8_t **data, size_t *length) {
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

static napi_value kv_hash(napi_env env, napi_callback_info info) {
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
  napi_create_double(env, block_hash(data, length), &out);
  return out;
}

static napi_value kv_hash_blocks(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  const uint8_t *data = NULL;
  size_t length = 0;
  int64_t block_bytes = 0, count = 0;
  napi_typedarray_type out_type;
  size_t out_length = 0;
  void *out_ptr = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 4 ||
      !uint8_arg(env, argv[0], &data, &length) ||
      napi_get_value_int64(env, argv[1], &block_bytes) != napi_ok ||
      napi_get_value_int64(env, argv[2], &count) != napi_ok ||
      napi_get_typedarray_info(env, argv[3], &out_type, &out_length, &out_ptr, NULL, NULL) != napi_ok ||
      out_type != napi_float64_array) {
    napi_throw_type_error(env, NULL, "hashBlocks(bytes, blockBytes, count, out) takes a Uint8Array, two integers and a Float64Array");
    return NULL;
  }
  if (block_bytes <= 0 || count < 0 || (uint64_t)count > out_length ||
      (uint64_t)block_bytes * (uint64_t)count > length) {
    napi_throw_range_error(env, NULL, "hashBlocks: the blocks do not fit in bytes or out");
    return NULL;
  }
  double *out = (double *)out_ptr;
  for (int64_t i = 0; i < count; i++) out[i] = block_hash(data + i * block_bytes, (size_t)block_bytes);
  return NULL;
}

static napi_value init(napi_env env, napi_value exports) {
#ifdef HAVE_AVX2_STEP
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) step_stripes = step_avx2;
#endif
  napi_property_descriptor props[] = {
      {"map", NULL, kv_map, NULL, NULL, NULL, napi_enumerable, NULL},
      {"release", NULL, kv_release, NULL, NULL, NULL, napi_enumerable, NULL},
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
      /* The lane words are little-endian; elsewhere JS keeps its own hash. */
      {"hash", NULL, kv_hash, NULL, NULL, NULL, napi_enumerable, NULL},
      {"hashBlocks", NULL, kv_hash_blocks, NULL, NULL, NULL, napi_enumerable, NULL},
#endif
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
