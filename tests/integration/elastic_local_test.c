/* Elastic membership in one process (ranks as threads, loopback): a world
 * of 2 formed through a seed grows to 4 when two joiners arrive (at once,
 * then one after the other: 2 -> 3 -> 4, where the first joiner takes part
 * in the checkpoint that admits the second), shrinks by a leave, and a seed
 * with elastic_max_world = 3 admits one of two waiting joiners. Every rank
 * checks the new view (epoch, world, elastic info, ranks of the joiners)
 * and an allreduce over it. The processes-in-namespaces test is
 * tests/integration/elastic_test.sh. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nexar/nexar.h>

#define MAXR 8

#include "mtcheck.h"

typedef struct rank_arg {
  const char *seed;
  nexar_config cfg;
  nexar_client *c; /* the current view */
  int rc;
  int joiner;          /* joins the formed world */
  atomic_int *grow_to; /* members checkpoint until the world has this size */
  int leave;           /* leave at the first checkpoint */
  nexar_elastic_info info;
  double join_ms;
  atomic_int joined; /* nexar_join returned: 1 with 0, -1 with an error */
} rank_arg;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void *member_main(void *p);

/* A joiner; with grow_to set it then checkpoints as a member until the view
 * has grow_to ranks: the seed may admit joiners at different checkpoints
 * (one arrived after it offered the other, as under load in CI), and the
 * view that admitted the first needs it in the next checkpoint. */
static void *join_main(void *p) {
  rank_arg *a = p;
  double t0 = now_ms();
  a->rc = nexar_join(&a->c, a->seed, &a->cfg);
  a->join_ms = now_ms() - t0;
  if (a->rc) {
    atomic_store(&a->joined, -1);
    return NULL;
  }
  nexar_elastic_info_get(a->c, &a->info);
  atomic_store(&a->joined, 1);
  if (a->grow_to && (int)nexar_world_size(a->c) != atomic_load(a->grow_to)) member_main(a);
  return NULL;
}

/* A member: checkpoints (with a barrier between, as a training step) until
 * the view has grow_to ranks, or once when it leaves. */
static void *member_main(void *p) {
  rank_arg *a = p;
  if (a->leave) nexar_elastic_leave(a->c);
  for (int step = 0; step < 2000; step++) {
    nexar_client *next = NULL;
    a->rc = nexar_elastic_checkpoint(a->c, &next);
    if (a->rc) return NULL;
    if (next) {
      nexar_client_del(a->c);
      a->c = next;
      nexar_elastic_info_get(a->c, &a->info);
    } else if (a->leave) {
      nexar_client_del(a->c);
      a->c = NULL;
      return NULL;
    }
    if ((int)nexar_world_size(a->c) == atomic_load(a->grow_to)) return NULL;
    usleep(2000);
  }
  a->rc = NEXAR_ERR_TIMEOUT;
  return NULL;
}

static nexar_config base_cfg(const char *token) {
  nexar_config cfg;
  nexar_config_default(&cfg);
  cfg.cluster_token = token;
  cfg.connect_timeout_ms = 20000;
  cfg.elastic_checkpoint_timeout_ms = 20000;
  cfg.heartbeat_timeout_ms = 5000;
  return cfg;
}

/* Forms a world of n through seed s; a[i].c are its ranks. */
static int form(nexar_seed *s, rank_arg *a, int n, const char *token) {
  pthread_t t[MAXR];
  for (int i = 0; i < n; i++) {
    a[i] = (rank_arg){.seed = nexar_seed_addr(s), .cfg = base_cfg(token)};
    pthread_create(&t[i], NULL, join_main, &a[i]);
  }
  int bad = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(t[i], NULL);
    bad |= a[i].rc != 0;
  }
  return bad ? -1 : 0;
}

/* The allreduce of (old rank + 1 or 100 + member) over the view checks
 * that everybody is in it with the same view. */
