/* A worker for the tools' elastic tests (elastic_tools_test.sh): joins as
 * nexar_init_from_env says (a founding member or, once the world has formed, a
 * joiner), then runs elastic checkpoints until the view has TARGET ranks or
 * TIMEOUT_S seconds have passed on rank 0, and ends with an allreduce over the
 * final view.
 *   elastic_tool_worker TARGET TIMEOUT_S
 * Prints "elastic_tool_worker: joined ..." once, "elastic_tool_worker: view ..." after
 * every resize and "elastic_tool_worker: done rank R world W" at the end. Exits 0
 * when the final world is TARGET, 3 when it is not, 4 when the join timed out
 * (a joiner nobody admitted), 1 on any other error. */
#include <nexar/nexar.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int fail(const char *what, int rc) {
  printf("elastic_tool_worker: pid %ld: %s failed: %s (%s)\n", (long)getpid(), what,
         nexar_strerror(rc), nexar_last_error());
  return rc == NEXAR_ERR_TIMEOUT && what[0] == 'j' ? 4 : 1;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc != 3) {
    fprintf(stderr, "usage: elastic_tool_worker TARGET TIMEOUT_S\n");
    return 2;
  }
  uint32_t target = (uint32_t)strtoul(argv[1], NULL, 10);
  double limit = strtod(argv[2], NULL), t0 = now_s();
  nexar_client *c = NULL;
  int rc = nexar_init_from_env(&c);
  if (rc) return fail("join", rc);
  nexar_elastic_info e;
  nexar_elastic_info_get(c, &e);
  printf("elastic_tool_worker: joined pid %ld rank %u world %u epoch %llu new %d\n", (long)getpid(),
         nexar_rank(c), nexar_world_size(c), (unsigned long long)e.epoch, e.i_am_new);
  for (;;) {
    /* Rank 0 (always an old member) decides for everybody, so that members
     * and joiners admitted later stop at the same checkpoint. */
    uint32_t go = nexar_rank(c) == 0 && nexar_world_size(c) != target && now_s() - t0 < limit;
    if ((rc = nexar_broadcast(c, &go, 1, NEXAR_U32, 0))) return fail("broadcast", rc);
    if (!go) break;
    nexar_client *next = NULL;
    if ((rc = nexar_elastic_checkpoint(c, &next))) return fail("elastic_checkpoint", rc);
    if (next) {
      nexar_client_del(c);
      c = next;
      nexar_elastic_info_get(c, &e);
      printf(
          "elastic_tool_worker: view epoch %llu world %u -> %u joined %u left %u rank %u new %d\n",
          (unsigned long long)e.epoch, e.old_world, e.new_world, e.joined, e.left, nexar_rank(c),
          e.i_am_new);
    }
    usleep(20000);
  }
  uint64_t one = 1;
  if ((rc = nexar_all_reduce(c, &one, 1, NEXAR_U64, NEXAR_SUM))) return fail("all_reduce", rc);
  uint32_t world = nexar_world_size(c);
  printf("elastic_tool_worker: done rank %u world %u sum %llu\n", nexar_rank(c), world,
         (unsigned long long)one);
  nexar_client_del(c);
  return world == target && one == world ? 0 : 3;
}
