/* Streams to messages: header parsing and validation, in-order delivery to
 * matching (stream ids give the send order), payload placement, flow-control
 * credit, and the lifetime of outgoing messages. Progress thread, ep->mu held. */
#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"
#include "runtime/request.h"

static int is_internal(uint8_t kind) {
  return kind == NX_KIND_RPC_REQ || kind == NX_KIND_RPC_RESP || kind == NX_KIND_HEARTBEAT ||
         kind == NX_KIND_ABORT || kind == NX_KIND_COLL_FAIL || kind == NX_KIND_RNDV_DONE ||
         kind == NX_KIND_SHM_HELLO || kind == NX_KIND_SHM_OK || kind == NX_KIND_REVOKE ||
         kind == NX_KIND_AGREE || kind == NX_KIND_RELAY || kind == NX_KIND_PEER_GONE;
}

static int is_rndv_ctl(uint8_t kind) {
  return kind == NX_KIND_RNDV_DONE || kind == NX_KIND_SHM_HELLO || kind == NX_KIND_SHM_OK;
}

/* ------------------------------------------------------------- outgoing */

void nx_tx_acked(nx_ep *ep, nx_txmsg *m, uint64_t offset, uint64_t len) {
  if (offset + len > m->q.acked) m->q.acked = offset + len;
  if (m->req && m->q.acked > NX_FRAME_HDR_LEN) atomic_store(&m->req->progress_ns, nx_now_ns());
  if (m->q.acked >= m->q.total && m->req) {
    nexar_request *r = m->req;
    m->req = NULL;
    r->tx = NULL;
    nx_req_complete(
        r, m->cancel ? m->cancel_rc : 0,
        m->cancel ? (m->cancel_rc == NEXAR_ERR_TIMEOUT ? nx_req_what(r) : "send aborted") : NULL);
  }
}

void nx_tx_free(nx_txmsg *m) {
  if (m->eager_len && m->peer) m->peer->eager_queued -= NX_MIN(m->peer->eager_queued, m->eager_len);
  if (m->relay_len && m->ep) m->ep->relay_buf -= NX_MIN(m->ep->relay_buf, m->relay_len);
  if (m->all_prev)
    m->all_prev->all_next = m->all_next;
  else if (m->ep)
    m->ep->tx_all = m->all_next;
  if (m->all_next) m->all_next->all_prev = m->all_prev;
  if (m->req) { /* freed before completion: the engine is tearing down */
    m->req->tx = NULL;
    nx_req_complete(m->req, NEXAR_ERR_ABORTED, "send: endpoint closed");
  }
  free(m->owned);
  free(m);
}

/* ---------------------------------------------------------------- credit */

static void queue_credit(nx_ep *ep, nx_rxstream *rs) {
  if (rs->credit_queued || rs->closed) return;
  rs->credit_queued = 1;
  rs->next_credit = ep->credit_list;
  ep->credit_list = rs;
  nx_ep_wake(ep);
}

/* Connection credit withheld for m's bytes goes back (the progress thread
 * returns it in nx_ep_credit_flush). */
static void release_conn_credit(nx_ep *ep, nx_msg *m) {
  if (!m->held) return;
  m->peer->conn_release += m->held;
  m->held = 0;
  ep->conn_credit_dirty = 1;
  nx_ep_wake(ep);
}

/* Called when an unexpected message gets its receive: the held credit goes
 * back and a large message gets a wider window. */
static void release_credit(nx_ep *ep, nx_msg *m) {
  release_conn_credit(ep, m);
  if (!m->rs) return;
  if (m->f.length > NX_STREAM_WINDOW && m->rs->boost == 0) m->rs->boost = 1;
  if (m->rs->held || m->rs->boost == 1) queue_credit(ep, m->rs);
}

/* ------------------------------------------------------------- incoming */

