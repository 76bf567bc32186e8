/* Data movement without reduction: allgather (recursive doubling or ring),
 * gather and scatter (binomial tree or direct), alltoall (pairwise). Blocks
 * are received straight into the caller's buffer wherever the layout allows;
 * scratch is used only by interior tree nodes and rotated roots. */
#include "collective/coll.h"

#include <string.h>

static uint32_t log2u(uint32_t m) {
  uint32_t l = 0;
  while ((1u << l) < m)
    l++;
  return l;
}

/* ------------------------------------------------------------- allgather */

/* Power-of-two world: in round i exchange the 2^i blocks gathered so far
 * with r ^ 2^i; both groups are contiguous in recv. */
static int allgather_recdbl(nx_job *j, char *recv, size_t blk) {
  uint32_t r = j->rank;
  for (uint32_t i = 0, m = 1; m < j->world; m <<= 1, i++) {
    uint32_t partner = r ^ m;
    size_t mine = (size_t)(r & ~(m - 1)) * blk, theirs = (size_t)(partner & ~(m - 1)) * blk;
    int rc = nx_j_sendrecv(j, partner, recv + mine, m * blk, partner, recv + theirs, m * blk, i, 0);
    if (rc) return rc;
  }
  return 0;
}

/* Ring: step s sends block r-s to r+1 and receives block r-s-1 from r-1,
 * in whole-element segments so a block is forwarded while it still arrives.
 * All receives are posted at once (they target distinct user regions). */
static int allgather_ring(nx_job *j, char *recv, size_t count, size_t es) {
  const nx_algo_params *p = &j->params;
  uint32_t n = j->world, r = nx_ring_pos(p, n, j->rank); /* r: position on the ring */
  uint32_t next = nx_ring_next(p, n, j->rank), prev = nx_ring_prev(p, n, j->rank);
  size_t blk = count * es;
  size_t segel = blk >= p->large_msg_bytes || nx_algo_force_segment
                     ? nx_seg_elems(p->segment_bytes, es)
                     : count;
  size_t nseg = nx_seg_count(count, segel), steps = n - 1;
  nx_sid *rq = nx_job_alloc(j, 2 * steps * nseg * sizeof(nx_sid));
  if (!rq) return NEXAR_ERR_NOMEM;
  nx_sid *sq = rq + steps * nseg;
  memset(rq, 0, 2 * steps * nseg * sizeof(nx_sid));
  int rc = 0;
  for (uint32_t s = 0; !rc && s < steps; s++) {
    size_t b = nx_ring_rank(p, n, (uint32_t)(((size_t)r + 2 * (size_t)n - s - 1) % n));
    for (size_t g = 0; !rc && g < nseg; g++) {
      size_t off, len;
      nx_seg_range(count, segel, g, &off, &len);
      rc = nx_j_irecv(j, prev, s, (uint32_t)g, recv + b * blk + off * es, len * es,
                      &rq[s * nseg + g]);
    }
  }
  for (uint32_t s = 0; !rc && s < steps; s++) {
    size_t b = nx_ring_rank(p, n, (uint32_t)(((size_t)r + n - s) % n));
    for (size_t g = 0; !rc && g < nseg; g++) {
      size_t off, len;
      nx_seg_range(count, segel, g, &off, &len);
      if (s > 0) rc = nx_j_wait(j, &rq[(s - 1) * nseg + g]); /* block b arrived at step s-1 */
      if (!rc)
        rc = nx_j_isend(j, next, s, (uint32_t)g, recv + b * blk + off * es, len * es,
                        &sq[s * nseg + g]);
    }
  }
  if (rc) return rc;
  return nx_j_waitall(j, rq, 2 * steps * nseg);
}

int nx_allgather_raw(nx_job *j, const void *send, void *recv, size_t count, size_t es) {
  size_t blk = count * es;
  char *own = (char *)recv + (size_t)j->rank * blk;
  if (blk && own != send) nx_j_copy(j, own, send, blk);
  switch (nx_algo_allgather(count, es, j->world, &j->params)) {
  case NX_AG_NONE:
    return j->world > 1 ? nx_sync(j, 0) : 0;
  case NX_AG_RECDBL:
    return allgather_recdbl(j, recv, blk);
  case NX_AG_RING:
    return allgather_ring(j, recv, count, es);
  }
  return nx_fail(NEXAR_ERR_UNSUPPORTED, "%s: no algorithm", nx_job_name(j));
}

int nx_run_allgather(nx_job *j) {
  return nx_allgather_raw(j, j->send, j->recv, j->count, j->es);
}

/* ------------------------------------------------------- gather / scatter */

/* Binomial subtree of virtual rank v: v .. v+size-1, its parent v - low. */
static uint32_t lowbit(uint32_t v, uint32_t n) {
  uint32_t top = 1;
  while (top < n)
    top <<= 1;
  return v ? (v & (~v + 1)) : top;
}

