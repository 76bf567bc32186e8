/*
 * backend_nexar.c: libnexar backend of the shared benchmark harness
 * (../shared/bench/src/bench.h, bench_core.c), so that the same harness
 * measures libnexar, Open MPI, MPICH and Gloo. bench/compare.sh copies this
 * file next to the harness and builds it:
 *
 *   make build/bench_nexar NEXAR_CFLAGS="-I<repo>/include" \
 *        NEXAR_LIBS="-L<build> -lnexar -Wl,-rpath,<build>"
 *
 * Ranks are processes. Two ways to form the world:
 * - scripts/launch-local.sh N build/bench_nexar (as for Gloo): BENCH_RANK,
 *   BENCH_SIZE and BENCH_STORE (an empty directory shared by the ranks) are
 *   set. Rank 0 starts a seed in its process on 127.0.0.1 (ephemeral port)
 *   and publishes "address token" in BENCH_STORE/nexar-seed; every rank sets
 *   NEXAR_SEED_ADDR, NEXAR_CLUSTER_TOKEN, NEXAR_WORLD_SIZE and NEXAR_RANK (its
 *   BENCH_RANK) from it and joins with nexar_init_from_env.
 * - nexar-run -n N -- build/bench_nexar: NEXAR_SEED_ADDR is set and
 *   nexar_init_from_env joins.
 * BENCH_VARIANT names the variant column (default "quic"). Every NEXAR_*
 * configuration variable applies (nexar_config_default reads them).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bench.h"

#include <nexar/nexar.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RENDEZVOUS_TIMEOUT_S 60
#define PINGPONG_TAG_BASE 0x6e780000u /* application tags for send/recv */

typedef struct nexar_ctx {
  nexar_client *c;
  nexar_seed *seed; /* rank 0 with BENCH_STORE */
} nexar_ctx;

static nexar_ctx g_ctx;

static int report(int rc, const char *what) {
  if (rc)
    fprintf(stderr, "bench_nexar: %s: %s (%s)\n", what, nexar_strerror(rc), nexar_last_error());
  return rc;
}

static int to_dtype(bench_dtype_t dt, nexar_dtype *out) {
  switch (dt) {
  case BENCH_F32:
    *out = NEXAR_F32;
    return 0;
  case BENCH_F64:
    *out = NEXAR_F64;
    return 0;
  case BENCH_I32:
    *out = NEXAR_I32;
    return 0;
  }
  return -1;
}

static int to_op(bench_op_t op, nexar_op *out) {
  switch (op) {
  case BENCH_SUM:
    *out = NEXAR_SUM;
    return 0;
  case BENCH_MAX:
    *out = NEXAR_MAX;
    return 0;
  case BENCH_MIN:
    *out = NEXAR_MIN;
    return 0;
  }
  return -1;
}

static nexar_client *cl(bench_backend_t *b) {
  return ((nexar_ctx *)b->ctx)->c;
}

static int n_barrier(bench_backend_t *b) {
  return report(nexar_barrier(cl(b)), "barrier");
}

static int n_allreduce(bench_backend_t *b, void *buf, size_t count, bench_dtype_t dt,
                       bench_op_t op) {
  nexar_dtype d;
  nexar_op o;
  if (to_dtype(dt, &d) || to_op(op, &o)) return 1;
  return report(nexar_all_reduce(cl(b), buf, count, d, o), "all_reduce");
}

static int n_broadcast(bench_backend_t *b, void *buf, size_t bytes, int root) {
  return report(nexar_broadcast(cl(b), buf, bytes, NEXAR_U8, (uint32_t)root), "broadcast");
}

static int n_allgather(bench_backend_t *b, const void *s, void *r, size_t per) {
  return report(nexar_all_gather(cl(b), s, r, per, NEXAR_U8), "all_gather");
}

static int n_reduce_scatter(bench_backend_t *b, const void *s, void *r, size_t count_per_rank,
                            bench_dtype_t dt, bench_op_t op) {
  nexar_dtype d;
  nexar_op o;
  if (to_dtype(dt, &d) || to_op(op, &o)) return 1;
  return report(nexar_reduce_scatter(cl(b), s, r, count_per_rank, d, o), "reduce_scatter");
}

static int n_alltoall(bench_backend_t *b, const void *s, void *r, size_t per) {
  return report(nexar_all_to_all(cl(b), s, r, per, NEXAR_U8), "all_to_all");
}

static int n_send(bench_backend_t *b, const void *buf, size_t bytes, int peer, int tag) {
  return report(nexar_send(cl(b), buf, bytes, (uint32_t)peer, PINGPONG_TAG_BASE + (uint32_t)tag),
                "send");
}

