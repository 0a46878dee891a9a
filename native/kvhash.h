/* The block checksum (kvhash.c), shared by the JS exports and the tcp sender (kvsplice.c). */
#ifndef KVHASH_H
#define KVHASH_H
#include <node_api.h>
#include <stddef.h>
#include <stdint.h>

/* Picks the AVX2 step when the CPU has it; call once at module load. */
void kvhash_init(void);
/* The checksum of `length` bytes at `p` (an integer below 2^53). */
double kvhash_block(const uint8_t *p, size_t length);
/* hash(bytes) -> number */
napi_value kv_hash(napi_env env, napi_callback_info info);
/* hashBlocks(bytes, blockBytes, count, out: Float64Array) */
napi_value kv_hash_blocks(napi_env env, napi_callback_info info);

#endif