static int gather_binomial(nx_job *j, size_t blk) {
  uint32_t n = j->world, root = j->root, v = (j->rank + n - root) % n;
  uint32_t low = lowbit(v, n), size = NX_MIN(low, n - v);
  if (size == 1)
    return nx_j_sendrecv(j, (v - low + root) % n, j->send, blk, 0, NULL, 0, log2u(low), 0);
  /* Blocks of the subtree in virtual-rank order; the root of a rank-0 tree
   * collects straight into recv. */
  char *buf = (v == 0 && root == 0) ? j->recv : nx_job_alloc(j, (size_t)size * blk);
  if (!buf) return NEXAR_ERR_NOMEM;
  if (buf != j->send) nx_j_copy(j, buf, j->send, blk);
  nx_sid q[32] = {0};
  size_t nq = 0;
  for (uint32_t m = 1; m < low && v + m < n; m <<= 1) {
    size_t cnt = NX_MIN(m, n - v - m);
    int rc =
        nx_j_irecv(j, (v + m + root) % n, log2u(m), 0, buf + (size_t)m * blk, cnt * blk, &q[nq++]);
    if (rc) return rc;
  }
  int rc = nx_j_waitall(j, q, nq);
  if (rc) return rc;
  if (v) return nx_j_sendrecv(j, (v - low + root) % n, buf, size * blk, 0, NULL, 0, log2u(low), 0);
  if (root) { /* virtual block i belongs to rank (i + root) mod n */
    char *recv = j->recv;
    nx_j_copy(j, recv + (size_t)root * blk, buf, (size_t)(n - root) * blk);
    nx_j_copy(j, recv, buf + (size_t)(n - root) * blk, (size_t)root * blk);
  }
  return 0;
}

static int gather_direct(nx_job *j, size_t blk) {
  uint32_t n = j->world, r = j->rank;
  if (r != j->root) return nx_j_sendrecv(j, j->root, j->send, blk, 0, NULL, 0, 0, 0);
  char *recv = j->recv;
  if (recv + (size_t)r * blk != j->send) nx_j_copy(j, recv + (size_t)r * blk, j->send, blk);
  nx_sid *q = nx_job_alloc(j, n * sizeof(nx_sid));
  if (!q) return NEXAR_ERR_NOMEM;
  for (uint32_t i = 0; i < n; i++) {
    q[i] = 0;
    int rc = i == r ? 0 : nx_j_irecv(j, i, 0, 0, recv + (size_t)i * blk, blk, &q[i]);
    if (rc) return rc;
  }
  return nx_j_waitall(j, q, n);
}

int nx_run_gather(nx_job *j) {
  size_t blk = j->count * j->es;
  switch (nx_algo_gather(j->count, j->es, j->world, &j->params)) {
  case NX_GS_NONE:
    if (j->world == 1 && blk && j->recv != j->send) nx_j_copy(j, j->recv, j->send, blk);
    return j->world > 1 ? nx_sync(j, 0) : 0;
  case NX_GS_BINOMIAL:
    return gather_binomial(j, blk);
  case NX_GS_DIRECT:
    return gather_direct(j, blk);
  }
  return nx_fail(NEXAR_ERR_UNSUPPORTED, "%s: no algorithm", nx_job_name(j));
}

static int scatter_binomial(nx_job *j, size_t blk) {
  uint32_t n = j->world, root = j->root, v = (j->rank + n - root) % n;
  uint32_t low = lowbit(v, n), size = NX_MIN(low, n - v);
  if (size == 1)
    return nx_j_sendrecv(j, 0, NULL, 0, (v - low + root) % n, j->recv, blk, log2u(low), 0);
  const char *buf;
  if (v == 0 && root == 0) {
    buf = j->send;
  } else {
    char *tmp = nx_job_alloc(j, (size_t)size * blk);
    if (!tmp) return NEXAR_ERR_NOMEM;
    if (v == 0) { /* rotate so virtual block i is rank (i + root)'s block */
      const char *send = j->send;
      nx_j_copy(j, tmp, send + (size_t)root * blk, (size_t)(n - root) * blk);
      nx_j_copy(j, tmp + (size_t)(n - root) * blk, send, (size_t)root * blk);
    } else {
      int rc = nx_j_sendrecv(j, 0, NULL, 0, (v - low + root) % n, tmp, size * blk, log2u(low), 0);
      if (rc) return rc;
    }
    buf = tmp;
  }
  nx_sid q[32] = {0};
  size_t nq = 0;
  for (uint32_t m = low >> 1; m >= 1; m >>= 1) {
    if (v + m >= n) continue;
    size_t cnt = NX_MIN(m, n - v - m);
    int rc =
        nx_j_isend(j, (v + m + root) % n, log2u(m), 0, buf + (size_t)m * blk, cnt * blk, &q[nq++]);
    if (rc) return rc;
  }
  if (j->recv != (const void *)buf) nx_j_copy(j, j->recv, buf, blk);
  return nx_j_waitall(j, q, nq);
}

