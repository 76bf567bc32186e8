/* The variable-count collectives (MPI's *v): all_gather_v, reduce_scatter_v,
 * all_to_all_v, gather_v, scatter_v. Their arguments were validated and
 * normalised in coll_api.c (every displs array filled in).
 *
 * Lengths: only all_gather_v's and reduce_scatter_v's counts are shared by
 * every rank (their hash is in the signature, so ranks that disagree get a
 * MISMATCH). Elsewhere a receiver does not know what its sender computed, so
 * every block is a message, an empty one too (nx_j_isend0): the receiver
 * then always learns the sender's length from the frame, and a differing one
 * is its SIZE_MISMATCH (the port keeps that code for these kinds), never a
 * wait for a message that will not come. all_gather_v sends its empty
 * blocks too: then every rank hears from every other directly, so ranks
 * whose counts disagree always see each other's signature.
 *
 * Blocks are whole messages (the port takes large ones by rendezvous or the
 * bulk stream, as for all_to_all and gather); reduce_scatter_v runs the
 * pipelined ring of reduce_scatter over the uneven chunks. */
#include "collective/coll.h"

#include <stdlib.h>
#include <string.h>

int nx_kind_is_v(int kind) {
  return kind == NX_COLL_ALL_GATHER_V || kind == NX_COLL_REDUCE_SCATTER_V ||
         kind == NX_COLL_ALL_TO_ALL_V || kind == NX_COLL_GATHER_V || kind == NX_COLL_SCATTER_V;
}

/* Direct exchange: every receive posted into its block, then our block to
 * every other rank (r+1 first). */
int nx_run_allgather_v(nx_job *j) {
  uint32_t n = j->world, r = j->rank;
  size_t es = j->es, blk = j->count * es;
  char *recv = j->recv;
  char *own = recv ? recv + j->rdispls[r] * es : NULL;
  if (blk && own != j->send) nx_j_copy(j, own, j->send, blk);
  if (n == 1) return 0;
  nx_sid *q = nx_job_alloc(j, 2 * (size_t)n * sizeof(nx_sid));
  if (!q) return NEXAR_ERR_NOMEM;
  memset(q, 0, 2 * (size_t)n * sizeof(nx_sid));
  for (uint32_t s = 1; s < n; s++) {
    uint32_t src = (r + n - s) % n;
    size_t len = j->rcounts[src] * es;
    int rc = nx_j_irecv0(j, src, 0, 0, len ? recv + j->rdispls[src] * es : NULL, len, &q[s]);
    if (rc) return rc;
  }
  for (uint32_t s = 1; s < n; s++) {
    int rc = nx_j_isend0(j, (r + s) % n, 0, 0, j->send, blk, &q[n + s]);
    if (rc) return rc;
  }
  return nx_j_waitall(j, q, 2 * (size_t)n);
}

/* The ring engine over chunks of recv_counts (packed in send). */
int nx_run_reduce_scatter_v(nx_job *j) {
  const nx_algo_params *p = &j->params;
  uint32_t n = j->world;
  size_t es = j->es, maxc = 0;
  for (uint32_t i = 0; i < n; i++)
    maxc = NX_MAX(maxc, j->rcounts[i]);
  if (n == 1) {
    size_t b = j->rcounts[0] * es;
    if (b && j->recv != j->send) nx_j_copy(j, j->recv, j->send, b);
    return 0;
  }
  if (maxc == 0) return 0; /* nx_job_build synchronised first */
  int large = maxc * es >= p->large_msg_bytes || nx_algo_force_segment;
  size_t seg = large ? nx_seg_elems(p->segment_bytes, es) : maxc;
  return nx_ring_run_v(j, j->send, j->recv, j->rcounts, j->rdispls, seg, large ? p->window : 2);
}

