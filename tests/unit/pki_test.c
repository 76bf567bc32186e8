/* Cluster PKI: CA, local keys, CSR signing, rank extraction, impostors and a real mutual TLS
 * 1.3 handshake over a socketpair with rank checks in the verify callback. */
#include "transport/pki.h"
#include "core/common.h"

#include <gnutls/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int failures;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK(%s) failed (last error: %s)\n", __FILE__, __LINE__, #cond,     \
              nexar_last_error());                                                                 \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static const uint8_t CID[16] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
                                0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10};
static const uint8_t OTHER_CID[16] = {9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9};

/* A member: key + certificate issued by some CA for some rank. */
typedef struct member {
  nx_key *key;
  uint8_t *cert;
  size_t cert_len;
} member;

static int member_new(member *m, nx_ca *ca, uint32_t rank) {
  uint8_t *csr = NULL;
  size_t csr_len = 0;
  memset(m, 0, sizeof *m);
  int rc = nx_key_new(&m->key);
  if (!rc) rc = nx_csr_new(m->key, &csr, &csr_len);
  if (!rc) rc = nx_ca_sign(ca, csr, csr_len, rank, &m->cert, &m->cert_len);
  free(csr);
  return rc;
}

static void member_del(member *m) {
  nx_key_del(m->key);
  free(m->cert);
}

static void test_sign_and_rank(nx_ca *ca, const uint8_t *cader, size_t calen) {
  member m;
  CHECK(member_new(&m, ca, 42) == 0);
  uint32_t rank = 0;
  CHECK(nx_cert_rank(m.cert, m.cert_len, cader, calen, CID, &rank) == 0);
  CHECK(rank == 42);
  /* Wrong cluster id for the same (genuine) certificate. */
  CHECK(nx_cert_rank(m.cert, m.cert_len, cader, calen, OTHER_CID, &rank) == NEXAR_ERR_AUTH);
  CHECK(strstr(nexar_last_error(), "another cluster") != NULL);
  /* The CA certificate itself is not a member certificate. */
  CHECK(nx_cert_rank(cader, calen, cader, calen, CID, &rank) == NEXAR_ERR_AUTH);
  /* Garbage and truncated certificates. */
  CHECK(nx_cert_rank(m.cert, m.cert_len / 2, cader, calen, CID, &rank) == NEXAR_ERR_AUTH);
  uint8_t *bad = malloc(m.cert_len);
  CHECK(bad != NULL);
  if (bad) {
    memcpy(bad, m.cert, m.cert_len);
    bad[m.cert_len - 5] ^= 0x40; /* inside the signature */
    CHECK(nx_cert_rank(bad, m.cert_len, cader, calen, CID, &rank) == NEXAR_ERR_AUTH);
    free(bad);
  }

  /* Look at what was issued. */
  gnutls_x509_crt_t c;
  gnutls_datum_t d = {m.cert, (unsigned)m.cert_len};
  CHECK(gnutls_x509_crt_init(&c) == 0);
  CHECK(gnutls_x509_crt_import(c, &d, GNUTLS_X509_FMT_DER) == 0);
  char san[128];
  size_t sz = sizeof san;
  unsigned crit = 0;
  CHECK(gnutls_x509_crt_get_subject_alt_name(c, 0, san, &sz, &crit) == GNUTLS_SAN_URI);
  CHECK(strcmp(san, "nexar://0123456789abcdeffedcba9876543210/rank/42") == 0);
  unsigned ku = 0;
  CHECK(gnutls_x509_crt_get_key_usage(c, &ku, &crit) >= 0 && ku == GNUTLS_KEY_DIGITAL_SIGNATURE);
  CHECK(gnutls_x509_crt_check_key_purpose(c, GNUTLS_KP_TLS_WWW_SERVER, 0));
  CHECK(gnutls_x509_crt_check_key_purpose(c, GNUTLS_KP_TLS_WWW_CLIENT, 0));
  time_t now = time(NULL), act = gnutls_x509_crt_get_activation_time(c),
         exp = gnutls_x509_crt_get_expiration_time(c);
  CHECK(act <= now - 3500 && act >= now - 3700);
  CHECK(exp >= now + NX_CERT_VALIDITY_S - 100 && exp <= now + NX_CERT_VALIDITY_S + 100);
  uint8_t s1[32], s2[32];
  size_t l1 = sizeof s1, l2 = sizeof s2;
  CHECK(gnutls_x509_crt_get_serial(c, s1, &l1) == 0);
  gnutls_x509_crt_deinit(c);

  /* A second certificate for the same rank gets another serial. */
  member m2;
  CHECK(member_new(&m2, ca, 42) == 0);
  d.data = m2.cert;
  d.size = (unsigned)m2.cert_len;
  CHECK(gnutls_x509_crt_init(&c) == 0);
  CHECK(gnutls_x509_crt_import(c, &d, GNUTLS_X509_FMT_DER) == 0);
  CHECK(gnutls_x509_crt_get_serial(c, s2, &l2) == 0);
  CHECK(l1 != l2 || memcmp(s1, s2, l1) != 0);
  gnutls_x509_crt_deinit(c);
  member_del(&m2);

  /* Own-credential sanity: a certificate for another key is refused. */
  gnutls_certificate_credentials_t cred;
  nx_key *k2 = NULL;
  CHECK(nx_key_new(&k2) == 0);
  CHECK(nx_tls_creds_new(&cred, k2, m.cert, m.cert_len, cader, calen) == NEXAR_ERR_AUTH);
  CHECK(nx_tls_creds_new(&cred, m.key, m.cert, m.cert_len, cader, calen) == 0);
  gnutls_certificate_free_credentials(cred);
  nx_key_del(k2);
  CHECK(nx_ca_sign(ca, (const uint8_t *)"x", 1, UINT32_MAX, &bad, &sz) ==
        NEXAR_ERR_INVALID_ARGUMENT);
  member_del(&m);
}

