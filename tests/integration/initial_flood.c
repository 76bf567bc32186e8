/* Attacker for the admission tests: sends real QUIC v1 client Initials
 * (ngtcp2 client + GnuTLS ClientHello, ALPN nexar/1, padded to 1200 bytes)
 * that never complete a handshake, to 127.0.0.1 only.
 *   initial_flood <packets/s in total> <seconds> <distinct per port> port...
 * Every 10 s a fresh set of distinct Initials (new connection ids) is made,
 * so a server that keeps state per Initial sees new handshakes each time.
 * Prints how many datagrams it sent. */
#include <arpa/inet.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  ngtcp2_conn *conn;
  gnutls_session_t tls;
  ngtcp2_crypto_conn_ref ref;
} fake_client;

static uint64_t now_ns(void) {
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

static gnutls_certificate_credentials_t creds;

/* One Initial for a new connection to dst, into out (returns its length). */
static size_t make_initial(const struct sockaddr_in *dst, uint8_t *out, size_t cap) {
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
  tp.initial_max_streams_bidi = 16;
  tp.initial_max_data = 1 << 20;
  ngtcp2_cid dcid, scid;
  dcid.datalen = 18;
  scid.datalen = 16;
  rnd(dcid.data, dcid.datalen);
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

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: initial_flood <pps total> <seconds> <distinct per port> port...\n");
    return 2;
  }
  double pps = atof(argv[1]), secs = atof(argv[2]);
  int distinct = atoi(argv[3]), nports = argc - 4;
  if (distinct < 1) distinct = 1;
  gnutls_certificate_allocate_credentials(&creds);
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in *dst = calloc((size_t)nports, sizeof *dst);
  for (int i = 0; i < nports; i++) {
    dst[i].sin_family = AF_INET;
    dst[i].sin_addr.s_addr = htonl(INADDR_LOOPBACK); /* loopback only */
    dst[i].sin_port = htons((uint16_t)atoi(argv[4 + i]));
  }
  size_t npk = (size_t)distinct * (size_t)nports;
  uint8_t(*pk)[1500] = calloc(npk, sizeof *pk);
  size_t *len = calloc(npk, sizeof *len);
  uint64_t start = now_ns(), end = start + (uint64_t)(secs * 1e9), made = 0;
  uint64_t gap = pps > 0 ? (uint64_t)(1e9 / pps) : 1000000000ull, next = start;
  unsigned long sent = 0;
  size_t k = 0;
  while (now_ns() < end) {
    uint64_t t = now_ns();
    if (made == 0 || t - made >= 10000000000ull) { /* a fresh set every 10 s */
      for (size_t i = 0; i < npk; i++)
        len[i] = make_initial(&dst[i % (size_t)nports], pk[i], 1200);
      if (!made) {
        printf("ready\n"); /* the first set exists: the flood starts now */
        fflush(stdout);
      }
      made = now_ns();
    }
    if (t < next) {
      uint64_t d = next - t;
      struct timespec ts = {(time_t)(d / 1000000000ull), (long)(d % 1000000000ull)};
      nanosleep(&ts, NULL);
      continue;
    }
    next += gap;
    if (next < t) next = t; /* fell behind: no burst */
    size_t i = k++ % npk;
    if (len[i] &&
        sendto(fd, pk[i], len[i], 0, (struct sockaddr *)&dst[i % (size_t)nports], sizeof *dst) > 0)
      sent++;
  }
  printf("initial_flood: sent %lu Initials to %d port(s) in %.1f s\n", sent, nports,
         (now_ns() - start) / 1e9);
  close(fd);
  free(pk);
  free(len);
  free(dst);
  gnutls_certificate_free_credentials(creds);
  return 0;
}
