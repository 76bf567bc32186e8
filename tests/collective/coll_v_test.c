/* The C API additions of issue 14, as threads over nexar_bootstrap_local,
 * against references computed here (coll_util.c). Usage: coll_v_test SUITE:
 *   ops       avg/band/bor/bxor in every reducing collective, 8 dtypes, every
 *             allreduce algorithm; refusals (bitwise on floats, avg in scans);
 *             avg allreduce of inexact floats bit-identical on every rank
 *   v         the variable-count collectives: uneven, zero and all-zero
 *             counts, displs NULL and given (reversed, with gaps), in place,
 *             8 dtypes, worlds 1-5 and 8
 *   vnb       several _v _nb collectives in flight, counts freed at once
 *   verr      mismatched counts, wrong sizes, overlaps, overflow; the
 *             communicator keeps working after each
 *   vlarge    blocks of several MiB (rendezvous path), segmented ring
 *   sendrecv  pair exchange of 9 MiB both ways, self, ring shift, refusals
 *   proc      ops, v, vnb, verr, sendrecv with one process per rank (under
 *             nexar-run, which sets NEXAR_SEED_ADDR) */
#include "coll_test.h"
#include "collective/algo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const nexar_dtype dts8[] = {NEXAR_F32, NEXAR_F64, NEXAR_F16, NEXAR_BF16,
                                   NEXAR_I8,  NEXAR_U8,  NEXAR_I32, NEXAR_I64};

static int is_int(nexar_dtype dt) {
  return dt != NEXAR_F32 && dt != NEXAR_F64 && dt != NEXAR_F16 && dt != NEXAR_BF16;
}

/* ------------------------------------------------------------------ ops */

static void ops_one(tctx *t, size_t count, nexar_dtype dt, nexar_op op, int salt) {
  nexar_client *c = t->c;
  uint32_t n = t->n, r = t->rank;
  size_t es = nexar_dtype_size(dt);
  /* room for reduce_scatter_v's blocks of up to 4 elements too */
  char *buf = t_xmalloc((count + 5) * es * n), *exp = t_xmalloc((count + 5) * es * n);
  char *out = t_xmalloc((count + 5) * es);
  char what[96];
  snprintf(what, sizeof what, "%s %s count %zu", nexar_op_name(op), nexar_dtype_name(dt), count);
  /* all_reduce, rs_ag */
  t_fold(exp, count, dt, op, 0, n, 0, salt);
  t_fill(buf, count, dt, op, r, 0, salt);
  T_RC(t, nexar_all_reduce(c, buf, count, dt, op));
  T_BUF(t, what, buf, exp, count, dt);
  t_fill(buf, count, dt, op, r, 0, salt);
  T_RC(t, nexar_all_reduce_rs_ag(c, buf, count, dt, op));
  T_BUF(t, what, buf, exp, count, dt);
  /* bucketed: two buckets */
  t_fill(buf, count, dt, op, r, 0, salt);
  size_t h = count / 2;
  char *b2 = t_xmalloc((count - h) * es + 1);
  memcpy(b2, buf + h * es, (count - h) * es);
  nexar_bucket bk[2] = {{buf, h}, {b2, count - h}};
  T_RC(t, nexar_all_reduce_bucketed(c, bk, 2, dt, op));
  T_BUF(t, what, buf, exp, h, dt);
  T_BUF(t, what, b2, exp + h * es, count - h, dt);
  free(b2);
  /* reduce at root n-1 */
  t_fill(buf, count, dt, op, r, 0, salt);
  T_RC(t, nexar_reduce(c, buf, count, dt, op, n - 1));
  if (r == n - 1) T_BUF(t, what, buf, exp, count, dt);
  /* reduce_scatter */
  t_fill(buf, count * n, dt, op, r, 0, salt);
  t_fold(exp, count, dt, op, 0, n, (size_t)r * count, salt);
  T_RC(t, nexar_reduce_scatter(c, buf, out, count, dt, op));
  T_BUF(t, what, out, exp, count, dt);
  /* reduce_scatter_v: uneven blocks, block r has (r + count) % 5 elements */
  size_t rc[16], tot = 0, off_r = 0;
  for (uint32_t i = 0; i < n; i++) {
    rc[i] = (i + count) % 5;
    if (i < r) off_r += rc[i];
    tot += rc[i];
  }
  t_fill(buf, tot, dt, op, r, 0, salt);
  t_fold(exp, rc[r], dt, op, 0, n, off_r, salt);
  T_RC(t, nexar_reduce_scatter_v(c, buf, out, rc, dt, op));
  T_BUF(t, what, out, exp, rc[r], dt);
  /* scans: bitwise work, avg is refused */
  if (op != NEXAR_AVG) {
    t_fill(buf, count, dt, op, r, 0, salt);
    t_fold(exp, count, dt, op, 0, r + 1, 0, salt);
    T_RC(t, nexar_scan(c, buf, count, dt, op));
    T_BUF(t, what, buf, exp, count, dt);
    t_fill(buf, count, dt, op, r, 0, salt);
    if (r == 0)
      t_identity(exp, count, dt, op);
    else
      t_fold(exp, count, dt, op, 0, r, 0, salt);
    T_RC(t, nexar_exclusive_scan(c, buf, count, dt, op));
    T_BUF(t, what, buf, exp, count, dt);
  } else {
    int e = nexar_scan(c, buf, count, dt, op);
    T_CHECK(t, e == NEXAR_ERR_INVALID_ARGUMENT, "scan avg -> %d", e);
    T_CHECK(t, strstr(nexar_last_error(), "avg") != NULL, "scan avg text: %s", nexar_last_error());
    e = nexar_exclusive_scan(c, buf, count, dt, op);
    T_CHECK(t, e == NEXAR_ERR_INVALID_ARGUMENT, "exclusive_scan avg -> %d", e);
  }
  free(buf);
  free(exp);
  free(out);
}