static void *sum_main(void *p) {
  rank_arg *a = p;
  double v = 1;
  a->rc = nexar_all_reduce(a->c, &v, 1, NEXAR_F64, NEXAR_SUM);
  if (!a->rc && v != nexar_world_size(a->c)) a->rc = -1000;
  return NULL;
}

static void all_sum(rank_arg **v, int n, const char *what) {
  pthread_t t[MAXR];
  for (int i = 0; i < n; i++)
    pthread_create(&t[i], NULL, sum_main, v[i]);
  for (int i = 0; i < n; i++) {
    pthread_join(t[i], NULL);
    CHECK(v[i]->rc == 0, "%s: allreduce on rank %u: %d", what, nexar_rank(v[i]->c), v[i]->rc);
  }
}

/* Two joiners grow a world of 2 to 4, then a rank leaves. staggered: the
 * second joiner starts once the first is in (2 -> 3 -> 4); else both start
 * at once, and the seed admits them at one checkpoint or at two. */
static void grow_and_shrink(int staggered) {
  const char *token = "elastic-local-test-token";
  nexar_config cfg = base_cfg(token);
  nexar_seed *s = NULL;
  CHECK(nexar_seed_new(&s, "127.0.0.1:0", 2, &cfg) == 0, "seed");
  if (!s) return;
  rank_arg a[MAXR];
  CHECK(form(s, a, 2, token) == 0, "formation");
  if (g_fail) return;
  /* two joiners arrive while the members run checkpoints */
  atomic_int grow_to = 4;
  pthread_t t[MAXR];
  for (int i = 2; i < 4; i++)
    a[i] = (rank_arg){
        .seed = nexar_seed_addr(s), .cfg = base_cfg(token), .joiner = 1, .grow_to = &grow_to};
  for (int i = 0; i < 2; i++)
    a[i].grow_to = &grow_to;
  pthread_create(&t[2], NULL, join_main, &a[2]);
  if (!staggered) pthread_create(&t[3], NULL, join_main, &a[3]);
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, member_main, &a[i]);
  if (staggered) {
    for (int w = 0; w < 60000 && !atomic_load(&a[2].joined); w++)
      usleep(1000);
    pthread_create(&t[3], NULL, join_main, &a[3]);
  }
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < 4; i++) {
    CHECK(a[i].rc == 0, "grow: rank slot %d: %s", i, nexar_strerror(a[i].rc));
    if (a[i].rc) return;
  }
  /* both joiners at one checkpoint (epoch 1: 2 -> 4), or one at each
   * (epoch 2: 2 -> 3 -> 4, the last view's info says 3 -> 4) */
  uint64_t grown = a[0].info.epoch;
  CHECK(staggered ? grown == 2 : grown == 1 || grown == 2, "grow: epoch %llu",
        (unsigned long long)grown);
  int fresh = 0;
  for (int i = 0; i < 4; i++) {
    nexar_elastic_info *e = &a[i].info;
    CHECK(nexar_world_size(a[i].c) == 4 && e->new_world == 4 && e->old_world == 2 + grown - 1 &&
              e->joined == 3 - grown && e->left == 0 && e->epoch == grown,
          "grow: slot %d: world %u, info new %u old %u joined %u left %u epoch %llu", i,
          nexar_world_size(a[i].c), e->new_world, e->old_world, e->joined, e->left,
          (unsigned long long)e->epoch);
    CHECK(i >= 2 || !e->i_am_new, "grow: slot %d: i_am_new %d", i, e->i_am_new);
    fresh += e->i_am_new;
    /* members keep their rank (nobody left), joiners come after them */
    CHECK(i < 2 ? nexar_rank(a[i].c) == e->old_rank && e->old_rank < 2
                : nexar_rank(a[i].c) >= 2 &&
                      (e->i_am_new ? e->old_rank == UINT32_MAX : e->old_rank == 2),
          "grow: slot %d has rank %u (old rank %u)", i, nexar_rank(a[i].c), e->old_rank);
    CHECK(nexar_comm_id(a[i].c) == nexar_comm_id(a[0].c), "grow: slot %d: another comm id", i);
  }
  CHECK(fresh == 3 - (int)grown, "grow: %d ranks new in the last view (epoch %llu)", fresh,
        (unsigned long long)grown);
  printf("ok   grow 2 -> 4%s in %llu step(s): joiners waited %.0f and %.0f ms\n",
         staggered ? " (joiners one after the other)" : "", (unsigned long long)grown, a[2].join_ms,
         a[3].join_ms);
  rank_arg *v[MAXR] = {&a[0], &a[1], &a[2], &a[3]};
  all_sum(v, 4, "grow");
  /* rank 1 leaves: the others get a view of 3 */
  atomic_store(&grow_to, 3);
  for (int i = 0; i < 4; i++) {
    a[i].leave = nexar_rank(a[i].c) == 1;
    a[i].grow_to = &grow_to;
    pthread_create(&t[i], NULL, member_main, &a[i]);
  }
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  int k = 0;
  for (int i = 0; i < 4; i++) {
    CHECK(a[i].rc == 0, "shrink: slot %d: %s", i, nexar_strerror(a[i].rc));
    if (a[i].leave) {
      CHECK(a[i].c == NULL, "shrink: the leaver kept a view");
      continue;
    }
    if (!a[i].c) continue;
    CHECK(nexar_world_size(a[i].c) == 3 && a[i].info.left == 1 && a[i].info.epoch == grown + 1,
          "shrink: slot %d: world %u left %u epoch %llu", i, nexar_world_size(a[i].c),
          a[i].info.left, (unsigned long long)a[i].info.epoch);
    v[k++] = &a[i];
  }
  if (k == 3) all_sum(v, 3, "shrink");
  printf("ok   shrink 4 -> 3 by a leave\n");
  for (int i = 0; i < 4; i++)
    nexar_client_del(a[i].c);
  nexar_seed_del(s);
}

