/* Property tests of every collective against a locally computed reference:
 * ranks are threads over nexar_bootstrap_local, inputs differ per rank and
 * per element (a misplaced block or element is caught), results are compared
 * bit for bit. Usage: coll_prop_test SUITE, SUITE one of
 *   basic     worlds 1,2,3,4,5,7,8,9; counts 0, 1, n-1, n+1, 1009; every op
 *   algos     every algorithm of every collective forced, tiny segments
 *   dtypes    every dtype x op
 *   nb        several _nb collectives in flight, nexar_test, wait_all
 *   barrier   1000 barriers in a row
 *   split     children with reversed keys running every op, NEXAR_COLOR_NONE
 *   errors    invalid arguments and mismatched collectives, then recovery
 *   bitident  inexact float allreduce: the same bits on every rank, every algorithm
 *   large4    2,097,153 f32 at 4 ranks
 *   large8    10,000,000 f32 at 8 ranks */
#include "coll_test.h"
#include "collective/algo.h"
#include "runtime/comm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------- every operation */

typedef struct opcase {
  size_t count;
  nexar_dtype dt;
  nexar_op op;
  int salt;
} opcase;

static void check_allreduce_like(tctx *t, nexar_client *c, const opcase *k, int which) {
  uint32_t n = nexar_world_size(c), r = nexar_rank(c);
  size_t count = k->count, es = nexar_dtype_size(k->dt);
  char *buf = t_xmalloc(count * es), *exp = t_xmalloc(count * es);
  t_fill(buf, count, k->dt, k->op, r, 0, k->salt);
  t_fold(exp, count, k->dt, k->op, 0, n, 0, k->salt);
  if (which == 0) {
    T_RC(t, nexar_all_reduce(c, buf, count, k->dt, k->op));
    T_BUF(t, "all_reduce", buf, exp, count, k->dt);
  } else if (which == 1) {
    T_RC(t, nexar_all_reduce_rs_ag(c, buf, count, k->dt, k->op));
    T_BUF(t, "all_reduce_rs_ag", buf, exp, count, k->dt);
  } else {
    /* Three buckets in separate allocations, in index order. */
    size_t a = count / 3, b = count / 3, cc = count - a - b;
    char *p[3] = {t_xmalloc(a * es), t_xmalloc(b * es), t_xmalloc(cc * es)};
    nexar_bucket bk[3] = {{p[0], a}, {p[1], b}, {p[2], cc}};
    for (int i = 0; i < 3; i++)
      memcpy(p[i], buf + (i ? (i == 1 ? a : a + b) : 0) * es, bk[i].count * es);
    T_RC(t, nexar_all_reduce_bucketed(c, bk, 3, k->dt, k->op));
    T_BUF(t, "bucketed[0]", p[0], exp, a, k->dt);
    T_BUF(t, "bucketed[1]", p[1], exp + a * es, b, k->dt);
    T_BUF(t, "bucketed[2]", p[2], exp + (a + b) * es, cc, k->dt);
    for (int i = 0; i < 3; i++)
      free(p[i]);
  }
  free(buf);
  free(exp);
}

static void check_reduce_scatter(tctx *t, nexar_client *c, const opcase *k, int inplace) {
  uint32_t n = nexar_world_size(c), r = nexar_rank(c);
  size_t count = k->count, es = nexar_dtype_size(k->dt);
  char *send = t_xmalloc(count * es * n), *recv = t_xmalloc(count * es),
       *exp = t_xmalloc(count * es);
  t_fill(send, count * n, k->dt, k->op, r, 0, k->salt);
  t_fold(exp, count, k->dt, k->op, 0, n, (size_t)r * count, k->salt);
  char *out = inplace ? send + (size_t)r * count * es : recv;
  T_RC(t, nexar_reduce_scatter(c, send, out, count, k->dt, k->op));
  T_BUF(t, inplace ? "reduce_scatter in place" : "reduce_scatter", out, exp, count, k->dt);
  free(send);
  free(recv);
  free(exp);
}

static void check_reduce(tctx *t, nexar_client *c, const opcase *k, uint32_t root) {
  uint32_t n = nexar_world_size(c), r = nexar_rank(c);
  size_t count = k->count, es = nexar_dtype_size(k->dt);
  char *buf = t_xmalloc(count * es), *exp = t_xmalloc(count * es);
  t_fill(buf, count, k->dt, k->op, r, 0, k->salt);
  if (r == root)
    t_fold(exp, count, k->dt, k->op, 0, n, 0, k->salt);
  else
    memcpy(exp, buf, count * es); /* untouched */
  T_RC(t, nexar_reduce(c, buf, count, k->dt, k->op, root));
  T_BUF(t, r == root ? "reduce at root" : "reduce non-root untouched", buf, exp, count, k->dt);
  free(buf);
  free(exp);
}

static void check_bcast(tctx *t, nexar_client *c, const opcase *k, uint32_t root) {
  uint32_t r = nexar_rank(c);
  size_t count = k->count, es = nexar_dtype_size(k->dt);
  char *buf = t_xmalloc(count * es), *exp = t_xmalloc(count * es);
  t_fill(buf, count, k->dt, k->op, r, 0, k->salt);
  t_fill(exp, count, k->dt, k->op, root, 0, k->salt);
  T_RC(t, nexar_broadcast(c, buf, count, k->dt, root));
  T_BUF(t, "broadcast", buf, exp, count, k->dt);
  free(buf);
  free(exp);
}