static void ops_rank(tctx *t) {
  static const nexar_op ops[] = {NEXAR_AVG, NEXAR_BAND, NEXAR_BOR, NEXAR_BXOR};
  static const size_t counts[] = {0, 1, 37, 1003};
  int salt = 1;
  for (size_t d = 0; d < sizeof dts8 / sizeof *dts8; d++)
    for (size_t o = 0; o < 4; o++) {
      nexar_dtype dt = dts8[d];
      nexar_op op = ops[o];
      if (op != NEXAR_AVG && !is_int(dt)) {
        /* refused on every rank, then the communicator goes on */
        float f[4] = {0};
        int e = nexar_all_reduce(t->c, f, 4, dt, op);
        T_CHECK(t, e == NEXAR_ERR_INVALID_ARGUMENT, "%s on %s -> %d", nexar_op_name(op),
                nexar_dtype_name(dt), e);
        T_CHECK(t,
                strstr(nexar_last_error(), nexar_op_name(op)) &&
                    strstr(nexar_last_error(), nexar_dtype_name(dt)),
                "error names op and dtype: %s", nexar_last_error());
        continue;
      }
      ops_one(t, counts[(d + o) % 4], dt, op, salt++);
    }
  T_RC(t, nexar_barrier(t->c));
  /* avg of inexact floats: the same bits on every rank (all_gather of the results) */
  for (int d = 0; d < 4; d++) {
    nexar_dtype dt = dts8[d];
    size_t es = nexar_dtype_size(dt), count = 513;
    char *buf = t_xmalloc(count * es), *all = t_xmalloc(count * es * t->n);
    t_fill_inexact(buf, count, dt, NEXAR_SUM, t->rank, d);
    T_RC(t, nexar_all_reduce(t->c, buf, count, dt, NEXAR_AVG));
    T_RC(t, nexar_all_gather(t->c, buf, all, count, dt));
    for (uint32_t i = 1; i < t->n; i++)
      T_BUF(t, "avg bit-identical", all + i * count * es, all, count, dt);
    free(buf);
    free(all);
  }
}

static void suite_ops(void) {
  static const int ar[] = {-1, NX_AR_RECDBL, NX_AR_HALVDBL, NX_AR_RING, NX_AR_RING_PIPE};
  static const uint32_t w[] = {2, 3, 5, 4, 3};
  for (int i = 0; i < 5; i++) {
    nx_algo_force_allreduce = ar[i];
    nx_algo_force_segment = ar[i] == NX_AR_RING_PIPE ? 64 : 0;
    t_run_world(w[i], ops_rank, NULL);
  }
  nx_algo_force_allreduce = -1;
  nx_algo_force_segment = 0;
  /* world 1: avg is the identity */
  t_run_world(1, ops_rank, NULL);
}

/* ------------------------------------------------------ variable counts */

/* Elements from rank `src` to rank `dst` in case k (some zero; all zero for k = 0). */
static size_t cnt(int k, uint32_t src, uint32_t dst) {
  if (k == 0) return 0;
  if ((src * 3 + dst * 5 + (uint32_t)k) % 4 == 0) return 0;
  return 1 + (src * 7 + dst * 3 + (uint32_t)k * 11) % (k == 3 ? 300 : 9);
}