/* elastic_max_world = 3 at the seed: of two waiting joiners one is admitted,
 * the other stays queued (and gives up at its own timeout). */
static void max_world(void) {
  const char *token = "elastic-local-max-token";
  nexar_config cfg = base_cfg(token);
  cfg.elastic_max_world = 3;
  nexar_seed *s = NULL;
  CHECK(nexar_seed_new(&s, "127.0.0.1:0", 2, &cfg) == 0, "seed");
  if (!s) return;
  rank_arg a[MAXR];
  CHECK(form(s, a, 2, token) == 0, "formation");
  if (g_fail) return;
  atomic_int grow_to = 3;
  pthread_t t[MAXR];
  for (int i = 2; i < 4; i++) {
    a[i] = (rank_arg){.seed = nexar_seed_addr(s), .cfg = base_cfg(token), .joiner = 1};
    a[i].cfg.elastic_checkpoint_timeout_ms = 4000;
    pthread_create(&t[i], NULL, join_main, &a[i]);
  }
  usleep(300000); /* both queued before the first checkpoint */
  for (int i = 0; i < 2; i++) {
    a[i].grow_to = &grow_to;
    pthread_create(&t[i], NULL, member_main, &a[i]);
  }
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  int admitted = (a[2].rc == 0) + (a[3].rc == 0);
  int timedout = (a[2].rc == NEXAR_ERR_TIMEOUT) + (a[3].rc == NEXAR_ERR_TIMEOUT);
  CHECK(a[0].rc == 0 && a[1].rc == 0 && admitted == 1 && timedout == 1,
        "max_world 3: members %d/%d, joiners %s / %s", a[0].rc, a[1].rc, nexar_strerror(a[2].rc),
        nexar_strerror(a[3].rc));
  if (!g_fail)
    printf("ok   elastic_max_world 3: one of two joiners admitted, the other timed out\n");
  for (int i = 0; i < 4; i++)
    nexar_client_del(a[i].c);
  nexar_seed_del(s);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  grow_and_shrink(0);
  grow_and_shrink(1);
  max_world();
  printf("elastic_local_test: %d failure(s)\n", atomic_load(&g_fail));
  return g_fail ? 1 : 0;
}
