/* Cluster CA, local key generation and rank-binding certificates (see pki.h). */
#include "transport/pki.h"

#include "core/common.h"

#include <gnutls/abstract.h>
#include <gnutls/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CA_VALIDITY_S (10L * 365 * 24 * 3600) /* outlives every certificate it issues */
#define URI_PREFIX "nexar://"
#define URI_MAX 96 /* "nexar://" + 32 hex + "/rank/" + 10 digits, with room */

struct nx_key {
  gnutls_x509_privkey_t key;
};

struct nx_ca {
  pthread_mutex_t lock; /* serialises use of key/crt by concurrent nx_ca_sign calls */
  gnutls_x509_privkey_t key;
  gnutls_x509_crt_t crt;
  uint8_t cluster_id[16];
  uint8_t *der;
  size_t der_len;
  uint8_t skid[64]; /* subject key identifier, copied into issued certs */
  size_t skid_len;
};

static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static int tls_init_rc;

static void tls_init_once(void) {
  tls_init_rc = gnutls_global_init();
}

void nx_tls_global_init(void) {
  pthread_once(&tls_once, tls_init_once);
  if (tls_init_rc < 0) NX_ERROR("gnutls_global_init: %s", gnutls_strerror(tls_init_rc));
}

static void hex16(const uint8_t id[16], char out[33]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    out[2 * i] = digits[id[i] >> 4];
    out[2 * i + 1] = digits[id[i] & 15];
  }
  out[32] = 0;
}

/* Positive, nonzero 16-byte serial (RFC 5280 allows up to 20 octets). */
static int set_random_serial(gnutls_x509_crt_t crt) {
  uint8_t serial[16];
  int rc = nx_random(serial, sizeof serial);
  if (rc) return rc;
  serial[0] = (uint8_t)((serial[0] & 0x7f) | 0x01);
  if (gnutls_x509_crt_set_serial(crt, serial, sizeof serial) < 0)
    return nx_fail(NEXAR_ERR_TLS, "certificate: cannot set serial");
  return 0;
}

/* Copies a gnutls datum into a malloc'd buffer and frees the datum. */
static int take_datum(gnutls_datum_t *d, uint8_t **out, size_t *len, const char *what) {
  uint8_t *p = malloc(d->size ? d->size : 1);
  if (!p) {
    gnutls_free(d->data);
    return nx_fail(NEXAR_ERR_NOMEM, "%s: out of memory", what);
  }
  memcpy(p, d->data, d->size);
  *out = p;
  *len = d->size;
  gnutls_free(d->data);
  d->data = NULL;
  return 0;
}

/* --------------------------------------------------------------------- keys */

int nx_key_new(nx_key **out) {
  if (!out) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "nx_key_new: NULL");
  *out = NULL;
  nx_tls_global_init();
  nx_key *k = nx_calloc(1, sizeof *k);
  if (!k) return nx_fail(NEXAR_ERR_NOMEM, "key: out of memory");
  int ret = gnutls_x509_privkey_init(&k->key);
  if (ret < 0) {
    free(k);
    return nx_fail(NEXAR_ERR_TLS, "key: %s", gnutls_strerror(ret));
  }
  ret = gnutls_x509_privkey_generate2(k->key, GNUTLS_PK_ECDSA,
                                      GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0, NULL, 0);
  if (ret < 0) {
    nx_key_del(k);
    return nx_fail(NEXAR_ERR_TLS, "generating an ECDSA P-256 key: %s", gnutls_strerror(ret));
  }
  *out = k;
  return 0;
}

void nx_key_del(nx_key *k) {
  if (!k) return;
  if (k->key) gnutls_x509_privkey_deinit(k->key);
  free(k);
}