void nx_rx_stream_open(nx_ep *ep, nx_peer *p, int64_t sid, nx_rxstream **out) {
  nx_rxstream *rs = nx_calloc(1, sizeof *rs);
  *out = rs;
  if (!rs) return;
  rs->peer = p;
  rs->sid = sid;
  rs->all_next = ep->rx_all;
  if (ep->rx_all) ep->rx_all->all_prev = rs;
  ep->rx_all = rs;
}

static int skip_has(nx_peer *p, int64_t sid) {
  for (size_t i = 0; i < p->nskip; i++)
    if (p->rx_skip[i] == sid) {
      p->rx_skip[i] = p->rx_skip[--p->nskip];
      return 1;
    }
  return 0;
}

static void msg_finish(nx_ep *ep, nx_msg *m);

/* Hands parsed headers to matching in stream-id order. */
static void order_deliver(nx_ep *ep, nx_peer *p) {
  for (;;) {
    if (p->rx_pending && p->rx_pending->sid == p->rx_next_sid) {
      nx_msg *m = p->rx_pending;
      p->rx_pending = m->next_pending;
      p->rx_next_sid += 4;
      m->ordered = 1;
      nx_match_arrived(ep, m);
      continue;
    }
    if (p->nskip && skip_has(p, p->rx_next_sid)) {
      p->rx_next_sid += 4;
      continue;
    }
    break;
  }
}

static void order_insert(nx_ep *ep, nx_peer *p, nx_msg *m) {
  nx_msg **pp = &p->rx_pending;
  while (*pp && (*pp)->sid < m->sid)
    pp = &(*pp)->next_pending;
  m->next_pending = *pp;
  *pp = m;
  order_deliver(ep, p);
}

static int grow_buf(nx_msg *m, uint64_t need) {
  if (need <= m->bufcap) return 0;
  uint64_t cap = m->bufcap ? m->bufcap * 2 : 4096;
  while (cap < need)
    cap *= 2;
  if (cap > m->wire_len) cap = m->wire_len;
  uint8_t *b = realloc(m->buf, (size_t)cap);
  if (!b) return NEXAR_ERR_NOMEM;
  m->buf = b;
  m->bufcap = cap;
  return 0;
}

static int consume(nx_ep *ep, nx_rxstream *rs, nx_msg *m, const uint8_t *d, size_t n,
                   uint64_t *credit, uint64_t *conn_held) {
  if (m->wire_len - m->got < n)
    return nx_fail(NEXAR_ERR_PROTOCOL, "rank %u sent more payload than its header declared",
                   m->f.src);
  int rndv = (m->f.flags & NX_FLAG_RNDV) != 0;
  if (!rndv) m->peer->st.bytes_received += n;
  if (m->discard && !rndv) { /* a dropped descriptor is kept: its sender gets an answer */
    m->got += n;
    *credit += n;
    return 0;
  }
  if (m->rcv && !rndv) { /* a rendezvous descriptor is kept for the reader */
    nx_match_data(ep, m, d, n);
    *credit += n;
    return 0;
  }
  if (grow_buf(m, m->got + n))
    return nx_fail(NEXAR_ERR_NOMEM, "buffering a message from rank %u", m->f.src);
  memcpy(m->buf + m->got, d, n);
  m->got += n;
  if (is_internal(m->f.kind) || rndv) {
    *credit += n;
  } else {
    ep->unexp_bytes += n;
    if (m->f.kind == NX_KIND_COLL) ep->unexp_coll += n;
    if (ep->unexp_bytes <= ep->unexp_budget) {
      *credit += n;
    } else { /* the sender waits until a receive takes it: stream and connection */
      rs->held += n;
      m->held += n;
      *conn_held += n;
    }
  }
  return 0;
}

