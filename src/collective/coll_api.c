/* Public collective functions: argument validation, then the job's schedule
 * posted (run.c) and, for a blocking call, waited for. Validation
 * happens before anything is sent; a rejected call still starts and ends its
 * collective, so it takes its place in the order and the peers learn of it. */
#include "collective/coll.h"
#include "reduce/reduce.h"
#include "runtime/comm.h"
#include "runtime/request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_reduction(int kind) {
  switch (kind) {
  case NX_COLL_ALL_REDUCE:
  case NX_COLL_REDUCE_SCATTER:
  case NX_COLL_REDUCE:
  case NX_COLL_SCAN:
  case NX_COLL_EXSCAN:
  case NX_COLL_ALL_REDUCE_BUCKETED:
  case NX_COLL_ALL_REDUCE_RS_AG:
  case NX_COLL_REDUCE_SCATTER_V:
    return 1;
  default:
    return 0;
  }
}

static int is_scan(int kind) {
  return kind == NX_COLL_SCAN || kind == NX_COLL_EXSCAN;
}

static int has_root(int kind) {
  return kind == NX_COLL_BROADCAST || kind == NX_COLL_REDUCE || kind == NX_COLL_GATHER ||
         kind == NX_COLL_SCATTER || kind == NX_COLL_GATHER_V || kind == NX_COLL_SCATTER_V;
}

static int has_dtype(int kind) {
  return kind != NX_COLL_BARRIER && kind != NX_COLL_SPLIT;
}

/* [a, a+alen) and [b, b+blen) share a byte (empty ranges never do). */
static int overlaps(const void *a, size_t alen, const void *b, size_t blen) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return alen && blen && x < y + blen && y < x + alen;
}

static int bucket_cmp(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const nexar_bucket *)a)->buf;
  uintptr_t y = (uintptr_t)((const nexar_bucket *)b)->buf;
  return x < y ? -1 : x > y;
}

static int validate_buckets(nx_job *j, const char *name) {
  if (j->nbuckets && !j->buckets)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: bucket array is NULL with %zu buckets", name,
                   j->nbuckets);
  size_t total = 0;
  for (size_t i = 0; i < j->nbuckets; i++) {
    const nexar_bucket *b = &j->buckets[i];
    if (b->count && !b->buf)
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: bucket %zu is NULL with count %zu", name, i,
                     b->count);
    if (b->count > SIZE_MAX / j->es - total) /* total <= SIZE_MAX / es holds */
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: total bucket size overflows", name);
    total += b->count;
  }
  j->count = total;
  if (j->nbuckets < 2) return 0;
  /* Sort a copy by address; neighbours must not overlap. */
  nexar_bucket *s = calloc(j->nbuckets, sizeof *s);
  if (!s) return nx_fail(NEXAR_ERR_NOMEM, "%s: out of memory checking buckets", name);
  memcpy(s, j->buckets, j->nbuckets * sizeof *s);
  qsort(s, j->nbuckets, sizeof *s, bucket_cmp);
  int rc = 0;
  const nexar_bucket *prev = NULL;
  for (size_t i = 0; i < j->nbuckets && !rc; i++) {
    if (!s[i].count) continue;
    if (prev && overlaps(prev->buf, prev->count * j->es, s[i].buf, s[i].count * j->es))
      rc = nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: buckets overlap", name);
    prev = &s[i];
  }
  free(s);
  return rc;
}

