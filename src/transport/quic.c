/* QUIC connections over ngtcp2 0.12 + GnuTLS: handshake with rank-binding
 * mutual TLS, stream I/O, timers, batching. Every ngtcp2 call lives here.
 * Streams are bidirectional only: ngtcp2 0.12.1 never reports closing of a
 * remote unidirectional stream (upstream #662). The receiver FINs its side of
 * each remote stream with no data, so both halves close and credit returns. */
#include "transport/quic.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <stdlib.h>
#include <string.h>

#include "transport/pki.h"

#define NX_SCID_LEN 16
#define NX_APP_GOODBYE 0x6e78u /* application close code of a graceful departure */
#define NX_APP_GAVE_UP 0x6e79u /* we declared the receiver dead (reason says why) */
#define NX_BURST 64
#define NX_FIN_BATCH 32              /* FIN-only packets wait for this many... */
#define NX_FIN_DELAY_NS 2000000ull   /* ...or this long */
#define NX_MAX_PENDING_HANDSHAKES 16 /* in total... */
#define NX_MAX_PENDING_PER_SOURCE 2  /* ...and per member address */
#define NX_SERVER_HANDSHAKE_MS 3000  /* a member's handshake takes milliseconds */
#define NX_RETRY_TOKEN_NS (10 * NGTCP2_SECONDS)
#define NX_ACK_SLACK_NS 50000ull             /* idle connections: timer slack (see service) */
#define NX_STREAM_CREDIT_BATCH 16            /* stream credit returns in batches... */
#define NX_STREAM_CREDIT_DELAY_NS 1000000ull /* ...or after this long */
#define NX_ALPN "nexar/1"
#define NX_PRIO                                                                                    \
  "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:"        \
  "%DISABLE_TLS13_COMPAT_MODE"

struct nx_cident {
  uint8_t cid[NGTCP2_MAX_CIDLEN];
  size_t len;
  nx_qconn *qc;
};

struct nx_qconn {
  nx_qconn *next;
  nx_ep *ep;
  nx_peer *peer; /* NULL until the peer's certificate named its rank */
  ngtcp2_conn *conn;
  gnutls_session_t tls;
  ngtcp2_crypto_conn_ref ref;
  struct sockaddr_storage remote;
  socklen_t remotelen;
  int is_server;
  uint32_t expect_rank;
  int dead;
  int64_t *fins; /* remote streams whose local half still needs a FIN */
  size_t nfins, capfins;
  uint64_t fins_since; /* when the oldest pending FIN was queued */
  nx_txmsg **resets;
  size_t nresets, capresets;
  nx_txmsg *act_head, *act_tail; /* opened messages with bytes to send */
  char proto_err[160];           /* why we refused the peer's bytes */
  int err_code;                  /* with proto_err: a local failure (NOMEM), not the peer's */
  unsigned rx_since_write;       /* packets received since we last wrote */
  size_t rx_bytes_since_write;   /* and their bytes: bulk traffic is ACKed at once */
  int force_write;               /* credit was returned: tell the peer now */
  uint64_t closed_streams;       /* remote streams closed, credit not yet returned */
  uint64_t closed_since;         /* when the oldest of them closed */
  uint64_t last_recovery_ts;     /* loss accounting (nexar_peer_stats.packets_lost) */
  size_t last_pto;
  uint8_t *txbuf;
};

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

