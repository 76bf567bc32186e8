/* Same-host shared-memory rings (runtime/shm.c), ranks as threads of one
 * process (they prove the same host like processes do; the segment is
 * mapped once per process).
 *   shm_test WORLD FORGE
 * Every rank waits until its rings to every peer are up, sends a mixed
 * sequence of sizes around every threshold (the lane and ring limits, the
 * eager/rendezvous switch, the ring size) with one tag to its right
 * neighbour, non-blocking, and receives its left neighbour's in order
 * (non-overtaking across ring, backlog and rendezvous); checks that
 * point-to-point went by the ring; all_reduce at sizes around the
 * collective ring limit. FORGE >= 0: rank 0 then writes a forged record
 * into its ring to rank 1 (0: corrupt prefix, 1: a frame whose length
 * lies), as a third process with the segment could; rank 1's pending
 * receive from rank 0 must fail with PROTOCOL, and the record be counted. */
#include <nexar/nexar.h>

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "collective/coll.h"
#include "core/common.h"
#include "runtime/coll_port.h"
#include "runtime/comm.h"
#include "runtime/cseg.h"

static uint32_t W;
static int FORGE;
static nexar_client *g_c[16];
static int g_fail;
static pthread_barrier_t g_bar, g_bar2;
static atomic_int g_fast_taken; /* fast_notices */

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    printf("FAIL rank %u: ", me);                                                                  \
    printf(__VA_ARGS__);                                                                           \
    printf(" (%s)\n", nexar_last_error());                                                         \
    fflush(stdout);                                                                                \
    _exit(1); /* the other ranks would wait at a barrier for this one */                           \
  } while (0)

static const size_t SIZES[] = {
    0,      1,      8,      4095,   4096,           32767,         32768,    32769,
    65536,  262143, 262144, 262145, 300000,         1u << 20,      2u << 20, 3000,
    100000, 200000, 5,      250000, (1u << 20) - 1, (1u << 20) + 1};
#define NS (sizeof SIZES / sizeof SIZES[0])
#define ROUNDS 3

static uint8_t pat(uint32_t from, size_t k, size_t i) {
  return (uint8_t)(from * 31u + k * 7u + i);
}

static int state(nx_ep *ep, uint32_t peer) {
  pthread_mutex_lock(&ep->mu);
  int s = nx_shm_state_locked(ep->peers[peer]);
  pthread_mutex_unlock(&ep->mu);
  return s;
}

/* After a mismatch a root found late, the next collective: MISMATCH there
 * (it names the broadcast), either answer on the others (the root's
 * failure notice of that collective may reach them before they leave it),
 * then all well again. */
static void after_late(nexar_client *c, uint32_t me, int late, int32_t *a, const char *what) {
  int rc = nexar_barrier(c);
  if (late && rc != NEXAR_ERR_MISMATCH) FAIL("%s: barrier after it: %s", what, nexar_strerror(rc));
  if (!late && rc && rc != NEXAR_ERR_MISMATCH)
    FAIL("%s: barrier after it: %s", what, nexar_strerror(rc));
  /* its own finding, or the notice of a rank that found it first */
  if (late && !strstr(nexar_last_error(), "found at") && !strstr(nexar_last_error(), "failed it"))
    FAIL("%s: the late report does not say so: %s", what, nexar_last_error());
  if (nexar_all_reduce(c, a, 4, NEXAR_I32, NEXAR_SUM)) FAIL("%s: all_reduce after it", what);
  (void)me;
}

/* A broadcast's root returns once its data is out of the segment: the
 * readers check its signature on arrival, it checks theirs at its next
 * collective. Every mismatch is still reported on every rank, none hangs:
 * counts that differ (the readers at once, the root late), two ranks that
 * each call themselves the root (neither waits: both late, the rest at
 * once), and readers that take the message path (non-blocking: told by the
 * root when their frames reach it). */
static void nowait_mismatches(nexar_client *c, uint32_t me, int32_t *a) {
  /* A root may hear of the mismatch before it is out (a reader's failure
   * notice while it waits for the others to leave the previous collective):
   * then it fails there, else at its next collective ("late"). */
  int rc = nexar_broadcast(c, a, me == 0 ? 4 : 5, NEXAR_I32, 0);
  if (me == 0 && rc && rc != NEXAR_ERR_MISMATCH)
    FAIL("root of broadcasts of 4 against 5: %s", nexar_strerror(rc));
  if (me != 0 && rc != NEXAR_ERR_MISMATCH) FAIL("broadcast 5 against 4: %s", nexar_strerror(rc));
  after_late(c, me, me == 0 && !rc, a, "broadcast counts");
  /* the same with a non-blocking collective (the message path) between: the
   * root's check stays due across it (it used to be dropped there, and the
   * mismatch went unreported at the root) */
  rc = nexar_broadcast(c, a, me == 0 ? 4 : 5, NEXAR_I32, 0);
  if (me == 0 && rc && rc != NEXAR_ERR_MISMATCH)
    FAIL("root of broadcasts of 4 against 5 (then non-blocking): %s", nexar_strerror(rc));
  if (me != 0 && rc != NEXAR_ERR_MISMATCH)
    FAIL("broadcast 5 against 4 (then non-blocking): %s", nexar_strerror(rc));
  int late = me == 0 && !rc;
  nexar_request *nq = NULL;
  int32_t one = 1;
  if ((rc = nexar_all_reduce_nb(c, &one, 1, NEXAR_I32, NEXAR_SUM, &nq)) == 0) rc = nexar_wait(nq);
  if (rc || one != (int32_t)W)
    FAIL("non-blocking all_reduce after a broadcast mismatch: %s", nexar_strerror(rc));
  after_late(c, me, late, a, "broadcast counts, then non-blocking");
  /* A small broadcast's readers read their root's entry alone: those that
   * name rank 1, as rank 1 does, may return; the roots find it (rank 0's
   * entry has none of their bits, rank 1's lacks rank 0's) before they
   * arrive at the next collective, which thus fails on every rank. */
  rc = nexar_broadcast(c, a, 4, NEXAR_I32, me == 0 ? 0 : 1);
  if (rc && rc != NEXAR_ERR_MISMATCH)
    FAIL("rank %u in broadcasts from roots 0 and 1: %s", me, nexar_strerror(rc));
  after_late(c, me, !rc, a, "broadcast roots");
  /* above the ring's size every rank reads every signature: the readers at
   * once (the two roots may not wait: late) */
  int32_t *big = calloc(NX_CSEG_BCAST_MAX, sizeof *big);
  rc = nexar_broadcast(c, big, NX_CSEG_BCAST_MAX, NEXAR_I32, me == 0 ? 0 : 1);
  free(big);
  if (me <= 1 && rc && rc != NEXAR_ERR_MISMATCH)
    FAIL("rank %u calling itself the root: %s", me, nexar_strerror(rc));
  if (me > 1 && rc != NEXAR_ERR_MISMATCH) FAIL("broadcast roots 0 and 1: %s", nexar_strerror(rc));
  after_late(c, me, me <= 1 && !rc, a, "broadcast roots (buffers)");
  nexar_request *q = NULL;
  if (me == 0) {
    rc = nexar_broadcast(c, a, 4, NEXAR_I32, 0);
    if (rc && rc != NEXAR_ERR_MISMATCH)
      FAIL("blocking root against non-blocking readers: %s", nexar_strerror(rc));
  } else {
    if ((rc = nexar_broadcast_nb(c, a, 4, NEXAR_I32, 0, &q)) == 0) rc = nexar_wait(q);
    if (rc != NEXAR_ERR_MISMATCH)
      FAIL("non-blocking readers of a blocking root: %s", nexar_strerror(rc));
  }
  after_late(c, me, me == 0 && !rc, a, "broadcast blocking against non-blocking");
}

/* Every rank gets the same bits from a segment reduction of arbitrary
 * floats (sum: rounding; max: NaNs, whose answer depends on the operand
 * order), in one buffer and in chunks: each rank hashes its result, and the
 * hashes are gathered and compared. */