/* Checks one call's arguments (rank and world known); sets j->es. */
static int validate(nx_job *j, uint32_t rank, uint32_t world) {
  const char *name = nx_job_name(j);
  int k = j->kind;
  if (has_dtype(k)) {
    if (!nx_dtype_valid(j->dt))
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: invalid dtype %d", name, (int)j->dt);
    j->es = nexar_dtype_size(j->dt);
  } else {
    j->es = 1;
  }
  if (is_reduction(k) && !nx_op_valid(j->op))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: invalid reduction op %d", name, (int)j->op);
  if (is_reduction(k) && !nx_op_dtype_valid(j->dt, j->op))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: op %s needs an integer dtype, not %s", name,
                   nexar_op_name(j->op), nexar_dtype_name(j->dt));
  if (is_scan(k) && j->op == NEXAR_AVG)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "%s: op avg is not defined for prefix reductions (divide the sum)", name);
  if (has_root(k) && j->root >= world)
    return nx_fail(NEXAR_ERR_INVALID_RANK, "%s: root %u outside world of %u", name, j->root, world);
  if (nx_kind_is_v(k)) return nx_validate_v(j, rank, world);
  if (k == NX_COLL_ALL_REDUCE_BUCKETED) return validate_buckets(j, name);
  if (k == NX_COLL_SPLIT && !j->out)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: out is NULL", name);
  size_t n = world, c = j->count, es = j->es;
  if (c > SIZE_MAX / es || c * es > SIZE_MAX / n)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: count %zu * %zu bytes * %zu ranks overflows",
                   name, c, es, n);
  if (c == 0) return 0;
  size_t blk = c * es, all = blk * n;
  const char *send = j->send;
  char *recv = j->recv;
  int root = rank == j->root;
  switch (k) {
  case NX_COLL_ALL_REDUCE:
  case NX_COLL_ALL_REDUCE_RS_AG:
  case NX_COLL_BROADCAST:
  case NX_COLL_REDUCE:
  case NX_COLL_SCAN:
  case NX_COLL_EXSCAN:
    if (!j->buf) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: buf is NULL", name);
    return 0;
  case NX_COLL_ALL_GATHER:
  case NX_COLL_GATHER: /* in place: send == recv + r*count */
    if (!send) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: send is NULL", name);
    if (k == NX_COLL_GATHER && !root) return 0;
    if (!recv) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: recv is NULL", name);
    if (overlaps(send, blk, recv, all) && send != recv + (size_t)rank * blk)
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: send and recv overlap", name);
    return 0;
  case NX_COLL_REDUCE_SCATTER:
  case NX_COLL_SCATTER: /* in place: recv == send + r*count */
    if (!recv) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: recv is NULL", name);
    if (k == NX_COLL_SCATTER && !root) return 0;
    if (!send) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: send is NULL", name);
    if (overlaps(send, all, recv, blk) && recv != send + (size_t)rank * blk)
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: send and recv overlap", name);
    return 0;
  case NX_COLL_ALL_TO_ALL:
    if (!send || !recv)
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: %s is NULL", name, send ? "recv" : "send");
    if (overlaps(send, all, recv, all))
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: send and recv overlap", name);
    return 0;
  default:
    return 0;
  }
}

static int run_algo(nx_job *j) {
  switch (j->kind) {
  case NX_COLL_ALL_REDUCE:
    return nx_run_allreduce(j);
  case NX_COLL_BROADCAST:
    return nx_run_broadcast(j);
  case NX_COLL_ALL_GATHER:
    return nx_run_allgather(j);
  case NX_COLL_REDUCE_SCATTER:
    return nx_run_reduce_scatter(j);
  case NX_COLL_REDUCE:
    return nx_run_reduce(j);
  case NX_COLL_ALL_TO_ALL:
    return nx_run_alltoall(j);
  case NX_COLL_GATHER:
    return nx_run_gather(j);
  case NX_COLL_SCATTER:
    return nx_run_scatter(j);
  case NX_COLL_SCAN:
  case NX_COLL_EXSCAN:
    return nx_run_scan(j);
  case NX_COLL_BARRIER:
    return nx_run_barrier(j);
  case NX_COLL_ALL_REDUCE_BUCKETED:
    return nx_run_bucketed(j);
  case NX_COLL_ALL_REDUCE_RS_AG:
    return nx_run_allreduce_rs_ag(j);
  case NX_COLL_SPLIT:
    return nx_run_split(j);
  case NX_COLL_ALL_GATHER_V:
    return nx_run_allgather_v(j);
  case NX_COLL_REDUCE_SCATTER_V:
    return nx_run_reduce_scatter_v(j);
  case NX_COLL_ALL_TO_ALL_V:
    return nx_run_alltoall_v(j);
  case NX_COLL_GATHER_V:
    return nx_run_gather_v(j);
  case NX_COLL_SCATTER_V:
    return nx_run_scatter_v(j);
  }
  return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "unknown collective %d", j->kind);
}

