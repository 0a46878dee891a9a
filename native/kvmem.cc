/*
 * kvmem: KV memory a same-host peer can map. allocShared(size) returns a SharedArrayBuffer
 * whose bytes live in a sealed memfd (so worker threads share it like any SharedArrayBuffer,
 * and another process can map the same pages read-only); sharedInfo(view) says which memfd
 * a view lies in. src/util/shared-memory.ts and src/transfer/kv-map.ts use them.
 *
 * C++ because N-API cannot make a SharedArrayBuffer over memory it did not allocate
 * (napi_create_external_arraybuffer makes a plain ArrayBuffer, which cannot be shared with
 * worker threads); v8::SharedArrayBuffer::New with a BackingStore can. The napi_value <->
 * v8::Local conversions below are the ones Node's own N-API implementation uses.
 *
 * The memfd is sealed against shrinking and growing (no peer can make a mapping fault with
 * SIGBUS) and, where the kernel has F_SEAL_FUTURE_WRITE (5.1+), against any new write
 * access: only this process's own mapping can change the bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <v8.h>

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>

#include "kvmem.h"

namespace {

/*
 * Every page of a new allocation is made resident and mapped writable, as a GPU's KV is
 * allocated up front: a forward pass or a transfer that lands in a block the first time then
 * takes no page fault (a fresh page costs a fault, its zeroing and, on a virtual machine, the
 * host's own fault: many times the copy of its bytes). It is done on a thread of its own, so
 * that allocating a large KV cache does not hold the engine's start: each page gets an atomic
 * OR of zero, a write access that cannot change a byte the engine writes meanwhile. A write
 * from user space, not MADV_POPULATE_WRITE or MAP_POPULATE: on some kernels and hypervisors
 * those leave shared memory that is still slow on its first write.
 */
struct Population {
  unsigned char *addr;
  size_t size;
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
};

void *populate_pages(void *arg) {
  auto *handle = static_cast<std::shared_ptr<Population> *>(arg);
  std::shared_ptr<Population> pop = *handle;
  delete handle;
  long page = sysconf(_SC_PAGESIZE);
  size_t step = page > 0 ? size_t(page) : 4096;
  for (size_t at = 0; at < pop->size && !pop->stop.load(std::memory_order_relaxed); at += step)
    __atomic_fetch_or(pop->addr + at, static_cast<unsigned char>(0), __ATOMIC_RELAXED);
  {
    std::lock_guard<std::mutex> lock(pop->mutex);
    pop->done = true;
  }
  pop->cv.notify_all();
  return nullptr;
}

/* Starts populating [addr, addr + size); null when no thread could be started (pages then fault in on use). */
std::shared_ptr<Population> populate_in_background(void *addr, size_t size) {
  auto pop = std::make_shared<Population>();
  pop->addr = static_cast<unsigned char *>(addr);
  pop->size = size;
  pthread_t thread;
  auto *handle = new std::shared_ptr<Population>(pop);
  if (pthread_create(&thread, nullptr, populate_pages, handle) != 0) {
    delete handle;
    return nullptr;
  }
  pthread_detach(thread);
  return pop;
}

/* Stops a population before its pages are unmapped. */
void stop_population(const std::shared_ptr<Population> &pop) {
  if (!pop) return;
  pop->stop.store(true, std::memory_order_relaxed);
  std::unique_lock<std::mutex> lock(pop->mutex);
  pop->cv.wait(lock, [&] { return pop->done; });
}

struct Memfd {
  size_t size;
  int fd;
  uint64_t ino;
  uint64_t dev;
  std::shared_ptr<Population> population;
};

/* Live memfd mappings by start address; worker threads share the process's table. */
std::mutex table_mutex;
std::map<uintptr_t, Memfd> table;

napi_value to_napi(v8::Local<v8::Value> local) { return reinterpret_cast<napi_value>(*local); }