static void expect_blocks(char *exp, const opcase *k, uint32_t n, size_t count) {
  size_t es = nexar_dtype_size(k->dt);
  for (uint32_t i = 0; i < n; i++)
    t_fill(exp + i * count * es, count, k->dt, k->op, i, 0, k->salt);
}

static void check_allgather(tctx *t, nexar_client *c, const opcase *k, int inplace) {
  uint32_t n = nexar_world_size(c), r = nexar_rank(c);
  size_t count = k->count, es = nexar_dtype_size(k->dt), blk = count * es;
  char *send = t_xmalloc(blk), *recv = t_xmalloc(blk * n), *exp = t_xmalloc(blk * n);
  memset(recv, 0xa5, blk * n);
  expect_blocks(exp, k, n, count);
  t_fill(inplace ? recv + r * blk : send, count, k->dt, k->op, r, 0, k->salt);
  T_RC(t, nexar_all_gather(c, inplace ? recv + r * blk : send, recv, count, k->dt));
  T_BUF(t, inplace ? "all_gather in place" : "all_gather", recv, exp, count * n, k->dt);
  free(send);
  free(recv);
  free(exp);
}

static void check_gather(tctx *t, nexar_client *c, const opcase *k, uint32_t root, int inplace) {
  uint32_t n = nexar_world_size(c), r = nexar_rank(c);
  size_t count = k->count, es = nexar_dtype_size(k->dt), blk = count * es;
  int at_root = r == root;
  char *send = t_xmalloc(blk), *recv = at_root ? t_xmalloc(blk * n) : NULL;
  char *exp = t_xmalloc(blk * n);
  if (recv) memset(recv, 0x5a, blk * n);
  expect_blocks(exp, k, n, count);
  char *src = (inplace && at_root) ? recv + r * blk : send;
  t_fill(src, count, k->dt, k->op, r, 0, k->salt);
  T_RC(t, nexar_gather(c, src, recv, count, k->dt, root));
  if (at_root) T_BUF(t, inplace ? "gather in place" : "gather", recv, exp, count * n, k->dt);
  free(send);
  free(recv);
  free(exp);
}

static void check_scatter(tctx *t, nexar_client *c, const opcase *k, uint32_t root, int inplace) {
  uint32_t n = nexar_world_size(c), r = nexar_rank(c);
  size_t count = k->count, es = nexar_dtype_size(k->dt), blk = count * es;
  int at_root = r == root;
  char *send = at_root ? t_xmalloc(blk * n) : NULL, *recv = t_xmalloc(blk), *exp = t_xmalloc(blk);
  if (send) t_fill(send, count * n, k->dt, k->op, root, 0, k->salt);
  t_fill(exp, count, k->dt, k->op, root, (size_t)r * count, k->salt);
  memset(recv, 0x33, blk);
  char *dst = (inplace && at_root) ? send + r * blk : recv;
  T_RC(t, nexar_scatter(c, send, dst, count, k->dt, root));
  T_BUF(t, inplace ? "scatter in place" : "scatter", dst, exp, count, k->dt);
  free(send);
  free(recv);
  free(exp);
}

static void check_alltoall(tctx *t, nexar_client *c, const opcase *k) {
  uint32_t n = nexar_world_size(c), r = nexar_rank(c);
  size_t count = k->count, es = nexar_dtype_size(k->dt), blk = count * es;
  char *send = t_xmalloc(blk * n), *recv = t_xmalloc(blk * n), *exp = t_xmalloc(blk * n);
  t_fill(send, count * n, k->dt, k->op, r, 0, k->salt);
  for (uint32_t i = 0; i < n; i++)
    t_fill(exp + i * blk, count, k->dt, k->op, i, (size_t)r * count, k->salt);
  T_RC(t, nexar_all_to_all(c, send, recv, count, k->dt));
  T_BUF(t, "all_to_all", recv, exp, count * n, k->dt);
  free(send);
  free(recv);
  free(exp);
}

static void check_scan(tctx *t, nexar_client *c, const opcase *k, int exclusive) {
  uint32_t r = nexar_rank(c);
  size_t count = k->count, es = nexar_dtype_size(k->dt);
  char *buf = t_xmalloc(count * es), *exp = t_xmalloc(count * es);
  t_fill(buf, count, k->dt, k->op, r, 0, k->salt);
  if (!exclusive)
    t_fold(exp, count, k->dt, k->op, 0, r + 1, 0, k->salt);
  else if (r == 0)
    t_identity(exp, count, k->dt, k->op);
  else
    t_fold(exp, count, k->dt, k->op, 0, r, 0, k->salt);
  if (exclusive)
    T_RC(t, nexar_exclusive_scan(c, buf, count, k->dt, k->op));
  else
    T_RC(t, nexar_scan(c, buf, count, k->dt, k->op));
  T_BUF(t, exclusive ? "exclusive_scan" : "scan", buf, exp, count, k->dt);
  free(buf);
  free(exp);
}

