/* Point-to-point: tagged send/recv (blocking, non-blocking, iov) and probe. */
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include "core/ring.h"
#include "runtime/comm.h"
#include "runtime/devcopy.h"
#include "runtime/request.h"

static int check_iov(const nexar_iovec *iov, size_t n, const char *op, uint64_t *total) {
  if (n && !iov) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: NULL iov", op);
  uint64_t t = 0;
  for (size_t i = 0; i < n; i++) {
    if (iov[i].len && !iov[i].base)
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: iov[%zu] has a NULL base", op, i);
    t += iov[i].len;
  }
  *total = t;
  return 0;
}

/* With an adapter, p2p buffers are device memory: a message is staged whole
 * in host memory (the adapter's pinned memory when it has some), copied
 * out in segments of NEXAR_DEVICE_SEGMENT_BYTES before it is sent, or
 * copied in when the receive is waited (request.c). The staging is what
 * QUIC, the same-host rendezvous and the TCP bulk path read and write. */
static int dev_stage_out(nexar_client *c, const nexar_iovec *iov, size_t n, uint64_t total,
                         void **host) {
  const nexar_device_adapter *ad = c->cfg.adapter;
  *host = nx_dev_host_alloc(ad, (size_t)total);
  if (!*host)
    return nx_fail(NEXAR_ERR_NOMEM, "send: %llu bytes of device staging",
                   (unsigned long long)total);
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    int rc = nx_dev_copy(ad, 0, (char *)*host + off, iov[i].base, iov[i].len,
                         c->ep->knobs.device_segment_bytes, "send");
    if (rc) {
      nx_dev_host_free(ad, *host);
      *host = NULL;
      return rc;
    }
    off += iov[i].len;
  }
  return 0;
}

/* log: a blocking call's operation log entry, begun under the lock this
 * takes anyway (NULL: none, a non-blocking call). */
static int start_send(nexar_client *c, const nexar_iovec *iov, size_t n, uint32_t dest,
                      uint32_t tag, nexar_request **out, uint64_t *log) {
  *out = NULL;
  int rc = nx_comm_check_peer(c, "send to", dest);
  if (rc) return rc;
  uint64_t total = 0; /* set by check_iov; gcc -O3 cannot see it */
  if ((rc = check_iov(iov, n, "send", &total))) return rc;
  if (dest >= c->size)
    return nx_fail(NEXAR_ERR_INVALID_RANK, "send to rank %u: comm %llu has %u ranks", dest,
                   (unsigned long long)c->id, c->size);
  void *host = NULL;
  nexar_iovec hv;
  if (c->cfg.adapter && total) {
    if ((rc = dev_stage_out(c, iov, n, total, &host))) return rc;
    hv = (nexar_iovec){host, (size_t)total};
    iov = &hv;
    n = 1;
  }
  nexar_request *r = nx_req_new();
  if (!r) {
    if (host) nx_dev_host_free(c->cfg.adapter, host);
    return nx_fail(NEXAR_ERR_NOMEM, "send request");
  }
  r->dev_ad = c->cfg.adapter;
  r->dev_host = host;
  r->kind = NX_REQ_SEND;
  r->send_len = total;
  r->ep = c->ep;
  r->peer = dest;
  r->timeout_ms = c->cfg.collective_timeout_ms;
  r->w_verb = "send to";
  r->w_tag = tag;
  r->w_comm = c->id;
  nx_frame f = {0};
  f.kind = NX_KIND_P2P;
  f.comm_id = c->id;
  f.tag = tag;
  pthread_mutex_lock(&c->ep->mu);
  if ((rc = nx_comm_check_peer_locked(c, "send to", dest)))
    ;
  else if (nx_comm_is_dead_locked(c, dest))
    rc = nx_fail(NEXAR_ERR_PEER_LOST, "send to rank %u on comm %llu: rank %u is failed on it", dest,
                 (unsigned long long)c->id, dest);
  if (rc == NEXAR_ERR_PEER_LOST)
    nx_comm_lost_locked(c, nexar_last_error());
  else if (!rc)
    rc = nx_ep_send_locked(c->ep, c->members[dest], &f, iov, n, r, NULL);
  if (!rc && log) *log = nx_oplog_begin(&c->log, 0, "send", total, dest, tag);
  pthread_mutex_unlock(&c->ep->mu);
  if (rc) {
    nx_req_free(r);
    return rc;
  }
  *out = r;
  return 0;
}