static int scatter_direct(nx_job *j, size_t blk) {
  uint32_t n = j->world, r = j->rank;
  if (r != j->root) return nx_j_sendrecv(j, 0, NULL, 0, j->root, j->recv, blk, 0, 0);
  const char *send = j->send;
  nx_sid *q = nx_job_alloc(j, n * sizeof(nx_sid));
  if (!q) return NEXAR_ERR_NOMEM;
  for (uint32_t s = 1; s < n; s++) {
    uint32_t d = (r + s) % n;
    q[s] = 0;
    int rc = nx_j_isend(j, d, 0, 0, send + (size_t)d * blk, blk, &q[s]);
    if (rc) return rc;
  }
  q[0] = 0;
  if (send + (size_t)r * blk != j->recv) nx_j_copy(j, j->recv, send + (size_t)r * blk, blk);
  return nx_j_waitall(j, q, n);
}

int nx_run_scatter(nx_job *j) {
  size_t blk = j->count * j->es;
  switch (nx_algo_gather(j->count, j->es, j->world, &j->params)) {
  case NX_GS_NONE:
    if (j->world == 1 && blk && j->recv != j->send) nx_j_copy(j, j->recv, j->send, blk);
    return j->world > 1 ? nx_sync(j, 0) : 0;
  case NX_GS_BINOMIAL:
    return scatter_binomial(j, blk);
  case NX_GS_DIRECT:
    return scatter_direct(j, blk);
  }
  return nx_fail(NEXAR_ERR_UNSUPPORTED, "%s: no algorithm", nx_job_name(j));
}

/* -------------------------------------------------------------- alltoall */

/* Power-of-two hypercube: dimension by dimension, every step between
 * neighbours. recv works as n slots; before round i, slot k holds the block
 * from source (k's bits below i, ours above) to destination (ours below i,
 * k's above), so it starts as the send buffer and ends as the result. Round
 * i swaps with r ^ 2^i the n/2 slots whose bit i differs from ours (they hold
 * blocks bound to the partner's half), packed in ascending slot order on
 * both sides. log2 n rounds of n/2 blocks instead of n-1 relayed sends. */
static int alltoall_hypercube(nx_job *j, size_t blk) {
  uint32_t n = j->world, r = j->rank;
  char *w = j->recv;
  if (j->send != j->recv) nx_j_copy(j, w, j->send, (size_t)n * blk);
  char *out = nx_job_alloc(j, (size_t)n * blk), *in = out + (size_t)(n / 2) * blk;
  if (!out) return NEXAR_ERR_NOMEM;
  for (uint32_t b = 1, round = 0; b < n; b <<= 1, round++) {
    size_t o = 0;
    for (uint32_t k = 0; k < n; k++)
      if ((k & b) != (r & b)) nx_j_copy(j, out + (o++) * blk, w + (size_t)k * blk, blk);
    int rc = nx_j_sendrecv(j, r ^ b, out, o * blk, r ^ b, in, o * blk, round, 0);
    if (rc) return rc;
    o = 0;
    for (uint32_t k = 0; k < n; k++)
      if ((k & b) != (r & b)) nx_j_copy(j, w + (size_t)k * blk, in + (o++) * blk, blk);
  }
  return 0;
}

/* Pairwise exchange: every receive is posted into its slot first, then step
 * s sends to r+s (and the matching receive is from r-s). */
int nx_run_alltoall(nx_job *j) {
  uint32_t n = j->world, r = j->rank;
  size_t blk = j->count * j->es;
  const char *send = j->send;
  char *recv = j->recv;
  if (blk) nx_j_copy(j, recv + (size_t)r * blk, send + (size_t)r * blk, blk);
  if (n == 1) return 0;
  if (blk == 0) return nx_sync(j, 0);
  if (nx_algo_xor_graph(&j->params, n)) return alltoall_hypercube(j, blk);
  nx_sid *q = nx_job_alloc(j, 2 * (size_t)n * sizeof(nx_sid));
  if (!q) return NEXAR_ERR_NOMEM;
  memset(q, 0, 2 * (size_t)n * sizeof(nx_sid));
  for (uint32_t s = 1; s < n; s++) {
    uint32_t src = (r + n - s) % n;
    int rc = nx_j_irecv(j, src, 0, 0, recv + (size_t)src * blk, blk, &q[s]);
    if (rc) return rc;
  }
  for (uint32_t s = 1; s < n; s++) {
    uint32_t d = (r + s) % n;
    int rc = nx_j_isend(j, d, 0, 0, send + (size_t)d * blk, blk, &q[n + s]);
    if (rc) return rc;
  }
  return nx_j_waitall(j, q, 2 * (size_t)n);
}
