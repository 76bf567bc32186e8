/* QUIC connection setup over ngtcp2 0.12 + GnuTLS: the connection-id table,
 * the ngtcp2 callbacks (stream data up through nx_quic_cbs), rank-binding mutual TLS,
 * settings and flow-control windows, client connections, and the admission
 * of handshakes (member addresses, Retry tokens, pending bounds). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/addr.h"
#include "transport/pki.h"
#include "transport/quic_int.h"

/* ------------------------------------------------------------ CID table */

/* 0, or NEXAR_ERR_NOMEM: the connection could not receive on that id. */
static int cid_add(nx_quic *q, const uint8_t *cid, size_t len, nx_qconn *qc) {
  for (size_t i = 0; i < q->ncids_cap; i++) {
    if (!q->cids[i].qc) {
      memcpy(q->cids[i].cid, cid, len);
      q->cids[i].len = len;
      q->cids[i].qc = qc;
      return 0;
    }
  }
  size_t cap = q->ncids_cap ? q->ncids_cap * 2 : 64;
  struct nx_cident *n = nx_realloc(q->cids, cap * sizeof *n);
  if (!n) return nx_fail(NEXAR_ERR_NOMEM, "growing the connection-id table to %zu", cap);
  memset(n + q->ncids_cap, 0, (cap - q->ncids_cap) * sizeof *n);
  q->cids = n;
  q->ncids_cap = cap;
  return cid_add(q, cid, len, qc);
}

/* A callback failed for a local reason (out of memory): the connection
 * closes with that code and reason. */
static int local_failure(nx_qconn *qc, int code) {
  qc->err_code = code;
  snprintf(qc->proto_err, sizeof qc->proto_err, "%s", nexar_last_error());
  return NGTCP2_ERR_CALLBACK_FAILURE;
}

static void cid_del(nx_quic *q, const uint8_t *cid, size_t len) {
  for (size_t i = 0; i < q->ncids_cap; i++)
    if (q->cids[i].qc && q->cids[i].len == len && !memcmp(q->cids[i].cid, cid, len))
      q->cids[i].qc = NULL;
}

nx_qconn *nx_qc_cid_find(nx_quic *q, const uint8_t *cid, size_t len) {
  for (size_t i = 0; i < q->ncids_cap; i++)
    if (q->cids[i].qc && q->cids[i].len == len && !memcmp(q->cids[i].cid, cid, len))
      return q->cids[i].qc;
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
  if (cid_add(qc->q, cid->data, cidlen, qc)) return local_failure(qc, NEXAR_ERR_NOMEM);
  return 0;
}

static int cb_remove_cid(ngtcp2_conn *conn, const ngtcp2_cid *cid, void *ud) {
  nx_qconn *qc = ud;
  cid_del(qc->q, cid->data, cid->datalen);
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
  if (!qc->bound || (sid & 2)) return NGTCP2_ERR_CALLBACK_FAILURE; /* uni streams: unused */
  void *rs = qc->q->cbs.stream_open(qc->q->user, qc->peer, sid);
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
  if (!sud) { /* stream already finished (its data was discarded) */
    ngtcp2_conn_extend_max_offset(conn, len);
    return 0;
  }
  uint64_t credit = 0, held = 0;
  int rc = qc->q->cbs.stream_data(qc->q->user, sud, data, len, fin, &credit, &held);
  /* connection credit: all but unexpected bytes over the budget, which wait
   * for their receive (nx_qconn_extend with sid < 0) */
  if (len > held) ngtcp2_conn_extend_max_offset(conn, len - held);
  if (rc) {
    snprintf(qc->proto_err, sizeof qc->proto_err, "%s", nexar_last_error());
    NX_WARN("closing the connection to rank %u: stream %lld: %s", qc->expect_rank, (long long)sid,
            qc->proto_err);
    return NGTCP2_ERR_CALLBACK_FAILURE;
  }
  if (credit) ngtcp2_conn_extend_max_stream_offset(conn, sid, credit);
  return 0;
}

static int cb_acked(ngtcp2_conn *conn, int64_t sid, uint64_t offset, uint64_t len, void *ud,
                    void *sud) {
  nx_qtx *m = sud;
  nx_quic *q = ((nx_qconn *)ud)->q;
  if (!m || !is_local_stream(ud, sid)) return 0;
  q->cbs.tx_acked(q->user, m, offset, len);
  if (m->acked >= m->total) {
    ngtcp2_conn_set_stream_user_data(conn, sid, NULL);
    q->cbs.tx_done(q->user, m);
  }
  return 0;
}