static void test_impostors(nx_ca *ca, const uint8_t *cader, size_t calen) {
  /* Another CA for the SAME cluster id: its certificates must not pass our CA. */
  nx_ca *evil = NULL;
  CHECK(nx_ca_new(&evil, CID) == 0);
  member m;
  CHECK(member_new(&m, evil, 1) == 0);
  uint32_t rank = 77;
  CHECK(nx_cert_rank(m.cert, m.cert_len, cader, calen, CID, &rank) == NEXAR_ERR_AUTH);
  CHECK(rank == 77);
  member_del(&m);
  nx_ca_del(evil);

  /* A genuine CA of another cluster, checked against its own CA but our cluster id. */
  nx_ca *other = NULL;
  uint8_t *oder = NULL;
  size_t olen = 0;
  CHECK(nx_ca_new(&other, OTHER_CID) == 0);
  CHECK(nx_ca_cert(other, &oder, &olen) == 0);
  CHECK(member_new(&m, other, 3) == 0);
  CHECK(nx_cert_rank(m.cert, m.cert_len, oder, olen, OTHER_CID, &rank) == 0 && rank == 3);
  CHECK(nx_cert_rank(m.cert, m.cert_len, oder, olen, CID, &rank) == NEXAR_ERR_AUTH);
  member_del(&m);
  free(oder);
  nx_ca_del(other);
}

static void test_bad_csr(nx_ca *ca) {
  nx_key *k = NULL;
  uint8_t *csr = NULL, *cert = NULL;
  size_t len = 0, clen = 0;
  CHECK(nx_key_new(&k) == 0);
  CHECK(nx_csr_new(k, &csr, &len) == 0);
  if (!csr) return;
  int rc;
  /* Every truncation. */
  for (size_t i = 0; i < len; i++) {
    rc = nx_ca_sign(ca, csr, i, 1, &cert, &clen);
    CHECK(rc == NEXAR_ERR_PROTOCOL || rc == NEXAR_ERR_AUTH);
  }
  /* Every single-bit flip: refused, or (if gnutls tolerates that bit) still a valid cert. */
  uint8_t *c = malloc(len);
  CHECK(c != NULL);
  int refused = 0;
  for (size_t i = 0; c && i < len; i++) {
    memcpy(c, csr, len);
    c[i] ^= (uint8_t)(1u << (i % 8));
    rc = nx_ca_sign(ca, c, len, 1, &cert, &clen);
    CHECK(rc == 0 || rc == NEXAR_ERR_PROTOCOL || rc == NEXAR_ERR_AUTH);
    if (rc == 0)
      free(cert);
    else
      refused++;
  }
  CHECK(refused > (int)len * 9 / 10);
  /* A flipped bit in the subject name: parses, but the self-signature fails. */
  if (c) {
    memcpy(c, csr, len);
    uint8_t *cn = memmem(c, len, "nexar worker", 12);
    CHECK(cn != NULL);
    if (cn) cn[0] = 'N';
    CHECK(nx_ca_sign(ca, c, len, 1, &cert, &clen) == NEXAR_ERR_AUTH);
  }
  free(c);
  /* Oversized input is refused before parsing. */
  uint8_t *big = calloc(NX_CSR_MAX + 1, 1);
  CHECK(big != NULL);
  if (big) {
    memcpy(big, csr, len);
    CHECK(nx_ca_sign(ca, big, NX_CSR_MAX + 1, 1, &cert, &clen) == NEXAR_ERR_PROTOCOL);
    free(big);
  }
  CHECK(nx_ca_sign(ca, NULL, 0, 1, &cert, &clen) == NEXAR_ERR_PROTOCOL);
  free(csr);
  nx_key_del(k);
}