/* displs for counts c: NULL-equivalent packed (mode 0) or reversed with gaps. */
static size_t place(const size_t *c, size_t *d, uint32_t n, int mode) {
  size_t at = 0;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t i = mode ? n - 1 - k : k;
    at += mode ? 2 : 0;
    d[i] = at;
    at += c[i];
  }
  return at;
}

static void v_case(tctx *t, int k, nexar_dtype dt, int mode, uint32_t root) {
  nexar_client *c = t->c;
  uint32_t n = t->n, r = t->rank;
  size_t es = nexar_dtype_size(dt);
  size_t sc[16], sd[16], rc[16], rd[16];
  const size_t *sdp = mode ? sd : NULL, *rdp = mode ? rd : NULL;
  int salt = k * 13 + mode;
  nexar_op op = NEXAR_SUM;
  char what[96];
  snprintf(what, sizeof what, "case %d %s mode %d root %u", k, nexar_dtype_name(dt), mode, root);
  /* all_gather_v: rank i gives cnt(k, i, 0) */
  for (uint32_t i = 0; i < n; i++)
    rc[i] = cnt(k, i, 0);
  size_t ext = place(rc, rd, n, mode);
  char *recv = t_xmalloc(ext * es + 1), *send = t_xmalloc(rc[r] * es + 1);
  char *exp = t_xmalloc((ext + 600) * es + 1);
  memset(recv, 0x5a, ext * es);
  t_fill(send, rc[r], dt, op, r, 0, salt);
  T_RC(t, nexar_all_gather_v(c, send, rc[r], recv, rc, rdp, dt));
  for (uint32_t i = 0; i < n; i++) {
    t_fill(exp, rc[i], dt, op, i, 0, salt);
    T_BUF(t, what, recv + rd[i] * es, exp, rc[i], dt);
  }
  /* in place */
  memset(recv, 0x5a, ext * es);
  t_fill(recv + rd[r] * es, rc[r], dt, op, r, 0, salt);
  T_RC(t, nexar_all_gather_v(c, recv + rd[r] * es, rc[r], recv, rc, rdp, dt));
  for (uint32_t i = 0; i < n; i++) {
    t_fill(exp, rc[i], dt, op, i, 0, salt);
    T_BUF(t, what, recv + rd[i] * es, exp, rc[i], dt);
  }
  /* gather_v at root (the same counts) */
  memset(recv, 0x5a, ext * es);
  T_RC(t, nexar_gather_v(c, send, rc[r], r == root ? recv : NULL, r == root ? rc : NULL,
                         r == root ? rdp : NULL, dt, root));
  if (r == root)
    for (uint32_t i = 0; i < n; i++) {
      t_fill(exp, rc[i], dt, op, i, 0, salt);
      T_BUF(t, what, recv + rd[i] * es, exp, rc[i], dt);
    }
  free(recv);
  free(send);
  /* scatter_v from root: rank i gets cnt(k, root, i) */
  for (uint32_t i = 0; i < n; i++)
    sc[i] = cnt(k, root, i);
  ext = place(sc, sd, n, mode);
  send = t_xmalloc(ext * es + 1);
  recv = t_xmalloc(sc[r] * es + 1);
  if (r == root)
    for (uint32_t i = 0; i < n; i++)
      t_fill(send + sd[i] * es, sc[i], dt, op, root, 1000 * (size_t)i, salt);
  T_RC(t, nexar_scatter_v(c, r == root ? send : NULL, r == root ? sc : NULL, r == root ? sdp : NULL,
                          recv, sc[r], dt, root));
  t_fill(exp, sc[r], dt, op, root, 1000 * (size_t)r, salt);
  T_BUF(t, what, recv, exp, sc[r], dt);
  free(send);
  free(recv);
  /* all_to_all_v: r sends cnt(k, r, j) to j */
  for (uint32_t i = 0; i < n; i++) {
    sc[i] = cnt(k, r, i);
    rc[i] = cnt(k, i, r);
  }
  size_t sext = place(sc, sd, n, mode), rext = place(rc, rd, n, !mode);
  send = t_xmalloc(sext * es + 1);
  recv = t_xmalloc(rext * es + 1);
  for (uint32_t i = 0; i < n; i++)
    t_fill(send + sd[i] * es, sc[i], dt, op, r, 1000 * (size_t)i, salt);
  T_RC(t, nexar_all_to_all_v(c, send, sc, sdp, recv, rc, mode ? NULL : rd, dt));
  for (uint32_t i = 0; i < n; i++) {
    t_fill(exp, rc[i], dt, op, i, 1000 * (size_t)r, salt);
    T_BUF(t, what, recv + rd[i] * es, exp, rc[i], dt);
  }
  free(send);
  free(recv);
  /* reduce_scatter_v (sum), and in place */
  size_t tot = 0, off = 0;
  for (uint32_t i = 0; i < n; i++) {
    rc[i] = cnt(k, i, 1);
    if (i < r) off += rc[i];
    tot += rc[i];
  }
  send = t_xmalloc(tot * es + 1);
  recv = t_xmalloc(rc[r] * es + 1);
  t_fill(send, tot, dt, op, r, 0, salt);
  t_fold(exp, rc[r], dt, op, 0, n, off, salt);
  T_RC(t, nexar_reduce_scatter_v(c, send, recv, rc, dt, op));
  T_BUF(t, what, recv, exp, rc[r], dt);
  T_RC(t, nexar_reduce_scatter_v(c, send, send + off * es, rc, dt, op));
  T_BUF(t, what, send + off * es, exp, rc[r], dt);
  free(send);
  free(recv);
  free(exp);
}

