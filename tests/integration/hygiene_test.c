/*
 * Resource hygiene: creating and destroying clusters leaves nothing behind.
 *
 *   hygiene_test [clusters] [seeds]   (defaults 100 and 10)
 *
 * After one warm-up round (so that one-time global state, such as the TLS
 * library's, is already there), it counts this process's threads
 * (/proc/self/task), open file descriptors (/proc/self/fd) and heap bytes in
 * use (mallinfo2), then
 *   - creates `clusters` local clusters of 4 ranks with nexar_bootstrap_local,
 *     runs an allreduce and a barrier (non-blocking, so one thread drives all
 *     ranks) on each, and deletes every client;
 *   - starts `seeds` seeds (nexar_seed_new) and joins 2 workers to each
 *     (nexar_join on threads), one allreduce, then deletes clients and seed;
 *   - starts `seeds` seeds that nobody joins and deletes them at once.
 * Then it waits up to 10 s for the library's idle worker pool to drain
 * (idle workers exit after about 2 s) and requires the same thread and
 * descriptor counts as before, and heap growth under 1 MiB.
 */
#include <nexar/nexar.h>

#include <dirent.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WORLD 4
#define COUNT 1024
#define HEAP_SLACK (1u << 20)

static int g_fail;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int count_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - (strcmp(path, "/proc/self/fd") == 0); /* the DIR's own descriptor */
}

static void list_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char p[300], target[256];
    snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(p, target, sizeof target - 1);
    target[n > 0 ? n : 0] = 0;
    printf("  fd %s -> %s\n", e->d_name, target);
  }
  closedir(d);
}

static void list_tasks(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char p[300], name[64] = "";
    snprintf(p, sizeof p, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(p, "r");
    if (f) {
      if (!fgets(name, sizeof name, f)) name[0] = 0;
      fclose(f);
    }
    name[strcspn(name, "\n")] = 0;
    printf("  task %s (%s)\n", e->d_name, name);
  }
  closedir(d);
}