void release_memfd(void *data, size_t length, void *) {
  Memfd m{};
  {
    std::lock_guard<std::mutex> lock(table_mutex);
    auto it = table.find(reinterpret_cast<uintptr_t>(data));
    if (it != table.end()) {
      m = it->second;
      table.erase(it);
    } else {
      m.fd = -1;
    }
  }
  stop_population(m.population);
  munmap(data, length);
  if (m.fd >= 0) close(m.fd);
}

napi_value throw_errno(napi_env env, const char *what, int err) {
  char msg[256];
  snprintf(msg, sizeof msg, "kvmem %s: %s", what, strerror(err));
  napi_throw_error(env, "KVMEM_OS_ERROR", msg);
  return nullptr;
}

}  // namespace

napi_value kv_alloc_shared(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int64_t size = 0;
  if (napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr) != napi_ok || argc != 1 ||
      napi_get_value_int64(env, argv[0], &size) != napi_ok || size <= 0 || size > (int64_t(1) << 40)) {
    napi_throw_range_error(env, nullptr, "allocShared(size) takes a positive byte count");
    return nullptr;
  }
  int fd = memfd_create("kvconnect-kv", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return throw_errno(env, "memfd_create", errno);
  if (ftruncate(fd, size) != 0) {
    int err = errno;
    close(fd);
    return throw_errno(env, "ftruncate", err);
  }
  void *addr = mmap(nullptr, size_t(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) {
    int err = errno;
    close(fd);
    return throw_errno(env, "mmap", err);
  }
  int seals = F_SEAL_SHRINK | F_SEAL_GROW;
#ifdef F_SEAL_FUTURE_WRITE
  seals |= F_SEAL_FUTURE_WRITE;
#endif
  if (fcntl(fd, F_ADD_SEALS, seals) != 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    int err = errno;
    munmap(addr, size_t(size));
    close(fd);
    return throw_errno(env, "fcntl(F_ADD_SEALS)", err);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    munmap(addr, size_t(size));
    close(fd);
    return throw_errno(env, "fstat", err);
  }
  {
    std::lock_guard<std::mutex> lock(table_mutex);
    table[reinterpret_cast<uintptr_t>(addr)] =
        Memfd{size_t(size), fd, uint64_t(st.st_ino), uint64_t(st.st_dev), populate_in_background(addr, size_t(size))};
  }
  v8::Isolate *isolate = v8::Isolate::GetCurrent();
  std::shared_ptr<v8::BackingStore> store =
      v8::SharedArrayBuffer::NewBackingStore(addr, size_t(size), release_memfd, nullptr);
  return to_napi(v8::SharedArrayBuffer::New(isolate, std::move(store)));
}

napi_value kv_shared_info(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_typedarray_type type;
  size_t length = 0;
  void *data = nullptr;
  if (napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr) != napi_ok || argc != 1 ||
      napi_get_typedarray_info(env, argv[0], &type, &length, &data, nullptr, nullptr) != napi_ok ||
      type != napi_uint8_array) {
    napi_throw_type_error(env, nullptr, "sharedInfo(view) takes a Uint8Array");
    return nullptr;
  }
  uintptr_t p = reinterpret_cast<uintptr_t>(data);
  Memfd m{};
  uintptr_t start = 0;
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(table_mutex);
    auto it = table.upper_bound(p);
    if (it != table.begin()) {
      --it;
      if (p >= it->first && p + length <= it->first + it->second.size) {
        start = it->first;
        m = it->second;
        found = true;
      }
    }
  }
  napi_value out;
  if (!found) {
    napi_get_null(env, &out);
    return out;
  }
  /* [fd, offset of the view in the memfd, memfd size, inode, device]; all below 2^53 in practice. */
  double fields[5] = {double(m.fd), double(p - start), double(m.size), double(m.ino), double(m.dev)};
  napi_create_array_with_length(env, 5, &out);
  for (uint32_t i = 0; i < 5; i++) {
    napi_value v;
    napi_create_double(env, fields[i], &v);
    napi_set_element(env, out, i, v);
  }
  return out;
}
