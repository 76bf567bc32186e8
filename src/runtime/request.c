/* Request completion and waiting. A thread waiting on a network request
 * drives the endpoint itself (progress under the endpoint lock, then sleep in
 * epoll on the socket), so a reply wakes it directly; other requests (pool
 * work) are waited on a condvar. */
#include "runtime/request.h"
#include "runtime/devcopy.h"

#include <errno.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

nexar_request *nx_req_new(void) {
  nexar_request *r = malloc(sizeof *r);
  if (r) nx_req_init(r);
  return r;
}

void nx_req_init(nexar_request *r) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->cv, &ca);
  pthread_condattr_destroy(&ca);
  atomic_store(&r->progress_ns, nx_now_ns());
  r->magic = NX_REQ_LIVE;
}

void nx_req_check(const nexar_request *r, const char *who) {
  if (r->magic == NX_REQ_LIVE) return;
  fprintf(stderr, "%s: request already completed and freed (double wait)\n", who);
  abort();
}

void nx_req_complete(nexar_request *r, int rc, const char *errtext) {
  pthread_mutex_lock(&r->mu);
  if (!atomic_load(&r->done)) {
    r->rc = rc;
    if (rc && errtext) r->errtext = strdup(errtext);
    atomic_store_explicit(&r->done, 1, memory_order_release);
    pthread_cond_broadcast(&r->cv);
    if (r->on_done) r->on_done(r->on_done_arg);
    /* a waiter sleeping in epoll (wait_driving) is woken through the endpoint */
    if (r->ep && atomic_load(&r->waiting) && !pthread_equal(r->waiter, pthread_self())) {
      uint64_t one = 1;
      ssize_t k = write(r->ep->wfd, &one, sizeof one);
      (void)k;
    }
  }
  pthread_mutex_unlock(&r->mu);
}

void nx_req_free(nexar_request *r) {
  if (!r) return;
  nx_req_check(r, "nexar_wait");
  nx_req_fini(r);
  free(r);
}

void nx_req_fini(nexar_request *r) {
  /* the completing thread may still be inside nx_req_complete's unlock */
  pthread_mutex_lock(&r->mu);
  pthread_mutex_unlock(&r->mu);
  if (r->on_free) r->on_free(r);
  if (r->dev_host) nx_dev_host_free(r->dev_ad, r->dev_host);
  free(r->dev_iov);
  free(r->errtext);
  free(r->iov_copy);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  *(volatile uint32_t *)&r->magic = NX_REQ_FREED; /* volatile: not a dead store before free */
}

/* Gives up on a request that made no progress: detaches it from the engine
 * under ep->mu so no buffer of it is touched afterwards. */
const char *nx_req_what(nexar_request *r) {
  if (r->what[0]) return r->what;
  if (r->w_op)
    snprintf(r->what, sizeof r->what, "%s #%llu on comm %llu: %s rank %u (round %u, segment %u)",
             r->w_op, (unsigned long long)r->w_seq, (unsigned long long)r->w_comm, r->w_verb,
             r->peer, (unsigned)(r->w_tag >> 32), (unsigned)(r->w_tag & 0xffffffffu));
  else if (r->w_verb)
    snprintf(r->what, sizeof r->what, "%s rank %u tag %llu on comm %llu", r->w_verb, r->peer,
             (unsigned long long)r->w_tag, (unsigned long long)r->w_comm);
  else
    snprintf(r->what, sizeof r->what, "operation");
  return r->what;
}

int nx_req_abandon_locked(nx_ep *ep, nexar_request *r, int rc, const char *why) {
  if (atomic_load(&r->done)) return 1;
  if (r->kind == NX_REQ_SEND && r->rflow) { /* the flow stops reading the buffer now */
    nx_relay_cancel_locked(ep, r, rc, why);
    return 1;
  }
  if (r->kind == NX_REQ_SEND && (r->rndv || r->tx)) {
    snprintf(r->what, sizeof r->what, "%s", why);
    if (r->rndv)
      nx_rndv_cancel_locked(ep, r);
    else
      nx_tx_cancel_locked(ep, r->tx, rc);
    return atomic_load(&r->done);
  }
  if (r->kind == NX_REQ_RECV && r->recv.reading) return 0;
  if (r->kind == NX_REQ_RECV) nx_match_cancel(ep, &r->recv);
  nx_req_complete(r, rc, why);
  return 1;
}

