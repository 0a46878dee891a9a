/* The engine's float32 matmul (kvmatmul.c), registered by kvshm.c's module init. */
#ifndef KVMATMUL_H
#define KVMATMUL_H
#include <node_api.h>
#include <stdbool.h>

/* True when this CPU can run the kernel (AVX2); call once at module load. */
bool kvmatmul_init(void);
/* matmulF32(memory, m, n4, k, a, lda, b, ldb, c, ldc) */
napi_value kv_matmul_f32(napi_env env, napi_callback_info info);
/* matmulIsa() -> 'avx512' | 'avx2' */
napi_value kv_matmul_isa(napi_env env, napi_callback_info info);

#endif
