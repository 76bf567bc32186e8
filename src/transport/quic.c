/* QUIC connections over ngtcp2 0.12 + GnuTLS: datagram dispatch, stream
 * I/O, timers, batching (setup, callbacks and admission: quic_conn.c).
 * Streams are bidirectional only: ngtcp2 0.12.1 never reports closing of a
 * remote unidirectional stream (upstream #662). The receiver FINs its side of
 * each remote stream with no data, so both halves close and credit returns. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "transport/quic_int.h"

/* The connection stops; a bound one reports it (the engine lets go of it,
 * and the next service pass frees it). */
static void conn_failed(nx_qconn *qc, int code, const char *why) {
  qc->dead = 1;
  if (qc->bound) qc->q->cbs.dead(qc->q->user, qc->peer, code, why);
}

/* Writes one CONNECTION_CLOSE packet straight to the socket. */
static void write_close(nx_qconn *qc, const ngtcp2_connection_close_error *ce) {
  ngtcp2_path_storage ps;
  ngtcp2_path_storage_zero(&ps);
  uint8_t buf[1500];
  ngtcp2_ssize n = ngtcp2_conn_write_connection_close(qc->conn, &ps.path, NULL, buf, sizeof buf, ce,
                                                      nx_now_ns());
  if (n > 0) {
    size_t l = (size_t)n;
    nx_udp_send(qc->q->cfg.udp, (struct sockaddr *)&qc->remote, qc->remotelen, buf, &l, 1);
  }
}

void nx_quic_on_datagram(nx_quic *q, const struct sockaddr *from, socklen_t fromlen, uint8_t *pkt,
                         size_t len) {
  ngtcp2_version_cid vc;
  nx_qconn *qc = NULL;
  int answered = 0;     /* a Retry went back: not garbage */
  if (len == 0) return; /* ngtcp2 0.12 asserts on an empty datagram */
  if (ngtcp2_pkt_decode_version_cid(&vc, pkt, len, NX_SCID_LEN) != 0 ||
      (!(qc = nx_qc_cid_find(q, vc.dcid, vc.dcidlen)) &&
       !(qc = nx_qc_accept(q, from, fromlen, pkt, len, &answered)))) {
    if (answered) return;
    /* not QUIC, or not for a connection of ours: dropped, and reported (at
     * most once a second, so a flood cannot flood the log too) */
    q->dropped++;
    uint64_t now = nx_now_ns();
    if (now - q->dropped_logged_ns > 1000000000ull) {
      q->dropped_logged_ns = now;
      NX_WARN("dropped %llu datagram(s) that are not QUIC packets of this cluster (last: %zu "
              "bytes)",
              (unsigned long long)q->dropped, len);
    }
    return;
  }
  if (qc->dead) return;
  ngtcp2_path path = nx_qc_make_path(qc);
  path.remote.addr = (ngtcp2_sockaddr *)from;
  path.remote.addrlen = fromlen;
  ngtcp2_pkt_info pi = {0};
  int rv = ngtcp2_conn_read_pkt(qc->conn, &path, &pi, pkt, len, nx_now_ns());
  /* ACK-only packets are ~40 bytes; count only the ones that likely carry
   * data, as ngtcp2's own "ACK every second ack-eliciting packet" rule does */
  if (len > 64) qc->rx_since_write++;
  qc->rx_bytes_since_write += len;
  if (qc->bound) q->cbs.heard(q->user, qc->peer, nx_now_ns());
  if (rv != 0) {
    char why[200];
    int code = NEXAR_ERR_PEER_LOST;
    if (rv == NGTCP2_ERR_DRAINING || rv == NGTCP2_ERR_CLOSING) {
      ngtcp2_connection_close_error ce;
      ngtcp2_conn_get_connection_close_error(qc->conn, &ce);
      int n = (int)NX_MIN(ce.reasonlen, 120);
      if (ce.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION &&
          ce.error_code == NX_APP_GOODBYE && qc->bound) {
        qc->dead = 1; /* it left after delivering everything: a departure, not a failure */
        q->cbs.departed(q->user, qc->peer);
        return;
      }
      snprintf(why, sizeof why, "it closed the connection%s%.*s", n ? ": " : "", n,
               ce.reason ? (const char *)ce.reason : "");
    } else if (rv == NGTCP2_ERR_CALLBACK_FAILURE && qc->err_code) {
      code = qc->err_code; /* a local failure (out of memory): closed with the reason */
      snprintf(why, sizeof why, "%s", qc->proto_err);
    } else if (rv == NGTCP2_ERR_CALLBACK_FAILURE && qc->proto_err[0]) {
      code = NEXAR_ERR_PROTOCOL; /* it sent bytes we refused: closed with a reason */
      snprintf(why, sizeof why, "protocol violation: %s", qc->proto_err);
    } else if (rv == NGTCP2_ERR_CRYPTO || rv == NGTCP2_ERR_CALLBACK_FAILURE) {
      snprintf(why, sizeof why, "handshake failed: %s",
               q->auth_why[0] ? q->auth_why : ngtcp2_strerror(rv));
      if (qc->bound && !qc->hs_done) code = NEXAR_ERR_AUTH;
    } else {
      snprintf(why, sizeof why, "QUIC error: %s", ngtcp2_strerror(rv));
    }
    if (!qc->bound) { /* never authenticated (or replaced): drop quietly */
      nx_qc_refused(q, why, from);
      nx_qc_free(qc);
      return;
    }
    if (rv != NGTCP2_ERR_DRAINING && rv != NGTCP2_ERR_CLOSING) {
      /* tell the peer why, so it fails fast too */
      ngtcp2_connection_close_error ce;
      ngtcp2_connection_close_error_set_transport_error_liberr(&ce, rv, (uint8_t *)why,
                                                               strlen(why));
      write_close(qc, &ce);
    }
    conn_failed(qc, code, why);
    return;
  }
  memcpy(&qc->remote, from, fromlen);
  qc->remotelen = fromlen;
}