/* Every collective once (rooted ones at roots 0 and n-1, in-place forms). */
static void run_all_ops(tctx *t, nexar_client *c, const opcase *k) {
  uint32_t n = nexar_world_size(c);
  opcase x = *k;
  for (int w = 0; w < 3; w++, x.salt++)
    check_allreduce_like(t, c, &x, w);
  check_reduce_scatter(t, c, &x, 0);
  check_reduce_scatter(t, c, &x, 1);
  uint32_t roots[2] = {0, n - 1};
  for (int i = 0; i < 2; i++, x.salt++) {
    check_reduce(t, c, &x, roots[i]);
    check_bcast(t, c, &x, roots[i]);
    check_gather(t, c, &x, roots[i], i);
    check_scatter(t, c, &x, roots[i], i);
  }
  check_gather(t, c, &x, n / 2, 1);
  check_scatter(t, c, &x, n / 2, 0);
  check_allgather(t, c, &x, 0);
  check_allgather(t, c, &x, 1);
  check_alltoall(t, c, &x);
  check_scan(t, c, &x, 0);
  check_scan(t, c, &x, 1);
  T_RC(t, nexar_barrier(c));
}

static void counts_for(uint32_t n, size_t out[5]) {
  out[0] = 0;
  out[1] = 1;
  out[2] = n - 1;
  out[3] = n + 1;
  out[4] = 1009;
}

static void basic_rank(tctx *t) {
  static const struct {
    nexar_dtype dt;
    nexar_op op;
  } combos[] = {{NEXAR_I32, NEXAR_SUM},
                {NEXAR_F32, NEXAR_SUM},
                {NEXAR_F64, NEXAR_MAX},
                {NEXAR_I64, NEXAR_PROD},
                {NEXAR_U8, NEXAR_MIN}};
  size_t counts[5];
  counts_for(t->n, counts);
  for (int ci = 0; ci < 5; ci++)
    for (int k = 0; k < 2; k++) {
      int m = (ci + k * 2) % 5;
      opcase oc = {counts[ci], combos[m].dt, combos[m].op, ci * 7 + k};
      run_all_ops(t, t->c, &oc);
    }
}

static const uint32_t worlds[] = {1, 2, 3, 4, 5, 7, 8, 9};
#define NWORLDS (sizeof worlds / sizeof worlds[0])

static void suite_basic(void) {
  for (size_t i = 0; i < NWORLDS; i++)
    t_run_world(worlds[i], basic_rank, NULL);
}

/* -------------------------------------------------------------- forced */

static void algos_rank(tctx *t) {
  size_t counts[5];
  counts_for(t->n, counts);
  for (int ci = 1; ci < 5; ci++) {
    opcase a = {counts[ci], NEXAR_F32, NEXAR_SUM, ci};
    opcase b = {counts[ci], NEXAR_F64, NEXAR_MIN, ci + 3};
    opcase h = {counts[ci], NEXAR_F16, NEXAR_SUM, ci + 5};
    run_all_ops(t, t->c, &a);
    run_all_ops(t, t->c, &b);
    run_all_ops(t, t->c, &h);
  }
}

static void suite_algos(void) {
  /* Each pass forces one algorithm per collective; 28-byte segments make
   * segment boundaries fall inside elements of 8 bytes (floored to 3). */
  static const int ar[] = {NX_AR_RECDBL, NX_AR_HALVDBL, NX_AR_RING, NX_AR_RING_PIPE};
  static const uint32_t w[] = {2, 3, 5, 8, 9};
  for (int pass = 0; pass < 4; pass++) {
    nx_algo_force_allreduce = ar[pass];
    nx_algo_force_broadcast = pass % 2 ? NX_BC_CHAIN : NX_BC_BINOMIAL;
    nx_algo_force_allgather = pass % 2 ? NX_AG_RECDBL : NX_AG_RING;
    nx_algo_force_gather = pass % 2 ? NX_GS_DIRECT : NX_GS_BINOMIAL;
    nx_algo_force_scan = pass % 2 ? NX_SC_CHAIN : NX_SC_RECDBL;
    nx_algo_force_segment = pass >= 2 ? 28 : 0;
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
      t_run_world(w[i], algos_rank, NULL);
  }
  nx_algo_force_allreduce = nx_algo_force_broadcast = nx_algo_force_allgather = -1;
  nx_algo_force_gather = nx_algo_force_scan = -1;
  nx_algo_force_segment = 0;
}

/* -------------------------------------------------------------- dtypes */

static void dtypes_rank(tctx *t) {
  int salt = 0;
  for (int dt = NEXAR_F32; dt <= NEXAR_U64; dt++)
    for (int op = NEXAR_SUM; op <= NEXAR_MAX; op++, salt++) {
      opcase k = {37, (nexar_dtype)dt, (nexar_op)op, salt};
      for (int w = 0; w < 3; w++)
        check_allreduce_like(t, t->c, &k, w);
      check_reduce_scatter(t, t->c, &k, 0);
      check_reduce(t, t->c, &k, t->n - 1);
      check_scan(t, t->c, &k, 0);
      check_scan(t, t->c, &k, 1);
      check_bcast(t, t->c, &k, 1 % t->n);
      check_allgather(t, t->c, &k, 0);
    }
}

static void suite_dtypes(void) {
  t_run_world(3, dtypes_rank, NULL);
  /* Also through the ring and halving-doubling (recursive doubling above). */
  nx_algo_force_allreduce = NX_AR_RING;
  t_run_world(4, dtypes_rank, NULL);
  nx_algo_force_allreduce = NX_AR_HALVDBL;
  t_run_world(5, dtypes_rank, NULL);
  nx_algo_force_allreduce = -1;
}

