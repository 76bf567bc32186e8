/* Job helpers shared by every schedule: scratch memory that outlives a failed
 * schedule until nx_coll_end, and messaging wrappers. */
#include "collective/coll.h"
#include "runtime/comm.h"

#include <stdlib.h>

static const char *const nx_op_names[] = {
    [NX_COLL_ALL_REDUCE] = "all_reduce",
    [NX_COLL_BROADCAST] = "broadcast",
    [NX_COLL_ALL_GATHER] = "all_gather",
    [NX_COLL_REDUCE_SCATTER] = "reduce_scatter",
    [NX_COLL_REDUCE] = "reduce",
    [NX_COLL_ALL_TO_ALL] = "all_to_all",
    [NX_COLL_GATHER] = "gather",
    [NX_COLL_SCATTER] = "scatter",
    [NX_COLL_SCAN] = "scan",
    [NX_COLL_EXSCAN] = "exclusive_scan",
    [NX_COLL_BARRIER] = "barrier",
    [NX_COLL_ALL_REDUCE_BUCKETED] = "all_reduce_bucketed",
    [NX_COLL_ALL_REDUCE_RS_AG] = "all_reduce_rs_ag",
    [NX_COLL_SPLIT] = "split",
    [NX_COLL_ALL_GATHER_V] = "all_gather_v",
    [NX_COLL_REDUCE_SCATTER_V] = "reduce_scatter_v",
    [NX_COLL_ALL_TO_ALL_V] = "all_to_all_v",
    [NX_COLL_GATHER_V] = "gather_v",
    [NX_COLL_SCATTER_V] = "scatter_v",
};

const char *nx_job_name(const nx_job *j) {
  if (j->kind > 0 && j->kind <= NX_COLL_LAST && nx_op_names[j->kind]) return nx_op_names[j->kind];
  return "collective";
}

void *nx_job_alloc(nx_job *j, size_t bytes) {
  for (size_t i = 0; i < NX_JOB_SCRATCH; i++) {
    if (j->scratch[i]) continue;
    j->scratch_cap[i] = bytes ? bytes : 1;
    j->scratch[i] =
        bytes >= NX_SCRATCH_KEEP_MIN ? nx_comm_scratch_take(j->c, bytes, &j->scratch_cap[i]) : NULL;
    if (!j->scratch[i]) j->scratch[i] = malloc(j->scratch_cap[i]);
    if (!j->scratch[i])
      nx_fail(NEXAR_ERR_NOMEM, "%s: out of memory for %zu bytes of scratch", nx_job_name(j), bytes);
    return j->scratch[i];
  }
  nx_fail(NEXAR_ERR_NOMEM, "%s: too many scratch buffers", nx_job_name(j));
  return NULL;
}

int nx_j_isend(nx_job *j, uint32_t dest, uint32_t round, uint32_t seg, const void *p, size_t len,
               nx_sid *out) {
  *out = nx_sched_send(&j->sched, dest, round, seg, p, len);
  return 0;
}

int nx_j_irecv(nx_job *j, uint32_t src, uint32_t round, uint32_t seg, void *p, size_t len,
               nx_sid *out) {
  *out = nx_sched_recv(&j->sched, src, round, seg, p, len);
  return 0;
}

/* An empty message gets a valid pointer (the sink), never NULL. */
int nx_j_isend0(nx_job *j, uint32_t dest, uint32_t round, uint32_t seg, const void *p, size_t len,
                nx_sid *out) {
  *out = nx_sched_send0(&j->sched, dest, round, seg, len ? p : j->sink, len);
  return 0;
}

int nx_j_irecv0(nx_job *j, uint32_t src, uint32_t round, uint32_t seg, void *p, size_t len,
                nx_sid *out) {
  *out = nx_sched_recv0(&j->sched, src, round, seg, len ? p : j->sink, len);
  return 0;
}

int nx_j_wait(nx_job *j, nx_sid *r) {
  nx_sched_wait(&j->sched, *r);
  *r = 0;
  return 0;
}

