/*
 * One rank of the recovery tests (recover_test.sh), written against the
 * public API only (API.md: nexar_recover, nexar_agree, nexar_view_epoch).
 *
 *   recover_worker MODE [--count N] [--rounds K] [--max-seconds S] [--linger-ms L]
 *
 * Joins with nexar_init_from_env, meets the others at a barrier and prints
 *
 *   rank R: ready pid P world N
 *
 * MODE allreduce: allreduces of N u32 (results checked exactly) in a loop.
 * MODE p2pwait: every rank blocks in a receive from rank R^1 that nobody
 * sends (only a revoke or a death ends it).
 * MODE agree: nexar_agree in a loop (flag = 1 except on one iteration where
 * the last rank passes 0: every rank must get 0 there).
 *
 * On the first failure it prints
 *   rank R: op failed with CODE after T ms at U: why
 * (T: time in that call, U: CLOCK_REALTIME in ms), then recovers: nexar_recover
 * and, on the new communicator, one allreduce of (world rank + 1) that must
 * equal the sum over the view's members (it learns them with an all_gather).
 * A view whose check fails because a member died meanwhile (PEER_LOST) is
 * recovered again. Each installed view is printed as
 *   rank R: view comm=ID epoch=E world=W rank=r members=[a,b,..] in T ms at U
 * and each failed recovery as
 *   rank R: recover -> CODE in T ms: why
 * After K successful recoveries (default 1) it runs allreduce once more on the
 * final view, prints "rank R: done", stays L ms and exits 0. A recovery that
 * fails with PEER_LOST (this rank was declared dead) exits 5, ABORTED exits 6,
 * a wrong result exits 4, S seconds without the expected events exit 2.
 */
#include <nexar/nexar.h>

#include "codes.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORLD 64
#define WAIT_TAG 9191u

static uint32_t g_world_rank;

/* One step of the loop on c; 0 or the error. */
static int step(nexar_client *c, const char *mode, uint32_t *buf, size_t count, unsigned long it) {
  uint32_t r = nexar_rank(c), n = nexar_world_size(c);
  if (strcmp(mode, "p2pwait") == 0) {
    uint32_t x;
    return nexar_recv(c, &x, sizeof x, (r ^ 1u) < n ? (r ^ 1u) : r, WAIT_TAG);
  }
  if (strcmp(mode, "agree") == 0) {
    uint32_t flag = (it == 3 && r == n - 1) ? 0 : 1;
    int rc = nexar_agree(c, &flag);
    if (rc) return rc;
    if (flag != (it == 3 ? 0u : 1u)) {
      printf("rank %u: agree #%lu gave flag %u\n", g_world_rank, it, flag);
      exit(4);
    }
    return 0;
  }
  for (size_t i = 0; i < count; i++)
    buf[i] = (uint32_t)(i * 7u + r + it);
  int rc = nexar_all_reduce(c, buf, count, NEXAR_U32, NEXAR_SUM);
  if (rc) return rc;
  for (size_t i = 0; i < count; i++) {
    uint32_t want = (uint32_t)(n * (i * 7u + it) + (uint64_t)n * (n - 1) / 2);
    if (buf[i] != want) {
      printf("rank %u: allreduce #%lu element %zu = %u, want %u\n", g_world_rank, it, i, buf[i],
             want);
      exit(4);
    }
  }
  return 0;
}

/* The view check on a fresh communicator: everyone's world rank, and an
 * allreduce that must equal their sum. */
