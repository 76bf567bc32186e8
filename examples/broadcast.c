/*
 * broadcast: one rank (the root) has data; afterwards every rank has a copy.
 *
 * Runs either way:
 *   ./example_broadcast                      4 ranks as threads of this process
 *   nexar-run -n 4 -- ./example_broadcast    one rank per process
 *
 * The root here is the last rank, to show that any rank can be the root. Two
 * broadcasts, checked on every rank:
 *   - a short text (bytes, NEXAR_U8);
 *   - a vector of 200000 doubles (1.6 MB), filled by the root only; the others
 *     start with garbage.
 * Exit status 0 when every check passed.
 */
#include <nexar/nexar.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOCAL_WORLD 4
#define TEXT_BYTES 64
#define VEC_COUNT 200000

static int run(nexar_client *c) {
  uint32_t me = nexar_rank(c), n = nexar_world_size(c);
  uint32_t root = n - 1;

  /* 1. Text: only the root's buffer content matters; the others' is replaced. */
  char text[TEXT_BYTES];
  memset(text, 0, sizeof text);
  if (me == root) snprintf(text, sizeof text, "hello from the root, rank %u of %u", root, n);
  int rc = nexar_broadcast(c, text, sizeof text, NEXAR_U8, root);
  if (rc != NEXAR_OK) {
    fprintf(stderr, "rank %u: broadcast of text failed: %s (%s)\n", me, nexar_strerror(rc),
            nexar_last_error());
    return 1;
  }
  char want[TEXT_BYTES];
  memset(want, 0, sizeof want);
  snprintf(want, sizeof want, "hello from the root, rank %u of %u", root, n);
  if (memcmp(text, want, sizeof want) != 0) {
    fprintf(stderr, "rank %u: got text \"%.*s\"\n", me, TEXT_BYTES, text);
    return 1;
  }
  printf("rank %u: got \"%s\"\n", me, text);

  /* 2. A vector of doubles. */
  double *v = malloc(VEC_COUNT * sizeof *v);
  if (v == NULL) {
    fprintf(stderr, "rank %u: out of memory\n", me);
    return 1;
  }
  for (uint32_t i = 0; i < VEC_COUNT; i++)
    v[i] = me == root ? 0.5 * i + root : -1.0 - me;
  rc = nexar_broadcast(c, v, VEC_COUNT, NEXAR_F64, root);
  if (rc != NEXAR_OK) {
    fprintf(stderr, "rank %u: broadcast of doubles failed: %s (%s)\n", me, nexar_strerror(rc),
            nexar_last_error());
    free(v);
    return 1;
  }
  for (uint32_t i = 0; i < VEC_COUNT; i++) {
    if (v[i] != 0.5 * i + root) {
      fprintf(stderr, "rank %u: v[%u] = %g, expected %g\n", me, i, v[i], 0.5 * i + root);
      free(v);
      return 1;
    }
  }
  free(v);
  printf("rank %u: %d doubles from rank %u ok\n", me, VEC_COUNT, root);
  return 0;
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
    fprintf(stderr, "broadcast: FAILED\n");
  else if (!as_process)
    printf("broadcast: all checks passed\n");
  return failed ? 1 : 0;
}
