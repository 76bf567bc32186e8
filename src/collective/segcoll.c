/* Blocking collectives through the communicator's shared-memory segment
 * (runtime/cseg.h has the layout and the protocol): every rank publishes
 * its contribution once, every rank reads what it needs straight from the
 * others' buffers, reductions run in rank order (so every rank computes the
 * same bits), a barrier is the arrival flags alone, a broadcast is written
 * once by its root, which returns at once. No message, no schedule, no
 * request: a small collective costs a few cache-line transfers. Above a
 * rank's buffer, collectives that only copy read the owners' buffers
 * themselves (single copy, process_vm_readv), and a broadcast above 16 KiB
 * streams through its root's buffer, root and readers copying at once
 * (segstream.c). Which way a call goes: segchoice.c.
 *
 * Setup (agreeing on a segment, at fixed points of the order): segsetup.c.
 *
 * Which collectives: the blocking forms (a non-blocking one is a request the
 * engine advances, and keeps the message path) of all_reduce, broadcast,
 * reduce, all_gather, gather, reduce_scatter, scatter, all_to_all and
 * barrier, on host memory, when what a rank publishes fits its buffer
 * (nx_cseg_slot: 1 MiB up to 16 ranks) and a reduction reads at most
 * NX_CSEG_REDUCE_MAX bytes in all, or, with single copy, any size of the
 * collectives that only copy; unless a test forces an algorithm
 * (nx_algo_force_*). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/algo.h"
#include "collective/coll.h"
#include "collective/segop.h"
#include "core/copy.h"
#include "proto/pick.h"
#include "reduce/reduce.h"
#include "runtime/comm.h"
#include "runtime/cseg.h"
#include "runtime/engine.h"

/* ----------------------------------------------------------------- run */

/* A waiter that finds no word of seq yet looks whether the rank went past
 * seq another way only at every NX_CSEG_PAST_EVERY-th look: that reads its
 * entered and msg words, whose line it stores at every call, and each read
 * takes the line from it, so that its next store waits for it to come back
 * (harness all_reduce 8 B n = 2, 8 alternating runs: 0.400 -> 0.381 us). */
static int look_past(nx_segop *o) {
  return (++o->looks % NX_CSEG_PAST_EVERY) == 0;
}

/* Where rank r's contribution to o is: its arrival's line, or buffer p. */
static uint8_t *pbuf(const nx_segop *o, uint32_t r) {
  return o->inl ? o->s->ctl[r].arr[o->seq % NX_CSEG_RING].data : nx_cseg_buf(o->s, r, o->seq);
}

/* Waits for pred on o (nx_cseg_wait), polling through the copy time of
 * o's bytes before it sleeps: a wake-up costs more than the rest. What
 * only a wait needs (that time, the timeout, the name for its errors) is
 * found once pred is not true at once: most small collectives never
 * wait. Its looks are gap_ns apart at least while it spins. */
static int wait_gap(nx_segop *o, int (*pred)(void *arg, uint32_t *who), uint64_t gap_ns,
                    const char *step) {
  uint32_t who = 0;
  int rc = pred(o, &who);
  if (rc) return rc < 0 ? rc : 0;
  nx_job *j = o->j;
  if (!o->extra_set) {
    o->extra_ns = nx_spin_for_bytes(NX_MIN(nx_segcoll_published(j, o->s->n, 1), o->s->slot));
    o->extra_set = 1;
  }
  return nx_cseg_wait(o->s, j->k, pred, o, o->extra_ns, gap_ns, nx_coll_timeout_ms(j->k),
                      nx_job_name(j), step);
}
int nx_segop_wait(nx_segop *o, int (*pred)(void *arg, uint32_t *who), const char *step) {
  return wait_gap(o, pred, 0, step);
}

static int mismatch(const nx_segop *o, uint64_t k, const nx_cseg_sig *ours, uint32_t r,
                    const nx_cseg_sig *theirs) {
  char mine[96], other[96], late[48] = "";
  nx_coll_describe(mine, sizeof mine, ours->op, ours->dtype, ours->redop, ours->root, ours->count);
  nx_coll_describe(other, sizeof other, theirs->op, theirs->dtype, theirs->redop, theirs->root,
                   theirs->count);
  if (k != o->seq) snprintf(late, sizeof late, " (found at #%llu)", (unsigned long long)o->seq);
  return nx_fail(
      NEXAR_ERR_MISMATCH, "collective #%llu on comm %llu: rank %u called %s, rank %u called %s%s",
      (unsigned long long)k, (unsigned long long)o->j->c->id, o->s->me, mine, r, other, late);
}

