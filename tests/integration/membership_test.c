/* rebuild_excluding and compressed allreduce, ranks as threads. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nexar/nexar.h>

#define N 4
#define COUNT 1000
static nexar_client *cl[N];
static int failures;

#define CHECK(c, ...)                                                                              \
  do {                                                                                             \
    if (!(c)) {                                                                                    \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, " (last error: %s)\n", nexar_last_error());                                  \
      __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);                                          \
      return NULL;                                                                                 \
    }                                                                                              \
  } while (0)

static float results[N][COUNT];

static void *compress_rank(void *arg) {
  nexar_client *c = arg;
  uint32_t r = nexar_rank(c);
  nexar_compressor *topk, *rk;
  CHECK(nexar_compressor_topk_new(&topk, 0.1) == 0, "topk");
  CHECK(nexar_compressor_randomk_new(&rk, 0.2, 42) == 0, "randomk");
  float in[COUNT], buf[COUNT], resid[COUNT] = {0};
  double total_in = 0, total_out = 0;
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < COUNT; i++) in[i] = (float)((i * 7 + (int)r * 13 + round) % 64) - 32;
    memcpy(buf, in, sizeof buf);
    for (int i = 0; i < COUNT; i++) total_in += in[i];
    const nexar_compressor *comp = round == 1 ? rk : topk;
    CHECK(nexar_all_reduce_compressed(c, buf, COUNT, NEXAR_F32, NEXAR_SUM, comp, resid) == 0,
          "compressed round %d", round);
    if (r == 0)
      for (int i = 0; i < COUNT; i++) total_out += buf[i];
    memcpy(results[r], buf, sizeof buf);
    nexar_barrier(c);
    CHECK(memcmp(results[r], results[0], sizeof buf) == 0, "rank %u differs from rank 0", r);
    nexar_barrier(c);
  }
  /* error feedback: what was not sent stays in the residuals (exact: small integers) */
  double rsum = 0;
  for (int i = 0; i < COUNT; i++) rsum += resid[i];
  double all_r = 0;
  CHECK(nexar_all_reduce(c, &rsum, 1, NEXAR_F64, NEXAR_SUM) == 0, "residual sum");
  all_r = rsum;
  double all_in = total_in;
  CHECK(nexar_all_reduce(c, &all_in, 1, NEXAR_F64, NEXAR_SUM) == 0, "input sum");
  double out0 = total_out;
  CHECK(nexar_broadcast(c, &out0, 1, NEXAR_F64, 0) == 0, "bcast");
  CHECK(all_in == out0 + all_r, "sum of inputs %g != results %g + residuals %g", all_in, out0,
        all_r);
  float x = 1;
  CHECK(nexar_all_reduce_compressed(c, &x, 1, NEXAR_F32, NEXAR_MAX, topk, resid) ==
            NEXAR_ERR_UNSUPPORTED, "max is unsupported");
  nexar_compressor *bad;
  CHECK(nexar_compressor_topk_new(&bad, 0.0) == NEXAR_ERR_INVALID_ARGUMENT && !bad, "ratio 0");
  nexar_compressor_del(topk);
  nexar_compressor_del(rk);
  return NULL;
}

static void *rebuild_rank(void *arg) {
  nexar_client *c = arg;
  uint32_t r = nexar_rank(c);
  if (r == N - 1) return NULL; /* excluded: it takes no part */
  uint32_t dead[1] = {N - 1};
  nexar_client *nc = NULL;
  CHECK(nexar_rebuild_excluding(c, dead, 1, &nc) == 0 && nc, "rebuild");
  CHECK(nexar_world_size(nc) == N - 1 && nexar_rank(nc) == r, "new numbering");
  int v = (int)r + 1;
  CHECK(nexar_all_reduce(nc, &v, 1, NEXAR_I32, NEXAR_SUM) == 0 && v == 6, "allreduce %d", v);
  uint32_t self[1] = {r};
  nexar_client *x = NULL;
  CHECK(nexar_rebuild_excluding(c, self, 1, &x) == NEXAR_ERR_INVALID_ARGUMENT && !x, "self");
  nexar_client_del(nc);
  return NULL;
}

static int run(void *(*fn)(void *)) {
  pthread_t t[N];
  for (int i = 0; i < N; i++) pthread_create(&t[i], NULL, fn, cl[i]);
  for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
  return failures;
}

int main(void) {
  nexar_config cfg;
  nexar_config_default(&cfg);
  cfg.collective_timeout_ms = 10000;
  if (nexar_bootstrap_local(cl, N, &cfg)) return 1;
  int f = run(compress_rank);
  printf("compressed allreduce: %s\n", f ? "FAILED" : "ok");
  f = run(rebuild_rank);
  printf("rebuild_excluding: %s\n", f ? "FAILED" : "ok");
  for (int i = 0; i < N; i++) nexar_client_del(cl[i]);
  return failures != 0;
}