/* A request start_* made: in the caller's memory (mem), or allocated. */
static void release(nexar_request *r, nexar_request *mem) {
  if (r == mem)
    nx_req_fini(r);
  else
    nx_req_free(r);
}

/* mem: where a blocking call keeps its request (NULL: allocate it). */
static int start_recv(nexar_client *c, const nexar_iovec *iov, size_t n, uint32_t src, uint32_t tag,
                      nexar_request **out, uint64_t *log, nexar_request *mem) {
  *out = NULL;
  int rc = nx_comm_check_peer(c, "recv from", src);
  if (rc) return rc;
  uint64_t total = 0; /* set by check_iov; gcc -O3 cannot see it */
  if ((rc = check_iov(iov, n, "recv", &total))) return rc;
  if (src >= c->size)
    return nx_fail(NEXAR_ERR_INVALID_RANK, "recv from rank %u: comm %llu has %u ranks", src,
                   (unsigned long long)c->id, c->size);
  nexar_request *r = mem;
  if (r)
    nx_req_init(r);
  else if (!(r = nx_req_new()))
    return nx_fail(NEXAR_ERR_NOMEM, "recv request");
  const nexar_device_adapter *ad = c->cfg.adapter;
  if (ad && total) {
    r->dev_ad = ad;
    r->dev_seg = c->ep->knobs.device_segment_bytes;
    r->dev_host = nx_dev_host_alloc(ad, (size_t)total);
    r->dev_iov = malloc(n * sizeof *iov);
    if (!r->dev_host || !r->dev_iov) {
      release(r, mem);
      return nx_fail(NEXAR_ERR_NOMEM, "recv: %llu bytes of device staging",
                     (unsigned long long)total);
    }
    memcpy(r->dev_iov, iov, n * sizeof *iov);
    r->dev_niov = n;
    r->recv.iov1 = (nexar_iovec){r->dev_host, (size_t)total};
    r->recv.iov = &r->recv.iov1;
    n = 1;
    atomic_store(&r->dev_in, 1);
  } else if (n == 1) {
    r->recv.iov1 = iov[0];
    r->recv.iov = &r->recv.iov1;
  } else if (n > 1) {
    r->iov_copy = malloc(n * sizeof *iov);
    if (!r->iov_copy) {
      release(r, mem);
      return nx_fail(NEXAR_ERR_NOMEM, "recv request");
    }
    memcpy(r->iov_copy, iov, n * sizeof *iov);
    r->recv.iov = r->iov_copy;
  }
  r->recv.niov = n;
  r->recv.len = total;
  r->recv.req = r;
  r->recv.key = (nx_key){.comm = c->id, .kind = NX_KIND_P2P, .src = c->members[src], .tag = tag};
  r->kind = NX_REQ_RECV;
  r->ep = c->ep;
  r->peer = src;
  r->timeout_ms = c->cfg.collective_timeout_ms;
  r->w_verb = "recv from";
  r->w_tag = tag;
  r->w_comm = c->id;
  nx_ep *ep = c->ep;
  pthread_mutex_lock(&ep->mu);
  rc = nx_comm_check_peer_locked(c, "recv from", src);
  if (!rc) rc = nx_match_post(ep, &r->recv);
  if (rc == 0 && !r->recv.done && !r->recv.msg) {
    nx_peer *p = ep->peers[c->members[src]];
    if (p->state == NX_PEER_DEAD) {
      nx_match_cancel(ep, &r->recv);
      rc = nx_fail(p->dead_code, "recv from rank %u tag %u: peer lost (%s)", src, tag, p->why);
    } else if (nx_comm_is_dead_locked(c, src)) {
      nx_match_cancel(ep, &r->recv);
      rc = nx_fail(NEXAR_ERR_PEER_LOST,
                   "recv from rank %u tag %u on comm %llu: rank %u is "
                   "failed on it",
                   src, tag, (unsigned long long)c->id, src);
    }
    if (rc == NEXAR_ERR_PEER_LOST) nx_comm_lost_locked(c, nexar_last_error());
  }
  if (!rc && log) *log = nx_oplog_begin(&c->log, 0, "recv", total, src, tag);
  pthread_mutex_unlock(&ep->mu);
  if (rc) {
    release(r, mem);
    return rc;
  }
  *out = r;
  return 0;
}