int nx_rx_stream_data(nx_ep *ep, nx_rxstream *rs, const uint8_t *data, size_t len, int fin,
                      uint64_t *credit, uint64_t *conn_held) {
  *credit = 0;
  *conn_held = 0;
  size_t used = 0;
  nx_peer *p = rs->peer;
  if (rs->hdrlen < NX_FRAME_HDR_LEN) {
    size_t take = NX_MIN(NX_FRAME_HDR_LEN - rs->hdrlen, len);
    memcpy(rs->hdr + rs->hdrlen, data, take);
    rs->hdrlen += take;
    used = take;
    *credit += take;
    if (rs->hdrlen == NX_FRAME_HDR_LEN) {
      nx_frame f;
      if (nx_frame_decode(rs->hdr, NX_FRAME_HDR_LEN, &f))
        return nx_fail(NEXAR_ERR_PROTOCOL, "malformed frame header from rank %u", p->rank);
      if (f.src != p->rank)
        return nx_fail(NEXAR_ERR_PROTOCOL, "frame claims source rank %u on rank %u's connection",
                       f.src, p->rank);
      if (is_internal(f.kind) && f.length > NX_INTERNAL_MAX)
        return nx_fail(NEXAR_ERR_PROTOCOL, "control frame of %llu bytes from rank %u",
                       (unsigned long long)f.length, p->rank);
      if ((f.kind == NX_KIND_HEARTBEAT || f.kind == NX_KIND_ABORT || f.kind == NX_KIND_COLL_FAIL ||
           f.kind == NX_KIND_RNDV_DONE || f.kind == NX_KIND_SHM_OK || f.kind == NX_KIND_REVOKE ||
           f.kind == NX_KIND_PEER_GONE) &&
          f.length != 0)
        return nx_fail(NEXAR_ERR_PROTOCOL, "control frame with payload from rank %u", p->rank);
      if (f.kind == NX_KIND_LANE || f.kind == NX_KIND_RNDV_DATA)
        return nx_fail(NEXAR_ERR_PROTOCOL, "%s frame on a QUIC stream from rank %u",
                       f.kind == NX_KIND_LANE ? "lane" : "shared-memory", p->rank);
      if (f.kind == NX_KIND_AGREE && (f.length == 0 || f.length > NX_AGR_MAX_BYTES))
        return nx_fail(NEXAR_ERR_PROTOCOL, "agreement frame of %llu bytes from rank %u",
                       (unsigned long long)f.length, p->rank);
      if (f.kind == NX_KIND_RELAY && (f.length < NX_RELAY_HDR_LEN || f.length > NX_RELAY_BODY_MAX))
        return nx_fail(NEXAR_ERR_PROTOCOL, "relay frame of %llu bytes from rank %u",
                       (unsigned long long)f.length, p->rank);
      if (f.kind == NX_KIND_SHM_HELLO && f.length != NX_PATH_HELLO_LEN)
        return nx_fail(NEXAR_ERR_PROTOCOL, "malformed same-host probe from rank %u", p->rank);
      nx_msg *m = nx_calloc(1, sizeof *m);
      if (!m) return nx_fail(NEXAR_ERR_NOMEM, "frame from rank %u", p->rank);
      m->f = f;
      m->wire_len = (f.flags & NX_FLAG_RNDV) ? (uint64_t)f.status : f.length;
      m->peer = p;
      m->rs = rs;
      m->sid = rs->sid;
      rs->msg = m;
      p->st.messages_received++;
      order_insert(ep, p, m);
    } else if (fin) {
      return nx_fail(NEXAR_ERR_PROTOCOL, "truncated frame header from rank %u", p->rank);
    }
  }
  nx_msg *m = rs->msg;
  if (len > used && m) {
    int rc = consume(ep, rs, m, data + used, len - used, credit, conn_held);
    if (rc) return rc;
  } else if (len > used) {
    *credit += len - used; /* its message was dropped: discard the rest */
  }
  if (rs->boost == 1 && m) {
    rs->boost = 2;
    *credit += NX_STREAM_BOOST;
  }
  if (fin) {
    rs->fin = 1;
    if (!m) return 0;
    if (m->got != m->wire_len)
      return nx_fail(NEXAR_ERR_PROTOCOL, "rank %u ended a message after %llu of %llu bytes",
                     p->rank, (unsigned long long)m->got, (unsigned long long)m->wire_len);
    rs->msg = NULL;
    m->rs = NULL;
    m->complete = 1;
    if (m->ordered) msg_finish(ep, m);
  }
  return 0;
}