static void same_bits(nexar_client *c, uint32_t me) {
  size_t slot = nx_cseg_slot(W) / sizeof(float);
  const size_t counts[] = {1000, slot + slot / 3};
  const nexar_op ops[] = {NEXAR_SUM, NEXAR_MAX, NEXAR_MIN, NEXAR_AVG};
  float *a = malloc(counts[1] * sizeof *a);
  for (size_t q = 0; q < 2; q++)
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
      size_t n = counts[q];
      uint64_t x = 0x9e3779b97f4a7c15ull * (me + 1) + o;
      for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        a[i] = (i % 97 == me) ? NAN : (float)((double)(x >> 11) / 9007199254740992.0 - 0.5);
      }
      if (nexar_all_reduce(c, a, n, NEXAR_F32, ops[o])) FAIL("same_bits all_reduce %zu", n);
      uint64_t h = 1469598103934665603ull, hs[16];
      const uint8_t *b = (const uint8_t *)a;
      for (size_t i = 0; i < n * sizeof *a; i++)
        h = (h ^ b[i]) * 1099511628211ull;
      if (nexar_all_gather(c, &h, hs, 1, NEXAR_U64)) FAIL("same_bits all_gather");
      for (uint32_t r = 0; r < W; r++)
        if (hs[r] != hs[0])
          FAIL("all_reduce of %zu floats (op %d): rank %u got other bits than rank 0", n,
               (int)ops[o], r);
    }
  free(a);
}

/* Reductions above NX_CSEG_RCHUNK run as consecutive segment collectives
 * of a chunk each (NX_SEG_CHUNKS), with the whole call's signature: 3.5
 * chunks exact (all_reduce, reduce at a root, reduce_scatter in place and
 * not, and its float average), then counts that differ
 * and a blocking call against non-blocking ones, MISMATCH on every rank at
 * the first chunk, the next call good (the sequences stayed aligned). */
static void chunks(nexar_client *c, uint32_t me) {
  size_t ce = nx_cseg_rchunk(W) / sizeof(int32_t);
  size_t big = 3 * ce + ce / 2;
  int32_t *a = malloc(big * sizeof *a);
  for (size_t i = 0; i < big; i++)
    a[i] = (int32_t)(me * 5 + i);
  uint64_t seq0 = c->next_seq;
  if (nexar_all_reduce(c, a, big, NEXAR_I32, NEXAR_SUM)) FAIL("chunked all_reduce %zu", big);
  if (c->next_seq - seq0 != (W <= NX_CSEG_CHUNK_RANKS ? 4u : 1u))
    FAIL("all_reduce of 3.5 chunks took %llu collectives",
         (unsigned long long)(c->next_seq - seq0));
  for (size_t i = 0; i < big; i++)
    if (a[i] != (int32_t)(5 * W * (W - 1) / 2 + W * i)) FAIL("chunked all_reduce: %zu", i);
  for (size_t i = 0; i < big; i++)
    a[i] = (int32_t)(me + 3 * i);
  if (nexar_reduce(c, a, big, NEXAR_I32, NEXAR_MAX, W - 1)) FAIL("chunked reduce %zu", big);
  for (size_t i = 0; me == W - 1 && i < big; i++)
    if (a[i] != (int32_t)(W - 1 + 3 * i)) FAIL("chunked reduce: %zu", i);
  /* reduce_scatter: a chunk holds a piece of every block; in place too (our
   * block of send is recv; between two ranks it never enters our buffer) */
  size_t rb = big / W;
  int32_t *out = malloc(rb * sizeof *out);
  for (int inplace = 0; inplace < 2; inplace++) {
    for (size_t i = 0; i < rb * W; i++)
      a[i] = (int32_t)(me * 7 + i);
    int32_t *dst = inplace ? a + (size_t)me * rb : out;
    seq0 = c->next_seq;
    if (nexar_reduce_scatter(c, a, dst, rb, NEXAR_I32, NEXAR_SUM))
      FAIL("chunked reduce_scatter %zu", rb);
    if (c->next_seq - seq0 != (W <= NX_CSEG_CHUNK_RANKS ? 4u : 1u))
      FAIL("reduce_scatter of 3.5 chunks took %llu collectives",
           (unsigned long long)(c->next_seq - seq0));
    for (size_t i = 0; i < rb; i++)
      if (dst[i] != (int32_t)(7 * W * (W - 1) / 2 + W * (me * rb + i)))
        FAIL("chunked reduce_scatter (in place %d): %zu", inplace, i);
  }
  /* the float average (between two ranks our block comes from send) */
  float *f = malloc(rb * W * sizeof *f), *fo = malloc(rb * sizeof *fo);
  for (size_t i = 0; i < rb * W; i++)
    f[i] = (float)(me + i % 50);
  if (nexar_reduce_scatter(c, f, fo, rb, NEXAR_F32, NEXAR_AVG))
    FAIL("chunked reduce_scatter average %zu", rb);
  for (size_t i = 0; i < rb; i++)
    if (fabsf(fo[i] - ((float)(W - 1) / 2 + (float)((me * rb + i) % 50))) > 1e-4f)
      FAIL("chunked reduce_scatter average: %zu is %g", i, (double)fo[i]);
  free(f);
  free(fo);
  int rc = nexar_reduce_scatter(c, a, out, me == 0 ? rb : rb - 1000, NEXAR_I32, NEXAR_SUM);
  if (rc != NEXAR_ERR_MISMATCH)
    FAIL("chunked reduce_scatter counts differ: %s", nexar_strerror(rc));
  if (nexar_all_reduce(c, a, 4, NEXAR_I32, NEXAR_SUM))
    FAIL("all_reduce after reduce_scatter counts");
  free(out);
  rc = nexar_all_reduce(c, a, me == 0 ? big : big - ce, NEXAR_I32, NEXAR_SUM);
  if (rc != NEXAR_ERR_MISMATCH) FAIL("chunked counts that differ: %s", nexar_strerror(rc));
  if (nexar_all_reduce(c, a, 4, NEXAR_I32, NEXAR_SUM)) FAIL("all_reduce after chunked counts");
  nexar_request *q = NULL;
  if (me == 0)
    rc = nexar_all_reduce(c, a, big, NEXAR_I32, NEXAR_SUM);
  else if ((rc = nexar_all_reduce_nb(c, a, big, NEXAR_I32, NEXAR_SUM, &q)) == 0)
    rc = nexar_wait(q);
  /* (above NX_CSEG_CHUNK_RANKS every rank takes the message path: no mismatch) */
  if (rc != (W <= NX_CSEG_CHUNK_RANKS ? NEXAR_ERR_MISMATCH : 0))
    FAIL("chunked against non-blocking: %s", nexar_strerror(rc));
  if (nexar_all_reduce(c, a, 4, NEXAR_I32, NEXAR_SUM)) FAIL("all_reduce after chunked/nb");
  free(a);
}

/* A blocking segment collective begun without the endpoint lock
 * (coll_port.c, nx_coll_begin_seg) still hears what the engine learns of
 * its sequence while it runs unregistered: a peer's frame for it is kept
 * for it to judge (it was dropped as a late one: a rendezvous' sender then
 * heard ABORTED, not MISMATCH), and a peer's failure notice fails it. Each
 * rank does this to itself, at the same sequence, then all go on. */
