/* What a sparse topology saves as the world grows, ranks as threads on
 * loopback (one process, so every rank's endpoint, threads and connections
 * add up here):
 *   - formation time (nexar_bootstrap_local: handshakes and the first barrier),
 *   - connections per rank and resident memory per rank after formation,
 *   - median latency of an 8-byte allreduce and of a barrier, and the time of
 *     a 1 MiB allreduce (ITERS each, every rank in its own thread).
 *   sparse_scale [iters] [sizes...]        (default 50, 16 32 64 128)
 * Topologies: full_mesh, hypercube, k_regular:4, each (topology, world) in
 * a fresh process (memory is the resident-set growth over formation). A
 * configuration that takes
 * longer than NEXAR_CONNECT_TIMEOUT_MS to form is reported as failed. One
 * line per (topology, world), ratios against full_mesh at the same world are
 * what to compare (2 cores here: more ranks than cores). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nexar/nexar.h>

#define MAXR 256

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static double rss_mb(void) {
  long pages = 0, res = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    fclose(f);
  }
  return (double)res * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

typedef struct arg {
  nexar_client *c;
  int iters, rc;
  double small_ms, barrier_ms, big_ms; /* medians (rank 0 reports) */
} arg;

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void *rank_main(void *p) {
  arg *a = p;
  double *t = malloc(sizeof(double) * (size_t)a->iters);
  float v[2] = {1, 2};
  size_t big = 1u << 18; /* 1 MiB of f32 */
  float *b = calloc(big, sizeof *b);
  for (int phase = 0; phase < 3 && !a->rc; phase++) {
    for (int i = 0; i < a->iters && !a->rc; i++) {
      double t0 = now_ms();
      if (phase == 0) a->rc = nexar_all_reduce(a->c, v, 2, NEXAR_F32, NEXAR_SUM);
      if (phase == 1) a->rc = nexar_barrier(a->c);
      if (phase == 2) a->rc = nexar_all_reduce(a->c, b, big, NEXAR_F32, NEXAR_SUM);
      t[i] = now_ms() - t0;
      if (phase == 2 && i >= 4) break; /* a few large ones are enough */
    }
    int n = phase == 2 ? (a->iters < 5 ? a->iters : 5) : a->iters;
    qsort(t, (size_t)n, sizeof *t, cmp);
    double med = t[n / 2];
    if (phase == 0) a->small_ms = med;
    if (phase == 1) a->barrier_ms = med;
    if (phase == 2) a->big_ms = med;
  }
  free(t);
  free(b);
  return NULL;
}

static void run(int topo, uint32_t k, uint32_t n, int iters) {
  static nexar_client *c[MAXR];
  static arg a[MAXR];
  static pthread_t th[MAXR];
  const char *name = topo == NEXAR_TOPO_FULL_MESH   ? "full_mesh"
                     : topo == NEXAR_TOPO_HYPERCUBE ? "hypercube"
                                                    : "k_regular:4";
  nexar_config cfg;
  nexar_config_default(&cfg);
  cfg.topology = topo;
  cfg.topology_degree = k;
  double m0 = rss_mb(), t0 = now_ms();
  int rc = nexar_bootstrap_local(c, n, &cfg);
  double form = now_ms() - t0, mem = rss_mb() - m0;
  if (rc) {
    printf("%-11s n=%3u  formation failed after %.0f ms: %s\n", name, n, form, nexar_last_error());
    fflush(stdout);
    return;
  }
  uint32_t conns = 0;
  for (uint32_t j = 1; j < n; j++) {
    nexar_peer_stats st;
    if (nexar_peer_stats_get(c[0], j, &st) == 0) conns += (uint32_t)st.neighbor;
  }
  for (uint32_t r = 0; r < n; r++) {
    a[r] = (arg){.c = c[r], .iters = iters};
    pthread_create(&th[r], NULL, rank_main, &a[r]);
  }
  int bad = 0;
  for (uint32_t r = 0; r < n; r++) {
    pthread_join(th[r], NULL);
    bad |= a[r].rc != 0;
  }
  uint64_t fwd = 0;
  for (uint32_t r = 0; r < n; r++) {
    nexar_relay_stats rs;
    if (nexar_relay_stats_get(c[r], &rs) == 0) fwd += rs.forwarded_bytes;
  }
  printf("%-11s n=%3u  form %8.0f ms  conns/rank %3u  mem/rank %6.2f MiB  allreduce 8B %8.3f ms"
         "  barrier %8.3f ms  allreduce 1MiB %8.2f ms  relayed %llu B%s\n",
         name, n, form, conns, mem / n, a[0].small_ms, a[0].barrier_ms, a[0].big_ms,
         (unsigned long long)fwd, bad ? "  (an operation failed)" : "");
  fflush(stdout);
  for (uint32_t r = 0; r < n; r++)
    nexar_client_del(c[r]);
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 50;
  uint32_t sizes[16] = {16, 32, 64, 128};
  int ns = 4;
  if (argc > 2) {
    ns = 0;
    for (int i = 2; i < argc && ns < 16; i++)
      sizes[ns++] = (uint32_t)atoi(argv[i]);
  }
  /* each configuration in a fresh process, so its memory is its own */
  const int topo[3] = {NEXAR_TOPO_HYPERCUBE, NEXAR_TOPO_K_REGULAR, NEXAR_TOPO_FULL_MESH};
  for (int s = 0; s < ns; s++)
    for (int t = 0; t < 3; t++) {
      if (sizes[s] > MAXR) continue;
      fflush(stdout);
      pid_t pid = fork();
      if (pid == 0) {
        run(topo[t], topo[t] == NEXAR_TOPO_K_REGULAR ? 4 : 0, sizes[s], iters);
        _exit(0);
      }
      int st = 0;
      if (pid > 0) waitpid(pid, &st, 0);
    }
  return 0;
}
