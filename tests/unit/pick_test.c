/* proto/pick: choosing between two ways by their measured times. Simulated
 * calls whose ways cost fixed times (plus, where said, outliers):
 * - each way is measured first (a try of NX_PICK_TRY calls), then the
 *   faster is taken, and the slower tried at most every NX_PICK_EVERY_MIN
 *   calls, less often as its tries keep losing (at most one in
 *   NX_PICK_EVERY_MIN over the run, and one in NX_PICK_EVERY_MAX once
 *   settled);
 * - when the costs swap (the machine changed), the new faster way is taken
 *   within NX_PICK_EVERY_MAX + a few calls;
 * - a slow first measurement (page faults) is outgrown within
 *   NX_PICK_EVERY_MIN calls;
 * - a cost paid by the first call after a change of way does not keep the
 *   faster way from being taken (a try is NX_PICK_TRY calls);
 * - one outlier of a hundred times on the way taken does not move it, and
 *   a run of them moves it to the other;
 * - size classes are kept apart: a way fast at 64 KiB and slow at 4 MiB is
 *   taken at the one and not the other. */
#include <string.h>

#include "check.h"
#include "proto/pick.h"

typedef struct {
  uint64_t cost[2]; /* ns per call of each way */
} sim;

/* Runs calls of `bytes`; returns how many took way 1. */
static uint32_t run(nx_pick *p, const sim *s, uint64_t bytes, uint32_t calls) {
  uint32_t ones = 0;
  for (uint32_t i = 0; i < calls; i++) {
    int w = nx_pick_way(p, bytes);
    CHECK(w == 0 || w == 1, "way %d", w);
    ones += (uint32_t)w;
    nx_pick_done(p, bytes, w, s->cost[w]);
  }
  return ones;
}

static void first_each_then_best(void) {
  nx_pick p;
  nx_pick_init(&p);
  sim s = {{500000, 100000}}; /* way 1 five times faster */
  for (uint32_t i = 0; i < 2 * NX_PICK_TRY; i++) {
    int w = nx_pick_way(&p, 1 << 20);
    CHECK(w == (i >= NX_PICK_TRY), "call %u: way %d, each way's first try in turn", i, w);
    nx_pick_done(&p, 1 << 20, w, s.cost[w]);
  }
  uint32_t calls = 100000, ones = run(&p, &s, 1 << 20, calls);
  CHECK(calls - ones <= calls / NX_PICK_EVERY_MIN, "way 0 taken %u of %u calls", calls - ones,
        calls);
  /* settled: a try (NX_PICK_TRY calls) per NX_PICK_EVERY_MAX calls at most */
  ones = run(&p, &s, 1 << 20, 10 * NX_PICK_EVERY_MAX);
  CHECK(10 * NX_PICK_EVERY_MAX - ones <= 10 * NX_PICK_TRY, "settled: way 0 taken %u times",
        10 * NX_PICK_EVERY_MAX - ones);
  /* the other order: way 0 faster */
  nx_pick_init(&p);
  s = (sim){{70000, 100000}};
  ones = run(&p, &s, 1 << 20, calls);
  CHECK(ones <= calls / NX_PICK_EVERY_MIN && ones >= 1, "way 1 taken %u of %u calls", ones, calls);
}

static void follows_a_change(void) {
  nx_pick p;
  nx_pick_init(&p);
  sim s = {{70000, 100000}};
  run(&p, &s, 1 << 20, 50000); /* settled on way 0 */
  s = (sim){{500000, 100000}}; /* the machine changed: way 0 five times slower */
  /* way 0's estimate grows past way 1's within a few calls */
  uint32_t ones = run(&p, &s, 1 << 20, 8);
  CHECK(ones >= 4, "after the change way 1 taken %u of 8 calls", ones);
  ones = run(&p, &s, 1 << 20, 1000);
  CHECK(ones >= 1000 - 1000 / NX_PICK_EVERY_MIN, "then way 1 %u of 1000", ones);
  /* and back: way 1 slows down while way 0's time is its last try's (five
   * times way 1's): way 1's estimate passes it after 14 calls */
  s = (sim){{70000, 400000}};
  ones = run(&p, &s, 1 << 20, 24);
  CHECK(ones <= 16, "after the second change way 1 taken %u of 24 calls", ones);
  ones = run(&p, &s, 1 << 20, 1000);
  CHECK(ones <= 1000 / NX_PICK_EVERY_MIN, "then way 1 %u of 1000", ones);
  /* a slowdown of the way taken that stays below the other's time is not a change */
  s = (sim){{70000, 100000}};
  run(&p, &s, 1 << 20, 5000);
  s = (sim){{90000, 100000}};
  ones = run(&p, &s, 1 << 20, 5000);
  CHECK(ones <= 5000 / NX_PICK_EVERY_MIN, "way 1 taken %u of 5000 while still slower", ones);
}