/* ------------------------------------------------------------- writing */

static void act_push(nx_qconn *qc, nx_qtx *m) {
  m->next = NULL;
  m->in_queue = 1;
  if (qc->act_tail)
    qc->act_tail->next = m;
  else
    qc->act_head = m;
  qc->act_tail = m;
}

static nx_qtx *act_pop(nx_qconn *qc) {
  nx_qtx *m = qc->act_head;
  if (!m) return NULL;
  qc->act_head = m->next;
  if (!qc->act_head) qc->act_tail = NULL;
  m->next = NULL;
  m->in_queue = 0;
  return m;
}

void nx_qconn_reset(nx_qconn *qc, nx_qtx *m) {
  if (!qc || qc->dead) return;
  if (qc->nresets == qc->capresets) {
    size_t nc = qc->capresets ? qc->capresets * 2 : 8;
    nx_qtx **a = realloc(qc->resets, nc * sizeof *a);
    if (!a) return; /* the send then completes at its final ack or when the peer dies */
    qc->resets = a, qc->capresets = nc;
  }
  qc->resets[qc->nresets++] = m;
}

static void act_remove(nx_qconn *qc, nx_qtx *m) {
  nx_qtx *prev = NULL;
  for (nx_qtx *x = qc->act_head; x; prev = x, x = x->next) {
    if (x != m) continue;
    if (prev)
      prev->next = x->next;
    else
      qc->act_head = x->next;
    if (qc->act_tail == x) qc->act_tail = prev;
    x->next = NULL;
    x->in_queue = 0;
    return;
  }
}

/* Opens streams for the messages the engine hands over, in its order:
 * stream ids give the receiver the send order (non-overtaking per source and
 * tag). Which message goes next, given the credit and streams left, is the
 * engine's policy (tx_next). Once no stream is left the engine answers NULL;
 * the peer grants more as streams close. */
