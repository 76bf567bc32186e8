/* Allreduce schedules: recursive doubling, recursive halving-doubling, and
 * the (pipelined) ring engine that reduce_scatter shares. Every element is
 * reduced in one fixed order: by recursive doubling's identical expression
 * tree on every rank (lower group's value always the left operand), or by a
 * single owner (ring, halving-doubling) that then distributes it, so every
 * rank ends with bit-identical results. */
#include "collective/coll.h"
#include "reduce/reduce.h"

#include <string.h>

/* ------------------------------------------------------------ ring engine */

/* Chunk indices (mod n) for step s: the reduce-scatter step s sends chunk
 * r-s-1 and receives r-s-2 (so rank r finishes with chunk r, as MPI's
 * reduce_scatter wants); the allgather step s sends r-s and receives r-s-1. */
static uint32_t rs_send_chunk(uint32_t r, uint32_t n, uint32_t s) {
  return (uint32_t)(((uint64_t)r + 2u * (uint64_t)n - s - 1) % n);
}
static uint32_t rs_recv_chunk(uint32_t r, uint32_t n, uint32_t s) {
  return (uint32_t)(((uint64_t)r + 2u * (uint64_t)n - s - 2) % n);
}
static uint32_t ag_send_chunk(uint32_t r, uint32_t n, uint32_t s) {
  return (uint32_t)(((uint64_t)r + n - s) % n);
}
static uint32_t ag_recv_chunk(uint32_t r, uint32_t n, uint32_t s) {
  return (uint32_t)(((uint64_t)r + 2u * (uint64_t)n - s - 1) % n);
}

typedef struct ring {
  nx_job *j;
  uint32_t n, r, next, prev;
  size_t es, count, seg;
  unsigned win;
  const char *in;
  char *inplace, *out;
  const size_t *ccnt, *coff; /* chunk table (reduce_scatter_v), else NULL: even split */
  const nx_algo_params *ap;  /* r is a ring position; chunk c is the block of position c */
  char *dbl[2];              /* reduce_scatter accumulators for steps 0..n-3 (chunk-sized) */
  char *slots;               /* win receive slots */
  size_t slot_elems;
  size_t *rs_soff, *ag_soff; /* first send index of each step */
  nx_sid *rs_send, *ag_send;
} ring;

/* Receive tasks in order: (phase 0 = reduce-scatter, 1 = allgather; step s;
 * segment j), empty chunks skipped. phase 2 = done. */
typedef struct ring_it {
  int phase;
  uint32_t s;
  size_t jseg, t; /* t counts reduce-scatter tasks (slot index) */
} ring_it;

static size_t chunk_len(const ring *g, uint32_t c) {
  c = nx_ring_rank(g->ap, g->n, c);
  return g->ccnt ? g->ccnt[c] : nx_chunk_len(g->count, g->n, c);
}
static size_t chunk_off(const ring *g, uint32_t c) {
  c = nx_ring_rank(g->ap, g->n, c);
  return g->coff ? g->coff[c] : nx_chunk_off(g->count, g->n, c);
}
static uint32_t it_chunk(const ring *g, const ring_it *it) {
  return it->phase == 0 ? rs_recv_chunk(g->r, g->n, it->s) : ag_recv_chunk(g->r, g->n, it->s);
}

static void it_norm(const ring *g, ring_it *it) {
  while (it->phase < 2) {
    if (it->s > g->n - 2) {
      it->phase = (it->phase == 0 && g->inplace) ? 1 : 2;
      it->s = 0;
      it->jseg = 0;
      continue;
    }
    if (it->jseg < nx_seg_count(chunk_len(g, it_chunk(g, it)), g->seg)) return;
    it->s++;
    it->jseg = 0;
  }
}

static void it_next(const ring *g, ring_it *it) {
  if (it->phase == 0) it->t++;
  it->jseg++;
  it_norm(g, it);
}

/* Segment (off, len) in elements within chunk c. */
static void seg_of(const ring *g, uint32_t c, size_t jseg, size_t *off, size_t *len) {
  nx_seg_range(chunk_len(g, c), g->seg, jseg, off, len);
}