/* Pairwise, as all_to_all, with every pair a message. */
int nx_run_alltoall_v(nx_job *j) {
  uint32_t n = j->world, r = j->rank;
  size_t es = j->es;
  const char *send = j->send;
  char *recv = j->recv;
  size_t own = j->rcounts[r] * es; /* equal to scounts[r] (validated) */
  if (own) nx_j_copy(j, recv + j->rdispls[r] * es, send + j->sdispls[r] * es, own);
  if (n == 1) return 0;
  nx_sid *q = nx_job_alloc(j, 2 * (size_t)n * sizeof(nx_sid));
  if (!q) return NEXAR_ERR_NOMEM;
  memset(q, 0, 2 * (size_t)n * sizeof(nx_sid));
  for (uint32_t s = 1; s < n; s++) {
    uint32_t src = (r + n - s) % n;
    size_t len = j->rcounts[src] * es;
    int rc = nx_j_irecv0(j, src, 0, 0, len ? recv + j->rdispls[src] * es : NULL, len, &q[s]);
    if (rc) return rc;
  }
  for (uint32_t s = 1; s < n; s++) {
    uint32_t d = (r + s) % n;
    size_t len = j->scounts[d] * es;
    int rc = nx_j_isend0(j, d, 0, 0, len ? send + j->sdispls[d] * es : NULL, len, &q[n + s]);
    if (rc) return rc;
  }
  return nx_j_waitall(j, q, 2 * (size_t)n);
}

/* Direct: every non-root sends its block (empty or not) to the root. */
int nx_run_gather_v(nx_job *j) {
  uint32_t n = j->world, r = j->rank, root = j->root;
  size_t es = j->es, blk = j->count * es;
  if (r != root) {
    nx_sid q = 0;
    int rc = nx_j_isend0(j, root, 0, 0, j->send, blk, &q);
    return rc ? rc : nx_j_wait(j, &q);
  }
  char *recv = j->recv;
  if (blk && recv + j->rdispls[r] * es != j->send)
    nx_j_copy(j, recv + j->rdispls[r] * es, j->send, blk);
  if (n == 1) return 0;
  nx_sid *q = nx_job_alloc(j, (size_t)n * sizeof(nx_sid));
  if (!q) return NEXAR_ERR_NOMEM;
  memset(q, 0, (size_t)n * sizeof(nx_sid));
  for (uint32_t s = 1; s < n; s++) {
    uint32_t src = (r + s) % n;
    size_t len = j->rcounts[src] * es;
    int rc = nx_j_irecv0(j, src, 0, 0, len ? recv + j->rdispls[src] * es : NULL, len, &q[s]);
    if (rc) return rc;
  }
  return nx_j_waitall(j, q, n);
}

/* Direct: the root sends every block (empty or not). */
int nx_run_scatter_v(nx_job *j) {
  uint32_t n = j->world, r = j->rank, root = j->root;
  size_t es = j->es, blk = j->count * es;
  if (r != root) {
    nx_sid q = 0;
    int rc = nx_j_irecv0(j, root, 0, 0, j->recv, blk, &q);
    return rc ? rc : nx_j_wait(j, &q);
  }
  const char *send = j->send;
  nx_sid *q = n > 1 ? nx_job_alloc(j, (size_t)n * sizeof(nx_sid)) : NULL;
  if (n > 1 && !q) return NEXAR_ERR_NOMEM;
  if (q) memset(q, 0, (size_t)n * sizeof(nx_sid));
  for (uint32_t s = 1; s < n; s++) {
    uint32_t d = (r + s) % n;
    size_t len = j->scounts[d] * es;
    int rc = nx_j_isend0(j, d, 0, 0, len ? send + j->sdispls[d] * es : NULL, len, &q[s]);
    if (rc) return rc;
  }
  if (blk && send + j->sdispls[r] * es != (const char *)j->recv)
    nx_j_copy(j, j->recv, send + j->sdispls[r] * es, blk);
  return q ? nx_j_waitall(j, q, n) : 0;
}

/* ------------------------------------------------------------ arguments */

