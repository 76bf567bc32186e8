/* vmstate.c - which state this machine is in right now, for compare.sh.
 *
 * Why: the 2-vCPU VM of issue 15 moves, every few seconds, between states
 * in which a cache line goes from one vCPU to the other in about 20, 50 or
 * 250 ns one way (its host places the vCPUs on one core, one cache, or
 * not), and every library's same-host times move 2-4x with it
 * (bench/states.c). compare.sh runs each library's sweep at another moment,
 * so a repetition of one library may meet a slow state and the other's a
 * fast one; it calls this before each run and writes the result beside the
 * times (vmstate.csv, ratio.md), so that a reader sees which ratios compare
 * two states.
 *
 *   vmstate [BURSTS]
 *
 * Two threads, pinned to the first two CPUs allowed, pass one cache line
 * back and forth, BURSTS (200) bursts of 50 round trips (a few ms in all).
 * Prints the median one-way time in ns, "-" with fewer than two CPUs.
 * Exits 1 on a bad argument or a thread that cannot start. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define TRIPS 50
#define MAXBURSTS 10000

static _Alignas(64) _Atomic uint64_t ping;
static _Alignas(64) _Atomic uint64_t pong;
static int cpus[2];

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  (void)pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

/* answers every value rank 0 stores until it stores 0 */
static void *echo(void *arg) {
  (void)arg;
  pin(cpus[1]);
  uint64_t seen = 0;
  for (;;) {
    uint64_t v;
    while ((v = atomic_load_explicit(&ping, memory_order_acquire)) == seen) {
    }
    if (!v) return NULL;
    atomic_store_explicit(&pong, v, memory_order_release);
    seen = v;
  }
}

static int cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int bursts = argc > 1 ? atoi(argv[1]) : 200;
  if (bursts < 1 || bursts > MAXBURSTS) {
    fprintf(stderr, "usage: vmstate [BURSTS (1-%d)]\n", MAXBURSTS);
    return 1;
  }
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed)) return 1;
  int k = 0;
  for (int c = 0; c < CPU_SETSIZE && k < 2; c++)
    if (CPU_ISSET(c, &allowed)) cpus[k++] = c;
  if (k < 2) {
    puts("-");
    return 0;
  }
  pthread_t t;
  if (pthread_create(&t, NULL, echo, NULL)) return 1;
  pin(cpus[0]);
  static uint64_t ns[MAXBURSTS];
  uint64_t v = 0;
  for (int b = 0; b < bursts; b++) {
    uint64_t t0 = now_ns();
    for (int i = 0; i < TRIPS; i++) {
      atomic_store_explicit(&ping, ++v, memory_order_release);
      while (atomic_load_explicit(&pong, memory_order_acquire) != v) {
      }
    }
    ns[b] = (now_ns() - t0) / (2 * TRIPS);
  }
  atomic_store_explicit(&ping, 0, memory_order_release);
  pthread_join(t, NULL);
  qsort(ns, (size_t)bursts, sizeof *ns, cmp);
  printf("%llu\n", (unsigned long long)ns[bursts / 2]);
  return 0;
}
