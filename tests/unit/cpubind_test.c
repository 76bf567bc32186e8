/* NEXAR_CPU_BIND (core/cpubind): the share arithmetic, and binding the
 * calling thread: none and auto's refusals leave it alone, core binds it to
 * its share, a thread the library starts from it (nx_thread_create, with and
 * without an attr) gets the whole set back, auto respects a binding already
 * made, and binds one CPU each, wrapping, when ranks outnumber CPUs. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "core/config.h"
#include "core/cpubind.h"

#include "check.h"

static int count_self(cpu_set_t *out) {
  cpu_set_t s;
  CHECK(sched_getaffinity(0, sizeof s, &s) == 0, "sched_getaffinity");
  if (out) *out = s;
  return CPU_COUNT(&s);
}

static void *library_thread(void *arg) {
  *(int *)arg = count_self(NULL);
  return NULL;
}

int main(void) {
  uint32_t f, n;
  /* contiguous equal blocks, every CPU used once */
  nx_cpu_share(8, 2, 0, &f, &n);
  CHECK(f == 0 && n == 4, "8 CPUs, rank 0 of 2: %u+%u", f, n);
  nx_cpu_share(8, 2, 1, &f, &n);
  CHECK(f == 4 && n == 4, "8 CPUs, rank 1 of 2: %u+%u", f, n);
  uint32_t next = 0;
  for (uint32_t i = 0; i < 3; i++) {
    nx_cpu_share(8, 3, i, &f, &n);
    CHECK(f == next && n >= 2 && n <= 3, "8 CPUs, rank %u of 3: %u+%u", i, f, n);
    next = f + n;
  }
  CHECK(next == 8, "three shares cover 8 CPUs (%u)", next);
  /* more ranks than CPUs: one each, wrapping */
  nx_cpu_share(2, 5, 3, &f, &n);
  CHECK(f == 1 && n == 1, "2 CPUs, rank 3 of 5: %u+%u", f, n);
  nx_cpu_share(0, 2, 0, &f, &n);
  CHECK(n == 0, "no CPUs");

  cpu_set_t all;
  int ncpu = count_self(&all);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  CHECK(nx_cpu_bind_self(NX_BIND_NONE, 1, 0, 1) == 0 && count_self(NULL) == ncpu, "none");
  CHECK(nx_cpu_bind_self(NX_BIND_AUTO, 2, 0, 0) == 0 && count_self(NULL) == ncpu,
        "auto: ranks on other hosts");
  if (ncpu < 2 || ncpu != online) {
    printf("cpubind_test: share arithmetic passed; binding not tried (%d CPUs allowed, %ld "
           "online)\n",
           ncpu, online);
    return 0;
  }
  /* core: rank 1 of 2 gets the upper half of the allowed set */
  int got = nx_cpu_bind_self(NX_BIND_CORE, 2, 1, 1);
  cpu_set_t now;
  CHECK(got == ncpu - ncpu / 2 && count_self(&now) == got, "core: bound to %d CPUs", got);
  int seen = 0, highest = -1;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &all) && seen++ >= ncpu / 2) highest = c;
  CHECK(CPU_ISSET(highest, &now), "core: the last allowed CPU is in rank 1's share");
  int in_thread = 0;
  pthread_t t;
  CHECK(nx_thread_create(&t, NULL, library_thread, &in_thread) == 0, "thread");
  pthread_join(t, NULL);
  CHECK(in_thread == ncpu, "a library thread runs on all %d CPUs again (%d)", ncpu, in_thread);
  pthread_attr_t at;
  pthread_attr_init(&at);
  in_thread = 0;
  CHECK(nx_thread_create(&t, &at, library_thread, &in_thread) == 0, "thread with an attr");
  pthread_join(t, NULL);
  pthread_attr_destroy(&at);
  CHECK(in_thread == ncpu, "one started with an attr too (%d)", in_thread);
  /* auto leaves a thread that is already bound (by a launcher) alone */
  CHECK(nx_cpu_bind_self(NX_BIND_AUTO, 2, 0, 1) == 0 && count_self(NULL) == got,
        "auto: already bound");
  CHECK(pthread_setaffinity_np(pthread_self(), sizeof all, &all) == 0 && count_self(NULL) == ncpu,
        "unbound again");
  /* auto on an unrestricted thread binds like core */
  CHECK(nx_cpu_bind_self(NX_BIND_AUTO, 2, 0, 1) == ncpu / 2 && nx_cpu_bound_alone(), "auto: bound");
  /* more ranks than CPUs: auto binds too, one CPU each, wrapping (rank
   * ncpu gets the first), and the shares overlap */
  CHECK(pthread_setaffinity_np(pthread_self(), sizeof all, &all) == 0, "unbound once more");
  CHECK(nx_cpu_bind_self(NX_BIND_AUTO, (uint32_t)ncpu + 1, (uint32_t)ncpu, 1) == 1 &&
            count_self(&now) == 1 && !nx_cpu_bound_alone(),
        "auto: more ranks than CPUs, one CPU");
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
    if (CPU_ISSET(c, &all)) first = c;
  CHECK(CPU_ISSET(first, &now), "auto: rank %d of %d wraps to the first allowed CPU", ncpu,
        ncpu + 1);
  printf("cpubind_test: all passed\n");
  return 0;
}