int nx_csr_new(const nx_key *k, uint8_t **der, size_t *len) {
  if (!k || !der || !len) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "nx_csr_new: NULL");
  gnutls_x509_crq_t crq;
  gnutls_datum_t d = {NULL, 0};
  static const char cn[] = "nexar worker";
  int ret = gnutls_x509_crq_init(&crq);
  if (ret < 0) return nx_fail(NEXAR_ERR_TLS, "CSR: %s", gnutls_strerror(ret));
  if ((ret = gnutls_x509_crq_set_version(crq, 1)) < 0 ||
      (ret = gnutls_x509_crq_set_dn_by_oid(crq, GNUTLS_OID_X520_COMMON_NAME, 0, cn,
                                           sizeof cn - 1)) < 0 ||
      (ret = gnutls_x509_crq_set_key(crq, k->key)) < 0 ||
      (ret = gnutls_x509_crq_sign2(crq, k->key, GNUTLS_DIG_SHA256, 0)) < 0 ||
      (ret = gnutls_x509_crq_export2(crq, GNUTLS_X509_FMT_DER, &d)) < 0) {
    gnutls_x509_crq_deinit(crq);
    return nx_fail(NEXAR_ERR_TLS, "building the certificate request: %s", gnutls_strerror(ret));
  }
  gnutls_x509_crq_deinit(crq);
  return take_datum(&d, der, len, "CSR");
}

/* ----------------------------------------------------------------------- CA */

int nx_ca_new(nx_ca **out, const uint8_t cluster_id[16]) {
  if (!out || !cluster_id) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "nx_ca_new: NULL");
  *out = NULL;
  nx_tls_global_init();
  nx_ca *ca = nx_calloc(1, sizeof *ca);
  if (!ca) return nx_fail(NEXAR_ERR_NOMEM, "CA: out of memory");
  if (pthread_mutex_init(&ca->lock, NULL) != 0) {
    free(ca);
    return nx_fail(NEXAR_ERR_IO, "CA: pthread_mutex_init failed");
  }
  memcpy(ca->cluster_id, cluster_id, 16);
  char hex[33], cn[64];
  hex16(cluster_id, hex);
  int cnlen = snprintf(cn, sizeof cn, "nexar cluster CA %s", hex);
  time_t now = time(NULL);
  gnutls_datum_t d = {NULL, 0};
  int ret = gnutls_x509_privkey_init(&ca->key);
  if (ret >= 0)
    ret = gnutls_x509_privkey_generate2(
        ca->key, GNUTLS_PK_ECDSA, GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0, NULL, 0);
  if (ret >= 0) ret = gnutls_x509_crt_init(&ca->crt);
  if (ret < 0) {
    nx_ca_del(ca);
    return nx_fail(NEXAR_ERR_TLS, "CA key: %s", gnutls_strerror(ret));
  }
  int rc = set_random_serial(ca->crt);
  if (rc) {
    nx_ca_del(ca);
    return rc;
  }
  ca->skid_len = sizeof ca->skid;
  if ((ret = gnutls_x509_crt_set_version(ca->crt, 3)) < 0 ||
      (ret = gnutls_x509_crt_set_dn_by_oid(ca->crt, GNUTLS_OID_X520_COMMON_NAME, 0, cn,
                                           (unsigned)cnlen)) < 0 ||
      (ret = gnutls_x509_crt_set_key(ca->crt, ca->key)) < 0 ||
      (ret = gnutls_x509_crt_set_activation_time(ca->crt, now - NX_CERT_BACKDATE_S)) < 0 ||
      (ret = gnutls_x509_crt_set_expiration_time(ca->crt, now + CA_VALIDITY_S)) < 0 ||
      (ret = gnutls_x509_crt_set_basic_constraints(ca->crt, 1, 0)) < 0 ||
      (ret = gnutls_x509_crt_set_key_usage(ca->crt,
                                           GNUTLS_KEY_KEY_CERT_SIGN | GNUTLS_KEY_CRL_SIGN)) < 0 ||
      (ret = gnutls_x509_privkey_get_key_id(ca->key, GNUTLS_KEYID_USE_SHA1, ca->skid,
                                            &ca->skid_len)) < 0 ||
      (ret = gnutls_x509_crt_set_subject_key_id(ca->crt, ca->skid, ca->skid_len)) < 0 ||
      (ret = gnutls_x509_crt_sign2(ca->crt, ca->crt, ca->key, GNUTLS_DIG_SHA256, 0)) < 0 ||
      (ret = gnutls_x509_crt_export2(ca->crt, GNUTLS_X509_FMT_DER, &d)) < 0) {
    nx_ca_del(ca);
    return nx_fail(NEXAR_ERR_TLS, "building the CA certificate: %s", gnutls_strerror(ret));
  }
  rc = take_datum(&d, &ca->der, &ca->der_len, "CA certificate");
  if (rc) {
    nx_ca_del(ca);
    return rc;
  }
  *out = ca;
  return 0;
}