static void open_streams(nx_qconn *qc) {
  nx_quic *q = qc->q;
  for (;;) {
    nx_qtx *m = q->cbs.tx_next(q->user, qc->peer, ngtcp2_conn_get_max_data_left(qc->conn),
                               ngtcp2_conn_get_streams_bidi_left(qc->conn));
    if (!m) break;
    int64_t sid;
    if (ngtcp2_conn_open_bidi_stream(qc->conn, &sid, m)) { /* out of memory in ngtcp2 */
      q->cbs.tx_return(q->user, qc->peer, m);
      break;
    }
    m->sid = sid;
    act_push(qc, m);
  }
}

static size_t build_vecs(nx_qtx *m, ngtcp2_vec *v, size_t max) {
  size_t n = 0;
  uint64_t pos = m->sent;
  if (pos < NX_FRAME_HDR_LEN) {
    v[n].base = m->hdr + pos;
    v[n].len = (size_t)(NX_FRAME_HDR_LEN - pos);
    n++;
    pos = NX_FRAME_HDR_LEN;
  }
  uint64_t off = pos - NX_FRAME_HDR_LEN;
  for (size_t i = 0; i < m->niov && n < max; i++) {
    size_t l = m->iov[i].len;
    if (off >= l) {
      off -= l;
      continue;
    }
    v[n].base = (uint8_t *)m->iov[i].base + off;
    v[n].len = (size_t)(l - off);
    off = 0;
    n++;
  }
  return n;
}

/* The lowest stream id among holdable messages with bytes to send (m was
 * just popped off the list). Only when the connection is below its reserve. */
static int64_t oldest_holdable(const nx_qconn *qc, const nx_qtx *m) {
  int64_t best = m->sid;
  for (const nx_qtx *x = qc->act_head; x; x = x->next)
    if (x->holdable && x->sid < best) best = x->sid;
  return best;
}

static void flush(nx_qconn *qc, size_t *lens, size_t *npk, size_t *off) {
  if (*npk)
    nx_udp_send(qc->q->cfg.udp, (struct sockaddr *)&qc->remote, qc->remotelen, qc->txbuf, lens,
                *npk);
  *npk = 0;
  *off = 0;
}

/* Appends m to a list of messages waiting for credit. */
static void park(nx_qtx **head, nx_qtx **tail, nx_qtx *m) {
  m->next = NULL;
  if (*tail)
    (*tail)->next = m;
  else
    *head = m;
  *tail = m;
}

/* Writes one burst of packets: FINs for remote streams, then message data
 * round-robin across streams, then ACK/control-only packets. */
