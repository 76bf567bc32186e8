/* The endpoint and its progress thread: epoll over the UDP socket and an
 * eventfd, sub-millisecond timers, heartbeats, failure detection, the send
 * path and teardown. */
#include "runtime/engine.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/addr.h"
#include "core/config.h"
#include "core/cpubind.h"
#include "runtime/comm.h"
#include "runtime/quic_glue.h"
#include "runtime/request.h"
#include "runtime/rndv.h"

static void *progress_main(void *arg);
static int send_frame(nx_ep *ep, nx_peer *p, const nx_frame *fr, const nexar_iovec *iov,
                      size_t niov, nexar_request *req, nx_txmsg **out, void *give);

/* While application threads drive progress (or one is in a wait right now:
 * it reads the socket and runs the timers), the progress thread looks this
 * often whether they still do. 10 ms while a thread waits made an 8 B
 * ping-pong between two processes on 2 CPUs faster (3.3 -> 1.2 us: each
 * wake-up preempts a polling rank) but stalled work only this thread does:
 * device.procs under ASan timed out forming the mesh of a joiner. */
#define NX_DRIVER_POLL_NS 500000ull
#define NX_DRIVER_LINGER_NS 5000000ull

int nx_ep_new(nx_ep **out, const nexar_config *cfg, const char *bind_host, uint16_t port) {
  *out = NULL;
  nx_log_init();
  nx_ep *ep = nx_calloc(1, sizeof *ep);
  if (!ep) return nx_fail(NEXAR_ERR_NOMEM, "endpoint");
  int rc = nx_config_resolve(cfg, &ep->cfg);
  if (rc) {
    free(ep);
    return rc;
  }
  pthread_mutex_init(&ep->mu, NULL);
  pthread_mutex_init(&ep->work_mu, NULL);
  atomic_init(&ep->timer_min, UINT64_MAX);
  ep->agr_due = UINT64_MAX;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&ep->cv, &ca);
  pthread_condattr_destroy(&ca);
  ep->epfd = ep->evfd = ep->epfd_ctl = ep->epfd_wait = ep->wfd = -1;
  ep->bulk_lfd = ep->lane_fd = -1;
  atomic_init(&ep->refs, 1);
  ep->hb_interval_ns = (uint64_t)ep->cfg.heartbeat_interval_ms * 1000000ull;
  ep->hb_timeout_ns = (uint64_t)ep->cfg.heartbeat_timeout_ms * 1000000ull;
  ep->unexp_budget = ep->cfg.unexpected_budget_bytes;
  /* environment-only knobs, parsed and bounded by the table (core/knobs.c) */
  if ((rc = nx_knobs_from_env(&ep->knobs)) || (rc = nx_random(ep->shm_cookie, 16))) goto fail;
  const nx_knobs *k = &ep->knobs;
  if ((rc = nx_quic_glue_new(ep))) goto fail;
  ep->ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
  ep->spin_override = k->spin_us == NX_KNOB_AUTO ? -1 : (long)k->spin_us;
  ep->yield_ns = k->yield_us == NX_KNOB_AUTO ? NX_YIELD_NS : (uint64_t)k->yield_us * 1000ull;
  /* bench and test knobs of the inter-host bulk path (bench/README.md) */
  ep->bulk_tcp_local = k->bulk_tcp_local;
  ep->bulk_min = k->bulk_min_bytes != NX_KNOB_AUTO_SIZE ? k->bulk_min_bytes
                 : ep->cfg.encrypt_bulk                 ? NX_BULK_TLS_MIN
                                                        : NX_BULK_PLAIN_MIN;
  rc = nx_udp_open(&ep->udp, bind_host, port);
  if (rc) goto fail;
  nx_lane_open(ep);
  ep->epfd = epoll_create1(EPOLL_CLOEXEC);
  ep->epfd_ctl = epoll_create1(EPOLL_CLOEXEC);
  ep->epfd_wait = epoll_create1(EPOLL_CLOEXEC);
  ep->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ep->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (ep->epfd < 0 || ep->evfd < 0 || ep->epfd_ctl < 0 || ep->epfd_wait < 0 || ep->wfd < 0) {
    rc = nx_fail(NEXAR_ERR_IO, "endpoint: epoll/eventfd: %s", strerror(errno));
    goto fail;
  }
  struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 1};
  epoll_ctl(ep->epfd, EPOLL_CTL_ADD, ep->udp.fd, &ev);
  ev.data.u32 = 2;
  epoll_ctl(ep->epfd, EPOLL_CTL_ADD, ep->evfd, &ev);
  epoll_ctl(ep->epfd_ctl, EPOLL_CTL_ADD, ep->evfd, &ev);
  ev.data.u32 = 1;
  epoll_ctl(ep->epfd_wait, EPOLL_CTL_ADD, ep->udp.fd, &ev);
  ev.data.u32 = 3;
  epoll_ctl(ep->epfd_wait, EPOLL_CTL_ADD, ep->wfd, &ev);
  if (ep->lane_fd >= 0) { /* readable like the UDP socket: a progress step drains it */
    ev.data.u32 = 1;
    epoll_ctl(ep->epfd, EPOLL_CTL_ADD, ep->lane_fd, &ev);
    epoll_ctl(ep->epfd_wait, EPOLL_CTL_ADD, ep->lane_fd, &ev);
  }
  *out = ep;
  return 0;
