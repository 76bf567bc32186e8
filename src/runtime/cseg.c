/* Communicator segments (design in cseg.h). */
#include "runtime/cseg.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/cpubind.h"
#include "runtime/coll_port.h"
#include "runtime/engine.h"
#include "transport/vmread.h"

#define CSEG_MAGIC 0x3247455358454e4eull /* "NNEXSEG2" */
#define CSEG_CTL 4096u

typedef struct cseg_hdr {
  uint64_t magic, comm_id, attempt;
  uint32_t n, slot;
} cseg_hdr;
_Static_assert(sizeof(nx_cseg_arr) == 64, "an arrival, a cache line");
_Static_assert(sizeof(nx_cseg_ctl) == 448, "seven cache lines");
_Static_assert(sizeof(nx_cseg_bent) % 64 == 0, "whole cache lines");

static size_t data_off(uint32_t n) {
  size_t ctl = (size_t)n * sizeof(nx_cseg_ctl);
  return CSEG_CTL + ((ctl + 4095u) & ~(size_t)4095u);
}

static size_t bring_off(uint32_t n) {
  return data_off(n) + (size_t)n * 2 * nx_cseg_slot(n);
}

static size_t seg_size(uint32_t n) {
  return bring_off(n) + (size_t)n * NX_CSEG_BDEPTH * sizeof(nx_cseg_bent);
}

/* Maps the pages of [off, end) of the segment into this process now. Each
 * small broadcast writes (root) or reads (the others) the next of
 * NX_CSEG_BDEPTH entries per root, so the first lap through them took a
 * page fault on each side every few calls: nexar-perf broadcast 8 B --procs
 * n = 2 spent about 240 us more in a run of 2000 calls than the calls'
 * steady cost (0.29 against 0.16 us a call), which is what the harness
 * (2000 calls a size) measured. Best effort: without MADV_POPULATE_WRITE
 * (Linux 5.14) a read of each page faults it in. */
static void populate(void *base, size_t off, size_t end) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  uint8_t *a = (uint8_t *)base + (off & ~(pg - 1)), *b = (uint8_t *)base + end;
#ifdef MADV_POPULATE_WRITE
  if (madvise(a, (size_t)(b - a), MADV_POPULATE_WRITE) == 0) return;
#endif
  for (volatile uint8_t *q = a; q < b; q += pg)
    (void)*q;
}

void nx_cseg_back(nx_cseg *s, size_t bytes) {
  if (bytes <= s->backed || bytes <= NX_CSEG_BACK_MIN) return;
  size_t want = NX_MIN(s->slot, NX_MAX(bytes, 2 * s->backed));
  if (want == s->slot && !s->backed) { /* the whole of them, in one call */
    populate(s->data, 0, (size_t)s->n * 2 * s->slot);
  } else {
    for (size_t b = 0; b < (size_t)s->n * 2; b++)
      populate(s->data, b * s->slot + s->backed, b * s->slot + want);
  }
  s->backed = want;
}

/* Reads a word of every control block and broadcast entry, so that each
 * of their pages is touched by this process now (up to
 * NX_CSEG_POPULATE_RANKS ranks, as populate). On this paravirtualised
 * guest a process's first access to a shared page costs the host several
 * microseconds even once the guest mapped it, and the broadcasts' first
 * lap through the entries paid that: harness broadcast 8 B n = 2, the
 * first size of a run, 4 runs: 0.20-0.25 us a call, the same size again
 * later in the run 0.09-0.15; touched here, 0.10-0.14 the first time too.
 * Atomic loads of atomic words: the others may be using the entries. */
static void touch(const nx_cseg *s) {
  uint64_t x = 0;
  for (uint32_t r = 0; r < s->n; r++) {
    x += atomic_load_explicit(&s->ctl[r].entered, memory_order_relaxed);
    x += atomic_load_explicit(&s->ctl[r].ack[NX_CSEG_RING - 1], memory_order_relaxed);
    for (uint32_t i = 0; i < NX_CSEG_BDEPTH; i++)
      x += atomic_load_explicit(&nx_cseg_bentry(s, r, i)->seq, memory_order_relaxed);
  }
  __asm__ volatile("" : : "r"(x)); /* (kept) */
}

