/* QUIC connection setup over ngtcp2 0.12 + GnuTLS: the connection-id table,
 * the ngtcp2 callbacks (stream data into msg.c), rank-binding mutual TLS,
 * settings and flow-control windows, client connections, and the admission
 * of handshakes (member addresses, Retry tokens, pending bounds). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "transport/pki.h"
#include "transport/quic_int.h"

/* ------------------------------------------------------------ CID table */

/* 0, or NEXAR_ERR_NOMEM: the connection could not receive on that id. */
static int cid_add(nx_ep *ep, const uint8_t *cid, size_t len, nx_qconn *qc) {
  for (size_t i = 0; i < ep->ncids_cap; i++) {
    if (!ep->cids[i].qc) {
      memcpy(ep->cids[i].cid, cid, len);
      ep->cids[i].len = len;
      ep->cids[i].qc = qc;
      return 0;
    }
  }
  size_t cap = ep->ncids_cap ? ep->ncids_cap * 2 : 64;
  struct nx_cident *n = nx_realloc(ep->cids, cap * sizeof *n);
  if (!n) return nx_fail(NEXAR_ERR_NOMEM, "growing the connection-id table to %zu", cap);
  memset(n + ep->ncids_cap, 0, (cap - ep->ncids_cap) * sizeof *n);
  ep->cids = n;
  ep->ncids_cap = cap;
  return cid_add(ep, cid, len, qc);
}

/* A callback failed for a local reason (out of memory): the connection
 * closes with that code and reason. */
static int local_failure(nx_qconn *qc, int code) {
  qc->err_code = code;
  snprintf(qc->proto_err, sizeof qc->proto_err, "%s", nexar_last_error());
  return NGTCP2_ERR_CALLBACK_FAILURE;
}

static void cid_del(nx_ep *ep, const uint8_t *cid, size_t len) {
  for (size_t i = 0; i < ep->ncids_cap; i++)
    if (ep->cids[i].qc && ep->cids[i].len == len && !memcmp(ep->cids[i].cid, cid, len))
      ep->cids[i].qc = NULL;
}

nx_qconn *nx_qc_cid_find(nx_ep *ep, const uint8_t *cid, size_t len) {
  for (size_t i = 0; i < ep->ncids_cap; i++)
    if (ep->cids[i].qc && ep->cids[i].len == len && !memcmp(ep->cids[i].cid, cid, len))
      return ep->cids[i].qc;
  return NULL;
}

/* ------------------------------------------------------------ callbacks */

static void cb_rand(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx) {
  (void)ctx;
  nx_random(dest, len);
}

static int cb_new_cid(ngtcp2_conn *conn, ngtcp2_cid *cid, uint8_t *token, size_t cidlen, void *ud) {
  nx_qconn *qc = ud;
  if (nx_random(cid->data, cidlen) || nx_random(token, NGTCP2_STATELESS_RESET_TOKENLEN))
    return NGTCP2_ERR_CALLBACK_FAILURE;
  cid->datalen = cidlen;
  if (cid_add(qc->ep, cid->data, cidlen, qc)) return local_failure(qc, NEXAR_ERR_NOMEM);
  return 0;
}

static int cb_remove_cid(ngtcp2_conn *conn, const ngtcp2_cid *cid, void *ud) {
  nx_qconn *qc = ud;
  cid_del(qc->ep, cid->data, cid->datalen);
  return 0;
}

static int push_id(int64_t **arr, size_t *n, size_t *cap, int64_t sid) {
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 16;
    int64_t *a = realloc(*arr, nc * sizeof *a);
    if (!a) return -1;
    *arr = a, *cap = nc;
  }
  (*arr)[(*n)++] = sid;
  return 0;
}

static int is_local_stream(const nx_qconn *qc, int64_t sid) {
  return ((sid & 1) != 0) == (qc->is_server != 0);
}