fail:
  nx_quic_del(ep->quic);
  nx_udp_close(&ep->udp);
  nx_lane_close(ep);
  if (ep->epfd >= 0) close(ep->epfd);
  if (ep->epfd_ctl >= 0) close(ep->epfd_ctl);
  if (ep->epfd_wait >= 0) close(ep->epfd_wait);
  if (ep->wfd >= 0) close(ep->wfd);
  if (ep->evfd >= 0) close(ep->evfd);
  nx_config_release(&ep->cfg);
  pthread_mutex_destroy(&ep->mu);
  pthread_mutex_destroy(&ep->work_mu);
  pthread_cond_destroy(&ep->cv);
  free(ep);
  return rc;
}

/* Polling before sleeping pays off when every rank on this host has a CPU
 * of its own (measured: 64-byte round trip 41 -> 26 us with 2 processes on 2
 * cores), and costs when they share CPUs (the spinner delays the rank it
 * waits for). NEXAR_SPIN_US overrides the choice. */
uint64_t nx_ep_spin_ns(nx_ep *ep, int *yield) {
  *yield = 0;
  if (ep->spin_override >= 0) return (uint64_t)ep->spin_override * 1000ull;
  int local = 1 + atomic_load_explicit(&ep->local_peers, memory_order_relaxed);
  if (local <= ep->ncpu) return NX_SPIN_NS;
  /* more ranks than CPUs here: the reply needs a peer that waits for a CPU,
   * so polling spins by handing ours over (sched_yield), not by burning it */
  *yield = 1;
  return ep->yield_ns;
}

uint16_t nx_ep_port(const nx_ep *ep) {
  return nx_sockaddr_port((const struct sockaddr *)&ep->udp.local);
}

int nx_ep_start(nx_ep *ep, uint32_t rank, uint32_t world, const uint8_t cluster_id[16],
                gnutls_certificate_credentials_t creds, char (*addrs)[128]) {
  if (nx_ep_peers_alloc(ep, world)) return nx_fail(NEXAR_ERR_NOMEM, "endpoint peers");
  for (uint32_t j = 0; j < world; j++) {
    int rc = nx_ep_peer_init(ep, ep->peers[j], j, j == rank, addrs[j]);
    if (rc) return rc;
  }
  ep->rank = rank;
  ep->world = world;
  ep->route = (nx_route){.world = world, .me = rank};
  memcpy(ep->cluster_id, cluster_id, 16);
  int rrc = nx_relay_start(ep, creds); /* before ep owns creds: the caller frees them */
  if (rrc) return rrc;
  ep->creds = creds;
  nx_quic_start(ep->quic, creds, cluster_id, world);
  nx_log_set_rank(rank);
  int brc = nx_bulk_start(ep);
  if (brc) {
    ep->creds = NULL;
    return brc;
  }
  if (nx_thread_create(&ep->thr, NULL, progress_main, ep) != 0) {
    ep->creds = NULL;
    return nx_fail(NEXAR_ERR_IO, "cannot start the progress thread");
  }
  ep->thr_started = 1;
  return 0;
}

void nx_ep_wake(nx_ep *ep) {
  if (ep->wake_pending) return;
  ep->wake_pending = 1;
  uint64_t one = 1;
  ssize_t r = write(ep->evfd, &one, sizeof one);
  (void)r;
}

/* 1 while a connection this rank must dial has not been started. */
static int want_connect(nx_ep *ep) {
  if (ep->stop || !ep->peers || !ep->creds) return 0;
  for (uint32_t j = 0; j < ep->world; j++)
    if (nx_route_dials(&ep->route, ep->rank, j) && ep->peers[j]->state == NX_PEER_INIT) return 1;
  return 0;
}