static nx_sid *rs_req(const ring *g, uint32_t s, size_t jseg) {
  size_t i = g->rs_soff[s] + jseg;
  return i < g->rs_soff[s + 1] ? &g->rs_send[i] : NULL;
}
static nx_sid *ag_req(const ring *g, uint32_t s, size_t jseg) {
  size_t i = g->ag_soff[s] + jseg;
  return i < g->ag_soff[s + 1] ? &g->ag_send[i] : NULL;
}

static int ring_post(ring *g, const ring_it *it, nx_sid *out) {
  uint32_t c = it_chunk(g, it);
  size_t off, len;
  seg_of(g, c, it->jseg, &off, &len);
  if (it->phase == 0) {
    char *slot = g->slots + (it->t % g->win) * g->slot_elems * g->es;
    return nx_j_irecv(g->j, g->prev, it->s, (uint32_t)it->jseg, slot, len * g->es, out);
  }
  /* Allgather lands in the user buffer: first make sure the reduce-scatter
   * send of the same region (same step, same segment) has left it. */
  nx_sid *sq = rs_req(g, it->s, it->jseg);
  int rc = sq ? nx_j_wait(g->j, sq) : 0;
  if (rc) return rc;
  char *dst = g->inplace + (chunk_off(g, c) + off) * g->es;
  return nx_j_irecv(g->j, g->prev, g->n - 1 + it->s, (uint32_t)it->jseg, dst, len * g->es, out);
}

static int ring_process(ring *g, const ring_it *it) {
  nx_job *j = g->j;
  uint32_t n = g->n, s = it->s, c = it_chunk(g, it);
  size_t off, len, es = g->es;
  seg_of(g, c, it->jseg, &off, &len);
  size_t goff = (chunk_off(g, c) + off) * es;
  if (it->phase == 1) {
    if (s + 1 > n - 2) return 0;
    nx_sid *q = ag_req(g, s + 1, it->jseg);
    return nx_j_isend(j, g->next, n - 1 + s + 1, (uint32_t)it->jseg, g->inplace + goff, len * es,
                      q);
  }
  const char *slot = g->slots + (it->t % g->win) * g->slot_elems * es;
  char *dst;
  if (g->inplace) {
    dst = g->inplace + goff;
  } else if (s == n - 2) {
    dst = g->out + off * es;
  } else {
    /* dbl[s%2] was last sent at step s-1 (holding step s-2's result). With
     * uneven chunks (a chunk table) step s-2's chunk may have had no such
     * segment while an earlier one of this parity did: wait for every send
     * of this segment from dbl[s%2] (a waited one is cleared, so each is
     * waited once). */
    for (uint32_t k = s - 1; s >= 2 && k >= 1; k -= 2) {
      nx_sid *q = rs_req(g, k, it->jseg);
      int rc = q ? nx_j_wait(j, q) : 0;
      if (rc) return rc;
      if (!g->ccnt || k < 3) break;
    }
    dst = g->dbl[s % 2] + off * es;
  }
  /* acc = (partial from ranks c+1 .. r-1) op (mine): the same order on
   * whichever rank owns the chunk. */
  nx_j_reduce3(j, dst, slot, g->in + goff, len);
  if (s < n - 2)
    return nx_j_isend(j, g->next, s + 1, (uint32_t)it->jseg, dst, len * es,
                      rs_req(g, s + 1, it->jseg));
  if (g->inplace)
    return nx_j_isend(j, g->next, n - 1, (uint32_t)it->jseg, dst, len * es, ag_req(g, 0, it->jseg));
  return 0;
}

static int ring_go(ring *gp, size_t seg_elems, unsigned window);

int nx_ring_run(nx_job *j, const void *in, void *inplace, void *out, size_t count, size_t seg_elems,
                unsigned window) {
  ring g = {.j = j, .n = j->world, .r = j->rank, .es = j->es, .count = count};
  g.in = in;
  g.inplace = inplace;
  g.out = out;
  return ring_go(&g, seg_elems, window);
}

