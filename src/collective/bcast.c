/* Broadcast: binomial tree for small messages, pipelined chain for large.
 * Data is received straight into the caller's buffer and forwarded from it. */
#include "collective/coll.h"

/* Virtual rank v (nx_tree_vrank: (r - root) mod n, r XOR root on a hypercube). v > 0 receives from
 * v minus its lowest set bit, then sends to v + m for every power of two m below that bit. */
static int bcast_binomial(nx_job *j, char *buf, size_t bytes) {
  const nx_algo_params *ap = &j->params;
  uint32_t n = j->world, root = j->root, v = nx_tree_vrank(ap, n, j->rank, root);
  uint32_t top = 1;
  while (top < n)
    top <<= 1;
  uint32_t low = v ? (v & (~v + 1)) : top;
  if (v) {
    int rc = nx_j_sendrecv(j, 0, NULL, 0, nx_tree_rank(ap, n, v - low, root), buf, bytes, 0, 0);
    if (rc) return rc;
  }
  nx_sid q[32] = {0};
  size_t nq = 0;
  for (uint32_t m = low >> 1; m >= 1; m >>= 1) {
    if (v + m >= n) continue;
    int rc = nx_j_isend(j, nx_tree_rank(ap, n, v + m, root), 0, 0, buf, bytes, &q[nq++]);
    if (rc) return rc;
  }
  return nx_j_waitall(j, q, nq);
}

/* Chain in ring order from the root (nx_ring_pos), cut into whole-element segments: v receives
 * segment s from v-1 and forwards it to v+1 while later segments arrive
 * (`window` receives posted ahead). */
static int bcast_chain(nx_job *j, char *buf, size_t count) {
  const nx_algo_params *p = &j->params;
  uint32_t n = j->world, root = nx_ring_pos(p, j->world, j->root);
  uint32_t v = (nx_ring_pos(p, n, j->rank) + n - root) % n; /* along the ring */
  size_t es = j->es, segel = nx_seg_elems(p->bcast_segment, es);
  size_t nseg = nx_seg_count(count, segel);
  unsigned win = p->window * 2;
  uint32_t prev = nx_ring_rank(p, n, (v + n - 1 + root) % n);
  uint32_t next = nx_ring_rank(p, n, (v + 1 + root) % n);
  int last = v == n - 1;
  nx_sid *sends = NULL, *recvs = NULL;
  if (!last) {
    sends = nx_job_alloc(j, nseg * sizeof(nx_sid));
    if (!sends) return NEXAR_ERR_NOMEM;
  }
  if (v) {
    recvs = nx_job_alloc(j, win * sizeof(nx_sid));
    if (!recvs) return NEXAR_ERR_NOMEM;
  }
  int rc = 0;
  size_t posted = 0;
  for (size_t s = 0; !rc && s < nseg; s++) {
    size_t off, len;
    if (v) {
      while (!rc && posted < nseg && posted < s + win) {
        nx_seg_range(count, segel, posted, &off, &len);
        rc = nx_j_irecv(j, prev, 0, (uint32_t)posted, buf + off * es, len * es,
                        &recvs[posted % win]);
        posted++;
      }
      if (!rc) rc = nx_j_wait(j, &recvs[s % win]);
    }
    nx_seg_range(count, segel, s, &off, &len);
    if (!rc && !last) rc = nx_j_isend(j, next, 0, (uint32_t)s, buf + off * es, len * es, &sends[s]);
  }
  if (rc) return rc;
  return last ? 0 : nx_j_waitall(j, sends, nseg);
}

/* Sparse graphs: down the breadth-first spanning tree from the root, every
 * edge between neighbours (store-and-forward, depth = the root's
 * eccentricity). */
static int bcast_tree(nx_job *j, char *buf, size_t bytes) {
  uint32_t parent, ch[64];
  uint32_t k = nx_bfs_tree(&j->params, j->world, j->root, j->rank, &parent, ch, 64);
  if (parent == UINT32_MAX - 1 || k > 64) return NEXAR_ERR_NOMEM;
  if (parent != UINT32_MAX) {
    int rc = nx_j_sendrecv(j, 0, NULL, 0, parent, buf, bytes, 0, 0);
    if (rc) return rc;
  }
  nx_sid q[64] = {0};
  for (uint32_t i = 0; i < k; i++) {
    int rc = nx_j_isend(j, ch[i], 0, 0, buf, bytes, &q[i]);
    if (rc) return rc;
  }
  return nx_j_waitall(j, q, k);
}

int nx_run_broadcast(nx_job *j) {
  switch (nx_algo_broadcast(j->count, j->es, j->world, &j->params)) {
  case NX_BC_NONE:
    return j->world > 1 ? nx_sync(j, 0) : 0;
  case NX_BC_BINOMIAL:
    return bcast_binomial(j, j->buf, j->count * j->es);
  case NX_BC_CHAIN:
    return bcast_chain(j, j->buf, j->count);
  case NX_BC_TREE:
    return bcast_tree(j, j->buf, j->count * j->es);
  }
  return nx_fail(NEXAR_ERR_UNSUPPORTED, "%s: no algorithm", nx_job_name(j));
}
