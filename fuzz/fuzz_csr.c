/* libFuzzer target: nx_ca_sign on arbitrary bytes, with one CA created on first use. Anything
 * it signs must verify under that CA and carry the requested rank.
 *
 * Build: clang -fsanitize=fuzzer,address -DNX_FUZZ -Iinclude -Isrc fuzz/fuzz_csr.c
 *        src/transport/pki.c src/core/{error,util,log}.c $(pkg-config --libs gnutls) -lpthread
 * Smoke run without libFuzzer: add -DNX_FUZZ_STANDALONE and pass corpus files or directories;
 * "--write-seeds DIR" writes the seed corpus. */
#include "transport/pki.h"
#include "core/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t FUZZ_CID[16] = {0xf0, 0x0d, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
static nx_ca *fuzz_ca;
static uint8_t *fuzz_ca_der;
static size_t fuzz_ca_len;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!fuzz_ca) {
    if (nx_ca_new(&fuzz_ca, FUZZ_CID) || nx_ca_cert(fuzz_ca, &fuzz_ca_der, &fuzz_ca_len)) abort();
  }
  uint32_t rank = (uint32_t)(size % 4099), got = UINT32_MAX;
  uint8_t *cert = NULL;
  size_t len = 0;
  int rc = nx_ca_sign(fuzz_ca, data, size, rank, &cert, &len);
  if (rc == 0) {
    if (nx_cert_rank(cert, len, fuzz_ca_der, fuzz_ca_len, FUZZ_CID, &got) != 0 || got != rank) {
      fprintf(stderr, "fuzz_csr: issued certificate does not verify: %s\n", nexar_last_error());
      abort();
    }
    free(cert);
  } else if (rc != NEXAR_ERR_PROTOCOL && rc != NEXAR_ERR_AUTH) {
    fprintf(stderr, "fuzz_csr: unexpected code %d: %s\n", rc, nexar_last_error());
    abort();
  }
  return 0;
}

#ifdef NX_FUZZ_STANDALONE
#include <dirent.h>
#include <gnutls/x509.h>

static int write_file(const char *dir, const char *name, const uint8_t *b, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(b, 1, n, f) != n) {
    if (f) fclose(f);
    fprintf(stderr, "cannot write %s\n", path);
    return 1;
  }
  return fclose(f) != 0;
}

/* A request for a key of another type, to seed the "not P-256" paths. */
static int write_other_csr(const char *dir, const char *name, gnutls_pk_algorithm_t pk,
                           unsigned bits) {
  gnutls_x509_privkey_t k;
  gnutls_x509_crq_t crq;
  gnutls_datum_t d = {NULL, 0};
  int bad = gnutls_x509_privkey_init(&k) < 0 || gnutls_x509_crq_init(&crq) < 0;
  if (bad) return 1;
  bad =
      gnutls_x509_privkey_generate2(k, pk, bits, 0, NULL, 0) < 0 ||
      gnutls_x509_crq_set_version(crq, 1) < 0 || gnutls_x509_crq_set_key(crq, k) < 0 ||
      gnutls_x509_crq_sign2(crq, k, pk == GNUTLS_PK_EDDSA_ED25519 ? 0 : GNUTLS_DIG_SHA256, 0) < 0 ||
      gnutls_x509_crq_export2(crq, GNUTLS_X509_FMT_DER, &d) < 0;
  if (!bad) bad = write_file(dir, name, d.data, d.size);
  gnutls_free(d.data);
  gnutls_x509_crq_deinit(crq);
  gnutls_x509_privkey_deinit(k);
  return bad;
}

static int write_seeds(const char *dir) {
  int bad = 0;
  for (int i = 0; i < 2; i++) {
    nx_key *k = NULL;
    uint8_t *csr = NULL;
    size_t n = 0;
    char name[32];
    snprintf(name, sizeof name, "p256_%d", i);
    bad |= nx_key_new(&k) || nx_csr_new(k, &csr, &n) || write_file(dir, name, csr, n);
    if (i == 0 && csr && n > 8) {
      csr[n - 3] ^= 1; /* bad signature */
      bad |= write_file(dir, "p256_badsig", csr, n);
    }
    free(csr);
    nx_key_del(k);
  }
  bad |= write_other_csr(dir, "p384", GNUTLS_PK_ECDSA,
                         GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP384R1));
  bad |= write_other_csr(dir, "ed25519", GNUTLS_PK_EDDSA_ED25519,
                         GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_ED25519));
  bad |= write_other_csr(dir, "rsa2048", GNUTLS_PK_RSA, 2048);
  return bad;
}

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 1;
  size_t cap = 1 << 16, n = 0;
  uint8_t *b = malloc(cap);
  while (b) {
    n += fread(b + n, 1, cap - n, f);
    if (n < cap || cap >= (64u << 20)) break;
    uint8_t *nb = realloc(b, cap * 2);
    if (!nb) break;
    b = nb;
    cap *= 2;
  }
  fclose(f);
  if (!b) return 1;
  LLVMFuzzerTestOneInput(b, n);
  free(b);
  return 0;
}

static int run_path(const char *path) {
  DIR *d = opendir(path);
  if (!d) return run_file(path);
  int bad = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", path, e->d_name);
    bad |= run_file(p);
  }
  closedir(d);
  return bad;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) return write_seeds(argv[2]);
  int bad = 0, runs = 0;
  for (int i = 1; i < argc; i++, runs++)
    bad |= run_path(argv[i]);
  printf("fuzz_csr: ran %d path(s)%s\n", runs, bad ? ", some unreadable" : "");
  nx_ca_del(fuzz_ca);
  free(fuzz_ca_der);
  return bad;
}
#endif