/* All other ranks have begun sequence `need` - 1 (entered >= need): 1, or 0
 * naming one that has not. The least value seen is kept, as entered only
 * grows: a root that runs ahead reads the others' words once per many calls. */
static int others_began(nx_cseg *s, uint64_t need, uint32_t *who) {
  if (s->min_entered >= need) return 1;
  uint64_t least = UINT64_MAX;
  for (uint32_t r = 0; r < s->n; r++) {
    if (r == s->me) continue;
    uint64_t e = atomic_load_explicit(&s->ctl[r].entered, memory_order_acquire);
    if (e < need) {
      *who = r;
      return 0;
    }
    least = e < least ? e : least;
  }
  s->min_entered = least;
  return 1;
}

/* The bits of every other rank in an ack word (nowait: n <= 64). */
static uint64_t ack_all(const nx_cseg *s) {
  uint64_t all = s->n >= 64 ? UINT64_MAX : (1ull << s->n) - 1;
  return all & ~(1ull << s->me);
}

static void push_pending(nx_cseg *s, uint64_t seq, _Atomic uint64_t *ack) {
  nx_cseg_pend *q = &s->pend[(s->pend_at + s->npend++) % NX_CSEG_PEND];
  q->seq = seq;
  q->ack = ack;
}

/* The collectives we finished without waiting (nowait), up to sequence
 * upto, once every other rank has begun the one after: every reader's bit
 * must be set. 1 all checked, 0 a rank has not begun the next yet (*who),
 * < 0 what was wrong. The rank that did not take it is told, as it may be
 * waiting for our frames on the message path. */
static int check_pending(nx_segop *o, uint64_t upto, uint32_t *who) {
  nx_cseg *s = o->s;
  while (s->npend) {
    nx_cseg_pend *q = &s->pend[s->pend_at % NX_CSEG_PEND];
    uint64_t k = q->seq;
    if (k > upto) break;
    if (!others_began(s, k + 2, who)) return 0;
    uint64_t missing = ack_all(s) & ~atomic_load_explicit(q->ack, memory_order_acquire);
    if (missing) {
      uint32_t r = (uint32_t)__builtin_ctzll(missing);
      int rc = nx_fail(NEXAR_ERR_MISMATCH,
                       "collective #%llu on comm %llu: rank %u was its root, rank %u did not take "
                       "part as a reader (it called another collective, other arguments, another "
                       "root or a non-blocking form, or failed it; found at #%llu)",
                       (unsigned long long)k, (unsigned long long)o->j->c->id, s->me, r,
                       (unsigned long long)o->seq);
      char why[320];
      snprintf(why, sizeof why, "%s", nexar_last_error());
      nx_coll_tell_failed(o->j->c, r, k, NEXAR_ERR_MISMATCH);
      nx_set_error_text(why);
      s->npend = 0; /* told once */
      return rc;
    }
    s->pend_at++;
    s->npend--;
  }
  return 1;
}

/* A word of rank r that no rank following the protocol writes (what: an
 * impossible sequence, or way): r is dropped (PROTOCOL), and this
 * collective fails with that cause. */
int nx_segop_impossible(const nx_segop *o, uint32_t r, const char *what) {
  nx_ep *ep = o->j->c->ep;
  const char *name = nx_job_name(o->j);
  unsigned long long seq = (unsigned long long)o->seq, id = (unsigned long long)o->j->c->id;
  char why[160];
  snprintf(why, sizeof why, "shared-memory collective segment: impossible %s from rank %u", what,
           r);
  int rc = nx_fail(NEXAR_ERR_PROTOCOL, "%s #%llu on comm %llu: %s", name, seq, id, why);
  nx_coll_fail(o->j->k, rc); /* the cause here, not the loss it causes */
  pthread_mutex_lock(&ep->mu);
  nx_peer_dead_locked(ep, ep->peers[o->j->c->members[r]], NEXAR_ERR_PROTOCOL, why);
  pthread_mutex_unlock(&ep->mu);
  nx_fail(rc, "%s #%llu on comm %llu: %s", name, seq, id, why);
  return rc;
}

/* MISMATCH: rank r, whose words we read, went past o's collective without
 * taking it through the segment as we do. */