/* ---- concurrent signing */

typedef struct signer {
  nx_ca *ca;
  const uint8_t *cader;
  size_t calen;
  uint32_t base;
  int bad;
} signer;

static void *sign_many(void *arg) {
  signer *s = arg;
  for (uint32_t i = 0; i < 4; i++) {
    member m;
    uint32_t r = 0;
    if (member_new(&m, s->ca, s->base + i) != 0 ||
        nx_cert_rank(m.cert, m.cert_len, s->cader, s->calen, CID, &r) != 0 || r != s->base + i)
      s->bad++;
    member_del(&m);
  }
  return NULL;
}

static void test_threads(nx_ca *ca, const uint8_t *cader, size_t calen) {
  pthread_t t[3];
  signer s[3];
  for (int i = 0; i < 3; i++) {
    s[i] = (signer){ca, cader, calen, (uint32_t)(100 * i), 0};
    CHECK(pthread_create(&t[i], NULL, sign_many, &s[i]) == 0);
  }
  for (int i = 0; i < 3; i++) {
    pthread_join(t[i], NULL);
    CHECK(s[i].bad == 0);
  }
}

/* ---- mutual TLS 1.3 over a socketpair */

typedef struct side {
  gnutls_session_t s;
  gnutls_certificate_credentials_t cred;
  int fd;
  int server;
  int hs;              /* handshake result */
  int verify_rc;       /* nx_tls_peer_rank result from the callback */
  uint32_t peer;       /* rank reported by the callback */
  uint32_t peer_after; /* rank reported after the handshake */
} side;

static int verify_cb(gnutls_session_t s) {
  side *sd = gnutls_session_get_ptr(s);
  sd->verify_rc = nx_tls_peer_rank(s, CID, &sd->peer);
  return sd->verify_rc == 0 ? 0 : -1;
}

static int side_init(side *sd, int fd, int server, member *m, const uint8_t *cader, size_t calen) {
  memset(sd, 0, sizeof *sd);
  sd->fd = fd;
  sd->server = server;
  sd->verify_rc = 1;
  int rc = nx_tls_creds_new(&sd->cred, m->key, m->cert, m->cert_len, cader, calen);
  if (rc) return rc;
  if (gnutls_init(&sd->s, server ? GNUTLS_SERVER : GNUTLS_CLIENT) < 0) return -1;
  if (gnutls_priority_set_direct(sd->s, "NORMAL:-VERS-ALL:+VERS-TLS1.3", NULL) < 0) return -1;
  if (gnutls_credentials_set(sd->s, GNUTLS_CRD_CERTIFICATE, sd->cred) < 0) return -1;
  if (server) gnutls_certificate_server_set_request(sd->s, GNUTLS_CERT_REQUIRE);
  gnutls_session_set_ptr(sd->s, sd);
  gnutls_session_set_verify_function(sd->s, verify_cb);
  gnutls_transport_set_int(sd->s, fd);
  gnutls_handshake_set_timeout(sd->s, 5000);
  return 0;
}

static void side_fini(side *sd) {
  if (sd->s) gnutls_deinit(sd->s);
  if (sd->cred) gnutls_certificate_free_credentials(sd->cred);
  close(sd->fd);
}