static int check_view(nexar_client *c, uint32_t *members) {
  uint32_t mine = g_world_rank, n = nexar_world_size(c);
  int rc = nexar_all_gather(c, &mine, members, 1, NEXAR_U32);
  if (rc) return rc;
  uint64_t want = 0;
  for (uint32_t i = 0; i < n; i++) {
    want += members[i] + 1u;
    if (i && members[i] <= members[i - 1]) {
      printf("rank %u: view members out of the old order\n", g_world_rank);
      exit(4);
    }
  }
  uint64_t v = mine + 1u;
  rc = nexar_all_reduce(c, &v, 1, NEXAR_U64, NEXAR_SUM);
  if (rc) return rc;
  if (v != want) {
    printf("rank %u: view allreduce %llu, want %llu\n", g_world_rank, (unsigned long long)v,
           (unsigned long long)want);
    exit(4);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return 64;
  const char *mode = argv[1];
  unsigned long count = 1024, rounds = 1, max_s = 60, linger_ms = 1500;
  for (int i = 2; i < argc; i++) {
    unsigned long *dst = !strcmp(argv[i], "--count")         ? &count
                         : !strcmp(argv[i], "--rounds")      ? &rounds
                         : !strcmp(argv[i], "--max-seconds") ? &max_s
                         : !strcmp(argv[i], "--linger-ms")   ? &linger_ms
                                                             : NULL;
    if (!dst || i + 1 >= argc || parse_u(argv[++i], 1ul << 28, dst)) return 64;
  }
  nexar_client *c = NULL;
  if (nexar_init_from_env(&c)) {
    printf("init_from_env: %s\n", nexar_last_error());
    return 1;
  }
  g_world_rank = nexar_rank(c);
  uint32_t *buf = calloc(count ? count : 1, sizeof *buf);
  if (!buf || nexar_barrier(c)) {
    printf("rank %u: barrier: %s\n", g_world_rank, nexar_last_error());
    return 1;
  }
  printf("rank %u: ready pid %d world %u\n", g_world_rank, (int)getpid(), nexar_world_size(c));
  fflush(stdout);
  double start = mono_ms();
  unsigned long it = 0, done = 0;
  int failed_once = 0;
  while (mono_ms() - start < (double)max_s * 1000 && done < rounds) {
    double t0 = mono_ms();
    int rc = step(c, mode, buf, count, it++);
    if (rc == 0) {
      if (strcmp(mode, "agree") == 0 && it > 6 && !failed_once) usleep(20000);
      continue;
    }
    if (!failed_once)
      printf("rank %u: op failed with %s after %.0f ms at %lld: %s\n", g_world_rank, code_name(rc),
             mono_ms() - t0, unix_ms(), nexar_last_error());
    failed_once = 1;
    fflush(stdout);
    /* recover until a view passes its check */
    for (;;) {
      double t1 = mono_ms();
      nexar_client *nc = NULL;
      rc = nexar_recover(c, &nc);
      if (rc) {
        char err[300];
        snprintf(err, sizeof err, "%s", nexar_last_error());
        uint32_t d[MAX_WORLD];
        size_t nd = 0;
        nexar_failed_ranks(c, d, MAX_WORLD, &nd);
        char fs[200];
        size_t o = 0;
        for (size_t i = 0; i < nd && i < MAX_WORLD && o + 12 < sizeof fs; i++)
          o += (size_t)snprintf(fs + o, sizeof fs - o, "%s%u", i ? "," : "", d[i]);
        fs[o] = 0;
        printf("rank %u: recover -> %s in %.0f ms: %s (failed here: [%s])\n", g_world_rank,
               code_name(rc), mono_ms() - t1, err, fs);
        fflush(stdout);
        sleep((unsigned)(linger_ms / 1000));
        return rc == NEXAR_ERR_PEER_LOST ? 5 : 6;
      }
      uint32_t members[MAX_WORLD];
      int vrc = nexar_world_size(nc) <= MAX_WORLD ? check_view(nc, members) : -1;
      if (c) nexar_client_del(c);
      c = nc;
      if (vrc == 0) {
        char m[400];
        size_t o = 0;
        for (uint32_t i = 0; i < nexar_world_size(c) && o + 12 < sizeof m; i++)
          o += (size_t)snprintf(m + o, sizeof m - o, "%s%u", i ? "," : "", members[i]);
        m[o] = 0;
        printf("rank %u: view comm=%llx epoch=%llu world=%u rank=%u members=[%s] in %.0f ms at "
               "%lld\n",
               g_world_rank, (unsigned long long)nexar_comm_id(c),
               (unsigned long long)nexar_view_epoch(c), nexar_world_size(c), nexar_rank(c), m,
               mono_ms() - t1, unix_ms());
        fflush(stdout);
        done++;
        it = 0; /* the survivors failed at different iterations: start over together */
        break;
      }
      printf("rank %u: view epoch %llu check -> %s: %s (recovering again)\n", g_world_rank,
             (unsigned long long)nexar_view_epoch(c), code_name(vrc), nexar_last_error());
      fflush(stdout);
    }
    failed_once = done < rounds ? 0 : 1;
  }
  if (done < rounds) {
    printf("rank %u: %lu of %lu recoveries within %lu s\n", g_world_rank, done, rounds, max_s);
    return 2;
  }
  int rc = strcmp(mode, "p2pwait") ? step(c, mode, buf, count, it) : 0;
  if (rc) {
    printf("rank %u: final %s -> %s: %s\n", g_world_rank, mode, code_name(rc), nexar_last_error());
    return 3;
  }
  printf("rank %u: done\n", g_world_rank);
  fflush(stdout);
  usleep((useconds_t)linger_ms * 1000);
  nexar_client_del(c);
  free(buf);
  return 0;
}