/* Waits for a blocking call and keeps the communicator's operation log. */
static int finish(nexar_client *c, int rc, nexar_request *r, uint64_t id, nexar_request *mem) {
  if (rc) return rc;
  rc = nx_req_wait(r); /* start_* succeeded, so r is set */
  nx_comm_log_end(c, id, rc, rc ? nexar_last_error() : NULL);
  release(r, mem);
  return rc;
}

/* A blocking send the shared-memory ring takes at once is complete when
 * copied: no request, one pass under the lock. 1 sent, 0 take the general
 * path (it checks and reports everything again), <0 an error. */
static int send_now(nexar_client *c, const nexar_iovec *iov, size_t n, uint32_t dest,
                    uint32_t tag) {
  uint64_t total = 0;
  if (!c || (n && !iov) || dest >= c->size || c->cfg.adapter) return 0;
  for (size_t i = 0; i < n; i++) {
    if (iov[i].len && !iov[i].base) return 0;
    total += iov[i].len;
  }
  nx_ep *ep = c->ep;
  nx_frame f = {0};
  f.kind = NX_KIND_P2P;
  f.comm_id = c->id;
  f.tag = tag;
  f.src = ep->rank;
  f.length = total;
  int rc = 0;
  pthread_mutex_lock(&ep->mu);
  uint32_t to = c->members[dest];
  if (to != ep->rank && !atomic_load(&c->aborted) && !atomic_load(&c->revoked) &&
      !nx_comm_is_dead_locked(c, dest) &&
      (rc = nx_shm_send_now_locked(ep, ep->peers[to], &f, iov, n, total)) == 1) {
    nx_oplog_done(&c->log, 0, "send", total, dest, tag);
  }
  pthread_mutex_unlock(&ep->mu);
  return rc;
}

int nexar_send_iov(nexar_client *c, const nexar_iovec *iov, size_t n, uint32_t dest, uint32_t tag) {
  int rc = send_now(c, iov, n, dest, tag);
  if (rc) return rc < 0 ? rc : 0;
  nexar_request *r = NULL;
  uint64_t id = 0;
  rc = start_send(c, iov, n, dest, tag, &r, &id);
  return finish(c, rc, r, id, NULL);
}

int nexar_send(nexar_client *c, const void *buf, size_t len, uint32_t dest, uint32_t tag) {
  nexar_iovec v = {(void *)buf, len};
  return nexar_send_iov(c, &v, 1, dest, tag);
}

int nexar_send_nb(nexar_client *c, const void *buf, size_t len, uint32_t dest, uint32_t tag,
                  nexar_request **req) {
  if (!req) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "send_nb: NULL request pointer");
  nexar_iovec v = {(void *)buf, len};
  return start_send(c, &v, 1, dest, tag, req, NULL);
}

enum { NOW_WAIT, NOW_DONE, NOW_GENERAL };

/* One look of recv_now, under ep->mu. */
static int recv_now_once(nexar_client *c, const nexar_iovec *iov, size_t n, uint32_t src,
                         uint32_t tag, uint64_t total, nx_ring_watch *ring, int *watched,
                         uint32_t *pull) {
  nx_ep *ep = c->ep;
  uint32_t from = c->members[src];
  if (from == ep->rank || atomic_load(&c->aborted) || atomic_load(&c->revoked) ||
      ep->nrevoked_live || nx_comm_is_dead_locked(c, src))
    return NOW_GENERAL;
  nx_peer *p = ep->peers[from];
  if (p->state != NX_PEER_UP || nx_shm_state_locked(p) < 2) return NOW_GENERAL;
  *watched = nx_shm_rx_watch_locked(p, ring, pull);
  nx_key k = {.comm = c->id, .kind = NX_KIND_P2P, .src = from, .tag = tag};
  /* MPI order: a queued message or an earlier receive for the key first */
  if (nx_match_peek(ep, &k, 0) || nx_match_posted(ep, &k)) return NOW_GENERAL;
  /* records of other keys go to matching in ring order, a drain's worth at
   * most per look; one of k's that is not ours to take (a rendezvous, a
   * length that differs) leaves the rest to the general path */
  int rc = 2;
  for (int i = 0; i < 64 && rc == 2; i++)
    rc = nx_shm_recv_now_locked(ep, p, &k, iov, n, total);
  if (rc < 0 || rc == 3) return NOW_GENERAL; /* (p dropped: the general path says so) */
  if (rc != 1) {
    nx_shm_poll_locked(ep, p); /* the other rings, as a waiting receive's pass */
    return NOW_WAIT;
  }
  nx_oplog_done(&c->log, 0, "recv", total, src, tag);
  return NOW_DONE;
}