static int cb_stream_open(ngtcp2_conn *conn, int64_t sid, void *ud) {
  nx_qconn *qc = ud;
  if (!qc->peer || (sid & 2)) return NGTCP2_ERR_CALLBACK_FAILURE; /* uni streams: unused */
  nx_rxstream *rs = NULL;
  nx_rx_stream_open(qc->ep, qc->peer, sid, &rs);
  if (!rs) return NGTCP2_ERR_CALLBACK_FAILURE;
  ngtcp2_conn_set_stream_user_data(conn, sid, rs);
  if (qc->nfins == 0) qc->fins_since = nx_now_ns();
  if (push_id(&qc->fins, &qc->nfins, &qc->capfins, sid)) return NGTCP2_ERR_CALLBACK_FAILURE;
  return 0;
}

static int cb_recv_stream_data(ngtcp2_conn *conn, uint32_t flags, int64_t sid, uint64_t offset,
                               const uint8_t *data, size_t len, void *ud, void *sud) {
  nx_qconn *qc = ud;
  int fin = (flags & NGTCP2_STREAM_DATA_FLAG_FIN) != 0;
  if (is_local_stream(qc, sid)) {
    /* the reverse half of our own message stream carries nothing */
    return len ? NGTCP2_ERR_CALLBACK_FAILURE : 0;
  }
  nx_rxstream *rs = sud;
  if (!rs) { /* stream already finished (its data was discarded) */
    ngtcp2_conn_extend_max_offset(conn, len);
    return 0;
  }
  uint64_t credit = 0, held = 0;
  int rc = nx_rx_stream_data(qc->ep, rs, data, len, fin, &credit, &held);
  /* connection credit: all but unexpected bytes over the budget, which wait
   * for their receive (nx_qconn_extend with sid < 0) */
  if (len > held) ngtcp2_conn_extend_max_offset(conn, len - held);
  if (rc) {
    snprintf(qc->proto_err, sizeof qc->proto_err, "%s", nexar_last_error());
    NX_WARN("closing the connection to rank %u: stream %lld: %s", qc->peer ? qc->peer->rank : 0,
            (long long)sid, qc->proto_err);
    return NGTCP2_ERR_CALLBACK_FAILURE;
  }
  if (credit) ngtcp2_conn_extend_max_stream_offset(conn, sid, credit);
  return 0;
}

static int cb_acked(ngtcp2_conn *conn, int64_t sid, uint64_t offset, uint64_t len, void *ud,
                    void *sud) {
  nx_txmsg *m = sud;
  if (!m || !is_local_stream(ud, sid)) return 0;
  nx_tx_acked(((nx_qconn *)ud)->ep, m, offset, len);
  if (m->acked >= m->total) {
    ngtcp2_conn_set_stream_user_data(conn, sid, NULL);
    nx_tx_free(m);
  }
  return 0;
}

static int cb_stream_close(ngtcp2_conn *conn, uint32_t flags, int64_t sid, uint64_t app_error,
                           void *ud, void *sud) {
  nx_qconn *qc = ud;
  if (is_local_stream(qc, sid)) {
    nx_txmsg *m = sud;
    if (m) { /* reset or closed before the final ack: nothing will touch it again */
      m->acked = m->total;
      nx_tx_acked(qc->ep, m, 0, 0);
      nx_tx_free(m);
    }
    return 0;
  }
  if (sud && nx_rx_stream_close(qc->ep, sud)) {
    ngtcp2_conn_set_stream_user_data(conn, sid, NULL);
    return local_failure(qc, NEXAR_ERR_NOMEM);
  }
  /* Stream credit goes back in batches: one MAX_STREAMS frame per closed
   * stream would add a packet to every small message. */
  if (qc->closed_streams++ == 0) qc->closed_since = nx_now_ns();
  if (qc->closed_streams >= NX_STREAM_CREDIT_BATCH) {
    ngtcp2_conn_extend_max_streams_bidi(conn, qc->closed_streams);
    qc->closed_streams = 0;
    qc->force_write = 1; /* the peer may be waiting for stream credit */
  }
  return 0;
}

static int cb_reset(ngtcp2_conn *conn, int64_t sid, uint64_t final_size, uint64_t app_error,
                    void *ud, void *sud) {
  return 0; /* the close callback follows and handles it */
}

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref) {
  return ((nx_qconn *)ref->user_data)->conn;
}