static int conn_write(nx_qconn *qc, uint64_t now) {
  if (qc->dead) return 0;
  if (!qc->txbuf && !(qc->txbuf = malloc((size_t)NX_BURST * 65536))) return 0;
  nx_quic *q = qc->q;
  if (qc->bound && qc->hs_done) open_streams(qc);
  for (size_t i = 0; i < qc->nresets; i++) { /* cancelled sends: ngtcp2 lets go of them */
    nx_qtx *m = qc->resets[i];
    ngtcp2_conn_shutdown_stream(qc->conn, m->sid, 1);
    ngtcp2_conn_set_stream_user_data(qc->conn, m->sid, NULL);
    if (m->in_queue) act_remove(qc, m);
    q->cbs.tx_done(q->user, m);
  }
  qc->nresets = 0;
  size_t maxlen = ngtcp2_conn_get_max_tx_udp_payload_size(qc->conn);
  size_t pathlen = ngtcp2_conn_get_path_max_tx_udp_payload_size(qc->conn);
  size_t burst = NX_BURST;
  if (burst * pathlen > (size_t)NX_BURST * 65536) burst = (size_t)NX_BURST * 65536 / pathlen;
  size_t lens[NX_BURST], npk = 0, off = 0, tot = 0;
  nx_qtx *blocked = NULL, *blocked_tail = NULL;
  /* The reverse-half FINs carry no information the peer waits for (they only
   * close streams and return stream credit), so they ride along with data or
   * go out in batches: a packet of FINs alone per message would double the
   * packet count of small-message traffic. */
  size_t nfins = qc->nfins;
  if (nfins && !qc->act_head && nfins < NX_FIN_BATCH && now < qc->fins_since + NX_FIN_DELAY_NS)
    nfins = 0;
  size_t fin_i = 0;
  int64_t oldest = -2; /* the oldest holdable message's stream, once needed */
  ngtcp2_path_storage ps;
  ngtcp2_path_storage_zero(&ps);
  ngtcp2_pkt_info pi;
  int rc = 0;
  while (tot < burst) {
    nx_qtx *m = NULL;
    int64_t sid = -1;
    ngtcp2_vec vec[16];
    size_t nvec = 0;
    uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_NONE;
    if (fin_i < nfins) {
      sid = qc->fins[fin_i];
      flags = NGTCP2_WRITE_STREAM_FLAG_MORE | NGTCP2_WRITE_STREAM_FLAG_FIN;
    } else if ((m = act_pop(qc)) != NULL) {
      /* below the reserve a holdable message sends at most its header, so
       * the receiver can order the streams after it */
      int hdr_only = 0;
      if (m->holdable) {
        uint64_t left = ngtcp2_conn_get_max_data_left(qc->conn);
        if (left < q->cfg.conn_reserve) {
          if (oldest < -1) oldest = oldest_holdable(qc, m);
          hdr_only = !(m->sid == oldest && left > q->cfg.conn_reserve / 2);
        }
      }
      if (hdr_only && m->sent >= NX_FRAME_HDR_LEN) {
        /* leave the rest of the window to other traffic (cfg.conn_reserve) */
        park(&blocked, &blocked_tail, m);
        continue;
      }
      sid = m->sid;
      nvec = build_vecs(m, vec, hdr_only ? 1 : 16);
      flags = NGTCP2_WRITE_STREAM_FLAG_MORE;
      uint64_t left = m->total - m->sent, inv = 0;
      for (size_t i = 0; i < nvec; i++)
        inv += vec[i].len;
      if (inv == left) flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
    }
    if (off + maxlen > (size_t)NX_BURST * 65536) flush(qc, lens, &npk, &off);
    ngtcp2_ssize ndata = -1;
    ngtcp2_ssize nw = ngtcp2_conn_writev_stream(qc->conn, &ps.path, &pi, qc->txbuf + off, maxlen,
                                                &ndata, flags, sid, nvec ? vec : NULL, nvec, now);
    if (!m && sid >= 0) { /* a FIN-only write for a remote stream */
      if (nw == NGTCP2_ERR_WRITE_MORE || nw == NGTCP2_ERR_STREAM_SHUT_WR ||
          nw == NGTCP2_ERR_STREAM_NOT_FOUND || nw == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
        fin_i++;
        continue;
      }
      if (nw >= 0 && ndata >= 0) fin_i++;
    } else if (m) {
      if (ndata > 0) m->sent += (uint64_t)ndata;
      if (nw == NGTCP2_ERR_WRITE_MORE) {
        if (m->sent < m->total) act_push(qc, m);
        continue;
      }
      if (nw == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
        park(&blocked, &blocked_tail, m);
        continue;
      }
      if (nw == NGTCP2_ERR_STREAM_SHUT_WR || nw == NGTCP2_ERR_STREAM_NOT_FOUND) continue;
      if (m->sent < m->total) act_push(qc, m);
    }
    if (nw < 0) {
      if (ngtcp2_err_is_fatal((int)nw)) {
        rc = (int)nw;
        break;
      }
      continue;
    }
    if (nw == 0) { /* congestion, pacing or nothing left */
      if (m || fin_i < qc->nfins)
        NX_TRACE("conn_write: blocked with data pending (expiry in %lld us)",
                 (long long)(ngtcp2_conn_get_expiry(qc->conn) - now) / 1000);
      break;
    }
    size_t at = off;
    if (npk > 0 && (size_t)nw > lens[0]) { /* GSO: segments must not grow */
      flush(qc, lens, &npk, &off);
      memmove(qc->txbuf, qc->txbuf + at, (size_t)nw);
    }
    lens[npk++] = (size_t)nw;
    off += (size_t)nw;
    tot++;
    if ((size_t)nw < lens[0]) flush(qc, lens, &npk, &off); /* a short packet ends a batch */
  }
  flush(qc, lens, &npk, &off);
  /* remaining FINs and blocked streams wait for the next round */
  if (fin_i) {
    memmove(qc->fins, qc->fins + fin_i, (qc->nfins - fin_i) * sizeof *qc->fins);
    qc->nfins -= fin_i;
    qc->fins_since = now;
  }
  while (blocked) {
    nx_qtx *b = blocked;
    blocked = b->next;
    act_push(qc, b);
  }
  ngtcp2_conn_update_pkt_tx_time(qc->conn, now);
  if (qc->bound) {
    ngtcp2_conn_stat cs;
    ngtcp2_conn_get_conn_stat(qc->conn, &cs);
    uint64_t lost = 0;
    /* ngtcp2 0.12 exposes loss recovery episodes and PTOs, not a per-packet
     * loss count: each new episode or probe timeout counts once */
    if (cs.congestion_recovery_start_ts != qc->last_recovery_ts) {
      if (qc->last_recovery_ts != 0 || cs.congestion_recovery_start_ts != UINT64_MAX) lost++;
      qc->last_recovery_ts = cs.congestion_recovery_start_ts;
    }
    if (cs.pto_count > qc->last_pto) lost += cs.pto_count - qc->last_pto;
    qc->last_pto = cs.pto_count;
    q->cbs.path_stats(q->user, qc->peer, (double)cs.smoothed_rtt / 1000.0, lost);
  }
  return rc;
}

