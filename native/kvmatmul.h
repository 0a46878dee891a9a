/* The engine's matmuls (kvmatmul.c), registered by kvshm.c's module init. */
#ifndef KVMATMUL_H
#define KVMATMUL_H
#include <node_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The thread pool the matmuls run on, for the engine's other kernels (kvops.c): runs
 * task(ctx, i) for every i < count, on up to `threads` threads (this one included) when
 * `cost` (multiply-adds or their equivalent for the whole call) pays for the helpers, else on
 * this thread in order. Returns when every task is done.
 */
typedef void (*kvpool_task_fn)(const void *ctx, uint32_t index);
void kvpool_run(kvpool_task_fn task, const void *ctx, uint32_t count, int threads, double cost);
/* A requested thread count (a JavaScript argument) clamped to what the pool runs: 1 to its maximum. */
int kvpool_threads(int64_t requested);
/*
 * C[m, n] = A[m, k] · B[k, n] (float32, row-major, strides in floats) on the calling thread,
 * with the bits of matmulF32 including its column tail; false when the CPU cannot run it.
 */
bool kvmatmul_local(size_t m, size_t n, size_t k, const float *a, size_t lda, const float *b, size_t ldb,
                    float *c, size_t ldc);

/* True when this CPU can run the kernels (AVX2 and F16C); call once at module load. */
bool kvmatmul_init(void);
/*
 * Reads the arguments (memory: an ArrayBuffer; then `ntyped` typed arrays of typed[i].type,
 * whose data and length it fills in; then `count` non-negative integers into v, the last
 * `optional` of which may be absent and keep their value; then `ndoubles` numbers into d)
 * or throws a TypeError naming `usage` and returns false. At most KV_MAX_ARGS in all.
 */
#define KV_MAX_ARGS 24
typedef struct {
  napi_typedarray_type type;
  void *data;
  size_t length;
} kv_typed_arg;
bool kv_read_args(napi_env env, napi_callback_info info, const char *usage, void **data, size_t *bytes,
                  kv_typed_arg *typed, size_t ntyped, int64_t *v, size_t count, size_t optional, double *d,
                  size_t ndoubles);
/* matmulF32(memory, m, n4, k, a, lda, b, ldb, c, ldc[, threads]) */
napi_value kv_matmul_f32(napi_env env, napi_callback_info info);
/* matmulWeight(memory, m, n, k, a, lda, w, c, ldc, format, threads): B a panel-major weight */
napi_value kv_matmul_weight(napi_env env, napi_callback_info info);
/* matmulPoolSize() -> helper threads started */
napi_value kv_matmul_pool_size(napi_env env, napi_callback_info info);
/* matmulIsa() -> 'avx512' | 'avx2' */
napi_value kv_matmul_isa(napi_env env, napi_callback_info info);

#endif
