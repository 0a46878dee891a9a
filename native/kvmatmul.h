/* The engine's matmuls (kvmatmul.c), registered by kvshm.c's module init. */
#ifndef KVMATMUL_H
#define KVMATMUL_H
#include <node_api.h>
#include <stdbool.h>

/* True when this CPU can run the kernels (AVX2 and F16C); call once at module load. */
bool kvmatmul_init(void);
/* matmulF32(memory, m, n4, k, a, lda, b, ldb, c, ldc[, threads]) */
napi_value kv_matmul_f32(napi_env env, napi_callback_info info);
/* matmulWeight(memory, m, n, k, a, lda, w, c, ldc, format, threads): B a panel-major weight */
napi_value kv_matmul_weight(napi_env env, napi_callback_info info);
/* matmulPoolSize() -> helper threads started */
napi_value kv_matmul_pool_size(napi_env env, napi_callback_info info);
/* matmulIsa() -> 'avx512' | 'avx2' */
napi_value kv_matmul_isa(napi_env env, napi_callback_info info);

#endif