void nx_ca_del(nx_ca *ca) {
  if (!ca) return;
  if (ca->crt) gnutls_x509_crt_deinit(ca->crt);
  if (ca->key) gnutls_x509_privkey_deinit(ca->key);
  free(ca->der);
  pthread_mutex_destroy(&ca->lock);
  free(ca);
}

int nx_ca_cert(const nx_ca *ca, uint8_t **der, size_t *len) {
  if (!ca || !der || !len) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "nx_ca_cert: NULL");
  uint8_t *p = malloc(ca->der_len);
  if (!p) return nx_fail(NEXAR_ERR_NOMEM, "CA certificate: out of memory");
  memcpy(p, ca->der, ca->der_len);
  *der = p;
  *len = ca->der_len;
  return 0;
}

/* Parses and checks the request; on success *pub holds its P-256 public key. */
static int csr_pubkey(const uint8_t *csr, size_t csr_len, uint32_t rank, gnutls_pubkey_t *pub) {
  gnutls_x509_crq_t crq;
  gnutls_datum_t in = {(unsigned char *)csr, (unsigned)csr_len};
  int ret = gnutls_x509_crq_init(&crq);
  if (ret < 0) return nx_fail(NEXAR_ERR_TLS, "CSR: %s", gnutls_strerror(ret));
  ret = gnutls_x509_crq_import(crq, &in, GNUTLS_X509_FMT_DER);
  if (ret < 0) {
    gnutls_x509_crq_deinit(crq);
    return nx_fail(NEXAR_ERR_PROTOCOL, "CSR for rank %u is not a PKCS#10 request: %s",
                   (unsigned)rank, gnutls_strerror(ret));
  }
  /* Proof of possession: the request is signed by the key it carries. */
  ret = gnutls_x509_crq_verify(crq, 0);
  if (ret < 0) {
    gnutls_x509_crq_deinit(crq);
    return nx_fail(NEXAR_ERR_AUTH, "CSR for rank %u: bad self-signature: %s", (unsigned)rank,
                   gnutls_strerror(ret));
  }
  ret = gnutls_pubkey_init(pub);
  if (ret < 0) {
    gnutls_x509_crq_deinit(crq);
    return nx_fail(NEXAR_ERR_TLS, "CSR: %s", gnutls_strerror(ret));
  }
  ret = gnutls_pubkey_import_x509_crq(*pub, crq, 0);
  gnutls_x509_crq_deinit(crq);
  gnutls_ecc_curve_t curve = GNUTLS_ECC_CURVE_INVALID;
  if (ret >= 0) {
    if (gnutls_pubkey_get_pk_algorithm(*pub, NULL) != GNUTLS_PK_ECDSA)
      ret = GNUTLS_E_UNKNOWN_PK_ALGORITHM;
    else
      ret = gnutls_pubkey_export_ecc_raw2(*pub, &curve, NULL, NULL, 0);
  }
  if (ret < 0 || curve != GNUTLS_ECC_CURVE_SECP256R1) {
    gnutls_pubkey_deinit(*pub);
    *pub = NULL;
    return nx_fail(NEXAR_ERR_PROTOCOL, "CSR for rank %u: key is not ECDSA P-256 (%s)",
                   (unsigned)rank, ret < 0 ? gnutls_strerror(ret) : "other curve");
  }
  return 0;
}