static nx_qconn *cid_find(nx_ep *ep, const uint8_t *cid, size_t len) {
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

static ngtcp2_path make_path(nx_qconn *qc) {
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
int nx_quic_cc_from_env(int *out) {
  const char *v = getenv("NEXAR_QUIC_CC");
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
  ngtcp2_path path = make_path(qc);
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

/* Same IP address and port (IPv4, IPv6, IPv4-mapped IPv6). */
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
  return pa == pb && la == lb && !memcmp(ia, ib, la);
}

/* A handshake may come only from a member's advertised UDP socket (members
 * dial from the socket they listen on). */
static int member_addr(nx_ep *ep, const struct sockaddr *from) {
  for (uint32_t r = 0; ep->peers && r < ep->world; r++)
    if (r != ep->rank && ep->peers[r].addrlen &&
        same_addr((const struct sockaddr *)&ep->peers[r].addr, from))
      return 1;
  return 0;
}

/* Refusals before any state: counted, logged at most once a second. */
static void refused(nx_ep *ep, const char *why, const struct sockaddr *from) {
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
static nx_qconn *accept_conn(nx_ep *ep, const struct sockaddr *from, socklen_t fromlen,
                             const uint8_t *pkt, size_t len, int *answered) {
  ngtcp2_pkt_hd hd;
  if (ngtcp2_accept(&hd, pkt, len) != 0) return NULL;
  if (!ep->creds) return NULL; /* not started: the client retransmits */
  if (hd.type != NGTCP2_PKT_INITIAL) return NULL;
  if (!member_addr(ep, from)) {
    refused(ep, "not a member's address", from);
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
    refused(ep, "invalid or expired Retry token", from);
    return NULL;
  }
  /* bound the handshakes in progress, in total and per source */
  int pending = 0, mine = 0;
  for (nx_qconn *x = ep->conns; x; x = x->next) {
    if (x->peer && x->peer->state == NX_PEER_UP) continue;
    if (!x->is_server) continue;
    pending++;
    mine += same_addr((const struct sockaddr *)&x->remote, from);
  }
  if (pending >= NX_MAX_PENDING_HANDSHAKES || mine >= NX_MAX_PENDING_PER_SOURCE) {
    refused(ep, "too many handshakes in progress", from);
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
  ngtcp2_path path = make_path(qc);
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

static void conn_failed(nx_ep *ep, nx_qconn *qc, int code, const char *why) {
  qc->dead = 1;
  if (qc->peer && qc->peer->qc == qc) nx_peer_dead_locked(ep, qc->peer, code, why);
}

/* Writes one CONNECTION_CLOSE packet straight to the socket. */
static void write_close(nx_ep *ep, nx_qconn *qc, const ngtcp2_connection_close_error *ce) {
  ngtcp2_path_storage ps;
  ngtcp2_path_storage_zero(&ps);
  uint8_t buf[1500];
  ngtcp2_ssize n = ngtcp2_conn_write_connection_close(qc->conn, &ps.path, NULL, buf, sizeof buf, ce,
                                                      nx_now_ns());
  if (n > 0) {
    size_t l = (size_t)n;
    nx_udp_send(&ep->udp, (struct sockaddr *)&qc->remote, qc->remotelen, buf, &l, 1);
  }
}

void nx_quic_on_datagram(nx_ep *ep, const struct sockaddr *from, socklen_t fromlen, uint8_t *pkt,
                         size_t len) {
  ngtcp2_version_cid vc;
  nx_qconn *qc = NULL;
  int answered = 0;     /* a Retry went back: not garbage */
  if (len == 0) return; /* ngtcp2 0.12 asserts on an empty datagram */
  if (ngtcp2_pkt_decode_version_cid(&vc, pkt, len, NX_SCID_LEN) != 0 ||
      (!(qc = cid_find(ep, vc.dcid, vc.dcidlen)) &&
       !(qc = accept_conn(ep, from, fromlen, pkt, len, &answered)))) {
    if (answered) return;
    /* not QUIC, or not for a connection of ours: dropped, and reported (at
     * most once a second, so a flood cannot flood the log too) */
    ep->dropped_datagrams++;
    uint64_t now = nx_now_ns();
    if (now - ep->dropped_logged_ns > 1000000000ull) {
      ep->dropped_logged_ns = now;
      NX_WARN("dropped %llu datagram(s) that are not QUIC packets of this cluster (last: %zu "
              "bytes)",
              (unsigned long long)ep->dropped_datagrams, len);
    }
    return;
  }
  if (qc->dead) return;
  ngtcp2_path path = make_path(qc);
  path.remote.addr = (ngtcp2_sockaddr *)from;
  path.remote.addrlen = fromlen;
  ngtcp2_pkt_info pi = {0};
  int rv = ngtcp2_conn_read_pkt(qc->conn, &path, &pi, pkt, len, nx_now_ns());
  /* ACK-only packets are ~40 bytes; count only the ones that likely carry
   * data, as ngtcp2's own "ACK every second ack-eliciting packet" rule does */
  if (len > 64) qc->rx_since_write++;
  qc->rx_bytes_since_write += len;
  if (qc->peer) {
    qc->peer->last_heard_ns = nx_now_ns();
  }
  if (rv != 0) {
    char why[200];
    int code = NEXAR_ERR_PEER_LOST;
    if (rv == NGTCP2_ERR_DRAINING || rv == NGTCP2_ERR_CLOSING) {
      ngtcp2_connection_close_error ce;
      ngtcp2_conn_get_connection_close_error(qc->conn, &ce);
      int n = (int)NX_MIN(ce.reasonlen, 120);
      if (ce.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION &&
          ce.error_code == NX_APP_GOODBYE && qc->peer && qc->peer->qc == qc) {
        qc->dead = 1; /* it left after delivering everything: a departure, not a failure */
        nx_peer_departed_locked(ep, qc->peer);
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
               ep->auth_why[0] ? ep->auth_why : ngtcp2_strerror(rv));
      if (qc->peer && qc->peer->state != NX_PEER_UP) code = NEXAR_ERR_AUTH;
    } else {
      snprintf(why, sizeof why, "QUIC error: %s", ngtcp2_strerror(rv));
    }
    if (!qc->peer || qc->peer->qc != qc) { /* never authenticated: drop quietly */
      refused(ep, why, from);
      nx_qconn_free(ep, qc);
      return;
    }
    if (rv != NGTCP2_ERR_DRAINING && rv != NGTCP2_ERR_CLOSING) {
      /* tell the peer why, so it fails fast too */
      ngtcp2_connection_close_error ce;
      ngtcp2_connection_close_error_set_transport_error_liberr(&ce, rv, (uint8_t *)why,
                                                               strlen(why));
      write_close(ep, qc, &ce);
    }
    conn_failed(ep, qc, code, why);
    return;
  }
  memcpy(&qc->remote, from, fromlen);
  qc->remotelen = fromlen;
}

/* ------------------------------------------------------------- writing */

static void act_push(nx_qconn *qc, nx_txmsg *m) {
  m->next = NULL;
  m->in_queue = 1;
  if (qc->act_tail)
    qc->act_tail->next = m;
  else
    qc->act_head = m;
  qc->act_tail = m;
}

static nx_txmsg *act_pop(nx_qconn *qc) {
  nx_txmsg *m = qc->act_head;
  if (!m) return NULL;
  qc->act_head = m->next;
  if (!qc->act_head) qc->act_tail = NULL;
  m->next = NULL;
  m->in_queue = 0;
  return m;
}

void nx_qconn_reset(nx_qconn *qc, nx_txmsg *m) {
  if (!qc || qc->dead) return;
  if (qc->nresets == qc->capresets) {
    size_t nc = qc->capresets ? qc->capresets * 2 : 8;
    nx_txmsg **a = realloc(qc->resets, nc * sizeof *a);
    if (!a) return; /* the send then completes at its final ack or when the peer dies */
    qc->resets = a, qc->capresets = nc;
  }
  qc->resets[qc->nresets++] = m;
}

static void act_remove(nx_qconn *qc, nx_txmsg *m) {
  nx_txmsg *prev = NULL;
  for (nx_txmsg *x = qc->act_head; x; prev = x, x = x->next) {
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

/* Opens streams for the messages of one queue, in order: stream ids give the
 * receiver the send order (non-overtaking per source and tag). User messages
 * leave NX_CONN_RESERVE bytes of connection credit and NX_STREAM_RESERVE
 * streams to runtime messages, which thus pass a receiver that holds user
 * data over its budget. */
static void open_queue(nx_qconn *qc, nx_txmsg **head, nx_txmsg **tail, int user) {
  while (*head) {
    nx_txmsg *m = *head;
    if (m->cancel) {
      *head = m->next;
      if (!*head) *tail = NULL;
      m->acked = m->total;
      nx_tx_acked(qc->ep, m, 0, 0);
      nx_tx_free(m);
      continue;
    }
    if (user && (ngtcp2_conn_get_max_data_left(qc->conn) < NX_CONN_RESERVE ||
                 ngtcp2_conn_get_streams_bidi_left(qc->conn) <= NX_STREAM_RESERVE))
      break;
    int64_t sid;
    int rv = ngtcp2_conn_open_bidi_stream(qc->conn, &sid, m);
    if (rv) break; /* NGTCP2_ERR_STREAM_ID_BLOCKED: the peer grants more as streams close */
    *head = m->next;
    if (!*head) *tail = NULL;
    m->sid = sid;
    act_push(qc, m);
  }
}

static void open_streams(nx_qconn *qc) {
  nx_peer *p = qc->peer;
  open_queue(qc, &p->txq_head, &p->txq_tail, 0);
  open_queue(qc, &p->utxq_head, &p->utxq_tail, 1);
}

static size_t build_vecs(nx_txmsg *m, ngtcp2_vec *v, size_t max) {
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

/* User point-to-point data, which a receiver may hold over its budget
 * (rendezvous descriptors are not held). */
static int is_user_data(const nx_txmsg *m) {
  return m->hdr[3] == NX_KIND_P2P && !(m->hdr[4] & NX_FLAG_RNDV);
}

/* The lowest stream id among user messages with bytes to send (m was just
 * popped off the list). Only when the connection is below its reserve. */
static int64_t oldest_user(const nx_qconn *qc, const nx_txmsg *m) {
  int64_t best = m->sid;
  for (const nx_txmsg *x = qc->act_head; x; x = x->next)
    if (is_user_data(x) && x->sid < best) best = x->sid;
  return best;
}

static void flush(nx_qconn *qc, size_t *lens, size_t *npk, size_t *off) {
  if (*npk)
    nx_udp_send(&qc->ep->udp, (struct sockaddr *)&qc->remote, qc->remotelen, qc->txbuf, lens, *npk);
  *npk = 0;
  *off = 0;
}

/* Writes one burst of packets: FINs for remote streams, then message data
 * round-robin across streams, then ACK/control-only packets. */
static int conn_write(nx_qconn *qc, uint64_t now) {
  if (qc->dead) return 0;
  if (!qc->txbuf && !(qc->txbuf = malloc((size_t)NX_BURST * 65536))) return 0;
  if (qc->peer && qc->peer->qc == qc && qc->peer->state == NX_PEER_UP) open_streams(qc);
  for (size_t i = 0; i < qc->nresets; i++) { /* cancelled sends: ngtcp2 lets go of them */
    nx_txmsg *m = qc->resets[i];
    ngtcp2_conn_shutdown_stream(qc->conn, m->sid, 1);
    ngtcp2_conn_set_stream_user_data(qc->conn, m->sid, NULL);
    if (m->in_queue) act_remove(qc, m);
    m->acked = m->total;
    nx_tx_acked(qc->ep, m, 0, 0);
    nx_tx_free(m);
  }
  qc->nresets = 0;
  size_t maxlen = ngtcp2_conn_get_max_tx_udp_payload_size(qc->conn);
  size_t pathlen = ngtcp2_conn_get_path_max_tx_udp_payload_size(qc->conn);
  size_t burst = NX_BURST;
  if (burst * pathlen > (size_t)NX_BURST * 65536) burst = (size_t)NX_BURST * 65536 / pathlen;
  size_t lens[NX_BURST], npk = 0, off = 0, tot = 0;
  nx_txmsg *blocked = NULL, *blocked_tail = NULL;
  /* The reverse-half FINs carry no information the peer waits for (they only
   * close streams and return stream credit), so they ride along with data or
   * go out in batches: a packet of FINs alone per message would double the
   * packet count of small-message traffic. */
  size_t nfins = qc->nfins;
  if (nfins && !qc->act_head && nfins < NX_FIN_BATCH && now < qc->fins_since + NX_FIN_DELAY_NS)
    nfins = 0;
  size_t fin_i = 0;
  int64_t oldest = -2; /* the oldest user message's stream, once needed */
  ngtcp2_path_storage ps;
  ngtcp2_path_storage_zero(&ps);
  ngtcp2_pkt_info pi;
  int rc = 0;
  while (tot < burst) {
    nx_txmsg *m = NULL;
    int64_t sid = -1;
    ngtcp2_vec vec[16];
    size_t nvec = 0;
    uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_NONE;
    if (fin_i < nfins) {
      sid = qc->fins[fin_i];
      flags = NGTCP2_WRITE_STREAM_FLAG_MORE | NGTCP2_WRITE_STREAM_FLAG_FIN;
    } else if ((m = act_pop(qc)) != NULL) {
      /* below the reserve a user message sends at most its header, so the
       * receiver can order the streams after it */
      int hdr_only = 0;
      if (is_user_data(m)) {
        uint64_t left = ngtcp2_conn_get_max_data_left(qc->conn);
        if (left < NX_CONN_RESERVE) {
          if (oldest < -1) oldest = oldest_user(qc, m);
          hdr_only = !(m->sid == oldest && left > NX_CONN_RESERVE / 2);
        }
      }
      if (hdr_only && m->sent >= NX_FRAME_HDR_LEN) {
        /* leave the rest of the window to runtime traffic (see NX_CONN_RESERVE) */
        m->next = NULL;
        if (blocked_tail)
          blocked_tail->next = m;
        else
          blocked = m;
        blocked_tail = m;
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
        m->next = NULL;
        if (blocked_tail)
          blocked_tail->next = m;
        else
          blocked = m;
        blocked_tail = m;
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
    nx_txmsg *b = blocked;
    blocked = b->next;
    act_push(qc, b);
  }
  ngtcp2_conn_update_pkt_tx_time(qc->conn, now);
  if (qc->peer) {
    ngtcp2_conn_stat cs;
    ngtcp2_conn_get_conn_stat(qc->conn, &cs);
    qc->peer->st.smoothed_rtt_us = (double)cs.smoothed_rtt / 1000.0;
    /* ngtcp2 0.12 exposes loss recovery episodes and PTOs, not a per-packet
     * loss count: each new episode or probe timeout counts once */
    if (cs.congestion_recovery_start_ts != qc->last_recovery_ts) {
      if (qc->last_recovery_ts != 0 || cs.congestion_recovery_start_ts != UINT64_MAX)
        qc->peer->st.packets_lost++;
      qc->last_recovery_ts = cs.congestion_recovery_start_ts;
    }
    if (cs.pto_count > qc->last_pto) qc->peer->st.packets_lost += cs.pto_count - qc->last_pto;
    qc->last_pto = cs.pto_count;
  }
  return rc;
}

uint64_t nx_quic_service(nx_ep *ep, uint64_t now) {
  uint64_t next = UINT64_MAX;
  nx_qconn *qc = ep->conns;
  while (qc) {
    nx_qconn *nxt = qc->next;
    if (qc->dead) {
      if (!qc->peer || qc->peer->qc != qc) nx_qconn_free(ep, qc);
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
    int up = qc->peer && qc->peer->qc == qc && qc->peer->state == NX_PEER_UP;
    int work =
        qc->act_head || (qc->peer && (qc->peer->txq_head || qc->peer->utxq_head)) || qc->nresets ||
        qc->force_write || qc->rx_since_write >= 2 || qc->rx_bytes_since_write >= 4096 ||
        (qc->nfins && (qc->nfins >= NX_FIN_BATCH || qc->fins_since + NX_FIN_DELAY_NS <= now));
    uint64_t slack = (!up || work) ? 0 : NX_ACK_SLACK_NS;
    uint64_t exp = ngtcp2_conn_get_expiry(qc->conn);
    if (exp != UINT64_MAX) exp += slack;
    int due = exp <= now;
    if (due) {
      int rv = ngtcp2_conn_handle_expiry(qc->conn, now);
      if (rv) {
        conn_failed(ep, qc, NEXAR_ERR_PEER_LOST,
                    rv == NGTCP2_ERR_IDLE_CLOSE ? "idle timeout" : "handshake or timer failure");
        if (!qc->peer || qc->peer->qc != qc) nx_qconn_free(ep, qc);
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
        write_close(ep, qc, &ce);
        conn_failed(ep, qc, qc->err_code, qc->proto_err);
      } else if (rv) {
        conn_failed(ep, qc, NEXAR_ERR_PEER_LOST, ngtcp2_strerror(rv));
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
static void send_close(nx_ep *ep, nx_qconn *qc, uint64_t code, const char *reason) {
  if (qc->dead || !qc->conn) return;
  ngtcp2_connection_close_error ce;
  size_t rl = reason ? NX_MIN(strlen(reason), 120) : 0;
  ngtcp2_connection_close_error_set_application_error(&ce, code, (const uint8_t *)reason, rl);
  write_close(ep, qc, &ce);
}

void nx_qconn_abandon(nx_qconn *qc, const char *why) {
  if (!qc) return;
  /* a peer we give up on (its bulk stream broke, it went silent) learns it
   * at once instead of after its own heartbeat timeout */
  if (why) {
    char reason[160];
    snprintf(reason, sizeof reason, "rank %u gave up on you: %s", qc->ep->rank, why);
    send_close(qc->ep, qc, NX_APP_GAVE_UP, reason);
  }
  /* its queued messages are freed by the caller: forget them first */
  qc->dead = 1;
  qc->act_head = qc->act_tail = NULL;
  qc->nresets = 0;
}

void nx_quic_close_all(nx_ep *ep) {
  while (ep->conns) {
    nx_qconn *qc = ep->conns;
    send_close(ep, qc, NX_APP_GOODBYE, NULL);
    /* drop queued and in-flight messages' references first */
    while (qc->act_head) {
      nx_txmsg *m = act_pop(qc);
      (void)m; /* freed by the engine's peer teardown through its request list */
    }
    nx_qconn_free(ep, qc);
  }
}
