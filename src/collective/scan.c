/* Inclusive and exclusive prefix reductions: Hillis-Steele recursive doubling
 * for small vectors, a segmented chain for large ones. Lower ranks' values
 * are always the left operand. */
#include "collective/coll.h"
#include "reduce/reduce.h"

#include <string.h>

/* Round d = 2^i: send the running prefix (ranks max(0, r-2d+1)..r) to r+d,
 * receive r-d's and fold it in on the left. For the exclusive form the
 * received pieces alone make up ranks 0..r-1. */
static int scan_recdbl(nx_job *j, int exclusive) {
  uint32_t n = j->world, r = j->rank;
  size_t bytes = j->count * j->es;
  char *buf = j->buf, *tmp = nx_job_alloc(j, bytes), *excl = NULL;
  if (!tmp) return NEXAR_ERR_NOMEM;
  if (exclusive && r > 0) {
    excl = nx_job_alloc(j, bytes);
    if (!excl) return NEXAR_ERR_NOMEM;
  }
  int have = 0;
  uint32_t round = 0;
  for (uint32_t d = 1; d < n; d <<= 1, round++) {
    int to = r + d < n, from = r >= d;
    int rc = nx_j_sendrecv(j, to ? r + d : 0, to ? buf : NULL, bytes, from ? r - d : 0,
                           from ? tmp : NULL, bytes, round, 0);
    if (rc) return rc;
    if (!from) continue;
    if (excl) {
      if (have)
        nx_j_reduce3(j, excl, tmp, excl, j->count);
      else
        nx_j_copy(j, excl, tmp, bytes);
      have = 1;
    }
    nx_j_reduce3(j, buf, tmp, buf, j->count);
  }
  if (exclusive) {
    if (r == 0)
      nx_j_fill_identity(j, buf, j->count);
    else
      nx_j_copy(j, buf, excl, bytes);
  }
  return 0;
}

/* Chain: rank r receives the prefix of ranks 0..r-1 segment by segment from
 * r-1 (`window` posted ahead), combines it with its own and forwards the
 * result to r+1 while later segments still arrive. */
static int scan_chain(nx_job *j, int exclusive) {
  const nx_algo_params *p = &j->params;
  uint32_t n = j->world, r = j->rank;
  size_t es = j->es, count = j->count, segel = nx_seg_elems(p->scan_segment, es);
  size_t nseg = nx_seg_count(count, segel);
  unsigned win = p->window;
  char *buf = j->buf, *slots = NULL, *incl = NULL;
  int first = r == 0, last = r == n - 1;
  /* The last rank of an exclusive scan needs only the prefix: straight in. */
  int direct = exclusive && last;
  nx_sid *sq = NULL, *rq = NULL;
  if (!last) {
    sq = nx_job_alloc(j, nseg * sizeof(nx_sid));
    if (!sq) return NEXAR_ERR_NOMEM;
    memset(sq, 0, nseg * sizeof(nx_sid));
  }
  if (!first) {
    rq = nx_job_alloc(j, win * sizeof(nx_sid));
    if (!rq) return NEXAR_ERR_NOMEM;
    if (!direct) {
      slots = nx_job_alloc(j, (size_t)win * NX_MIN(segel, count) * es);
      if (!slots) return NEXAR_ERR_NOMEM;
    }
    if (exclusive && !last) {
      incl = nx_job_alloc(j, count * es);
      if (!incl) return NEXAR_ERR_NOMEM;
    }
  }
  int rc = 0;
  size_t posted = 0;
  for (size_t s = 0; !rc && s < nseg; s++) {
    size_t off, len;
    nx_seg_range(count, segel, s, &off, &len);
    char *mine = buf + off * es;
    const char *out = mine; /* what goes to r+1 */
    if (!first) {
      while (!rc && posted < nseg && posted < s + win) {
        size_t po, pl;
        nx_seg_range(count, segel, posted, &po, &pl);
        char *dst = direct ? buf + po * es : slots + (posted % win) * NX_MIN(segel, count) * es;
        rc = nx_j_irecv(j, r - 1, 0, (uint32_t)posted, dst, pl * es, &rq[posted % win]);
        posted++;
      }
      if (!rc) rc = nx_j_wait(j, &rq[s % win]);
      if (rc || direct) continue;
      const char *prefix = slots + (s % win) * NX_MIN(segel, count) * es;
      if (exclusive) {
        nx_j_reduce3(j, incl + off * es, prefix, mine, len);
        nx_j_copy(j, mine, prefix, len * es);
        out = incl + off * es;
      } else {
        nx_j_reduce3(j, mine, prefix, mine, len);
      }
    }
    if (!last) rc = nx_j_isend(j, r + 1, 0, (uint32_t)s, out, len * es, &sq[s]);
  }
  if (rc) return rc;
  if (!last) rc = nx_j_waitall(j, sq, nseg);
  if (!rc && exclusive && first) nx_j_fill_identity(j, buf, count);
  return rc;
}

int nx_run_scan(nx_job *j) {
  int exclusive = j->kind == NX_COLL_EXSCAN;
  switch (nx_algo_scan(j->count, j->es, j->world, &j->params)) {
  case NX_SC_NONE:
    if (exclusive && j->count) nx_j_fill_identity(j, j->buf, j->count);
    return j->world > 1 ? nx_sync(j, 0) : 0;
  case NX_SC_RECDBL:
    return scan_recdbl(j, exclusive);
  case NX_SC_CHAIN:
    return scan_chain(j, exclusive);
  }
  return nx_fail(NEXAR_ERR_UNSUPPORTED, "%s: no algorithm", nx_job_name(j));
}
