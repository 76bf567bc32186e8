/* Many non-blocking collectives in flight on one communicator need no
 * thread each: 4 ranks as threads each post 1,000 nexar_all_reduce_nb of
 * mixed sizes (8 B .. 1 MiB, f32 and i64, sum) before waiting for any, then
 * check every result; meanwhile a monitor samples the process's thread
 * count (/proc/self/task), which must stay within a small constant of its
 * value before the posts. (With a pool thread per collective this hung:
 * 256 workers ran collectives that waited for partners queued behind them.)
 * Also: a mix of every _nb collective kind outstanding at once. */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll_test.h"

#define NOPS 1000
#define NRANKS 4

static atomic_int max_threads, stop_monitor;

static int thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static void *monitor(void *arg) {
  (void)arg;
  while (!atomic_load(&stop_monitor)) {
    int n = thread_count();
    if (n > atomic_load(&max_threads)) atomic_store(&max_threads, n);
    usleep(1000);
  }
  return NULL;
}

/* Same on every rank: op i's element count and dtype. */
static size_t op_count(size_t i, nexar_dtype *dt) {
  uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  *dt = (x & 1) ? NEXAR_F32 : NEXAR_I64;
  size_t es = nexar_dtype_size(*dt);
  unsigned shift = (unsigned)((x >> 8) % 18); /* 8 B .. 1 MiB, log-uniform */
  size_t bytes = (size_t)8 << shift;
  if (bytes > (1u << 20)) bytes = 1u << 20;
  size_t c = bytes / es;
  return c ? c : 1;
}

static pthread_barrier_t ready, go;

static void many_allreduce(tctx *t) {
  void **bufs = t_xmalloc(NOPS * sizeof *bufs);
  nexar_request **reqs = t_xmalloc(NOPS * sizeof *reqs);
  for (size_t i = 0; i < NOPS; i++) {
    nexar_dtype dt;
    size_t c = op_count(i, &dt);
    bufs[i] = t_xmalloc(c * nexar_dtype_size(dt));
    t_fill(bufs[i], c, dt, NEXAR_SUM, t->rank, 0, (int)i);
  }
  pthread_barrier_wait(&ready);
  pthread_barrier_wait(&go);
  for (size_t i = 0; i < NOPS; i++) {
    nexar_dtype dt;
    size_t c = op_count(i, &dt);
    T_RC(t, nexar_all_reduce_nb(t->c, bufs[i], c, dt, NEXAR_SUM, &reqs[i]));
  }
  T_RC(t, nexar_wait_all(reqs, NOPS));
  for (size_t i = 0; i < NOPS; i++) {
    nexar_dtype dt;
    size_t c = op_count(i, &dt);
    void *exp = t_xmalloc(c * nexar_dtype_size(dt));
    t_fold(exp, c, dt, NEXAR_SUM, 0, t->n, 0, (int)i);
    char what[64];
    snprintf(what, sizeof what, "all_reduce_nb #%zu (%zu elements)", i, c);
    T_BUF(t, what, bufs[i], exp, c, dt);
    free(exp);
    free(bufs[i]);
  }
  free(bufs);
  free(reqs);
}