static void v_rank(tctx *t) {
  for (int k = 0; k < 4; k++)
    for (size_t d = 0; d < sizeof dts8 / sizeof *dts8; d++) {
      if (k == 3 && d % 3) continue; /* the large case: a few dtypes */
      v_case(t, k, dts8[d], (int)(d + (size_t)k) % 2, (uint32_t)(d + (size_t)k) % t->n);
    }
}

static void suite_v(void) {
  static const uint32_t w[] = {1, 2, 3, 4, 5, 8};
  for (size_t i = 0; i < sizeof w / sizeof *w; i++)
    t_run_world(w[i], v_rank, NULL);
}

/* ------------------------------------------------------------------ _nb */

static void vnb_rank(tctx *t) {
  nexar_client *c = t->c;
  uint32_t n = t->n, r = t->rank;
  enum { K = 6 };
  for (int it = 0; it < 10; it++) {
    nexar_request *q[K] = {0};
    size_t *rc = t_xmalloc(n * sizeof *rc), *sc = t_xmalloc(n * sizeof *sc),
           *rc2 = t_xmalloc(n * sizeof *rc2), tot = 0, off = 0;
    for (uint32_t i = 0; i < n; i++) {
      rc[i] = cnt(it + 1, i, 0);
      sc[i] = cnt(it + 1, r, i);
      rc2[i] = cnt(it + 1, i, r);
      if (i < r) off += rc[i];
      tot += rc[i];
    }
    size_t stot = 0, rtot = 0;
    for (uint32_t i = 0; i < n; i++)
      stot += sc[i], rtot += rc2[i];
    int32_t *ag = t_xmalloc(tot * 4 + 4), *mine = t_xmalloc(rc[r] * 4 + 4);
    int32_t *a2s = t_xmalloc(stot * 4 + 4), *a2r = t_xmalloc(rtot * 4 + 4);
    float *rss = t_xmalloc(tot * 4 + 4), *rsr = t_xmalloc(rc[r] * 4 + 4);
    double *av = t_xmalloc(100 * 8);
    t_fill(mine, rc[r], NEXAR_I32, NEXAR_SUM, r, 0, it);
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
      t_fill(a2s + at, sc[i], NEXAR_I32, NEXAR_SUM, r, 100 * (size_t)i, it);
      at += sc[i];
    }
    t_fill(rss, tot, NEXAR_F32, NEXAR_SUM, r, 0, it);
    t_fill(av, 100, NEXAR_F64, NEXAR_AVG, r, 0, it);
    T_RC(t, nexar_all_gather_v_nb(c, mine, rc[r], ag, rc, NULL, NEXAR_I32, &q[0]));
    T_RC(t, nexar_all_to_all_v_nb(c, a2s, sc, NULL, a2r, rc2, NULL, NEXAR_I32, &q[1]));
    T_RC(t, nexar_reduce_scatter_v_nb(c, rss, rsr, rc, NEXAR_F32, NEXAR_SUM, &q[2]));
    T_RC(t, nexar_all_reduce_nb(c, av, 100, NEXAR_F64, NEXAR_AVG, &q[3]));
    T_RC(t, nexar_gather_v_nb(c, mine, rc[r], r == 0 ? ag : NULL, rc, NULL, NEXAR_I32, 0, &q[4]));
    /* every rank names itself the root: a MISMATCH (n > 1), reported by the wait */
    int32_t *sv = t_xmalloc(stot * 4 + 4);
    T_RC(t, nexar_scatter_v_nb(c, a2s, sc, NULL, sv, sc[r], NEXAR_I32, r, &q[5]));
    /* the counts are copied: overwrite them before waiting */
    memset(rc, 0xff, n * sizeof *rc);
    memset(sc, 0xff, n * sizeof *sc);
    memset(rc2, 0xff, n * sizeof *rc2);
    if (q[5]) { /* the scatter_v above had root = r: a different root per rank */
      int e = nexar_wait(q[5]);
      q[5] = NULL;
      T_CHECK(t, n == 1 || e == NEXAR_ERR_MISMATCH, "scatter_v with differing roots -> %d", e);
    }
    free(sv);
    for (int i = 0; i < 5; i++) {
      int done = 0;
      T_RC(t, nexar_test(q[i], &done));
    }
    T_RC(t, nexar_wait_all(q, 5));
    /* check */
    size_t e_tot = 0;
    for (uint32_t i = 0; i < n; i++)
      rc[i] = cnt(it + 1, i, 0), rc2[i] = cnt(it + 1, i, r);
    int32_t *ei = t_xmalloc((tot + rtot) * 4 + 4);
    at = 0;
    for (uint32_t i = 0; i < n; i++) {
      t_fill(ei, rc[i], NEXAR_I32, NEXAR_SUM, i, 0, it);
      T_BUF(t, "all_gather_v_nb", ag + at, ei, rc[i], NEXAR_I32);
      at += rc[i];
    }
    at = 0;
    for (uint32_t i = 0; i < n; i++) {
      t_fill(ei, rc2[i], NEXAR_I32, NEXAR_SUM, i, 100 * (size_t)r, it);
      T_BUF(t, "all_to_all_v_nb", a2r + at, ei, rc2[i], NEXAR_I32);
      at += rc2[i];
      e_tot += rc2[i];
    }
    float *ef = t_xmalloc(rc[r] * 4 + 4);
    t_fold(ef, rc[r], NEXAR_F32, NEXAR_SUM, 0, n, off, it);
    T_BUF(t, "reduce_scatter_v_nb", rsr, ef, rc[r], NEXAR_F32);
    double *ed = t_xmalloc(100 * 8);
    t_fold(ed, 100, NEXAR_F64, NEXAR_AVG, 0, n, 0, it);
    T_BUF(t, "all_reduce_nb avg", av, ed, 100, NEXAR_F64);
    T_RC(t, nexar_barrier(c)); /* after the refused scatter_v: still in step */
    free(ei), free(ef), free(ed);
    free(ag), free(mine), free(a2s), free(a2r), free(rss), free(rsr), free(av);
    free(rc), free(sc), free(rc2);
    (void)e_tot;
  }
}

