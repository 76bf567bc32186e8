/* shm_floor: what libnexar's large same-host all_reduce scheme costs on this
 * machine without the library, as a floor to judge its overhead by.
 *
 * Two processes (fork) sum a float vector of SIZE bytes each, in place, the
 * way libnexar does it between two ranks above NX_CSEG_RCHUNK
 * (collective/segcoll.c, NX_SEG_CHUNKS): chunk by chunk, each copies its
 * chunk into its half of a shared mapping, says so, waits for the other's,
 * then adds the other's chunk into its own vector; two slots per process so
 * that chunk k + 1 may be copied while the other still reads chunk k. Only
 * the data's movement remains: no signatures, no failure checks, flags in
 * their own cache lines, spinning waits. Both processes get the same bits
 * (a + b is b + a in IEEE arithmetic), which the program checks.
 *
 * Prints the median of ITERS runs (and the best) as time and bus bandwidth
 * (SIZE / time at n = 2), the figure bench/compare.sh sets beside
 * libnexar's.
 *
 * With MODE "exchange" each process copies the other's chunk over its own
 * instead of adding it: the two vectors only trade places. Any scheme that
 * moves the data through shared memory must carry SIZE bytes each way
 * between the two cores (a rank's result depends on every byte of the
 * other's vector), so this time bounds every such all_reduce, whatever
 * its order of copies and adds. After ITERS swaps each process must hold
 * the vector it began with (ITERS even) or the other's, which it checks.
 *
 * With MODE "oneway" only process 0 publishes and only process 1 copies
 * out (then holds process 0's vector, which it checks): the data crosses
 * in one direction, as in a broadcast. Set beside the exchange, it shows
 * what carrying the data both ways at once costs over one way (on the
 * machine of bench/results/shm, one way about one memcpy's time, both
 * ways 1.7-1.8x that: README, Performance).
 *
 *   shm_floor [SIZE_MIB=64] [CHUNK_KIB=512] [ITERS=15] [MODE=allreduce|exchange|oneway]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 2

typedef struct {
  _Alignas(64) _Atomic uint64_t pub;  /* chunks this process published */
  _Alignas(64) _Atomic uint64_t read; /* chunks of the other's it has added */
} flags;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* 16 floats at a time, as the library's AVX-512 kernel (reduce/): GCC's
 * vector extension, lowered to whatever the clone's ISA has */
typedef float vf16 __attribute__((vector_size(64)));
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void
add(float *restrict d, const float *restrict s, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    vf16 x, y;
    memcpy(&x, d + i, sizeof x);
    memcpy(&y, s + i, sizeof y);
    x += y;
    memcpy(d + i, &x, sizeof x);
  }
  for (; i < n; i++)
    d[i] += s[i];
}

