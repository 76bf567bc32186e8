/* states.c - one collective (or ping-pong) in short bursts, each after a
 * probe that tells which state the VM is in, for bench/states.sh.
 *
 * Why: this 2-vCPU VM switches, every few seconds, between its two vCPUs
 * sharing a core (a cache line moves in ~0.04 us) and not (~0.2 us;
 * bench/ring_lines.c), and every library's same-host times move with it:
 * 64 KiB ping-pong one-way 13-17 us against 42-45 us for Open MPI's default
 * shared memory. A run of compare.sh that met one state for one library and
 * the other state for the other reports a ratio of 3 either way. Here each
 * burst (about 10 ms) follows a probe, 300 round trips of 8 bytes between
 * ranks 0 and 1 whose median one-way time classifies it, so the times of
 * two libraries compare within a state.
 *
 * Built against the shared harness's backends (bench.h): states.sh.
 *
 *   states_IMPL COLL SIZE BURSTS [THRESHOLD_US]
 *
 * COLL: pingpong allreduce broadcast allgather reduce_scatter alltoall
 * barrier; SIZE as the harness counts it (ping-pong and broadcast: the
 * message; all_gather, all_to_all, reduce_scatter: the whole receive or
 * send buffer, SIZE / n a rank; all_reduce: the vector). Rank 0 prints
 *   states IMPL COLL SIZE NFAST FAST_US NSLOW SLOW_US
 * with the median time of an operation (ping-pong: one way) over the
 * bursts whose probe was below the threshold (0.25 us one way) and over
 * the others. Exits 1 if an operation fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

static bench_backend_t B;
static char *sbuf, *rbuf, probe_buf[64];

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void check(int rc, const char *what) {
  if (rc) {
    fprintf(stderr, "states: %s failed on rank %d\n", what, B.rank);
    exit(1);
  }
}

static void pingpong(void *buf, size_t n) {
  if (B.rank == 0) {
    check(B.send(&B, buf, n, 1, 7), "send");
    check(B.recv(&B, buf, n, 1, 8), "recv");
  } else if (B.rank == 1) {
    check(B.recv(&B, buf, n, 0, 7), "recv");
    check(B.send(&B, buf, n, 0, 8), "send");
  }
}

enum { PINGPONG, ALLREDUCE, BROADCAST, ALLGATHER, REDUCE_SCATTER, ALLTOALL, BARRIER, NCOLL };
static const char *names[NCOLL] = {"pingpong",       "allreduce", "broadcast", "allgather",
                                   "reduce_scatter", "alltoall",  "barrier"};

static void op(int c, size_t n) {
  size_t per = n / (size_t)B.size;
  switch (c) {
  case PINGPONG:
    pingpong(sbuf, n);
    break;
  case ALLREDUCE:
    check(B.allreduce(&B, sbuf, n / 4, BENCH_F32, BENCH_SUM), "allreduce");
    break;
  case BROADCAST:
    check(B.broadcast(&B, sbuf, n, 0), "broadcast");
    break;
  case ALLGATHER:
    check(B.allgather(&B, sbuf, rbuf, per), "allgather");
    break;
  case REDUCE_SCATTER:
    check(B.reduce_scatter(&B, sbuf, rbuf, per / 4, BENCH_F32, BENCH_SUM), "reduce_scatter");
    break;
  case ALLTOALL:
    check(B.alltoall(&B, sbuf, rbuf, per), "alltoall");
    break;
  case BARRIER:
    check(B.barrier(&B), "barrier");
    break;
  }
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  if (!n) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp);
  return v[n / 2];
}

int main(int argc, char **argv) {
  if (bench_backend_init(&B, &argc, &argv)) return 1;
  if (argc < 4 || B.size < 2) {
    fprintf(stderr, "usage: states COLL SIZE BURSTS [THRESHOLD_US] (2 ranks or more)\n");
    return 1;
  }
  int c = -1;
  for (int i = 0; i < NCOLL; i++)
    if (!strcmp(argv[1], names[i])) c = i;
  size_t n = strtoul(argv[2], NULL, 0);
  int k = atoi(argv[3]);
  double threshold = argc > 4 ? atof(argv[4]) : 0.25;
  if (c < 0 || n < 8 || k < 1) {
    fprintf(stderr, "states: bad arguments\n");
    return 1;
  }
  sbuf = calloc(1, n + 64);
  rbuf = calloc((size_t)B.size, n + 64);
  double *probe = calloc((size_t)k, sizeof *probe), *t = calloc((size_t)k, sizeof *t);
  double rt[300];
  if (!sbuf || !rbuf || !probe || !t) return 1;

  for (int i = 0; i < 20; i++)
    op(c, n), pingpong(probe_buf, 8);
  double t0 = now();
  for (int i = 0; i < 5; i++)
    op(c, n);
  double est = (now() - t0) / 5;
  check(B.broadcast(&B, &est, sizeof est, 0), "broadcast");
  long m = (long)(0.01 / (est > 1e-7 ? est : 1e-7));
  if (m < 3) m = 3;
  if (m > 20000) m = 20000;

  for (int b = 0; b < k; b++) {
    check(B.barrier(&B), "barrier");
    double t1 = now();
    for (int i = 0; i < 300; i++) { /* the median: the first after a collective may wait */
      pingpong(probe_buf, 8);
      double t2 = now();
      rt[i] = t2 - t1, t1 = t2;
    }
    probe[b] = median(rt, 300) / 2 * 1e6;
    t0 = now();
    for (long i = 0; i < m; i++)
      op(c, n);
    t[b] = (now() - t0) / (double)m / (c == PINGPONG ? 2 : 1) * 1e6;
  }
  if (B.rank == 0) {
    double *fast = calloc((size_t)k, sizeof *fast), *slow = calloc((size_t)k, sizeof *slow);
    int nf = 0, ns = 0;
    for (int b = 0; b < k; b++) {
      if (probe[b] < threshold)
        fast[nf++] = t[b];
      else
        slow[ns++] = t[b];
    }
    printf("states %s %s %zu %d %.3f %d %.3f\n", B.impl, names[c], n, nf, median(fast, nf), ns,
           median(slow, ns));
    free(fast);
    free(slow);
  }
  check(B.barrier(&B), "barrier");
  if (B.finalize) B.finalize(&B);
  return 0;
}