static void suite_vnb(void) {
  t_run_world(3, vnb_rank, NULL);
  t_run_world(4, vnb_rank, NULL);
}

/* --------------------------------------------------------------- errors */

static void verr_rank(tctx *t) {
  nexar_client *c = t->c;
  uint32_t n = t->n, r = t->rank;
  size_t rc[8], sc[8];
  int32_t buf[64], out[64];
  memset(buf, 0, sizeof buf);
  /* differing shared counts: MISMATCH on every rank */
  for (uint32_t i = 0; i < n; i++)
    rc[i] = 2;
  if (r == 1) rc[0] = 3;
  int e = nexar_all_gather_v(c, buf, rc[r], out, rc, NULL, NEXAR_I32);
  T_CHECK(t, e == NEXAR_ERR_MISMATCH, "all_gather_v counts differ -> %d (%s)", e,
          nexar_last_error());
  e = nexar_reduce_scatter_v(c, buf, out, rc, NEXAR_I32, NEXAR_SUM);
  T_CHECK(t, e == NEXAR_ERR_MISMATCH, "reduce_scatter_v counts differ -> %d (%s)", e,
          nexar_last_error());
  /* one count zero on one rank only (the sync path) */
  for (uint32_t i = 0; i < n; i++)
    rc[i] = (r == 0 && i == 2) ? 0 : 1;
  e = nexar_reduce_scatter_v(c, buf, out, rc, NEXAR_I32, NEXAR_SUM);
  T_CHECK(t, e == NEXAR_ERR_MISMATCH, "reduce_scatter_v zero on one rank -> %d (%s)", e,
          nexar_last_error());
  T_RC(t, nexar_barrier(c));
  /* all_to_all_v: rank 0 expects 3 from rank 1, which sends 2: SIZE_MISMATCH at rank 0 */
  for (uint32_t i = 0; i < n; i++)
    sc[i] = rc[i] = 2;
  if (r == 0) rc[1] = 3;
  e = nexar_all_to_all_v(c, buf, sc, NULL, out, rc, NULL, NEXAR_I32);
  if (r == 0)
    T_CHECK(t, e == NEXAR_ERR_SIZE_MISMATCH && strstr(nexar_last_error(), "rank 1"),
            "all_to_all_v short sender -> %d (%s)", e, nexar_last_error());
  else
    T_CHECK(t, e == 0 || e == NEXAR_ERR_MISMATCH, "all_to_all_v bystander -> %d (%s)", e,
            nexar_last_error());
  /* a zero the receiver does not expect (sender sends 0, receiver wants 2) */
  for (uint32_t i = 0; i < n; i++)
    sc[i] = rc[i] = 2;
  if (r == 2) sc[0] = 0;
  e = nexar_all_to_all_v(c, buf, sc, NULL, out, rc, NULL, NEXAR_I32);
  if (r == 0)
    T_CHECK(t, e == NEXAR_ERR_SIZE_MISMATCH, "all_to_all_v empty sender -> %d (%s)", e,
            nexar_last_error());
  T_RC(t, nexar_barrier(c));
  /* gather_v: the root expects 4 from rank 2, which sends 1 */
  for (uint32_t i = 0; i < n; i++)
    rc[i] = 1;
  rc[2] = 4;
  e = nexar_gather_v(c, buf, 1, out, rc, NULL, NEXAR_I32, 0);
  if (r == 0)
    T_CHECK(t, e == NEXAR_ERR_SIZE_MISMATCH, "gather_v -> %d (%s)", e, nexar_last_error());
  /* scatter_v: rank 1 expects 5, the root sends 1 */
  for (uint32_t i = 0; i < n; i++)
    sc[i] = 1;
  e = nexar_scatter_v(c, buf, sc, NULL, out, r == 1 ? 5 : 1, NEXAR_I32, 0);
  if (r == 1)
    T_CHECK(t, e == NEXAR_ERR_SIZE_MISMATCH, "scatter_v -> %d (%s)", e, nexar_last_error());
  T_RC(t, nexar_barrier(c));
  /* argument errors (refused on this rank; the others see MISMATCH) */
  for (uint32_t i = 0; i < n; i++)
    rc[i] = 4;
  size_t rd[8];
  for (uint32_t i = 0; i < n; i++)
    rd[i] = 2 * i; /* overlapping output blocks */
  e = nexar_all_gather_v(c, buf, 4, out, rc, rd, NEXAR_I32);
  T_CHECK(t, e == NEXAR_ERR_INVALID_ARGUMENT, "overlapping recv blocks -> %d", e);
  e = nexar_all_gather_v(c, buf, 3, out, rc, NULL, NEXAR_I32);
  T_CHECK(t, e == NEXAR_ERR_INVALID_ARGUMENT, "send_count != recv_counts[r] -> %d", e);
  e = nexar_all_gather_v(c, out + 4, 4, out, rc, NULL, NEXAR_I32); /* input inside recv */
  /* (rank 1's block starts there: in place for it, which then hears of the others' refusal) */
  T_CHECK(t, e == (r == 1 ? NEXAR_ERR_MISMATCH : NEXAR_ERR_INVALID_ARGUMENT),
          "send inside recv -> %d", e);
  for (uint32_t i = 0; i < n; i++)
    rd[i] = SIZE_MAX / 2;
  e = nexar_all_to_all_v(c, buf, rc, rd, out, rc, NULL, NEXAR_I32);
  T_CHECK(t, e == NEXAR_ERR_INVALID_ARGUMENT, "overflowing displs -> %d", e);
  e = nexar_all_to_all_v(c, buf, rc, NULL, buf + 1, rc, NULL, NEXAR_I32);
  T_CHECK(t, e == NEXAR_ERR_INVALID_ARGUMENT, "send and recv overlap -> %d", e);
  e = nexar_all_gather_v(c, buf, 4, out, NULL, NULL, NEXAR_I32);
  T_CHECK(t, e == NEXAR_ERR_INVALID_ARGUMENT, "NULL recv_counts -> %d", e);
  e = nexar_gather_v(c, buf, 1, out, rc, NULL, NEXAR_I32, n);
  T_CHECK(t, e == NEXAR_ERR_INVALID_RANK, "gather_v root n -> %d", e);
  e = nexar_reduce_scatter_v(c, buf, out, rc, NEXAR_F32, NEXAR_BOR);
  T_CHECK(t, e == NEXAR_ERR_INVALID_ARGUMENT, "bor on f32 -> %d", e);
  /* still in step: a correct one */
  for (uint32_t i = 0; i < n; i++)
    rc[i] = i + 1;
  int32_t mine[16];
  t_fill(mine, r + 1, NEXAR_I32, NEXAR_SUM, r, 0, 3);
  T_RC(t, nexar_all_gather_v(c, mine, r + 1, out, rc, NULL, NEXAR_I32));
  size_t at = 0;
  for (uint32_t i = 0; i < n; i++) {
    int32_t ex[16];
    t_fill(ex, i + 1, NEXAR_I32, NEXAR_SUM, i, 0, 3);
    T_BUF(t, "after errors", out + at, ex, i + 1, NEXAR_I32);
    at += i + 1;
  }
}