static nx_cseg *wrap(void *base, uint32_t n, uint32_t me, uint64_t attempt) {
  nx_cseg *s = nx_calloc(1, sizeof *s);
  if (!s) return NULL;
  populate(base, 0, data_off(n)); /* control blocks */
  s->base = base;
  s->size = seg_size(n);
  s->n = n;
  s->me = me;
  s->slot = nx_cseg_slot(n);
  s->attempt = attempt;
  s->ctl = (nx_cseg_ctl *)((uint8_t *)base + CSEG_CTL);
  s->data = (uint8_t *)base + data_off(n);
  s->bring = (uint8_t *)base + bring_off(n);
  /* up to NX_CSEG_POPULATE_RANKS ranks, the broadcast entries too, and
   * this process's first access to both (the data buffers stay backed as
   * they are written) */
  if (n <= NX_CSEG_POPULATE_RANKS) {
    populate(base, bring_off(n), seg_size(n));
    touch(s);
  }
  return s;
}

int nx_cseg_create(uint64_t comm_id, uint32_t n, uint64_t attempt, int *fd, nx_cseg **out) {
  *out = NULL;
  *fd = memfd_create("nexar-cseg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (*fd < 0)
    return nx_fail(NEXAR_ERR_IO, "collective segment: memfd_create: %s", strerror(errno));
  void *base = NULL;
  size_t size = seg_size(n);
  if (ftruncate(*fd, (off_t)size) ||
      fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) ||
      !(base = nx_shm_map(*fd, size, 0))) {
    int rc = nx_fail(NEXAR_ERR_IO, "collective segment of %zu bytes: %s", size, strerror(errno));
    close(*fd);
    *fd = -1;
    return rc;
  }
  cseg_hdr h = {CSEG_MAGIC, comm_id, attempt, n, (uint32_t)nx_cseg_slot(n)};
  memcpy(base, &h, sizeof h);
  *out = wrap(base, n, 0, attempt);
  if (!*out) {
    nx_shm_unmap(base);
    close(*fd);
    *fd = -1;
    return nx_fail(NEXAR_ERR_NOMEM, "collective segment");
  }
  return 0;
}

int nx_cseg_offer(nx_comm *c, uint32_t peer, uint64_t attempt, int fd) {
  nx_ep *ep = c->ep;
  nx_frame f = {0};
  f.kind = NX_KIND_LANE;
  f.status = NX_LANE_CSEG;
  f.comm_id = c->id;
  f.tag = attempt;
  pthread_mutex_lock(&ep->mu);
  nx_peer *p = ep->peers[peer];
  f.src = ep->rank;
  /* sent, or kept and retried by the progress passes while its queue is full */
  int rc = p->lane_ok && p->state == NX_PEER_UP ? nx_lane_send_ctl_owed_locked(ep, p, &f, fd) : -1;
  pthread_mutex_unlock(&ep->mu);
  return rc;
}

void nx_cseg_on_offer_locked(nx_ep *ep, nx_peer *p, uint64_t comm_id, uint64_t attempt, int fd) {
  nx_comm *c = nx_comm_find(ep, comm_id);
  void *base = NULL;
  struct stat st;
  int need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, seals = fcntl(fd, F_GET_SEALS);
  if (!c || c->size < 2 || c->members[0] != p->rank || c->rank == 0) goto refuse;
  size_t size = seg_size(c->size);
  if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size || seals < 0 ||
      (seals & need) != need || !(base = nx_shm_map(fd, size, 0)))
    goto refuse;
  cseg_hdr h;
  memcpy(&h, base, sizeof h);
  if (h.magic != CSEG_MAGIC || h.comm_id != comm_id || h.attempt != attempt || h.n != c->size ||
      h.slot != nx_cseg_slot(c->size))
    goto refuse;
  nx_cseg *s = wrap(base, c->size, c->rank, attempt);
  if (!s) goto refuse;
  nx_cseg_free(c->cseg_offer); /* an older attempt's */
  c->cseg_offer = s;
  close(fd);
  return;
refuse:
  NX_WARN("collective segment from rank %u for comm %llu refused", p->rank,
          (unsigned long long)comm_id);
  p->st.shm_dropped++;
  ep->shm_dropped++;
  if (base) nx_shm_unmap(base);
  close(fd);
}

void nx_cseg_free(nx_cseg *s) {
  if (!s) return;
  nx_shm_unmap(s->base);
  free(s->pid);
  free(s);
}

int nx_cseg_read(pid_t pid, void *to, uint64_t from, size_t len) {
  struct iovec l = {to, len}, r = {(void *)(uintptr_t)from, len};
  if (!nx_vm_read(pid, &l, 1, &r, 1, len)) return 0;
  int e = errno;
  return nx_fail(e == ESRCH ? NEXAR_ERR_PEER_LOST : NEXAR_ERR_PROTOCOL,
                 "single-copy read of %zu bytes from process %d: %s", len, (int)pid, strerror(e));
}