/* GnuTLS verify hook: the certificate must chain to the cluster CA and name
 * the rank this connection must come from. */
static int verify_peer(gnutls_session_t s) {
  ngtcp2_crypto_conn_ref *ref = gnutls_session_get_ptr(s);
  nx_qconn *qc = ref->user_data;
  nx_ep *ep = qc->ep;
  uint32_t rank;
  if (nx_tls_peer_rank(s, ep->cluster_id, &rank) != 0) {
    snprintf(ep->auth_why, sizeof ep->auth_why, "refused a certificate: %s", nexar_last_error());
    NX_WARN("mesh handshake: %s", ep->auth_why);
    return -1;
  }
  if (!qc->is_server) {
    if (rank != qc->expect_rank) {
      snprintf(ep->auth_why, sizeof ep->auth_why,
               "expected rank %u at %s, its certificate names rank %u", qc->expect_rank,
               ep->peers[qc->expect_rank].addrstr, rank);
      NX_WARN("mesh handshake: %s", ep->auth_why);
      return -1;
    }
    return 0;
  }
  /* Lower ranks dial higher ones, so a client must have a lower rank. */
  if (rank >= ep->rank || rank >= ep->world) {
    snprintf(ep->auth_why, sizeof ep->auth_why,
             "a client presents rank %u's certificate, but only lower ranks dial rank %u", rank,
             ep->rank);
    NX_WARN("mesh handshake: %s", ep->auth_why);
    return -1;
  }
  nx_peer *p = &ep->peers[rank];
  if (p->qc && p->qc != qc && p->state == NX_PEER_UP) {
    NX_WARN("mesh handshake: rank %u is already connected; refusing a second connection", rank);
    return -1;
  }
  if (p->qc && p->qc != qc) p->qc = NULL; /* a reconnect replaces a stale half-open one */
  qc->peer = p;
  p->qc = qc;
  p->rx_next_sid = 0; /* the client's bidi streams: 0, 4, 8, ... */
  return 0;
}

static int cb_handshake_completed(ngtcp2_conn *conn, void *ud) {
  nx_qconn *qc = ud;
  if (!qc->peer) return NGTCP2_ERR_CALLBACK_FAILURE;
  nx_peer *p = qc->peer;
  /* the rest of the connection window (not at creation: a server's local
   * transport parameters are committed later, which resets the credit) */
  ngtcp2_conn_extend_max_offset(conn, NX_CONN_WINDOW - NX_CONN_PARAM);
  p->state = NX_PEER_UP;
  p->last_heard_ns = nx_now_ns();
  NX_DEBUG("connected to rank %u at %s", p->rank, p->addrstr);
  nx_rndv_hello_locked(qc->ep, p);
  pthread_cond_broadcast(&qc->ep->cv);
  return 0;
}

static void fill_callbacks(ngtcp2_callbacks *cb, int server) {
  memset(cb, 0, sizeof *cb);
  if (server) {
    cb->recv_client_initial = ngtcp2_crypto_recv_client_initial_cb;
  } else {
    cb->client_initial = ngtcp2_crypto_client_initial_cb;
    cb->recv_retry = ngtcp2_crypto_recv_retry_cb;
  }
  cb->recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb;
  cb->encrypt = ngtcp2_crypto_encrypt_cb;
  cb->decrypt = ngtcp2_crypto_decrypt_cb;
  cb->hp_mask = ngtcp2_crypto_hp_mask_cb;
  cb->update_key = ngtcp2_crypto_update_key_cb;
  cb->delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb;
  cb->delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb;
  cb->get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb;
  cb->version_negotiation = ngtcp2_crypto_version_negotiation_cb;
  cb->rand = cb_rand;
  cb->get_new_connection_id = cb_new_cid;
  cb->remove_connection_id = cb_remove_cid;
  cb->recv_stream_data = cb_recv_stream_data;
  cb->acked_stream_data_offset = cb_acked;
  cb->stream_open = cb_stream_open;
  cb->stream_close = cb_stream_close;
  cb->stream_reset = cb_reset;
  cb->handshake_completed = cb_handshake_completed;
}