static void suite_verr(void) {
  t_run_world(3, verr_rank, NULL);
  t_run_world(5, verr_rank, NULL);
}

/* ---------------------------------------------------------------- large */

static void vlarge_rank(tctx *t) {
  nexar_client *c = t->c;
  uint32_t n = t->n, r = t->rank;
  size_t sc[8], rc[8];
  for (uint32_t i = 0; i < n; i++) {
    sc[i] = (r + i) % 3 == 0 ? 0 : ((size_t)1 << 20) + 17 * (r + i); /* ~4 MiB of f32 */
    rc[i] = (i + r) % 3 == 0 ? 0 : ((size_t)1 << 20) + 17 * (i + r);
  }
  size_t st = 0, rt = 0;
  for (uint32_t i = 0; i < n; i++)
    st += sc[i], rt += rc[i];
  float *s = t_xmalloc(st * 4), *d = t_xmalloc(rt * 4), *e = t_xmalloc(((size_t)1 << 20) * 4 + 400);
  size_t at = 0;
  for (uint32_t i = 0; i < n; i++) {
    t_fill(s + at, sc[i], NEXAR_F32, NEXAR_SUM, r, 7 * (size_t)i, 1);
    at += sc[i];
  }
  T_RC(t, nexar_all_to_all_v(c, s, sc, NULL, d, rc, NULL, NEXAR_F32));
  at = 0;
  for (uint32_t i = 0; i < n; i++) {
    t_fill(e, rc[i], NEXAR_F32, NEXAR_SUM, i, 7 * (size_t)r, 1);
    T_BUF(t, "large all_to_all_v", d + at, e, rc[i], NEXAR_F32);
    at += rc[i];
  }
  /* reduce_scatter_v over ~1 MiB chunks in 64 KiB segments, avg */
  size_t tot = 0, off = 0;
  for (uint32_t i = 0; i < n; i++) {
    rc[i] = i == 1 ? 0 : ((size_t)1 << 18) + 5 * i;
    if (i < r) off += rc[i];
    tot += rc[i];
  }
  float *in = t_xmalloc(tot * 4), *out = t_xmalloc(rc[r] * 4 + 4);
  t_fill(in, tot, NEXAR_F32, NEXAR_AVG, r, 0, 2);
  T_RC(t, nexar_reduce_scatter_v(c, in, out, rc, NEXAR_F32, NEXAR_AVG));
  t_fold(e, rc[r], NEXAR_F32, NEXAR_AVG, 0, n, off, 2);
  T_BUF(t, "large reduce_scatter_v avg", out, e, rc[r], NEXAR_F32);
  /* all_gather_v of ~2 MiB blocks (rendezvous) */
  for (uint32_t i = 0; i < n; i++)
    rc[i] = ((size_t)1 << 19) + 3 * i;
  tot = 0;
  for (uint32_t i = 0; i < n; i++)
    tot += rc[i];
  float *ag = t_xmalloc(tot * 4);
  t_fill(in, rc[r], NEXAR_F32, NEXAR_SUM, r, 0, 3);
  T_RC(t, nexar_all_gather_v(c, in, rc[r], ag, rc, NULL, NEXAR_F32));
  at = 0;
  for (uint32_t i = 0; i < n; i++) {
    t_fill(e, rc[i], NEXAR_F32, NEXAR_SUM, i, 0, 3);
    T_BUF(t, "large all_gather_v", ag + at, e, rc[i], NEXAR_F32);
    at += rc[i];
  }
  free(s), free(d), free(e), free(in), free(out), free(ag);
}