static int cb_stream_close(ngtcp2_conn *conn, uint32_t flags, int64_t sid, uint64_t app_error,
                           void *ud, void *sud) {
  nx_qconn *qc = ud;
  if (is_local_stream(qc, sid)) {
    /* reset or closed before the final ack: nothing will touch it again */
    if (sud) qc->q->cbs.tx_done(qc->q->user, sud);
    return 0;
  }
  if (sud && qc->q->cbs.stream_close(qc->q->user, sud)) {
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
 * the rank this connection must come from (a client: the rank it dialed; a
 * server: one the engine admits). */
static int verify_peer(gnutls_session_t s) {
  ngtcp2_crypto_conn_ref *ref = gnutls_session_get_ptr(s);
  nx_qconn *qc = ref->user_data;
  nx_quic *q = qc->q;
  uint32_t rank;
  if (nx_tls_peer_rank(s, q->cluster_id, &rank) != 0) {
    snprintf(q->auth_why, sizeof q->auth_why, "refused a certificate: %s", nexar_last_error());
    NX_WARN("mesh handshake: %s", q->auth_why);
    return -1;
  }
  if (!qc->is_server) {
    if (rank != qc->expect_rank) {
      snprintf(q->auth_why, sizeof q->auth_why,
               "expected rank %u at %s, its certificate names rank %u", qc->expect_rank, qc->name,
               rank);
      NX_WARN("mesh handshake: %s", q->auth_why);
      return -1;
    }
    return 0;
  }
  char why[sizeof q->auth_why] = "";
  void *peer = NULL;
  if (q->cbs.admit(q->user, qc, rank, &peer, why, sizeof why) != 0) {
    if (why[0]) {
      snprintf(q->auth_why, sizeof q->auth_why, "%s", why);
      NX_WARN("mesh handshake: %s", q->auth_why);
    }
    return -1;
  }
  qc->peer = peer;
  qc->bound = 1;
  qc->expect_rank = rank;
  return 0;
}

static int cb_handshake_completed(ngtcp2_conn *conn, void *ud) {
  nx_qconn *qc = ud;
  if (!qc->bound) return NGTCP2_ERR_CALLBACK_FAILURE;
  /* the rest of the connection window (not at creation: a server's local
   * transport parameters are committed later, which resets the credit) */
  ngtcp2_conn_extend_max_offset(conn, qc->q->cfg.conn_window - qc->q->cfg.conn_param);
  qc->hs_done = 1;
  qc->q->cbs.up(qc->q->user, qc->peer);
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
  st->cc_algo = qc->q->cfg.cc_algo;
  /* Large datagrams on paths that carry them (loopback: ~64 KiB). 0.12 needs
   * shaping off, else it sends 1200-byte packets whatever the path allows. */
  size_t payload = nx_udp_path_payload((struct sockaddr *)&qc->remote, qc->remotelen);
  st->max_tx_udp_payload_size = payload;
  st->no_tx_udp_payload_size_shaping = 1;
  st->max_stream_window = 32u << 20;
  st->initial_rtt = 1 * NGTCP2_MILLISECONDS;
  /* A client waits for its peer as long as formation may take; a server
   * gives an unauthenticated handshake 10 s, so half-open ones do not pile up */
  uint64_t hs_ms = qc->q->cfg.handshake_ms;
  if (qc->is_server && hs_ms > NX_SERVER_HANDSHAKE_MS) hs_ms = NX_SERVER_HANDSHAKE_MS;
  st->handshake_timeout = NX_MAX(hs_ms, 1000u) * NGTCP2_MILLISECONDS;
  /* a fixed connection window: a receiver that holds unexpected data over
   * its budget withholds this credit, and each peer can then add at most the
   * window (auto-tuning would let that grow to max_window) */
  st->max_window = 0;
  tp->initial_max_data = qc->q->cfg.conn_param; /* the rest: cb_handshake_completed */
  tp->initial_max_stream_data_bidi_local = qc->q->cfg.stream_window;
  tp->initial_max_stream_data_bidi_remote = qc->q->cfg.stream_window;
  tp->initial_max_stream_data_uni = 0;
  tp->initial_max_streams_bidi = qc->q->cfg.max_streams;
  tp->initial_max_streams_uni = 0;
  /* Liveness is judged by our heartbeats; idle close is only a backstop. */
  tp->max_idle_timeout = qc->q->cfg.idle_timeout_ms * NGTCP2_MILLISECONDS;
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
  if (gnutls_credentials_set(qc->tls, GNUTLS_CRD_CERTIFICATE, qc->q->creds) < 0) return -1;
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
  p.local.addr = (ngtcp2_sockaddr *)&qc->q->cfg.udp->local;
  p.local.addrlen = qc->q->cfg.udp->locallen;
  p.remote.addr = (ngtcp2_sockaddr *)&qc->remote;
  p.remote.addrlen = qc->remotelen;
  p.user_data = NULL;
  return p;
}

static nx_qconn *qconn_alloc(nx_quic *q, const struct sockaddr *remote, socklen_t len, int server) {
  nx_qconn *qc = nx_calloc(1, sizeof *qc);
  if (!qc) return NULL;
  qc->q = q; /* the 4 MiB send buffer comes with the first write */
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

void nx_qc_free(nx_qconn *qc) {
  nx_quic *q = qc->q;
  for (nx_qconn **pp = &q->conns; *pp; pp = &(*pp)->next)
    if (*pp == qc) {
      *pp = qc->next;
      break;
    }
  for (size_t i = 0; i < q->ncids_cap; i++)
    if (q->cids[i].qc == qc) q->cids[i].qc = NULL;
  /* Stream user data (messages) is released by the engine, which owns it. */
  if (qc->conn) ngtcp2_conn_del(qc->conn);
  if (qc->tls) gnutls_deinit(qc->tls);
  free(qc->fins);
  free(qc->resets);
  free(qc->txbuf);
  free(qc);
}

int nx_quic_dial(nx_quic *q, void *peer, uint32_t rank, const struct sockaddr *addr,
                 socklen_t addrlen, const char *name, nx_qconn **out) {
  *out = NULL;
  nx_qconn *qc = qconn_alloc(q, addr, addrlen, 0);
  if (!qc) return nx_fail(NEXAR_ERR_NOMEM, "connect to rank %u", rank);
  qc->expect_rank = rank;
  snprintf(qc->name, sizeof qc->name, "%s", name);
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
    nx_qc_free(qc);
    return nx_fail(NEXAR_ERR_TLS, "connect to rank %u: cannot create QUIC connection: %s", rank,
                   rv ? ngtcp2_strerror(rv) : "TLS session setup failed");
  }
  ngtcp2_conn_set_tls_native_handle(qc->conn, qc->tls);
  qc->next = q->conns;
  q->conns = qc;
  if (cid_add(q, scid.data, scid.datalen, qc)) {
    nx_qc_free(qc);
    return nx_fail(NEXAR_ERR_NOMEM, "connect to rank %u: %s", rank, nexar_last_error());
  }
  qc->peer = peer;
  qc->bound = 1;
  *out = qc;
  return 0;
}

/* Refusals before any state: counted, logged at most once a second. */
void nx_qc_refused(nx_quic *q, const char *why, const struct sockaddr *from) {
  q->refused_hs++;
  uint64_t now = nx_now_ns();
  if (now - q->refused_logged_ns < 1000000000ull) return;
  q->refused_logged_ns = now;
  char a[INET6_ADDRSTRLEN] = "?";
  if (from->sa_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)from)->sin_addr, a, sizeof a);
  else if (from->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)from)->sin6_addr, a, sizeof a);
  NX_WARN("refused %llu QUIC handshake attempt(s) so far (last from %s: %s)",
          (unsigned long long)q->refused_hs, a, why);
}

