/* Why a two-rank copy through a shared buffer can be five times slower than
 * single copy on some placements of two CPUs (collective/segchoice.c,
 * nx_segcoll_either): two processes, one per CPU, move `bytes` each way per
 * round, without the library.
 *
 *   dirty_lines MODE BYTES ROUNDS      (MODE: stream, nt or clean)
 *
 * stream: each process copies its source into its own ring of 64 KiB pieces
 *   (16 of them, half the ring ahead) and copies the other's pieces out as
 *   they are announced, as the library's streamed all_to_all does: the
 *   reader takes lines its writer has just written.
 * nt: the same, the writer storing non-temporally (the lines go to memory,
 *   not the writer's cache).
 * clean: each reads the other's source, written once before the rounds, as
 *   single copy does.
 * Prints the one-way latency of a cache line between the two (the
 * machine's state) and the mean time of a round after a quarter of them;
 * exits 1 if any byte arrived wrong. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __x86_64__
#include <emmintrin.h>
#endif

#define PIECE (64u << 10)
#define RING 16u

typedef struct {
  _Atomic uint64_t w; /* pieces written */
  char p1[56];
  _Atomic uint64_t r; /* pieces read */
  char p2[56];
  _Atomic uint64_t go;
  char p3[56];
} ctl_t;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void copy_nt(void *d, const void *s, size_t n) {
#ifdef __x86_64__
  __m128i *D = d;
  const __m128i *S = s;
  for (size_t i = 0; i < n / 16; i++)
    _mm_stream_si128(D + i, _mm_load_si128(S + i));
  _mm_sfence();
#else
  memcpy(d, s, n);
#endif
}

static void spin(void) {
#ifdef __x86_64__
  _mm_pause();
#endif
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: dirty_lines stream|nt|clean BYTES ROUNDS\n");
    return 64;
  }
  int mode = !strcmp(argv[1], "nt") ? 1 : !strcmp(argv[1], "clean") ? 2 : 0;
  size_t bytes = strtoull(argv[2], NULL, 0) / PIECE * PIECE;
  int rounds = atoi(argv[3]);
  if (!bytes || rounds < 4) return 64;
  size_t ringb = (size_t)RING * PIECE;
  uint8_t *shm = mmap(NULL, 4096 + 2 * ringb + 2 * bytes, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shm == MAP_FAILED) return 1;
  ctl_t *ctl = (ctl_t *)shm;
  uint8_t *ring[2] = {shm + 4096, shm + 4096 + ringb};
  uint8_t *srcs[2] = {shm + 4096 + 2 * ringb, shm + 4096 + 2 * ringb + bytes};
  pid_t child = fork();
  int me = child == 0;
  cpu_set_t cs;
  CPU_ZERO(&cs);
  CPU_SET(me, &cs);
  sched_setaffinity(0, sizeof cs, &cs); /* (one CPU: the placement is the test) */
  uint8_t *src = srcs[me], *dst = aligned_alloc(4096, bytes);
  if (!dst) return 1;
  memset(src, me + 1, bytes);
  memset(dst, 0, bytes);
  ctl_t *mc = &ctl[me], *oc = &ctl[!me];
  /* the state: a line handed back and forth */
  double t = 0;
  for (uint64_t i = 1; i <= 120000; i++) {
    if (i == 20001) t = now_us();
    if (!me) atomic_store(&mc->go, i);
    while (atomic_load(&oc->go) != i)
      spin();
    if (me) atomic_store(&mc->go, i);
  }
  double pp = (now_us() - t) / 100000 / 2 * 1000;
  uint64_t pieces = bytes / PIECE, W = 0, R = 0;
  double sum = 0;
  int bad = 0;
  for (int it = 0; it < rounds; it++) {
    t = now_us();
    if (mode == 2) {
      atomic_store(&mc->w, (uint64_t)it + 1);
      while (atomic_load(&oc->w) < (uint64_t)it + 1)
        spin();
      memcpy(dst, srcs[!me], bytes);
      atomic_store(&mc->r, (uint64_t)it + 1);
      while (atomic_load(&oc->r) < (uint64_t)it + 1)
        spin();
    } else {
      uint64_t wrote = 0;
      for (uint64_t c = 0; c < pieces; c++) {
        for (; wrote < pieces && wrote < c + RING / 2; wrote++) {
          while (W + wrote >= atomic_load_explicit(&oc->r, memory_order_acquire) + RING)
            spin();
          uint8_t *d = ring[me] + ((W + wrote) % RING) * PIECE;
          if (mode == 1)
            copy_nt(d, src + wrote * PIECE, PIECE);
          else
            memcpy(d, src + wrote * PIECE, PIECE);
          atomic_store_explicit(&mc->w, W + wrote + 1, memory_order_release);
        }
        while (atomic_load_explicit(&oc->w, memory_order_acquire) < R + c + 1)
          spin();
        memcpy(dst + c * PIECE, ring[!me] + ((R + c) % RING) * PIECE, PIECE);
        atomic_store_explicit(&mc->r, R + c + 1, memory_order_release);
      }
      W += pieces;
      R += pieces;
    }
    if (it >= rounds / 4) sum += now_us() - t;
    for (size_t i = 0; i < bytes; i += 4096)
      bad |= dst[i] != (uint8_t)(2 - me);
  }
  if (!me)
    printf("%s %zu B: line one-way %.0f ns, round %.1f us\n", argv[1], bytes, pp,
           sum / (rounds - rounds / 4));
  if (me) _exit(bad);
  int st = 0;
  waitpid(child, &st, 0);
  return bad || !WIFEXITED(st) || WEXITSTATUS(st);
}