int nx_ca_sign(nx_ca *ca, const uint8_t *csr, size_t csr_len, uint32_t rank, uint8_t **cert_der,
               size_t *len) {
  if (!ca || !cert_der || !len) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "nx_ca_sign: NULL");
  if (rank == UINT32_MAX) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "nx_ca_sign: bad rank");
  if (!csr || csr_len == 0 || csr_len > NX_CSR_MAX)
    return nx_fail(NEXAR_ERR_PROTOCOL, "CSR for rank %u: %zu bytes (limit %u)", (unsigned)rank,
                   csr_len, NX_CSR_MAX);
  gnutls_pubkey_t pub = NULL;
  int rc = csr_pubkey(csr, csr_len, rank, &pub);
  if (rc) return rc;

  char hex[33], uri[URI_MAX], cn[48];
  hex16(ca->cluster_id, hex);
  int ulen = snprintf(uri, sizeof uri, URI_PREFIX "%s/rank/%u", hex, (unsigned)rank);
  int cnlen = snprintf(cn, sizeof cn, "nexar rank %u", (unsigned)rank);
  uint8_t kid[64];
  size_t kid_len = sizeof kid;
  time_t now = time(NULL);
  gnutls_x509_crt_t crt;
  gnutls_datum_t d = {NULL, 0};
  int ret = gnutls_x509_crt_init(&crt);
  if (ret < 0) {
    gnutls_pubkey_deinit(pub);
    return nx_fail(NEXAR_ERR_TLS, "certificate: %s", gnutls_strerror(ret));
  }
  rc = set_random_serial(crt);
  if (rc) goto out;
  /* Everything in the certificate comes from us except the public key. */
  if ((ret = gnutls_x509_crt_set_version(crt, 3)) < 0 ||
      (ret = gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, cn,
                                           (unsigned)cnlen)) < 0 ||
      (ret = gnutls_x509_crt_set_pubkey(crt, pub)) < 0 ||
      (ret = gnutls_x509_crt_set_activation_time(crt, now - NX_CERT_BACKDATE_S)) < 0 ||
      (ret = gnutls_x509_crt_set_expiration_time(crt, now + NX_CERT_VALIDITY_S)) < 0 ||
      (ret = gnutls_x509_crt_set_subject_alt_name(crt, GNUTLS_SAN_URI, uri, (unsigned)ulen,
                                                  GNUTLS_FSAN_SET)) < 0 ||
      (ret = gnutls_x509_crt_set_basic_constraints(crt, 0, -1)) < 0 ||
      (ret = gnutls_x509_crt_set_key_usage(crt, GNUTLS_KEY_DIGITAL_SIGNATURE)) < 0 ||
      (ret = gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_SERVER, 0)) < 0 ||
      (ret = gnutls_x509_crt_set_key_purpose_oid(crt, GNUTLS_KP_TLS_WWW_CLIENT, 0)) < 0 ||
      (ret = gnutls_pubkey_get_key_id(pub, GNUTLS_KEYID_USE_SHA1, kid, &kid_len)) < 0 ||
      (ret = gnutls_x509_crt_set_subject_key_id(crt, kid, kid_len)) < 0 ||
      (ret = gnutls_x509_crt_set_authority_key_id(crt, ca->skid, ca->skid_len)) < 0) {
    rc =
        nx_fail(NEXAR_ERR_TLS, "certificate for rank %u: %s", (unsigned)rank, gnutls_strerror(ret));
    goto out;
  }
  pthread_mutex_lock(&ca->lock);
  ret = gnutls_x509_crt_sign2(crt, ca->crt, ca->key, GNUTLS_DIG_SHA256, 0);
  pthread_mutex_unlock(&ca->lock);
  if (ret >= 0) ret = gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_DER, &d);
  if (ret < 0) {
    rc = nx_fail(NEXAR_ERR_TLS, "signing the certificate for rank %u: %s", (unsigned)rank,
                 gnutls_strerror(ret));
    goto out;
  }
  rc = take_datum(&d, cert_der, len, "certificate");
out:
  gnutls_x509_crt_deinit(crt);
  gnutls_pubkey_deinit(pub);
  return rc;
}

/* --------------------------------------------------------- verification side */

/* Parses "nexar://<hex>/rank/<decimal>": 1 and *rank when it names this cluster, 0 if it is
 * another cluster's URI, -1 if it is not a well-formed nexar URI. */