int nx_ep_connect_mesh(nx_ep *ep, uint64_t deadline_ns) {
  pthread_mutex_lock(&ep->mu);
  nx_ep_wake(ep);
  int rc = 0;
  for (;;) {
    uint32_t missing = UINT32_MAX, dead = UINT32_MAX;
    for (uint32_t j = 0; j < ep->world; j++) {
      if (ep->peers[j]->departed) continue; /* it was up and has finished already */
      if (ep->peers[j]->state == NX_PEER_DEAD && dead == UINT32_MAX)
        dead = j;
      else if (ep->peers[j]->state != NX_PEER_UP && missing == UINT32_MAX)
        missing = j;
    }
    if (dead != UINT32_MAX) {
      rc = nx_fail(ep->peers[dead]->dead_code, "forming the mesh: rank %u at %s: %s", dead,
                   ep->peers[dead]->addrstr, ep->peers[dead]->why);
      break;
    }
    if (missing == UINT32_MAX) break;
    uint64_t now = nx_now_ns();
    if (deadline_ns && now >= deadline_ns) {
      rc = nx_quic_auth_why(ep->quic)[0]
               ? nx_fail(NEXAR_ERR_AUTH,
                         "forming the mesh: rank %u: no connection with rank %u "
                         "at %s: %s",
                         ep->rank, missing, ep->peers[missing]->addrstr, nx_quic_auth_why(ep->quic))
               : nx_fail(NEXAR_ERR_TIMEOUT,
                         "forming the mesh: rank %u: no authenticated connection with rank %u "
                         "at %s",
                         ep->rank, missing, ep->peers[missing]->addrstr);
      break;
    }
    uint64_t wake = now + 20000000ull;
    if (deadline_ns && deadline_ns < wake) wake = deadline_ns;
    struct timespec ts = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
    pthread_cond_timedwait(&ep->cv, &ep->mu, &ts);
  }
  pthread_mutex_unlock(&ep->mu);
  return rc;
}

/* ----------------------------------------------------------------- send */

int nx_ep_send_locked(nx_ep *ep, uint32_t dest, const nx_frame *f, const nexar_iovec *iov,
                      size_t niov, nexar_request *req, nx_txmsg **out) {
  if (out) *out = NULL;
  uint64_t len = 0;
  for (size_t i = 0; i < niov; i++)
    len += iov[i].len;
  nx_frame fr = *f;
  fr.src = ep->rank;
  fr.length = len;
  if (dest == ep->rank) {
    int rc = nx_local_deliver(ep, &fr, iov, niov);
    if (req) nx_req_complete(req, rc, rc ? nexar_last_error() : NULL);
    return rc;
  }
  if (dest >= ep->world) return nx_fail(NEXAR_ERR_INVALID_RANK, "send to member %u", dest);
  nx_peer *p = ep->peers[dest];
  if (p->state == NX_PEER_DEAD)
    return nx_fail(p->dead_code, "send to rank %u: peer lost (%s)", dest, p->why);
  if (p->relayed) return nx_relay_send_locked(ep, dest, &fr, iov, niov, len, req);
  /* Collective messages always meet a posted receive (no eager buffering is
   * needed for progress), so on the same host they switch to rendezvous at a
   * lower size than point-to-point, whose sends must not block below
   * NX_EAGER_MAX. */
  /* same host, proven: the shared-memory rings (point-to-point in order) */
  int by_shm = nx_shm_send_locked(ep, p, &fr, iov, niov, len, req);
  if (by_shm) return by_shm < 0 ? by_shm : 0;
  if (nx_lane_send_locked(ep, p, &fr, iov, niov, len)) { /* small collective frame, same host */
    if (req) nx_req_complete(req, 0, NULL);
    return 0;
  }
  uint64_t eager_max = fr.kind == NX_KIND_COLL && p->shm_ok ? NX_RNDV_COLL_MIN : NX_EAGER_MAX;
  int eager = len <= eager_max || !req;
  /* copies queued to a receiver that withholds credit must not grow without
   * bound: past NX_EAGER_QUEUE_MAX a user send waits for its acknowledgement */
  int user = fr.kind == NX_KIND_P2P && req;
  if (eager && user && p->eager_queued + len > NX_EAGER_QUEUE_MAX) eager = 0;
  /* same host: the reader copies it from our buffer; another host: above
   * the measured crossover the receiver pulls it over the bulk TCP stream */
  if (!eager && (p->shm_ok || (p->bulk_up && len > ep->bulk_min))) {
    int t = nx_rndv_send_locked(ep, p, &fr, iov, niov, len, req);
    if (t < 0) return t;
    if (t == 1) {
      p->st.messages_sent++;
      p->st.bytes_sent += len;
      p->st.bulk_bytes_sent += len;
      return 0;
    }
  }
  nx_txmsg *tm = NULL;
  int rc = send_frame(ep, p, &fr, iov, niov, eager ? NULL : req, &tm, NULL);
  if (out) *out = tm;
  if (!rc && eager && user && tm) {
    tm->eager_len = len ? len : 1;
    p->eager_queued += tm->eager_len;
  }
  if (!rc && eager && req) nx_req_complete(req, 0, NULL); /* the data was copied */
  return rc;
}

