/* Point-to-point latency and bandwidth between ranks 0 and 1.
 *   p2p_bench [pingpong|bw] [bytes] [iters]
 * As processes: nexar-run -n 2 -- p2p_bench pingpong 64 20000
 * Without NEXAR_SEED_ADDR it runs two ranks as threads in this process. */
#include <nexar/nexar.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *mode = "pingpong";
static size_t bytes = 64;
static long iters = 10000;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int check(int rc, const char *what) {
  if (rc) fprintf(stderr, "%s: %s (%s)\n", what, nexar_strerror(rc), nexar_last_error());
  return rc;
}

static int run(nexar_client *c) {
  uint32_t r = nexar_rank(c);
  if (r > 1) return 0;
  uint32_t peer = 1 - r;
  char *buf = malloc(bytes ? bytes : 1);
  if (!buf) return 1;
  memset(buf, (int)r + 1, bytes);
  int rc = 0;
  if (!strcmp(mode, "pingpong")) {
    long warm = iters / 10 + 10;
    double t0 = 0;
    double *lat = calloc((size_t)iters, sizeof *lat);
    double ti = 0;
    for (long i = 0; i < warm + iters && !rc; i++) {
      if (i == warm) t0 = now_s();
      if (i > warm && lat) lat[i - warm - 1] = now_s() - ti;
      ti = now_s();
      if (r == 0) {
        rc = check(nexar_send(c, buf, bytes, peer, 1), "send");
        if (!rc) rc = check(nexar_recv(c, buf, bytes, peer, 1), "recv");
      } else {
        rc = check(nexar_recv(c, buf, bytes, peer, 1), "recv");
        if (!rc) rc = check(nexar_send(c, buf, bytes, peer, 1), "send");
      }
    }
    double dt = now_s() - t0;
    if (r == 0 && !rc && lat) {
      int cmp(const void *a, const void *b);
      qsort(lat, (size_t)iters - 1, sizeof *lat, cmp);
      printf("pingpong %zu B: round trip %.2f us mean, p50 %.2f, p99 %.2f, max %.2f (%ld "
             "iterations)\n",
             bytes, dt / iters * 1e6, lat[(iters - 1) / 2] * 1e6, lat[(iters - 1) * 99 / 100] * 1e6,
             lat[iters - 2] * 1e6, iters);
    }
    free(lat);
  } else {
    double t0 = now_s();
    for (long i = 0; i < iters && !rc; i++) {
      if (r == 0)
        rc = check(nexar_send(c, buf, bytes, peer, 2), "send");
      else
        rc = check(nexar_recv(c, buf, bytes, peer, 2), "recv");
    }
    char ack = 0;
    if (!rc) {
      if (r == 1)
        rc = check(nexar_send(c, &ack, 1, peer, 3), "ack");
      else
        rc = check(nexar_recv(c, &ack, 1, peer, 3), "ack");
    }
    double dt = now_s() - t0;
    if (r == 0 && !rc)
      printf("bandwidth %zu B x %ld: %.3f GB/s (%.3f s)\n", bytes, iters,
             (double)bytes * (double)iters / dt / 1e9, dt);
  }
  free(buf);
  return rc;
}

static void *thr(void *a) {
  return (void *)(long)run(a);
}

int main(int argc, char **argv) {
  if (argc > 1) mode = argv[1];
  if (argc > 2) bytes = strtoull(argv[2], NULL, 10);
  if (argc > 3) iters = strtol(argv[3], NULL, 10);
  if (getenv("NEXAR_SEED_ADDR") || getenv("MASTER_ADDR")) {
    nexar_client *c;
    if (check(nexar_init_from_env(&c), "init")) return 1;
    int rc = run(c);
    nexar_client_del(c);
    return rc;
  }
  nexar_client *cl[2];
  if (check(nexar_bootstrap_local(cl, 2, NULL), "bootstrap")) return 1;
  pthread_t t[2];
  void *res[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, thr, cl[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], &res[i]);
  for (int i = 0; i < 2; i++)
    nexar_client_del(cl[i]);
  return res[0] || res[1];
}