static size_t heap_in_use(void) {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

static int local_cluster(int i) {
  nexar_client *c[WORLD];
  nexar_config cfg;
  nexar_config_default(&cfg);
  cfg.collective_timeout_ms = 20000;
  cfg.barrier_timeout_ms = 20000;
  int rc = nexar_bootstrap_local(c, WORLD, &cfg);
  if (rc) {
    printf("FAIL cluster %d: bootstrap_local: %s\n", i, nexar_last_error());
    return 1;
  }
  static float buf[WORLD][COUNT];
  nexar_request *rq[2 * WORLD];
  for (int r = 0; r < WORLD; r++) {
    for (int k = 0; k < COUNT; k++)
      buf[r][k] = (float)(r + k % 3);
    rc = nexar_all_reduce_nb(c[r], buf[r], COUNT, NEXAR_F32, NEXAR_SUM, &rq[r]);
    if (!rc) rc = nexar_barrier_nb(c[r], &rq[WORLD + r]);
    if (rc) {
      printf("FAIL cluster %d: rank %d: %s\n", i, r, nexar_last_error());
      return 1;
    }
  }
  rc = nexar_wait_all(rq, 2 * WORLD);
  int bad = rc != 0;
  for (int r = 0; r < WORLD && !bad; r++)
    for (int k = 0; k < COUNT; k++)
      if (buf[r][k] != (float)(6 + WORLD * (k % 3))) bad = 1;
  if (bad) printf("FAIL cluster %d: allreduce/barrier: %s\n", i, rc ? nexar_last_error() : "");
  for (int r = 0; r < WORLD; r++)
    nexar_client_del(c[r]);
  return bad;
}

typedef struct joiner {
  const char *addr;
  nexar_config cfg;
  nexar_client *c;
  int rc;
} joiner;

static void *join_main(void *arg) {
  joiner *j = arg;
  j->rc = nexar_join(&j->c, j->addr, &j->cfg);
  if (j->rc == 0) {
    int32_t v = (int32_t)nexar_rank(j->c) + 1;
    j->rc = nexar_all_reduce(j->c, &v, 1, NEXAR_I32, NEXAR_SUM);
    if (j->rc == 0 && v != 3) j->rc = -100;
  }
  return NULL;
}

static int seed_cluster(int i) {
  nexar_config cfg;
  nexar_config_default(&cfg);
  cfg.cluster_token = "hygiene-test-token";
  cfg.connect_timeout_ms = 20000;
  nexar_seed *s;
  int rc = nexar_seed_new(&s, "127.0.0.1:0", 2, &cfg);
  if (rc) {
    printf("FAIL seed %d: seed_new: %s\n", i, nexar_last_error());
    return 1;
  }
  joiner j[2];
  pthread_t t[2];
  for (int k = 0; k < 2; k++) {
    memset(&j[k], 0, sizeof j[k]);
    j[k].addr = nexar_seed_addr(s);
    j[k].cfg = cfg;
    pthread_create(&t[k], NULL, join_main, &j[k]);
  }
  for (int k = 0; k < 2; k++)
    pthread_join(t[k], NULL);
  int bad = 0;
  for (int k = 0; k < 2; k++)
    if (j[k].rc) {
      printf("FAIL seed %d: worker %d: rc %d\n", i, k, j[k].rc);
      bad = 1;
    }
  for (int k = 0; k < 2; k++)
    nexar_client_del(j[k].c);
  nexar_seed_del(s);
  return bad;
}

static int lonely_seed(int i) {
  nexar_seed *s;
  int rc = nexar_seed_new(&s, "127.0.0.1:0", 3, NULL);
  if (rc) {
    printf("FAIL lonely seed %d: %s\n", i, nexar_last_error());
    return 1;
  }
  nexar_seed_del(s);
  return 0;
}

static int parse(const char *s, int dflt) {
  if (!s) return dflt;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  return (errno || *end || v < 0 || v > 100000) ? dflt : (int)v;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int nclusters = parse(argc > 1 ? argv[1] : NULL, 100);
  int nseeds = parse(argc > 2 ? argv[2] : NULL, 10);
  /* warm-up: one of each */
  g_fail |= local_cluster(-1);
  g_fail |= seed_cluster(-1);
  g_fail |= lonely_seed(-1);
  double t = now_ms();
  int tasks0 = -1, fds0 = -1;
  /* let the warm-up's idle workers drain, so the baseline is stable */
  for (int prev = -2; now_ms() - t < 10000; usleep(200000)) {
    tasks0 = count_dir("/proc/self/task");
    if (tasks0 == prev) break;
    prev = tasks0;
    usleep(3000000);
  }
  fds0 = count_dir("/proc/self/fd");
  size_t heap0 = heap_in_use();
  printf("before: %d threads, %d fds, %zu heap bytes\n", tasks0, fds0, heap0);

  t = now_ms();
  for (int i = 0; i < nclusters && !g_fail; i++)
    g_fail |= local_cluster(i);
  double tl = now_ms() - t;
  t = now_ms();
  for (int i = 0; i < nseeds && !g_fail; i++)
    g_fail |= seed_cluster(i);
  for (int i = 0; i < nseeds && !g_fail; i++)
    g_fail |= lonely_seed(i);
  double ts = now_ms() - t;
  printf("%d local clusters of %d in %.0f ms (%.1f ms each); %d seeds + joins and %d bare seeds "
         "in %.0f ms\n",
         nclusters, WORLD, tl, nclusters ? tl / nclusters : 0.0, nseeds, nseeds, ts);
  printf("right after: %d threads, %d fds\n", count_dir("/proc/self/task"),
         count_dir("/proc/self/fd"));

  int tasks = -1, fds = -1;
  t = now_ms();
  while (now_ms() - t < 10000) {
    tasks = count_dir("/proc/self/task");
    fds = count_dir("/proc/self/fd");
    if (tasks <= tasks0 && fds <= fds0) break;
    usleep(100000);
  }
  size_t heap = heap_in_use();
  printf("after %.0f ms: %d threads, %d fds, %zu heap bytes (%+lld)\n", now_ms() - t, tasks, fds,
         heap, (long long)heap - (long long)heap0);
  if (tasks != tasks0) {
    printf("FAIL: %d threads before, %d after\n", tasks0, tasks);
    list_tasks();
    g_fail = 1;
  }
  if (fds != fds0) {
    printf("FAIL: %d file descriptors before, %d after\n", fds0, fds);
    list_fds();
    g_fail = 1;
  }
  if (heap > heap0 + HEAP_SLACK) {
    printf("FAIL: heap in use grew by %zu bytes (more than %u)\n", heap - heap0, HEAP_SLACK);
    g_fail = 1;
  }
  printf("hygiene_test: %s\n", g_fail ? "FAILED" : "ok");
  return g_fail;
}