static void req_timeout(nexar_request *r) {
  char msg[300];
  snprintf(msg, sizeof msg, "%s: no progress for %u ms", nx_req_what(r), r->timeout_ms);
  if (!r->ep) {
    nx_req_complete(r, NEXAR_ERR_TIMEOUT, msg);
    return;
  }
  pthread_mutex_lock(&r->ep->mu);
  if (r->kind == NX_REQ_RECV && r->recv.reading)
    atomic_store(&r->progress_ns, nx_now_ns()); /* a copy is running: it is progress */
  else if (!nx_req_abandon_locked(r->ep, r, NEXAR_ERR_TIMEOUT, msg))
    r->timeout_ms = 0; /* it completes when its buffer is released */
  pthread_mutex_unlock(&r->ep->mu);
}

/* Returns 1 once r is done or timed out, after checking the no-progress limit. */
int nx_req_check_deadline(nexar_request *r, uint64_t now, uint64_t *wake) {
  if (atomic_load_explicit(&r->done, memory_order_acquire)) return 1;
  if (!r->timeout_ms) return 0;
  uint64_t dl = atomic_load(&r->progress_ns) + (uint64_t)r->timeout_ms * 1000000ull;
  if (now >= dl) {
    req_timeout(r);
    return atomic_load(&r->done);
  }
  if (dl < *wake) *wake = dl;
  return 0;
}

/* How long wait_driving polls before it sleeps: the engine's spin, and for
 * a receive the time its bytes take to come (the peer copies them, after
 * copying out what we sent it, at some GB/s): a reply of 256 KiB takes
 * longer than the spin, and a sleep then costs a wake-up per message. Not
 * above NX_RNDV_INLINE_MAX without shared-memory rings: that copy runs on a
 * worker thread of this process, which a longer spin would keep off the
 * CPU; with rings, a same-host message streams through them, copied by
 * this very wait (4 MiB ping-pong slept and was woken by doorbells, 7
 * context switches a round trip). A send that waits is a rendezvous, its
 * reader's copy in the reader's process: up to NX_SPIN_SEND_MAX bytes of
 * it. */
static uint64_t spin_for(nx_ep *ep, const nexar_request *r, int *yield) {
  uint64_t ns = nx_ep_spin_ns(ep, yield);
  int rings = atomic_load_explicit(&ep->shm_all, memory_order_relaxed) != NULL;
  int p2p = r->kind == NX_REQ_RECV && r->recv.key.kind == NX_KIND_P2P;
  /* as recv_now's poll (engine.h, NX_RECV_SPIN_NS): a sleep there starts
   * a cascade of doorbells (nexar_sendrecv 8 B n = 2, 100 batches of 2000
   * exchanges: the main thread slept 199-383 times, with this 8-16) */
  if (p2p && rings && r->recv.len <= NX_RNDV_INLINE_MAX) ns = nx_ep_recv_span_ns(ep, ns, *yield);
  if (r->kind == NX_REQ_RECV && (r->recv.len <= NX_RNDV_INLINE_MAX || (p2p && rings)))
    ns += nx_spin_for_bytes(NX_MIN(r->recv.len, NX_SPIN_SEND_MAX));
  else if (r->kind == NX_REQ_SEND)
    ns += nx_spin_for_bytes(NX_MIN(r->send_len, NX_SPIN_SEND_MAX));
  return ns;
}

/* Waits by driving the endpoint ourselves: progress under the endpoint lock,
 * then sleep in epoll on the UDP socket (not on a condvar), so the kernel
 * wakes this thread directly when the reply lands. While any thread waits
 * this way, the progress thread leaves the socket alone and only runs timers.
 * This removes the two thread hand-offs per message that dominate small-
 * message latency. Completions made by other threads poke ep->wfd. */