static void *handshake(void *arg) {
  side *sd = arg;
  int ret;
  do {
    ret = gnutls_handshake(sd->s);
  } while (ret < 0 && !gnutls_error_is_fatal(ret));
  sd->hs = ret;
  if (ret == 0) {
    /* Both the callback and a post-handshake call work. */
    sd->verify_rc = nx_tls_peer_rank(sd->s, CID, &sd->peer_after);
  } else {
    /* Let the other side see the failure instead of waiting for more bytes. */
    shutdown(sd->fd, SHUT_RDWR);
  }
  return NULL;
}

static void run_pair(member *srv, member *cli, const uint8_t *cader, size_t calen, side *a,
                     side *b) {
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  CHECK(side_init(a, sv[0], 1, srv, cader, calen) == 0);
  CHECK(side_init(b, sv[1], 0, cli, cader, calen) == 0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, handshake, a) == 0);
  handshake(b);
  pthread_join(t, NULL);
}

static void test_tls(nx_ca *ca, const uint8_t *cader, size_t calen) {
  member m5, m9;
  CHECK(member_new(&m5, ca, 5) == 0);
  CHECK(member_new(&m9, ca, 9) == 0);
  side a, b;
  run_pair(&m5, &m9, cader, calen, &a, &b);
  CHECK(a.hs == 0 && b.hs == 0);
  CHECK(a.verify_rc == 0 && b.verify_rc == 0);
  CHECK(a.peer == 9 && a.peer_after == 9);
  CHECK(b.peer == 5 && b.peer_after == 5);
  /* Application data flows. */
  if (a.hs == 0 && b.hs == 0) {
    char buf[8] = {0};
    CHECK(gnutls_record_send(b.s, "ping", 4) == 4);
    CHECK(gnutls_record_recv(a.s, buf, sizeof buf) == 4 && memcmp(buf, "ping", 4) == 0);
  }
  /* Rank check against another cluster id on a verified session. */
  uint32_t r;
  if (a.hs == 0) CHECK(nx_tls_peer_rank(a.s, OTHER_CID, &r) == NEXAR_ERR_AUTH);
  side_fini(&a);
  side_fini(&b);

  /* The client holds a certificate from an impostor CA (same cluster id): both sides fail. */
  nx_ca *evil = NULL;
  CHECK(nx_ca_new(&evil, CID) == 0);
  member fake;
  CHECK(member_new(&fake, evil, 9) == 0);
  /* Impostor client trusting our CA (it has our CA cert), presenting its forged certificate. */
  run_pair(&m5, &fake, cader, calen, &a, &b);
  CHECK(a.hs < 0);
  CHECK(a.verify_rc == NEXAR_ERR_AUTH);
  /* In TLS 1.3 the client finishes first; it learns of the rejection on its next read. */
  if (b.hs == 0) {
    char buf[8];
    CHECK(gnutls_record_recv(b.s, buf, sizeof buf) < 0);
  }
  side_fini(&a);
  side_fini(&b);
  /* Impostor server. */
  run_pair(&fake, &m9, cader, calen, &a, &b);
  CHECK(a.hs < 0 && b.hs < 0);
  CHECK(b.verify_rc == NEXAR_ERR_AUTH);
  side_fini(&a);
  side_fini(&b);
  member_del(&fake);
  nx_ca_del(evil);
  member_del(&m5);
  member_del(&m9);
}

int main(void) {
  nx_tls_global_init();
  nx_ca *ca = NULL;
  uint8_t *cader = NULL;
  size_t calen = 0;
  CHECK(nx_ca_new(&ca, CID) == 0);
  CHECK(nx_ca_cert(ca, &cader, &calen) == 0);
  if (!ca || !cader) return 1;
  test_sign_and_rank(ca, cader, calen);
  test_impostors(ca, cader, calen);
  test_bad_csr(ca);
  test_threads(ca, cader, calen);
  test_tls(ca, cader, calen);
  free(cader);
  nx_ca_del(ca);
  gnutls_global_deinit();
  if (failures) {
    fprintf(stderr, "pki_test: %d failure(s)\n", failures);
    return 1;
  }
  printf("pki_test: ok\n");
  return 0;
}