static void fast_notices(nexar_client *c, uint32_t me) {
  int32_t v = 1;
  pthread_barrier_wait(&g_bar);
  usleep(20000); /* what earlier mismatches left in flight arrives */
  /* two that end well: the next begins without the lock */
  if (nexar_all_reduce(c, &v, 1, NEXAR_I32, NEXAR_SUM) ||
      nexar_all_reduce(c, &v, 1, NEXAR_I32, NEXAR_SUM))
    FAIL("all_reduce before the unregistered one");
  nx_coll_sig sig = {.op = NX_COLL_BARRIER};
  nx_coll *k = NULL;
  if (nx_coll_begin_seg(c, &sig, &k)) FAIL("begin_seg");
  uint64_t seq = nx_coll_seq(k);
  /* (a late notice of an earlier mismatch may still send one rank the
   * locked way: the checks below hold on both, and one rank must have
   * taken the other for them to test it) */
  if (atomic_load(&c->fast_seq1) == seq + 1) atomic_fetch_add(&g_fast_taken, 1);
  nx_frame f = {0};
  f.kind = NX_KIND_COLL;
  f.comm_id = c->id;
  f.tag = seq;
  f.src = c->members[(me + 1) % W];
  f.coll_op = NX_COLL_BARRIER;
  pthread_mutex_lock(&c->ep->mu);
  int dropped = nx_coll_check_frame_locked(c->ep, &f);
  f.kind = NX_KIND_COLL_FAIL;
  f.status = NEXAR_ERR_MISMATCH;
  nx_coll_remote_fail_locked(c->ep, &f);
  pthread_mutex_unlock(&c->ep->mu);
  if (dropped) FAIL("a frame of the collective running unregistered was dropped as late");
  pthread_barrier_wait(&g_bar); /* before any rank's own failure notice of it */
  int rc = nx_coll_failed(k);
  if (rc != NEXAR_ERR_MISMATCH) FAIL("a notice for it: %s", nexar_strerror(rc));
  if (atomic_load(&c->fast_seq1)) FAIL("still unregistered after the notice");
  nx_coll_end(k, rc);
  pthread_barrier_wait(&g_bar); /* every rank has failed it: notices of it are late */
  if (me == 0 && !atomic_load(&g_fast_taken)) FAIL("no rank began the barrier without the lock");
  for (int i = 0; i < 3; i++)
    if ((rc = nexar_all_reduce(c, &v, 1, NEXAR_I32, NEXAR_SUM)))
      FAIL("all_reduce %d after it: %s", i, nexar_strerror(rc));
}

/* Small broadcasts through their root's ring (cseg.h, nx_cseg_bent): sizes
 * around NX_CSEG_BCAST_MAX in several element sizes, every root; then
 * three times the ring's depth from one root, with one reader asleep for a
 * while (the root fills the ring and waits for it to drain), then roots
 * changing every call with an all_reduce now and then, all checked exactly. */
static void bcast_ring(nexar_client *c, uint32_t me) {
  const nexar_dtype dts[] = {NEXAR_U8, NEXAR_I32, NEXAR_F64};
  uint8_t *a = malloc(NX_CSEG_BCAST_MAX + 64);
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
    size_t es = nexar_dtype_size(dts[d]), lim = NX_CSEG_BCAST_MAX / es;
    const size_t counts[] = {1, 2, lim / 2 + 1, lim - 1, lim, lim + 1};
    for (size_t k = 0; k < sizeof counts / sizeof *counts; k++)
      for (uint32_t root = 0; root < W; root++) {
        size_t n = counts[k] * es;
        for (size_t i = 0; i < n; i++)
          a[i] = me == root ? (uint8_t)(root * 31 + k * 7 + i) : 0xee;
        if (nexar_broadcast(c, a, counts[k], dts[d], root))
          FAIL("ring broadcast of %zu x %zu bytes from %u", counts[k], es, root);
        for (size_t i = 0; i < n; i++)
          if (a[i] != (uint8_t)(root * 31 + k * 7 + i))
            FAIL("ring broadcast of %zu x %zu bytes from %u: byte %zu", counts[k], es, root, i);
      }
  }
  uint32_t sleeper = W - 1;
  for (uint32_t b = 0; b < 3 * NX_CSEG_BDEPTH; b++) {
    if (me == sleeper && b == NX_CSEG_BDEPTH / 2) usleep(50000);
    uint64_t v = me == 0 ? 0x5151000000ull + b : 0;
    if (nexar_broadcast(c, &v, 1, NEXAR_U64, 0)) FAIL("ring broadcast burst #%u", b);
    if (v != 0x5151000000ull + b) FAIL("ring broadcast burst #%u: %llx", b, (unsigned long long)v);
  }
  for (uint32_t b = 0; b < 2 * NX_CSEG_BDEPTH; b++) {
    uint32_t root = (b * 7) % W;
    uint32_t v = me == root ? 0xabc00000u + b : 0;
    if (nexar_broadcast(c, &v, 1, NEXAR_U32, root)) FAIL("ring broadcast #%u from %u", b, root);
    if (v != 0xabc00000u + b) FAIL("ring broadcast #%u from %u: %x", b, root, v);
    if (b % 37 == 0) {
      int32_t one = 1;
      if (nexar_all_reduce(c, &one, 1, NEXAR_I32, NEXAR_SUM) || one != (int32_t)W)
        FAIL("all_reduce between ring broadcasts");
    }
  }
  free(a);
}

/* Broadcasts above NX_CSEG_STREAM_MIN stream through the root's buffer as
 * a ring of pieces (cseg.h): sizes around a piece and around the ring, from
 * every root, checked exactly and shown to have streamed (stream_check);
 * between two ranks all_gather (in place too), all_to_all, gather and
 * scatter likewise; broadcasts back to back, the root running ahead into
 * the next; then mismatches, each MISMATCH on every rank at once (the root
 * waits for the readers' arrivals): counts that differ (within the ring
 * and past it), two ranks each calling itself the root, and readers taking
 * the message path (non-blocking). */
/* The collective just finished streamed on this rank: what it wrote (how 0)
 * or read (2), or both (1), is its last piece in its words of the
 * collective's parity. It may have taken single copy instead (a broadcast,
 * or between two ranks: collective/segchoice.c, nx_segcoll_either), as
 * rank dec said in its arrival: then it said it left (read all), and
 * streamed nothing. A way the test forces (nx_segcoll_force_way) is the
 * way said. */
static void stream_check(nexar_client *c, uint32_t me, int how, uint32_t pieces, uint32_t dec,
                         const char *what) {
  uint64_t seq = atomic_load(&c->next_seq) - 1;
  nx_cseg_ctl *mine = &c->cseg->ctl[me];
  uint64_t w = atomic_load(&mine->stream[seq & 1]);
  uint64_t r = atomic_load(&mine->sread[seq & 1]);
  int way = c->cseg->ctl[dec].arr[seq % NX_CSEG_RING].sig.how;
  int f = nx_segcoll_force_way;
  if ((f == 0 || f == 1) && way != f)
    FAIL("%s took way %d, forced %d (#%llu)", what, way, f, (unsigned long long)seq);
  if (f == 2 && way != (int)(seq & 1))
    FAIL("%s took way %d at #%llu, forced each in turn", what, way, (unsigned long long)seq);
  if (way) {
    if (w || r || atomic_load(&mine->left) != seq + 1)
      FAIL("%s did not take single copy (words %llu %llu, left %llu at #%llu)", what,
           (unsigned long long)w, (unsigned long long)r,
           (unsigned long long)atomic_load(&mine->left), (unsigned long long)seq);
    return;
  }
  if ((how < 2 && w != pieces) || (how > 0 && r != pieces))
    FAIL("%s of %u pieces did not stream (words %llu %llu at #%llu)", what, pieces,
         (unsigned long long)w, (unsigned long long)r, (unsigned long long)seq);
}

