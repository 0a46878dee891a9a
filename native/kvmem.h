/* KV memory in a sealed memfd, shared as a SharedArrayBuffer (kvmem.cc). */
#ifndef KVMEM_H
#define KVMEM_H
#include <node_api.h>

#ifdef __cplusplus
extern "C" {
#endif
/* allocShared(size) -> SharedArrayBuffer */
napi_value kv_alloc_shared(napi_env env, napi_callback_info info);
/* sharedInfo(view: Uint8Array) -> [fd, offset, size, ino, dev] | null */
napi_value kv_shared_info(napi_env env, napi_callback_info info);
#ifdef __cplusplus
}
#endif

#endif