static void wait_driving(nexar_request *r, nx_ep *ep) {
  atomic_fetch_add(&ep->spinners, 1);
  nx_ep *prev_driver = nx_ep_set_driver(ep);
  r->waiter = pthread_self();
  atomic_store(&r->waiting, 1);
  int first = 1;
  int yield;
  uint64_t lnow = nx_now_ns(), t0 = lnow;
  uint64_t spin = spin_for(ep, r, &yield);
  uint64_t spin_until = lnow + (spin > r->spun_ns ? spin - r->spun_ns : 0);
  int light = 0; /* light passes since the last full one */
  while (!atomic_load_explicit(&r->done, memory_order_acquire)) {
    uint64_t next = UINT64_MAX;
    /* With shared-memory rings up, a reply from this host comes by a ring:
     * while spinning, most passes only look at the rings (memory reads, no
     * system call) and every NX_LIGHT_PASSES-th is a full one (sockets,
     * timers, deadlines), so traffic on the lane and QUIC waits a few
     * microseconds at most. They read the clock every fourth pass (it costs
     * as much as a look at every ring). */
    if (light < NX_LIGHT_PASSES && atomic_load_explicit(&ep->shm_all, memory_order_relaxed) &&
        ((light & 3) || (lnow = nx_now_ns()) < spin_until)) {
      light++;
      if (pthread_mutex_trylock(&ep->mu) == 0) {
        nx_shm_poll_locked(ep, NULL);
        pthread_mutex_unlock(&ep->mu);
      }
      if (nx_ep_run_deferred_at(ep, lnow)) {
        lnow = nx_now_ns();
        spin_until = lnow + spin_for(ep, r, &yield);
      }
      if (atomic_load_explicit(&r->done, memory_order_acquire)) break;
      /* with more ranks than CPUs every pass yields once the wait is a few
       * microseconds old (nx_wait_pause); otherwise the last light pass
       * does, as the segment's waits do (nx_cseg_wait: the peer may have
       * been put on our CPU) */
      if (light == NX_LIGHT_PASSES)
        sched_yield();
      else
        nx_wait_pause(yield, lnow - t0);
      continue;
    }
    light = 0;
    if (first) {
      /* epoll says at once whether something arrived: a progress pass now
       * would mostly cost an empty recvmmsg; timers due soon are honoured */
      next = atomic_load_explicit(&ep->next_due, memory_order_relaxed);
      first = 0;
    } else {
      next = nx_ep_try_progress(ep);
    }
    /* collective schedules released by what arrived advance here, on the
     * waiting thread; then look again at once */
    if (nx_ep_run_deferred(ep)) {
      /* what it sent is written already; epoll says at once whether an
       * answer is there (a progress pass now would mostly cost an empty
       * recvmmsg, as on entry) */
      first = 1;
      /* a step of a schedule went out: poll afresh for its answer, as a
       * wait for that message alone would */
      lnow = nx_now_ns();
      spin_until = lnow + spin_for(ep, r, &yield);
      if (atomic_load_explicit(&r->done, memory_order_acquire)) break;
      continue;
    }
    uint64_t tmin = nx_ep_next_timer(ep);
    if (tmin < next) next = tmin;
    uint64_t now = lnow = nx_now_ns();
    uint64_t wake = now + 1000000ull; /* at most 1 ms between looks */
    if (next < wake) wake = next;
    if (nx_req_check_deadline(r, now, &wake)) break;
    struct epoll_event ev[2];
    struct timespec ts = {0, wake > now ? (long)(wake - now) : 0};
    /* a reply often lands within microseconds: poll briefly before sleeping,
     * which saves the wake-up of a sleeping thread on the reply's path */
    if (now < spin_until) ts.tv_nsec = 0;
    int ready = 0;
    void *tok = ts.tv_nsec ? nx_shm_sleep_begin(ep, &ready) : NULL;
    if (ready) ts.tv_nsec = 0; /* a shared-memory ring has data: no sleep */
    int n = epoll_pwait2(ep->epfd_wait, ev, 2, &ts, NULL);
    nx_shm_sleep_end(tok);
    if (n == 0 && yield && now < spin_until) sched_yield();
    for (int i = 0; i < n; i++)
      if (ev[i].data.u32 == 3) {
        uint64_t v;
        ssize_t k = read(ep->wfd, &v, sizeof v);
        (void)k;
      }
  }
  atomic_store(&r->waiting, 0);
  nx_ep_set_driver(prev_driver);
  /* The progress thread notices within NX_DRIVER_POLL_NS that nobody drives
   * any more and watches the socket again; waking it here on every wait
   * would cost a hand-off per message, which is what this avoids. */
  atomic_store(&ep->last_driver_ns, lnow); /* read within the last few passes */
  atomic_fetch_sub(&ep->spinners, 1);
}