static int parse_uri(const char *uri, size_t n, const char hex[33], uint32_t *rank) {
  static const char mid[] = "/rank/";
  size_t pre = sizeof URI_PREFIX - 1, at = pre + 32 + sizeof mid - 1;
  if (n <= at || memcmp(uri, URI_PREFIX, pre) != 0 || memcmp(uri + pre + 32, mid, 6) != 0)
    return -1;
  size_t digits = n - at;
  if (digits > 10 || (digits > 1 && uri[at] == '0')) return -1;
  uint64_t v = 0;
  for (size_t i = at; i < n; i++) {
    if (uri[i] < '0' || uri[i] > '9') return -1;
    v = v * 10 + (uint64_t)(uri[i] - '0');
  }
  if (v >= UINT32_MAX) return -1;
  if (memcmp(uri + pre, hex, 32) != 0) return 0;
  *rank = (uint32_t)v;
  return 1;
}

/* Checks a certificate whose chain was already verified: an end-entity certificate for TLS
 * with exactly one nexar SAN URI, naming this cluster. */
static int leaf_rank(gnutls_x509_crt_t crt, const uint8_t cluster_id[16], uint32_t *rank,
                     const char *who) {
  unsigned critical = 0;
  int ca = gnutls_x509_crt_get_basic_constraints(crt, &critical, NULL, NULL);
  if (ca > 0) return nx_fail(NEXAR_ERR_AUTH, "%s presented a CA certificate", who);
  if (!gnutls_x509_crt_check_key_purpose(crt, GNUTLS_KP_TLS_WWW_CLIENT, 0) ||
      !gnutls_x509_crt_check_key_purpose(crt, GNUTLS_KP_TLS_WWW_SERVER, 0))
    return nx_fail(NEXAR_ERR_AUTH, "%s: certificate is not for TLS client and server use", who);
  char hex[33];
  hex16(cluster_id, hex);
  int found = 0, other = 0;
  uint32_t r = 0;
  for (unsigned i = 0; i < 64; i++) {
    char buf[256];
    size_t sz = sizeof buf - 1;
    int type = gnutls_x509_crt_get_subject_alt_name(crt, i, buf, &sz, &critical);
    if (type == GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE) break;
    if (type == GNUTLS_E_SHORT_MEMORY_BUFFER) continue; /* too long to be ours */
    if (type < 0)
      return nx_fail(NEXAR_ERR_AUTH, "%s: unreadable subject alt name: %s", who,
                     gnutls_strerror(type));
    if (type != GNUTLS_SAN_URI || sz < sizeof URI_PREFIX - 1 ||
        memcmp(buf, URI_PREFIX, sizeof URI_PREFIX - 1) != 0)
      continue;
    int m = parse_uri(buf, sz, hex, &r);
    if (m < 0) return nx_fail(NEXAR_ERR_AUTH, "%s: malformed nexar URI in certificate", who);
    if (m == 0)
      other++;
    else
      found++;
  }
  if (found + other > 1)
    return nx_fail(NEXAR_ERR_AUTH, "%s: certificate names %d nexar identities", who, found + other);
  if (other)
    return nx_fail(NEXAR_ERR_AUTH, "%s: certificate belongs to another cluster (ours is %s)", who,
                   hex);
  if (!found) return nx_fail(NEXAR_ERR_AUTH, "%s: certificate names no nexar rank", who);
  *rank = r;
  return 0;
}

static int import_crt(gnutls_x509_crt_t *crt, const uint8_t *der, size_t len, const char *what) {
  gnutls_datum_t d = {(unsigned char *)der, (unsigned)len};
  int ret = gnutls_x509_crt_init(crt);
  if (ret < 0) return nx_fail(NEXAR_ERR_TLS, "%s: %s", what, gnutls_strerror(ret));
  ret = gnutls_x509_crt_import(*crt, &d, GNUTLS_X509_FMT_DER);
  if (ret < 0) {
    gnutls_x509_crt_deinit(*crt);
    *crt = NULL;
    return nx_fail(NEXAR_ERR_AUTH, "%s is not an X.509 certificate: %s", what,
                   gnutls_strerror(ret));
  }
  return 0;
}

/* Turns a verification status into an AUTH failure with gnutls's own explanation. */
static int status_fail(unsigned status, const char *who) {
  gnutls_datum_t out = {NULL, 0};
  int ret = gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &out, 0);
  int rc = nx_fail(NEXAR_ERR_AUTH, "%s: certificate rejected: %s", who,
                   ret >= 0 && out.data ? (const char *)out.data : "verification failed");
  gnutls_free(out.data);
  return rc;
}