int nx_ep_send_raw_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *iov,
                          size_t niov, uint64_t length, nx_txmsg **out) {
  nx_frame fr = *f;
  fr.src = ep->rank;
  fr.length = length;
  return send_frame(ep, p, &fr, iov, niov, NULL, out, NULL);
}

int nx_ep_send_owned_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, void *buf, size_t len,
                            uint64_t relay_len) {
  nx_frame fr = *f;
  fr.src = ep->rank;
  fr.length = len;
  nexar_iovec v = {buf, len};
  nx_txmsg *m = NULL;
  int rc = send_frame(ep, p, &fr, &v, 1, NULL, &m, buf);
  if (!rc && m && relay_len) {
    m->relay_len = relay_len;
    ep->relay_buf += relay_len;
    if (ep->relay_buf > ep->relay_buf_peak) ep->relay_buf_peak = ep->relay_buf;
  }
  return rc;
}

/* Queues one message: copied when req is NULL (eager), else zero-copy with
 * req completed at the peer's final acknowledgement; give: the payload
 * (one iovec) is this buffer, which the message takes over (even on failure). */
static int send_frame(nx_ep *ep, nx_peer *p, const nx_frame *fr, const nexar_iovec *iov,
                      size_t niov, nexar_request *req, nx_txmsg **out, void *give) {
  uint32_t dest = p->rank;
  uint64_t len = 0;
  for (size_t i = 0; i < niov; i++)
    len += iov[i].len;
  nx_txmsg *m = nx_calloc(1, sizeof *m);
  if (!m) {
    free(give);
    return nx_fail(NEXAR_ERR_NOMEM, "send to rank %u", dest);
  }
  m->ep = ep;
  m->peer = p;
  m->q.sid = -1;
  nx_frame_encode(fr, m->q.hdr);
  m->q.total = NX_FRAME_HDR_LEN + len;
  /* user data a receiver may hold over its budget (descriptors are not held) */
  m->q.holdable = fr->kind == NX_KIND_P2P && !(fr->flags & NX_FLAG_RNDV);
  int eager = req == NULL;
  if (eager) {
    if (give) {
      m->owned = give;
    } else if (len) {
      m->owned = malloc((size_t)len);
      if (!m->owned) {
        free(m);
        return nx_fail(NEXAR_ERR_NOMEM, "send to rank %u: %llu bytes", dest,
                       (unsigned long long)len);
      }
      uint64_t off = 0;
      for (size_t i = 0; i < niov; i++) {
        if (iov[i].len) memcpy((uint8_t *)m->owned + off, iov[i].base, iov[i].len);
        off += iov[i].len;
      }
    }
    m->iov1.base = m->owned;
    m->iov1.len = (size_t)len;
    m->q.iov = &m->iov1;
    m->q.niov = 1;
  } else {
    m->owned = malloc(niov * sizeof *iov);
    if (!m->owned) {
      free(m);
      return nx_fail(NEXAR_ERR_NOMEM, "send to rank %u", dest);
    }
    memcpy(m->owned, iov, niov * sizeof *iov);
    m->q.iov = m->owned;
    m->q.niov = niov;
    m->req = req;
    req->tx = m;
  }
  m->all_next = ep->tx_all;
  if (ep->tx_all) ep->tx_all->all_prev = m;
  ep->tx_all = m;
  nx_txmsg **qh = fr->kind == NX_KIND_P2P ? &p->utxq_head : &p->txq_head;
  nx_txmsg **qt = fr->kind == NX_KIND_P2P ? &p->utxq_tail : &p->txq_tail;
  if (*qt)
    (*qt)->next = m;
  else
    *qh = m;
  *qt = m;
  if (!(fr->flags & NX_FLAG_RNDV)) {
    p->st.messages_sent++;
    p->st.bytes_sent += len;
  }
  if (out) *out = m;
  if (!ep->in_progress && (!ep->thr_started || !pthread_equal(pthread_self(), ep->thr))) {
    /* an application thread: write now instead of waking the progress thread
     * (receiving is left to whoever waits next) */
    uint64_t next = nx_ep_progress2_locked(ep, 0);
    /* the progress thread needs to re-arm its timer only if nobody drives
     * and it would otherwise sleep past the poll interval of driven mode: a
     * timer (delayed ACK, loss detection) served up to NX_DRIVER_POLL_NS late
     * costs nothing, a wake-up costs a context switch and a race for ep->mu */
    if (next < ep->sleep_until && atomic_load(&ep->spinners) == 0 &&
        ep->sleep_until > nx_now_ns() + NX_DRIVER_POLL_NS)
      nx_ep_wake(ep);
  }
  return 0;
}