uint64_t nx_quic_service(nx_quic *q, uint64_t now) {
  uint64_t next = UINT64_MAX;
  nx_qconn *qc = q->conns;
  while (qc) {
    nx_qconn *nxt = qc->next;
    if (qc->dead) {
      if (!qc->bound) nx_qc_free(qc);
      qc = nxt;
      continue;
    }
    /* With nothing of ours to send, the only timers are delayed ACKs (which
     * ngtcp2 arms at srtt/8, a few microseconds here) and loss detection: a
     * little slack lets a lone ACK ride on the application's next message
     * instead of costing a packet and a wake-up of the peer each time. Bulk
     * traffic (two or more packets since the last write), pending data,
     * credit updates and handshakes are written at once. */
    if (qc->closed_streams && qc->closed_since + NX_STREAM_CREDIT_DELAY_NS <= now) {
      ngtcp2_conn_extend_max_streams_bidi(qc->conn, qc->closed_streams);
      qc->closed_streams = 0;
      qc->force_write = 1;
    }
    int up = qc->bound && qc->hs_done;
    int work =
        qc->act_head || (up && q->cbs.tx_waiting(q->user, qc->peer)) || qc->nresets ||
        qc->force_write || qc->rx_since_write >= 2 || qc->rx_bytes_since_write >= 4096 ||
        (qc->nfins && (qc->nfins >= NX_FIN_BATCH || qc->fins_since + NX_FIN_DELAY_NS <= now));
    uint64_t slack = (!up || work) ? 0 : NX_ACK_SLACK_NS;
    uint64_t exp = ngtcp2_conn_get_expiry(qc->conn);
    if (exp != UINT64_MAX) exp += slack;
    int due = exp <= now;
    if (due) {
      int rv = ngtcp2_conn_handle_expiry(qc->conn, now);
      if (rv) {
        conn_failed(qc, NEXAR_ERR_PEER_LOST,
                    rv == NGTCP2_ERR_IDLE_CLOSE ? "idle timeout" : "handshake or timer failure");
        if (!qc->bound) nx_qc_free(qc);
        qc = nxt;
        continue;
      }
    }
    if (due || work || !up) {
      int rv = conn_write(qc, now);
      qc->rx_since_write = 0;
      qc->rx_bytes_since_write = 0;
      qc->force_write = 0;
      if (rv && qc->err_code) {
        ngtcp2_connection_close_error ce;
        ngtcp2_connection_close_error_set_transport_error_liberr(
            &ce, NGTCP2_ERR_CALLBACK_FAILURE, (uint8_t *)qc->proto_err, strlen(qc->proto_err));
        write_close(qc, &ce);
        conn_failed(qc, qc->err_code, qc->proto_err);
      } else if (rv) {
        conn_failed(qc, NEXAR_ERR_PEER_LOST, ngtcp2_strerror(rv));
      }
    }
    exp = ngtcp2_conn_get_expiry(qc->conn);
    if (exp != UINT64_MAX) exp += slack;
    if (qc->nfins && qc->fins_since + NX_FIN_DELAY_NS < exp) exp = qc->fins_since + NX_FIN_DELAY_NS;
    if (qc->closed_streams && qc->closed_since + NX_STREAM_CREDIT_DELAY_NS < exp)
      exp = qc->closed_since + NX_STREAM_CREDIT_DELAY_NS;
    if (exp < next) next = exp;
    qc = nxt;
  }
  return next;
}

