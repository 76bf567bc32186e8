/*
 * One process of the elastic-membership tests (elastic_test.sh), written
 * against the public API only. Joins with nexar_init_from_env: a member of
 * the first world (NEXAR_RANK / NEXAR_WORLD_SIZE set) or a joiner of the
 * running world (neither set: nexar_join returns once a checkpoint admits it).
 *
 *   elastic_worker [--until-world W] [--extra N] [--leave-at S] [--leave-when-world W]
 *                  [--cycles K] [--max-seconds T]
 *
 * Loop: one allreduce of 1 (must equal the world size), then one
 * nexar_elastic_checkpoint, every 20 ms. It prints
 *   member M: ready world W rank R new I          (after joining)
 *   member M: view epoch E world W rank R new I joined J left L old_world O comm C in T ms
 *   member M: checkpoint failed CODE in T ms: why  (a joiner failed: the view stays)
 *   member M: recovered epoch E world W rank R comm C  (after PEER_LOST: nexar_recover)
 *   member M: left at step S
 *   member M: final world W rank R epoch E comm C
 * M is this process's member id (its rank in the first world; a joiner's
 * rank in the view that admitted it plus 1000, as ids are not public).
 * It ends N steps after a view of W ranks (--until-world), or after K views
 * that went back to W... (--cycles K with --until-world W: K shrinks to W).
 * --leave-at S: nexar_elastic_leave at step S; --leave-when-world W: leave
 * at the first step with a world of W. Exit 0 on success, 2 on a timeout, 3
 * on a wrong sum, 4 on an unexpected error.
 */
#include <nexar/nexar.h>

#include "codes.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static unsigned g_me;

static void print_view(const char *what, nexar_client *c, double ms) {
  nexar_elastic_info e;
  nexar_elastic_info_get(c, &e);
  printf("member %u: %s epoch %llu world %u rank %u new %d joined %u left %u old_world %u comm "
         "%llx in %.0f ms\n",
         g_me, what, (unsigned long long)e.epoch, nexar_world_size(c), nexar_rank(c), e.i_am_new,
         e.joined, e.left, e.old_world, (unsigned long long)nexar_comm_id(c), ms);
  fflush(stdout);
}

int main(int argc, char **argv) {
  long until = 0, extra = 5, leave_at = -1, leave_when = 0, cycles = 0, max_s = 40;
  for (int i = 1; i + 1 < argc; i += 2) {
    long v = strtol(argv[i + 1], NULL, 10);
    if (!strcmp(argv[i], "--until-world"))
      until = v;
    else if (!strcmp(argv[i], "--extra"))
      extra = v;
    else if (!strcmp(argv[i], "--leave-at"))
      leave_at = v;
    else if (!strcmp(argv[i], "--leave-when-world"))
      leave_when = v;
    else if (!strcmp(argv[i], "--cycles"))
      cycles = v;
    else if (!strcmp(argv[i], "--max-seconds"))
      max_s = v;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  nexar_client *c = NULL;
  double t0 = mono_ms();
  int rc = nexar_init_from_env(&c);
  if (rc) {
    printf("member ?: join -> %s: %s\n", code_name(rc), nexar_last_error());
    return rc == NEXAR_ERR_AUTH ? 7 : rc == NEXAR_ERR_TIMEOUT ? 2 : 4;
  }
  nexar_elastic_info e;
  nexar_elastic_info_get(c, &e);
  g_me = e.i_am_new ? 1000 + nexar_rank(c) : nexar_rank(c);
  printf("member %u: ready world %u rank %u new %d pid %d in %.0f ms\n", g_me, nexar_world_size(c),
         nexar_rank(c), e.i_am_new, (int)getpid(), mono_ms() - t0);
  long left_after = -1, shrinks = 0;
  int leaving = 0;
  uint32_t last_world = nexar_world_size(c);
  if (until && last_world == (uint32_t)until && !cycles) left_after = extra;
  for (long step = 0;; step++) {
    if (mono_ms() - t0 > max_s * 1000.0) {
      printf("member %u: timeout at step %ld, world %u\n", g_me, step, nexar_world_size(c));
      return 2;
    }
    if (left_after == 0) break;
    if (left_after > 0) left_after--;
    if (step == leave_at || (leave_when && nexar_world_size(c) == (uint32_t)leave_when)) {
      nexar_elastic_leave(c);
      leaving = 1;
    }
    uint64_t one = 1;
    rc = nexar_all_reduce(c, &one, 1, NEXAR_U64, NEXAR_SUM);
    if (!rc && one != nexar_world_size(c)) {
      printf("member %u: allreduce gave %llu in a world of %u\n", g_me, (unsigned long long)one,
             nexar_world_size(c));
      return 3;
    }
    nexar_client *next = NULL;
    double t1 = mono_ms();
    if (!rc) rc = nexar_elastic_checkpoint(c, &next);
    double ms = mono_ms() - t1;
    if (rc == NEXAR_ERR_PEER_LOST) {
      size_t nd = 0;
      nexar_failed_ranks(c, NULL, 0, &nd);
      printf("member %u: checkpoint failed %s in %.0f ms: %s\n", g_me, code_name(rc), ms,
             nexar_last_error());
      if (nd == 0) continue; /* a joiner failed: the view stays */
      rc = nexar_recover(c, &next);
      if (rc) {
        printf("member %u: recover -> %s: %s\n", g_me, code_name(rc), nexar_last_error());
        return 4;
      }
      nexar_client_del(c);
      c = next;
      print_view("recovered", c, mono_ms() - t1);
      next = NULL;
    } else if (rc) {
      printf("member %u: step %ld -> %s: %s\n", g_me, step, code_name(rc), nexar_last_error());
      return 4;
    }
    if (next) {
      nexar_client_del(c);
      c = next;
      print_view("view", c, ms);
    } else if (!rc && leaving) { /* 0 and no successor: this rank has left */
      printf("member %u: left at step %ld\n", g_me, step);
      nexar_client_del(c);
      return 0;
    }
    uint32_t w = nexar_world_size(c);
    if (w != last_world) {
      if (cycles && until && w == (uint32_t)until && w < last_world && ++shrinks == cycles)
        left_after = extra;
      else if (!cycles && until && w == (uint32_t)until)
        left_after = extra;
      last_world = w;
    }
    usleep(20000);
  }
  nexar_elastic_info_get(c, &e);
  printf("member %u: final world %u rank %u epoch %llu comm %llx\n", g_me, nexar_world_size(c),
         nexar_rank(c), (unsigned long long)e.epoch, (unsigned long long)nexar_comm_id(c));
  nexar_client_del(c);
  return 0;
}