void nx_tx_cancel_locked(nx_ep *ep, nx_txmsg *m, int rc) {
  if (m->cancel) return;
  m->cancel = 1;
  m->cancel_rc = rc;
  nx_peer *p = m->peer;
  if (m->q.sid < 0) { /* still queued: nothing was handed to the link */
    nx_txmsg *prev = NULL;
    int user = m->q.hdr[3] == NX_KIND_P2P;
    nx_txmsg **qh = user ? &p->utxq_head : &p->txq_head, **qt = user ? &p->utxq_tail : &p->txq_tail;
    for (nx_txmsg *x = *qh; x; prev = x, x = x->next) {
      if (x != m) continue;
      if (prev)
        prev->next = x->next;
      else
        *qh = x->next;
      if (*qt == x) *qt = prev;
      break;
    }
    m->q.acked = m->q.total;
    nx_tx_acked(ep, m, 0, 0);
    nx_tx_free(m);
    return;
  }
  nx_qconn_reset(p->qc, &m->q);
  nx_ep_wake(ep);
}

void nx_qconn_extend_hook(nx_peer *p, int64_t sid, uint64_t n, uint64_t boost) {
  if (p->qc && (n || boost)) nx_qconn_extend(p->qc, sid, n, boost);
}

/* ------------------------------------------------------------- failures */

typedef struct pick_peer_arg {
  uint32_t rank;
  int rc;
} pick_peer_arg;

static int pick_peer(const nx_recv *r, void *arg) {
  const pick_peer_arg *a = arg;
  return r->key.src == a->rank && r->key.kind != NX_KIND_RPC_REQ ? a->rc : 0;
}

static void drop_peer_traffic(nx_ep *ep, nx_peer *p, const char *why) {
  int code = p->dead_code;
  char msg[256];
  snprintf(msg, sizeof msg, "rank %u lost: %s", p->rank, why);
  /* a departed peer's bulk stream stays open until its EOF: bytes it wrote
   * before it left are still read into their receives */
  if (p->departed)
    p->bulk_up = 0;
  else
    nx_bulk_peer_down_locked(ep, p);
  nx_rndv_peer_dead_locked(ep, p, code, msg);
  for (nx_txmsg *m = ep->tx_all, *n; m; m = n) {
    n = m->all_next;
    if (m->peer != p) continue;
    if (m->req) {
      nexar_request *r = m->req;
      m->req = NULL;
      r->tx = NULL;
      nx_req_complete(r, code, msg);
    }
    nx_tx_free(m);
  }
  p->txq_head = p->txq_tail = NULL;
  p->utxq_head = p->utxq_tail = NULL;
  for (nx_rxstream *rs = ep->rx_all, *n; rs; rs = n) {
    n = rs->all_next;
    if (rs->peer != p) continue;
    nx_msg *m = rs->msg;
    if (m) {
      m->rs = NULL;
      rs->msg = NULL;
      if (m->rcv) {
        m->rcv->msg = NULL;
        nx_recv_finish(ep, m->rcv, code, msg);
        m->rcv = NULL;
        nx_msg_free(ep, m);
      } else if (m->queued) {
        nx_match_unqueue(ep, m); /* half a message is useless: drop it */
        nx_msg_free(ep, m);
      } else if (!m->ordered) {
        m->discard = 1;
      }
    }
    if (rs->all_prev)
      rs->all_prev->all_next = rs->all_next;
    else
      ep->rx_all = rs->all_next;
    if (rs->all_next) rs->all_next->all_prev = rs->all_prev;
    nx_rx_stream_uncredit(ep, rs);
    free(rs);
  }
  while (p->rx_pending) {
    nx_msg *m = p->rx_pending;
    p->rx_pending = m->next_pending;
    nx_msg_free(ep, m);
  }
  /* receives posted for this source can never complete */
  pick_peer_arg a = {p->rank, code};
  nx_match_fail_posted(ep, pick_peer, &a, msg);
}