/* Mismatch detection. The port checks every frame's signature, so a mismatch
 * is found as soon as one frame crosses between disagreeing ranks, and the
 * finder's nx_coll_end tells everyone. Two gaps remain, closed here:
 * - Schedules that receive before they send (a broadcast's non-roots, a
 *   folded allreduce rank) could all wait on each other until the timeout
 *   when the ranks disagree: so every rank first sends a token to r+1.
 * - A rank whose result does not depend on every rank (broadcast root,
 *   reduce/gather leaves, scatter root, scan's rank 0) could finish before
 *   anyone objects: those collectives first run a dissemination round set,
 *   after which each rank has (transitively, every hop checked) heard from
 *   all. Collectives whose result depends on every rank need only the token:
 *   a disagreeing rank's data cannot reach anyone. */
static int partial_dependency(const nx_job *j) {
  int kind = j->kind;
  if (kind == NX_COLL_REDUCE_SCATTER_V) {
    /* an empty chunk never travels: a rank need not hear from everyone */
    for (uint32_t i = 0; i < j->world; i++)
      if (j->rcounts[i] == 0) return 1;
    return 0;
  }
  return kind == NX_COLL_BROADCAST || kind == NX_COLL_REDUCE || kind == NX_COLL_GATHER ||
         kind == NX_COLL_SCATTER || kind == NX_COLL_SCAN || kind == NX_COLL_EXSCAN ||
         kind == NX_COLL_GATHER_V || kind == NX_COLL_SCATTER_V;
}

#define NX_ROUND_TOKEN 0xfffffff0u
#define NX_ROUND_SYNC 0xffffff00u

/* The token only has to give every rank's ring edge r -> r+1 a frame before
 * r first blocks. Where the schedule itself sends rank r's first (non-empty)
 * frame to r+1 before any wait, that frame carries the signature and the
 * token is left out: allreduce by recursive doubling on a power-of-two world
 * (round 1 pairs r with r^1, which is r+1 for even r and for both ranks of a
 * world of 2), and every allreduce schedule of a world of 2 when both
 * halves/chunks are non-empty (count >= 2). Decided from this rank's own
 * signature; under disagreement every rank still sends to r+1 before it
 * blocks (token or data), so some frame crosses between disagreeing ranks,
 * and a full-dependency result cannot complete without such a frame. A token
 * that arrives where none was expected carries a different signature, so it
 * is a mismatch too. Saves one message per rank (about 9 us at n = 2). */
static int first_send_to_next(const nx_job *j, uint32_t r) {
  uint32_t n = j->world;
  /* every pair exchanges a message (empty ones too), posted before any wait */
  if (j->kind == NX_COLL_ALL_GATHER_V || j->kind == NX_COLL_ALL_TO_ALL_V) return 1;
  if (j->kind != NX_COLL_ALL_REDUCE || j->count == 0 || (n & (n - 1)) != 0) return 0;
  nx_ar_algo a = nx_algo_allreduce(j->count, j->es, n, &j->params);
  if (n == 2) return a == NX_AR_RECDBL || j->count >= 2;
  return a == NX_AR_RECDBL && nx_ring_next(&j->params, n, r) == (r ^ 1u);
}

/* NEXAR_AVG: the algorithms reduce it as a sum; this step, the last of the
 * schedule, divides the final sum in place, once, on every rank that holds a
 * result (so all ranks of an allreduce divide the same bits the same way). */
static void avg_steps(nx_job *j) {
  uint32_t n = j->world;
  nx_sched *s = &j->sched;
  switch (j->kind) {
  case NX_COLL_ALL_REDUCE:
  case NX_COLL_ALL_REDUCE_RS_AG:
    nx_sched_avg(s, j->buf, j->count, n);
    break;
  case NX_COLL_REDUCE:
    if (j->rank == j->root) nx_sched_avg(s, j->buf, j->count, n);
    break;
  case NX_COLL_REDUCE_SCATTER:
    nx_sched_avg(s, j->recv, j->count, n);
    break;
  case NX_COLL_REDUCE_SCATTER_V:
    nx_sched_avg(s, j->recv, j->rcounts[j->rank], n);
    break;
  case NX_COLL_ALL_REDUCE_BUCKETED:
    for (size_t i = 0; i < j->nbuckets; i++)
      nx_sched_avg(s, j->buckets[i].buf, j->buckets[i].count, n);
    break;
  default:
    break;
  }
}

