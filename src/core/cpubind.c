/* NEXAR_CPU_BIND (cpubind.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "core/cpubind.h"

#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#include "core/common.h"
#include "core/config.h"

static cpu_set_t unbound;          /* the allowed set before the first binding */
static _Thread_local int tl_alone; /* nx_cpu_bound_alone */
static atomic_int claimed, have_unbound;

void nx_cpu_share(uint32_t ncpu, uint32_t nlocal, uint32_t index, uint32_t *first,
                  uint32_t *count) {
  if (!ncpu || !nlocal) {
    *first = 0, *count = 0;
  } else if (nlocal <= ncpu) {
    index %= nlocal;
    *first = (uint32_t)((uint64_t)index * ncpu / nlocal);
    *count = (uint32_t)((uint64_t)(index + 1) * ncpu / nlocal) - *first;
  } else {
    *first = index % ncpu, *count = 1;
  }
}

int nx_cpu_bind_self(int mode, uint32_t nlocal, uint32_t index, int whole_world_local) {
  tl_alone = 0; /* an earlier world's binding says nothing of this one's ranks */
  if (mode == NX_BIND_NONE || nlocal == 0) return 0;
  cpu_set_t now;
  if (sched_getaffinity(0, sizeof now, &now)) return 0;
  uint32_t ncpu = (uint32_t)CPU_COUNT(&now);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (mode == NX_BIND_AUTO && (!whole_world_local || (long)ncpu != online)) return 0;
  uint32_t first, count;
  nx_cpu_share(ncpu, nlocal, index, &first, &count);
  cpu_set_t want;
  CPU_ZERO(&want);
  uint32_t pos = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE && pos < first + count; cpu++) {
    if (!CPU_ISSET(cpu, &now)) continue;
    if (pos >= first) CPU_SET(cpu, &want);
    pos++;
  }
  if (!CPU_COUNT(&want)) return 0;
  /* the first binding's set is the one the library's threads return to */
  int no = 0;
  if (atomic_compare_exchange_strong(&claimed, &no, 1)) {
    unbound = now;
    atomic_store(&have_unbound, 1);
  }
  int rc = pthread_setaffinity_np(pthread_self(), sizeof want, &want);
  if (rc) {
    NX_WARN("NEXAR_CPU_BIND: binding rank %u of %u on this host to %u CPUs: error %d", index,
            nlocal, count, rc);
    return 0;
  }
  NX_DEBUG("NEXAR_CPU_BIND: local rank %u of %u bound to CPUs %u..%u of %u allowed", index, nlocal,
           first, first + count - 1, ncpu);
  tl_alone = nlocal <= ncpu; /* shares are disjoint (nx_cpu_share) */
  return CPU_COUNT(&want);
}

int nx_cpu_bound_alone(void) {
  return tl_alone;
}

/* This thread is SCHED_BATCH by nx_thread_batch's doing; whether it may
 * switch at all (1: it began as SCHED_OTHER; -1: another policy, which a
 * user or launcher chose and we keep, or a switch failed; 0 not known). */
static _Thread_local int tl_batch, tl_may_switch;

int nx_thread_batch(int on) {
  if (!tl_may_switch) tl_may_switch = sched_getscheduler(0) == SCHED_OTHER ? 1 : -1;
  if (tl_may_switch < 0 || on == tl_batch) return 0;
  struct sched_param sp = {0};
  if (sched_setscheduler(0, on ? SCHED_BATCH : SCHED_OTHER, &sp)) {
    tl_may_switch = -1; /* not again */
    return -1;
  }
  tl_batch = on;
  return 0;
}

int nx_thread_create(pthread_t *t, pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
  int unb = atomic_load(&have_unbound);
  if (!unb && !tl_batch) return pthread_create(t, attr, fn, arg);
  pthread_attr_t own;
  pthread_attr_t *a = attr ? attr : &own;
  if (!attr && pthread_attr_init(&own)) return pthread_create(t, NULL, fn, arg);
  if (unb) (void)pthread_attr_setaffinity_np(a, sizeof unbound, &unbound);
  if (tl_batch) { /* not our passing SCHED_BATCH: the policy it had before */
    struct sched_param sp = {0};
    (void)pthread_attr_setinheritsched(a, PTHREAD_EXPLICIT_SCHED);
    (void)pthread_attr_setschedpolicy(a, SCHED_OTHER);
    (void)pthread_attr_setschedparam(a, &sp);
  }
  int rc = pthread_create(t, a, fn, arg);
  if (!attr) pthread_attr_destroy(&own);
  return rc;
}