void nx_peer_departed_locked(nx_ep *ep, nx_peer *p) {
  if (p->state == NX_PEER_DEAD || p->rank == ep->rank) return;
  /* what it sent on the same-host lane before it left is queued already
   * (AF_UNIX delivers at send time): take it before its traffic is dropped */
  nx_lane_recv_locked(ep);
  nx_shm_peer_down_locked(ep, p);
  p->state = NX_PEER_DEAD;
  p->departed = 1;
  p->dead_code = NEXAR_ERR_PEER_LOST;
  snprintf(p->why, sizeof p->why, "it has left (closed its endpoint)");
  NX_DEBUG("rank %u (%s) left", p->rank, p->addrstr);
  nx_quic_glue_drop(ep, p, NULL);
  drop_peer_traffic(ep, p, p->why);
  nx_relay_peer_lost_locked(ep, p);
  pthread_cond_broadcast(&ep->cv);
}

void nx_peer_dead_locked(nx_ep *ep, nx_peer *p, int code, const char *why) {
  if (p->state == NX_PEER_DEAD || p->rank == ep->rank) return;
  nx_lane_recv_locked(ep); /* as for a departure: its earlier frames count */
  nx_shm_peer_down_locked(ep, p);
  p->state = NX_PEER_DEAD;
  p->dead_code = code;
  snprintf(p->why, sizeof p->why, "%s", why);
  NX_WARN("rank %u (%s) is dead: %s", p->rank, p->addrstr, why);
  nx_quic_glue_drop(ep, p, why); /* the connection is freed by the next service pass */
  drop_peer_traffic(ep, p, why);
  nx_relay_peer_lost_locked(ep, p);
  for (nx_comm *c = ep->comms; c; c = c->next)
    nx_comm_peer_dead_locked(c, p->rank, why);
  pthread_cond_broadcast(&ep->cv);
}

/* -------------------------------------------------------- progress loop */

static void on_dgram(void *ud, const struct sockaddr *from, socklen_t fromlen, uint8_t *pkt,
                     size_t len) {
  nx_quic_on_datagram(((nx_ep *)ud)->quic, from, fromlen, pkt, len);
}

static uint64_t heartbeats(nx_ep *ep, uint64_t now) {
  uint64_t next = UINT64_MAX;
  if (!ep->peers) return next;
  for (uint32_t j = 0; j < ep->world; j++) {
    nx_peer *p = ep->peers[j];
    if (j == ep->rank || p->state != NX_PEER_UP || p->relayed) continue;
    if (now - p->last_heard_ns > ep->hb_timeout_ns) {
      char why[96];
      snprintf(why, sizeof why, "no data for %llu ms",
               (unsigned long long)((now - p->last_heard_ns) / 1000000ull));
      nx_peer_dead_locked(ep, p, NEXAR_ERR_PEER_LOST, why);
      continue;
    }
    if (now >= p->next_hb_ns) {
      nx_frame f = {0};
      f.kind = NX_KIND_HEARTBEAT;
      nx_ep_send_locked(ep, j, &f, NULL, 0, NULL, NULL);
      p->next_hb_ns = now + ep->hb_interval_ns;
    }
    if (p->next_hb_ns < next) next = p->next_hb_ns;
    uint64_t dl = p->last_heard_ns + ep->hb_timeout_ns + 1;
    if (dl < next) next = dl;
  }
  return next;
}

/* One progress step: receive what is there, run timers, write what is
 * pending. The progress thread runs it after every wake-up; a thread blocked
 * in a wait runs it too while it spins (ngtcp2 needs serialised access, which
 * ep->mu gives, not one particular thread), which saves two thread wake-ups
 * per message on small messages. Returns the next deadline. */
uint64_t nx_ep_progress_locked(nx_ep *ep) {
  return nx_ep_progress2_locked(ep, 1);
}

uint64_t nx_ep_progress2_locked(nx_ep *ep, int do_recv) {
  if (ep->in_progress) return 0; /* re-entered from a send made by this step */
  ep->in_progress = 1;
  /* a short batch means the socket is drained: no extra EAGAIN syscall */
  for (int budget = 0; do_recv && budget < 16; budget++)
    if (nx_udp_recv(&ep->udp, on_dgram, ep) < NX_UDP_RX_BATCH) break;
  if (do_recv) nx_lane_recv_locked(ep);
  nx_shm_poll_locked(ep, NULL);
  uint64_t now = nx_now_ns();
  nx_ep_credit_flush(ep);
  uint64_t next = heartbeats(ep, now);
  uint64_t q = nx_quic_service(ep->quic, now);
  if (q < next) next = q;
  uint64_t d = nx_udp_flush_delayed(&ep->udp, now);
  ep->in_progress = 0;
  if (d < next) next = d;
  atomic_store_explicit(&ep->next_due, next, memory_order_relaxed);
  return next;
}