static void fill_settings(nx_qconn *qc, ngtcp2_settings *st, ngtcp2_transport_params *tp) {
  ngtcp2_settings_default(st);
  ngtcp2_transport_params_default(tp);
  st->initial_ts = nx_now_ns();
  st->cc_algo = qc->ep->cc_algo;
  /* Large datagrams on paths that carry them (loopback: ~64 KiB). 0.12 needs
   * shaping off, else it sends 1200-byte packets whatever the path allows. */
  size_t payload = nx_udp_path_payload((struct sockaddr *)&qc->remote, qc->remotelen);
  st->max_tx_udp_payload_size = payload;
  st->no_tx_udp_payload_size_shaping = 1;
  st->max_stream_window = 32u << 20;
  st->initial_rtt = 1 * NGTCP2_MILLISECONDS;
  /* A client waits for its peer as long as formation may take; a server
   * gives an unauthenticated handshake 10 s, so half-open ones do not pile up */
  uint64_t hs_ms = qc->ep->cfg.connect_timeout_ms ? qc->ep->cfg.connect_timeout_ms : 3600000u;
  if (qc->is_server && hs_ms > NX_SERVER_HANDSHAKE_MS) hs_ms = NX_SERVER_HANDSHAKE_MS;
  st->handshake_timeout = NX_MAX(hs_ms, 1000u) * NGTCP2_MILLISECONDS;
  /* a fixed connection window: a receiver that holds unexpected data over
   * its budget withholds this credit, and each peer can then add at most the
   * window (auto-tuning would let that grow to max_window) */
  st->max_window = 0;
  tp->initial_max_data = NX_CONN_PARAM; /* the rest: cb_handshake_completed */
  tp->initial_max_stream_data_bidi_local = NX_STREAM_WINDOW;
  tp->initial_max_stream_data_bidi_remote = NX_STREAM_WINDOW;
  tp->initial_max_stream_data_uni = 0;
  tp->initial_max_streams_bidi = NX_MAX_STREAMS;
  tp->initial_max_streams_uni = 0;
  /* Liveness is judged by our heartbeats; idle close is only a backstop. */
  tp->max_idle_timeout = (qc->ep->hb_timeout_ns * 3 / 1000000 + 1000) * NGTCP2_MILLISECONDS;
  tp->max_udp_payload_size = 65527;
  tp->active_connection_id_limit = 4;
}

static int tls_new(nx_qconn *qc) {
  unsigned flags = (qc->is_server ? GNUTLS_SERVER : GNUTLS_CLIENT) | GNUTLS_NO_END_OF_EARLY_DATA;
  if (gnutls_init(&qc->tls, flags) < 0) return -1;
  if (gnutls_priority_set_direct(qc->tls, NX_PRIO, NULL) < 0) return -1;
  int rc = qc->is_server ? ngtcp2_crypto_gnutls_configure_server_session(qc->tls)
                         : ngtcp2_crypto_gnutls_configure_client_session(qc->tls);
  if (rc) return -1;
  if (gnutls_credentials_set(qc->tls, GNUTLS_CRD_CERTIFICATE, qc->ep->creds) < 0) return -1;
  if (qc->is_server)
    gnutls_certificate_server_set_request(qc->tls, GNUTLS_CERT_REQUIRE);
  else
    gnutls_server_name_set(qc->tls, GNUTLS_NAME_DNS, "nexar", 5);
  gnutls_session_set_verify_function(qc->tls, verify_peer);
  gnutls_datum_t alpn = {(unsigned char *)NX_ALPN, sizeof NX_ALPN - 1};
  gnutls_alpn_set_protocols(qc->tls, &alpn, 1, GNUTLS_ALPN_MANDATORY);
  qc->ref.get_conn = get_conn;
  qc->ref.user_data = qc;
  gnutls_session_set_ptr(qc->tls, &qc->ref);
  return 0;
}

