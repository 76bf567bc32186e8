/* Inter-host bulk path: one TCP stream per peer pair (mutual TLS with the
 * cluster certificates unless encrypt_bulk = 0) for large payloads, which a
 * single QUIC connection cannot move fast enough (its crypto and packet work
 * is per 1.2-64 KiB datagram on one thread).
 *
 * The data moves by rendezvous, like the same-host path: the sender's
 * descriptor travels on its QUIC stream (so ordering and matching are
 * unchanged); once a receive matches it, the receiver sends CTS on the TCP
 * stream and the sender's writer streams the bytes, which the receiver reads
 * straight into the receive buffer. The receiver only asks for what it has
 * room for, so a message nobody receives never blocks the stream (no head-
 * of-line deadlock) and memory stays bounded.
 *
 * Setup: each endpoint listens on TCP at its UDP address; the path hello on
 * QUIC carries the port and a per-peer random secret; the lower rank dials
 * and presents the secret inside the stream (in TLS its certificate must also
 * name its rank; in plaintext the secret alone, learnt over authenticated
 * QUIC, proves who dials). The higher rank answers HELLO_ACK once attached.
 *
 * Threads: per stream one reader (which also ran the handshake) and one
 * writer; GnuTLS allows one sending and one receiving thread per session.
 * Faults: an I/O error, or a close with work pending, marks the peer dead
 * exactly like a QUIC failure (PEER_LOST for everything that needs it). */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/cpubind.h"
#include "runtime/request.h"
#include "runtime/rndv.h"
#include "transport/tcp.h"

enum { BK_HELLO = 1, BK_HELLO_ACK = 2, BK_CTS = 3, BK_DATA = 4 };
#define BK_MAGIC 0x4b42584eu /* "NXBK" */
#define BK_HDR 24
#define BK_SETUP_MS 10000 /* connect, handshake, hello */
/* An accepted connection must prove itself (TLS and hello) within this, and
 * at most this many beyond our rank (every lower rank dials us once) may try
 * at once; others are closed at once. */
#define BK_PREAUTH_MS 5000
#define BK_PREAUTH_MAX 64
#define BK_TICK_MS 100 /* the listener reaps and enforces deadlines this often */

typedef struct bk_item { /* for the writer: a CTS to send, or data */
  struct bk_item *next;
  int type;
  uint64_t id, len;
  nx_rndv *rv;
} bk_item;

typedef struct bk_pull { /* a receive waiting for its bytes, in CTS order */
  struct bk_pull *next;
  uint64_t id, len;
  nx_msg *m;
  nx_recv *r;
} bk_pull;

struct nx_bulk {
  nx_bulk *next_all;
  nx_ep *ep;
  nx_peer *p;      /* known at once when dialing; after the hello when accepting */
  nx_tcp *t;       /* freed only by nx_bulk_stop, after both threads ended */
  int dial;        /* we connect (the lower rank) */
  uint16_t port;   /* dial: the peer's listener */
  uint8_t key[32]; /* dial: the secret the peer expects from us */
  pthread_t rd, wr;
  int rd_started, wr_started;
  uint64_t preauth_deadline; /* accepted, not yet attached: shut down after it */
  int finished;              /* accepted, never attached, reader done: reap it */
  pthread_cond_t cv;         /* the writer waits here, with ep->mu */
  bk_item *q_head, *q_tail;
  bk_pull *pulls, **pulls_tail;
  int down;
};

static void put_hdr(uint8_t *h, uint32_t type, uint64_t id, uint64_t len) {
  uint64_t w[3] = {(uint64_t)BK_MAGIC | (uint64_t)type << 32, id, len};
  for (int i = 0; i < 24; i++)
    h[i] = (uint8_t)(w[i / 8] >> (8 * (i % 8)));
}

static int get_hdr(const uint8_t *h, uint32_t *type, uint64_t *id, uint64_t *len) {
  uint64_t w[3] = {0, 0, 0};
  for (int i = 23; i >= 0; i--)
    w[i / 8] = (w[i / 8] << 8) | h[i];
  *type = (uint32_t)(w[0] >> 32);
  *id = w[1];
  *len = w[2];
  return (uint32_t)w[0] == BK_MAGIC ? 0 : -1;
}