static int other_path(const nx_segop *o, uint32_t r, const char *role) {
  return nx_fail(NEXAR_ERR_MISMATCH,
                 "collective #%llu on comm %llu: rank %u called %s (blocking), rank %u%s took "
                 "another path for it (another collective, other arguments, a non-blocking "
                 "form or a small broadcast; or it failed it)",
                 (unsigned long long)o->seq, (unsigned long long)o->j->c->id, o->s->me,
                 nx_job_name(o->j), r, role);
}

/* Rank r arrived at o's sequence with o's signature (its `how` left out):
 * 1, 0 not yet (*who = r), or what was wrong. */
static int arrived_one(nx_segop *o, uint32_t r, uint32_t *who) {
  nx_cseg *s = o->s;
  unsigned p = (unsigned)(o->seq % NX_CSEG_RING);
  nx_cseg_ctl *w = &s->ctl[r];
  /* its arrival first: there, it is all we read of its words (the line
   * of entered and msg, which it stores at every collective, stays in
   * its cache) */
  uint64_t av = atomic_load_explicit(&w->arr[p].arrive, memory_order_acquire);
  int st = 1;
  if (av != o->seq + 1 && !look_past(o)) {
    *who = r;
    return 0;
  }
  if (av != o->seq + 1) {
    /* entered, then msg, then the arrival: seeing it past seq, or
     * marked, means seeing its arrival at seq if it made one */
    uint64_t e0 = atomic_load_explicit(&w->entered, memory_order_acquire);
    uint64_t mv = atomic_load(&w->msg);
    av = atomic_load(&w->arr[p].arrive);
    uint64_t e1 = av > o->seq + 1 ? atomic_load(&w->entered) : e0;
    st = nx_cseg_arrival(av, mv, e0, e1, o->seq);
  }
  if (st == 0) {
    *who = r;
    return 0;
  }
  if (st < 0) return nx_segop_impossible(o, r, "sequence");
  if (st == 2) return other_path(o, r, "");
  nx_cseg_sig theirs = w->arr[p].sig;
  theirs.how = o->sig.how; /* (the decider's say, not the call's) */
  if (memcmp(&theirs, &o->sig, sizeof theirs)) return mismatch(o, o->seq, &o->sig, r, &theirs);
  return 1;
}

int nx_segop_arrived(void *arg, uint32_t *who) {
  nx_segop *o = arg;
  nx_cseg *s = o->s;
  for (; o->next < s->n; o->next++) {
    if (o->next == s->me) continue;
    int rc = arrived_one(o, o->next, who);
    if (rc <= 0) return rc;
  }
  /* Each stored entered = seq + 1 before its arrival: the next collective's
   * step 1 (drained) needs no look at their entered words, whose line would
   * cross between cores at every call of a lock-step loop. */
  if (s->min_entered < o->seq + 1) s->min_entered = o->seq + 1;
  return 1;
}

/* The decider (o->from) arrived (nx_segop_learn). */
static int decider_arrived(void *arg, uint32_t *who) {
  nx_segop *o = arg;
  return arrived_one(o, o->from, who);
}

uint64_t nx_segop_pick(nx_segop *o) {
  int f = nx_segcoll_force_way; /* (tests) */
  o->sig.how = (uint8_t)(f == 0 || f == 1 ? f
                         : f == 2         ? (int)(o->seq & 1)
                                  : nx_pick_way(&o->s->pick[o->j->kind], o->j->count * o->j->es));
  return nx_now_ns();
}

int nx_segop_learn(nx_segop *o) {
  uint32_t dec = nx_segcoll_decider(o->j);
  o->from = dec;
  int rc = nx_segop_wait(o, decider_arrived, "its arrival");
  if (rc) return rc;
  uint8_t how = o->s->ctl[dec].arr[o->seq % NX_CSEG_RING].sig.how;
  if (how > 1) return nx_segop_impossible(o, dec, "way");
  o->sig.how = how;
  return 0;
}

void nx_segop_measured(nx_segop *o, uint64_t t0) {
  if (t0)
    nx_pick_done(&o->s->pick[o->j->kind], o->j->count * o->j->es, o->sig.how, nx_now_ns() - t0);
}