/* A blocking receive whose message comes by a shared-memory ring is copied
 * from the ring into the buffer while the engine's spin lasts, with no
 * request (as send_now): a request's set-up, completion and teardown cost
 * more than the copy of a small message. Only while nothing queued or posted
 * could match first (MPI's order) and nothing is wrong; anything else, or a
 * spin that ends empty, takes the general path, which checks, reports,
 * posts and sleeps (*spun: the time polled, which it polls less). 1
 * received, 0 take the general path. */
static int recv_now(nexar_client *c, const nexar_iovec *iov, size_t n, uint32_t src, uint32_t tag,
                    uint64_t *spun) {
  *spun = 0;
  if (!c || (n && !iov) || src >= c->size || c->cfg.adapter) return 0;
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (iov[i].len && !iov[i].base) return 0;
    total += iov[i].len;
  }
  nx_ep *ep = c->ep;
  if (!atomic_load_explicit(&ep->shm_all, memory_order_relaxed)) return 0;
  /* the engine's spin, not the bytes' time; longer while every rank here
   * has a CPU (engine.h, NX_RECV_SPIN_NS) unless NEXAR_SPIN_US says. While
   * we are counted a spinner the progress thread leaves the sockets and
   * timers alone: every `spin` of the poll serves them (as wait_driving's
   * full passes do) */
  int yield;
  uint64_t spin = nx_ep_spin_ns(ep, &yield);
  uint64_t span = nx_ep_recv_span_ns(ep, spin, yield);
  uint64_t serve = 0; /* when the next serving pass is due */
  /* the clock from the 32nd pass (most messages come sooner); every pass
   * when yielding (a yield may take long, and costs more than the clock) */
  unsigned mask = yield ? 0u : 31u;
  uint64_t t0 = 0, now = 0, until = 0;
  nx_ring_watch ring; /* the peer's ring to us: where its next record starts */
  int watched = 0;    /* once a look found the ring */
  uint32_t pull = 0;  /* how much of that record to prefetch */
  int rc = NOW_WAIT, counted = 0;
  for (unsigned pass = 0;; pass++) {
    rc = NOW_WAIT;
    /* the next record's lines are fetched while we watch the ring's words,
     * not after them: the record's arrival then costs one transfer between
     * cores instead of two in a row (a prefetch neither faults nor binds).
     * As many as the last record took, if it was small (core/ring.h,
     * NX_RING_PULL_MAX), where it starts if it does not start over, and at
     * the ring's first byte, where a small one does once the ring is empty:
     * harness ping-pong 256 B n = 2, alternating runs, 0.58-0.66 ->
     * 0.51-0.56 us one-way (Open MPI's default 0.52-0.54). (The first
     * byte's lines as well since records announce themselves in place: 64
     * B median round trip 1087 -> 976 and 1112 -> 1104 cycles in two sets
     * of 8 alternating runs, the machine's noise as large.) */
    if (watched) {
      const uint8_t *next = ring.data + (ring.pos & ring.mask);
      for (uint32_t o = 0; o < pull; o += 64) {
        __builtin_prefetch(ring.data + o);
        if (o) __builtin_prefetch(next + o); /* (the first line is the look's) */
      }
      if (pull) __builtin_prefetch(next + pull - 1);
    }
    /* between full looks (every 8th pass) only the ring's control words are
     * read, without the lock: a pass then costs no locked instruction (and
     * reads no ring data: core/ring.h, nx_ring_watch) */
    int look = !watched || (pass & 7) == 0 || nx_ring_ready(ring.ctl);
    if (look && (pass == 0 ? pthread_mutex_lock(&ep->mu) : pthread_mutex_trylock(&ep->mu)) == 0) {
      rc = recv_now_once(c, iov, n, src, tag, total, &ring, &watched, &pull);
      pthread_mutex_unlock(&ep->mu);
    }
    /* collective schedules released by what arrived advance here, as in a
     * waiting receive (the progress thread leaves them to spinners) */
    if (rc == NOW_WAIT && look) nx_ep_run_deferred_at(ep, now);
    if (rc != NOW_WAIT || !spin) break; /* spin 0: one look */
    /* a spinner, as in wait_driving: the progress thread keeps off the
     * rings (it would sleep as their waiter, which makes every record ring
     * a doorbell, and take our message into the queue) */
    if (!counted) atomic_fetch_add(&ep->spinners, 1), counted = 1;
    if ((pass & mask) == mask) {
      now = nx_now_ns();
      if (!until) {
        t0 = now, until = now + span, serve = now + spin;
      } else if (now >= until) {
        break;
      } else if (now >= serve) {
        serve = now + spin;
        (void)nx_ep_try_progress(ep);
      }
    }
    nx_wait_pause(yield, now - t0);
  }
  /* (last_driver_ns stays: unlike wait_driving this reads no socket, so
   * the progress thread must go back to watching them at once) */
  if (counted) atomic_fetch_sub(&ep->spinners, 1);
  *spun = now - t0;
  return rc == NOW_DONE;
}