static int build_body(nx_job *j) {
  uint32_t n = j->world, r = j->rank;
  if (n == 1 || j->kind == NX_COLL_BARRIER) return run_algo(j);
  if (partial_dependency(j)) {
    int rc = nx_sync(j, NX_ROUND_SYNC);
    return rc ? rc : run_algo(j);
  }
  static const uint8_t token = 1;
  nx_sid q[2] = {0, 0};
  int rc = 0;
  /* the ring the ring algorithms use: neighbours on a sparse topology */
  uint32_t prev = nx_ring_prev(&j->params, n, r), next = nx_ring_next(&j->params, n, r);
  if (!first_send_to_next(j, prev))
    rc = nx_j_irecv(j, prev, NX_ROUND_TOKEN, 0, &j->sink[4], 1, &q[0]);
  if (!rc && !first_send_to_next(j, r))
    rc = nx_j_isend(j, next, NX_ROUND_TOKEN, 0, &token, 1, &q[1]);
  if (!rc) rc = run_algo(j);
  if (!rc) rc = nx_j_waitall(j, q, 2);
  return rc;
}

int nx_job_build(nx_job *j) {
  int rc = build_body(j);
  if (!rc && j->world > 1 && is_reduction(j->kind) && j->op == NEXAR_AVG) {
    nx_sched_wait_all(&j->sched); /* no send still reads what is divided */
    avg_steps(j);                 /* steps on the buffers, so device staging sees them */
  }
  return rc;
}

static int coll_post(nx_job *j, nx_job *run, const nx_coll_sig *sig, int vrc, int nb,
                     nexar_request **req);

/* Validates, starts (fixing the order on this thread) and posts the
 * schedule; a blocking call then waits for it here (driving the engine,
 * and so the schedule, on this thread). */
static int coll_call(nx_job *j, int nb, nexar_request **req) {
  const char *name = nx_job_name(j);
  if (nb && req) *req = NULL;
  if (j->kind == NX_COLL_SPLIT && j->out) *j->out = NULL;
  if (!j->c) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: client is NULL", name);
  if (!nb && !j->no_seg && !atomic_load(&j->c->aborted)) nx_segcoll_prepare(j->c);
  j->ad = j->host_only ? NULL : j->c->cfg.adapter;
  int vrc = validate(j, nexar_rank(j->c), nexar_world_size(j->c));
  if (!vrc && nb && !req) vrc = nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: req is NULL", name);
  nx_job *run = NULL;
  /* the segment's collectives run on this thread, from j: no run, no request */
  j->seg = !nb && !vrc && !j->no_seg ? nx_segcoll_eligible(j) : NX_SEG_NONE;
  int seg = j->seg != NX_SEG_NONE;
  j->seg_inline = nx_segcoll_inline(j);
  if (seg && nx_segcoll_nowait(j)) {
    j->seg_nowait = 1;
    nx_coll_mark_seg_nowait(j->c, j->c->next_seq); /* this thread alone moves it */
  }
  if (!vrc && !seg && nx_run_new(j, &run))
    vrc = nx_fail(NEXAR_ERR_NOMEM, "%s: out of memory for the request", name);
  nx_coll_sig sig = {
      .op = (uint8_t)j->kind,
      .dtype = has_dtype(j->kind) ? (uint8_t)j->dt : 0,
      .redop = is_reduction(j->kind) ? (uint8_t)j->op : 0,
      .root = has_root(j->kind) ? j->root : 0,
      .count = j->kind == NX_COLL_SPLIT ? 1 : (uint64_t)j->count,
  };
  if (nx_kind_is_v(j->kind)) sig.count = vrc ? 0 : nx_v_sig_count(j, nexar_world_size(j->c));
  if (run) j->vmem = NULL; /* the run owns it now */
  int rc = coll_post(j, run, &sig, vrc, nb, req);
  free(j->vmem); /* a call refused before it had a run */
  j->vmem = NULL;
  return rc;
}