static void stream_ways(nexar_client *c, uint32_t me, int all_roots) {
  const size_t piece = NX_CSEG_PIECE, ring = nx_cseg_slot(W) / piece;
  /* a block the readers copy out with non-temporal stores (NX_CSEG_NT_MIN) */
  const size_t nt = NX_CSEG_NT_MIN + 12345, most = NX_MAX(3 * ring * piece + 12345, nt);
  const size_t sizes[] = {NX_CSEG_STREAM_MIN + 1,
                          piece - 1,
                          piece,
                          piece + 1,
                          ring * piece - 1,
                          ring * piece,
                          ring * piece + 1,
                          3 * ring * piece + 12345,
                          nt};
  uint8_t *b = malloc(most + piece);
  int32_t a[4] = {0};
  if (!b) FAIL("out of memory");
  /* the last, of non-temporal copies, between two ranks only (time) */
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes - (W > 2); k++)
    for (uint32_t root = 0; root < W; root = all_roots || root == W - 1 ? root + 1 : W - 1) {
      size_t n = sizes[k];
      for (size_t i = 0; i < n; i++)
        b[i] = me == root ? (uint8_t)(i * 13 + k + root) : 0xee;
      if (nexar_broadcast(c, b, n, NEXAR_U8, root)) FAIL("streamed broadcast %zu", n);
      for (size_t i = 0; i < n; i++)
        if (b[i] != (uint8_t)(i * 13 + k + root))
          FAIL("streamed broadcast of %zu from %u: byte %zu", n, root, i);
      stream_check(c, me, me == root ? 0 : 2, (uint32_t)((n + piece - 1) / piece), (root + 1) % W,
                   "broadcast");
    }
  /* two ranks: all_gather (also in place), all_to_all, gather and scatter
   * stream each rank's part through its own buffer, both ways at once */
  if (W == 2) {
    const size_t two[] = {piece + 1, ring * piece + 1, 3 * ring * piece + 12345, nt};
    uint8_t *x = malloc(2 * most), *y = malloc(2 * most);
    if (!x || !y) FAIL("out of memory");
    for (size_t k = 0; k < sizeof two / sizeof *two; k++) {
      size_t n = two[k];
      uint32_t pieces = (uint32_t)((n + piece - 1) / piece);
      for (int in_place = 0; in_place < 2; in_place++) {
        for (size_t i = 0; i < 2 * n; i++)
          y[i] = 0xee;
        for (size_t i = 0; i < n; i++)
          (in_place ? y + me * n : x)[i] = (uint8_t)(me * 101 + i * 7 + k);
        if (nexar_all_gather(c, in_place ? y + me * n : x, y, n, NEXAR_U8))
          FAIL("streamed all_gather %zu", n);
        for (size_t i = 0; i < 2 * n; i++)
          if (y[i] != (uint8_t)((i / n) * 101 + (i % n) * 7 + k))
            FAIL("streamed all_gather of %zu (in place %d): byte %zu", n, in_place, i);
        stream_check(c, me, 1, pieces, 0, "all_gather");
      }
      for (size_t i = 0; i < 2 * n; i++)
        x[i] = (uint8_t)(me * 53 + i * 3 + k);
      if (nexar_all_to_all(c, x, y, n, NEXAR_U8)) FAIL("streamed all_to_all %zu", n);
      for (uint32_t r = 0; r < 2; r++)
        for (size_t i = 0; i < n; i++)
          if (y[r * n + i] != (uint8_t)(r * 53 + (me * n + i) * 3 + k))
            FAIL("streamed all_to_all of %zu: block %u byte %zu", n, r, i);
      stream_check(c, me, 1, pieces, 0, "all_to_all");
      for (uint32_t root = 0; root < 2; root++) {
        for (size_t i = 0; i < n; i++)
          x[i] = (uint8_t)(me * 11 + i + root);
        memset(y, 0xee, 2 * n);
        if (nexar_gather(c, x, me == root ? y : NULL, n, NEXAR_U8, root))
          FAIL("streamed gather %zu", n);
        for (size_t i = 0; me == root && i < 2 * n; i++)
          if (y[i] != (uint8_t)((i / n) * 11 + i % n + root))
            FAIL("streamed gather of %zu to %u: byte %zu", n, root, i);
        stream_check(c, me, me == root ? 2 : 0, pieces, root, "gather");
        for (size_t i = 0; i < 2 * n; i++)
          x[i] = (uint8_t)(root * 29 + i);
        memset(y, 0xee, n);
        if (nexar_scatter(c, me == root ? x : NULL, y, n, NEXAR_U8, root))
          FAIL("streamed scatter %zu", n);
        for (size_t i = 0; i < n; i++)
          if (y[i] != (uint8_t)(root * 29 + me * n + i))
            FAIL("scatter of %zu from %u: byte %zu", n, root, i);
        if (n <= NX_CSEG_SCATTER_STREAM_MAX)
          stream_check(c, me, me == root ? 0 : 2, pieces, root ^ 1, "scatter");
      }
    }
    /* both ways at once, the same findings: counts past the ring, another
     * collective, the message path */
    size_t big = 3 * ring * piece + 12345;
    int rc = nexar_all_gather(c, x, y, me == 0 ? big : big - piece, NEXAR_U8);
    if (rc != NEXAR_ERR_MISMATCH) FAIL("streamed all_gather counts: %s", nexar_strerror(rc));
    after_late(c, me, 0, a, "streamed all_gather counts");
    rc = me == 0 ? nexar_all_gather(c, x, y, big, NEXAR_U8)
                 : nexar_all_to_all(c, x, y, big, NEXAR_U8);
    if (rc != NEXAR_ERR_MISMATCH)
      FAIL("streamed all_gather against all_to_all: %s", nexar_strerror(rc));
    after_late(c, me, 0, a, "streamed all_gather against all_to_all");
    if (me == 0) {
      rc = nexar_all_to_all(c, x, y, big, NEXAR_U8);
    } else {
      nexar_request *q = NULL;
      if ((rc = nexar_all_to_all_nb(c, x, y, big, NEXAR_U8, &q)) == 0) rc = nexar_wait(q);
    }
    if (rc != NEXAR_ERR_MISMATCH)
      FAIL("streamed all_to_all against non-blocking: %s", nexar_strerror(rc));
    after_late(c, me, 0, a, "streamed all_to_all against non-blocking");
    free(x);
    free(y);
  }
  /* back to back from one root: it writes the next while readers copy */
  for (uint32_t r = 0; r < 6; r++) {
    size_t n = r % 2 ? most : ring * piece + 1;
    for (size_t i = 0; i < n; i++)
      b[i] = me == 0 ? (uint8_t)(i + r) : 0;
    if (nexar_broadcast(c, b, n, NEXAR_U8, 0)) FAIL("broadcast #%u back to back", r);
    for (size_t i = 0; i < n; i++)
      if (b[i] != (uint8_t)(i + r)) FAIL("broadcast #%u back to back: byte %zu", r, i);
  }
  /* counts that differ, within the ring and past it */
  const size_t counts[] = {2 * piece, most - piece};
  for (int k = 0; k < 2; k++) {
    int rc = nexar_broadcast(c, b, counts[k] + (me == 0 ? 0 : piece), NEXAR_U8, 0);
    if (rc != NEXAR_ERR_MISMATCH)
      FAIL("streamed broadcast counts %zu against more: %s", counts[k], nexar_strerror(rc));
    after_late(c, me, 0, a, "streamed broadcast counts");
  }
  int rc = nexar_broadcast(c, b, most, NEXAR_U8, me == 0 ? 0 : 1);
  if (rc != NEXAR_ERR_MISMATCH) FAIL("streamed broadcast roots 0 and 1: %s", nexar_strerror(rc));
  after_late(c, me, 0, a, "streamed broadcast roots");
  if (me == 0) {
    rc = nexar_broadcast(c, b, most, NEXAR_U8, 0);
  } else {
    nexar_request *q = NULL;
    if ((rc = nexar_broadcast_nb(c, b, most, NEXAR_U8, 0, &q)) == 0) rc = nexar_wait(q);
  }
  if (rc != NEXAR_ERR_MISMATCH)
    FAIL("streamed broadcast against non-blocking readers: %s", nexar_strerror(rc));
  after_late(c, me, 0, a, "streamed broadcast against non-blocking readers");
  free(b);
}

/* From three ranks on, all_gather and all_to_all through the buffers from
 * NX_SEG_EITHER_MIN published take the way rank 0 says (nx_segcoll_either):
 * around that size and the buffer's, checked exactly, each call shown to
 * have taken the way said (single copy: it said it left) and, where the
 * test forces one, that way. */