int nexar_recv_iov(nexar_client *c, const nexar_iovec *iov, size_t n, uint32_t src, uint32_t tag) {
  uint64_t spun;
  if (recv_now(c, iov, n, src, tag, &spun)) return 0;
  nexar_request mem, *r = NULL; /* a blocking receive's request lives here */
  uint64_t id = 0;
  int rc = start_recv(c, iov, n, src, tag, &r, &id, &mem);
  if (!rc) r->spun_ns = spun;
  return finish(c, rc, r, id, &mem);
}

int nexar_recv(nexar_client *c, void *buf, size_t len, uint32_t src, uint32_t tag) {
  nexar_iovec v = {buf, len};
  return nexar_recv_iov(c, &v, 1, src, tag);
}

int nexar_recv_nb(nexar_client *c, void *buf, size_t len, uint32_t src, uint32_t tag,
                  nexar_request **req) {
  if (!req) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "recv_nb: NULL request pointer");
  nexar_iovec v = {buf, len};
  return start_recv(c, &v, 1, src, tag, req, NULL, NULL);
}

/* Both posted before either is waited for, so two ranks exchanging (or a
 * ring) never wait on each other's send, however large. */
int nexar_sendrecv(nexar_client *c, const void *sbuf, size_t slen, uint32_t dest, uint32_t stag,
                   void *rbuf, size_t rlen, uint32_t src, uint32_t rtag) {
  if ((slen && !sbuf) || (rlen && !rbuf))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "sendrecv: %s buffer is NULL with length %zu",
                   slen && !sbuf ? "send" : "receive", slen && !sbuf ? slen : rlen);
  uintptr_t s = (uintptr_t)sbuf, r = (uintptr_t)rbuf;
  if (slen && rlen && s < r + rlen && r < s + slen)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "sendrecv: the send and receive buffers overlap");
  if (c && dest >= c->size) /* checked before the receive is posted */
    return nx_fail(NEXAR_ERR_INVALID_RANK, "sendrecv to rank %u: comm %llu has %u ranks", dest,
                   (unsigned long long)c->id, c->size);
  nexar_request *rr = NULL, *sr = NULL;
  nexar_iovec rv = {rbuf, rlen}, sv = {(void *)sbuf, slen};
  int rc = start_recv(c, &rv, 1, src, rtag, &rr, NULL, NULL);
  if (rc) return rc;
  rc = start_send(c, &sv, 1, dest, stag, &sr, NULL);
  if (rc) {
    /* nothing was sent: give the receive up (it may still match meanwhile) */
    char why[512];
    snprintf(why, sizeof why, "%s", nexar_last_error());
    pthread_mutex_lock(&c->ep->mu);
    nx_req_abandon_locked(c->ep, rr, rc, why);
    pthread_mutex_unlock(&c->ep->mu);
    nx_req_wait(rr);
    nx_req_free(rr);
    nx_set_error_text(why);
    return rc;
  }
  pthread_mutex_lock(&c->ep->mu);
  uint64_t id = nx_oplog_begin(&c->log, 0, "sendrecv", (uint64_t)slen + rlen, src, rtag);
  pthread_mutex_unlock(&c->ep->mu);
  int rrc = nx_req_wait(rr);
  char why[512] = "";
  if (rrc) snprintf(why, sizeof why, "sendrecv: %s", nexar_last_error());
  int src2 = nx_req_wait(sr); /* the send ends too: sbuf is the caller's again */
  if (!rrc && src2) snprintf(why, sizeof why, "sendrecv: %s", nexar_last_error());
  nx_req_free(rr);
  nx_req_free(sr);
  rc = rrc ? rrc : src2;
  nx_comm_log_end(c, id, rc, rc ? why : NULL);
  if (rc) nx_set_error_text(why);
  return rc;
}