/* NX_SEG_CHUNKS: j (begun) as consecutive collectives of a chunk each,
 * every one through the segment. Each carries the whole call's signature,
 * so ranks whose calls differ fail at the first; ranks whose calls agree
 * cut them alike. */
static int seg_chunks(nx_job *j, const nx_coll_sig *sig) {
  size_t per = nx_segcoll_chunk(j), total = j->count;
  char *base = j->buf; /* NULL but for all_reduce and reduce */
  nx_job part = *j;    /* the first part ends j's collective */
  j->k = NULL;
  /* all_gather (reduce_scatter): each chunk's blocks lie a whole block
   * apart in recv (send) */
  if (j->kind == NX_COLL_ALL_GATHER || j->kind == NX_COLL_REDUCE_SCATTER)
    part.stride = total * j->es;
  for (size_t off = 0; off < total; off += per) {
    part.count = NX_MIN(per, total - off);
    if (base) part.buf = base + off * j->es;
    if (part.stride) {
      part.send = (const char *)j->send + off * j->es;
      part.recv = (char *)j->recv + off * j->es;
    }
    if (off) {
      int rc = nx_coll_begin_seg(j->c, sig, &part.k);
      if (rc) return rc;
      part.rank = nx_coll_rank(part.k);
      part.world = nx_coll_size(part.k);
    }
    int rc = nx_run_end_now(&part, nx_segcoll_run(&part, sig)); /* part.k = NULL */
    if (rc) return rc;
  }
  return 0;
}

static int coll_post(nx_job *j, nx_job *run, const nx_coll_sig *sig, int vrc, int nb,
                     nexar_request **req) {
  nx_job *at = run ? run : j; /* a refused call still takes its place */
  int rc = !run && !vrc && j->seg != NX_SEG_NONE ? nx_coll_begin_seg(j->c, sig, &at->k)
                                                 : nx_coll_begin(j->c, sig, &at->k);
  if (rc) {
    if (run) nx_run_discard(run);
    return rc;
  }
  at->rank = nx_coll_rank(at->k);
  at->world = nx_coll_size(at->k);
  if (vrc) {
    /* Our own argument error is this caller's answer, even when a peer's
     * failure of the same collective reached the port first. */
    char why[512];
    snprintf(why, sizeof why, "%s", nexar_last_error());
    nx_run_end_now(at, vrc);
    if (run) nx_run_discard(run);
    nx_set_error_text(why);
    return vrc;
  }
  if (!run) /* a valid call without a run: coll_call chose the segment */
    return at->seg == NX_SEG_CHUNKS ? seg_chunks(at, sig)
                                    : nx_run_end_now(at, nx_segcoll_run(at, sig));
  nx_algo_params_from_config(&at->params, nx_coll_config(at->k));
  at->params.topology = nx_coll_graph(at->k, &at->params.degree);
  nx_segcoll_mark(at);
  nexar_request *r = nx_run_start(run);
  if (nb) {
    *req = r;
    return 0;
  }
  rc = nx_req_wait(r);
  nx_req_free(r);
  return rc;
}

int nx_coll_call(nx_job *j) {
  return coll_call(j, 0, NULL);
}

/* ------------------------------------------------------ public functions */

#define JOB(kind_, ...) nx_job j = {.kind = (kind_), .c = c, __VA_ARGS__}

int nexar_all_reduce(nexar_client *c, void *buf, size_t count, nexar_dtype dt, nexar_op op) {
  JOB(NX_COLL_ALL_REDUCE, .buf = buf, .count = count, .dt = dt, .op = op);
  return coll_call(&j, 0, NULL);
}
int nexar_all_reduce_nb(nexar_client *c, void *buf, size_t count, nexar_dtype dt, nexar_op op,
                        nexar_request **req) {
  JOB(NX_COLL_ALL_REDUCE, .buf = buf, .count = count, .dt = dt, .op = op);
  return coll_call(&j, 1, req);
}