/* Every kind of _nb collective, several of each, outstanding together. */
#define MIXN 24
static void mixed_kinds(tctx *t) {
  uint32_t n = t->n, r = t->rank;
  size_t c = 1000;
  nexar_request *q[MIXN * 8];
  size_t nq = 0;
  float *ar[MIXN], *bc[MIXN], *ag_s[MIXN], *ag_r[MIXN], *rs_s[MIXN], *rs_r[MIXN];
  float *a2a_s[MIXN], *a2a_r[MIXN];
  for (int k = 0; k < MIXN; k++) {
    ar[k] = t_xmalloc(c * 4);
    t_fill(ar[k], c, NEXAR_F32, NEXAR_SUM, r, 0, k);
    bc[k] = t_xmalloc(c * 4);
    t_fill(bc[k], c, NEXAR_F32, NEXAR_SUM, r == (uint32_t)k % n ? 0 : 1 + r, 0, k);
    ag_s[k] = t_xmalloc(c * 4);
    t_fill(ag_s[k], c, NEXAR_F32, NEXAR_SUM, r, 0, k);
    ag_r[k] = t_xmalloc(c * 4 * n);
    rs_s[k] = t_xmalloc(c * 4 * n);
    t_fill(rs_s[k], c * n, NEXAR_F32, NEXAR_SUM, r, 0, k);
    rs_r[k] = t_xmalloc(c * 4);
    a2a_s[k] = t_xmalloc(c * 4 * n);
    t_fill(a2a_s[k], c * n, NEXAR_F32, NEXAR_SUM, r, 0, k);
    a2a_r[k] = t_xmalloc(c * 4 * n);
  }
  for (int k = 0; k < MIXN; k++) {
    T_RC(t, nexar_all_reduce_nb(t->c, ar[k], c, NEXAR_F32, NEXAR_SUM, &q[nq++]));
    T_RC(t, nexar_broadcast_nb(t->c, bc[k], c, NEXAR_F32, (uint32_t)k % n, &q[nq++]));
    T_RC(t, nexar_all_gather_nb(t->c, ag_s[k], ag_r[k], c, NEXAR_F32, &q[nq++]));
    T_RC(t, nexar_reduce_scatter_nb(t->c, rs_s[k], rs_r[k], c, NEXAR_F32, NEXAR_SUM, &q[nq++]));
    T_RC(t, nexar_all_to_all_nb(t->c, a2a_s[k], a2a_r[k], c, NEXAR_F32, &q[nq++]));
    T_RC(t, nexar_barrier_nb(t->c, &q[nq++]));
  }
  T_RC(t, nexar_wait_all(q, nq));
  float *exp = t_xmalloc(c * 4 * n);
  for (int k = 0; k < MIXN; k++) {
    t_fold(exp, c, NEXAR_F32, NEXAR_SUM, 0, n, 0, k);
    T_BUF(t, "all_reduce_nb", ar[k], exp, c, NEXAR_F32);
    t_fill(exp, c, NEXAR_F32, NEXAR_SUM, 0, 0, k);
    T_BUF(t, "broadcast_nb", bc[k], exp, c, NEXAR_F32);
    for (uint32_t s = 0; s < n; s++) {
      t_fill(exp, c, NEXAR_F32, NEXAR_SUM, s, 0, k);
      T_BUF(t, "all_gather_nb", ag_r[k] + (size_t)s * c, exp, c, NEXAR_F32);
      t_fill(exp, c, NEXAR_F32, NEXAR_SUM, s, (size_t)r * c, k);
      T_BUF(t, "all_to_all_nb", a2a_r[k] + (size_t)s * c, exp, c, NEXAR_F32);
    }
    t_fold(exp, c, NEXAR_F32, NEXAR_SUM, 0, n, (size_t)r * c, k);
    T_BUF(t, "reduce_scatter_nb", rs_r[k], exp, c, NEXAR_F32);
    free(ar[k]), free(bc[k]), free(ag_s[k]), free(ag_r[k]), free(rs_s[k]), free(rs_r[k]);
    free(a2a_s[k]), free(a2a_r[k]);
  }
  free(exp);
}

static void ranks_main(tctx *t) {
  many_allreduce(t);
  mixed_kinds(t);
}

/* Measures the baseline once the world and its rank threads exist but
 * before any collective is posted, then lets the ranks post. */
static int baseline = -1;
static void *measure(void *a) {
  (void)a;
  pthread_barrier_wait(&ready);
  baseline = thread_count();
  atomic_store(&max_threads, baseline);
  pthread_barrier_wait(&go);
  return NULL;
}

int main(void) {
  t_timeout_ms = 60000;
  pthread_barrier_init(&ready, NULL, NRANKS + 1);
  pthread_barrier_init(&go, NULL, NRANKS + 1);
  pthread_t mon, meas;
  pthread_create(&meas, NULL, measure, NULL);
  pthread_create(&mon, NULL, monitor, NULL);
  t_run_world(NRANKS, ranks_main, NULL);
  atomic_store(&stop_monitor, 1);
  pthread_join(mon, NULL);
  pthread_join(meas, NULL);
  int peak = atomic_load(&max_threads);
  fprintf(stderr,
          "threads: %d with the world before posting, peak %d with %d collectives in "
          "flight\n",
          baseline, peak, NOPS * NRANKS);
  /* a small constant above the world's own threads: no thread per collective */
  if (baseline < 0 || peak > baseline + 8) {
    fprintf(stderr, "FAIL: thread count grew from %d to %d\n", baseline, peak);
    return 1;
  }
  int f = t_failures();
  fprintf(stderr, "many_nb: %s\n", f ? "FAILED" : "ok");
  return f ? 1 : 0;
}