/* ---------------------------------------------------------- publishing */

static long futex(_Atomic uint32_t *w, int op, uint32_t val, const struct timespec *ts) {
  return syscall(SYS_futex, (uint32_t *)w, op, val, ts, NULL, 0);
}

/* After a release store of the word it announces. A sleeper counts itself
 * in sleepers (a read-modify-write: seen at once), then keeps looking at the
 * words for NX_CSEG_GRACE_NS before it sleeps. Our load of sleepers may pass
 * our store (no fence: a seq_cst store costs a stall on the line's transfer,
 * the largest cost of a small collective), but only while that store waits
 * in this CPU's store buffer, which drains within far less than the grace:
 * so either we see the sleeper counted, or it sees our store before it
 * sleeps. Were the drain ever slower, the sleep ends within a nap anyway
 * (NX_CSEG_NAP_MIN_NS at first).
 * With nobody counted there is nothing to do (no read-modify-write on the
 * common path). */
static void bell(nx_cseg_ctl *me) {
  if (!atomic_load_explicit(&me->sleepers, memory_order_relaxed)) return;
  atomic_fetch_add(&me->gen, 1);
  futex(&me->gen, FUTEX_WAKE, INT_MAX, NULL);
}

/* the store every waiter watches: release, see bell */
#define announce(w, v) atomic_store_explicit(w, v, memory_order_release)

void nx_cseg_arrive(nx_cseg *s, uint64_t seq, const nx_cseg_sig *sig) {
  nx_cseg_ctl *me = &s->ctl[s->me];
  /* readers of seq - 4 set their bits before they began seq - 3, which we
   * waited for (step 1) */
  atomic_store_explicit(&me->ack[seq % NX_CSEG_RING], 0, memory_order_relaxed);
  me->arr[seq % NX_CSEG_RING].sig = *sig;
  s->last_arrive[seq & 1] = seq + 1;
  announce(&me->arr[seq % NX_CSEG_RING].arrive, seq + 1);
  bell(me);
}

void nx_cseg_mark_msg(nx_cseg *s, uint64_t seq) {
  nx_cseg_ctl *me = &s->ctl[s->me];
  announce(&me->msg, seq + 1);
  bell(me);
}

void nx_cseg_enter(nx_cseg *s, uint64_t seq) {
  nx_cseg_ctl *me = &s->ctl[s->me];
  announce(&me->entered, seq + 1);
  bell(me);
}

void nx_cseg_leave(nx_cseg *s, uint64_t seq) {
  nx_cseg_ctl *me = &s->ctl[s->me];
  announce(&me->left, seq + 1);
  bell(me);
}

void nx_cseg_stream_begin(nx_cseg *s, uint64_t seq) {
  nx_cseg_ctl *me = &s->ctl[s->me];
  atomic_store_explicit(&me->stream[seq & 1], 0, memory_order_relaxed);
  atomic_store_explicit(&me->sread[seq & 1], 0, memory_order_relaxed);
}

void nx_cseg_stream(nx_cseg *s, int read, uint64_t seq, uint32_t pieces) {
  nx_cseg_ctl *me = &s->ctl[s->me];
  announce(read ? &me->sread[seq & 1] : &me->stream[seq & 1], pieces);
  bell(me);
}

int nx_cseg_arrival(uint64_t a, uint64_t msg, uint64_t e0, uint64_t e1, uint64_t seq) {
  if (a == seq + 1) return 1;
  /* arriving later takes having begun that later one, which it stores first */
  if (a > seq + 1) return e1 >= a ? 2 : NEXAR_ERR_PROTOCOL;
  /* not arrived, yet at seq by messages, or past it: it took another path */
  return msg >= seq + 1 || e0 >= seq + 2 ? 2 : 0;
}

int nx_cseg_bentry_state(uint64_t held, uint64_t a, uint64_t msg, uint64_t e0, uint64_t e1,
                         uint64_t seq) {
  if (held == seq + 1) return 1;
  /* a later broadcast in seq's entry: the root did not write seq there (it
   * keeps the entry until we begin seq + 1), and began that later one first */
  if (held > seq + 1) return e1 >= held ? 2 : NEXAR_ERR_PROTOCOL;
  if (a == seq + 1) return 2; /* it took the buffers: other arguments */
  if (a > seq + 1 && e1 < a) return NEXAR_ERR_PROTOCOL;
  return msg >= seq + 1 || e0 >= seq + 2 ? 2 : 0;
}