static void copy_ways(nexar_client *c, uint32_t me) {
  const size_t slot = nx_cseg_slot(W), ag[] = {64u << 10, slot};
  const size_t a2a[] = {((64u << 10) + W - 1) / W, (slot - 1) / W};
  uint8_t *x = malloc((size_t)W * slot), *y = malloc((size_t)W * slot);
  if (!x || !y) FAIL("out of memory");
  for (int k = 0; k < 2; k++)
    for (int kind = 0; kind < 2; kind++) {
      size_t n = kind ? a2a[k] : ag[k];
      for (size_t i = 0; i < (size_t)W * n; i++)
        x[i] = (uint8_t)(me * 37 + i * 5 + (size_t)k);
      memset(y, 0xee, (size_t)W * n);
      int rc =
          kind ? nexar_all_to_all(c, x, y, n, NEXAR_U8) : nexar_all_gather(c, x, y, n, NEXAR_U8);
      if (rc) FAIL("%s %zu", kind ? "all_to_all" : "all_gather", n);
      for (uint32_t r = 0; r < W; r++)
        for (size_t i = 0; i < n; i++) {
          size_t at = kind ? me * n + i : i; /* where in rank r's send */
          if (y[r * n + i] != (uint8_t)(r * 37 + at * 5 + (size_t)k))
            FAIL("%s of %zu: block %u byte %zu", kind ? "all_to_all" : "all_gather", n, r, i);
        }
      uint64_t seq = atomic_load(&c->next_seq) - 1;
      int way = c->cseg->ctl[0].arr[seq % NX_CSEG_RING].sig.how, f = nx_segcoll_force_way;
      if ((f == 0 || f == 1) && way != f)
        FAIL("took way %d, forced %d (#%llu)", way, f, (unsigned long long)seq);
      if (f == 2 && way != (int)(seq & 1))
        FAIL("took way %d at #%llu, forced each in turn", way, (unsigned long long)seq);
      if (way && atomic_load(&c->cseg->ctl[me].left) != seq + 1)
        FAIL("%s of %zu: way 1 but no single copy (#%llu)", kind ? "all_to_all" : "all_gather", n,
             (unsigned long long)seq);
    }
  /* mismatches, MISMATCH on every rank, none waiting for another: counts
   * that differ (both choosing), another collective (both choosing), and a
   * rank 0 below NX_SEG_EITHER_MIN against the others above it and back */
  int32_t a[4] = {0};
  int rc = nexar_all_to_all(c, x, y, me == 0 ? a2a[1] : a2a[1] - 1, NEXAR_U8);
  if (rc != NEXAR_ERR_MISMATCH) FAIL("all_to_all counts that differ: %s", nexar_strerror(rc));
  after_late(c, me, 0, a, "all_to_all counts that differ");
  rc = me == 0 ? nexar_all_gather(c, x, y, ag[0], NEXAR_U8)
               : nexar_all_to_all(c, x, y, a2a[1], NEXAR_U8);
  if (rc != NEXAR_ERR_MISMATCH) FAIL("all_gather against all_to_all: %s", nexar_strerror(rc));
  after_late(c, me, 0, a, "all_gather against all_to_all");
  for (uint32_t small = 0; small < 2; small++) {
    rc = nexar_all_gather(c, x, y, (me == 0) == (small == 0) ? 1024 : ag[0], NEXAR_U8);
    if (rc != NEXAR_ERR_MISMATCH)
      FAIL("all_gather of 1 KiB against 64 KiB: %s", nexar_strerror(rc));
    after_late(c, me, 0, a, "all_gather of 1 KiB against 64 KiB");
  }
  free(x);
  free(y);
}

/* All of stream_ways (and, from three ranks on, copy_ways) once for each
 * way the ranks may take: forced streamed or through the buffers, forced
 * single copy, each in turn, then as measured. From three ranks on, a
 * forced way's broadcasts come from the first and the last rank only (the
 * decider after the last wraps to rank 0): every root under every way made
 * nine ranks under TSan run past the test's timeout. */
static void stream_colls(nexar_client *c, uint32_t me) {
  const int ways[] = {0, 1, 2, -1};
  for (int k = 0; k < 4; k++) {
    pthread_barrier_wait(&g_bar);
    if (me == 0) nx_segcoll_force_way = ways[k];
    pthread_barrier_wait(&g_bar);
    stream_ways(c, me, W == 2 || ways[k] < 0);
    if (W > 2) copy_ways(c, me);
  }
}

/* The communicator's collective segment: every blocking collective at
 * sizes around what one rank may publish (nx_cseg_slot: above it they take
 * messages), checked exactly, with a non-blocking all_reduce in flight
 * across them; then a blocking call against its non-blocking form and a
 * count mismatch, both MISMATCH on every rank (never a hang). */
/* Rank me's block of an all_gather/gather test, and the check of all W
 * blocks as they must arrive (rank r's block is r's fill). */
static void gather_fill(int32_t *x, size_t n, uint32_t me) {
  for (size_t i = 0; i < n; i++)
    x[i] = (int32_t)(me * 1000003u + i);
}

static void gather_check(const int32_t *all, size_t n, uint32_t me, const char *what) {
  for (uint32_t r = 0; r < W; r++)
    for (size_t i = 0; i < n; i++)
      if (all[r * n + i] != (int32_t)(r * 1000003u + i))
        FAIL("%s %zu: block %u at %zu", what, n, r, i);
}

/* Minor page faults this thread took so far. */
static long faults(void) {
  struct rusage u;
  return getrusage(RUSAGE_THREAD, &u) ? -1 : u.ru_minflt;
}

/* A collective that uses a whole buffer of every rank maps all of them in
 * (both parities, nx_cseg_back) before it begins: the next two, one of each
 * parity, take no page faults in the buffers (each was a fault in the
 * middle of a collective: 25 us on the paravirtualised guest we measure
 * on). Not under ASan or TSan: their shadow memory is faulted in as the
 * buffers are first read. */
static void backed(nexar_client *c, uint32_t me) {
  const size_t n = nx_cseg_slot(W) / sizeof(int32_t);
  int32_t *x = malloc(n * sizeof *x), *y = malloc(n * W * sizeof *y);
  if (!x || !y) FAIL("out of memory");
  gather_fill(x, n, me);
  memset(y, 0, n * W * sizeof *y); /* (our own pages faulted in now) */
  long took[3] = {0};
  for (int k = 0; k < 3; k++) {
    long f0 = faults();
    if (nexar_all_gather(c, x, y, n, NEXAR_I32)) FAIL("all_gather of a buffer, call %d", k);
    took[k] = faults() - f0;
    gather_check(y, n, me, "all_gather of a buffer");
  }
  if (c->cseg->backed < nx_cseg_slot(W))
    FAIL("buffers mapped in: %zu bytes of %zu", c->cseg->backed, nx_cseg_slot(W));
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  if (took[1] > 16 || took[2] > 16)
    FAIL("all_gather of a buffer took %ld and %ld page faults after the first (%ld)", took[1],
         took[2], took[0]);
#else
  (void)took;
#endif
  free(x);
  free(y);
}

