/*
 * barrier: nobody leaves until everybody has arrived.
 *
 * Runs either way:
 *   ./example_barrier                      4 ranks as threads of this process
 *   nexar-run -n 4 -- ./example_barrier    one rank per process
 *
 * After a first barrier that lines everybody up, rank r sleeps r * 100 ms
 * before entering a second barrier, so the ranks arrive staggered. Each rank
 * prints when it entered and left (relative to the first barrier), and checks
 * that it waited for the last rank: rank r should wait about
 * (n - 1 - r) * 100 ms. Times come from each rank's own clock, so the check
 * also holds when ranks run on different hosts.
 * Exit status 0 when every check passed.
 */
#include <nexar/nexar.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LOCAL_WORLD 4
#define STAGGER_MS 100
#define SLACK_MS 50 /* how much the first barrier's exits may differ between ranks */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void sleep_ms(uint32_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static int run(nexar_client *c) {
  uint32_t me = nexar_rank(c), n = nexar_world_size(c);

  /* Line up: everybody leaves this barrier at about the same moment. */
  int rc = nexar_barrier(c);
  double t0 = now_ms();

  /* Arrive staggered: rank r enters r * 100 ms late. */
  double entered = 0, left = 0;
  if (rc == NEXAR_OK) {
    sleep_ms(me * STAGGER_MS);
    entered = now_ms() - t0;
    rc = nexar_barrier(c);
    left = now_ms() - t0;
  }
  if (rc != NEXAR_OK) {
    fprintf(stderr, "rank %u: barrier failed: %s (%s)\n", me, nexar_strerror(rc),
            nexar_last_error());
    return 1;
  }
  printf("rank %u: entered at +%4.0f ms, left at +%4.0f ms (waited %4.0f ms)\n", me, entered, left,
         left - entered);

  /* The last rank arrives at about (n - 1) * 100 ms; nobody may leave earlier. */
  double last_arrival = (double)(n - 1) * STAGGER_MS;
  if (left < last_arrival - SLACK_MS) {
    fprintf(stderr, "rank %u: left at +%.0f ms, before the last rank arrived (+%.0f ms)\n", me,
            left, last_arrival);
    return 1;
  }
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
    fprintf(stderr, "barrier: FAILED\n");
  else if (!as_process)
    printf("barrier: all checks passed\n");
  return failed ? 1 : 0;
}