int nx_cert_rank(const uint8_t *cert, size_t len, const uint8_t *ca, size_t ca_len,
                 const uint8_t cluster_id[16], uint32_t *rank) {
  if (!cert || !ca || !cluster_id || !rank)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "nx_cert_rank: NULL");
  if (len == 0 || len > NX_CSR_MAX || ca_len == 0 || ca_len > NX_CSR_MAX)
    return nx_fail(NEXAR_ERR_AUTH, "certificate of %zu bytes / CA of %zu bytes", len, ca_len);
  nx_tls_global_init();
  gnutls_x509_crt_t c = NULL, a = NULL;
  int rc = import_crt(&a, ca, ca_len, "CA certificate");
  if (rc) return rc;
  rc = import_crt(&c, cert, len, "certificate");
  if (rc) {
    gnutls_x509_crt_deinit(a);
    return rc;
  }
  unsigned status = 0;
  int ret = gnutls_x509_crt_verify(c, &a, 1, 0, &status);
  if (ret < 0)
    rc = nx_fail(NEXAR_ERR_AUTH, "certificate: %s", gnutls_strerror(ret));
  else if (status)
    rc = status_fail(status, "certificate");
  else
    rc = leaf_rank(c, cluster_id, rank, "certificate");
  gnutls_x509_crt_deinit(c);
  gnutls_x509_crt_deinit(a);
  return rc;
}

int nx_tls_peer_rank(gnutls_session_t s, const uint8_t cluster_id[16], uint32_t *rank) {
  if (!s || !cluster_id || !rank)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "nx_tls_peer_rank: NULL");
  if (gnutls_certificate_type_get2(s, GNUTLS_CTYPE_PEERS) != GNUTLS_CRT_X509)
    return nx_fail(NEXAR_ERR_AUTH, "TLS peer: no X.509 certificate");
  unsigned status = 0;
  int ret = gnutls_certificate_verify_peers3(s, NULL, &status);
  if (ret < 0) return nx_fail(NEXAR_ERR_AUTH, "TLS peer: %s", gnutls_strerror(ret));
  if (status) return status_fail(status, "TLS peer");
  unsigned n = 0;
  const gnutls_datum_t *chain = gnutls_certificate_get_peers(s, &n);
  if (!chain || n == 0) return nx_fail(NEXAR_ERR_AUTH, "TLS peer sent no certificate");
  gnutls_x509_crt_t c;
  int rc = import_crt(&c, chain[0].data, chain[0].size, "TLS peer certificate");
  if (rc) return rc;
  rc = leaf_rank(c, cluster_id, rank, "TLS peer");
  gnutls_x509_crt_deinit(c);
  return rc;
}

int nx_tls_creds_new(gnutls_certificate_credentials_t *out, const nx_key *k, const uint8_t *cert,
                     size_t cert_len, const uint8_t *ca, size_t ca_len) {
  if (!out || !k || !cert || !ca)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "nx_tls_creds_new: NULL");
  *out = NULL;
  if (cert_len == 0 || cert_len > NX_CSR_MAX || ca_len == 0 || ca_len > NX_CSR_MAX)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "TLS credentials: bad certificate lengths");
  nx_tls_global_init();
  gnutls_certificate_credentials_t cred;
  int ret = gnutls_certificate_allocate_credentials(&cred);
  if (ret < 0) return nx_fail(NEXAR_ERR_TLS, "TLS credentials: %s", gnutls_strerror(ret));
  gnutls_x509_crt_t crt;
  int rc = import_crt(&crt, cert, cert_len, "own certificate");
  if (rc) {
    gnutls_certificate_free_credentials(cred);
    return rc;
  }
  /* Copies both; fails with KEY_MISMATCH if the certificate is not for our key. */
  ret = gnutls_certificate_set_x509_key(cred, &crt, 1, k->key);
  gnutls_x509_crt_deinit(crt);
  if (ret < 0) {
    gnutls_certificate_free_credentials(cred);
    return nx_fail(ret == GNUTLS_E_CERTIFICATE_KEY_MISMATCH ? NEXAR_ERR_AUTH : NEXAR_ERR_TLS,
                   "TLS credentials: own certificate: %s", gnutls_strerror(ret));
  }
  gnutls_datum_t d = {(unsigned char *)ca, (unsigned)ca_len};
  ret = gnutls_certificate_set_x509_trust_mem(cred, &d, GNUTLS_X509_FMT_DER);
  if (ret != 1) {
    gnutls_certificate_free_credentials(cred);
    return nx_fail(NEXAR_ERR_AUTH, "TLS credentials: cluster CA certificate: %s",
                   ret < 0 ? gnutls_strerror(ret) : "no certificate");
  }
  *out = cred;
  return 0;
}