/* ----------------------------------------------------------- non-blocking */

static void nb_rank(tctx *t) {
  nexar_client *c = t->c;
  uint32_t n = t->n, r = t->rank;
  for (int it = 0; it < 20; it++) {
    size_t count = (size_t)(it * 97 % 1500) + (it % 3 == 0 ? 0 : 1);
    size_t es = 4;
    nexar_dtype dt = it % 2 ? NEXAR_I32 : NEXAR_F32;
    nexar_op op = NEXAR_SUM;
    char *ar = t_xmalloc(count * es), *ar_e = t_xmalloc(count * es);
    char *bc = t_xmalloc(count * es), *bc_e = t_xmalloc(count * es);
    char *ags = t_xmalloc(count * es), *agr = t_xmalloc(count * es * n),
         *ag_e = t_xmalloc(count * es * n);
    char *rss = t_xmalloc(count * es * n), *rsr = t_xmalloc(count * es),
         *rs_e = t_xmalloc(count * es);
    char *sc = t_xmalloc(count * es), *sc_e = t_xmalloc(count * es);
    char *a2s = t_xmalloc(count * es * n), *a2r = t_xmalloc(count * es * n),
         *a2_e = t_xmalloc(count * es * n);
    char *b1 = t_xmalloc(count * es), *b2 = t_xmalloc(count * es),
         *bk_e = t_xmalloc(count * es * 2);
    int s = it * 10;
    t_fill(ar, count, dt, op, r, 0, s);
    t_fold(ar_e, count, dt, op, 0, n, 0, s);
    uint32_t root = (uint32_t)it % n;
    t_fill(bc, count, dt, op, r, 0, s + 1);
    t_fill(bc_e, count, dt, op, root, 0, s + 1);
    t_fill(ags, count, dt, op, r, 0, s + 2);
    for (uint32_t i = 0; i < n; i++)
      t_fill(ag_e + i * count * es, count, dt, op, i, 0, s + 2);
    t_fill(rss, count * n, dt, op, r, 0, s + 3);
    t_fold(rs_e, count, dt, op, 0, n, (size_t)r * count, s + 3);
    t_fill(sc, count, dt, op, r, 0, s + 4);
    t_fold(sc_e, count, dt, op, 0, r + 1, 0, s + 4);
    t_fill(a2s, count * n, dt, op, r, 0, s + 5);
    for (uint32_t i = 0; i < n; i++)
      t_fill(a2_e + i * count * es, count, dt, op, i, (size_t)r * count, s + 5);
    t_fill(b1, count, dt, op, r, 0, s + 6);
    t_fill(b2, count, dt, op, r, count, s + 6);
    t_fold(bk_e, 2 * count, dt, op, 0, n, 0, s + 6);
    nexar_bucket bk[2] = {{b1, count}, {b2, count}};
    nexar_request *q[8] = {0};
    T_RC(t, nexar_all_reduce_nb(c, ar, count, dt, op, &q[0]));
    T_RC(t, nexar_broadcast_nb(c, bc, count, dt, root, &q[1]));
    T_RC(t, nexar_all_gather_nb(c, ags, agr, count, dt, &q[2]));
    T_RC(t, nexar_barrier_nb(c, &q[3]));
    T_RC(t, nexar_reduce_scatter_nb(c, rss, rsr, count, dt, op, &q[4]));
    T_RC(t, nexar_scan_nb(c, sc, count, dt, op, &q[5]));
    T_RC(t, nexar_all_to_all_nb(c, a2s, a2r, count, dt, &q[6]));
    T_RC(t, nexar_all_reduce_bucketed_nb(c, bk, 2, dt, op, &q[7]));
    if (it % 2) {
      int done = 0;
      for (int spin = 0; !done; spin++) {
        T_RC(t, nexar_test(q[3], &done));
        if (!done) nanosleep(&(struct timespec){0, 100000}, NULL);
      }
    }
    T_RC(t, nexar_wait_all(q, 8));
    for (int i = 0; i < 8; i++)
      T_CHECK(t, q[i] == NULL, "wait_all left reqs[%d]", i);
    T_BUF(t, "all_reduce_nb", ar, ar_e, count, dt);
    T_BUF(t, "broadcast_nb", bc, bc_e, count, dt);
    T_BUF(t, "all_gather_nb", agr, ag_e, count * n, dt);
    T_BUF(t, "reduce_scatter_nb", rsr, rs_e, count, dt);
    T_BUF(t, "scan_nb", sc, sc_e, count, dt);
    T_BUF(t, "all_to_all_nb", a2r, a2_e, count * n, dt);
    T_BUF(t, "bucketed_nb[0]", b1, bk_e, count, dt);
    T_BUF(t, "bucketed_nb[1]", b2, bk_e + count * es, count, dt);
    char *ptrs[] = {ar,   ar_e, bc,   bc_e, ags, agr,  ag_e, rss, rsr,
                    rs_e, sc,   sc_e, a2s,  a2r, a2_e, b1,   b2,  bk_e};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
      free(ptrs[i]);
  }
  /* The other _nb forms, waited one by one in reverse order. */
  size_t count = 101;
  float *a = t_xmalloc(count * 4 * n), *b = t_xmalloc(count * 4 * n), *e = t_xmalloc(count * 4 * n);
  float *d = t_xmalloc(count * 4), *g = t_xmalloc(count * 4), *ex = t_xmalloc(count * 4);
  t_fill(a, count, NEXAR_F32, NEXAR_MAX, r, 0, 1);
  t_fill(d, count, NEXAR_F32, NEXAR_SUM, r, 0, 2);
  t_fill(g, count, NEXAR_F32, NEXAR_PROD, r, 0, 3);
  t_fill(ex, count, NEXAR_F32, NEXAR_SUM, r, 0, 4);
  nexar_request *q[5];
  T_RC(t, nexar_reduce_nb(c, a, count, NEXAR_F32, NEXAR_MAX, n - 1, &q[0]));
  T_RC(t, nexar_all_reduce_rs_ag_nb(c, d, count, NEXAR_F32, NEXAR_SUM, &q[1]));
  T_RC(t, nexar_exclusive_scan_nb(c, ex, count, NEXAR_F32, NEXAR_SUM, &q[2]));
  t_fill(b, count, NEXAR_F32, NEXAR_SUM, r, 0, 5);
  T_RC(t, nexar_gather_nb(c, b, r == 0 ? e : NULL, count, NEXAR_F32, 0, &q[3]));
  float *sc_send = r == 1 % n ? t_xmalloc(count * 4 * n) : NULL;
  if (sc_send) t_fill(sc_send, count * n, NEXAR_F32, NEXAR_PROD, r, 0, 6);
  T_RC(t, nexar_scatter_nb(c, sc_send, g, count, NEXAR_F32, 1 % n, &q[4]));
  for (int i = 4; i >= 0; i--)
    T_RC(t, nexar_wait(q[i]));
  float *exp = t_xmalloc(count * 4 * n);
  if (r == n - 1) {
    t_fold(exp, count, NEXAR_F32, NEXAR_MAX, 0, n, 0, 1);
    T_BUF(t, "reduce_nb", a, exp, count, NEXAR_F32);
  }
  t_fold(exp, count, NEXAR_F32, NEXAR_SUM, 0, n, 0, 2);
  T_BUF(t, "all_reduce_rs_ag_nb", d, exp, count, NEXAR_F32);
  if (r == 0)
    t_identity(exp, count, NEXAR_F32, NEXAR_SUM);
  else
    t_fold(exp, count, NEXAR_F32, NEXAR_SUM, 0, r, 0, 4);
  T_BUF(t, "exclusive_scan_nb", ex, exp, count, NEXAR_F32);
  t_fill(exp, count, NEXAR_F32, NEXAR_PROD, 1 % n, (size_t)r * count, 6);
  T_BUF(t, "scatter_nb", g, exp, count, NEXAR_F32);
  if (r == 0) {
    for (uint32_t i = 0; i < n; i++)
      t_fill(exp + i * count, count, NEXAR_F32, NEXAR_SUM, i, 0, 5);
    T_BUF(t, "gather_nb", e, exp, count * n, NEXAR_F32);
  }
  free(a);
  free(b);
  free(e);
  free(d);
  free(g);
  free(ex);
  free(exp);
  free(sc_send);
}

