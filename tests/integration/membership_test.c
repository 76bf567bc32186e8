/* rebuild_excluding, compressed allreduce and elastic departures, ranks as threads. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    for (int i = 0; i < COUNT; i++)
      in[i] = (float)((i * 7 + (int)r * 13 + round) % 64) - 32;
    memcpy(buf, in, sizeof buf);
    for (int i = 0; i < COUNT; i++)
      total_in += in[i];
    const nexar_compressor *comp = round == 1 ? rk : topk;
    CHECK(nexar_all_reduce_compressed(c, buf, COUNT, NEXAR_F32, NEXAR_SUM, comp, resid) == 0,
          "compressed round %d", round);
    if (r == 0)
      for (int i = 0; i < COUNT; i++)
        total_out += buf[i];
    memcpy(results[r], buf, sizeof buf);
    nexar_barrier(c);
    CHECK(memcmp(results[r], results[0], sizeof buf) == 0, "rank %u differs from rank 0", r);
    nexar_barrier(c);
  }
  /* error feedback: what was not sent stays in the residuals (exact: small integers) */
  double rsum = 0;
  for (int i = 0; i < COUNT; i++)
    rsum += resid[i];
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
            NEXAR_ERR_UNSUPPORTED,
        "max is unsupported");
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

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static nexar_client *el[N];
static uint64_t new_ids[N];

/* Elastic departures: 1,000 checkpoints without a change against 1,000
 * barriers (printed, not asserted), then rank N-1 leaves. */
static void *elastic_rank(void *arg) {
  nexar_client *c = arg;
  uint32_t r = nexar_rank(c);
  nexar_client *nc = NULL;
  double t0 = now_s();
  for (int i = 0; i < 1000; i++)
    CHECK(nexar_barrier(c) == 0, "barrier %d", i);
  double t1 = now_s();
  for (int i = 0; i < 1000; i++)
    CHECK(nexar_elastic_checkpoint(c, &nc) == 0 && !nc, "no-op checkpoint %d", i);
  double t2 = now_s();
  if (r == 0)
    printf("1000 barriers %.1f ms, 1000 no-change checkpoints %.1f ms (ratio %.2f)\n",
           (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t2 - t1) / (t1 - t0));
  nexar_elastic_info info;
  CHECK(nexar_elastic_info_get(c, &info) == 0 && info.new_world == N && info.old_world == N &&
            info.left == 0 && info.old_rank == r && !info.i_am_new,
        "info before");
  if (r == N - 1) CHECK(nexar_elastic_leave(c) == 0, "leave");
  int rc = nexar_elastic_checkpoint(c, &nc);
  CHECK(rc == 0, "checkpoint with a leaver: %d", rc);
  int v = 1;
  rc = nexar_all_reduce(c, &v, 1, NEXAR_I32, NEXAR_SUM);
  CHECK(rc == NEXAR_ERR_ABORTED &&
            strstr(nexar_last_error(), r == N - 1 ? "left at checkpoint" : "resized at checkpoint"),
        "old view after the resize: %d", rc);
  if (r == N - 1) {
    CHECK(!nc, "the leaver got a communicator");
    return NULL;
  }
  CHECK(nc && nexar_world_size(nc) == N - 1 && nexar_rank(nc) == r && nexar_view_epoch(nc) == 1,
        "new view");
  CHECK(nexar_elastic_info_get(nc, &info) == 0 && info.new_world == N - 1 && info.old_world == N &&
            info.left == 1 && info.joined == 0 && info.old_rank == r && !info.i_am_new &&
            info.epoch == 1,
        "info after");
  new_ids[r] = nexar_comm_id(nc);
  v = (int)r + 1;
  CHECK(nexar_all_reduce(nc, &v, 1, NEXAR_I32, NEXAR_SUM) == 0 && v == 6, "allreduce %d", v);
  nexar_client_del(nc);
  return NULL;
}

/* elastic_min_world: a departure that would go below it changes nothing. */
static void *min_world_rank(void *arg) {
  nexar_client *c = arg;
  uint32_t r = nexar_rank(c);
  nexar_client *nc = NULL;
  if (r == 1) CHECK(nexar_elastic_leave(c) == 0, "leave");
  int rc = nexar_elastic_checkpoint(c, &nc);
  CHECK(rc == NEXAR_ERR_ABORTED && !nc && strstr(nexar_last_error(), "elastic_min_world"),
        "checkpoint below the minimum: %d", rc);
  int v = 1;
  CHECK(nexar_all_reduce(c, &v, 1, NEXAR_I32, NEXAR_SUM) == 0 && v == 2, "the view stays");
  return NULL;
}

static int run_on(nexar_client **cs, int n, void *(*fn)(void *)) {
  pthread_t t[N];
  for (int i = 0; i < n; i++)
    pthread_create(&t[i], NULL, fn, cs[i]);
  for (int i = 0; i < n; i++)
    pthread_join(t[i], NULL);
  return failures;
}

static int run(void *(*fn)(void *)) {
  pthread_t t[N];
  for (int i = 0; i < N; i++)
    pthread_create(&t[i], NULL, fn, cl[i]);
  for (int i = 0; i < N; i++)
    pthread_join(t[i], NULL);
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
  if (nexar_bootstrap_local(el, N, &cfg)) return 1;
  f = run_on(el, N, elastic_rank);
  if (new_ids[0] != new_ids[1] || new_ids[0] != new_ids[2]) {
    fprintf(stderr, "FAIL: the stayers' new views differ\n");
    failures++;
  }
  printf("elastic leave: %s\n", f ? "FAILED" : "ok");
  for (int i = 0; i < N; i++)
    nexar_client_del(el[i]);
  cfg.elastic_min_world = 2;
  if (nexar_bootstrap_local(el, 2, &cfg)) return 1;
  f = run_on(el, 2, min_world_rank);
  printf("elastic_min_world: %s\n", f ? "FAILED" : "ok");
  for (int i = 0; i < 2; i++)
    nexar_client_del(el[i]);
  for (int i = 0; i < N; i++)
    nexar_client_del(cl[i]);
  return failures != 0;
}