int nx_j_waitall(nx_job *j, nx_sid *r, size_t n) {
  for (size_t i = 0; i < n; i++)
    nx_j_wait(j, &r[i]);
  return 0;
}

int nx_j_sendrecv(nx_job *j, uint32_t dest, const void *sp, size_t slen, uint32_t src, void *rp,
                  size_t rlen, uint32_t round, uint32_t seg) {
  nx_sid q[2] = {0, 0};
  if (rp) nx_j_irecv(j, src, round, seg, rp, rlen, &q[0]);
  if (sp) nx_j_isend(j, dest, round, seg, sp, slen, &q[1]);
  return nx_j_waitall(j, q, 2);
}

void nx_j_reduce3(nx_job *j, void *dst, const void *a, const void *b, size_t count) {
  nx_sched_reduce3(&j->sched, dst, a, b, count);
}
void nx_j_reduce(nx_job *j, void *dst, const void *src, size_t count) {
  nx_sched_reduce(&j->sched, dst, src, count);
}
void nx_j_copy(nx_job *j, void *dst, const void *src, size_t bytes) {
  nx_sched_copy(&j->sched, dst, src, bytes);
}
void nx_j_fill_identity(nx_job *j, void *dst, size_t count) {
  nx_sched_fill_identity(&j->sched, dst, count);
}
void nx_j_call(nx_job *j, int (*fn)(void *job)) {
  nx_sched_call(&j->sched, fn, j);
}

/* Dissemination: in round i every rank tells (r + 2^i) and hears from
 * (r - 2^i); after ceil(log2 n) rounds each has heard from all, transitively
 * (on sparse topologies: between neighbours only, see above).
 * Also used for count-0 collectives so their signature is still checked. */
/* Sparse topologies other than a power-of-two hypercube: up the
 * breadth-first spanning tree from rank 0 (a rank reports once every child
 * has), then down it (everyone has arrived once the root heard from all):
 * every edge between neighbours, one message per edge each way, 2 x the
 * root's eccentricity hops. */
static int sync_tree(nx_job *j, uint32_t round) {
  uint32_t parent, ch[64];
  uint32_t k = nx_bfs_tree(&j->params, j->world, 0, j->rank, &parent, ch, 64);
  if (parent == UINT32_MAX - 1 || k > 64) return NEXAR_ERR_NOMEM;
  nx_sid q[64];
  for (uint32_t i = 0; i < k; i++) {
    int rc = nx_j_irecv0(j, ch[i], round, 0, j->sink, 0, &q[i]);
    if (rc) return rc;
  }
  int rc = nx_j_waitall(j, q, k);
  if (!rc && parent != UINT32_MAX) {
    rc = nx_j_isend0(j, parent, round, 0, j->sink, 0, &q[0]);
    if (!rc) rc = nx_j_irecv0(j, parent, round + 1, 0, j->sink, 0, &q[1]);
    if (!rc) rc = nx_j_waitall(j, q, 2);
  }
  for (uint32_t i = 0; !rc && i < k; i++)
    rc = nx_j_isend0(j, ch[i], round + 1, 0, j->sink, 0, &q[i]);
  return rc ? rc : nx_j_waitall(j, q, k);
}

int nx_sync(nx_job *j, uint32_t round0) {
  uint32_t n = j->world, r = j->rank;
  static const uint8_t token = 1;
  uint32_t round = round0;
  if (nx_algo_xor_graph(&j->params, n)) { /* recursive doubling: partners are neighbours */
    for (uint32_t m = 1; m < n; m <<= 1, round++) {
      int rc = nx_j_sendrecv(j, r ^ m, &token, 1, r ^ m, j->sink, 1, round, 0);
      if (rc) return rc;
    }
    return 0;
  }
  if (j->params.topology) return sync_tree(j, round);
  for (uint32_t d = 1; d < n; d <<= 1, round++) {
    int rc = nx_j_sendrecv(j, (r + d) % n, &token, 1, (r + n - d) % n, j->sink, 1, round, 0);
    if (rc) return rc;
  }
  return 0;
}

int nx_run_barrier(nx_job *j) {
  return nx_sync(j, 0);
}