static void push(nx_bulk *b, int type, uint64_t id, uint64_t len, nx_rndv *rv, bk_item *it) {
  it->type = type, it->id = id, it->len = len, it->rv = rv, it->next = NULL;
  if (b->q_tail)
    b->q_tail->next = it;
  else
    b->q_head = it;
  b->q_tail = it;
  pthread_cond_signal(&b->cv);
}

/* The stream failed (under ep->mu): if work was pending, or it was not a
 * clean close of a stream that was up, the peer is dead, as on QUIC. Only
 * the reader (reader = 1) completes pulls: it may be reading into one. */
static void fail_locked(nx_bulk *b, int code, const char *why, int clean, int reader) {
  nx_ep *ep = b->ep;
  nx_peer *p = b->p;
  int pending = b->pulls || b->q_head;
  if (!b->down) {
    b->down = 1;
    nx_tcp_shutdown(b->t);
    pthread_cond_broadcast(&b->cv);
    if (p && p->bulk == b) p->bulk_up = 0;
    if (p && !ep->bulk_stop && p->state == NX_PEER_UP && (pending || !clean)) {
      NX_WARN("bulk stream to rank %u: %s", p->rank, why);
      nx_peer_dead_locked(ep, p, code, why);
    }
  }
  if (!reader) return;
  char msg[200];
  snprintf(msg, sizeof msg, "rank %u lost: %s", p ? p->rank : 0u, why);
  while (b->pulls) { /* only this (reader) thread completes pulls */
    bk_pull *x = b->pulls;
    b->pulls = x->next;
    x->r->reading = 0;
    nx_recv_finish(ep, x->r, NEXAR_ERR_PEER_LOST, msg);
    x->m->answered = 1;
    nx_msg_free(ep, x->m);
    free(x);
  }
  b->pulls_tail = &b->pulls;
}

/* ------------------------------------------------------------- writer */

static int write_item(nx_bulk *b, bk_item *it) {
  uint8_t h[BK_HDR];
  struct iovec v[1 + NX_RNDV_MAX_IOV];
  size_t n = 1;
  put_hdr(h, (uint32_t)it->type, it->id, it->len);
  v[0].iov_base = h, v[0].iov_len = BK_HDR;
  if (it->type == BK_DATA)
    for (size_t i = 0; i < it->rv->niov; i++, n++)
      v[n].iov_base = it->rv->iov[i].base, v[n].iov_len = it->rv->iov[i].len;
  return nx_tcp_writev(b->t, v, n);
}

static void *writer_main(void *arg) {
  nx_bulk *b = arg;
  nx_ep *ep = b->ep;
  pthread_mutex_lock(&ep->mu);
  for (;;) {
    while (!b->q_head && !b->down)
      pthread_cond_wait(&b->cv, &ep->mu);
    bk_item *it = b->q_head;
    if (!it) break;
    b->q_head = it->next;
    if (!b->q_head) b->q_tail = NULL;
    int rc = -1;
    char why[200] = "bulk stream closed";
    if (!b->down) {
      pthread_mutex_unlock(&ep->mu); /* the buffer is safe: rv->writing holds it */
      rc = write_item(b, it);
      if (rc) snprintf(why, sizeof why, "%s", nexar_last_error());
      pthread_mutex_lock(&ep->mu);
    }
    if (rc) fail_locked(b, NEXAR_ERR_PEER_LOST, why, 0, 0);
    if (it->rv) {
      it->rv->writing = 0;
      char msg[240];
      snprintf(msg, sizeof msg, "send to rank %u: %s", b->p->rank, why);
      nx_rndv_finish_locked(ep, it->rv, rc ? NEXAR_ERR_PEER_LOST : 0, rc ? msg : NULL);
    }
    free(it);
  }
  pthread_mutex_unlock(&ep->mu);
  return NULL;
}

/* ------------------------------------------------------------- reader */