static int probe(nexar_client *c, int any, uint32_t src, uint32_t tag, uint32_t *osrc,
                 size_t *len) {
  if (len) *len = 0; /* out-parameters are 0 on failure */
  if (osrc) *osrc = 0;
  int rc = nx_comm_check(c, "probe");
  if (rc) return rc;
  if (!len) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "probe: NULL length pointer");
  if (!any && src >= c->size)
    return nx_fail(NEXAR_ERR_INVALID_RANK, "probe rank %u: comm %llu has %u ranks", src,
                   (unsigned long long)c->id, c->size);
  nx_ep *ep = c->ep;
  nx_key k = {.comm = c->id, .kind = NX_KIND_P2P, .src = any ? 0 : c->members[src], .tag = tag};
  uint64_t t = c->cfg.collective_timeout_ms;
  uint64_t deadline = t ? nx_now_ns() + t * 1000000ull : 0;
  pthread_mutex_lock(&ep->mu);
  for (;;) {
    nx_msg *m = nx_match_peek(ep, &k, any);
    if (m) {
      *len = (size_t)m->f.length;
      if (osrc) *osrc = nx_comm_rank_of(c, m->f.src);
      break;
    }
    if (atomic_load(&c->aborted)) {
      rc = nx_fail(NEXAR_ERR_ABORTED, "probe on comm %llu: aborted", (unsigned long long)c->id);
      break;
    }
    if (atomic_load(&c->revoked)) {
      int dead = !any && nx_comm_is_dead_locked(c, src);
      rc = nx_fail(dead ? NEXAR_ERR_PEER_LOST : NEXAR_ERR_ABORTED,
                   "probe on comm %llu: revoked (%s)", (unsigned long long)c->id, c->revoke_why);
      break;
    }
    if (!any && ep->peers[k.src]->state == NX_PEER_DEAD) {
      rc = nx_fail(ep->peers[k.src]->dead_code, "probe rank %u tag %u: peer lost (%s)", src, tag,
                   ep->peers[k.src]->why);
      break;
    }
    uint64_t now = nx_now_ns();
    if (deadline && now >= deadline) {
      rc = any ? nx_fail(NEXAR_ERR_TIMEOUT, "probe_any tag %u on comm %llu: nothing for %llu ms",
                         tag, (unsigned long long)c->id, (unsigned long long)t)
               : nx_fail(NEXAR_ERR_TIMEOUT,
                         "probe rank %u tag %u on comm %llu: nothing for "
                         "%llu ms",
                         src, tag, (unsigned long long)c->id, (unsigned long long)t);
      break;
    }
    uint64_t w = now + 50000000ull;
    if (deadline && deadline < w) w = deadline;
    struct timespec ts = {(time_t)(w / 1000000000ull), (long)(w % 1000000000ull)};
    pthread_cond_timedwait(&ep->cv, &ep->mu, &ts);
  }
  pthread_mutex_unlock(&ep->mu);
  return rc;
}

int nexar_probe(nexar_client *c, uint32_t src, uint32_t tag, size_t *len) {
  return probe(c, 0, src, tag, NULL, len);
}

int nexar_probe_any(nexar_client *c, uint32_t tag, uint32_t *src, size_t *len) {
  if (!src) {
    if (len) *len = 0;
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "probe_any: NULL source pointer");
  }
  return probe(c, 1, 0, tag, src, len);
}