/* Answers a member's first Initial with a Retry: its next Initial proves it
 * receives at that address, and until then we keep nothing. */
static void send_retry(nx_quic *q, const struct sockaddr *from, socklen_t fromlen,
                       const ngtcp2_pkt_hd *hd) {
  if (!q->retry_secret_ok) {
    if (nx_random(q->retry_secret, sizeof q->retry_secret)) return;
    q->retry_secret_ok = 1;
  }
  ngtcp2_cid scid;
  scid.datalen = NX_SCID_LEN;
  if (nx_random(scid.data, scid.datalen)) return;
  uint8_t token[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN], buf[1200];
  ngtcp2_ssize tl = ngtcp2_crypto_generate_retry_token(
      token, q->retry_secret, sizeof q->retry_secret, hd->version, (const ngtcp2_sockaddr *)from,
      (ngtcp2_socklen)fromlen, &scid, &hd->dcid, nx_now_ns());
  if (tl < 0) return;
  ngtcp2_ssize n = ngtcp2_crypto_write_retry(buf, sizeof buf, hd->version, &hd->scid, &scid,
                                             &hd->dcid, token, (size_t)tl);
  if (n <= 0) return;
  size_t l = (size_t)n;
  nx_udp_send(q->cfg.udp, from, fromlen, buf, &l, 1);
}