static void suite_vlarge(void) {
  nx_algo_force_segment = 64 * 1024;
  t_run_world(3, vlarge_rank, NULL);
  nx_algo_force_segment = 0;
}

/* ------------------------------------------------------------- sendrecv */

static void sendrecv_rank(tctx *t) {
  nexar_client *c = t->c;
  uint32_t n = t->n, r = t->rank;
  size_t big = 9u << 20; /* 9 MiB: two blocking sends of this would wait on each other */
  unsigned char *s = t_xmalloc(big), *d = t_xmalloc(big);
  for (size_t i = 0; i < big; i++)
    s[i] = (unsigned char)(i * 7 + r * 31);
  /* pairs (0,1), (2,3), ...: both directions at once */
  uint32_t peer = r ^ 1u;
  if (peer < n) {
    T_RC(t, nexar_sendrecv(c, s, big, peer, 5, d, big, peer, 5));
    int bad = 0;
    for (size_t i = 0; i < big && !bad; i++)
      bad = d[i] != (unsigned char)(i * 7 + peer * 31);
    T_CHECK(t, !bad, "pair exchange with %u: wrong bytes", peer);
  }
  /* self */
  memset(d, 0, 4096);
  T_RC(t, nexar_sendrecv(c, s, 4096, r, 9, d, 4096, r, 9));
  T_CHECK(t, memcmp(s, d, 4096) == 0, "sendrecv to self");
  /* ring shift: send to r+1, receive from r-1, 3 MiB */
  size_t mid = 3u << 20;
  T_RC(t, nexar_sendrecv(c, s, mid, (r + 1) % n, 11, d, mid, (r + n - 1) % n, 11));
  uint32_t from = (r + n - 1) % n;
  int bad = 0;
  for (size_t i = 0; i < mid && !bad; i++)
    bad = d[i] != (unsigned char)(i * 7 + from * 31);
  T_CHECK(t, !bad, "ring shift from %u: wrong bytes", from);
  /* refusals */
  int e = nexar_sendrecv(c, s, 100, r, 1, s + 50, 100, r, 1);
  T_CHECK(t, e == NEXAR_ERR_INVALID_ARGUMENT, "overlapping buffers -> %d", e);
  e = nexar_sendrecv(c, s, 1, n, 1, d, 1, r, 1);
  T_CHECK(t, e == NEXAR_ERR_INVALID_RANK, "dest n -> %d", e);
  e = nexar_sendrecv(c, s, 1, r, 1, d, 1, n + 3, 1);
  T_CHECK(t, e == NEXAR_ERR_INVALID_RANK, "src n+3 -> %d", e);
  e = nexar_sendrecv(c, NULL, 1, r, 1, d, 1, r, 1);
  T_CHECK(t, e == NEXAR_ERR_INVALID_ARGUMENT, "NULL send -> %d", e);
  /* a receive of another length: SIZE_MISMATCH, the message stays queued */
  e = nexar_sendrecv(c, s, 8, r, 21, d, 4, r, 21);
  T_CHECK(t, e == NEXAR_ERR_SIZE_MISMATCH, "short receive -> %d", e);
  T_RC(t, nexar_recv(c, d, 8, r, 21));
  T_CHECK(t, memcmp(d, s, 8) == 0, "kept message");
  T_RC(t, nexar_barrier(c));
  free(s);
  free(d);
}