/* ---------------------------------------------------------- relay signatures */

typedef struct nx_known {
  uint32_t rank;
  uint8_t *cert;
  size_t certlen;
  gnutls_pubkey_t pub;
} nx_known;

struct nx_signer {
  gnutls_privkey_t key;
  gnutls_x509_trust_list_t trust; /* owned by the credentials, which outlive us */
  uint8_t cluster_id[16];
  uint8_t *cert;
  size_t certlen;
  nx_known *known;
  size_t nknown, capknown;
};

int nx_signer_new(nx_signer **out, gnutls_certificate_credentials_t creds,
                  const uint8_t cluster_id[16]) {
  *out = NULL;
  nx_signer *s = nx_calloc(1, sizeof *s);
  if (!s) return nx_fail(NEXAR_ERR_NOMEM, "relay signer");
  memcpy(s->cluster_id, cluster_id, 16);
  gnutls_x509_privkey_t xk = NULL;
  gnutls_x509_crt_t *crts = NULL;
  unsigned ncrt = 0;
  int rc = 0, ret;
  if ((ret = gnutls_certificate_get_x509_key(creds, 0, &xk)) < 0 ||
      (ret = gnutls_privkey_init(&s->key)) < 0 ||
      (ret = gnutls_privkey_import_x509(s->key, xk, GNUTLS_PRIVKEY_IMPORT_COPY)) < 0 ||
      (ret = gnutls_certificate_get_x509_crt(creds, 0, &crts, &ncrt)) < 0 || ncrt == 0) {
    rc = nx_fail(NEXAR_ERR_TLS, "relay signer: own key: %s",
                 ret < 0 ? gnutls_strerror(ret) : "no certificate");
    goto out;
  }
  gnutls_datum_t d = {NULL, 0};
  if ((ret = gnutls_x509_crt_export2(crts[0], GNUTLS_X509_FMT_DER, &d)) < 0) {
    rc = nx_fail(NEXAR_ERR_TLS, "relay signer: own certificate: %s", gnutls_strerror(ret));
    goto out;
  }
  rc = take_datum(&d, &s->cert, &s->certlen, "relay signer");
  if (rc) goto out;
  gnutls_certificate_get_trust_list(creds, &s->trust);
out:
  if (xk) gnutls_x509_privkey_deinit(xk);
  for (unsigned i = 0; i < ncrt; i++)
    gnutls_x509_crt_deinit(crts[i]);
  gnutls_free(crts);
  if (rc) {
    nx_signer_del(s);
    return rc;
  }
  *out = s;
  return 0;
}

void nx_signer_del(nx_signer *s) {
  if (!s) return;
  if (s->key) gnutls_privkey_deinit(s->key);
  for (size_t i = 0; i < s->nknown; i++) {
    free(s->known[i].cert);
    gnutls_pubkey_deinit(s->known[i].pub);
  }
  free(s->known);
  free(s->cert);
  free(s);
}

const uint8_t *nx_signer_cert(const nx_signer *s, size_t *len) {
  *len = s->certlen;
  return s->cert;
}

int nx_signer_sign(nx_signer *s, const uint8_t hash[32], uint8_t sig[NX_SIG_MAX], size_t *siglen) {
  gnutls_datum_t h = {(unsigned char *)hash, 32}, out = {NULL, 0};
  int ret = gnutls_privkey_sign_hash(s->key, GNUTLS_DIG_SHA256, 0, &h, &out);
  if (ret < 0 || out.size > NX_SIG_MAX) {
    gnutls_free(out.data);
    return nx_fail(NEXAR_ERR_TLS, "relay: signing: %s",
                   ret < 0 ? gnutls_strerror(ret) : "signature too long");
  }
  memcpy(sig, out.data, out.size);
  *siglen = out.size;
  gnutls_free(out.data);
  return 0;
}