static void segment(nexar_client *c, uint32_t me) {
  const size_t slot = nx_cseg_slot(W) / sizeof(int32_t);
  const size_t red = NX_CSEG_REDUCE_MAX / sizeof(int32_t) / W; /* reductions: the limit */
  /* two ranks: copies above NX_CSEG_SINGLE_MIN2 published take single copy */
  const size_t s2 = NX_CSEG_SINGLE_MIN2 / sizeof(int32_t);
  /* contributions up to NX_CSEG_INLINE bytes travel in the arrival's line */
  const size_t il = NX_CSEG_INLINE / sizeof(int32_t);
  /* all_reduce by shares from three ranks on (segcoll.c, by_shares) */
  const size_t sh = NX_CSEG_SHARE_MIN / sizeof(int32_t);
  const size_t counts[] = {
      0,        1,      red - 1,    red,        red + 1, slot / W - 1, slot / W, slot / W + 1,
      slot - 1, slot,   slot + 1,   s2 / W - 1, s2 / W,  s2 / W + 1,   s2 - 1,   s2,
      s2 + 1,   il / W, il / W + 1, il - 1,     il,      il + 1,       3,        5,
      sh - 1,   sh,     sh + 1,     sh + 17 * W};
  size_t maxc = ((slot > red ? slot : red) + 1) * W;
  int32_t *a = malloc(maxc * sizeof *a), *b = malloc(maxc * sizeof *b);
  int32_t nbv[64];
  if (!c->cseg)
    FAIL("no collective segment after %llu blocking calls", (unsigned long long)c->cseg_calls);
  /* copies larger than a rank's buffer read the owner's (single copy) */
  if (!c->cseg->cma) FAIL("collective segment without single copy");
  backed(c, me);
  for (int i = 0; i < 64; i++)
    nbv[i] = (int32_t)(me * 3 + (uint32_t)i);
  nexar_request *q = NULL;
  if (nexar_all_reduce_nb(c, nbv, 64, NEXAR_I32, NEXAR_SUM, &q)) FAIL("all_reduce_nb");
  for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
    size_t n = counts[k];
    uint32_t root = (uint32_t)(k % W);
    for (size_t i = 0; i < n; i++)
      a[i] = (int32_t)(me + i);
    if (nexar_all_reduce(c, a, n, NEXAR_I32, NEXAR_SUM)) FAIL("segment all_reduce %zu", n);
    for (size_t i = 0; i < n; i++)
      if (a[i] != (int32_t)(W * (W - 1) / 2 + W * i)) FAIL("segment all_reduce %zu: %zu", n, i);
    for (size_t i = 0; i < n; i++)
      a[i] = (int32_t)(me + i);
    if (nexar_reduce(c, a, n, NEXAR_I32, NEXAR_MAX, root)) FAIL("segment reduce %zu", n);
    for (size_t i = 0; me == root && i < n; i++)
      if (a[i] != (int32_t)(W - 1 + i)) FAIL("segment reduce %zu: %zu", n, i);
    for (size_t i = 0; i < n; i++)
      a[i] = me == root ? (int32_t)(7 * i + 1) : -1;
    if (nexar_broadcast(c, a, n, NEXAR_I32, root)) FAIL("segment broadcast %zu", n);
    for (size_t i = 0; i < n; i++)
      if (a[i] != (int32_t)(7 * i + 1)) FAIL("segment broadcast %zu: %zu", n, i);
    if (n * W > maxc) continue;
    gather_fill(a, n, me);
    if (nexar_all_gather(c, a, b, n, NEXAR_I32)) FAIL("segment all_gather %zu", n);
    gather_check(b, n, me, "segment all_gather");
    memset(b, 0xee, n * W * sizeof *b);
    if (nexar_gather(c, a, b, n, NEXAR_I32, root)) FAIL("segment gather %zu", n);
    if (me == root) gather_check(b, n, me, "segment gather");
    for (size_t i = 0; i < n * W; i++)
      b[i] = (int32_t)(me + i);
    if (nexar_reduce_scatter(c, b, a, n, NEXAR_I32, NEXAR_SUM))
      FAIL("segment reduce_scatter %zu", n);
    for (size_t i = 0; i < n; i++)
      if (a[i] != (int32_t)(W * (W - 1) / 2 + W * (me * n + i)))
        FAIL("segment reduce_scatter %zu: %zu", n, i);
    for (size_t i = 0; i < n * W; i++)
      b[i] = (int32_t)(root * 77 + i);
    if (nexar_scatter(c, me == root ? b : NULL, a, n, NEXAR_I32, root))
      FAIL("segment scatter %zu", n);
    for (size_t i = 0; i < n; i++)
      if (a[i] != (int32_t)(root * 77 + me * n + i)) FAIL("segment scatter %zu: %zu", n, i);
    for (uint32_t r = 0; r < W; r++)
      for (size_t i = 0; i < n; i++)
        b[r * n + i] = (int32_t)(me * 100 + r * 10000 + i);
    if (nexar_all_to_all(c, b, a, n, NEXAR_I32)) FAIL("segment all_to_all %zu", n);
    for (uint32_t r = 0; r < W; r++)
      for (size_t i = 0; i < n; i++)
        if (a[r * n + i] != (int32_t)(r * 100 + me * 10000 + i)) FAIL("segment all_to_all %zu", n);
    if (nexar_barrier(c)) FAIL("segment barrier");
  }
  if (W <= 3) { /* an all_gather above NX_CSEG_GATHER_CHUNKS buffers: single copy again */
    size_t n = NX_CSEG_GATHER_CHUNKS * slot + 1;
    int32_t *x = malloc(n * sizeof *x), *all = malloc(n * W * sizeof *all);
    if (!x || !all) FAIL("out of memory");
    gather_fill(x, n, me);
    if (nexar_all_gather(c, x, all, n, NEXAR_I32)) FAIL("segment all_gather %zu", n);
    gather_check(all, n, me, "segment all_gather");
    free(x);
    free(all);
  }
  if (nexar_wait(q)) FAIL("all_reduce_nb across the segment's collectives");
  for (int i = 0; i < 64; i++)
    if (nbv[i] != (int32_t)(3 * W * (W - 1) / 2 + W * (uint32_t)i)) FAIL("all_reduce_nb: %d", i);
  /* rank 0 blocking, the others non-blocking: MISMATCH everywhere */
  int rc;
  if (me == 0) {
    rc = nexar_all_reduce(c, a, 4, NEXAR_I32, NEXAR_SUM);
  } else if ((rc = nexar_all_reduce_nb(c, a, 4, NEXAR_I32, NEXAR_SUM, &q)) == 0) {
    rc = nexar_wait(q);
  }
  if (rc != NEXAR_ERR_MISMATCH) FAIL("blocking against non-blocking: %s", nexar_strerror(rc));
  rc = nexar_all_reduce(c, a, me == W - 1 ? 5 : 4, NEXAR_I32, NEXAR_SUM);
  if (rc != NEXAR_ERR_MISMATCH) FAIL("counts 4 against 5: %s", nexar_strerror(rc));
  if (nexar_all_reduce(c, a, 4, NEXAR_I32, NEXAR_SUM)) FAIL("all_reduce after the mismatches");
  chunks(c, me);
  fast_notices(c, me);
  same_bits(c, me);
  bcast_ring(c, me);
  stream_colls(c, me);
  nowait_mismatches(c, me, a);
  free(a);
  free(b);
}

/* Counts a spinner on ep, as a thread that polls is counted: its progress
 * thread then keeps off the rings and the lane (from its next look on),
 * so that only the test's own thread reads them. */
static void hold_progress(nx_ep *ep) {
  atomic_fetch_add(&ep->spinners, 1);
  usleep(2000); /* its progress thread sees it at its next look */
}

static void release_progress(nx_ep *ep) {
  atomic_fetch_sub(&ep->spinners, 1);
}

/* A blocking receive takes its message straight from the ring when it is
 * the next record (p2p.c recv_now); what is not its own goes to matching in
 * ring order, a queued message or an earlier posted receive for the key
 * comes first, and a length that differs is still reported. Between ranks
 * 0 and 1; the records are in the ring before the receives (a barrier) or
 * race them. */
