/* The engine's kernels besides the matmuls (kvops.c), registered by kvshm.c's module init. */
#ifndef KVOPS_H
#define KVOPS_H
#include <node_api.h>

/* attentionPrefill(memory, qkv, qkvStride, out, outStride, firstRow, len, p0, lo, ctx, keysT,
 * values, numHeads, numKvHeads, headDim, window, queryBlock, threads) */
napi_value kv_attention_prefill(napi_env env, napi_callback_info info);
/* attentionDecode(memory, kv, table, blockSize, qkv, qkvStride, out, firstRow, len, p0, numHeads,
 * numKvHeads, headDim, window, threads) */
napi_value kv_attention_decode(napi_env env, napi_callback_info info);
/* swiglu(memory, gateUp, out, rows, inter, threads) */
napi_value kv_swiglu(napi_env env, napi_callback_info info);
/* rmsnorm(memory, weight, x, add, dst, rows, dim, threads, eps) */
napi_value kv_rmsnorm(napi_env env, napi_callback_info info);
/* rope(memory, cos, sin, positions, half, x, stride, rows, heads, threads) */
napi_value kv_rope(napi_env env, napi_callback_info info);
/* gatherKV(memory, kv, table, blockSize, numKvHeads, headDim, lo, ctx, keysT, values, threads) */
napi_value kv_gather_kv(napi_env env, napi_callback_info info);

#endif