static int drained(void *arg, uint32_t *who) {
  nx_segop *o = arg;
  nx_cseg *s = o->s;
  uint64_t last = s->last_arrive[o->seq & 1]; /* seq + 1 of our last arrival on this parity */
  if (last && !others_began(s, last + 1, who)) return 0;
  /* A nowait root checks what is two behind (so it may run one ahead);
   * everyone else all it left unchecked, before it arrives: a mismatch
   * found here fails this collective on every rank, as we never arrive. */
  uint64_t back = o->j->seg_nowait ? 2 : 1;
  return s->npend && o->seq >= back ? check_pending(o, o->seq - back, who) : 1;
}

/* Small broadcast, root: what the others' entered must reach before our
 * entry of k is free (they began the broadcast after the one it holds), or
 * 0 if it is free as last seen (s->min_entered; no look). */
static uint64_t bent_need(const nx_cseg *s, uint64_t k) {
  uint64_t held = s->bheld[k % NX_CSEG_BDEPTH];
  return held && s->min_entered < held + 1 ? held + 1 : 0;
}

/* Small broadcast, root: our entry of seq is free (bent_need, looking at
 * the readers' words if need be); what we left unchecked there (and
 * before) is checked first. */
static int bring_free(void *arg, uint32_t *who) {
  nx_segop *o = arg;
  nx_cseg *s = o->s;
  uint64_t need = bent_need(s, o->seq);
  if (need && !others_began(s, need, who)) return 0;
  return s->npend && o->seq >= NX_CSEG_BDEPTH ? check_pending(o, o->seq - NX_CSEG_BDEPTH, who) : 1;
}

/* Small broadcast, reader (bring_ready): the root's entry does not hold
 * seq; e0, its entered, was read before held. */
static int bring_state(nx_segop *o, uint32_t root, uint64_t held, uint64_t e0, uint32_t *who) {
  nx_cseg_ctl *w = &o->s->ctl[root];
  uint64_t mv = atomic_load(&w->msg);
  uint64_t av = atomic_load(&w->arr[o->seq % NX_CSEG_RING].arrive);
  uint64_t e1 = atomic_load(&w->entered);
  int st = nx_cseg_bentry_state(held, av, mv, e0, e1, o->seq);
  if (st == 0) {
    *who = root;
    return 0;
  }
  if (st < 0) return nx_segop_impossible(o, root, "sequence");
  return other_path(o, root, " (the root)");
}

/* Small broadcast, reader: the root's entry of seq, with our signature. */
static int bring_ready(void *arg, uint32_t *who) {
  nx_segop *o = arg;
  nx_cseg *s = o->s;
  uint32_t root = o->j->root;
  nx_cseg_ctl *w = &s->ctl[root];
  nx_cseg_bent *e = nx_cseg_bentry(s, root, o->seq);
  /* The entry first: found, it is all we read of the root's (its entered
   * line stays in its cache, where its next store to it goes at once) */
  uint64_t held = atomic_load_explicit(&e->seq, memory_order_acquire);
  if (held != o->seq + 1 && !look_past(o)) {
    *who = root;
    return 0;
  }
  if (held != o->seq + 1) { /* not found: entered, then the entry again */
    uint64_t e0 = atomic_load_explicit(&w->entered, memory_order_acquire);
    held = atomic_load_explicit(&e->seq, memory_order_acquire);
    if (held != o->seq + 1) return bring_state(o, root, held, e0, who);
  }
  nx_cseg_sig theirs = e->sig;
  return memcmp(&theirs, &o->sig, sizeof theirs) ? mismatch(o, o->seq, &o->sig, root, &theirs) : 1;
}

/* The root's entries after seq - 1 that its readers are known to have left
 * (bent_need), up to NX_CSEG_BPREFETCH: fetched for writing.
 * Each line's readers set their bit in it a ring ago, so that the stores of
 * the root's next calls would each wait for it to come back; one that a
 * reader may still read is left alone, or the fetch would take it from
 * that reader first. */
static void prefetch_free(nx_cseg *s, uint64_t seq) {
  for (uint64_t k = seq; k < seq + NX_CSEG_BPREFETCH && !bent_need(s, k); k++)
    nx_prefetch_write(nx_cseg_bentry(s, s->me, k));
}

