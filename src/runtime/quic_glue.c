/* The engine side of the QUIC link: the nx_quic_cbs implementations. The
 * link hands up opaque handles: a peer is an nx_peer, a remote stream an
 * nx_rxstream (msg.c), an outgoing message the nx_qtx embedded in an
 * nx_txmsg. Policy that is the engine's, not QUIC's, lives here: which
 * ranks may dial us (proto/route), from which addresses, and which waiting
 * message gets the next stream. */
#include "runtime/quic_glue.h"

#include <stddef.h>
#include <string.h>

#include "core/addr.h"
#include "transport/quic.h"

static nx_txmsg *txmsg_of(nx_qtx *q) {
  return (nx_txmsg *)((char *)q - offsetof(nx_txmsg, q));
}

/* A handshake may come only from a member's advertised UDP socket (members
 * dial from the socket they listen on), or from its port in the other family
 * (mixed worlds; the Retry token and the certificate still decide). */
static int cb_member_addr(void *user, const struct sockaddr *from) {
  nx_ep *ep = user;
  for (uint32_t r = 0; ep->peers && r < ep->world; r++)
    if (r != ep->rank && ep->peers[r]->addrlen &&
        nx_sockaddr_same((const struct sockaddr *)&ep->peers[r]->addr, from))
      return 1;
  return 0;
}

/* A client's certificate names rank: it must be one that dials us. */
static int cb_admit(void *user, nx_qconn *qc, uint32_t rank, void **peer, char *why, size_t cap) {
  nx_ep *ep = user;
  if (rank >= ep->world || !nx_route_dials(&ep->route, rank, ep->rank)) {
    snprintf(why, cap, "a client presents rank %u's certificate, but only lower ranks dial rank %u",
             rank, ep->rank);
    return -1;
  }
  nx_peer *p = ep->peers[rank];
  if (p->qc && p->qc != qc && p->state == NX_PEER_UP) {
    NX_WARN("mesh handshake: rank %u is already connected; refusing a second connection", rank);
    return -1;
  }
  if (p->qc && p->qc != qc) nx_qconn_unbind(p->qc); /* a reconnect replaces a stale half-open one */
  p->qc = qc;
  p->rx_next_sid = 0; /* the client's bidi streams: 0, 4, 8, ... */
  *peer = p;
  return 0;
}

static void cb_up(void *user, void *peer) {
  nx_ep *ep = user;
  nx_peer *p = peer;
  p->state = NX_PEER_UP;
  p->last_heard_ns = nx_now_ns();
  NX_DEBUG("connected to rank %u at %s", p->rank, p->addrstr);
  nx_rndv_hello_locked(ep, p);
  pthread_cond_broadcast(&ep->cv);
}

static void cb_dead(void *user, void *peer, int code, const char *why) {
  nx_peer_dead_locked(user, peer, code, why);
}

static void cb_departed(void *user, void *peer) {
  nx_peer_departed_locked(user, peer);
}

static void cb_heard(void *user, void *peer, uint64_t now) {
  (void)user;
  ((nx_peer *)peer)->last_heard_ns = now;
}

static void cb_path_stats(void *user, void *peer, double srtt_us, uint64_t lost) {
  (void)user;
  nx_peer *p = peer;
  p->st.smoothed_rtt_us = srtt_us;
  p->st.packets_lost += lost;
}

static void *cb_stream_open(void *user, void *peer, int64_t sid) {
  nx_rxstream *rs = NULL;
  nx_rx_stream_open(user, peer, sid, &rs);
  return rs;
}

static int cb_stream_data(void *user, void *stream, const uint8_t *data, size_t len, int fin,
                          uint64_t *credit_now, uint64_t *conn_held) {
  return nx_rx_stream_data(user, stream, data, len, fin, credit_now, conn_held);
}

static int cb_stream_close(void *user, void *stream) {
  return nx_rx_stream_close(user, stream);
}

static int cb_tx_waiting(void *user, void *peer) {
  (void)user;
  const nx_peer *p = peer;
  return p->txq_head || p->utxq_head;
}

/* A message that leaves the link (or never reached it): acknowledged in
 * full, its request completed, freed. */
static void tx_finish(nx_ep *ep, nx_txmsg *m) {
  m->q.acked = m->q.total;
  nx_tx_acked(ep, m, 0, 0);
  nx_tx_free(m);
}