int nx_ring_run_v(nx_job *j, const void *in, void *out, const size_t *counts, const size_t *offs,
                  size_t seg_elems, unsigned window) {
  ring g = {.j = j, .n = j->world, .r = j->rank, .es = j->es, .ccnt = counts, .coff = offs};
  g.in = in;
  g.out = out;
  return ring_go(&g, seg_elems, window);
}

static int ring_go(ring *gp, size_t seg_elems, unsigned window) {
  ring g = *gp;
  nx_job *j = g.j;
  void *inplace = g.inplace;
  uint32_t n = g.n;
  g.ap = &j->params;
  g.next = nx_ring_next(g.ap, n, g.r);
  g.prev = nx_ring_prev(g.ap, n, g.r);
  g.r = nx_ring_pos(g.ap, n, g.r); /* from here a position */
  g.win = window ? window : 1;
  size_t maxchunk = 0;
  for (uint32_t c = 0; c < n; c++)
    maxchunk = NX_MAX(maxchunk, chunk_len(&g, c));
  g.seg = seg_elems ? seg_elems : 1;
  g.slot_elems = NX_MIN(g.seg, maxchunk);

  /* Send bookkeeping: per step, the first index of its segments. */
  size_t nrs = 0, nag = 0;
  size_t *offs = nx_job_alloc(j, 2 * (size_t)(n + 1) * sizeof(size_t));
  if (!offs) return NEXAR_ERR_NOMEM;
  g.rs_soff = offs;
  g.ag_soff = offs + n + 1;
  for (uint32_t s = 0; s < n; s++) {
    g.rs_soff[s] = nrs;
    g.ag_soff[s] = nag;
    if (s < n - 1) {
      nrs += nx_seg_count(chunk_len(&g, rs_send_chunk(g.r, n, s)), g.seg);
      if (inplace) nag += nx_seg_count(chunk_len(&g, ag_send_chunk(g.r, n, s)), g.seg);
    }
  }
  g.rs_soff[n] = nrs;
  g.ag_soff[n] = nag;
  nx_sid *reqs = nx_job_alloc(j, (nrs + nag) * sizeof(nx_sid));
  if (!reqs) return NEXAR_ERR_NOMEM;
  memset(reqs, 0, (nrs + nag) * sizeof(nx_sid));
  g.rs_send = reqs;
  g.ag_send = reqs + nrs;

  size_t slot_bytes = g.slot_elems * g.es;
  size_t dbl_bytes = (!inplace && n > 2) ? maxchunk * g.es : 0;
  char *mem = nx_job_alloc(j, g.win * slot_bytes + 2 * dbl_bytes);
  if (!mem) return NEXAR_ERR_NOMEM;
  g.slots = mem;
  g.dbl[0] = mem + g.win * slot_bytes;
  g.dbl[1] = g.dbl[0] + dbl_bytes;

  /* Step 0 sends our own chunk r-1, straight from the input. */
  int rc = 0;
  uint32_t c0 = rs_send_chunk(g.r, n, 0);
  for (size_t js = 0; !rc && js < g.rs_soff[1]; js++) {
    size_t off, len;
    seg_of(&g, c0, js, &off, &len);
    rc = nx_j_isend(j, g.next, 0, (uint32_t)js, g.in + (chunk_off(&g, c0) + off) * g.es, len * g.es,
                    &g.rs_send[js]);
  }
  /* Keep `win` receives posted ahead of the one being reduced, so the next
   * segments transfer while this one is reduced. */
  ring_it post = {0}, cur = {0};
  nx_sid *pend = nx_job_alloc(j, g.win * sizeof(nx_sid));
  if (!pend) return NEXAR_ERR_NOMEM;
  it_norm(&g, &post);
  it_norm(&g, &cur);
  size_t posted = 0, done = 0;
  while (!rc && post.phase < 2 && posted < g.win) {
    rc = ring_post(&g, &post, &pend[posted % g.win]);
    posted++;
    it_next(&g, &post);
  }
  while (!rc && cur.phase < 2) {
    rc = nx_j_wait(j, &pend[done % g.win]);
    if (!rc) rc = ring_process(&g, &cur);
    done++;
    it_next(&g, &cur);
    if (!rc && post.phase < 2) {
      rc = ring_post(&g, &post, &pend[posted % g.win]);
      posted++;
      it_next(&g, &post);
    }
  }
  if (rc) return rc;
  return nx_j_waitall(j, reqs, nrs + nag);
}