static int run_bcast(nx_segop *o) {
  nx_job *j = o->j;
  nx_cseg *s = o->s;
  size_t blk = j->count * j->es;
  if (s->me == j->root) {
    /* the ring is full: each look at a reader's entered takes that line from
     * the reader, whose next store to it then waits for it to come back */
    int rc = wait_gap(o, bring_free, NX_CSEG_BGAP_NS, "it to begin a later collective");
    if (rc) return rc;
    nx_cseg_bpublish(s, o->seq, &o->sig, j->buf, blk);
    push_pending(s, o->seq, &nx_cseg_bentry(s, s->me, o->seq)->ack);
    prefetch_free(s, o->seq + 1);
    return 0;
  }
  int rc = nx_segop_wait(o, bring_ready, "the root's broadcast");
  if (rc) return rc;
  nx_cseg_bent *e = nx_cseg_bentry(s, j->root, o->seq);
  if (blk) memcpy(j->buf, e->data, blk);
  /* the only reader of two ranks stores its bit: no locked instruction,
   * which would wait for the line it just read to come back exclusive */
  if (s->n == 2)
    atomic_store_explicit(&e->ack, 1ull << s->me, memory_order_release);
  else
    atomic_fetch_or_explicit(&e->ack, 1ull << s->me, memory_order_release);
  return 0;
}

/* Single copy: every other rank has read what it needed of our buffer. */
static int all_left(void *arg, uint32_t *who) {
  nx_segop *o = arg;
  nx_cseg *s = o->s;
  for (; o->next < s->n; o->next++)
    if (o->next != s->me &&
        atomic_load_explicit(&s->ctl[o->next].left, memory_order_acquire) < o->seq + 1) {
      *who = o->next;
      return 0;
    }
  return 1;
}

/* Single copy: len bytes at offset off of rank r's published buffer. */
static int read_from(const nx_segop *o, uint32_t r, void *to, size_t off, size_t len) {
  const nx_cseg *s = o->s;
  uint64_t at = s->ctl[r].arr[o->seq % NX_CSEG_RING].addr;
  if (!len) return 0;
  if (at + off < at) /* a forged address: what a read of it would say */
    return nx_fail(NEXAR_ERR_PROTOCOL, "single-copy read from rank %u: address wraps", r);
  return nx_cseg_read(s->pid[r], to, at + off, len);
}

nx_own_part nx_segop_own_parts(const nx_segop *o) {
  const nx_job *j = o->j;
  nx_own_part w = {0};
  size_t blk = j->count * j->es, st = j->stride ? j->stride : blk, me = o->s->me;
  int a2a = j->kind == NX_COLL_ALL_TO_ALL;
  if (!blk || (!a2a && j->kind != NX_COLL_ALL_GATHER)) return w;
  const uint8_t *from = (const uint8_t *)j->send + (a2a ? me * blk : 0);
  uint8_t *to = (uint8_t *)j->recv + me * (a2a ? blk : st);
  if (to + blk <= from || from + blk <= to) w = (nx_own_part){.from = from, .to = to, .len = blk};
  return w;
}

/* Up to `most` more bytes of w (all that is left: SIZE_MAX). */
void nx_own_step(nx_own_part *w, size_t most) {
  size_t l = NX_MIN(most, w->len - w->done);
  if (w->nt)
    nx_copy_nt(w->to + w->done, w->from + w->done, l);
  else
    memcpy(w->to + w->done, w->from + w->done, l);
  w->done += l;
}

/* Our own block of a collective that only copies, from send to recv
 * (unless in place): single copy does it after reading the others', a
 * stream once its own data is out (a writer's readers copy the ring's last
 * pieces meanwhile). */
void nx_segop_copy_own(const nx_segop *o) {
  nx_own_part w =
      nx_segop_own_parts(o); /* all_to_all (never overlaps: validated), most all_gathers */
  if (w.to) {
    nx_own_step(&w, SIZE_MAX);
    return;
  }
  nx_job *j = o->j;
  uint32_t me = o->s->me;
  size_t blk = j->count * j->es, st = j->stride ? j->stride : blk;
  const uint8_t *send = j->send;
  uint8_t *recv = j->recv;
  switch (j->kind) {
  case NX_COLL_ALL_GATHER:
  case NX_COLL_GATHER:
    if ((j->kind == NX_COLL_ALL_GATHER || me == j->root) && send != recv + me * st)
      memmove(recv + me * st, send, blk);
    break;
  case NX_COLL_SCATTER:
    if (me == j->root && recv != send + me * blk) memmove(recv, send + me * blk, blk);
    break;
  default:
    break;
  }
}