static void suite_nb(void) {
  t_run_world(5, nb_rank, NULL);
  t_run_world(4, nb_rank, NULL);
  t_run_world(1, nb_rank, NULL);
}

/* -------------------------------------------------------------- barrier */

static void barrier_rank(tctx *t) {
  for (int i = 0; i < 1000; i++)
    T_RC(t, nexar_barrier(t->c));
}

static void suite_barrier(void) {
  t_run_world(5, barrier_rank, NULL);
}

/* ---------------------------------------------------------------- split */

typedef struct split_info {
  uint64_t ids[16];
} split_info;

static void split_rank(tctx *t) {
  split_info *si = t->arg;
  uint32_t n = t->n, r = t->rank;
  /* The last rank opts out; the others form two colors, keys reversed. */
  uint32_t color = r == n - 1 ? NEXAR_COLOR_NONE : r % 2;
  nexar_client *child = (nexar_client *)1;
  T_RC(t, nexar_split(t->c, color, n - r, &child));
  if (color == NEXAR_COLOR_NONE) {
    T_CHECK(t, child == NULL, "COLOR_NONE gave a communicator");
    T_RC(t, nexar_barrier(t->c));
    return;
  }
  if (!child) t_fatal(t, __LINE__, "split gave NULL");
  /* Members: ranks of my color except n-1, ordered by key n-r: descending. */
  uint32_t size = 0, pos = 0;
  for (uint32_t i = 0; i < n - 1; i++)
    if (i % 2 == color) {
      size++;
      if (i > r) pos++;
    }
  T_CHECK(t, nexar_world_size(child) == size, "child size %u, expected %u", nexar_world_size(child),
          size);
  T_CHECK(t, nexar_rank(child) == pos, "child rank %u, expected %u", nexar_rank(child), pos);
  uint64_t id = nexar_comm_id(child);
  T_CHECK(t, id != 0 && id != nexar_comm_id(t->c), "child comm id %llu", (unsigned long long)id);
  si->ids[r] = id;
  tctx ct = *t;
  ct.rank = nexar_rank(child);
  ct.n = size;
  size_t counts[4] = {0, 1, size + 1, 1009};
  for (int i = 0; i < 4; i++) {
    opcase k = {counts[i], i % 2 ? NEXAR_I32 : NEXAR_F32, NEXAR_SUM, i};
    run_all_ops(&ct, child, &k);
  }
  /* A split of the child, and the parent still works. */
  nexar_client *gc = NULL;
  T_RC(t, nexar_split(child, 0, 0, &gc));
  T_CHECK(t, gc && nexar_world_size(gc) == size && nexar_rank(gc) == nexar_rank(child),
          "grandchild shape");
  if (gc) {
    T_CHECK(t, nexar_comm_id(gc) != id, "grandchild reuses the child's id");
    opcase k = {33, NEXAR_I64, NEXAR_MAX, 9};
    tctx gt = ct;
    check_allreduce_like(&gt, gc, &k, 0);
    nexar_client_del(gc);
  }
  nexar_client_del(child);
  T_RC(t, nexar_barrier(t->c));
}

