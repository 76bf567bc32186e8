/* Cluster PKI: the seed runs a per-cluster CA; every worker generates its key locally, sends a
 * PKCS#10 request over the token-authenticated bootstrap channel, and gets back a certificate
 * binding its public key to "nexar://<32 hex of cluster_id>/rank/<r>" (SAN URI). Mesh TLS then
 * trusts only that CA and reads the peer's rank from its certificate. Private keys never leave
 * the process that generated them. */
#ifndef NX_TRANSPORT_PKI_H
#define NX_TRANSPORT_PKI_H

#include <gnutls/gnutls.h>
#include <stddef.h>
#include <stdint.h>

#define NX_CSR_MAX (16u * 1024u) /* largest PKCS#10 request nx_ca_sign looks at */
#define NX_CERT_VALIDITY_S (365L * 24 * 3600)
#define NX_CERT_BACKDATE_S 3600L /* tolerates clock skew between hosts */

/* gnutls_global_init once per process (pthread_once); every function below calls it. */
void nx_tls_global_init(void);

/* A private key (wraps gnutls_x509_privkey_t). */
typedef struct nx_key nx_key;
/* A fresh ECDSA P-256 key, generated locally. */
int nx_key_new(nx_key **out);
void nx_key_del(nx_key *k);
/* A PKCS#10 request (DER, malloc'd) for k, self-signed with SHA-256. */
int nx_csr_new(const nx_key *k, uint8_t **der, size_t *len);

/* A cluster CA: a self-signed certificate with a fresh key. */
typedef struct nx_ca nx_ca;
int nx_ca_new(nx_ca **out, const uint8_t cluster_id[16]);
void nx_ca_del(nx_ca *ca);
/* The CA certificate (DER, malloc'd). */
int nx_ca_cert(const nx_ca *ca, uint8_t **der, size_t *len);
/* Verifies the CSR's self-signature (csr_len <= NX_CSR_MAX, else PROTOCOL) and issues a
 * certificate for its ECDSA P-256 public key naming the rank: SAN URI
 * "nexar://<32 hex of cluster_id>/rank/<r>", key usage digital signature, extended key usage
 * TLS server + client, not a CA, validity now-1h..now+365d, random serial. The subject name and
 * extensions of the request are ignored. Malformed input -> NEXAR_ERR_PROTOCOL, a bad signature
 * -> NEXAR_ERR_AUTH; rank UINT32_MAX -> INVALID_ARGUMENT. Thread-safe. *cert_der malloc'd. */
int nx_ca_sign(nx_ca *ca, const uint8_t *csr, size_t csr_len, uint32_t rank, uint8_t **cert_der,
               size_t *len);

/* Mesh TLS credentials: own certificate (DER) + key, and trust only the given CA cert (DER).
 * Servers must still ask for the client's certificate on each session
 * (gnutls_certificate_server_set_request(s, GNUTLS_CERT_REQUIRE)) and both sides must call
 * nx_tls_peer_rank (e.g. from gnutls_session_set_verify_function's callback). */
int nx_tls_creds_new(gnutls_certificate_credentials_t *out, const nx_key *k, const uint8_t *cert,
                     size_t cert_len, const uint8_t *ca, size_t ca_len);

/* For a session using such credentials, once the peer's certificate arrived (from a verify
 * callback or after the handshake): verifies the chain against the trusted CA
 * (gnutls_certificate_verify_peers3, no hostname), then reads the rank from the SAN URI, which
 * must name this cluster_id. 0 and *rank, or NEXAR_ERR_AUTH with the reason. */
int nx_tls_peer_rank(gnutls_session_t s, const uint8_t cluster_id[16], uint32_t *rank);

/* The same check on a DER certificate against a DER CA certificate. */
int nx_cert_rank(const uint8_t *cert, size_t len, const uint8_t *ca, size_t ca_len,
                 const uint8_t cluster_id[16], uint32_t *rank);

/* Origin signatures for relayed messages (runtime/relay.c): a rank signs with its own key, and
 * a receiver checks the origin's certificate against the cluster CA (the trust list of the mesh
 * credentials), its rank in the SAN URI, and then the signature. Verified public keys are kept
 * per rank, so the chain is checked once per origin (a different certificate for the same rank
 * is checked again). Not thread-safe: one caller at a time (the engine, under ep->mu). */
typedef struct nx_signer nx_signer;
#define NX_SIG_MAX 80u /* an ECDSA P-256 signature (DER) is at most 72 bytes */
/* From mesh credentials made by nx_tls_creds_new. NOMEM, TLS. */
int nx_signer_new(nx_signer **out, gnutls_certificate_credentials_t creds,
                  const uint8_t cluster_id[16]);
void nx_signer_del(nx_signer *s);
/* This rank's certificate (DER), for receivers that have not seen it. */
const uint8_t *nx_signer_cert(const nx_signer *s, size_t *len);
/* Signs a SHA-256 digest; *siglen <= NX_SIG_MAX. TLS on failure. */
int nx_signer_sign(nx_signer *s, const uint8_t hash[32], uint8_t sig[NX_SIG_MAX], size_t *siglen);
/* 0 if sig over hash was made by the key certified for rank. cert may be NULL (certlen 0) when
 * the rank's certificate was verified before. AUTH (no or wrong certificate, bad signature). */
int nx_signer_verify(nx_signer *s, uint32_t rank, const uint8_t *cert, size_t certlen,
                     const uint8_t hash[32], const uint8_t *sig, size_t siglen);

#endif
