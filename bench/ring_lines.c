/* Why a ring's small records should keep to a few cache lines (core/ring.h,
 * the acks that let a producer start over after every small record): two
 * threads, one per CPU, pass records of LEN bytes back and forth, each way
 * through its own ring, as the shared-memory link does (the record's bytes,
 * then a tail word on its own line; the reader polls the tail, pausing
 * between looks, copies the record out and stores its head). The records walk through WINDOW bytes
 * and start over at the first; the windows given are tried in turn, round
 * after round, in one process (the machine's state changes between runs).
 * A window written iN is N bytes whose records announce themselves in
 * place (their first word, stored last: the reader polls it and no tail),
 * as the library's do since the in-place records (core/ring.h).
 *
 *   ring_lines LEN ROUNDS WINDOW...
 *
 * Prints, per window, the median one-way time of a record; exits 1 if a
 * record arrived wrong. Measured on the 2-vCPU VM of issue 15, 80-byte
 * records: windows of 256-384 bytes 0.035 us, 1-8 KiB 0.07-0.10 us. One
 * record per window, in the VM's slow state (`ring_lines 48 20 64 i64`,
 * `ring_lines 96 20 128 i128`): 48 bytes by tail 0.203-0.212 us, in place
 * 0.184-0.196; 96 bytes by tail 0.223-0.225, in place 0.215-0.218; in its
 * fast state all 0.037-0.040. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PASSES 20000
#define MAXW (64u << 10)
#define MAXROUNDS 1000
#define MAXWIN 16

typedef struct {
  _Alignas(64) _Atomic uint64_t tail;
  char pad0[56];
  _Atomic uint64_t head;
  char pad1[56];
  _Alignas(64) uint8_t data[MAXW + 1024];
} ring;

static ring *rings; /* [0]: main thread to peer, [1]: back */
static uint64_t len, window;
static int inplace;    /* records announce themselves by their first word */
static _Atomic int go; /* 1: a round, -1: stop; the peer sets 0 when done */
static int bad;

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  sched_setaffinity(0, sizeof s, &s);
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static uint64_t advance(uint64_t pos) {
  uint64_t n = (len + 7) & ~7ull;
  pos += n;
  if (pos % window + n > window) pos += window - pos % window;
  return pos;
}

static void put(ring *r, uint64_t *pos, uint64_t v) {
  uint8_t *d = r->data + *pos % window;
  memset(d + 8, (int)(v & 0xff), len - 8);
  *pos = advance(*pos);
  if (inplace) {
    atomic_store_explicit((_Atomic uint64_t *)(void *)d, v, memory_order_release);
  } else {
    memcpy(d, &v, 8);
    atomic_store_explicit(&r->tail, *pos, memory_order_release);
  }
}

static void take(ring *r, uint64_t *pos, uint64_t v) {
  /* pausing between looks as the library's waits do (without, every
   * window took as long here) */
  if (inplace)
    while (atomic_load_explicit((_Atomic uint64_t *)(void *)(r->data + *pos % window),
                                memory_order_acquire) != v)
      cpu_relax();
  else
    while (atomic_load_explicit(&r->tail, memory_order_acquire) == *pos)
      cpu_relax();
  uint8_t buf[4096];
  memcpy(buf, r->data + *pos % window, len);
  if (buf[8] != (uint8_t)v || buf[len - 1] != (uint8_t)v) bad = 1;
  *pos = advance(*pos);
  atomic_store_explicit(&r->head, *pos, memory_order_release);
}

static void *peer(void *arg) {
  (void)arg;
  pin(1);
  for (;;) {
    int g;
    while ((g = atomic_load(&go)) == 0)
      ;
    if (g < 0) return NULL;
    uint64_t in = 0, out = 0;
    for (uint64_t i = 1; i <= PASSES; i++) {
      take(&rings[0], &in, i);
      put(&rings[1], &out, i);
    }
    atomic_store(&go, 0);
  }
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: ring_lines LEN ROUNDS WINDOW...\n");
    return 2;
  }
  len = strtoull(argv[1], NULL, 10);
  int rounds = atoi(argv[2]), nw = argc - 3;
  if (len < 16 || len > 4096 || rounds < 1 || rounds > MAXROUNDS || nw > MAXWIN) return 2;
  static double t[MAXWIN][MAXROUNDS];
  rings = aligned_alloc(4096, 2 * sizeof(ring));
  if (!rings) return 2;
  pin(0);
  pthread_t th;
  pthread_create(&th, NULL, peer, NULL);
  for (int r = 0; r < rounds; r++)
    for (int w = 0; w < nw; w++) {
      inplace = argv[3 + w][0] == 'i';
      window = strtoull(argv[3 + w] + inplace, NULL, 10);
      if (window < ((len + 7) & ~7ull) || window > MAXW) return 2;
      memset(rings, 0, 2 * sizeof(ring));
      atomic_store(&go, 1);
      uint64_t in = 0, out = 0;
      double t0 = now_ns();
      for (uint64_t i = 1; i <= PASSES; i++) {
        put(&rings[0], &out, i);
        take(&rings[1], &in, i);
      }
      t[w][r] = (now_ns() - t0) / PASSES / 2 / 1000;
      while (atomic_load(&go))
        ;
    }
  atomic_store(&go, -1);
  pthread_join(th, NULL);
  for (int w = 0; w < nw; w++) {
    qsort(t[w], (size_t)rounds, sizeof t[w][0], cmp);
    printf("len %llu window %s: one-way %.3f us (median of %d)\n", (unsigned long long)len,
           argv[3 + w], t[w][rounds / 2], rounds);
  }
  free(rings);
  return bad;
}