static int on_cts(nx_bulk *b, uint64_t id, uint64_t len) {
  nx_ep *ep = b->ep;
  bk_item *it = nx_calloc(1, sizeof *it);
  if (!it) return nx_fail(NEXAR_ERR_NOMEM, "bulk stream from rank %u", b->p->rank);
  pthread_mutex_lock(&ep->mu);
  nx_rndv *rv = nx_rndv_find_locked(ep, b->p, id);
  if (!rv || rv->writing || !rv->tcp || rv->len != len || !rv->iov) {
    pthread_mutex_unlock(&ep->mu);
    free(it);
    return nx_fail(NEXAR_ERR_PROTOCOL, "rank %u asked for unknown bulk message %llu", b->p->rank,
                   (unsigned long long)id);
  }
  rv->writing = 1;
  push(b, BK_DATA, id, len, rv, it);
  pthread_mutex_unlock(&ep->mu);
  return 0;
}

static int on_data(nx_bulk *b, uint64_t id, uint64_t len) {
  nx_ep *ep = b->ep;
  pthread_mutex_lock(&ep->mu);
  bk_pull *x = b->pulls; /* data comes in the order we asked for it */
  pthread_mutex_unlock(&ep->mu);
  if (!x || x->id != id || x->len != len)
    return nx_fail(NEXAR_ERR_PROTOCOL, "rank %u sent bulk data %llu that was not asked for",
                   b->p->rank, (unsigned long long)id);
  nx_recv *r = x->r; /* `reading` keeps it and its buffer alive */
  uint64_t left = len;
  for (size_t i = 0; i < r->niov && left; i++) {
    size_t n = (size_t)NX_MIN(left, r->iov[i].len);
    int eof;
    if (n && nx_tcp_read(b->t, r->iov[i].base, n, &eof)) return -1;
    left -= n;
  }
  if (left) return nx_fail(NEXAR_ERR_PROTOCOL, "bulk data longer than its receive");
  pthread_mutex_lock(&ep->mu);
  b->pulls = x->next;
  if (!b->pulls) b->pulls_tail = &b->pulls;
  b->p->st.bytes_received += len;
  b->p->st.bulk_bytes_received += len;
  r->got = len;
  r->reading = 0;
  nx_recv_finish(ep, r, 0, NULL);
  x->m->answered = 1;
  nx_msg_free(ep, x->m);
  pthread_mutex_unlock(&ep->mu);
  free(x);
  return 0;
}

static int read_loop(nx_bulk *b, int *eof) {
  for (;;) {
    uint8_t h[BK_HDR];
    uint32_t type;
    uint64_t id, len;
    if (nx_tcp_read(b->t, h, BK_HDR, eof)) return -1;
    *eof = 0;
    int rc;
    if (get_hdr(h, &type, &id, &len))
      rc = nx_fail(NEXAR_ERR_PROTOCOL, "rank %u: bad bulk frame", b->p->rank);
    else if (type == BK_CTS)
      rc = on_cts(b, id, len);
    else if (type == BK_DATA)
      rc = on_data(b, id, len);
    else
      rc = nx_fail(NEXAR_ERR_PROTOCOL, "rank %u: bulk frame of type %u", b->p->rank, type);
    if (rc) return rc;
  }
}

/* ------------------------------------------------------------- setup */

static int start_writer_locked(nx_bulk *b) {
  if (nx_thread_create(&b->wr, NULL, writer_main, b))
    return nx_fail(NEXAR_ERR_IO, "bulk stream to rank %u: no writer thread", b->p->rank);
  b->wr_started = 1;
  b->p->bulk_up = 1;
  return 0;
}

static int dial(nx_bulk *b) {
  nx_ep *ep = b->ep;
  nx_peer *p = b->p;
  nx_tcp_id id = {ep->cfg.encrypt_bulk ? ep->creds : NULL, ep->cluster_id};
  int rc = nx_tcp_connect(b->t, (struct sockaddr *)&p->addr, p->addrlen, b->port, &id, p->rank,
                          BK_SETUP_MS);
  if (rc) return rc;
  uint8_t hello[BK_HDR + 32], ack[BK_HDR];
  put_hdr(hello, BK_HELLO, ep->rank, 32);
  memcpy(hello + BK_HDR, b->key, 32);
  struct iovec v = {hello, sizeof hello};
  uint32_t type;
  uint64_t who, len;
  int eof;
  if ((rc = nx_tcp_writev(b->t, &v, 1)) || (rc = nx_tcp_read(b->t, ack, BK_HDR, &eof))) return rc;
  if (get_hdr(ack, &type, &who, &len) || type != BK_HELLO_ACK || who != p->rank)
    return nx_fail(NEXAR_ERR_PROTOCOL, "bulk connect to rank %u: bad answer", p->rank);
  return 0;
}