static int read_all(const nx_segop *o) {
  nx_job *j = o->j;
  const nx_cseg *s = o->s;
  uint32_t n = s->n, me = s->me;
  size_t blk = j->count * j->es;
  char *recv = j->recv;
  int rc = 0;
  switch (j->kind) {
  case NX_COLL_BROADCAST:
    if (me != j->root) rc = read_from(o, j->root, j->buf, 0, blk);
    break;
  case NX_COLL_SCATTER:
    if (me != j->root) rc = read_from(o, j->root, recv, (size_t)me * blk, blk);
    break;
  case NX_COLL_ALL_GATHER:
  case NX_COLL_GATHER:
    if (j->kind == NX_COLL_GATHER && me != j->root) break;
    for (uint32_t r = 0; r < n && !rc; r++)
      if (r != me) rc = read_from(o, r, recv + (size_t)r * blk, 0, blk);
    break;
  case NX_COLL_ALL_TO_ALL:
    for (uint32_t r = 0; r < n && !rc; r++)
      if (r != me) rc = read_from(o, r, recv + (size_t)r * blk, (size_t)me * blk, blk);
    break;
  default:
    break;
  }
  if (!rc) nx_segop_copy_own(o);
  if (rc == NEXAR_ERR_PROTOCOL) nx_coll_fail(j->k, rc);
  return rc;
}

/* Between two ranks a reduce_scatter's own block never enters our buffer:
 * publish leaves it out and compute reduces it straight from send. */
static int own_from_send(const nx_segop *o) {
  return o->j->kind == NX_COLL_REDUCE_SCATTER && o->s->n == 2;
}

/* Every rank reduces in rank order, so all get the same bits. dst holds our
 * own vector already when own is set (all_reduce and reduce in place; a
 * two-rank reduce_scatter, which copied its block there): rank 0 starts
 * from it, which saves a copy of the vector; with two ranks so does rank 1,
 * as the kernels make a op b and b op a the same bits (NaNs canonical, min
 * and max symmetric: reduce/reduce.c). */
static void reduce_all(const nx_segop *o, void *dst, size_t off, size_t count, int own) {
  nx_job *j = o->j;
  nexar_op op = j->op == NEXAR_AVG ? NEXAR_SUM : j->op;
  size_t es = j->es;
  uint32_t n = o->s->n, me = o->s->me;
  int from_own = own && (me == 0 || n == 2);
  if (from_own && me == 1) {
    nx_reduce(dst, pbuf(o, 0) + off * es, count, j->dt, op);
  } else {
    if (!from_own) memcpy(dst, pbuf(o, 0) + off * es, count * es);
    for (uint32_t r = 1; r < n; r++)
      nx_reduce(dst, pbuf(o, r) + off * es, count, j->dt, op);
  }
  if (j->op == NEXAR_AVG) nx_avg_div(dst, count, j->dt, o->s->n);
}

/* An all_reduce from three ranks on, of NX_CSEG_SHARE_MIN bytes and up:
 * each rank reduces one share of the vector (whole cache lines) from every
 * buffer, puts the result where its own input for that share was (nobody
 * else reads that part of its buffer) and says so in its stream word; then
 * it copies the others' shares as they come. Each rank reads the vector
 * about twice instead of n times. Pure, as nx_segcoll_published. */
_Static_assert(NX_CSEG_INLINE < NX_CSEG_SHARE_MIN, "a reduction by shares is never inline");
static int by_shares(const nx_job *j, uint32_t n) {
  return j->kind == NX_COLL_ALL_REDUCE && n >= 3 && j->count * j->es >= NX_CSEG_SHARE_MIN;
}

/* Rank r's share of o's vector: elements [*off, *off + *cnt). */
static void share_of(const nx_segop *o, uint32_t r, size_t *off, size_t *cnt) {
  size_t count = o->j->count, line = 64 / o->j->es ? 64 / o->j->es : 1, n = o->s->n;
  size_t per = ((count + n - 1) / n + line - 1) / line * line;
  *off = NX_MIN((size_t)r * per, count);
  *cnt = NX_MIN(per, count - *off);
}

