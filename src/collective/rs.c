/* reduce_scatter (ring, rank r gets block r) and reduce (binomial tree). */
#include "collective/coll.h"
#include "reduce/reduce.h"

#include <string.h>

/* The ring engine's reduce-scatter phase over send[count*n]; our block lands
 * in recv. In place (recv == send + r*count) works because chunk r of the
 * input is only read by the last step, which writes it. */
int nx_run_reduce_scatter(nx_job *j) {
  const nx_algo_params *p = &j->params;
  size_t bytes = j->count * j->es;
  if (j->world == 1) {
    if (bytes && j->recv != j->send) nx_j_copy(j, j->recv, j->send, bytes);
    return 0;
  }
  if (j->count == 0) return nx_sync(j, 0);
  int large = bytes >= p->large_msg_bytes || nx_algo_force_segment;
  size_t seg = large ? nx_seg_elems(p->segment_bytes, j->es) : j->count;
  return nx_ring_run(j, j->send, NULL, j->recv, j->count * j->world, seg, large ? p->window : 2);
}

/* Binomial tree on virtual ranks v = (r - root) mod n: in round i a rank with
 * bit i set sends its partial (covering v .. v+2^i-1) to v - 2^i and stops;
 * otherwise it receives from v + 2^i and reduces (lower virtual ranks on the
 * left). Only the root's buffer is written; a non-root with children works in
 * scratch, a leaf sends its buffer as is. */
/* Sparse graphs other than a power-of-two hypercube: up the breadth-first
 * spanning tree to the root (children in ascending order, each folded in as
 * it arrives), every edge between neighbours. */
static int reduce_tree(nx_job *j, size_t bytes) {
  uint32_t parent, ch[64];
  uint32_t k = nx_bfs_tree(&j->params, j->world, j->root, j->rank, &parent, ch, 64);
  if (parent == UINT32_MAX - 1 || k > 64) return NEXAR_ERR_NOMEM;
  char *acc = j->buf, *tmp = NULL;
  if (k) {
    tmp = nx_job_alloc(j, bytes);
    if (!tmp) return NEXAR_ERR_NOMEM;
    if (parent != UINT32_MAX) { /* the input stays as it was: sum into scratch */
      acc = nx_job_alloc(j, bytes);
      if (!acc) return NEXAR_ERR_NOMEM;
      nx_j_copy(j, acc, j->buf, bytes);
    }
  }
  for (uint32_t i = 0; i < k; i++) {
    int rc = nx_j_sendrecv(j, 0, NULL, 0, ch[i], tmp, bytes, 0, 0);
    if (rc) return rc;
    nx_j_reduce3(j, acc, acc, tmp, j->count);
  }
  return parent == UINT32_MAX ? 0 : nx_j_sendrecv(j, parent, acc, bytes, 0, NULL, 0, 0, 0);
}

int nx_run_reduce(nx_job *j) {
  const nx_algo_params *ap = &j->params;
  uint32_t n = j->world, root = j->root;
  uint32_t v = nx_tree_vrank(ap, n, j->rank, root);
  size_t bytes = j->count * j->es;
  if (n == 1) return 0;
  if (j->count == 0) return nx_sync(j, 0);
  if (ap->topology && !nx_algo_xor_graph(ap, n)) return reduce_tree(j, bytes);
  int has_child = v + 1 < n && !(v & 1);
  char *acc = j->buf, *tmp = NULL;
  if (has_child) {
    tmp = nx_job_alloc(j, bytes);
    if (!tmp) return NEXAR_ERR_NOMEM;
    if (v != 0) {
      acc = nx_job_alloc(j, bytes);
      if (!acc) return NEXAR_ERR_NOMEM;
      nx_j_copy(j, acc, j->buf, bytes);
    }
  }
  uint32_t round = 0;
  for (uint32_t mask = 1; mask < n; mask <<= 1, round++) {
    if (v & mask) {
      uint32_t parent = nx_tree_rank(ap, n, v - mask, root);
      return nx_j_sendrecv(j, parent, acc, bytes, 0, NULL, 0, round, 0);
    }
    if (v + mask < n) {
      uint32_t child = nx_tree_rank(ap, n, v + mask, root);
      int rc = nx_j_sendrecv(j, 0, NULL, 0, child, tmp, bytes, round, 0);
      if (rc) return rc;
      nx_j_reduce3(j, acc, acc, tmp, j->count);
    }
  }
  return 0;
}