int nexar_broadcast(nexar_client *c, void *buf, size_t count, nexar_dtype dt, uint32_t root) {
  JOB(NX_COLL_BROADCAST, .buf = buf, .count = count, .dt = dt, .root = root);
  return coll_call(&j, 0, NULL);
}
int nexar_broadcast_nb(nexar_client *c, void *buf, size_t count, nexar_dtype dt, uint32_t root,
                       nexar_request **req) {
  JOB(NX_COLL_BROADCAST, .buf = buf, .count = count, .dt = dt, .root = root);
  return coll_call(&j, 1, req);
}

int nexar_all_gather(nexar_client *c, const void *send, void *recv, size_t count, nexar_dtype dt) {
  JOB(NX_COLL_ALL_GATHER, .send = send, .recv = recv, .count = count, .dt = dt);
  return coll_call(&j, 0, NULL);
}
int nx_all_gather_host(nexar_client *c, const void *send, void *recv, size_t count,
                       nexar_dtype dt) {
  JOB(NX_COLL_ALL_GATHER, .send = send, .recv = recv, .count = count, .dt = dt, .host_only = 1);
  return coll_call(&j, 0, NULL);
}

int nexar_all_gather_nb(nexar_client *c, const void *send, void *recv, size_t count, nexar_dtype dt,
                        nexar_request **req) {
  JOB(NX_COLL_ALL_GATHER, .send = send, .recv = recv, .count = count, .dt = dt);
  return coll_call(&j, 1, req);
}

int nexar_reduce_scatter(nexar_client *c, const void *send, void *recv, size_t count,
                         nexar_dtype dt, nexar_op op) {
  JOB(NX_COLL_REDUCE_SCATTER, .send = send, .recv = recv, .count = count, .dt = dt, .op = op);
  return coll_call(&j, 0, NULL);
}
int nexar_reduce_scatter_nb(nexar_client *c, const void *send, void *recv, size_t count,
                            nexar_dtype dt, nexar_op op, nexar_request **req) {
  JOB(NX_COLL_REDUCE_SCATTER, .send = send, .recv = recv, .count = count, .dt = dt, .op = op);
  return coll_call(&j, 1, req);
}

int nexar_reduce(nexar_client *c, void *buf, size_t count, nexar_dtype dt, nexar_op op,
                 uint32_t root) {
  JOB(NX_COLL_REDUCE, .buf = buf, .count = count, .dt = dt, .op = op, .root = root);
  return coll_call(&j, 0, NULL);
}
int nexar_reduce_nb(nexar_client *c, void *buf, size_t count, nexar_dtype dt, nexar_op op,
                    uint32_t root, nexar_request **req) {
  JOB(NX_COLL_REDUCE, .buf = buf, .count = count, .dt = dt, .op = op, .root = root);
  return coll_call(&j, 1, req);
}

int nexar_all_to_all(nexar_client *c, const void *send, void *recv, size_t count, nexar_dtype dt) {
  JOB(NX_COLL_ALL_TO_ALL, .send = send, .recv = recv, .count = count, .dt = dt);
  return coll_call(&j, 0, NULL);
}
int nexar_all_to_all_nb(nexar_client *c, const void *send, void *recv, size_t count, nexar_dtype dt,
                        nexar_request **req) {
  JOB(NX_COLL_ALL_TO_ALL, .send = send, .recv = recv, .count = count, .dt = dt);
  return coll_call(&j, 1, req);
}

int nexar_gather(nexar_client *c, const void *send, void *recv, size_t count, nexar_dtype dt,
                 uint32_t root) {
  JOB(NX_COLL_GATHER, .send = send, .recv = recv, .count = count, .dt = dt, .root = root);
  return coll_call(&j, 0, NULL);
}
int nexar_gather_nb(nexar_client *c, const void *send, void *recv, size_t count, nexar_dtype dt,
                    uint32_t root, nexar_request **req) {
  JOB(NX_COLL_GATHER, .send = send, .recv = recv, .count = count, .dt = dt, .root = root);
  return coll_call(&j, 1, req);
}