static void recv_fast(nexar_client *c, uint32_t me) {
  int32_t a[4] = {0}, b[4] = {0};
  nexar_request *q = NULL;
  for (int arrived = 0; arrived < 2; arrived++) {
    if (me == 0) {
      int32_t v1 = 1, v2[2] = {2, 2}, v3 = 3, v5[2] = {5, 5}, v6 = 6, v7 = 7;
      if (nexar_send(c, &v1, 4, 1, 31) || nexar_send(c, v2, 8, 1, 32) ||
          nexar_send(c, &v3, 4, 1, 31) || nexar_send(c, v5, 8, 1, 33) ||
          nexar_send(c, &v6, 4, 1, 34) || nexar_send(c, &v7, 4, 1, 34))
        FAIL("recv_fast sends");
      pthread_barrier_wait(&g_bar2);
    } else {
      if (nexar_recv_nb(c, &b[0], 4, 0, 34, &q)) FAIL("recv_fast irecv");
      if (arrived) pthread_barrier_wait(&g_bar2);
      /* tag 32 is behind a tag-31 record: that one is queued, in order */
      if (nexar_recv(c, a, 8, 0, 32) || a[0] != 2 || a[1] != 2) FAIL("recv_fast tag 32");
      if (nexar_recv(c, a, 4, 0, 31) || a[0] != 1) FAIL("recv_fast first tag 31: %d", a[0]);
      if (nexar_recv(c, a, 4, 0, 31) || a[0] != 3) FAIL("recv_fast second tag 31: %d", a[0]);
      int rc = nexar_recv(c, a, 4, 0, 33);
      if (rc != NEXAR_ERR_SIZE_MISMATCH) FAIL("recv_fast short receive: %s", nexar_strerror(rc));
      if (nexar_recv(c, a, 8, 0, 33) || a[0] != 5) FAIL("recv_fast tag 33 after the mismatch");
      /* the receive posted first gets the first message */
      if (nexar_recv(c, a, 4, 0, 34) || a[0] != 7) FAIL("recv_fast tag 34: %d", a[0]);
      if (nexar_wait(q) || b[0] != 6) FAIL("recv_fast posted tag 34: %d", b[0]);
      if (!arrived) pthread_barrier_wait(&g_bar2);
    }
  }
}

/* A blocking receive's own look at the ring (recv_now) passes records of
 * other keys on; a stream's pieces for an earlier receive are among them
 * and must reach it (they were queued as unexpected messages and lost).
 * Rank 1 posts a 4 MiB receive and keeps its progress thread off the rings
 * (a spinner counted), so one test of the receive takes the descriptor and
 * asks for the stream; rank 0's first pieces then wait in the ring for rank
 * 1's blocking receive of an 8-byte message that comes after them. */
static void stream_behind(nexar_client *c, uint32_t me) {
  size_t big = 4u << 20;
  uint8_t *b = malloc(big);
  int64_t v = 0, w = 0;
  if (me == 0) {
    for (size_t i = 0; i < big; i++)
      b[i] = (uint8_t)(i * 13u + 5u);
    v = 4242, w = 4040;
    nexar_request *q = NULL;
    pthread_barrier_wait(&g_bar2);
    if (nexar_send_nb(c, b, big, 1, 41, &q) || nexar_send(c, &w, 8, 1, 40) || nexar_wait(q) ||
        nexar_send(c, &v, 8, 1, 42))
      FAIL("stream_behind sends");
  } else {
    nx_ep *ep = c->ep;
    nexar_request *q = NULL;
    memset(b, 0, big);
    hold_progress(ep);
    if (nexar_recv_nb(c, b, big, 0, 41, &q)) FAIL("stream_behind irecv");
    pthread_barrier_wait(&g_bar2);
    /* its look takes the descriptor before: the stream is asked for */
    if (nexar_recv(c, &w, 8, 0, 40) || w != 4040) FAIL("stream_behind first small receive");
    usleep(5000); /* the first pieces come */
    release_progress(ep);
    if (nexar_recv(c, &v, 8, 0, 42) || v != 4242) FAIL("stream_behind small receive");
    if (nexar_wait(q)) FAIL("stream_behind large receive");
    for (size_t i = 0; i < big; i++)
      if (b[i] != (uint8_t)(i * 13u + 5u)) FAIL("stream_behind byte %zu", i);
  }
  free(b);
}

/* A reader counted as a waiter that does not run yet (a woken progress
 * thread waits for a CPU while the application thread polls) is rung once,
 * not once per record: the bell is re-armed only when its datagram is read.
 * Re-armed by every look at the ring before, a ping-pong's every message
 * cost its sender a datagram until that thread ran (up to a scheduler tick:
 * harness ping-pong 8 B n = 2, 1 in 6 runs at 0.8-1.1 us one-way instead of
 * 0.4). Rank 1 counts itself (nx_shm_sleep_begin) and keeps its progress
 * thread off the lane (a spinner counted); each record is in the ring
 * before rank 1's blocking receive looks, so that look finds it. */
static atomic_uint g_sent, g_got;

static void bell_once(nexar_client *c, uint32_t me) {
  enum { K = 100 };
  nx_ep *ep = c->ep;
  int64_t v = 0;
  if (me == 1) {
    hold_progress(ep);
    int ready;
    void *tok = nx_shm_sleep_begin(ep, &ready);
    pthread_barrier_wait(&g_bar2);
    for (unsigned i = 0; i < K; i++) {
      while (atomic_load(&g_sent) != i + 1)
        sched_yield();
      if (nexar_recv(c, &v, 8, 0, 61) || v != (int64_t)i) FAIL("bell_once receive %u", i);
      atomic_store(&g_got, i + 1);
    }
    nx_shm_sleep_end(tok);
    release_progress(ep);
    pthread_barrier_wait(&g_bar2);
    return;
  }
  pthread_barrier_wait(&g_bar2);
  pthread_mutex_lock(&ep->mu);
  uint64_t b0 = ep->shm_bells;
  pthread_mutex_unlock(&ep->mu);
  for (unsigned i = 0; i < K; i++) {
    v = (int64_t)i;
    if (nexar_send(c, &v, 8, 1, 61)) FAIL("bell_once send %u", i);
    atomic_store(&g_sent, i + 1);
    while (atomic_load(&g_got) != i + 1)
      sched_yield();
  }
  pthread_mutex_lock(&ep->mu);
  uint64_t bells = ep->shm_bells - b0;
  pthread_mutex_unlock(&ep->mu);
  /* one (none if an earlier one was still unread), and one of slack */
  if (bells > 2)
    FAIL("%llu doorbells for %d records to one counted reader", (unsigned long long)bells, K);
  pthread_barrier_wait(&g_bar2);
}

