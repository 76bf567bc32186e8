/* Cost of the elastic checkpoint, ranks as threads through an in-process
 * seed on loopback:
 *   - a checkpoint with no change against a barrier (ITERS of each, N = 4);
 *   - a grow by 2 joiners and a shrink by 2 leavers at N = 4, 8, 16 (the time
 *     rank 0 spends in the checkpoint that makes the change; the joiners are
 *     queued before it starts).
 *   elastic_bench [iters] [sizes...]     (default 1000, 4 8 16)
 * Prints one line per measurement; ratios, not absolute times, are what to
 * compare across machines. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nexar/nexar.h>

#define MAXR 64

typedef struct arg {
  const char *seed;
  nexar_config cfg;
  nexar_client *c;
  int rc, iters, mode; /* mode 0 barriers, 1 checkpoints, 2 one checkpoint */
  int leave;
  double ms;
} arg;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void *join_main(void *p) {
  arg *a = p;
  a->rc = nexar_join(&a->c, a->seed, &a->cfg);
  return NULL;
}

static void *work_main(void *p) {
  arg *a = p;
  if (a->leave) nexar_elastic_leave(a->c);
  double t0 = now_ms();
  for (int i = 0; i < a->iters && !a->rc; i++) {
    if (a->mode == 0) {
      a->rc = nexar_barrier(a->c);
    } else {
      nexar_client *next = NULL;
      a->rc = nexar_elastic_checkpoint(a->c, &next);
      if (next || a->leave) {
        nexar_client_del(a->c);
        a->c = next;
      }
    }
  }
  a->ms = now_ms() - t0;
  return NULL;
}

static int run(arg *a, int n, int mode, int iters) {
  pthread_t t[MAXR];
  for (int i = 0; i < n; i++) {
    a[i].mode = mode, a[i].iters = iters, a[i].rc = 0;
    pthread_create(&t[i], NULL, work_main, &a[i]);
  }
  int bad = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(t[i], NULL);
    if (a[i].rc) {
      fprintf(stderr, "rank %d: %s\n", i, nexar_strerror(a[i].rc));
      bad = 1;
    }
  }
  return bad;
}

static nexar_config cfg_for(const char *token) {
  nexar_config c;
  nexar_config_default(&c);
  c.cluster_token = token;
  c.connect_timeout_ms = 60000;
  c.elastic_checkpoint_timeout_ms = 60000;
  return c;
}

static int world(int n, int iters) {
  const char *token = "elastic-bench-token";
  nexar_config cfg = cfg_for(token);
  nexar_seed *s = NULL;
  if (nexar_seed_new(&s, "127.0.0.1:0", (uint32_t)n, &cfg)) return 1;
  arg a[MAXR];
  pthread_t t[MAXR];
  memset(a, 0, sizeof a);
  for (int i = 0; i < n + 2; i++)
    a[i] = (arg){.seed = nexar_seed_addr(s), .cfg = cfg_for(token)};
  for (int i = 0; i < n; i++)
    pthread_create(&t[i], NULL, join_main, &a[i]);
  for (int i = 0; i < n; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < n; i++)
    if (a[i].rc) return 1;
  /* the first world's ranks come from the seed by arrival: index by rank */
  arg by[MAXR];
  for (int i = 0; i < n; i++)
    by[nexar_rank(a[i].c)] = a[i];
  if (n == 4 && iters > 0) {
    run(by, n, 0, iters / 10); /* warm-up */
    if (run(by, n, 0, iters)) return 1;
    double bar = by[0].ms;
    if (run(by, n, 1, iters)) return 1;
    double ckpt = by[0].ms;
    printf("N=4: %d barriers %.1f ms, %d no-change checkpoints %.1f ms: ratio %.2f\n", iters, bar,
           iters, ckpt, ckpt / bar);
  }
  /* grow by 2: the joiners queue first, then one checkpoint admits both */
  for (int i = n; i < n + 2; i++)
    pthread_create(&t[i], NULL, join_main, &a[i]);
  usleep(300000);
  if (run(by, n, 2, 1)) return 1;
  for (int i = n; i < n + 2; i++) {
    pthread_join(t[i], NULL);
    if (a[i].rc) return 1;
    by[nexar_rank(a[i].c)] = a[i];
  }
  printf("N=%d: grow %d -> %d: %.1f ms at rank 0\n", n, n, n + 2, by[0].ms);
  /* shrink by 2: the last two leave */
  by[n].leave = by[n + 1].leave = 1;
  if (run(by, n + 2, 2, 1)) return 1;
  printf("N=%d: shrink %d -> %d: %.1f ms at rank 0\n", n, n + 2, n, by[0].ms);
  for (int i = 0; i < n; i++)
    nexar_client_del(by[i].c);
  nexar_seed_del(s);
  return 0;
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 1000;
  int sizes[8] = {4, 8, 16}, ns = 3;
  if (argc > 2) {
    ns = 0;
    for (int i = 2; i < argc && ns < 8; i++)
      sizes[ns++] = atoi(argv[i]);
  }
  for (int k = 0; k < ns; k++) {
    if (sizes[k] < 2 || sizes[k] + 2 > MAXR) continue;
    if (world(sizes[k], k == 0 ? iters : 0)) {
      fprintf(stderr, "elastic_bench: N=%d failed: %s\n", sizes[k], nexar_last_error());
      return 1;
    }
  }
  return 0;
}