/* ---------------------------------------------------- recursive doubling */

/* Non-power-of-two folding: ranks p2..n-1 hand their vector to rank r-p2
 * (round 0) and get the result back at the end (round `last`). */
static int fold_in(nx_job *j, char *buf, char *tmp, size_t count, uint32_t p2) {
  uint32_t r = j->rank, ex = j->world - p2;
  size_t bytes = count * j->es;
  if (r >= p2) return nx_j_sendrecv(j, r - p2, buf, bytes, 0, NULL, 0, 0, 0);
  if (r < ex) {
    int rc = nx_j_sendrecv(j, 0, NULL, 0, r + p2, tmp, bytes, 0, 0);
    if (rc) return rc;
    nx_j_reduce3(j, buf, buf, tmp, count);
  }
  return 0;
}

static int fold_out(nx_job *j, char *buf, size_t count, uint32_t p2, uint32_t round) {
  uint32_t r = j->rank, ex = j->world - p2;
  size_t bytes = count * j->es;
  if (r >= p2) return nx_j_sendrecv(j, 0, NULL, 0, r - p2, buf, bytes, round, 0);
  if (r < ex) return nx_j_sendrecv(j, r + p2, buf, bytes, 0, NULL, 0, round, 0);
  return 0;
}

static uint32_t log2u(uint32_t p2) {
  uint32_t l = 0;
  while ((1u << l) < p2)
    l++;
  return l;
}

static int allreduce_recdbl(nx_job *j, char *buf, size_t count) {
  uint32_t r = j->rank, p2 = nx_pow2_floor(j->world), L = log2u(p2);
  size_t bytes = count * j->es;
  char *tmp = nx_job_alloc(j, bytes);
  if (!tmp) return NEXAR_ERR_NOMEM;
  int rc = fold_in(j, buf, tmp, count, p2);
  if (rc) return rc;
  if (r < p2) {
    for (uint32_t i = 0; i < L; i++) {
      uint32_t partner = r ^ (1u << i);
      rc = nx_j_sendrecv(j, partner, buf, bytes, partner, tmp, bytes, 1 + i, 0);
      if (rc) return rc;
      /* Both partners evaluate (lower group) op (higher group). */
      if (r < partner)
        nx_j_reduce3(j, buf, buf, tmp, count);
      else
        nx_j_reduce3(j, buf, tmp, buf, count);
    }
  }
  return fold_out(j, buf, count, p2, 1 + L);
}

/* ------------------------------------- recursive halving-doubling (Rabenseifner) */