static int n_recv(bench_backend_t *b, void *buf, size_t bytes, int peer, int tag) {
  return report(nexar_recv(cl(b), buf, bytes, (uint32_t)peer, PINGPONG_TAG_BASE + (uint32_t)tag),
                "recv");
}

static void n_finalize(bench_backend_t *b) {
  nexar_ctx *x = b->ctx;
  nexar_client_del(x->c);
  x->c = NULL;
  if (x->seed) nexar_seed_del(x->seed);
  x->seed = NULL;
}

static int parse_int(const char *s, long lo, long hi, long *out) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* Rank 0: start the seed and publish its address and token atomically. */
static int publish_seed(nexar_ctx *x, const char *store, uint32_t n) {
  int rc = nexar_seed_new(&x->seed, "127.0.0.1:0", n, NULL);
  if (report(rc, "nexar_seed_new")) return rc;
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof tmp, "%s/nexar-seed.tmp", store);
  snprintf(path, sizeof path, "%s/nexar-seed", store);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    fprintf(stderr, "bench_nexar: cannot write %s: %s\n", tmp, strerror(errno));
    return 1;
  }
  fprintf(f, "%s %s\n", nexar_seed_addr(x->seed), nexar_seed_token(x->seed));
  if (fclose(f) || rename(tmp, path)) {
    fprintf(stderr, "bench_nexar: cannot publish %s: %s\n", path, strerror(errno));
    return 1;
  }
  return 0;
}

/* Other ranks: wait for the published "address token" line. */
static int read_seed(const char *store, char *addr, size_t acap, char *tok, size_t tcap) {
  char path[4096], line[1024];
  snprintf(path, sizeof path, "%s/nexar-seed", store);
  for (int waited_ms = 0; waited_ms < RENDEZVOUS_TIMEOUT_S * 1000; waited_ms += 10) {
    FILE *f = fopen(path, "r");
    if (f) {
      char *ok = fgets(line, sizeof line, f);
      fclose(f);
      char *sp = ok ? strchr(line, ' ') : NULL;
      if (sp) {
        *sp = '\0';
        char *nl = strchr(sp + 1, '\n');
        if (nl) *nl = '\0';
        snprintf(addr, acap, "%s", line);
        snprintf(tok, tcap, "%s", sp + 1);
        return 0;
      }
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  fprintf(stderr, "bench_nexar: no seed published in %s after %d s\n", store, RENDEZVOUS_TIMEOUT_S);
  return 1;
}

int bench_backend_init(bench_backend_t *b, int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  nexar_ctx *x = &g_ctx;
  memset(x, 0, sizeof *x);
  b->ctx = x;
  b->impl = "nexar";
  const char *variant = getenv("BENCH_VARIANT");
  snprintf(b->variant, sizeof b->variant, "%s", variant && *variant ? variant : "quic");

  int rc;
  if (getenv("NEXAR_SEED_ADDR")) {
    rc = nexar_init_from_env(&x->c);
    if (report(rc, "nexar_init_from_env")) return 1;
  } else {
    long rank, size;
    const char *store = getenv("BENCH_STORE");
    if (parse_int(getenv("BENCH_RANK"), 0, 65535, &rank) ||
        parse_int(getenv("BENCH_SIZE"), 1, 65536, &size) || rank >= size || !store) {
      fprintf(stderr, "bench_nexar: needs BENCH_RANK, BENCH_SIZE and BENCH_STORE "
                      "(scripts/launch-local.sh) or NEXAR_SEED_ADDR (nexar-run)\n");
      return 1;
    }
    if (rank == 0 && publish_seed(x, store, (uint32_t)size)) return 1;
    char addr[1024], tok[1024], num[32];
    if (read_seed(store, addr, sizeof addr, tok, sizeof tok)) return 1;
    /* join as nexar-run's children do, asking for our rank */
    snprintf(num, sizeof num, "%ld", rank);
    setenv("NEXAR_RANK", num, 1);
    snprintf(num, sizeof num, "%ld", size);
    setenv("NEXAR_WORLD_SIZE", num, 1);
    setenv("NEXAR_SEED_ADDR", addr, 1);
    setenv("NEXAR_CLUSTER_TOKEN", tok, 1);
    rc = nexar_init_from_env(&x->c);
    if (report(rc, "nexar_init_from_env")) return 1;
  }
  b->rank = (int)nexar_rank(x->c);
  b->size = (int)nexar_world_size(x->c);
  b->barrier = n_barrier;
  b->broadcast = n_broadcast;
  b->allgather = n_allgather;
  b->allreduce = n_allreduce;
  b->reduce_scatter = n_reduce_scatter;
  b->alltoall = n_alltoall;
  b->send = n_send;
  b->recv = n_recv;
  b->finalize = n_finalize;
  return 0;
}
