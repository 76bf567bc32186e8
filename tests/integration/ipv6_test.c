/*
 * A world over IPv6 loopback, ranks as threads:
 *
 *   ipv6_test N     nexar_bootstrap_local(N) with NEXAR_BIND_ADDR (default
 *                   "[::1]:0" when unset): every peer address must be IPv6,
 *                   then a ring of point-to-point messages (64 B and 8 MiB),
 *                   a small allreduce and an 8 MiB allreduce, all checked.
 *   IPV6_WANT_BULK=1|2: the TCP bulk stream (2: with TLS) to the next rank
 *                   must come up and carry the 8 MiB messages (run with
 *                   NEXAR_BULK_TCP_LOCAL=1 so threads count as hosts).
 * Exits 0 when every check passed, 77 (skip) without IPv6 loopback.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/comm.h"
#include "runtime/engine.h"

#define MAXW 16
#define BIG (8u << 20)

static nexar_client *g_cl[MAXW];
static uint32_t g_n;
static atomic_int g_failed;

#define FAIL(r, ...)                                                                               \
  do {                                                                                             \
    fprintf(stderr, "FAIL rank %u line %d: ", (r), __LINE__);                                      \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fprintf(stderr, " (%s)\n", nexar_last_error());                                                \
    atomic_fetch_add(&g_failed, 1);                                                                \
    nexar_abort(g_cl[r]);                                                                          \
    return NULL;                                                                                   \
  } while (0)

static uint8_t pat(uint32_t from, size_t i) {
  return (uint8_t)(i * 131u + from * 17u + (i >> 12));
}

static void *rank_main(void *arg) {
  uint32_t r = (uint32_t)(uintptr_t)arg;
  nexar_client *c = g_cl[r];
  uint32_t next = (r + 1) % g_n, prev = (r + g_n - 1) % g_n;
  const char *want = getenv("IPV6_WANT_BULK");
  for (int i = 0; want && i < 500; i++) {
    nexar_peer_stats a, b;
    nexar_peer_stats_get(c, next, &a);
    nexar_peer_stats_get(c, prev, &b);
    if (a.bulk_stream == atoi(want) && b.bulk_stream == atoi(want)) break;
    usleep(10000);
  }
  uint8_t *out = malloc(BIG), *in = malloc(BIG);
  float *f = malloc(BIG);
  if (!out || !in || !f) FAIL(r, "out of memory");
  size_t sizes[2] = {64, BIG};
  for (int k = 0; k < 2; k++) {
    size_t len = sizes[k];
    for (size_t i = 0; i < len; i++)
      out[i] = pat(r, i);
    memset(in, 0, len);
    nexar_request *rq = NULL;
    int rc = nexar_send_nb(c, out, len, next, 10 + (uint32_t)k, &rq);
    if (rc) FAIL(r, "isend %zu bytes to %u: %d", len, next, rc);
    if ((rc = nexar_recv(c, in, len, prev, 10 + (uint32_t)k)))
      FAIL(r, "recv %zu bytes from %u: %d", len, prev, rc);
    if ((rc = nexar_wait(rq))) FAIL(r, "wait send %zu: %d", len, rc);
    for (size_t i = 0; i < len; i++)
      if (in[i] != pat(prev, i)) FAIL(r, "%zu bytes from %u: wrong at byte %zu", len, prev, i);
  }
  size_t counts[2] = {16, BIG / sizeof(float)};
  for (int k = 0; k < 2; k++) {
    size_t n = counts[k];
    for (size_t i = 0; i < n; i++)
      f[i] = (float)((r + 1) * (i % 97));
    int rc = nexar_all_reduce(c, f, n, NEXAR_F32, NEXAR_SUM);
    if (rc) FAIL(r, "all_reduce of %zu floats: %d", n, rc);
    float s = (float)(g_n * (g_n + 1) / 2);
    for (size_t i = 0; i < n; i++)
      if (f[i] != s * (float)(i % 97)) FAIL(r, "all_reduce %zu: element %zu is %g", n, i, f[i]);
  }
  if (want) {
    nexar_peer_stats a;
    nexar_peer_stats_get(c, next, &a);
    if (a.bulk_stream != atoi(want) || a.bulk_bytes_sent < BIG)
      FAIL(r, "bulk stream to %u: %d, %llu bulk bytes (want stream %s carrying >= 8 MiB)", next,
           a.bulk_stream, (unsigned long long)a.bulk_bytes_sent, want);
  }
  if (nexar_barrier(c)) FAIL(r, "final barrier");
  free(out);
  free(in);
  free(f);
  return NULL;
}

int main(int argc, char **argv) {
  g_n = argc > 1 ? (uint32_t)atoi(argv[1]) : 3;
  if (g_n < 2 || g_n > MAXW) {
    fprintf(stderr, "usage: ipv6_test N (2..%d)\n", MAXW);
    return 2;
  }
  int s = socket(AF_INET6, SOCK_DGRAM, 0);
  struct sockaddr_in6 lo = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
  if (s < 0 || bind(s, (struct sockaddr *)&lo, sizeof lo) != 0) {
    printf("SKIP: no IPv6 loopback\n");
    return 77;
  }
  close(s);
  setenv("NEXAR_BIND_ADDR", "[::1]:0", 0);
  const char *bind = getenv("NEXAR_BIND_ADDR");
  int rc = nexar_bootstrap_local(g_cl, g_n, NULL);
  if (rc) {
    fprintf(stderr, "FAIL: bootstrap_local(%u) with NEXAR_BIND_ADDR=%s: %s (%s)\n", g_n, bind,
            nexar_strerror(rc), nexar_last_error());
    return 1;
  }
  /* every rank reaches every other at an IPv6 address, over an IPv6 socket */
  for (uint32_t r = 0; r < g_n; r++) {
    nx_ep *ep = g_cl[r]->ep;
    if (ep->udp.local.ss_family != AF_INET6) {
      fprintf(stderr, "FAIL: rank %u's socket is not IPv6\n", r);
      return 1;
    }
    /* the socket options work for AF_INET6: GSO, GRO, no fragmentation */
    int pmtu = -1;
    socklen_t pl = sizeof pmtu;
    getsockopt(ep->udp.fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, &pl);
    if (!ep->udp.gso || !ep->udp.gro || pmtu != IPV6_PMTUDISC_DO) {
      fprintf(stderr, "FAIL: rank %u's IPv6 socket: gso %d gro %d pmtu-discover %d\n", r,
              ep->udp.gso, ep->udp.gro, pmtu);
      return 1;
    }
    for (uint32_t j = 0; j < g_n; j++) {
      if (j == r) continue;
      const nx_peer *p = ep->peers[j];
      const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&p->addr;
      if (p->addr.ss_family != AF_INET6 || IN6_IS_ADDR_V4MAPPED(&a->sin6_addr) ||
          p->addrstr[0] != '[') {
        fprintf(stderr, "FAIL: rank %u reaches rank %u at %s, not over IPv6\n", r, j, p->addrstr);
        return 1;
      }
      size_t pay = nx_udp_path_payload((const struct sockaddr *)&p->addr, p->addrlen);
      if (pay <= 1200) { /* loopback's MTU is far above the QUIC minimum */
        fprintf(stderr, "FAIL: path payload to %s is %zu bytes\n", p->addrstr, pay);
        return 1;
      }
    }
  }
  printf("ipv6_test: world of %u formed (rank 0 -> rank 1 at %s)\n", g_n,
         g_cl[0]->ep->peers[1]->addrstr);
  pthread_t t[MAXW];
  for (uint32_t r = 0; r < g_n; r++)
    pthread_create(&t[r], NULL, rank_main, (void *)(uintptr_t)r);
  for (uint32_t r = 0; r < g_n; r++)
    pthread_join(t[r], NULL);
  for (uint32_t r = 0; r < g_n; r++)
    nexar_client_del(g_cl[r]);
  if (atomic_load(&g_failed)) return 1;
  printf("ipv6_test (world %u, %s%s): all checks passed\n", g_n, bind,
         getenv("IPV6_WANT_BULK") ? ", bulk TCP" : "");
  return 0;
}