static void suite_split(void) {
  split_info si;
  memset(&si, 0, sizeof si);
  t_run_world(7, split_rank, &si);
  /* Same color, same id; different colors, different ids. */
  for (uint32_t a = 0; a < 6; a++)
    for (uint32_t b = 0; b < 6; b++)
      if ((a % 2 == b % 2) != (si.ids[a] == si.ids[b]))
        t_fail(NULL, __LINE__, "comm ids of ranks %u and %u: %llu vs %llu", a, b,
               (unsigned long long)si.ids[a], (unsigned long long)si.ids[b]);
  t_run_world(2, split_rank, &si);
}

/* --------------------------------------------------------------- errors */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void expect_ok_after(tctx *t) {
  opcase k = {17, NEXAR_I32, NEXAR_SUM, 3};
  check_allreduce_like(t, t->c, &k, 0);
}

static void errors_rank(tctx *t) {
  nexar_client *c = t->c;
  uint32_t n = t->n, r = t->rank;
  float buf[64] = {0}, big[64 * 8] = {0};
  nexar_request *q = (nexar_request *)1;
  /* The same bad argument everywhere: every rank rejects it. */
  T_CHECK(t, nexar_all_reduce(c, buf, 4, (nexar_dtype)42, NEXAR_SUM) == NEXAR_ERR_INVALID_ARGUMENT,
          "bad dtype");
  T_CHECK(t, nexar_all_reduce(c, buf, 4, NEXAR_F32, (nexar_op)9) == NEXAR_ERR_INVALID_ARGUMENT,
          "bad op");
  T_CHECK(t, nexar_all_reduce(c, NULL, 4, NEXAR_F32, NEXAR_SUM) == NEXAR_ERR_INVALID_ARGUMENT,
          "NULL buf");
  T_CHECK(t, nexar_all_reduce(c, NULL, 0, NEXAR_F32, NEXAR_SUM) == 0, "NULL buf, count 0");
  T_CHECK(t, nexar_broadcast(c, buf, 4, NEXAR_F32, n) == NEXAR_ERR_INVALID_RANK, "root n");
  T_CHECK(t, nexar_reduce(c, buf, 4, NEXAR_F32, NEXAR_SUM, UINT32_MAX) == NEXAR_ERR_INVALID_RANK,
          "root max");
  T_CHECK(t, nexar_all_gather(c, big + 1, big, 4, NEXAR_F32) == NEXAR_ERR_INVALID_ARGUMENT,
          "allgather overlap");
  T_CHECK(t, nexar_all_to_all(c, big, big, 4, NEXAR_F32) == NEXAR_ERR_INVALID_ARGUMENT,
          "alltoall in place");
  T_CHECK(t,
          nexar_reduce_scatter(c, big, big + 1, 4, NEXAR_F32, NEXAR_SUM) ==
              NEXAR_ERR_INVALID_ARGUMENT,
          "reduce_scatter overlap");
  T_CHECK(t, nexar_all_gather(c, big, big, SIZE_MAX / 2, NEXAR_F32) == NEXAR_ERR_INVALID_ARGUMENT,
          "overflow");
  nexar_bucket bk[2] = {{big, 8}, {big + 4, 8}};
  T_CHECK(t,
          nexar_all_reduce_bucketed(c, bk, 2, NEXAR_F32, NEXAR_SUM) == NEXAR_ERR_INVALID_ARGUMENT,
          "buckets overlap");
  T_CHECK(t,
          nexar_all_reduce_nb(c, NULL, 3, NEXAR_F32, NEXAR_SUM, &q) == NEXAR_ERR_INVALID_ARGUMENT &&
              q == NULL,
          "_nb rejected must set *req = NULL");
  T_CHECK(t, nexar_split(c, 0, 0, NULL) == NEXAR_ERR_INVALID_ARGUMENT, "split out NULL");
  T_CHECK(t, nexar_all_reduce(NULL, buf, 1, NEXAR_F32, NEXAR_SUM) == NEXAR_ERR_INVALID_ARGUMENT,
          "NULL client");
  expect_ok_after(t);

  /* One rank's bad argument: it gets INVALID_ARGUMENT, the others an error
   * (never a hang), and the communicator stays in step. */
  int rc = nexar_all_reduce(c, r == 1 ? NULL : buf, 4, NEXAR_F32, NEXAR_SUM);
  T_CHECK(t, r == 1 ? rc == NEXAR_ERR_INVALID_ARGUMENT : rc != 0, "one bad rank: rc %d", rc);
  expect_ok_after(t);

  /* rank 0 all_reduce, the others broadcast. */
  double t0 = now_s();
  if (r == 0)
    rc = nexar_all_reduce(c, buf, 10, NEXAR_F32, NEXAR_SUM);
  else
    rc = nexar_broadcast(c, buf, 10, NEXAR_F32, 0);
  T_CHECK(t, rc == NEXAR_ERR_MISMATCH, "all_reduce vs broadcast: rc %d (%s)", rc,
          nexar_last_error());
  T_CHECK(t, now_s() - t0 < t_timeout_ms / 1000.0, "mismatch took %.1f s", now_s() - t0);
  expect_ok_after(t);

  /* Different counts. */
  t0 = now_s();
  rc = nexar_all_reduce(c, buf, r == 2 % n ? 11 : 10, NEXAR_F32, NEXAR_SUM);
  T_CHECK(t, rc == NEXAR_ERR_MISMATCH, "counts 10 vs 11: rc %d (%s)", rc, nexar_last_error());
  T_CHECK(t, now_s() - t0 < t_timeout_ms / 1000.0, "mismatch took %.1f s", now_s() - t0);
  expect_ok_after(t);

  /* Counts 1 vs 2, and all_reduce against a blocking barrier: on a world of
   * 2 and on power-of-two worlds the first data frame stands in for the
   * signature token, which these must still catch. */
  rc = nexar_all_reduce(c, buf, r == 0 ? 1 : 2, NEXAR_F32, NEXAR_SUM);
  T_CHECK(t, rc == NEXAR_ERR_MISMATCH, "counts 1 vs 2: rc %d (%s)", rc, nexar_last_error());
  expect_ok_after(t);
  rc = r == n - 1 ? nexar_barrier(c) : nexar_all_reduce(c, buf, 4, NEXAR_F32, NEXAR_SUM);
  T_CHECK(t, rc == NEXAR_ERR_MISMATCH, "all_reduce vs barrier: rc %d (%s)", rc, nexar_last_error());
  expect_ok_after(t);

  /* Different ops (sum vs max). */
  rc = nexar_all_reduce(c, big, 64 * 8, NEXAR_F32, r == 0 ? NEXAR_MAX : NEXAR_SUM);
  T_CHECK(t, rc == NEXAR_ERR_MISMATCH, "sum vs max: rc %d (%s)", rc, nexar_last_error());
  expect_ok_after(t);

  /* Mismatched _nb: reported by the wait. (Both need data from every
   * rank; a rank that only sends, like a broadcast root, may finish before
   * any peer could object.) */
  nexar_request *q2 = NULL;
  if (r == n - 1)
    rc = nexar_barrier_nb(c, &q2);
  else
    rc = nexar_all_reduce_nb(c, buf, 5, NEXAR_I32, NEXAR_SUM, &q2);
  T_CHECK(t, rc == 0 && q2, "_nb start");
  if (q2) {
    rc = nexar_wait(q2);
    T_CHECK(t, rc == NEXAR_ERR_MISMATCH, "barrier vs all_reduce: rc %d (%s)", rc,
            nexar_last_error());
  }
  expect_ok_after(t);
}