static void *progress_main(void *arg) {
  nx_ep *ep = arg;
  nx_log_set_rank(ep->rank);
  nx_ep_set_driver(ep);
  pthread_mutex_lock(&ep->mu);
  while (!ep->stop) {
    if (want_connect(ep)) {
      for (uint32_t j = 0; j < ep->world; j++) {
        if (!nx_route_dials(&ep->route, ep->rank, j) || ep->peers[j]->state != NX_PEER_INIT)
          continue;
        int rc = nx_quic_glue_dial(ep, ep->peers[j]);
        if (rc) nx_peer_dead_locked(ep, ep->peers[j], NEXAR_ERR_PEER_LOST, nexar_last_error());
      }
    }
    /* While an application thread drives progress (it sleeps in epoll on the
     * socket and runs the timers itself), this thread stays out of its way:
     * racing it for every packet and for the lock costs more than it brings.
     * Drivers that stopped a moment ago will likely wait again soon
     * (request/reply patterns), so for a few milliseconds this thread only
     * looks every NX_DRIVER_POLL_NS instead of watching the socket. */
    uint64_t now = nx_now_ns();
    int spinning = atomic_load(&ep->spinners) > 0;
    int driven =
        spinning || now - NX_MIN(now, atomic_load(&ep->last_driver_ns)) < NX_DRIVER_LINGER_NS;
    uint64_t next = spinning ? now + NX_DRIVER_POLL_NS : nx_ep_progress_locked(ep);
    ep->wake_pending = 0;
    uint64_t tmin = nx_ep_next_timer(ep);
    if (tmin < next) next = tmin;
    struct epoll_event evs[4];
    now = nx_now_ns();
    struct timespec ts = {0, 0};
    if (next > now) {
      uint64_t dt = next - now;
      if (dt > 100000000ull) dt = 100000000ull;
      if (driven && dt > NX_DRIVER_POLL_NS) dt = NX_DRIVER_POLL_NS;
      /* a reader's doorbell that found its lane full is not sent again
       * once its ring is empty: what waits for room looks every 1 ms */
      if (dt > 1000000ull && nx_shm_room_wanted(ep)) dt = 1000000ull;
      ts.tv_sec = (time_t)(dt / 1000000000ull);
      ts.tv_nsec = (long)(dt % 1000000000ull);
    }
    ep->sleep_until = now + (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    pthread_mutex_unlock(&ep->mu);
    /* deferred work (collective schedules) runs outside the lock; what it
     * queued is written by the next pass at once. While an application
     * thread drives, it runs the work itself (as it does the socket): taking
     * it here would hand every step over between threads. */
    if (!spinning && nx_ep_run_deferred(ep)) ts.tv_sec = 0, ts.tv_nsec = 0;
    int fd = driven ? ep->epfd_ctl : ep->epfd;
    /* While an application thread spins (it serves the socket and the
     * timers), this thread only looks every NX_DRIVER_POLL_NS, and nothing
     * it does then is urgent. As an ordinary thread each of those wake-ups
     * preempted a polling rank at once (a woken sleeper goes first): a rank
     * that waits for that one waits out the switch, so small same-host
     * latencies spread with the luck of those wake-ups. SCHED_BATCH wakes it
     * without preempting (core/cpubind.h). Harness pingpong 8 B n = 2, six
     * alternating runs: 0.37-0.64 us -> 0.39-0.41; context switches in 1 s
     * of it 2133 -> 1181. Back to SCHED_OTHER when nobody spins: then it
     * serves the socket, streams and timers itself. */
    nx_thread_batch(spinning);
    /* the shared-memory rings ring the lane (our epoll) only for waiters
     * (a waiter looks on for a grace: only when it will sleep) */
    int ready = 0, sleeps = ts.tv_sec || ts.tv_nsec;
    void *tok = driven || !sleeps ? NULL : nx_shm_sleep_begin(ep, &ready);
    if (ready) ts.tv_sec = 0, ts.tv_nsec = 0;
    int n = epoll_pwait2(fd, evs, 4, &ts, NULL);
    nx_shm_sleep_end(tok);
    pthread_mutex_lock(&ep->mu);
    ep->sleep_until = 0;
    for (int i = 0; i < n; i++) {
      if (evs[i].data.u32 == 2) {
        uint64_t v;
        ssize_t r = read(ep->evfd, &v, sizeof v);
        (void)r;
      }
    }
  }
  pthread_mutex_unlock(&ep->mu);
  return NULL;
}

/* ------------------------------------------------------------- teardown */

void nx_ep_ref(nx_ep *ep) {
  atomic_fetch_add(&ep->refs, 1);
}

/* Waits until every message this endpoint sent is acknowledged, a peer is
 * lost, or the collective timeout passes (nexar_client_del's promise); in a
 * sparse topology also until relayed sends reached their destinations and
 * no rank can still need this one as a relay. */
void nx_ep_drain(nx_ep *ep) {
  uint64_t limit = ep->cfg.collective_timeout_ms ? ep->cfg.collective_timeout_ms : 30000;
  pthread_mutex_lock(&ep->mu);
  /* one bound for the close, however many times it is waited for (the last
   * communicator's delete, then the last reference) */
  if (!ep->drain_until) ep->drain_until = nx_now_ns() + limit * 1000000ull;
  uint64_t deadline = ep->drain_until;
  while (nx_now_ns() < deadline && ep->thr_started) {
    int busy = 0;
    for (nx_txmsg *m = ep->tx_all; m; m = m->all_next)
      if (m->peer->state == NX_PEER_UP) busy = 1;
    busy |= nx_rndv_pending_locked(ep); /* same-host sends not read yet */
    busy |= nx_shm_pending_locked(ep);  /* ring records not consumed yet */
    busy |= nx_relay_linger_locked(ep); /* sparse: relayed sends, and others may need us */
    if (!busy) break;
    uint64_t w = nx_now_ns() + 5000000ull;
    struct timespec ts = {(time_t)(w / 1000000000ull), (long)(w % 1000000000ull)};
    pthread_cond_timedwait(&ep->cv, &ep->mu, &ts);
  }
  pthread_mutex_unlock(&ep->mu);
}

void nx_ep_unref(nx_ep *ep) {
  if (!ep || atomic_fetch_sub(&ep->refs, 1) != 1) return;
  nx_ep_drain(ep); /* RPC handlers hold a reference: none runs past this point */
  nx_bulk_stop(ep);
  pthread_mutex_lock(&ep->mu);
  ep->stop = 1;
  nx_ep_wake(ep);
  pthread_mutex_unlock(&ep->mu);
  if (ep->thr_started) pthread_join(ep->thr, NULL);
  /* work queued by the last completions (finished collectives drop their
   * last references there) */
  while (nx_ep_run_deferred(ep) > 0) {
  }
  pthread_mutex_lock(&ep->mu);
  nx_quic_close_all(ep->quic);
  nx_relay_free(ep);
  while (ep->tx_all)
    nx_tx_free(ep->tx_all);
  while (ep->rx_all) {
    nx_rxstream *rs = ep->rx_all;
    ep->rx_all = rs->all_next;
    if (rs->msg && !rs->msg->queued && !rs->msg->rcv) nx_msg_free(ep, rs->msg);
    free(rs);
  }
  for (uint32_t j = 0; ep->peers && j < ep->world; j++) {
    nx_peer *p = ep->peers[j];
    while (p->rx_pending) {
      nx_msg *m = p->rx_pending;
      p->rx_pending = m->next_pending;
      nx_msg_free(ep, m);
    }
    free(p->rx_skip);
    p->qc = NULL; /* freed by nx_quic_close_all */
  }
  while (ep->unexp_head) {
    nx_msg *m = ep->unexp_head;
    ep->unexp_head = m->next;
    m->rs = NULL;
    nx_msg_free(ep, m);
  }
  while (ep->posted_head) {
    nx_recv *r = ep->posted_head;
    ep->posted_head = r->next;
    nx_recv_finish(ep, r, NEXAR_ERR_ABORTED, "endpoint closed");
  }
  for (uint32_t j = 0; ep->peers && j < ep->world; j++)
    nx_rndv_peer_dead_locked(ep, ep->peers[j], NEXAR_ERR_ABORTED, "endpoint closed");
  nx_shm_free(ep);
  pthread_mutex_unlock(&ep->mu);
  nx_udp_close(&ep->udp);
  nx_lane_close(ep);
  close(ep->epfd);
  close(ep->epfd_ctl);
  close(ep->epfd_wait);
  close(ep->wfd);
  close(ep->evfd);
  if (ep->creds) gnutls_certificate_free_credentials(ep->creds);
  nx_quic_del(ep->quic);
  if (ep->seedlink_del) ep->seedlink_del(ep->seedlink);
  nx_ep_peers_free(ep);
  nx_route_free(&ep->route);
  nx_config_release(&ep->cfg);
  pthread_mutex_destroy(&ep->mu);
  pthread_mutex_destroy(&ep->work_mu);
  pthread_cond_destroy(&ep->cv);
  free(ep);
}