int nexar_scatter(nexar_client *c, const void *send, void *recv, size_t count, nexar_dtype dt,
                  uint32_t root) {
  JOB(NX_COLL_SCATTER, .send = send, .recv = recv, .count = count, .dt = dt, .root = root);
  return coll_call(&j, 0, NULL);
}
int nexar_scatter_nb(nexar_client *c, const void *send, void *recv, size_t count, nexar_dtype dt,
                     uint32_t root, nexar_request **req) {
  JOB(NX_COLL_SCATTER, .send = send, .recv = recv, .count = count, .dt = dt, .root = root);
  return coll_call(&j, 1, req);
}

int nexar_scan(nexar_client *c, void *buf, size_t count, nexar_dtype dt, nexar_op op) {
  JOB(NX_COLL_SCAN, .buf = buf, .count = count, .dt = dt, .op = op);
  return coll_call(&j, 0, NULL);
}
int nexar_scan_nb(nexar_client *c, void *buf, size_t count, nexar_dtype dt, nexar_op op,
                  nexar_request **req) {
  JOB(NX_COLL_SCAN, .buf = buf, .count = count, .dt = dt, .op = op);
  return coll_call(&j, 1, req);
}

int nexar_exclusive_scan(nexar_client *c, void *buf, size_t count, nexar_dtype dt, nexar_op op) {
  JOB(NX_COLL_EXSCAN, .buf = buf, .count = count, .dt = dt, .op = op);
  return coll_call(&j, 0, NULL);
}
int nexar_exclusive_scan_nb(nexar_client *c, void *buf, size_t count, nexar_dtype dt, nexar_op op,
                            nexar_request **req) {
  JOB(NX_COLL_EXSCAN, .buf = buf, .count = count, .dt = dt, .op = op);
  return coll_call(&j, 1, req);
}

int nexar_barrier(nexar_client *c) {
  JOB(NX_COLL_BARRIER, .count = 0);
  return coll_call(&j, 0, NULL);
}
int nexar_barrier_nb(nexar_client *c, nexar_request **req) {
  JOB(NX_COLL_BARRIER, .count = 0);
  return coll_call(&j, 1, req);
}

int nexar_all_reduce_bucketed(nexar_client *c, const nexar_bucket *b, size_t n, nexar_dtype dt,
                              nexar_op op) {
  JOB(NX_COLL_ALL_REDUCE_BUCKETED, .buckets = b, .nbuckets = n, .dt = dt, .op = op);
  return coll_call(&j, 0, NULL);
}
int nexar_all_reduce_bucketed_nb(nexar_client *c, const nexar_bucket *b, size_t n, nexar_dtype dt,
                                 nexar_op op, nexar_request **req) {
  JOB(NX_COLL_ALL_REDUCE_BUCKETED, .buckets = b, .nbuckets = n, .dt = dt, .op = op);
  return coll_call(&j, 1, req);
}

int nexar_all_reduce_rs_ag(nexar_client *c, void *buf, size_t count, nexar_dtype dt, nexar_op op) {
  JOB(NX_COLL_ALL_REDUCE_RS_AG, .buf = buf, .count = count, .dt = dt, .op = op);
  return coll_call(&j, 0, NULL);
}
int nexar_all_reduce_rs_ag_nb(nexar_client *c, void *buf, size_t count, nexar_dtype dt, nexar_op op,
                              nexar_request **req) {
  JOB(NX_COLL_ALL_REDUCE_RS_AG, .buf = buf, .count = count, .dt = dt, .op = op);
  return coll_call(&j, 1, req);
}

int nexar_split(nexar_client *c, uint32_t color, uint32_t key, nexar_client **out) {
  JOB(NX_COLL_SPLIT, .color = color, .key = key, .out = out);
  return coll_call(&j, 0, NULL);
}

/* ------------------------------------------------ variable-count forms */