static int accept_hello(nx_bulk *b) {
  nx_ep *ep = b->ep;
  nx_tcp_id id = {ep->cfg.encrypt_bulk ? ep->creds : NULL, ep->cluster_id};
  uint32_t cert_rank;
  int rc = nx_tcp_server(b->t, &id, &cert_rank, BK_SETUP_MS);
  uint8_t hello[BK_HDR + 32];
  int eof;
  if (rc || (rc = nx_tcp_read(b->t, hello, sizeof hello, &eof))) return rc;
  uint32_t type;
  uint64_t who, len;
  if (get_hdr(hello, &type, &who, &len) || type != BK_HELLO || len != 32 || who >= ep->rank ||
      (id.creds && who != cert_rank))
    return nx_fail(NEXAR_ERR_AUTH, "bulk stream: bad hello");
  nx_peer *p = ep->peers[who];
  pthread_mutex_lock(&ep->mu);
  if (!nx_ct_equal(hello + BK_HDR, p->bulk_secret, 32) || p->state != NX_PEER_UP || p->bulk ||
      ep->bulk_stop || b->down) {
    pthread_mutex_unlock(&ep->mu);
    return nx_fail(NEXAR_ERR_AUTH, "bulk stream claiming rank %u: refused", (unsigned)who);
  }
  p->bulk = b;
  b->p = p;
  pthread_mutex_unlock(&ep->mu);
  uint8_t ack[BK_HDR];
  put_hdr(ack, BK_HELLO_ACK, ep->rank, 0);
  struct iovec v = {ack, sizeof ack};
  return nx_tcp_writev(b->t, &v, 1);
}

static void *reader_main(void *arg) {
  nx_bulk *b = arg;
  nx_ep *ep = b->ep;
  int rc = b->dial ? dial(b) : accept_hello(b);
  int eof = 0;
  if (!rc) {
    nx_tcp_set_timeout(b->t, 0); /* from now on only shutdown ends a blocked call */
    pthread_mutex_lock(&ep->mu);
    rc = b->down || ep->bulk_stop ? -1 : start_writer_locked(b);
    pthread_mutex_unlock(&ep->mu);
    if (!rc)
      NX_DEBUG("bulk stream to rank %u up (%s)", b->p->rank,
               nx_tcp_is_tls(b->t) ? "TLS" : "plaintext");
    if (!rc) rc = read_loop(b, &eof);
  } else {
    NX_DEBUG("bulk stream%s: %s", b->dial ? " dial" : " accept", nexar_last_error());
  }
  char why[200];
  snprintf(why, sizeof why, "bulk stream: %s", nexar_last_error());
  pthread_mutex_lock(&ep->mu);
  int code = rc == NEXAR_ERR_PROTOCOL ? NEXAR_ERR_PROTOCOL : NEXAR_ERR_PEER_LOST;
  if (b->p && b->p->bulk == b) { /* a stream that never came up is no fault */
    fail_locked(b, code, why, b->wr_started ? eof : 1, 1);
  } else {
    b->down = 1; /* never attached: QUIC stays the path */
    if (!b->dial && !b->p) {
      b->finished = 1; /* the listener closes and frees it at its next tick */
      nx_tcp_shutdown(b->t);
    }
  }
  pthread_mutex_unlock(&ep->mu);
  return NULL;
}

static nx_bulk *new_stream_locked(nx_ep *ep, nx_tcp *t) {
  nx_bulk *b = nx_calloc(1, sizeof *b);
  if (!b) return NULL;
  b->ep = ep;
  b->t = t;
  b->pulls_tail = &b->pulls;
  pthread_cond_init(&b->cv, NULL);
  b->next_all = ep->bulk_all;
  ep->bulk_all = b;
  return b;
}

/* Only ranks below ours dial us, from the addresses they advertised. A
 * dialer that advertised the other family (an IPv4 rank of a mixed world on
 * a dual-stack socket) must leave from an address it did not advertise, so
 * a connection of that family is let through to authentication, still under
 * the cap and the deadline on unproven connections. */