static int reduce_shares(nx_segop *o) {
  nx_job *j = o->j;
  uint32_t n = o->s->n, me = o->s->me;
  size_t es = j->es, off, cnt;
  uint8_t *buf = j->buf;
  share_of(o, me, &off, &cnt);
  if (cnt) {
    reduce_all(o, buf + off * es, off, cnt, 1);
    memcpy(pbuf(o, me) + off * es, buf + off * es, cnt * es);
  }
  nx_cseg_stream(o->s, 0, o->seq, 1);
  o->need = 1;
  for (uint32_t i = 1; i < n; i++) { /* the next rank's first: not all read one buffer at once */
    o->from = (me + i) % n;
    share_of(o, o->from, &off, &cnt);
    if (!cnt) continue;
    int rc = nx_segop_wait(o, nx_segop_written, "its share of the reduction");
    if (rc) return rc;
    memcpy(buf + off * es, pbuf(o, o->from) + off * es, cnt * es);
  }
  return 0;
}

static void compute(const nx_segop *o) {
  nx_job *j = o->j;
  nx_cseg *s = o->s;
  uint32_t n = s->n, me = s->me;
  size_t blk = j->count * j->es, st = j->stride ? j->stride : blk;
  char *recv = j->recv;
  switch (j->kind) {
  case NX_COLL_ALL_REDUCE:
    reduce_all(o, j->buf, 0, j->count, 1);
    break;
  case NX_COLL_REDUCE:
    if (me == j->root) reduce_all(o, j->buf, 0, j->count, 1);
    break;
  case NX_COLL_REDUCE_SCATTER:
    if (own_from_send(o) && recv != (const char *)j->send + me * st)
      memcpy(recv, (const char *)j->send + me * st, blk);
    reduce_all(o, recv, (size_t)me * j->count, j->count, own_from_send(o));
    break;
  case NX_COLL_BROADCAST:
    if (me != j->root) memcpy(j->buf, pbuf(o, j->root), blk);
    break;
  case NX_COLL_ALL_GATHER:
  case NX_COLL_GATHER:
    if (j->kind == NX_COLL_GATHER && me != j->root) break;
    for (uint32_t r = 0; r < n; r++) /* our own block from send, unless in place */
      if (r != me || j->send != recv + (size_t)r * st)
        memmove(recv + (size_t)r * st, r == me ? j->send : pbuf(o, r), blk);
    break;
  case NX_COLL_SCATTER:
    memmove(recv, pbuf(o, j->root) + (size_t)me * blk, blk);
    break;
  case NX_COLL_ALL_TO_ALL: /* send and recv never overlap (validated) */
    for (uint32_t r = 0; r < n; r++)
      memcpy(recv + (size_t)r * blk,
             (r == me ? (const uint8_t *)j->send : pbuf(o, r)) + (size_t)me * blk, blk);
    break;
  default:
    break;
  }
}

/* Does another rank read ours in a single copy? Not a broadcast's or a
 * scatter's readers' buffers, nor a gather's root's. */
static int read_by_others(const nx_segop *o) {
  const nx_job *j = o->j;
  if (j->kind == NX_COLL_BROADCAST || j->kind == NX_COLL_SCATTER) return o->s->me == j->root;
  return j->kind != NX_COLL_GATHER || o->s->me != j->root;
}

/* Single copy, once every rank arrived with matching signatures: read,
 * say so, then, if others read ours, wait until every rank has (the caller
 * may reuse its buffers once we return). A reader that nobody reads
 * returns at once: the time a deciding reader measures (nx_segop_measured)
 * is then its own transfer's, as it is streamed, not the slowest
 * reader's. A rank that fails here never says it left: the others hear
 * its failure instead of returning. */
int nx_segop_single_copy(nx_segop *o) {
  int rc = o->j->count ? read_all(o) : 0;
  if (rc) return rc;
  nx_cseg_leave(o->s, o->seq);
  if (!read_by_others(o)) return 0;
  o->next = 0;
  return nx_segop_wait(o, all_left, "it to finish reading");
}

/* Our contribution (pub bytes from src) into our buffer. A reduce_scatter's
 * blocks lie j->stride apart in send when it runs in chunks (own_from_send:
 * ours may stay out). */
static void publish(const nx_segop *o, const void *src, size_t pub) {
  const nx_job *j = o->j;
  uint8_t *buf = pbuf(o, o->s->me);
  if (j->kind != NX_COLL_REDUCE_SCATTER) {
    memcpy(buf, src, pub);
    return;
  }
  size_t blk = j->count * j->es, st = j->stride ? j->stride : blk;
  for (uint32_t r = 0; r < o->s->n; r++)
    if (r != o->s->me || !own_from_send(o))
      memcpy(buf + r * blk, (const uint8_t *)src + r * st, blk);
}

