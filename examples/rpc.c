/*
 * rpc: remote procedure calls between 3 ranks in one process.
 *
 * Every rank registers an "add" handler under function id FN_ADD: it takes
 * two 64-bit integers and replies with their sum. Handlers run on library
 * threads, several at once, so the one here only touches an atomic counter.
 *
 * The program shows:
 *   1. register on every rank, then barrier, so that no call can reach a rank
 *      before its handler exists (such a call would be refused);
 *   2. concurrent calls: each rank starts one caller thread per target rank
 *      (itself included), all calling at the same time;
 *   3. errors: an unregistered function id gives NEXAR_ERR_RPC_NO_HANDLER, and
 *      a handler that rejects its arguments gives NEXAR_ERR_RPC_FAILED;
 *   4. a closing barrier before the handlers are removed and ranks deleted.
 *
 * Run: ./example_rpc    Exit status 0 when every check passed.
 */
#include <nexar/nexar.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORLD 3
#define FN_ADD 1
#define FN_UNKNOWN 99 /* never registered */
#define CALLS_PER_THREAD 25

/* Per-rank handler state, passed to nexar_rpc_register as ctx. */
typedef struct add_service {
  uint32_t rank;
  atomic_uint served; /* successful calls answered */
} add_service;

/* The "add" handler: args are two int64_t, the reply is their sum. The reply
 * buffer comes from malloc; the library frees it after sending. */
static int add_handler(void *ctx, uint32_t caller, const void *args, size_t args_len, void **reply,
                       size_t *reply_len) {
  add_service *svc = ctx;
  int64_t in[2];
  if (args_len != sizeof in) return -1; /* the caller gets NEXAR_ERR_RPC_FAILED */
  memcpy(&in, args, sizeof in);         /* args may be unaligned */
  int64_t *sum = malloc(sizeof *sum);
  if (sum == NULL) return -1;
  *sum = in[0] + in[1];
  *reply = sum;
  *reply_len = sizeof *sum;
  atomic_fetch_add(&svc->served, 1u);
  return 0;
}

/* One caller thread: CALLS_PER_THREAD additions on one target rank. */
typedef struct caller_job {
  nexar_client *c;
  uint32_t target;
  int failed;
} caller_job;

static void *caller_main(void *arg) {
  caller_job *job = arg;
  uint32_t me = nexar_rank(job->c);
  for (int i = 0; i < CALLS_PER_THREAD; i++) {
    int64_t args[2] = {(int64_t)me * 1000000 + i, (int64_t)job->target * 1000 - 7 * i};
    void *reply = NULL;
    size_t reply_len = 0;
    int rc = nexar_rpc(job->c, job->target, FN_ADD, args, sizeof args, &reply, &reply_len);
    if (rc != NEXAR_OK) {
      fprintf(stderr, "rank %u: add on rank %u failed: %s (%s)\n", me, job->target,
              nexar_strerror(rc), nexar_last_error());
      job->failed = 1;
      return NULL;
    }
    int64_t sum = 0;
    int ok = reply_len == sizeof sum;
    if (ok) memcpy(&sum, reply, sizeof sum);
    nexar_free(reply); /* replies belong to the library's allocator */
    if (!ok || sum != args[0] + args[1]) {
      fprintf(stderr, "rank %u: add on rank %u: wrong reply (%zu bytes, %lld)\n", me, job->target,
              reply_len, (long long)sum);
      job->failed = 1;
      return NULL;
    }
  }
  return NULL;
}

typedef struct rank_job {
  nexar_client *c;
  add_service svc;
  int failed;
} rank_job;

/* Reports a failed call and leaves the rank. */
#define CHECK(call)                                                                                \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != NEXAR_OK) {                                                                         \
      fprintf(stderr, "rank %u: %s failed: %s (%s)\n", me, #call, nexar_strerror(rc_),             \
              nexar_last_error());                                                                 \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