void nx_cseg_bpublish(nx_cseg *s, uint64_t seq, const nx_cseg_sig *sig, const void *data,
                      size_t len) {
  nx_cseg_bent *e = nx_cseg_bentry(s, s->me, seq);
  atomic_store_explicit(&e->ack, 0, memory_order_relaxed);
  e->sig = *sig;
  if (len) memcpy(e->data, data, len);
  s->bheld[seq % NX_CSEG_BDEPTH] = seq + 1;
  announce(&e->seq, seq + 1);
  bell(&s->ctl[s->me]);
}

/* -------------------------------------------------------------- waiting */

int nx_cseg_wait(nx_cseg *s, nx_coll *k, int (*pred)(void *arg, uint32_t *who), void *arg,
                 uint64_t extra_ns, uint64_t gap_ns, uint32_t timeout_ms, const char *what,
                 const char *step) {
  uint32_t who = 0;
  int rc = pred(arg, &who);
  if (rc) return rc < 0 ? rc : 0;
  nx_ep *ep = nx_coll_client(k)->ep;
  int yield;
  uint64_t spin_ns = nx_ep_spin_ns(ep, &yield) + extra_ns, spin_until = 0, deadline = 0;
  uint64_t nap_ns = NX_CSEG_NAP_MIN_NS; /* the next sleep's bound (cseg.h) */
  if (yield) gap_ns = 0;                /* the yields space the looks */
  for (uint32_t pass = 1;; pass++) {
    int spin = 1;
    uint64_t now = 0;
    /* the clock from here (at every pass where passes are gap_ns long):
     * most waits end sooner */
    if ((pass & 63) == 0 || gap_ns) {
      now = nx_now_ns();
      if (!spin_until) {
        spin_until = now + spin_ns;
        deadline = timeout_ms ? now + (uint64_t)timeout_ms * 1000000ull : UINT64_MAX;
      }
      if ((rc = nx_coll_failed(k))) return rc;
      if (now >= deadline)
        return nx_fail(NEXAR_ERR_TIMEOUT,
                       "%s #%llu on comm %llu: no word from rank %u in %u ms (waiting for %s "
                       "in the shared-memory segment)",
                       what, (unsigned long long)nx_coll_seq(k),
                       (unsigned long long)nx_coll_client(k)->id, who, timeout_ms, step);
      spin = now < spin_until;
      /* The scheduler may have put the rank we wait for on our CPU (a
       * woken sleeper goes where its waker ran): spinning on would keep it
       * off until the spin ends. A yield now and then hands it the CPU,
       * and costs one system call when nothing else wants it. Not when
       * the ranks are bound apart (core/cpubind.h): that cannot happen,
       * and a wait that ends during the call ends a system call late
       * (about 1 us on this paravirtualised guest). */
      if (spin && !yield && (pass & 63) == 0 && !nx_cpu_bound_alone()) sched_yield();
    }
    if (spin) {
      if (yield)
        sched_yield();
      else
        do
          nx_cpu_relax();
        while (gap_ns && nx_now_ns() - now < gap_ns);
    } else { /* sleep on the doorbell of the rank we wait for (nap_ns at most) */
      nx_cseg_ctl *w = &s->ctl[who < s->n ? who : 0];
      atomic_fetch_add(&w->sleepers, 1); /* seq_cst: before pred's loads */
      /* the grace bell relies on: a store its writer made before it could
       * see us counted is visible by its end */
      uint64_t grace = nx_now_ns() + NX_CSEG_GRACE_NS;
      while (!(rc = pred(arg, &who)) && nx_now_ns() < grace)
        yield ? sched_yield() : nx_cpu_relax();
      uint32_t g = atomic_load(&w->gen);
      if (!rc && !(rc = pred(arg, &who))) {
        uint64_t left = deadline - NX_MIN(deadline, nx_now_ns()), nap = NX_MIN(nap_ns, left);
        struct timespec ts = {(time_t)(nap / 1000000000ull), (long)(nap % 1000000000ull)};
        if (futex(&w->gen, FUTEX_WAIT, g, &ts) && errno == ETIMEDOUT)
          nap_ns = NX_MIN(2 * nap_ns, NX_CSEG_NAP_MAX_NS); /* nobody rang: look less often */
      }
      atomic_fetch_sub(&w->sleepers, 1);
      if (rc) return rc < 0 ? rc : 0;
      pass |= 63; /* check failures and the deadline after every sleep */
    }
    if ((rc = pred(arg, &who))) return rc < 0 ? rc : 0;
  }
}