void nx_rx_stream_uncredit(nx_ep *ep, nx_rxstream *rs) {
  if (!rs->credit_queued) return;
  for (nx_rxstream **pp = &ep->credit_list; *pp; pp = &(*pp)->next_credit)
    if (*pp == rs) {
      *pp = rs->next_credit;
      break;
    }
  rs->credit_queued = 0;
}

int nx_rx_stream_close(nx_ep *ep, nx_rxstream *rs) {
  int rc = 0;
  nx_peer *p = rs->peer;
  rs->closed = 1;
  nx_rx_stream_uncredit(ep, rs);
  nx_msg *m = rs->msg;
  if (rs->hdrlen < NX_FRAME_HDR_LEN) { /* reset before its header: skip it in the order */
    if (rs->sid == p->rx_next_sid) {
      p->rx_next_sid += 4;
      order_deliver(ep, p);
    } else if (rs->sid > p->rx_next_sid) {
      if (p->nskip == p->capskip) {
        size_t nc = p->capskip ? p->capskip * 2 : 8;
        int64_t *a = nx_realloc(p->rx_skip, nc * sizeof *a);
        if (a) p->rx_skip = a, p->capskip = nc;
      }
      if (p->nskip < p->capskip)
        p->rx_skip[p->nskip++] = rs->sid;
      else /* its id would stall the order of every later stream */
        rc = nx_fail(NEXAR_ERR_NOMEM, "recording a cancelled stream of rank %u", p->rank);
    }
  } else if (m) { /* the sender gave up mid-message */
    m->rs = NULL;
    if (m->rcv) {
      nx_recv *r = m->rcv;
      char why[160];
      snprintf(why, sizeof why, "rank %u cancelled the message after %llu of %llu bytes", p->rank,
               (unsigned long long)m->got, (unsigned long long)m->f.length);
      r->msg = NULL;
      nx_recv_finish(ep, r, NEXAR_ERR_TIMEOUT, why);
      nx_msg_free(ep, m);
    } else if (m->ordered) {
      m->discard = 1;
      m->complete = 1;
      msg_finish(ep, m);
    } else {
      m->discard = 1; /* freed when its turn in the order comes */
      m->complete = 1;
    }
  }
  if (rs->all_prev)
    rs->all_prev->all_next = rs->all_next;
  else
    ep->rx_all = rs->all_next;
  if (rs->all_next) rs->all_next->all_prev = rs->all_prev;
  free(rs);
  return rc;
}

/* A message with all its payload: complete its receive or hand it to the
 * runtime. Queued unexpected messages simply wait for their receive. */
static void msg_finish(nx_ep *ep, nx_msg *m) {
  if (m->relq) { /* handled in its neighbour's stream order */
    nx_relay_arrived_locked(ep, m);
    return;
  }
  if (m->discard) {
    if (!m->queued) nx_msg_free(ep, m);
    return;
  }
  if (m->rcv && (m->f.flags & NX_FLAG_RNDV)) { /* copy from the sender's memory */
    nx_recv *r = m->rcv;
    r->msg = NULL;
    m->rcv = NULL;
    if (m->rs) m->rs->msg = NULL, m->rs = NULL;
    nx_rndv_read_locked(ep, m, r); /* frees m when done */
    return;
  }
  if (m->rcv) {
    nx_recv *r = m->rcv;
    r->msg = NULL;
    r->status = m->f.status;
    if (r->anylen) {
      r->anybuf = m->buf;
      r->anysize = m->got;
      m->buf = NULL;
    }
    nx_recv_finish(ep, r, 0, NULL);
    nx_msg_free(ep, m);
    return;
  }
  if (m->f.kind == NX_KIND_RPC_REQ && !m->queued) {
    nx_rpc_on_request_locked(ep, m);
    return;
  }
  if (m->f.kind == NX_KIND_AGREE) {
    nx_agr_on_frame_locked(ep, m->peer->rank, &m->f, m->buf, (size_t)m->got);
    nx_msg_free(ep, m);
    return;
  }
  if (is_rndv_ctl(m->f.kind)) {
    nx_rndv_on_frame_locked(ep, m);
    nx_msg_free(ep, m);
    return;
  }
  if (m->queued && nx_rndv_drop_cancelled_locked(ep, m)) return;
  if (m->queued) pthread_cond_broadcast(&ep->cv);
}