static int run(nx_job *j, const nx_coll_sig *sig);

int nx_segcoll_run(nx_job *j, const nx_coll_sig *sig) {
  int rc = run(j, sig);
  /* A failed call is what this rank reports, whatever a check still due
   * would have found: a peer's notice of that mismatch may fail it first
   * (then reporting it again at the next call would fail a good one). */
  if (rc) j->c->cseg->npend = 0;
  return rc;
}

static int run(nx_job *j, const nx_coll_sig *sig) {
  nexar_client *c = j->c;
  nx_segop o = {.j = j, .s = c->cseg, .seq = nx_coll_seq(j->k)};
  o.cma = j->seg == NX_SEG_SINGLE;
  o.inl = j->seg_inline;
  o.sig = (nx_cseg_sig){.op = sig->op,
                        .dtype = sig->dtype,
                        .redop = sig->redop,
                        .root = sig->root,
                        .count = sig->count};
  /* a peer failed it before we began (it told us): nothing to publish */
  int rc = nx_coll_failed(j->k);
  if (rc) return rc;
  if (j->seg == NX_SEG_BCAST) return run_bcast(&o);
  size_t most = nx_segcoll_published(j, c->size, 1); /* what the widest rank writes */
  if (!o.cma && !o.inl)                              /* (which we read) */
    nx_cseg_back(o.s, j->seg == NX_SEG_STREAM ? nx_segop_stream_bytes(o.s, j) : most);
  rc = nx_segop_wait(&o, drained, "it to begin the next collective");
  if (rc) return rc; /* not arrived: nobody waits for what we would have written */
  const void *src =
      j->kind == NX_COLL_ALL_REDUCE || j->kind == NX_COLL_REDUCE || j->kind == NX_COLL_BROADCAST
          ? j->buf
          : j->send;
  if (j->seg == NX_SEG_STREAM) return nx_segop_stream(&o, src);
  size_t pub = c->rank == j->root ? most : nx_segcoll_published(j, c->size, 0);
  uint64_t t0 = 0; /* the decider's clock (nx_segop_pick) */
  if (nx_segcoll_either(j)) {
    if (o.s->me == nx_segcoll_decider(j))
      t0 = nx_segop_pick(&o);
    else if ((rc = nx_segop_learn(&o)))
      return rc;
    o.cma = o.sig.how;
  }
  if (o.cma) /* where the others read it (published by the arrival) */
    o.s->ctl[c->rank].arr[o.seq % NX_CSEG_RING].addr = (uint64_t)(uintptr_t)src;
  else if (pub)
    publish(&o, src, pub);
  int shares = by_shares(j, c->size);
  if (shares) nx_cseg_stream_begin(o.s, o.seq); /* (published by the arrival) */
  nx_cseg_arrive(o.s, o.seq, &o.sig);
  if (j->seg_nowait) { /* its readers check our signature and set their bits */
    push_pending(o.s, o.seq, &o.s->ctl[c->rank].ack[o.seq % NX_CSEG_RING]);
    if (j->count) compute(&o);
    return 0;
  }
  rc = nx_segop_wait(&o, nx_segop_arrived, "its arrival");
  if (!rc && o.cma)
    rc = nx_segop_single_copy(&o);
  else if (!rc && shares)
    rc = reduce_shares(&o);
  else if (!rc && j->count)
    compute(&o); /* (count 0: buffers may be NULL) */
  if (rc) return rc;
  nx_segop_measured(&o, t0);
  /* the root may not have waited for us: it checks our bit later */
  if ((j->kind == NX_COLL_BROADCAST || j->kind == NX_COLL_SCATTER) && c->rank != j->root &&
      c->size <= NX_CSEG_BCAST_RANKS)
    atomic_fetch_or_explicit(&o.s->ctl[j->root].ack[o.seq % NX_CSEG_RING], 1ull << c->rank,
                             memory_order_release);
  return 0;
}

void nx_segcoll_mark(nx_job *j) {
  nx_cseg *s = j->c->cseg;
  if (!s) return;
  /* Checks still due stay due: the bits they read are in our own words,
   * which only our next arrival or broadcast on them resets, after them. */
  nx_cseg_mark_msg(s, nx_coll_seq(j->k));
}