ngtcp2_path nx_qc_make_path(nx_qconn *qc) {
  ngtcp2_path p;
  p.local.addr = (ngtcp2_sockaddr *)&qc->ep->udp.local;
  p.local.addrlen = qc->ep->udp.locallen;
  p.remote.addr = (ngtcp2_sockaddr *)&qc->remote;
  p.remote.addrlen = qc->remotelen;
  p.user_data = NULL;
  return p;
}

static nx_qconn *qconn_alloc(nx_ep *ep, const struct sockaddr *remote, socklen_t len, int server) {
  nx_qconn *qc = nx_calloc(1, sizeof *qc);
  if (!qc) return NULL;
  qc->ep = ep; /* the 4 MiB send buffer comes with the first write */
  qc->is_server = server;
  memcpy(&qc->remote, remote, len);
  qc->remotelen = len;
  return qc;
}

/* Congestion controller: BBRv2 by default (measured: 1.1-1.3 GB/s for 64 MiB
 * messages on loopback against 0.9 with cubic, as the prototype notes saw);
 * NEXAR_QUIC_CC=reno|cubic|bbr|bbr2 overrides it. */
int nx_quic_cc_by_name(const char *v, int *out) {
  *out = NGTCP2_CC_ALGO_BBR2;
  if (!v || !*v) return 0;
  static const struct {
    const char *name;
    int algo;
  } t[] = {{"reno", NGTCP2_CC_ALGO_RENO},
           {"cubic", NGTCP2_CC_ALGO_CUBIC},
           {"bbr", NGTCP2_CC_ALGO_BBR},
           {"bbr2", NGTCP2_CC_ALGO_BBR2}};
  for (size_t i = 0; i < sizeof t / sizeof *t; i++)
    if (!strcmp(v, t[i].name)) return *out = t[i].algo, 0;
  return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "NEXAR_QUIC_CC='%s': expected reno|cubic|bbr|bbr2", v);
}

void nx_qconn_free(nx_ep *ep, nx_qconn *qc) {
  for (nx_qconn **pp = &ep->conns; *pp; pp = &(*pp)->next)
    if (*pp == qc) {
      *pp = qc->next;
      break;
    }
  for (size_t i = 0; i < ep->ncids_cap; i++)
    if (ep->cids[i].qc == qc) ep->cids[i].qc = NULL;
  if (qc->peer && qc->peer->qc == qc) qc->peer->qc = NULL;
  /* Stream user data (messages) is released by the engine, which owns it. */
  if (qc->conn) ngtcp2_conn_del(qc->conn);
  if (qc->tls) gnutls_deinit(qc->tls);
  free(qc->fins);
  free(qc->resets);
  free(qc->txbuf);
  free(qc);
}

int nx_qconn_client_new(nx_ep *ep, nx_peer *p) {
  nx_qconn *qc = qconn_alloc(ep, (struct sockaddr *)&p->addr, p->addrlen, 0);
  if (!qc) return NEXAR_ERR_NOMEM;
  qc->expect_rank = p->rank;
  qc->peer = p;
  ngtcp2_cid dcid, scid;
  dcid.datalen = 18;
  scid.datalen = NX_SCID_LEN;
  nx_random(dcid.data, dcid.datalen);
  nx_random(scid.data, scid.datalen);
  ngtcp2_callbacks cb;
  ngtcp2_settings st;
  ngtcp2_transport_params tp;
  fill_callbacks(&cb, 0);
  fill_settings(qc, &st, &tp);
  ngtcp2_path path = nx_qc_make_path(qc);
  int rv = ngtcp2_conn_client_new(&qc->conn, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1, &cb, &st,
                                  &tp, NULL, qc);
  if (rv || tls_new(qc)) {
    nx_qconn_free(ep, qc);
    return nx_fail(NEXAR_ERR_TLS, "connect to rank %u: cannot create QUIC connection: %s", p->rank,
                   rv ? ngtcp2_strerror(rv) : "TLS session setup failed");
  }
  ngtcp2_conn_set_tls_native_handle(qc->conn, qc->tls);
  qc->next = ep->conns;
  ep->conns = qc;
  if (cid_add(ep, scid.data, scid.datalen, qc)) {
    nx_qconn_free(ep, qc);
    return nx_fail(NEXAR_ERR_NOMEM, "connect to rank %u: %s", p->rank, nexar_last_error());
  }
  p->qc = qc;
  p->state = NX_PEER_CONNECTING;
  p->rx_next_sid = 1; /* the server's bidi streams: 1, 5, 9, ... */
  return 0;
}

