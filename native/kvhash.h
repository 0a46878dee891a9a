/* The block checksum (kvhash.c), shared by the JS exports and kvshm.c. */
#ifndef KVHASH_H
#define KVHASH_H
#include <node_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Picks the AVX2 or AVX-512 steps when the CPU has them; call once at module load. */
void kvhash_init(void);
/* The checksum of `length` bytes at `p` (an integer below 2^53). */
double kvhash_block(const uint8_t *p, size_t length);
/* The bytes of a Uint8Array argument (any backing store, shared or not). */
bool uint8_arg(napi_env env, napi_value v, const uint8_t **data, size_t *length);
/* hash(bytes) -> number */
napi_value kv_hash(napi_env env, napi_callback_info info);
/* hashBlocks(bytes, blockBytes, count, out: Float64Array) */
napi_value kv_hash_blocks(napi_env env, napi_callback_info info);
/* copyHash(dst, src, blockBytes, count, out: Float64Array): copies the blocks, out = checksums of the copies */
napi_value kv_copy_hash(napi_env env, napi_callback_info info);
/* copyHashRuns(dsts | null, srcs, blockBytes, out, threads): copyHash (or, dsts null, hashBlocks) of several runs, on threads */
napi_value kv_copy_hash_runs(napi_env env, napi_callback_info info);

#endif