static void *rank_main(void *arg) {
  uint32_t me = (uint32_t)(uintptr_t)arg;
  nexar_client *c = g_c[me];
  nx_ep *ep = c->ep;
  uint32_t right = (me + 1) % W, left = (me + W - 1) % W;
  for (uint32_t j = 0; j < W; j++) {
    if (j == me) continue;
    int ok = 0;
    for (int t = 0; t < 500 && !ok; t++) {
      ok = state(ep, j) >= 2;
      if (!ok) usleep(10000);
    }
    if (!ok) FAIL("no shared-memory rings with rank %u after 5 s", j);
  }
  /* the lane's receive buffers were written once when the first same-host
   * peer appeared (lane.c, touch_rx): a receive's first use of a slot must
   * not fault in the middle of a collective or a ping-pong */
  pthread_mutex_lock(&ep->mu);
  long absent = nx_lane_rx_absent_locked(ep);
  pthread_mutex_unlock(&ep->mu);
  if (absent != 0) FAIL("%ld pages of the lane's receive buffers not in memory", absent);
  pthread_barrier_wait(&g_bar);
  size_t n = NS * ROUNDS;
  uint8_t **sb = calloc(n, sizeof *sb);
  nexar_request **rq = calloc(n, sizeof *rq);
  for (size_t k = 0; k < n; k++) {
    size_t len = SIZES[k % NS];
    sb[k] = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++)
      sb[k][i] = pat(me, k, i);
    if (nexar_send_nb(c, sb[k], len, right, 7, &rq[k])) FAIL("send_nb %zu (%zu bytes)", k, len);
  }
  uint8_t *rb = malloc(2u << 20);
  for (size_t k = 0; k < n; k++) {
    size_t len = SIZES[k % NS];
    memset(rb, 0xee, len ? len : 1);
    int rc = nexar_recv(c, rb, len, left, 7);
    if (rc) FAIL("recv %zu (%zu bytes): %s", k, len, nexar_strerror(rc));
    for (size_t i = 0; i < len; i++)
      if (rb[i] != pat(left, k, i))
        FAIL("message %zu (%zu bytes) byte %zu: out of order or corrupt", k, len, i);
  }
  for (size_t k = 0; k < n; k++) {
    if (nexar_wait(rq[k])) FAIL("send %zu", k);
    free(sb[k]);
  }
  free(sb);
  free(rq);
  if (state(ep, right) != 3) FAIL("point-to-point to rank %u did not go by the ring", right);
  /* above NX_SHM_EAGER_MAX they came as streams through the ring or by
   * process_vm_readv (bulk), each way tried (rndv.c, rpick) */
  nexar_peer_stats st;
  uint64_t large = 0;
  for (size_t k = 0; k < n; k++)
    large += SIZES[k % NS] > NX_SHM_EAGER_MAX ? SIZES[k % NS] : 0;
  if (nexar_peer_stats_get(c, left, &st) || !st.bulk_bytes_received ||
      st.bulk_bytes_received >= large || st.shm_bytes_received < large - st.bulk_bytes_received)
    FAIL("large messages from rank %u: %llu bytes by single copy, %llu by the ring (%llu large)",
         left, (unsigned long long)st.bulk_bytes_received,
         (unsigned long long)st.shm_bytes_received, (unsigned long long)large);
  if (me <= 1) recv_fast(c, me);
  if (me <= 1) stream_behind(c, me);
  if (me <= 1) bell_once(c, me);
  static const size_t COUNTS[] = {1, 256, 8191, 8192, 8193, 100000};
  int32_t *v = malloc(100000 * sizeof *v);
  for (size_t k = 0; k < sizeof COUNTS / sizeof COUNTS[0]; k++) {
    for (size_t i = 0; i < COUNTS[k]; i++)
      v[i] = (int32_t)(me + i);
    if (nexar_all_reduce(c, v, COUNTS[k], NEXAR_I32, NEXAR_SUM)) FAIL("all_reduce %zu", COUNTS[k]);
    for (size_t i = 0; i < COUNTS[k]; i++)
      if (v[i] != (int32_t)(W * (W - 1) / 2 + W * i))
        FAIL("all_reduce %zu: element %zu", COUNTS[k], i);
  }
  free(v);
  segment(c, me);
  /* FORGE 0: the record is in the ring before rank 1 receives, and rank 1's
   * progress thread is kept off the rings (a spinner counted, as while a
   * thread polls), so its blocking receive's own look (recv_now) finds it.
   * FORGE 1: the receive is pending when the record comes. */
  if (FORGE == 0 && me == 1) {
    hold_progress(ep);
  }
  pthread_barrier_wait(&g_bar);
  if (FORGE >= 0 && me == 0) {
    pthread_mutex_lock(&ep->mu);
    int rc = nx_shm_test_forge(ep, ep->peers[1], FORGE);
    pthread_mutex_unlock(&ep->mu);
    if (rc) FAIL("forge: %d", rc);
  }
  if (FORGE == 0 && me <= 1) pthread_barrier_wait(&g_bar2);
  if (FORGE >= 0 && me == 1) {
    uint64_t t0 = nx_now_ns();
    int rc = nexar_recv(c, rb, 8, 0, 99);
    if (rc != NEXAR_ERR_PROTOCOL) FAIL("receive behind a forged record: %s", nexar_strerror(rc));
    pthread_mutex_lock(&ep->mu);
    uint64_t dropped = ep->shm_dropped;
    pthread_mutex_unlock(&ep->mu);
    /* once: a receive that finds it itself (recv_now) counted it twice, the
     * peer's teardown reading the record again */
    if (dropped != 1) FAIL("forged record counted %llu times", (unsigned long long)dropped);
    if (FORGE == 0) release_progress(ep);
    printf("rank 1: forged record dropped in %.1f ms, counted (%llu): %s\n",
           (double)(nx_now_ns() - t0) / 1e6, (unsigned long long)dropped, nexar_last_error());
  }
  free(rb);
  return NULL;
}

/* Streamed receives whose sender does not push (its thread does not drive
 * and its progress thread is kept off the rings) time out like any other
 * (one kept refreshing its progress before, as a local copy does, and hung);
 * the sender is told (its send fails, unless it wrote its last piece before
 * the answer came), the pieces it wrote are dropped, and the pair works on. World of two, timeout
 * 300 ms. */
static nexar_client *g_t[2];

static void *stall_main(void *arg) {
  uint32_t me = (uint32_t)(uintptr_t)arg;
  nexar_client *c = g_t[me];
  nx_ep *ep = c->ep;
  for (int t = 0; t < 500 && state(ep, 1 - me) < 3; t++)
    usleep(10000);
  enum { K = 10 }; /* more than a few given up at once (a ring of 8 ids dropped the peer) */
  size_t big = 2u << 20;
  uint8_t *b = calloc(K, big);
  int64_t v = 7;
  nexar_request *q[K];
  if (me == 0) {
    hold_progress(ep);
    pthread_barrier_wait(&g_bar2);
    for (int k = 0; k < K; k++)
      if (nexar_send_nb(c, b + k * big, big, 1, 51, &q[k])) FAIL("stall send %d", k);
    usleep(800000); /* the receives time out meanwhile */
    release_progress(ep);
    for (int k = 0; k < K; k++) {
      /* told (TIMEOUT), or done writing before the answer came */
      int rc = nexar_wait(q[k]);
      if (rc && rc != NEXAR_ERR_TIMEOUT) FAIL("stalled send %d: %s", k, nexar_strerror(rc));
    }
    pthread_barrier_wait(&g_bar2);
    if (nexar_send(c, &v, 8, 1, 52)) FAIL("send after the stall");
  } else {
    pthread_barrier_wait(&g_bar2);
    for (int k = 0; k < K; k++)
      if (nexar_recv_nb(c, b + k * big, big, 0, 51, &q[k])) FAIL("stall irecv %d", k);
    for (int k = 0; k < K; k++) {
      int rc = nexar_wait(q[k]);
      if (rc != NEXAR_ERR_TIMEOUT) FAIL("stalled receive %d: %s", k, nexar_strerror(rc));
    }
    pthread_barrier_wait(&g_bar2);
    v = 0;
    if (nexar_recv(c, &v, 8, 0, 52) || v != 7) FAIL("receive after the stall");
  }
  free(b);
  return NULL;
}

static void stalled_stream(void) {
  uint32_t me = 0; /* (FAIL names a rank) */
  nexar_config cfg;
  nexar_config_default(&cfg);
  cfg.collective_timeout_ms = 300;
  if (nexar_bootstrap_local(g_t, 2, &cfg)) FAIL("bootstrap of the stall world");
  pthread_t t[2];
  for (uint32_t r = 0; r < 2; r++)
    pthread_create(&t[r], NULL, stall_main, (void *)(uintptr_t)r);
  for (uint32_t r = 0; r < 2; r++)
    pthread_join(t[r], NULL);
  for (uint32_t r = 0; r < 2; r++)
    nexar_client_del(g_t[r]);
}

int main(int argc, char **argv) {
  W = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 3;
  FORGE = argc > 2 ? (int)strtol(argv[2], NULL, 10) : -1;
  if (W < 2 || W > 16 || (FORGE >= 0 && W < 2)) return 2;
  nexar_config cfg;
  nexar_config_default(&cfg);
  cfg.collective_timeout_ms = 20000;
  if (nexar_bootstrap_local(g_c, W, &cfg)) {
    printf("FAIL bootstrap: %s\n", nexar_last_error());
    return 1;
  }
  pthread_barrier_init(&g_bar, NULL, W);
  pthread_barrier_init(&g_bar2, NULL, 2);
  pthread_t t[16];
  for (uint32_t r = 0; r < W; r++)
    pthread_create(&t[r], NULL, rank_main, (void *)(uintptr_t)r);
  for (uint32_t r = 0; r < W; r++)
    pthread_join(t[r], NULL);
  for (uint32_t r = 0; r < W; r++)
    nexar_client_del(g_c[r]);
  if (W == 2 && FORGE < 0) stalled_stream();
  printf("%s: shm world %u forge %d\n", g_fail ? "FAIL" : "ok", W, FORGE);
  return g_fail;
}