/* 1: same IP address and port (IPv4, IPv6, IPv4-mapped IPv6); 2: same port,
 * the other family (a dual-stack member of a mixed IPv4/IPv6 world reaches
 * the other family from its port but not from the address it advertised);
 * else 0. */
static int same_addr(const struct sockaddr *a, const struct sockaddr *b) {
  const uint8_t *ia, *ib;
  size_t la, lb;
  uint16_t pa, pb;
  static const uint8_t v4map[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  const struct sockaddr *s[2] = {a, b};
  const uint8_t *ip[2];
  size_t len[2];
  uint16_t port[2];
  for (int i = 0; i < 2; i++) {
    if (s[i]->sa_family == AF_INET) {
      const struct sockaddr_in *v = (const struct sockaddr_in *)s[i];
      ip[i] = (const uint8_t *)&v->sin_addr, len[i] = 4, port[i] = v->sin_port;
    } else if (s[i]->sa_family == AF_INET6) {
      const struct sockaddr_in6 *v = (const struct sockaddr_in6 *)s[i];
      ip[i] = v->sin6_addr.s6_addr, len[i] = 16, port[i] = v->sin6_port;
      if (!memcmp(ip[i], v4map, 12)) ip[i] += 12, len[i] = 4;
    } else {
      return 0;
    }
  }
  ia = ip[0], ib = ip[1], la = len[0], lb = len[1], pa = port[0], pb = port[1];
  if (pa != pb) return 0;
  if (la != lb) return 2;
  return !memcmp(ia, ib, la);
}

/* A handshake may come only from a member's advertised UDP socket (members
 * dial from the socket they listen on), or from its port in the other family
 * (mixed worlds; the Retry token and the certificate still decide). */
static int member_addr(nx_ep *ep, const struct sockaddr *from) {
  for (uint32_t r = 0; ep->peers && r < ep->world; r++)
    if (r != ep->rank && ep->peers[r].addrlen &&
        same_addr((const struct sockaddr *)&ep->peers[r].addr, from))
      return 1;
  return 0;
}

/* Refusals before any state: counted, logged at most once a second. */
void nx_qc_refused(nx_ep *ep, const char *why, const struct sockaddr *from) {
  ep->refused_hs++;
  uint64_t now = nx_now_ns();
  if (now - ep->refused_logged_ns < 1000000000ull) return;
  ep->refused_logged_ns = now;
  char a[INET6_ADDRSTRLEN] = "?";
  if (from->sa_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)from)->sin_addr, a, sizeof a);
  else if (from->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)from)->sin6_addr, a, sizeof a);
  NX_WARN("refused %llu QUIC handshake attempt(s) so far (last from %s: %s)",
          (unsigned long long)ep->refused_hs, a, why);
}

/* Answers a member's first Initial with a Retry: its next Initial proves it
 * receives at that address, and until then we keep nothing. */
static void send_retry(nx_ep *ep, const struct sockaddr *from, socklen_t fromlen,
                       const ngtcp2_pkt_hd *hd) {
  if (!ep->retry_secret_ok) {
    if (nx_random(ep->retry_secret, sizeof ep->retry_secret)) return;
    ep->retry_secret_ok = 1;
  }
  ngtcp2_cid scid;
  scid.datalen = NX_SCID_LEN;
  if (nx_random(scid.data, scid.datalen)) return;
  uint8_t token[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN], buf[1200];
  ngtcp2_ssize tl = ngtcp2_crypto_generate_retry_token(
      token, ep->retry_secret, sizeof ep->retry_secret, hd->version, (const ngtcp2_sockaddr *)from,
      (ngtcp2_socklen)fromlen, &scid, &hd->dcid, nx_now_ns());
  if (tl < 0) return;
  ngtcp2_ssize n = ngtcp2_crypto_write_retry(buf, sizeof buf, hd->version, &hd->scid, &scid,
                                             &hd->dcid, token, (size_t)tl);
  if (n <= 0) return;
  size_t l = (size_t)n;
  nx_udp_send(&ep->udp, from, fromlen, buf, &l, 1);
}

