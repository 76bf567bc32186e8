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

#include "../../fuzz/quic_initial.h"

static gnutls_certificate_credentials_t creds;

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
        len[i] = make_initial(creds, &dst[i % (size_t)nports], NULL, 0, NULL, pk[i], 1200);
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