typedef struct vblock {
  uintptr_t lo, hi; /* [lo, hi) bytes */
  int out;          /* written by the collective */
  uint32_t rank;
} vblock;

static int vblock_cmp(const void *a, const void *b) {
  const vblock *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Copies counts (n entries) and displs (or the packed ones when NULL) into
 * dst[0..n) and dst[n..2n); checks that every (displ + count) * es fits. */
static int norm(nx_job *j, const char *what, const size_t *counts, const size_t *displs,
                size_t *dst, uint32_t n) {
  const char *name = nx_job_name(j);
  if (!counts) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: %s_counts is NULL", name, what);
  size_t run = 0;
  for (uint32_t i = 0; i < n; i++) {
    size_t c = counts[i], d = displs ? displs[i] : run;
    if (c > SIZE_MAX - d || (c + d) > SIZE_MAX / j->es)
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                     "%s: %s block %u (displacement %zu + count %zu) * %zu bytes overflows", name,
                     what, i, d, c, j->es);
    dst[i] = c;
    dst[n + i] = d;
    if (!displs) run = d + c;
  }
  return 0;
}

/* Adds the non-empty blocks of one side to b[*nb]. */
static void add_blocks(vblock *b, size_t *nb, const char *base, const size_t *cnt,
                       const size_t *dsp, uint32_t n, size_t es, int out) {
  for (uint32_t i = 0; i < n; i++)
    if (cnt[i])
      b[(*nb)++] = (vblock){(uintptr_t)(base + dsp[i] * es),
                            (uintptr_t)(base + dsp[i] * es) + cnt[i] * es, out, i};
}

/* Output blocks must not overlap each other nor any input block. */
static int check_overlap(nx_job *j, vblock *b, size_t nb) {
  qsort(b, nb, sizeof *b, vblock_cmp);
  uintptr_t end_any = 0, end_out = 0;
  for (size_t i = 0; i < nb; i++) {
    if (b[i].lo < end_out || (b[i].out && b[i].lo < end_any))
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                     "%s: the %s block of rank %u overlaps an output block (or the input)",
                     nx_job_name(j), b[i].out ? "output" : "input", b[i].rank);
    end_any = NX_MAX(end_any, b[i].hi);
    if (b[i].out) end_out = NX_MAX(end_out, b[i].hi);
  }
  return 0;
}

static size_t vsum(const size_t *c, uint32_t n) {
  size_t t = 0;
  for (uint32_t i = 0; i < n; i++)
    t += c[i]; /* each (displ + count) * es fits, and packed displs are the prefix sums */
  return t;
}

