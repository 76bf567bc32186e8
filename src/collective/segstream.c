/* Streamed collectives through the communicator's shared-memory segment
 * (runtime/cseg.h, NX_CSEG_PIECE): each writer's buffer a ring of pieces
 * its readers copy out as they come (non-temporally from NX_CSEG_NT_MIN);
 * between two ranks (and for a broadcast at any number), the choice call
 * by call between that and single copy (nx_segcoll_either). segcoll.c runs
 * the rest of the segment collectives and calls nx_segop_stream. */
#include <stdatomic.h>
#include <string.h>

#include "collective/coll.h"
#include "collective/segop.h"
#include "core/copy.h"
#include "proto/pick.h"
#include "runtime/cseg.h"
#include "runtime/engine.h"

int nx_segop_written(void *arg, uint32_t *who) {
  nx_segop *o = arg;
  /* seq's count: its arrival, which we saw, published the zero before it */
  if (atomic_load_explicit(&o->s->ctl[o->from].stream[o->seq & 1], memory_order_acquire) >= o->need)
    return 1;
  *who = o->from;
  return 0;
}

/* Streamed, writer: every other rank (each reads us) read o->need pieces. */
static int pieces_read(void *arg, uint32_t *who) {
  nx_segop *o = arg;
  nx_cseg *s = o->s;
  for (; o->next < s->n; o->next++) {
    if (o->next == s->me) continue;
    if (atomic_load_explicit(&s->ctl[o->next].sread[o->seq & 1], memory_order_acquire) < o->need) {
      *who = o->next;
      return 0;
    }
  }
  return 1;
}

/* What this rank streams (src, NULL if it only reads) and where what it
 * reads from rank o->from goes (dst, NULL if it only writes). Two ranks,
 * but for a broadcast. */
static void stream_ends(nx_segop *o, const uint8_t **src, uint8_t **dst) {
  nx_job *j = o->j;
  uint32_t me = o->s->me, other = me ^ 1;
  size_t blk = j->count * j->es, st = j->stride ? j->stride : blk;
  *src = NULL;
  *dst = NULL;
  o->from = other;
  switch (j->kind) {
  case NX_COLL_BROADCAST:
    o->from = j->root;
    if (me == j->root)
      *src = j->buf;
    else
      *dst = j->buf;
    break;
  case NX_COLL_ALL_GATHER:
  case NX_COLL_GATHER:
    if (j->kind == NX_COLL_ALL_GATHER || me != j->root) *src = j->send;
    if (j->kind == NX_COLL_ALL_GATHER || me == j->root) *dst = (uint8_t *)j->recv + other * st;
    break;
  case NX_COLL_SCATTER:
    if (me == j->root)
      *src = (const uint8_t *)j->send + other * blk;
    else
      *dst = j->recv;
    break;
  case NX_COLL_ALL_TO_ALL:
    *src = (const uint8_t *)j->send + other * blk;
    *dst = (uint8_t *)j->recv + other * blk;
    break;
  default:
    break;
  }
}

/* A streamed collective's pieces of NX_CSEG_PIECE bytes, and how many of
 * them its writer's buffer holds at once (the ring). */
static void stream_shape(const nx_cseg *s, const nx_job *j, uint32_t *pieces, uint32_t *ring) {
  size_t blk = j->count * j->es, piece = NX_CSEG_PIECE;
  *pieces = (uint32_t)((blk + piece - 1) / piece); /* (< UINT32_MAX: segchoice.c, streamed) */
  *ring = (uint32_t)(s->slot / piece);
}

/* Streamed (cseg.h, NX_CSEG_PIECE), once this rank arrived: a writer writes its pieces into its
 * buffer as a ring, waiting for the arrivals (and signatures) once the ring is full or it is done,
 * and for its readers' reading of a piece before it writes over it; a reader waits for the
 * arrivals, then copies each piece of its writer as it comes. A rank that does both writes piece c,
 * then reads piece c. It returns once it wrote and read the last: its buffer is not written again
 * before every reader began the next collective (step 1). */