static int by_time(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void wait_for(_Atomic uint64_t *w, uint64_t v) {
  while (atomic_load_explicit(w, memory_order_acquire) < v) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

static float initial(size_t i, int who) {
  return (float)((i * 7 + (size_t)who * 3) % 1024) * 0.25f;
}

enum { ALLREDUCE, EXCHANGE, ONEWAY };
static const char *const mode_names[] = {"allreduce", "exchange", "oneway"};

static int run(int me, flags *f, uint8_t *seg, size_t size, size_t chunk, int iters, int mode,
               int out) {
  float *a = aligned_alloc(4096, size);
  if (!a) return 1;
  size_t n = size / sizeof(float), per = chunk / sizeof(float), nch = n / per;
  for (size_t i = 0; i < n; i++)
    a[i] = initial(i, me);
  uint8_t *mine = seg + (size_t)me * SLOTS * chunk,
          *theirs = seg + (size_t)(me ^ 1) * SLOTS * chunk;
  flags *my = &f[me], *other = &f[me ^ 1];
  double *ts = calloc((size_t)iters, sizeof *ts);
  if (!ts) return 1;
  uint64_t k = 0;
  for (int it = 0; it < iters; it++) {
    /* both begin together: the other has added everything of the last run */
    wait_for(&other->read, k);
    double t0 = now();
    for (size_t c = 0; c < nch; c++, k++) {
      size_t slot = (size_t)(k % SLOTS) * chunk;
      if (k >= SLOTS) wait_for(&other->read, k - SLOTS + 1); /* our slot was read */
      if (mode != ONEWAY || me == 0) memcpy(mine + slot, a + c * per, chunk);
      atomic_store_explicit(&my->pub, k + 1, memory_order_release);
      wait_for(&other->pub, k + 1);
      if (mode == ALLREDUCE)
        add(a + c * per, (const float *)(theirs + slot), per);
      else if (mode == EXCHANGE || me == 1)
        memcpy(a + c * per, theirs + slot, chunk);
      atomic_store_explicit(&my->read, k + 1, memory_order_release);
    }
    ts[it] = now() - t0;
  }
  qsort(ts, (size_t)iters, sizeof *ts, by_time);
  double med = ts[iters / 2], best = ts[0];
  free(ts);
  /* all_reduce: the same bits on both sides, our checksum to the other
   * through a pipe; exchange: the vector of whoever ITERS swaps left here;
   * one way: process 0's on both sides */
  uint64_t sum = 0;
  int holder = mode == ONEWAY ? 0 : me ^ (iters & 1);
  for (size_t i = 0; i < n; i++) {
    uint32_t b;
    memcpy(&b, &a[i], sizeof b);
    sum = sum * 31 + b;
    if (mode != ALLREDUCE && a[i] != initial(i, holder)) {
      fprintf(stderr, "shm_floor: process %d holds a wrong value at %zu after %d runs\n", me, i,
              iters);
      return 1;
    }
  }
  if (mode != ALLREDUCE) sum = 1; /* checked here, each its own */
  if (me == 0) {
    printf("shm_floor %s: %zu MiB, chunks of %zu KiB, %d runs: median %.3f ms (best %.3f), %.3f "
           "GB/s bus bandwidth\n",
           mode_names[mode], size >> 20, chunk >> 10, iters, med * 1e3, best * 1e3,
           (double)size / med / 1e9);
    fflush(stdout);
  }
  if (write(out, &sum, sizeof sum) != (ssize_t)sizeof sum) return 1;
  free(a);
  return 0;
}

int main(int argc, char **argv) {
  size_t size = (size_t)(argc > 1 ? atoi(argv[1]) : 64) << 20;
  size_t chunk = (size_t)(argc > 2 ? atoi(argv[2]) : 512) << 10;
  int iters = argc > 3 ? atoi(argv[3]) : 15;
  int mode = argc > 4 ? -1 : ALLREDUCE;
  for (int m = ALLREDUCE; m <= ONEWAY && argc > 4; m++)
    if (!strcmp(argv[4], mode_names[m])) mode = m;
  if (!size || !chunk || chunk % 64 || size % chunk || iters < 1 || mode < 0) {
    fprintf(stderr, "usage: shm_floor [SIZE_MIB] [CHUNK_KIB, a multiple of 64 B dividing SIZE] "
                    "[ITERS] [allreduce|exchange|oneway]\n");
    return 2;
  }
  flags *f =
      mmap(NULL, 2 * sizeof(flags), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  uint8_t *seg =
      mmap(NULL, 2 * SLOTS * chunk, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int fd[2];
  if (f == MAP_FAILED || seg == MAP_FAILED || pipe(fd)) {
    perror("shm_floor");
    return 1;
  }
  memset(seg, 0, 2 * SLOTS * chunk);
  pid_t kid[2];
  for (int me = 0; me < 2; me++) {
    kid[me] = fork();
    if (kid[me] < 0) {
      perror("shm_floor: fork");
      return 1;
    }
    if (kid[me] == 0) _exit(run(me, f, seg, size, chunk, iters, mode, fd[1]));
  }
  int bad = 0;
  for (int me = 0; me < 2; me++) {
    int st = 0;
    if (waitpid(kid[me], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) bad = 1;
  }
  uint64_t s0 = 0, s1 = 1;
  if (bad || read(fd[0], &s0, sizeof s0) != (ssize_t)sizeof s0 ||
      read(fd[0], &s1, sizeof s1) != (ssize_t)sizeof s1 || s0 != s1) {
    fprintf(stderr, "shm_floor: the two processes failed or disagree\n");
    return 1;
  }
  return 0;
}
