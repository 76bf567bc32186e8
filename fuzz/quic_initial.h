/* Builds real QUIC v1 client Initials (ngtcp2 client + GnuTLS ClientHello,
 * ALPN nexar/1) for the admission tests: the attacker tool
 * tests/integration/initial_flood.c and the fuzz target fuzz_initial.c. */
#ifndef NX_FUZZ_QUIC_INITIAL_H
#define NX_FUZZ_QUIC_INITIAL_H
#include <arpa/inet.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <string.h>
#include <time.h>

typedef struct {
  ngtcp2_conn *conn;
  gnutls_session_t tls;
  ngtcp2_crypto_conn_ref ref;
} fake_client;

static inline uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void rnd(uint8_t *d, size_t n) {
  gnutls_rnd(GNUTLS_RND_NONCE, d, n);
}

static void cb_rand(uint8_t *d, size_t n, const ngtcp2_rand_ctx *c) {
  (void)c;
  rnd(d, n);
}

static int cb_new_cid(ngtcp2_conn *c, ngtcp2_cid *cid, uint8_t *token, size_t len, void *ud) {
  (void)c, (void)ud;
  rnd(cid->data, len);
  cid->datalen = len;
  rnd(token, NGTCP2_STATELESS_RESET_TOKENLEN);
  return 0;
}

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref) {
  return ((fake_client *)ref->user_data)->conn;
}

/* One client Initial for a new connection to dst (from 127.0.0.1), with a
 * token if tokenlen > 0 and destination id dcid_in if not NULL, into out; returns its length (0 on
 * failure). */
static size_t make_initial(gnutls_certificate_credentials_t creds, const struct sockaddr_in *dst,
                           const uint8_t *token, size_t tokenlen, const ngtcp2_cid *dcid_in,
                           uint8_t *out, size_t cap) {
  fake_client fc = {0};
  ngtcp2_callbacks cb = {0};
  cb.client_initial = ngtcp2_crypto_client_initial_cb;
  cb.recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb;
  cb.encrypt = ngtcp2_crypto_encrypt_cb;
  cb.decrypt = ngtcp2_crypto_decrypt_cb;
  cb.hp_mask = ngtcp2_crypto_hp_mask_cb;
  cb.recv_retry = ngtcp2_crypto_recv_retry_cb;
  cb.update_key = ngtcp2_crypto_update_key_cb;
  cb.delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb;
  cb.delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb;
  cb.get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb;
  cb.version_negotiation = ngtcp2_crypto_version_negotiation_cb;
  cb.rand = cb_rand;
  cb.get_new_connection_id = cb_new_cid;
  ngtcp2_settings st;
  ngtcp2_transport_params tp;
  ngtcp2_settings_default(&st);
  ngtcp2_transport_params_default(&tp);
  st.initial_ts = now_ns();
  if (tokenlen) {
    st.token.base = (uint8_t *)token;
    st.token.len = tokenlen;
  }
  tp.initial_max_streams_bidi = 16;
  tp.initial_max_data = 1 << 20;
  ngtcp2_cid dcid, scid;
  dcid.datalen = 18;
  scid.datalen = 16;
  rnd(dcid.data, dcid.datalen);
  if (dcid_in) dcid = *dcid_in;
  rnd(scid.data, scid.datalen);
  struct sockaddr_in local = {.sin_family = AF_INET};
  local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ngtcp2_path path = {
      {(ngtcp2_sockaddr *)&local, sizeof local}, {(ngtcp2_sockaddr *)dst, sizeof *dst}, NULL};
  size_t n = 0;
  if (ngtcp2_conn_client_new(&fc.conn, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1, &cb, &st, &tp,
                             NULL, &fc))
    return 0;
  if (gnutls_init(&fc.tls, GNUTLS_CLIENT | GNUTLS_NO_END_OF_EARLY_DATA) < 0) goto out;
  gnutls_priority_set_direct(fc.tls,
                             "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:"
                             "%DISABLE_TLS13_COMPAT_MODE",
                             NULL);
  ngtcp2_crypto_gnutls_configure_client_session(fc.tls);
  gnutls_credentials_set(fc.tls, GNUTLS_CRD_CERTIFICATE, creds);
  gnutls_server_name_set(fc.tls, GNUTLS_NAME_DNS, "nexar", 5);
  gnutls_datum_t alpn = {(unsigned char *)"nexar/1", 7};
  gnutls_alpn_set_protocols(fc.tls, &alpn, 1, GNUTLS_ALPN_MANDATORY);
  fc.ref.get_conn = get_conn;
  fc.ref.user_data = &fc;
  gnutls_session_set_ptr(fc.tls, &fc.ref);
  ngtcp2_conn_set_tls_native_handle(fc.conn, fc.tls);
  ngtcp2_path_storage ps;
  ngtcp2_path_storage_zero(&ps);
  ngtcp2_ssize w = ngtcp2_conn_write_pkt(fc.conn, &ps.path, NULL, out, cap, now_ns());
  if (w > 0) n = (size_t)w;
out:
  ngtcp2_conn_del(fc.conn);
  if (fc.tls) gnutls_deinit(fc.tls);
  return n;
}

#endif