/* Admission, cheapest check first: a member's address, then a valid Retry
 * token (else a Retry is sent), then bounds on pending handshakes. Only
 * then does a connection (TLS session, ngtcp2 state) exist. */
nx_qconn *nx_qc_accept(nx_quic *q, const struct sockaddr *from, socklen_t fromlen,
                       const uint8_t *pkt, size_t len, int *answered) {
  ngtcp2_pkt_hd hd;
  if (ngtcp2_accept(&hd, pkt, len) != 0) return NULL;
  if (!q->creds) return NULL; /* not started: the client retransmits */
  if (hd.type != NGTCP2_PKT_INITIAL) return NULL;
  if (!q->cbs.member_addr(q->user, from)) {
    nx_qc_refused(q, "not a member's address", from);
    return NULL;
  }
  if (hd.token.len == 0) {
    send_retry(q, from, fromlen, &hd);
    *answered = 1;
    return NULL;
  }
  ngtcp2_cid odcid;
  if (!q->retry_secret_ok ||
      ngtcp2_crypto_verify_retry_token(&odcid, hd.token.base, hd.token.len, q->retry_secret,
                                       sizeof q->retry_secret, hd.version,
                                       (const ngtcp2_sockaddr *)from, (ngtcp2_socklen)fromlen,
                                       &hd.dcid, NX_RETRY_TOKEN_NS, nx_now_ns()) != 0) {
    nx_qc_refused(q, "invalid or expired Retry token", from);
    return NULL;
  }
  /* bound the handshakes in progress, in total and per source */
  int pending = 0, mine = 0;
  for (nx_qconn *x = q->conns; x; x = x->next) {
    if (x->hs_done) continue;
    if (!x->is_server) continue;
    pending++;
    mine += nx_sockaddr_same((const struct sockaddr *)&x->remote, from) == 1;
  }
  /* (every member that dials us may do so at once during formation) */
  if (pending >= (int)NX_MAX(NX_MAX_PENDING_HANDSHAKES, q->members) ||
      mine >= NX_MAX_PENDING_PER_SOURCE) {
    nx_qc_refused(q, "too many handshakes in progress", from);
    return NULL;
  }
  nx_qconn *qc = qconn_alloc(q, from, fromlen, 1);
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
    nx_qc_free(qc);
    return NULL;
  }
  ngtcp2_conn_set_tls_native_handle(qc->conn, qc->tls);
  qc->next = q->conns;
  q->conns = qc;
  if (cid_add(q, hd.dcid.data, hd.dcid.datalen, qc) || cid_add(q, scid.data, scid.datalen, qc)) {
    NX_WARN("refusing a handshake: %s", nexar_last_error());
    nx_qc_free(qc);
    return NULL;
  }
  return qc;
}

int nx_quic_new(nx_quic **out, const nx_quic_cfg *cfg, const nx_quic_cbs *cbs, void *user) {
  *out = NULL;
  nx_quic *q = nx_calloc(1, sizeof *q);
  if (!q) return nx_fail(NEXAR_ERR_NOMEM, "QUIC link");
  q->cfg = *cfg;
  q->cbs = *cbs;
  q->user = user;
  *out = q;
  return 0;
}

void nx_quic_start(nx_quic *q, gnutls_certificate_credentials_t creds, const uint8_t cluster_id[16],
                   uint32_t members) {
  memcpy(q->cluster_id, cluster_id, 16);
  q->members = members;
  q->creds = creds;
}

void nx_quic_set_members(nx_quic *q, uint32_t members) {
  q->members = members;
}

void nx_quic_del(nx_quic *q) {
  if (!q) return;
  nx_quic_close_all(q);
  free(q->cids);
  free(q);
}