/* The verified key of rank, verifying cert (chain, rank) first when it is new. */
static int known_key(nx_signer *s, uint32_t rank, const uint8_t *cert, size_t certlen,
                     gnutls_pubkey_t *pub) {
  nx_known *k = NULL;
  for (size_t i = 0; i < s->nknown; i++)
    if (s->known[i].rank == rank) k = &s->known[i];
  if (k && (!certlen || (certlen == k->certlen && memcmp(cert, k->cert, certlen) == 0))) {
    *pub = k->pub;
    return 0;
  }
  if (!certlen) return nx_fail(NEXAR_ERR_AUTH, "relay: no certificate of rank %u seen", rank);
  if (certlen > NX_CSR_MAX) return nx_fail(NEXAR_ERR_AUTH, "relay: certificate too long");
  gnutls_x509_crt_t c = NULL;
  int rc = import_crt(&c, cert, certlen, "relayed certificate");
  if (rc) return rc;
  unsigned status = 0;
  uint32_t r = UINT32_MAX;
  int ret = gnutls_x509_trust_list_verify_crt(s->trust, &c, 1, 0, &status, NULL);
  if (ret < 0)
    rc = nx_fail(NEXAR_ERR_AUTH, "relayed certificate: %s", gnutls_strerror(ret));
  else if (status)
    rc = status_fail(status, "relayed certificate");
  else if (!(rc = leaf_rank(c, s->cluster_id, &r, "relayed certificate")) && r != rank)
    rc = nx_fail(NEXAR_ERR_AUTH, "relay: a message from rank %u carries rank %u's certificate",
                 rank, r);
  gnutls_pubkey_t p = NULL;
  if (!rc && ((ret = gnutls_pubkey_init(&p)) < 0 || (ret = gnutls_pubkey_import_x509(p, c, 0)) < 0))
    rc = nx_fail(NEXAR_ERR_TLS, "relayed certificate: key: %s", gnutls_strerror(ret));
  gnutls_x509_crt_deinit(c);
  uint8_t *copy = rc ? NULL : malloc(certlen);
  if (!rc && !copy) rc = nx_fail(NEXAR_ERR_NOMEM, "relay: certificate of rank %u", rank);
  if (!rc && !k && s->nknown == s->capknown) {
    size_t nc = s->capknown ? s->capknown * 2 : 8;
    nx_known *a = nx_realloc(s->known, nc * sizeof *a);
    if (!a)
      rc = nx_fail(NEXAR_ERR_NOMEM, "relay: certificate of rank %u", rank);
    else
      s->known = a, s->capknown = nc;
  }
  if (rc) {
    if (p) gnutls_pubkey_deinit(p);
    free(copy);
    return rc;
  }
  if (k) { /* a new certificate for the rank (it joined again): replaces the old */
    free(k->cert);
    gnutls_pubkey_deinit(k->pub);
  } else {
    k = &s->known[s->nknown++];
  }
  memcpy(copy, cert, certlen);
  *k = (nx_known){rank, copy, certlen, p};
  *pub = p;
  return 0;
}

int nx_signer_verify(nx_signer *s, uint32_t rank, const uint8_t *cert, size_t certlen,
                     const uint8_t hash[32], const uint8_t *sig, size_t siglen) {
  gnutls_pubkey_t pub = NULL;
  int rc = known_key(s, rank, cert, certlen, &pub);
  if (rc) return rc;
  gnutls_datum_t h = {(unsigned char *)hash, 32}, sg = {(unsigned char *)sig, (unsigned)siglen};
  int ret = gnutls_pubkey_verify_hash2(pub, GNUTLS_SIGN_ECDSA_SHA256, 0, &h, &sg);
  if (ret < 0) return nx_fail(NEXAR_ERR_AUTH, "relay: bad signature of rank %u", rank);
  return 0;
}