/* A device receive's copy to the device, once (devcopy.h). */
static void dev_copy_in(nexar_request *r) {
  /* set only when the request is made: most never take the exchange */
  if (!atomic_load_explicit(&r->dev_in, memory_order_relaxed) || !atomic_exchange(&r->dev_in, 0) ||
      r->rc)
    return;
  uint64_t left = r->recv.got;
  const uint8_t *h = r->dev_host;
  for (size_t i = 0; i < r->dev_niov && left; i++) {
    size_t n = r->dev_iov[i].len < left ? r->dev_iov[i].len : (size_t)left;
    int rc = nx_dev_copy(r->dev_ad, 1, r->dev_iov[i].base, h, n, r->dev_seg, "recv");
    if (rc) {
      r->rc = rc;
      free(r->errtext);
      r->errtext = strdup(nexar_last_error());
      return;
    }
    h += n;
    left -= n;
  }
}

int nx_req_wait(nexar_request *r) {
  /* A finished request never touches its endpoint again: it may be waited
   * after nexar_client_del freed it (the API allows that). */
  if (r->ep && !atomic_load_explicit(&r->done, memory_order_acquire)) wait_driving(r, r->ep);
  while (!atomic_load_explicit(&r->done, memory_order_acquire)) {
    uint64_t now = nx_now_ns();
    uint64_t wake = now + 50000000ull; /* re-check deadlines every 50 ms */
    if (r->timeout_ms) {
      uint64_t dl = atomic_load(&r->progress_ns) + (uint64_t)r->timeout_ms * 1000000ull;
      if (now >= dl) {
        req_timeout(r);
        continue;
      }
      if (dl < wake) wake = dl;
    }
    struct timespec ts = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
    pthread_mutex_lock(&r->mu);
    if (!atomic_load(&r->done)) pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    pthread_mutex_unlock(&r->mu);
  }
  dev_copy_in(r);
  if (r->rc) nx_set_error_text(r->errtext ? r->errtext : nexar_strerror(r->rc));
  return r->rc;
}

int nexar_wait(nexar_request *req) {
  if (!req) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "wait: NULL request");
  nx_req_check(req, "nexar_wait");
  int rc = nx_req_wait(req);
  nx_req_free(req);
  return rc;
}

int nexar_test(nexar_request *req, int *done) {
  if (!req || !done) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "test: NULL argument");
  nx_req_check(req, "nexar_test");
  *done = atomic_load_explicit(&req->done, memory_order_acquire);
  if (!*done && req->timeout_ms &&
      nx_now_ns() >= atomic_load(&req->progress_ns) + (uint64_t)req->timeout_ms * 1000000ull) {
    req_timeout(req);
    *done = 1;
  }
  if (*done) dev_copy_in(req);
  return 0;
}

int nexar_wait_all(nexar_request **reqs, size_t n) {
  if (!reqs && n) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "wait_all: NULL array");
  int first = 0;
  char msg[512] = "";
  for (size_t i = 0; i < n; i++) {
    if (!reqs[i]) continue;
    nx_req_check(reqs[i], "nexar_wait_all");
    int rc = nx_req_wait(reqs[i]);
    if (rc && !first) {
      first = rc;
      snprintf(msg, sizeof msg, "%s", nexar_last_error());
    }
    nx_req_free(reqs[i]);
    reqs[i] = NULL;
  }
  if (first) nx_set_error_text(msg);
  return first;
}
