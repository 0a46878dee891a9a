/*
 * llama.cpp with nothing between the caller and llama_decode: the benchmark's llama.cpp
 * side, compiled at bench time (bench/_llamacpp-harness.ts) against the headers of the
 * llama.cpp source node-llama-cpp ships and linked to its prebuilt shared libraries.
 *
 * It sets llama.cpp up as its own llama-bench does: every backend found next to the
 * libraries loaded (the CPU backend variant that best fits this CPU), a thread pool of
 * n_threads threads attached to the context (so no thread is created per graph), the
 * ubatch as large as the context so a prompt is one graph.
 *
 *   llamacpp-harness <backends dir> <model.gguf> <threads> <context> <f16|f32 KV> <auto|on|off flash>
 *
 * It prints one line, `ready <cpu backend> <vocab size>`, then reads requests from stdin, one
 * a line: `<tokens to generate> <prompt id> <prompt id> ...`. For each it clears the KV cache,
 * decodes the prompt as one batch, takes the greedy token (the first largest logit), then
 * decodes one token at a time, and prints
 *   `<prefill ns> <decode ns> <token id> <token id> ...`
 * where prefill ns is the prompt batch plus the first token's choice and decode ns the rest
 * (CLOCK_MONOTONIC). Errors go to stderr with exit status 1.
 */
#include <ggml-backend.h>
#include <ggml-cpu.h>
#include <llama.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what) {
  fprintf(stderr, "llamacpp-harness: %s\n", what);
  exit(1);
}

static void quiet(enum ggml_log_level level, const char *text, void *user) {
  (void)user;
  if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static llama_token greedy(struct llama_context *ctx, int n_vocab) {
  const float *logits = llama_get_logits_ith(ctx, -1);
  if (logits == NULL) die("no logits");
  int best = 0;
  for (int i = 1; i < n_vocab; i++)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int main(int argc, char **argv) {
  if (argc != 7) die("usage: llamacpp-harness <backends dir> <model.gguf> <threads> <context> <f16|f32> <auto|on|off>");
  int threads = atoi(argv[3]), n_ctx = atoi(argv[4]);
  if (threads < 1 || n_ctx < 2) die("threads and context must be positive");

  llama_log_set(quiet, NULL);
  ggml_backend_load_all_from_path(argv[1]);
  ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  if (cpu == NULL) die("no CPU backend could be loaded from the backends dir");
  ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(cpu);
  typedef struct ggml_threadpool *(*pool_new_fn)(struct ggml_threadpool_params *);
  pool_new_fn pool_new = (pool_new_fn)ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_new");
  if (pool_new == NULL) die("the CPU backend has no ggml_threadpool_new");
  llama_backend_init();

  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  struct llama_model *model = llama_model_load_from_file(argv[2], mp);
  if (model == NULL) die("the model did not load");

  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)n_ctx;
  cp.n_batch = (uint32_t)n_ctx;
  cp.n_ubatch = (uint32_t)n_ctx;
  cp.n_seq_max = 1;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.type_k = cp.type_v = strcmp(argv[5], "f32") == 0 ? GGML_TYPE_F32 : GGML_TYPE_F16;
  cp.flash_attn_type = strcmp(argv[6], "on") == 0    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                       : strcmp(argv[6], "off") == 0 ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                     : LLAMA_FLASH_ATTN_TYPE_AUTO;
  cp.no_perf = true;
  struct llama_context *ctx = llama_init_from_model(model, cp);
  if (ctx == NULL) die("the context could not be created");

  struct ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
  struct ggml_threadpool *pool = pool_new(&tpp);
  if (pool == NULL) die("the thread pool could not be created");
  llama_attach_threadpool(ctx, pool, NULL);

  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  printf("ready %s %d\n", ggml_backend_reg_name(reg), n_vocab);
  fflush(stdout);

  llama_token *ids = malloc(sizeof(llama_token) * (size_t)n_ctx);
  llama_token *out = malloc(sizeof(llama_token) * (size_t)n_ctx);
  static char line[1 << 20];
  while (fgets(line, sizeof line, stdin) != NULL) {
    char *p = line, *end;
    long n_gen = strtol(p, &end, 10);
    if (end == p || n_gen < 1) die("a request starts with the number of tokens to generate");
    int n = 0;
    for (p = end;; p = end) {
      long id = strtol(p, &end, 10);
      if (end == p) break;
      if (n >= n_ctx || id < 0 || id >= n_vocab) die("a prompt id is out of the vocabulary or the context is full");
      ids[n++] = (llama_token)id;
    }
    if (n == 0 || n + n_gen > n_ctx) die("the prompt is empty or prompt + generated tokens exceed the context");
    llama_memory_clear(llama_get_memory(ctx), true);

    long long t0 = now_ns();
    if (llama_decode(ctx, llama_batch_get_one(ids, n)) != 0) die("llama_decode failed on the prompt");
    out[0] = greedy(ctx, n_vocab);
    long long t1 = now_ns();
    for (long i = 1; i < n_gen; i++) {
      if (llama_decode(ctx, llama_batch_get_one(&out[i - 1], 1)) != 0) die("llama_decode failed on a token");
      out[i] = greedy(ctx, n_vocab);
    }
    long long t2 = now_ns();
    printf("%lld %lld", t1 - t0, t2 - t1);
    for (long i = 0; i < n_gen; i++) printf(" %d", out[i]);
    printf("\n");
    fflush(stdout);
  }
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