static int rank_work(rank_job *job) {
  nexar_client *c = job->c;
  uint32_t me = nexar_rank(c), n = nexar_world_size(c);

  /* 1. Register, then wait until every rank has registered. */
  CHECK(nexar_rpc_register(c, FN_ADD, add_handler, &job->svc));
  CHECK(nexar_barrier(c));

  /* 2. One caller thread per target, all at once. */
  caller_job callers[WORLD];
  pthread_t threads[WORLD];
  uint32_t started = 0;
  for (uint32_t t = 0; t < n; t++) {
    callers[t] = (caller_job){.c = c, .target = t, .failed = 0};
    if (pthread_create(&threads[t], NULL, caller_main, &callers[t]) != 0) break;
    started++;
  }
  int failed = started < n;
  for (uint32_t t = 0; t < started; t++) {
    pthread_join(threads[t], NULL);
    failed |= callers[t].failed;
  }
  if (failed) return 1;
  printf("rank %u: %u x %d concurrent add calls ok\n", me, n, CALLS_PER_THREAD);

  /* 3a. No handler for this id on the target: refused at once. */
  int64_t args[2] = {1, 2};
  void *reply = (void *)&args; /* set to NULL by the failed call */
  size_t reply_len = 1;
  uint32_t right = (me + 1) % n;
  int rc = nexar_rpc(c, right, FN_UNKNOWN, args, sizeof args, &reply, &reply_len);
  if (rc != NEXAR_ERR_RPC_NO_HANDLER || reply != NULL || reply_len != 0) {
    fprintf(stderr, "rank %u: unknown function id gave %s, expected NEXAR_ERR_RPC_NO_HANDLER\n", me,
            nexar_strerror(rc));
    return 1;
  }
  printf("rank %u: fn %d on rank %u -> %s: %s\n", me, FN_UNKNOWN, right, nexar_strerror(rc),
         nexar_last_error());

  /* 3b. The handler rejects a short argument: the call fails RPC_FAILED. */
  rc = nexar_rpc(c, right, FN_ADD, args, sizeof args[0], &reply, &reply_len);
  if (rc != NEXAR_ERR_RPC_FAILED) {
    fprintf(stderr, "rank %u: bad arguments gave %s, expected NEXAR_ERR_RPC_FAILED\n", me,
            nexar_strerror(rc));
    nexar_free(reply);
    return 1;
  }

  /* 4. Nobody calls any more once everyone is past this barrier. */
  CHECK(nexar_barrier(c));
  CHECK(nexar_rpc_register(c, FN_ADD, NULL, NULL)); /* unregister */
  return 0;
}

static void *rank_main(void *arg) {
  rank_job *job = arg;
  job->failed = rank_work(job);
  if (job->failed) nexar_abort(job->c); /* wake the other ranks at once */
  return NULL;
}

int main(void) {
  nexar_client *clients[WORLD];
  int rc = nexar_bootstrap_local(clients, WORLD, NULL);
  if (rc != NEXAR_OK) {
    fprintf(stderr, "nexar_bootstrap_local: %s (%s)\n", nexar_strerror(rc), nexar_last_error());
    return 1;
  }

  static rank_job jobs[WORLD];
  pthread_t threads[WORLD];
  uint32_t started = 0;
  for (uint32_t r = 0; r < WORLD; r++) {
    jobs[r].c = clients[r];
    jobs[r].svc.rank = r;
    atomic_init(&jobs[r].svc.served, 0u);
    jobs[r].failed = 1;
    if (pthread_create(&threads[r], NULL, rank_main, &jobs[r]) != 0) {
      fprintf(stderr, "cannot start a thread for rank %u\n", r);
      for (uint32_t k = 0; k < WORLD; k++)
        nexar_abort(clients[k]);
      break;
    }
    started++;
  }
  int failed = started < WORLD;
  for (uint32_t r = 0; r < started; r++) {
    pthread_join(threads[r], NULL);
    failed |= jobs[r].failed;
  }
  /* Every rank had one caller thread aimed at each rank, itself included. */
  for (uint32_t r = 0; r < WORLD && !failed; r++) {
    unsigned served = atomic_load(&jobs[r].svc.served);
    if (served != WORLD * CALLS_PER_THREAD) {
      fprintf(stderr, "rank %u served %u add calls, expected %d\n", r, served,
              WORLD * CALLS_PER_THREAD);
      failed = 1;
    }
  }
  for (uint32_t r = 0; r < WORLD; r++)
    nexar_client_del(clients[r]);

  printf("rpc: %s\n", failed ? "FAILED" : "all checks passed");
  return failed ? 1 : 0;
}