static int run_stream(nx_segop *o) {
  nx_job *j = o->j;
  nx_cseg *s = o->s;
  size_t blk = j->count * j->es, piece = NX_CSEG_PIECE;
  uint32_t pieces, ring;
  stream_shape(s, j, &pieces, &ring);
  const uint8_t *src;
  uint8_t *dst, *mine = nx_cseg_buf(s, s->me, o->seq), *theirs;
  stream_ends(o, &src, &dst);
  theirs = nx_cseg_buf(s, o->from, o->seq);
  int checked = 0, rc = 0;
  nx_own_part own = src && dst ? nx_segop_own_parts(o) : (nx_own_part){0};
  /* a large block's copies out go around the cache (NX_CSEG_NT_MIN); an
   * all_gather's own block then goes with each piece written, read once */
  int nt = blk >= NX_CSEG_NT_MIN, fused = nt && own.to && own.from == src;
  own.nt = nt;
  o->extra_ns = nx_spin_for_bytes(piece);
  o->extra_set = 1;
  /* writing and reading: half the ring ahead of what it reads */
  uint32_t lead = dst ? (ring + 1) / 2 : pieces, wrote = 0;
  for (uint32_t c = 0; c < pieces || (src && wrote < pieces); c++) {
    for (; src && wrote < pieces && wrote < c + lead; wrote++) {
      size_t off = (size_t)wrote * piece, len = NX_MIN(piece, blk - off);
      if (wrote >= ring) {
        o->next = 0;
        if (!checked++ && (rc = nx_segop_wait(o, nx_segop_arrived, "its arrival"))) return rc;
        o->next = 0;
        o->need = wrote - ring + 1;
        if ((rc = nx_segop_wait(o, pieces_read, "it to read a piece"))) return rc;
      }
      memcpy(mine + (size_t)(wrote % ring) * piece, src + off, len);
      if (fused) nx_own_step(&own, len);
      nx_cseg_stream(s, 0, o->seq, wrote + 1);
    }
    if (dst && c < pieces) {
      size_t off = (size_t)c * piece, len = NX_MIN(piece, blk - off);
      o->next = 0;
      if (!checked++ && (rc = nx_segop_wait(o, nx_segop_arrived, "its arrival"))) return rc;
      o->need = c + 1;
      uint32_t who;
      if (own.to && !fused && !nx_segop_written(o, &who)) nx_own_step(&own, piece);
      if ((rc = nx_segop_wait(o, nx_segop_written, "its writer's next piece"))) return rc;
      if (nt)
        nx_copy_nt(dst + off, theirs + (size_t)(c % ring) * piece, len);
      else
        memcpy(dst + off, theirs + (size_t)(c % ring) * piece, len);
      nx_cseg_stream(s, 1, o->seq, c + 1);
    }
    if (!dst && wrote >= pieces) break;
  }
  o->next = 0;
  if (!checked && (rc = nx_segop_wait(o, nx_segop_arrived, "its arrival"))) return rc;
  /* the rest of our own block: own_step resumes the copy the waits began;
   * where the block overlaps (memmove) or is in place, nx_segop_copy_own does it */
  if (own.to)
    nx_own_step(&own, SIZE_MAX);
  else
    nx_segop_copy_own(o);
  return 0;
}

/* A streamed job after step 1. Where nx_segcoll_either says, it takes the
 * way its decider picks (nx_segop_pick), which measures the call. Single
 * copy reads from src (run: as its publishing would). */
int nx_segop_stream(nx_segop *o, const void *src) {
  nx_job *j = o->j;
  nx_cseg *s = o->s;
  int either = nx_segcoll_either(j), decides = either && s->me == nx_segcoll_decider(j), rc;
  uint64_t t0 = decides ? nx_segop_pick(o) : 0;
  nx_cseg_stream_begin(s, o->seq);
  if (either) s->ctl[s->me].arr[o->seq % NX_CSEG_RING].addr = (uint64_t)(uintptr_t)src;
  nx_cseg_arrive(s, o->seq, &o->sig);
  /* The other rank learns the way after its own arrival: who decides
   * depends on the root, and ranks that disagree on it must each arrive
   * to find the mismatch, not wait for the other's arrival first. */
  if (either && !decides && (rc = nx_segop_learn(o))) return rc;
  if (!o->sig.how)
    rc = run_stream(o);
  else if (!(rc = nx_segop_wait(o, nx_segop_arrived, "its arrival")))
    rc = nx_segop_single_copy(o);
  if (!rc) nx_segop_measured(o, t0);
  return rc;
}

/* Bytes of its buffer a streamed collective's writer uses: its pieces, up
 * to the ring. */
size_t nx_segop_stream_bytes(const nx_cseg *s, const nx_job *j) {
  uint32_t pieces, ring;
  stream_shape(s, j, &pieces, &ring);
  return (size_t)NX_MIN(pieces, ring) * NX_CSEG_PIECE;
}