static void suite_errors(void) {
  t_run_world(4, errors_rank, NULL);
  t_run_world(3, errors_rank, NULL);
  t_run_world(2, errors_rank, NULL);
}

/* ------------------------------------------------------------- bitident */

#define BI_MAX 1009

typedef struct bi_shared {
  unsigned char res[16][BI_MAX * 8];
} bi_shared;

/* Every rank publishes its result, then compares it with rank 0's. */
static void bi_compare(tctx *t, bi_shared *sh, const void *buf, size_t bytes, const char *what,
                       nexar_dtype dt, nexar_op op) {
  memcpy(sh->res[t->rank], buf, bytes);
  T_RC(t, nexar_barrier(t->c));
  if (memcmp(sh->res[t->rank], sh->res[0], bytes))
    t_fail(t, __LINE__, "%s %s/%s: result differs from rank 0's", what, nexar_dtype_name(dt),
           nexar_op_name(op));
  T_RC(t, nexar_barrier(t->c));
}

static void bitident_rank(tctx *t) {
  bi_shared *sh = t->arg;
  static const nexar_dtype dts[] = {NEXAR_F32, NEXAR_F64, NEXAR_F16, NEXAR_BF16};
  static const size_t counts[] = {1, 13, BI_MAX};
  unsigned char buf[BI_MAX * 8];
  int salt = 0;
  for (size_t d = 0; d < 4; d++)
    for (int op = NEXAR_SUM; op <= NEXAR_PROD; op++)
      for (size_t ci = 0; ci < 3; ci++, salt++) {
        nexar_dtype dt = dts[d];
        size_t count = counts[ci], bytes = count * nexar_dtype_size(dt);
        t_fill_inexact(buf, count, dt, (nexar_op)op, t->rank, salt);
        T_RC(t, nexar_all_reduce(t->c, buf, count, dt, (nexar_op)op));
        bi_compare(t, sh, buf, bytes, "all_reduce", dt, (nexar_op)op);
        t_fill_inexact(buf, count, dt, (nexar_op)op, t->rank, salt);
        T_RC(t, nexar_all_reduce_rs_ag(t->c, buf, count, dt, (nexar_op)op));
        bi_compare(t, sh, buf, bytes, "all_reduce_rs_ag", dt, (nexar_op)op);
        t_fill_inexact(buf, count, dt, (nexar_op)op, t->rank, salt);
        nexar_bucket bk[2] = {{buf, count / 2},
                              {buf + (count / 2) * nexar_dtype_size(dt), count - count / 2}};
        T_RC(t, nexar_all_reduce_bucketed(t->c, bk, 2, dt, (nexar_op)op));
        bi_compare(t, sh, buf, bytes, "all_reduce_bucketed", dt, (nexar_op)op);
      }
}

