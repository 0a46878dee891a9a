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
 *   mapShared(pid, fd, size, ino, dev) -> ArrayBuffer
 *                    maps read-only the KV memory (a memfd, kvmem.cc) that process `pid` holds
 *                    open as `fd`, through /proc/<pid>/fd/<fd>, after checking that the file
 *                    opened is that memfd (inode and device), is sealed against shrinking
 *                    and holds `size` bytes.
 *   release(buffer)  detaches the ArrayBuffer (every view becomes empty); the mapping is
 *                    unmapped by the finalizer once the engine drops its backing store.
 *   copyBytes(dst, src)  libc memcpy of src into dst (the benchmark's baseline).
 *   allocShared(size), sharedInfo(view)   (kvmem.cc) KV memory a peer can map.
 *   copyHash(dst, src, blockBytes, count, out)   (kvhash.c) copies blocks, checksums the copies.
 *   copyHashRuns(dsts, srcs, blockBytes, out, threads)  (kvhash.c) the same for several runs, on threads.
 *   hash(bytes) -> number       (kvhash.c)
 *                    the block checksum of src/transfer/checksum-reference.ts, read in place
 *                    (also from a SharedArrayBuffer, which WebAssembly cannot address).
 *   hashBlocks(bytes, blockBytes, count, out)   (kvhash.c)
 *                    writes the checksums of `count` consecutive blocks into the Float64Array
 *                    `out`, in one call.
 *   matmulF32(memory, m, n4, k, a, lda, b, ldb, c, ldc[, threads])   (kvmatmul.c, only with AVX2)
 *   matmulWeight(memory, m, n, k, a, lda, w, c, ldc, format, threads)
 *                    the engine's matmuls (float32, or float16/bfloat16 weights), on a pool
 *                    of threads, bit-identical to its WebAssembly kernel.
 *   attentionPrefill, attentionDecode, swiglu, rmsnorm, rope, gatherKV   (kvops.c, only with AVX2)
 *                    the engine's other kernels on the same pool, bit-identical to its
 *                    WebAssembly and JavaScript path.
 * The addon is named after its first job; it holds every native piece of kvconnect.
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

#include "kvhash.h"
#include "kvmatmul.h"
#include "kvops.h"
#include "kvmem.h"

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

/* Hands `size` mapped bytes to JS as an external ArrayBuffer whose finalizer unmaps them. */
static napi_value wrap_mapping(napi_env env, void *addr, size_t size) {
  mapping_t *m = (mapping_t *)malloc(sizeof *m);
  if (m == NULL) {
    munmap(addr, size);
    return throw_errno(env, "malloc", ENOMEM);
  }
  m->addr = addr;
  m->size = size;
  napi_value buffer;
  if (napi_create_external_arraybuffer(env, addr, size, finalize_mapping, m, &buffer) != napi_ok) {
    munmap(addr, size);
    free(m);
    napi_throw_error(env, NULL, "kvshm: cannot create the ArrayBuffer");
    return NULL;
  }
  int64_t adjusted;
  napi_adjust_external_memory(env, (int64_t)size, &adjusted);
  return buffer;
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

  return wrap_mapping(env, addr, (size_t)size);
}

static napi_value kv_map_shared(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  int64_t v[5] = {0};
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 5) {
    napi_throw_type_error(env, NULL, "mapShared(pid, fd, size, ino, dev) takes five integers");
    return NULL;
  }
  for (int i = 0; i < 5; i++) {
    if (napi_get_value_int64(env, argv[i], &v[i]) != napi_ok || v[i] < 0) {
      napi_throw_type_error(env, NULL, "mapShared(pid, fd, size, ino, dev) takes five non-negative integers");
      return NULL;
    }
  }
  if (v[2] <= 0 || v[2] > ((int64_t)1 << 40)) {
    napi_throw_range_error(env, NULL, "size must be a positive byte count");
    return NULL;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/%lld/fd/%lld", (long long)v[0], (long long)v[1]);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return throw_errno(env, "open", errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return throw_errno(env, "fstat", err);
  }
  /* Only a memfd sealed against shrinking: nothing else is KV memory, and it cannot be truncated under the mapping (SIGBUS). */
  int seals = fcntl(fd, F_GET_SEALS);
  if ((int64_t)st.st_ino != v[3] || (int64_t)st.st_dev != v[4] || st.st_size < v[2] || seals < 0 ||
      (seals & F_SEAL_SHRINK) == 0) {
    close(fd);
    napi_throw_error(env, "KVSHM_NOT_THE_PEER_MEMORY", "kvshm mapShared: the file is not the peer's sealed KV memory");
    return NULL;
  }
  /* MAP_POPULATE: the owner's pages are mapped now, not faulted in one by one by the first
   * direct READs of each block. */
  void *addr = mmap(NULL, (size_t)v[2], PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  int map_err = errno;
  close(fd);
  if (addr == MAP_FAILED) return throw_errno(env, "mmap", map_err);
  return wrap_mapping(env, addr, (size_t)v[2]);
}

static napi_value kv_copy_bytes(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  const uint8_t *dst = NULL, *src = NULL;
  size_t dst_length = 0, src_length = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 2 ||
      !uint8_arg(env, argv[0], &dst, &dst_length) || !uint8_arg(env, argv[1], &src, &src_length) ||
      src_length > dst_length) {
    napi_throw_type_error(env, NULL, "copyBytes(dst, src) takes two Uint8Arrays, dst at least as long");
    return NULL;
  }
  memcpy((uint8_t *)dst, src, src_length);
  return NULL;
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

static napi_value init(napi_env env, napi_value exports) {
  kvhash_init();
  bool matmul = kvmatmul_init();
  napi_property_descriptor props[] = {
      {"map", NULL, kv_map, NULL, NULL, NULL, napi_enumerable, NULL},
      {"release", NULL, kv_release, NULL, NULL, NULL, napi_enumerable, NULL},
      {"mapShared", NULL, kv_map_shared, NULL, NULL, NULL, napi_enumerable, NULL},
      {"copyBytes", NULL, kv_copy_bytes, NULL, NULL, NULL, napi_enumerable, NULL},
      {"allocShared", NULL, kv_alloc_shared, NULL, NULL, NULL, napi_enumerable, NULL},
      {"sharedInfo", NULL, kv_shared_info, NULL, NULL, NULL, napi_enumerable, NULL},
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
      /* The lane words are little-endian; elsewhere JS keeps its own hash. */
      {"hash", NULL, kv_hash, NULL, NULL, NULL, napi_enumerable, NULL},
      {"hashBlocks", NULL, kv_hash_blocks, NULL, NULL, NULL, napi_enumerable, NULL},
      {"copyHash", NULL, kv_copy_hash, NULL, NULL, NULL, napi_enumerable, NULL},
      {"copyHashRuns", NULL, kv_copy_hash_runs, NULL, NULL, NULL, napi_enumerable, NULL},
#endif
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  if (matmul) {
    /* Exported only where the CPU has AVX2 and F16C: elsewhere the engine keeps its WebAssembly matmul. */
    napi_property_descriptor mm[] = {
        {"matmulF32", NULL, kv_matmul_f32, NULL, NULL, NULL, napi_enumerable, NULL},
        {"matmulWeight", NULL, kv_matmul_weight, NULL, NULL, NULL, napi_enumerable, NULL},
        {"matmulIsa", NULL, kv_matmul_isa, NULL, NULL, NULL, napi_enumerable, NULL},
        {"matmulPoolSize", NULL, kv_matmul_pool_size, NULL, NULL, NULL, napi_enumerable, NULL},
        {"attentionPrefill", NULL, kv_attention_prefill, NULL, NULL, NULL, napi_enumerable, NULL},
        {"attentionDecode", NULL, kv_attention_decode, NULL, NULL, NULL, napi_enumerable, NULL},
        {"swiglu", NULL, kv_swiglu, NULL, NULL, NULL, napi_enumerable, NULL},
        {"rmsnorm", NULL, kv_rmsnorm, NULL, NULL, NULL, napi_enumerable, NULL},
        {"rope", NULL, kv_rope, NULL, NULL, NULL, napi_enumerable, NULL},
        {"gatherKV", NULL, kv_gather_kv, NULL, NULL, NULL, napi_enumerable, NULL},
    };
    napi_define_properties(env, exports, sizeof mm / sizeof mm[0], mm);
  }
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