void nx_qconn_extend(nx_qconn *qc, int64_t sid, uint64_t n, uint64_t boost) {
  if (!qc || qc->dead) return;
  if (sid < 0)
    ngtcp2_conn_extend_max_offset(qc->conn, n);
  else
    ngtcp2_conn_extend_max_stream_offset(qc->conn, sid, n + boost);
  qc->force_write = 1; /* a sender may be waiting for this credit */
}

/* Writes a CONNECTION_CLOSE with an application code and reason (if the
 * connection can still send one) straight to the socket. */
static void send_close(nx_qconn *qc, uint64_t code, const char *reason) {
  if (qc->dead || !qc->conn) return;
  ngtcp2_connection_close_error ce;
  size_t rl = reason ? NX_MIN(strlen(reason), 120) : 0;
  ngtcp2_connection_close_error_set_application_error(&ce, code, (const uint8_t *)reason, rl);
  write_close(qc, &ce);
}

void nx_qconn_abandon(nx_qconn *qc, const char *reason) {
  if (!qc) return;
  /* a peer we give up on (its bulk stream broke, it went silent) learns it
   * at once instead of after its own heartbeat timeout */
  if (reason) send_close(qc, NX_APP_GAVE_UP, reason);
  /* its queued messages are freed by the caller: forget them first */
  qc->dead = 1;
  qc->bound = 0;
  qc->act_head = qc->act_tail = NULL;
  qc->nresets = 0;
}

void nx_qconn_unbind(nx_qconn *qc) {
  if (qc) qc->bound = 0;
}

void nx_quic_close_all(nx_quic *q) {
  while (q->conns) {
    nx_qconn *qc = q->conns;
    send_close(qc, NX_APP_GOODBYE, NULL);
    /* drop queued and in-flight messages' references first */
    while (qc->act_head) {
      nx_qtx *m = act_pop(qc);
      (void)m; /* freed by the engine's teardown through its own message list */
    }
    nx_qc_free(qc);
  }
}

const char *nx_quic_auth_why(const nx_quic *q) {
  return q->auth_why;
}

uint64_t nx_quic_dropped(const nx_quic *q) {
  return q->dropped;
}
