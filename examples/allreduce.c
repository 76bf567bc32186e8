/*
 * allreduce: every rank contributes a vector; every rank gets the element-wise
 * reduction of all of them, in place.
 *
 * Runs either way:
 *   ./example_allreduce                      4 ranks as threads of this process
 *                                            (nexar_bootstrap_local)
 *   nexar-run -n 4 -- ./example_allreduce    one rank per process
 *                                            (nexar_init_from_env)
 *
 * Three reductions, each checked against the value computed locally:
 *   - a small int64 SUM, rank r contributing r * 1000 + i at index i;
 *   - a float64 MAX, rank r contributing (r + i) % 10;
 *   - a 12 MiB float32 SUM, large enough for the pipelined algorithm, rank r
 *     contributing (r + 1) * (i % 16) (small integers: exact in float).
 * Exit status 0 when every check passed.
 */
#include <nexar/nexar.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LOCAL_WORLD 4
#define SMALL_COUNT 1000
#define LARGE_COUNT (3u * 1024 * 1024) /* floats: 12 MiB */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reports a failed call and returns 1 from the enclosing function. */
#define CHECK(call)                                                                                \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != NEXAR_OK) {                                                                         \
      fprintf(stderr, "rank %u: %s failed: %s (%s)\n", me, #call, nexar_strerror(rc_),             \
              nexar_last_error());                                                                 \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

static int small_sum(nexar_client *c) {
  uint32_t me = nexar_rank(c), n = nexar_world_size(c);
  int64_t v[SMALL_COUNT];
  for (int64_t i = 0; i < SMALL_COUNT; i++)
    v[i] = (int64_t)me * 1000 + i;
  CHECK(nexar_all_reduce(c, v, SMALL_COUNT, NEXAR_I64, NEXAR_SUM));
  /* sum over r of (r * 1000 + i) = 1000 * n(n-1)/2 + n * i */
  for (int64_t i = 0; i < SMALL_COUNT; i++) {
    int64_t want = 1000 * (int64_t)n * (n - 1) / 2 + (int64_t)n * i;
    if (v[i] != want) {
      fprintf(stderr, "rank %u: i64 sum[%lld] = %lld, expected %lld\n", me, (long long)i,
              (long long)v[i], (long long)want);
      return 1;
    }
  }
  if (me == 0) printf("i64 sum of %d elements over %u ranks: ok\n", SMALL_COUNT, n);
  return 0;
}

static int small_max(nexar_client *c) {
  uint32_t me = nexar_rank(c), n = nexar_world_size(c);
  double v[SMALL_COUNT];
  for (uint32_t i = 0; i < SMALL_COUNT; i++)
    v[i] = (double)((me + i) % 10);
  CHECK(nexar_all_reduce(c, v, SMALL_COUNT, NEXAR_F64, NEXAR_MAX));
  for (uint32_t i = 0; i < SMALL_COUNT; i++) {
    double want = 0;
    for (uint32_t r = 0; r < n; r++)
      if ((double)((r + i) % 10) > want) want = (double)((r + i) % 10);
    if (v[i] != want) {
      fprintf(stderr, "rank %u: f64 max[%u] = %g, expected %g\n", me, i, v[i], want);
      return 1;
    }
  }
  if (me == 0) printf("f64 max of %d elements over %u ranks: ok\n", SMALL_COUNT, n);
  return 0;
}

static int large_sum(nexar_client *c) {
  uint32_t me = nexar_rank(c), n = nexar_world_size(c);
  float *v = malloc(LARGE_COUNT * sizeof *v);
  if (v == NULL) {
    fprintf(stderr, "rank %u: out of memory\n", me);
    return 1;
  }
  for (uint32_t i = 0; i < LARGE_COUNT; i++)
    v[i] = (float)(me + 1) * (float)(i % 16);
  double t0 = now_s();
  int rc = nexar_all_reduce(c, v, LARGE_COUNT, NEXAR_F32, NEXAR_SUM);
  double dt = now_s() - t0;
  if (rc != NEXAR_OK) {
    fprintf(stderr, "rank %u: large all_reduce failed: %s (%s)\n", me, nexar_strerror(rc),
            nexar_last_error());
    free(v);
    return 1;
  }
  float factor = (float)n * (float)(n + 1) / 2.0f; /* 1 + 2 + ... + n */
  for (uint32_t i = 0; i < LARGE_COUNT; i++) {
    if (v[i] != factor * (float)(i % 16)) {
      fprintf(stderr, "rank %u: f32 sum[%u] = %g, expected %g\n", me, i, (double)v[i],
              (double)(factor * (float)(i % 16)));
      free(v);
      return 1;
    }
  }
  free(v);
  if (me == 0)
    printf("f32 sum of %u elements (%.0f MiB) over %u ranks: ok in %.3f s\n", LARGE_COUNT,
           LARGE_COUNT * 4.0 / (1024 * 1024), n, dt);
  return 0;
}

/* Everything one rank does; 0 on success. Every rank calls the collectives
 * in the same order. */
static int run(nexar_client *c) {
  return small_sum(c) || small_max(c) || large_sum(c);
}

/* ---- running the ranks: as threads here, or one per process ---- */

typedef struct rank_job {
  nexar_client *c;
  int failed;
} rank_job;

static void *rank_main(void *arg) {
  rank_job *job = arg;
  job->failed = run(job->c);
  if (job->failed) nexar_abort(job->c); /* the other ranks then fail fast */
  return NULL;
}

static int run_threads(void) {
  nexar_client *clients[LOCAL_WORLD];
  int rc = nexar_bootstrap_local(clients, LOCAL_WORLD, NULL);
  if (rc != NEXAR_OK) {
    fprintf(stderr, "nexar_bootstrap_local: %s (%s)\n", nexar_strerror(rc), nexar_last_error());
    return 1;
  }
  rank_job jobs[LOCAL_WORLD];
  pthread_t threads[LOCAL_WORLD];
  uint32_t started = 0;
  for (uint32_t r = 0; r < LOCAL_WORLD; r++) {
    jobs[r] = (rank_job){.c = clients[r], .failed = 1};
    if (pthread_create(&threads[r], NULL, rank_main, &jobs[r]) != 0) {
      for (uint32_t k = 0; k < LOCAL_WORLD; k++)
        nexar_abort(clients[k]);
      break;
    }
    started++;
  }
  int failed = started < LOCAL_WORLD;
  for (uint32_t r = 0; r < started; r++) {
    pthread_join(threads[r], NULL);
    failed |= jobs[r].failed;
  }
  for (uint32_t r = 0; r < LOCAL_WORLD; r++)
    nexar_client_del(clients[r]);
  return failed;
}

static int run_process(void) {
  nexar_client *c = NULL;
  int rc = nexar_init_from_env(&c);
  if (rc != NEXAR_OK) {
    fprintf(stderr, "nexar_init_from_env: %s (%s)\n", nexar_strerror(rc), nexar_last_error());
    return 1;
  }
  int failed = run(c);
  nexar_client_del(c);
  return failed;
}

int main(void) {
  /* Under nexar-run (or with a seed / torchrun variables): one rank here. */
  int as_process = getenv("NEXAR_SEED_ADDR") != NULL || getenv("MASTER_ADDR") != NULL;
  int failed = as_process ? run_process() : run_threads();
  if (failed)
    fprintf(stderr, "allreduce: FAILED\n");
  else if (!as_process)
    printf("allreduce: all checks passed\n");
  return failed ? 1 : 0;
}