static int allreduce_halvdbl(nx_job *j, char *buf, size_t count) {
  uint32_t r = j->rank, p2 = nx_pow2_floor(j->world), L = log2u(p2);
  size_t es = j->es;
  char *tmp = nx_job_alloc(j, count * es);
  if (!tmp) return NEXAR_ERR_NOMEM;
  int rc = fold_in(j, buf, tmp, count, p2);
  if (rc) return rc;
  if (r < p2) {
    size_t lo[33], hi[33]; /* range held before round i (L <= 32) */
    lo[0] = 0;
    hi[0] = count;
    for (uint32_t i = 0; i < L; i++) {
      uint32_t partner = r ^ (1u << i);
      size_t mid = lo[i] + (hi[i] - lo[i]) / 2;
      size_t klo = r < partner ? lo[i] : mid, khi = r < partner ? mid : hi[i];
      size_t slo = r < partner ? mid : lo[i], shi = r < partner ? hi[i] : mid;
      rc = nx_j_sendrecv(j, partner, buf + slo * es, (shi - slo) * es, partner, tmp,
                         (khi - klo) * es, 1 + i, 0);
      if (rc) return rc;
      char *keep = buf + klo * es;
      if (r < partner)
        nx_j_reduce3(j, keep, keep, tmp, khi - klo);
      else
        nx_j_reduce3(j, keep, tmp, keep, khi - klo);
      lo[i + 1] = klo;
      hi[i + 1] = khi;
    }
    /* Allgather: undo the rounds, receiving the partner's half in place. */
    for (uint32_t i = L; i-- > 0;) {
      uint32_t partner = r ^ (1u << i);
      size_t mlo = lo[i + 1], mhi = hi[i + 1];
      size_t plo = mlo == lo[i] ? mhi : lo[i], phi = mlo == lo[i] ? hi[i] : mlo;
      rc = nx_j_sendrecv(j, partner, buf + mlo * es, (mhi - mlo) * es, partner, buf + plo * es,
                         (phi - plo) * es, 1 + L + (L - 1 - i), 0);
      if (rc) return rc;
    }
  }
  return fold_out(j, buf, count, p2, 1 + 2 * L);
}

/* -------------------------------------------------------------- dispatch */

int nx_allreduce_buf(nx_job *j, void *buf, size_t count) {
  const nx_algo_params *p = &j->params;
  switch (nx_algo_allreduce(count, j->es, j->world, p)) {
  case NX_AR_NONE:
    return count ? 0 : nx_sync(j, 0);
  case NX_AR_RECDBL:
    return allreduce_recdbl(j, buf, count);
  case NX_AR_HALVDBL:
    return allreduce_halvdbl(j, buf, count);
  case NX_AR_RING:
    return nx_ring_run(j, buf, buf, NULL, count, nx_chunk_len(count, j->world, 0), 2);
  case NX_AR_RING_PIPE:
    return nx_ring_run(j, buf, buf, NULL, count, nx_seg_elems(p->segment_bytes, j->es), p->window);
  }
  return nx_fail(NEXAR_ERR_UNSUPPORTED, "%s: no algorithm", nx_job_name(j));
}

int nx_run_allreduce(nx_job *j) {
  return nx_allreduce_buf(j, j->buf, j->count);
}

/* reduce_scatter followed by all_gather: the ring, never folded. */
int nx_run_allreduce_rs_ag(nx_job *j) {
  const nx_algo_params *p = &j->params;
  if (j->world == 1) return 0;
  if (j->count == 0) return nx_sync(j, 0);
  size_t seg = j->count * j->es >= p->large_msg_bytes || nx_algo_force_segment
                   ? nx_seg_elems(p->segment_bytes, j->es)
                   : nx_chunk_len(j->count, j->world, 0);
  return nx_ring_run(j, j->buf, j->buf, NULL, j->count, seg,
                     seg == nx_chunk_len(j->count, j->world, 0) ? 2 : p->window);
}

/* All buckets as one vector: packed into scratch, reduced, unpacked. */
int nx_run_bucketed(nx_job *j) {
  if (j->world == 1) return 0;
  if (j->count == 0) return nx_sync(j, 0);
  if (j->nbuckets == 1) return nx_allreduce_buf(j, j->buckets[0].buf, j->count);
  char *flat = nx_job_alloc(j, j->count * j->es);
  if (!flat) return NEXAR_ERR_NOMEM;
  size_t off = 0;
  for (size_t i = 0; i < j->nbuckets; i++) {
    size_t b = j->buckets[i].count * j->es;
    if (b) nx_j_copy(j, flat + off, j->buckets[i].buf, b);
    off += b;
  }
  int rc = nx_allreduce_buf(j, flat, j->count);
  if (rc) return rc;
  off = 0;
  for (size_t i = 0; i < j->nbuckets; i++) {
    size_t b = j->buckets[i].count * j->es;
    if (b) nx_j_copy(j, j->buckets[i].buf, flat + off, b);
    off += b;
  }
  return 0;
}