static int from_dialer_locked(nx_ep *ep, const struct sockaddr_storage *src) {
  for (uint32_t j = 0; j < ep->rank && j < ep->world; j++) {
    const nx_peer *p = ep->peers[j];
    if (p->state != NX_PEER_UP || p->bulk) continue;
    if (nx_tcp_same_ip(&p->addr, src) || !nx_tcp_same_family(&p->addr, src)) return 1;
  }
  return 0;
}

/* Frees accepted streams whose reader ended without attaching, and cuts off
 * those past their pre-authentication deadline; counts the ones still
 * trying. Under ep->mu; drops it around the joins. */
static int reap_locked(nx_ep *ep) {
  uint64_t now = nx_now_ns();
  int trying = 0;
  for (nx_bulk **pp = &ep->bulk_all; *pp;) {
    nx_bulk *b = *pp;
    if (b->dial || b->p) {
      pp = &b->next_all;
      continue;
    }
    if (!b->finished) {
      if (now >= b->preauth_deadline && !b->down) {
        b->down = 1;
        nx_tcp_shutdown(b->t); /* its reader fails at once and finishes */
      }
      trying++;
      pp = &b->next_all;
      continue;
    }
    *pp = b->next_all;
    pthread_mutex_unlock(&ep->mu);
    if (b->rd_started) pthread_join(b->rd, NULL);
    nx_tcp_free(b->t);
    pthread_cond_destroy(&b->cv);
    free(b);
    pthread_mutex_lock(&ep->mu);
    pp = &ep->bulk_all; /* the list may have changed meanwhile */
    trying = 0;
  }
  return trying;
}

static void *listener_main(void *arg) {
  nx_ep *ep = arg;
  pthread_mutex_lock(&ep->mu);
  while (!ep->bulk_stop) {
    int trying = reap_locked(ep);
    pthread_mutex_unlock(&ep->mu);
    int fd;
    struct sockaddr_storage src;
    int r = nx_tcp_accept(ep->bulk_lfd, &fd, &src, BK_TICK_MS);
    pthread_mutex_lock(&ep->mu);
    if (r < 0) break;
    if (r > 0) continue;
    if (ep->bulk_stop || trying >= BK_PREAUTH_MAX + (int)ep->rank ||
        !from_dialer_locked(ep, &src)) {
      close(fd); /* a stranger, or too many at once: refused and freed now */
      continue;
    }
    nx_tcp *t = nx_tcp_wrap(fd);
    nx_bulk *b = t ? new_stream_locked(ep, t) : NULL;
    if (!b) {
      nx_tcp_free(t);
      continue;
    }
    b->preauth_deadline = nx_now_ns() + (uint64_t)BK_PREAUTH_MS * 1000000ull;
    if (nx_thread_create(&b->rd, NULL, reader_main, b) == 0)
      b->rd_started = 1;
    else
      b->finished = 1, b->down = 1;
  }
  pthread_mutex_unlock(&ep->mu);
  return NULL;
}

int nx_bulk_start(nx_ep *ep) {
  ep->bulk_lfd = -1;
  if (!ep->cfg.bulk_transport) return 0;
  for (uint32_t j = 0; j < ep->world; j++) {
    int rc = nx_random(ep->peers[j]->bulk_secret, 32);
    if (rc) return rc;
  }
  if (nx_tcp_listen((struct sockaddr *)&ep->udp.local, ep->udp.locallen, &ep->bulk_lfd,
                    &ep->bulk_port)) {
    NX_DEBUG("no bulk listener (%s): QUIC carries everything", nexar_last_error());
    ep->bulk_lfd = -1;
    return 0;
  }
  if (nx_thread_create(&ep->bulk_thr, NULL, listener_main, ep)) {
    close(ep->bulk_lfd);
    ep->bulk_lfd = -1;
    return 0;
  }
  ep->bulk_thr_started = 1;
  return 0;
}