/* Admission, cheapest check first: a member's address, then a valid Retry
 * token (else a Retry is sent), then bounds on pending handshakes. Only
 * then does a connection (TLS session, ngtcp2 state) exist. */
nx_qconn *nx_qc_accept(nx_ep *ep, const struct sockaddr *from, socklen_t fromlen,
                       const uint8_t *pkt, size_t len, int *answered) {
  ngtcp2_pkt_hd hd;
  if (ngtcp2_accept(&hd, pkt, len) != 0) return NULL;
  if (!ep->creds) return NULL; /* not started: the client retransmits */
  if (hd.type != NGTCP2_PKT_INITIAL) return NULL;
  if (!member_addr(ep, from)) {
    nx_qc_refused(ep, "not a member's address", from);
    return NULL;
  }
  if (hd.token.len == 0) {
    send_retry(ep, from, fromlen, &hd);
    *answered = 1;
    return NULL;
  }
  ngtcp2_cid odcid;
  if (!ep->retry_secret_ok ||
      ngtcp2_crypto_verify_retry_token(&odcid, hd.token.base, hd.token.len, ep->retry_secret,
                                       sizeof ep->retry_secret, hd.version,
                                       (const ngtcp2_sockaddr *)from, (ngtcp2_socklen)fromlen,
                                       &hd.dcid, NX_RETRY_TOKEN_NS, nx_now_ns()) != 0) {
    nx_qc_refused(ep, "invalid or expired Retry token", from);
    return NULL;
  }
  /* bound the handshakes in progress, in total and per source */
  int pending = 0, mine = 0;
  for (nx_qconn *x = ep->conns; x; x = x->next) {
    if (x->peer && x->peer->state == NX_PEER_UP) continue;
    if (!x->is_server) continue;
    pending++;
    mine += same_addr((const struct sockaddr *)&x->remote, from) == 1;
  }
  /* (every lower rank may dial at once during formation) */
  if (pending >= (int)NX_MAX(NX_MAX_PENDING_HANDSHAKES, ep->world) ||
      mine >= NX_MAX_PENDING_PER_SOURCE) {
    nx_qc_refused(ep, "too many handshakes in progress", from);
    return NULL;
  }
  nx_qconn *qc = qconn_alloc(ep, from, fromlen, 1);
  if (!qc) return NULL;
  ngtcp2_cid scid;
  scid.datalen = NX_SCID_LEN;
  nx_random(scid.data, scid.datalen);
  ngtcp2_callbacks cb;
  ngtcp2_settings st;
  ngtcp2_transport_params tp;
  fill_callbacks(&cb, 1);
  fill_settings(qc, &st, &tp);
  tp.original_dcid = odcid;
  tp.retry_scid = hd.dcid;
  tp.retry_scid_present = 1;
  tp.stateless_reset_token_present = 1;
  nx_random(tp.stateless_reset_token, sizeof tp.stateless_reset_token);
  st.token = hd.token;
  ngtcp2_path path = nx_qc_make_path(qc);
  int rv = ngtcp2_conn_server_new(&qc->conn, &hd.scid, &scid, &path, hd.version, &cb, &st, &tp,
                                  NULL, qc);
  if (rv || tls_new(qc)) {
    nx_qconn_free(ep, qc);
    return NULL;
  }
  ngtcp2_conn_set_tls_native_handle(qc->conn, qc->tls);
  qc->next = ep->conns;
  ep->conns = qc;
  if (cid_add(ep, hd.dcid.data, hd.dcid.datalen, qc) || cid_add(ep, scid.data, scid.datalen, qc)) {
    NX_WARN("refusing a handshake: %s", nexar_last_error());
    nx_qconn_free(ep, qc);
    return NULL;
  }
  return qc;
}