int nexar_all_gather_v(nexar_client *c, const void *send, size_t send_count, void *recv,
                       const size_t *recv_counts, const size_t *recv_displs, nexar_dtype dt) {
  JOB(NX_COLL_ALL_GATHER_V, .send = send, .count = send_count, .recv = recv, .rcounts = recv_counts,
      .rdispls = recv_displs, .dt = dt);
  return coll_call(&j, 0, NULL);
}
int nexar_all_gather_v_nb(nexar_client *c, const void *send, size_t send_count, void *recv,
                          const size_t *recv_counts, const size_t *recv_displs, nexar_dtype dt,
                          nexar_request **req) {
  JOB(NX_COLL_ALL_GATHER_V, .send = send, .count = send_count, .recv = recv, .rcounts = recv_counts,
      .rdispls = recv_displs, .dt = dt);
  return coll_call(&j, 1, req);
}

int nexar_reduce_scatter_v(nexar_client *c, const void *send, void *recv, const size_t *recv_counts,
                           nexar_dtype dt, nexar_op op) {
  JOB(NX_COLL_REDUCE_SCATTER_V, .send = send, .recv = recv, .rcounts = recv_counts, .dt = dt,
      .op = op);
  return coll_call(&j, 0, NULL);
}
int nexar_reduce_scatter_v_nb(nexar_client *c, const void *send, void *recv,
                              const size_t *recv_counts, nexar_dtype dt, nexar_op op,
                              nexar_request **req) {
  JOB(NX_COLL_REDUCE_SCATTER_V, .send = send, .recv = recv, .rcounts = recv_counts, .dt = dt,
      .op = op);
  return coll_call(&j, 1, req);
}

int nexar_all_to_all_v(nexar_client *c, const void *send, const size_t *send_counts,
                       const size_t *send_displs, void *recv, const size_t *recv_counts,
                       const size_t *recv_displs, nexar_dtype dt) {
  JOB(NX_COLL_ALL_TO_ALL_V, .send = send, .scounts = send_counts, .sdispls = send_displs,
      .recv = recv, .rcounts = recv_counts, .rdispls = recv_displs, .dt = dt);
  return coll_call(&j, 0, NULL);
}
int nexar_all_to_all_v_nb(nexar_client *c, const void *send, const size_t *send_counts,
                          const size_t *send_displs, void *recv, const size_t *recv_counts,
                          const size_t *recv_displs, nexar_dtype dt, nexar_request **req) {
  JOB(NX_COLL_ALL_TO_ALL_V, .send = send, .scounts = send_counts, .sdispls = send_displs,
      .recv = recv, .rcounts = recv_counts, .rdispls = recv_displs, .dt = dt);
  return coll_call(&j, 1, req);
}

int nexar_gather_v(nexar_client *c, const void *send, size_t send_count, void *recv,
                   const size_t *recv_counts, const size_t *recv_displs, nexar_dtype dt,
                   uint32_t root) {
  JOB(NX_COLL_GATHER_V, .send = send, .count = send_count, .recv = recv, .rcounts = recv_counts,
      .rdispls = recv_displs, .dt = dt, .root = root);
  return coll_call(&j, 0, NULL);
}
int nexar_gather_v_nb(nexar_client *c, const void *send, size_t send_count, void *recv,
                      const size_t *recv_counts, const size_t *recv_displs, nexar_dtype dt,
                      uint32_t root, nexar_request **req) {
  JOB(NX_COLL_GATHER_V, .send = send, .count = send_count, .recv = recv, .rcounts = recv_counts,
      .rdispls = recv_displs, .dt = dt, .root = root);
  return coll_call(&j, 1, req);
}

int nexar_scatter_v(nexar_client *c, const void *send, const size_t *send_counts,
                    const size_t *send_displs, void *recv, size_t recv_count, nexar_dtype dt,
                    uint32_t root) {
  JOB(NX_COLL_SCATTER_V, .send = send, .scounts = send_counts, .sdispls = send_displs, .recv = recv,
      .count = recv_count, .dt = dt, .root = root);
  return coll_call(&j, 0, NULL);
}
int nexar_scatter_v_nb(nexar_client *c, const void *send, const size_t *send_counts,
                       const size_t *send_displs, void *recv, size_t recv_count, nexar_dtype dt,
                       uint32_t root, nexar_request **req) {
  JOB(NX_COLL_SCATTER_V, .send = send, .scounts = send_counts, .sdispls = send_displs, .recv = recv,
      .count = recv_count, .dt = dt, .root = root);
  return coll_call(&j, 1, req);
}