static void slow_first(void) {
  nx_pick p;
  nx_pick_init(&p);
  /* way 0's first call pays page faults: 10 times its cost */
  CHECK(nx_pick_way(&p, 1 << 20) == 0, "first call: way 0");
  nx_pick_done(&p, 1 << 20, 0, 700000);
  sim s = {{70000, 100000}};
  run(&p, &s, 1 << 20, NX_PICK_EVERY_MIN + 2);
  uint32_t ones = run(&p, &s, 1 << 20, 1000);
  CHECK(ones <= 1000 / NX_PICK_EVERY_MIN, "way 1 still taken %u of 1000 calls", ones);
}

/* The first call after a change of way pays for the change (pick.h: the
 * harness's all_gather of 256 KiB), here as much as the difference between
 * the ways: a try of one call measured only that, and the faster way, once
 * behind, stayed behind. */
static void switch_cost(void) {
  for (int slower = 0; slower < 2; slower++) {
    nx_pick p;
    nx_pick_init(&p);
    sim s = {{20000, 20000}};
    s.cost[slower] = 30000;
    uint32_t fast = 0, calls = 20000;
    int last = -1;
    for (uint32_t i = 0; i < calls; i++) {
      int w = nx_pick_way(&p, 256 << 10);
      fast += w != slower;
      nx_pick_done(&p, 256 << 10, w, s.cost[w] + (last >= 0 && w != last ? 15000 : 0));
      last = w;
    }
    CHECK(fast >= calls - calls / NX_PICK_EVERY_MIN, "way %d (faster) taken %u of %u calls",
          !slower, fast, calls);
  }
}

static void outliers(void) {
  nx_pick p;
  nx_pick_init(&p);
  sim s = {{70000, 100000}};
  run(&p, &s, 1 << 20, 5000);
  /* one preempted call of way 0 */
  CHECK(nx_pick_way(&p, 1 << 20) == 0, "way 0 before the outlier");
  nx_pick_done(&p, 1 << 20, 0, 100 * s.cost[0]);
  CHECK(nx_pick_way(&p, 1 << 20) == 0, "way 0 after one outlier");
  nx_pick_done(&p, 1 << 20, 0, s.cost[0]);
  /* a run of them: way 0 is slow now */
  uint32_t ones = 0;
  for (int i = 0; i < 8; i++) {
    int w = nx_pick_way(&p, 1 << 20);
    ones += (uint32_t)w;
    nx_pick_done(&p, 1 << 20, w, w ? s.cost[1] : 100 * s.cost[0]);
  }
  CHECK(ones >= 4, "way 1 taken %u of 8 calls after a run of outliers", ones);
}

static void classes_apart(void) {
  nx_pick p;
  nx_pick_init(&p);
  /* way 0: fast per byte at 64 KiB, slow at 4 MiB */
  uint32_t a = 0, b = 0;
  for (int i = 0; i < 20000; i++) {
    int w = nx_pick_way(&p, 64 << 10);
    a += (uint32_t)w;
    nx_pick_done(&p, 64 << 10, w, w ? 9000 : 4000);
    w = nx_pick_way(&p, 4 << 20);
    b += (uint32_t)w;
    nx_pick_done(&p, 4 << 20, w, w ? 400000 : 900000);
  }
  CHECK(a <= 20000 / NX_PICK_EVERY_MIN, "64 KiB: way 1 taken %u of 20000", a);
  CHECK(b >= 20000 - 20000 / NX_PICK_EVERY_MIN, "4 MiB: way 1 taken %u of 20000", b);
  /* sizes below 1 KiB share class 0 and the largest the last class; zero bytes is not a division
   * by zero */
  nx_pick_done(&p, 0, 0, 5);
  nx_pick_done(&p, UINT64_MAX, 1, UINT64_MAX);
  CHECK(nx_pick_way(&p, UINT64_MAX) <= 1, "the largest class");
}

int main(void) {
  first_each_then_best();
  follows_a_change();
  slow_first();
  switch_cost();
  outliers();
  classes_apart();
  printf("pick_test: ok\n");
  return 0;
}