static void suite_bitident(void) {
  static const int ar[] = {-1, NX_AR_RECDBL, NX_AR_HALVDBL, NX_AR_RING, NX_AR_RING_PIPE};
  static const uint32_t w[] = {2, 3, 5, 8, 9};
  bi_shared *sh = t_xmalloc(sizeof *sh);
  for (int pass = 0; pass < 5; pass++) {
    nx_algo_force_allreduce = ar[pass];
    nx_algo_force_segment = ar[pass] == NX_AR_RING_PIPE ? 28 : 0;
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
      t_run_world(w[i], bitident_rank, sh);
  }
  nx_algo_force_allreduce = -1;
  nx_algo_force_segment = 0;
  free(sh);
}

/* ---------------------------------------------------------------- large */

typedef struct large_arg {
  size_t count;
  float *exp;
} large_arg;

static void large_rank(tctx *t) {
  large_arg *la = t->arg;
  size_t count = la->count;
  float *buf = t_xmalloc(count * sizeof(float));
  t_fill(buf, count, NEXAR_F32, NEXAR_SUM, t->rank, 0, 1);
  double t0 = now_s();
  T_RC(t, nexar_all_reduce(t->c, buf, count, NEXAR_F32, NEXAR_SUM));
  if (t->rank == 0)
    fprintf(stderr, "  all_reduce %zu f32 at %u ranks: %.2f s\n", count, t->n, now_s() - t0);
  T_BUF(t, "large all_reduce", buf, la->exp, count, NEXAR_F32);
  if (count < 4000000) {
    t_fill(buf, count, NEXAR_F32, NEXAR_SUM, t->rank, 0, 1);
    T_RC(t, nexar_all_reduce_rs_ag(t->c, buf, count, NEXAR_F32, NEXAR_SUM));
    T_BUF(t, "large all_reduce_rs_ag", buf, la->exp, count, NEXAR_F32);
    t_fill(buf, count, NEXAR_F32, NEXAR_SUM, t->rank, 0, 1);
    T_RC(t, nexar_broadcast(t->c, buf, count, NEXAR_F32, t->n - 1));
    float *e = t_xmalloc(count * sizeof(float));
    t_fill(e, count, NEXAR_F32, NEXAR_SUM, t->n - 1, 0, 1);
    T_BUF(t, "large broadcast", buf, e, count, NEXAR_F32);
    free(e);
    /* a reduce_scatter whose scratch (two blocks of count / n) is above
     * NX_SCRATCH_KEEP_MIN: the communicator keeps it for the next one
     * (fresh 32 MiB blocks each call made 64 MiB at n = 4 take 40x longer,
     * page faults), whose result must not see what the first left there */
    opcase k = {.count = count / t->n, .dt = NEXAR_F32, .op = NEXAR_SUM, .salt = 0};
    check_reduce_scatter(t, t->c, &k, 0);
    size_t cap = 0;
    void *kept = nx_comm_scratch_take(t->c, 1, &cap);
    T_CHECK(t, kept && cap >= NX_SCRATCH_KEEP_MIN, "reduce_scatter's scratch was not kept");
    if (kept) nx_comm_scratch_give(t->c, kept, cap);
    k.salt = 1;
    check_reduce_scatter(t, t->c, &k, 0);
  }
  free(buf);
}

static void suite_large(uint32_t n, size_t count) {
  large_arg la = {count, t_xmalloc(count * sizeof(float))};
  t_fold(la.exp, count, NEXAR_F32, NEXAR_SUM, 0, n, 0, 1);
  t_run_world(n, large_rank, &la);
  free(la.exp);
}

int main(int argc, char **argv) {
  const char *s = argc > 1 ? argv[1] : "basic";
  const char *to = getenv("NX_TEST_TIMEOUT_MS");
  if (to) t_timeout_ms = (uint32_t)strtoul(to, NULL, 10);
  double t0 = now_s();
  if (!strcmp(s, "basic"))
    suite_basic();
  else if (!strcmp(s, "algos"))
    suite_algos();
  else if (!strcmp(s, "dtypes"))
    suite_dtypes();
  else if (!strcmp(s, "nb"))
    suite_nb();
  else if (!strcmp(s, "barrier"))
    suite_barrier();
  else if (!strcmp(s, "split"))
    suite_split();
  else if (!strcmp(s, "errors"))
    suite_errors();
  else if (!strcmp(s, "bitident"))
    suite_bitident();
  else if (!strcmp(s, "large4"))
    suite_large(4, 2097153);
  else if (!strcmp(s, "large8"))
    suite_large(8, 10000000);
  else {
    fprintf(stderr, "unknown suite %s\n", s);
    return 2;
  }
  int f = t_failures();
  fprintf(stderr, "%s: %s (%d failures, %.1f s)\n", s, f ? "FAILED" : "ok", f, now_s() - t0);
  return f ? 1 : 0;
}