int nx_validate_v(nx_job *j, uint32_t rank, uint32_t n) {
  const char *name = nx_job_name(j);
  int k = j->kind, root = rank == j->root;
  size_t es = j->es, cnt = j->count;
  int need_s = k == NX_COLL_ALL_TO_ALL_V || (k == NX_COLL_SCATTER_V && root);
  int need_r = k == NX_COLL_ALL_GATHER_V || k == NX_COLL_REDUCE_SCATTER_V ||
               k == NX_COLL_ALL_TO_ALL_V || (k == NX_COLL_GATHER_V && root);
  if (cnt > SIZE_MAX / es)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: count %zu * %zu bytes overflows", name, cnt,
                   es);
  j->vmem = malloc(4 * (size_t)n * sizeof(size_t) + 1);
  if (!j->vmem) return nx_fail(NEXAR_ERR_NOMEM, "%s: out of memory for the counts", name);
  size_t *sv = j->vmem, *rv = j->vmem + 2 * (size_t)n;
  int rc = 0;
  if (need_s && (rc = norm(j, "send", j->scounts, j->sdispls, sv, n))) return rc;
  if (need_r &&
      (rc = norm(j, "recv", j->rcounts, k == NX_COLL_REDUCE_SCATTER_V ? NULL : j->rdispls, rv, n)))
    return rc;
  j->scounts = need_s ? sv : NULL;
  j->sdispls = need_s ? sv + n : NULL;
  j->rcounts = need_r ? rv : NULL;
  j->rdispls = need_r ? rv + n : NULL;
  const char *send = j->send;
  char *recv = j->recv;
  size_t stot = need_s ? vsum(sv, n) : 0, rtot = need_r ? vsum(rv, n) : 0;
  /* the single count must agree with this rank's own block */
  if ((k == NX_COLL_ALL_GATHER_V || (k == NX_COLL_GATHER_V && root)) && cnt != rv[rank])
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: send_count %zu but recv_counts[%u] = %zu", name,
                   cnt, rank, rv[rank]);
  if (k == NX_COLL_SCATTER_V && root && cnt != sv[rank])
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: recv_count %zu but send_counts[%u] = %zu", name,
                   cnt, rank, sv[rank]);
  if (k == NX_COLL_ALL_TO_ALL_V && sv[rank] != rv[rank])
    return nx_fail(NEXAR_ERR_SIZE_MISMATCH,
                   "%s: rank %u sends itself %zu elements but recv_counts[%u] = %zu", name, rank,
                   sv[rank], rank, rv[rank]);
  /* NULL buffers only where nothing is held */
  size_t in_len = k == NX_COLL_REDUCE_SCATTER_V ? rtot : (need_s ? stot : cnt);
  size_t out_len = k == NX_COLL_REDUCE_SCATTER_V ? rv[rank] : (need_r ? rtot : cnt);
  int in_used = k != NX_COLL_SCATTER_V || root;
  int out_used = k != NX_COLL_GATHER_V || root;
  if (in_used && in_len && !send)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: send is NULL with %zu elements", name, in_len);
  if (out_used && out_len && !recv)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: recv is NULL with %zu elements", name, out_len);
  /* overlaps (the in-place forms excepted) */
  vblock *b = malloc((2 * (size_t)n + 2) * sizeof *b);
  if (!b) return nx_fail(NEXAR_ERR_NOMEM, "%s: out of memory checking buffers", name);
  size_t nb = 0;
  switch (k) {
  case NX_COLL_ALL_GATHER_V:
  case NX_COLL_GATHER_V:
    if (!out_used) break;
    add_blocks(b, &nb, recv, rv, rv + n, n, es, 1);
    if (cnt && send != recv + rv[n + rank] * es)
      b[nb++] = (vblock){(uintptr_t)send, (uintptr_t)send + cnt * es, 0, rank};
    break;
  case NX_COLL_REDUCE_SCATTER_V:
    if (rtot) b[nb++] = (vblock){(uintptr_t)send, (uintptr_t)send + rtot * es, 0, rank};
    if (rv[rank] && recv != send + rv[n + rank] * es)
      b[nb++] = (vblock){(uintptr_t)recv, (uintptr_t)recv + rv[rank] * es, 1, rank};
    break;
  case NX_COLL_ALL_TO_ALL_V:
    add_blocks(b, &nb, send, sv, sv + n, n, es, 0);
    add_blocks(b, &nb, recv, rv, rv + n, n, es, 1);
    break;
  case NX_COLL_SCATTER_V:
    if (!in_used) break;
    add_blocks(b, &nb, send, sv, sv + n, n, es, 0);
    if (cnt && recv != send + sv[n + rank] * es)
      b[nb++] = (vblock){(uintptr_t)recv, (uintptr_t)recv + cnt * es, 1, rank};
    break;
  }
  rc = check_overlap(j, b, nb);
  free(b);
  return rc;
}

/* The signature's count: a hash of the counts every rank must share. */
uint64_t nx_v_sig_count(const nx_job *j, uint32_t n) {
  if ((j->kind != NX_COLL_ALL_GATHER_V && j->kind != NX_COLL_REDUCE_SCATTER_V) || !j->rcounts)
    return 0;
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  for (uint32_t i = 0; i < n; i++) {
    h ^= (uint64_t)j->rcounts[i] + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h;
}