/* The engine's order for streams: runtime messages first, in their order;
 * then user point-to-point messages, which leave NX_CONN_RESERVE bytes of
 * connection credit and NX_STREAM_RESERVE streams to runtime messages, so
 * those pass a receiver that holds user data over its budget. */
static nx_qtx *cb_tx_next(void *user, void *peer, uint64_t data_left, uint64_t streams_left) {
  nx_ep *ep = user;
  nx_peer *p = peer;
  for (;;) {
    int usr = p->txq_head == NULL;
    nx_txmsg **head = usr ? &p->utxq_head : &p->txq_head;
    nx_txmsg **tail = usr ? &p->utxq_tail : &p->txq_tail;
    nx_txmsg *m = *head;
    if (!m) return NULL;
    if (m->cancel) {
      *head = m->next;
      if (!*head) *tail = NULL;
      tx_finish(ep, m);
      continue;
    }
    if (!streams_left) return NULL; /* the peer grants more as streams close */
    if (usr && (data_left < NX_CONN_RESERVE || streams_left <= NX_STREAM_RESERVE)) return NULL;
    *head = m->next;
    if (!*head) *tail = NULL;
    return &m->q;
  }
}

static void cb_tx_return(void *user, void *peer, nx_qtx *q) {
  (void)user;
  nx_peer *p = peer;
  nx_txmsg *m = txmsg_of(q);
  int usr = q->hdr[3] == NX_KIND_P2P;
  nx_txmsg **head = usr ? &p->utxq_head : &p->txq_head;
  nx_txmsg **tail = usr ? &p->utxq_tail : &p->txq_tail;
  m->next = *head;
  *head = m;
  if (!*tail) *tail = m;
}

static void cb_tx_acked(void *user, nx_qtx *q, uint64_t offset, uint64_t len) {
  nx_tx_acked(user, txmsg_of(q), offset, len);
}

static void cb_tx_done(void *user, nx_qtx *q) {
  tx_finish(user, txmsg_of(q));
}

int nx_quic_glue_new(nx_ep *ep) {
  int cc;
  int rc = nx_quic_cc_by_name(ep->knobs.quic_cc, &cc);
  if (rc) return rc;
  nx_quic_cfg cfg = {
      .udp = &ep->udp,
      .cc_algo = cc,
      .conn_window = NX_CONN_WINDOW,
      .conn_param = NX_CONN_PARAM,
      .conn_reserve = NX_CONN_RESERVE,
      .stream_window = NX_STREAM_WINDOW,
      .max_streams = NX_MAX_STREAMS,
      /* a client waits for its peer as long as formation may take */
      .handshake_ms = ep->cfg.connect_timeout_ms ? ep->cfg.connect_timeout_ms : 3600000u,
      /* liveness is judged by our heartbeats; idle close is only a backstop */
      .idle_timeout_ms = ep->hb_timeout_ns * 3 / 1000000 + 1000,
  };
  static const nx_quic_cbs cbs = {
      .member_addr = cb_member_addr,
      .admit = cb_admit,
      .up = cb_up,
      .dead = cb_dead,
      .departed = cb_departed,
      .heard = cb_heard,
      .path_stats = cb_path_stats,
      .stream_open = cb_stream_open,
      .stream_data = cb_stream_data,
      .stream_close = cb_stream_close,
      .tx_waiting = cb_tx_waiting,
      .tx_next = cb_tx_next,
      .tx_return = cb_tx_return,
      .tx_acked = cb_tx_acked,
      .tx_done = cb_tx_done,
  };
  return nx_quic_new(&ep->quic, &cfg, &cbs, ep);
}

int nx_quic_glue_dial(nx_ep *ep, nx_peer *p) {
  nx_qconn *qc;
  int rc = nx_quic_dial(ep->quic, p, p->rank, (const struct sockaddr *)&p->addr, p->addrlen,
                        p->addrstr, &qc);
  if (rc) return rc;
  p->qc = qc;
  p->state = NX_PEER_CONNECTING;
  p->rx_next_sid = 1; /* the server's bidi streams: 1, 5, 9, ... */
  return 0;
}

void nx_quic_glue_drop(nx_ep *ep, nx_peer *p, const char *why) {
  if (p->qc && why) {
    char reason[160];
    snprintf(reason, sizeof reason, "rank %u gave up on you: %s", ep->rank, why);
    nx_qconn_abandon(p->qc, reason);
  } else {
    nx_qconn_abandon(p->qc, NULL);
  }
  p->qc = NULL;
}
