/* A revoke that lands while an operation is being started must still end it
 * (regression: the start checked "revoked" before taking the engine lock and
 * registered the operation after it, so a revoke arriving in between was
 * missed and the operation waited for frames its peers drop, until its
 * timeout).
 *
 * Two ranks as threads; per round a fresh split child: rank 0 revokes it
 * while rank 1 starts a barrier (which rank 0 never joins) and then a receive
 * from rank 0 (never sent). Both must end with ABORTED or PEER_LOST, never
 * TIMEOUT. The window is microseconds wide, so the rounds vary the delay
 * between the two starts across the revoke's travel time.
 *   revoke_race_test [rounds]   (default 5000) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <nexar/nexar.h>

#define TIMEOUT_MS 1500

typedef struct {
  nexar_client *parent, *child;
  pthread_barrier_t *go;
  long delay_ns;
  int rc[2];
} arg;

static void spin_ns(long ns) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  do
    clock_gettime(CLOCK_MONOTONIC, &b);
  while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ns);
}

static void *split_main(void *p) {
  arg *a = p;
  a->rc[0] = nexar_split(a->parent, 0, 0, &a->child);
  return NULL;
}

static void *revoker(void *p) {
  arg *a = p;
  pthread_barrier_wait(a->go);
  spin_ns(a->delay_ns);
  a->rc[0] = nexar_revoke(a->child);
  return NULL;
}

static void *starter(void *p) {
  arg *a = p;
  uint32_t in = 0;
  pthread_barrier_wait(a->go);
  spin_ns(a->delay_ns);
  a->rc[0] = nexar_barrier(a->child);
  a->rc[1] = nexar_recv(a->child, &in, sizeof in, 0, 7);
  return NULL;
}

static int ended(int rc) {
  return rc == NEXAR_ERR_ABORTED || rc == NEXAR_ERR_PEER_LOST;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 5000;
  nexar_config cfg;
  nexar_config_default(&cfg);
  cfg.collective_timeout_ms = cfg.barrier_timeout_ms = TIMEOUT_MS;
  cfg.recovery_policy = NEXAR_RECOVERY_MANUAL;
  nexar_client *c[2];
  if (nexar_bootstrap_local(c, 2, &cfg)) {
    printf("FAIL bootstrap_local: %s\n", nexar_last_error());
    return 1;
  }
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, 2);
  srand(7);
  int bad = 0, k;
  for (k = 0; k < rounds && !bad; k++) {
    arg a[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
      a[i] = (arg){.parent = c[i], .go = &go};
      pthread_create(&t[i], NULL, split_main, &a[i]);
    }
    for (int i = 0; i < 2; i++)
      pthread_join(t[i], NULL);
    if (a[0].rc[0] || a[1].rc[0]) {
      printf("FAIL round %d: split: %s\n", k, nexar_last_error());
      return 1;
    }
    /* rank 1 starts 0..150 us after rank 0 revokes, or up to 50 us before */
    long d = (long)(rand() % 200000) - 50000;
    a[0].delay_ns = d < 0 ? -d : 0;
    a[1].delay_ns = d > 0 ? d : 0;
    pthread_create(&t[0], NULL, revoker, &a[0]);
    pthread_create(&t[1], NULL, starter, &a[1]);
    for (int i = 0; i < 2; i++)
      pthread_join(t[i], NULL);
    if (a[0].rc[0] || !ended(a[1].rc[0]) || !ended(a[1].rc[1])) {
      printf("FAIL round %d (rank 1 starts %ld ns after the revoke): revoke %s, barrier %s, "
             "recv %s\n",
             k, d, nexar_strerror(a[0].rc[0]), nexar_strerror(a[1].rc[0]),
             nexar_strerror(a[1].rc[1]));
      bad = 1;
    }
    for (int i = 0; i < 2; i++)
      nexar_client_del(a[i].child);
  }
  for (int i = 0; i < 2; i++)
    nexar_client_del(c[i]);
  pthread_barrier_destroy(&go);
  printf("%s: %d rounds\n", bad ? "FAIL" : "ok", k);
  return bad;
}