void nx_msg_finish_if_complete(nx_ep *ep, nx_msg *m) {
  if (m->complete) msg_finish(ep, m);
}

void nx_unexp_release(nx_ep *ep, const nx_msg *m, uint64_t n) {
  ep->unexp_bytes -= NX_MIN(ep->unexp_bytes, n);
  if (m->f.kind == NX_KIND_COLL) ep->unexp_coll -= NX_MIN(ep->unexp_coll, n);
}

void nx_msg_free(nx_ep *ep, nx_msg *m) {
  nx_rndv_decline_locked(ep, m);
  release_conn_credit(ep, m);
  if (m->buf && !m->rcv && !is_internal(m->f.kind)) {
    nx_unexp_release(ep, m, m->got);
  }
  if (m->rs) m->rs->msg = NULL, m->rs = NULL;
  free(m->buf);
  free(m);
}

/* Credit that application threads released: returned by the progress thread. */
void nx_ep_credit_flush(nx_ep *ep) {
  if (ep->conn_credit_dirty) {
    ep->conn_credit_dirty = 0;
    for (uint32_t i = 0; ep->peers && i < ep->world; i++) {
      nx_peer *p = ep->peers[i];
      if (p->conn_release) nx_qconn_extend_hook(p, -1, p->conn_release, 0);
      p->conn_release = 0;
    }
  }
  while (ep->credit_list) {
    nx_rxstream *rs = ep->credit_list;
    ep->credit_list = rs->next_credit;
    rs->credit_queued = 0;
    uint64_t boost = 0;
    if (rs->boost == 1) rs->boost = 2, boost = NX_STREAM_BOOST;
    nx_qconn_extend_hook(rs->peer, rs->sid, rs->held, boost);
    rs->held = 0;
  }
}

/* ------------------------------------------------------------ self-send */

int nx_local_deliver(nx_ep *ep, const nx_frame *f, const nexar_iovec *iov, size_t niov) {
  return nx_deliver_complete(ep, ep->peers[ep->rank], f, iov, niov);
}

int nx_deliver_complete(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *iov,
                        size_t niov) {
  if (nx_match_direct(ep, f, iov, niov)) return 0;
  uint64_t wire = (f->flags & NX_FLAG_RNDV) ? (uint64_t)f->status : f->length;
  nx_msg *m = nx_calloc(1, sizeof *m);
  if (!m) return nx_fail(NEXAR_ERR_NOMEM, "message from rank %u", p->rank);
  m->f = *f;
  m->peer = p;
  if (wire) {
    m->buf = malloc((size_t)wire);
    if (!m->buf) {
      free(m);
      return nx_fail(NEXAR_ERR_NOMEM, "message from rank %u: %llu bytes", p->rank,
                     (unsigned long long)wire);
    }
    m->bufcap = wire;
    uint64_t off = 0;
    for (size_t i = 0; i < niov; i++) {
      if (iov[i].len) memcpy(m->buf + off, iov[i].base, iov[i].len);
      off += iov[i].len;
    }
  }
  m->got = wire;
  m->wire_len = wire;
  m->complete = 1;
  m->ordered = 1;
  if (!is_internal(f->kind) && !(f->flags & NX_FLAG_RNDV)) {
    ep->unexp_bytes += wire;
    if (f->kind == NX_KIND_COLL) ep->unexp_coll += wire;
  }
  nx_match_arrived(ep, m);
  return 0;
}

void nx_msg_release_credit(nx_ep *ep, nx_msg *m) {
  release_credit(ep, m);
}