static void suite_sendrecv(void) {
  t_run_world(2, sendrecv_rank, NULL);
  t_run_world(3, sendrecv_rank, NULL);
}

/* One process per rank (launched by nexar-run, which sets NEXAR_SEED_ADDR):
 * the same rank functions from this process's point of view. */
static void suite_proc(void) {
  nexar_client *c = NULL;
  int rc = nexar_init_from_env(&c);
  if (rc) t_fatal(NULL, __LINE__, "init_from_env: %d %s", rc, nexar_last_error());
  tctx t = {.c = c, .rank = nexar_rank(c), .n = nexar_world_size(c)};
  ops_rank(&t);
  v_rank(&t);
  vnb_rank(&t);
  if (t.n >= 3) verr_rank(&t);
  sendrecv_rank(&t);
  nexar_client_del(c);
}

int main(int argc, char **argv) {
  const char *s = argc > 1 ? argv[1] : "ops";
  if (!strcmp(s, "proc"))
    suite_proc();
  else if (!strcmp(s, "ops"))
    suite_ops();
  else if (!strcmp(s, "v"))
    suite_v();
  else if (!strcmp(s, "vnb"))
    suite_vnb();
  else if (!strcmp(s, "verr"))
    suite_verr();
  else if (!strcmp(s, "vlarge"))
    suite_vlarge();
  else if (!strcmp(s, "sendrecv"))
    suite_sendrecv();
  else {
    fprintf(stderr, "unknown suite %s\n", s);
    return 2;
  }
  int f = t_failures();
  fprintf(stderr, "coll_v_test %s: %s\n", s, f ? "FAILED" : "ok");
  return f ? 1 : 0;
}