/* The numeric IP this rank advertised, if it is one. */
static int self_ip(nx_ep *ep, struct sockaddr_storage *out) {
  char host[128];
  uint16_t port;
  if (nx_split_hostport(ep->peers[ep->rank]->addrstr, host, sizeof host, &port)) return -1;
  struct addrinfo hints = {.ai_flags = AI_NUMERICHOST, .ai_socktype = SOCK_STREAM}, *res = NULL;
  if (getaddrinfo(host, NULL, &hints, &res) || !res) return -1;
  memset(out, 0, sizeof *out);
  memcpy(out, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return 0;
}

void nx_bulk_on_hello_locked(nx_ep *ep, nx_peer *p, uint16_t port, const uint8_t key[32]) {
  if (!port || ep->bulk_lfd < 0 || ep->bulk_stop || p->bulk || p->rank < ep->rank) return;
  nx_tcp *t = nx_tcp_open(p->addr.ss_family);
  struct sockaddr_storage self;
  /* leave from our advertised address (the listener checks it), unless it
   * is of the other IP family than the peer's (mixed IPv4/IPv6 worlds):
   * an IPv6 source cannot reach a v4-mapped address */
  if (t && self_ip(ep, &self) == 0 && self.ss_family == p->addr.ss_family &&
      nx_tcp_same_family(&self, &p->addr))
    nx_tcp_bind_source(t, &self);
  nx_bulk *b = t ? new_stream_locked(ep, t) : NULL;
  if (!b) {
    nx_tcp_free(t);
    return;
  }
  b->dial = 1;
  b->p = p;
  b->port = port;
  memcpy(b->key, key, 32);
  p->bulk = b;
  if (nx_thread_create(&b->rd, NULL, reader_main, b) == 0)
    b->rd_started = 1;
  else
    b->down = 1;
}

void nx_bulk_pull_locked(nx_ep *ep, nx_msg *m, nx_recv *r, uint64_t id) {
  nx_peer *p = m->peer;
  nx_bulk *b = p->bulk;
  bk_pull *x = b && !b->down ? nx_calloc(1, sizeof *x) : NULL;
  bk_item *it = x ? nx_calloc(1, sizeof *it) : NULL;
  if (!it) {
    free(x);
    char why[160];
    snprintf(why, sizeof why, "recv from rank %u: its bulk stream is gone", p->rank);
    nx_rndv_answer_locked(ep, p, id, NEXAR_ERR_IO);
    m->answered = 1;
    nx_recv_finish(ep, r, NEXAR_ERR_IO, why);
    nx_msg_free(ep, m);
    return;
  }
  x->id = id;
  x->len = r->len;
  x->m = m;
  x->r = r;
  r->reading = 1;
  *b->pulls_tail = x;
  b->pulls_tail = &x->next;
  push(b, BK_CTS, id, r->len, NULL, it);
}

void nx_bulk_peer_down_locked(nx_ep *ep, nx_peer *p) {
  (void)ep;
  nx_bulk *b = p->bulk;
  p->bulk_up = 0;
  if (!b || b->down) return;
  b->down = 1; /* its threads wake, fail what is left and end */
  nx_tcp_shutdown(b->t);
  pthread_cond_broadcast(&b->cv);
}

void nx_bulk_stop(nx_ep *ep) {
  pthread_mutex_lock(&ep->mu);
  ep->bulk_stop = 1;
  for (nx_bulk *b = ep->bulk_all; b; b = b->next_all) {
    b->down = 1;
    nx_tcp_shutdown(b->t);
    pthread_cond_broadcast(&b->cv);
  }
  pthread_mutex_unlock(&ep->mu);
  if (ep->bulk_lfd >= 0) shutdown(ep->bulk_lfd, SHUT_RDWR);
  if (ep->bulk_thr_started) pthread_join(ep->bulk_thr, NULL);
  ep->bulk_thr_started = 0;
  for (;;) { /* the listener is gone: the list only shrinks now */
    pthread_mutex_lock(&ep->mu);
    nx_bulk *b = ep->bulk_all;
    if (b) ep->bulk_all = b->next_all;
    if (b && b->p && b->p->bulk == b) b->p->bulk = NULL, b->p->bulk_up = 0;
    pthread_mutex_unlock(&ep->mu);
    if (!b) break;
    if (b->rd_started) pthread_join(b->rd, NULL);
    if (b->wr_started) pthread_join(b->wr, NULL);
    nx_tcp_free(b->t);
    pthread_cond_destroy(&b->cv);
    free(b);
  }
  if (ep->bulk_lfd >= 0) close(ep->bulk_lfd);
  ep->bulk_lfd = -1;
}
