/*
 * One rank of the chaos soak (chaos_test.sh): joins with nexar_init_from_env,
 * then repeats rounds of collectives for CHAOS_SECONDS (default 60) seconds as
 * rank 0 measures them; every result is checked exactly. A round is:
 *   broadcast from rank 0 of (continue?, round number)  - everyone agrees to stop
 *   allreduce i64 sum, allreduce f32 max, broadcast i32 from a rotating root,
 *   allgather u32, reduce_scatter i32 sum, barrier
 * with a count that cycles through 1, 7, 1000, 65536 and 262144 elements.
 * Exit 0 when every result was exact; 1 on the first error or wrong element.
 */
#include <nexar/nexar.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const size_t sizes[] = {1, 7, 1000, 65536, 262144};
#define NSIZES (sizeof sizes / sizeof *sizes)
#define MAXC 262144

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint32_t g_rank;

static int fail_rc(const char *what, uint64_t round, int rc) {
  fprintf(stderr, "chaos_worker: rank %u round %llu: %s: %s (%s)\n", g_rank,
          (unsigned long long)round, what, nexar_strerror(rc), nexar_last_error());
  return 1;
}

static int wrong(const char *what, uint64_t round, size_t i, long long got, long long want) {
  fprintf(stderr, "chaos_worker: rank %u round %llu: %s element %zu = %lld, want %lld\n", g_rank,
          (unsigned long long)round, what, i, got, want);
  return 1;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  double seconds = 60;
  const char *e = getenv("CHAOS_SECONDS");
  if (e) {
    char *end;
    errno = 0;
    double v = strtod(e, &end);
    if (errno || *end || v < 0 || v > 3600) {
      fprintf(stderr, "chaos_worker: bad CHAOS_SECONDS '%s'\n", e);
      return 1;
    }
    seconds = v;
  }
  nexar_client *c;
  int rc = nexar_init_from_env(&c);
  if (rc) return fail_rc("init_from_env", 0, rc);
  uint32_t r = nexar_rank(c), n = nexar_world_size(c);
  g_rank = r;
  int64_t *a64 = malloc(MAXC * sizeof *a64);
  float *f32 = malloc(MAXC * sizeof *f32);
  int32_t *b32 = malloc(MAXC * sizeof *b32);
  uint32_t *gs = malloc(MAXC * sizeof *gs), *gr = malloc((size_t)MAXC * n * sizeof *gr);
  int32_t *rs = malloc((size_t)MAXC * n * sizeof *rs), *rr = malloc(MAXC * sizeof *rr);
  if (!a64 || !f32 || !b32 || !gs || !gr || !rs || !rr) return 1;
  double t0 = now_s(), last_report = t0;
  uint64_t round = 0, ops = 0, elems = 0;
  for (;; round++) {
    uint64_t ctl[2] = {0, 0};
    if (r == 0) ctl[0] = now_s() - t0 < seconds, ctl[1] = round;
    if ((rc = nexar_broadcast(c, ctl, 2, NEXAR_U64, 0))) return fail_rc("control", round, rc);
    if (ctl[1] != round)
      return wrong("control round", round, 1, (long long)ctl[1], (long long)round);
    if (!ctl[0]) break;
    size_t cnt = sizes[round % NSIZES];
    uint64_t it = round;
    double tr = now_s();

    for (size_t i = 0; i < cnt; i++)
      a64[i] = (int64_t)(r * 1000003ull + i + it);
    if ((rc = nexar_all_reduce(c, a64, cnt, NEXAR_I64, NEXAR_SUM)))
      return fail_rc("allreduce i64", round, rc);
    for (size_t i = 0; i < cnt; i++) {
      int64_t want = (int64_t)(n * (i + it) + 1000003ull * n * (n - 1) / 2);
      if (a64[i] != want) return wrong("allreduce i64", round, i, a64[i], want);
    }

    for (size_t i = 0; i < cnt; i++)
      f32[i] = (float)((i * 7 + r * 13 + it) % 4096);
    if ((rc = nexar_all_reduce(c, f32, cnt, NEXAR_F32, NEXAR_MAX)))
      return fail_rc("allreduce f32 max", round, rc);
    for (size_t i = 0; i < cnt; i++) {
      uint64_t m = 0;
      for (uint32_t j = 0; j < n; j++) {
        uint64_t v = (i * 7 + j * 13 + it) % 4096;
        if (v > m) m = v;
      }
      if (f32[i] != (float)m)
        return wrong("allreduce f32 max", round, i, (long long)f32[i], (long long)m);
    }

    uint32_t root = (uint32_t)(it % n);
    for (size_t i = 0; i < cnt; i++)
      b32[i] = r == root ? (int32_t)(i * 3 + it) : -7;
    if ((rc = nexar_broadcast(c, b32, cnt, NEXAR_I32, root)))
      return fail_rc("broadcast", round, rc);
    for (size_t i = 0; i < cnt; i++)
      if (b32[i] != (int32_t)(i * 3 + it))
        return wrong("broadcast", round, i, b32[i], (long long)(i * 3 + it));

    for (size_t i = 0; i < cnt; i++)
      gs[i] = (uint32_t)(r * 100000u + i + it);
    if ((rc = nexar_all_gather(c, gs, gr, cnt, NEXAR_U32))) return fail_rc("allgather", round, rc);
    for (uint32_t j = 0; j < n; j++)
      for (size_t i = 0; i < cnt; i++) {
        uint32_t want = (uint32_t)(j * 100000u + i + it);
        if (gr[(size_t)j * cnt + i] != want)
          return wrong("allgather", round, (size_t)j * cnt + i, gr[(size_t)j * cnt + i], want);
      }

    for (uint32_t j = 0; j < n; j++)
      for (size_t i = 0; i < cnt; i++)
        rs[(size_t)j * cnt + i] = (int32_t)(r + j * 2 + i % 11);
    if ((rc = nexar_reduce_scatter(c, rs, rr, cnt, NEXAR_I32, NEXAR_SUM)))
      return fail_rc("reduce_scatter", round, rc);
    for (size_t i = 0; i < cnt; i++) {
      int32_t want = (int32_t)(n * (n - 1) / 2 + n * (r * 2 + i % 11));
      if (rr[i] != want) return wrong("reduce_scatter", round, i, rr[i], want);
    }

    if ((rc = nexar_barrier(c))) return fail_rc("barrier", round, rc);
    ops += 7;
    if (now_s() - tr > 1.0)
      printf("chaos_worker: rank %u: slow round %llu (%zu elements): %.1f s\n", r,
             (unsigned long long)round, cnt, now_s() - tr);
    elems += cnt;
    if (r == 0 && now_s() - last_report >= 10) {
      last_report = now_s();
      printf("chaos_worker: rank 0: %llu rounds, %.0f s\n", (unsigned long long)round + 1,
             last_report - t0);
    }
  }
  nexar_peer_stats st = {0};
  if (n > 1) nexar_peer_stats_get(c, (r + 1) % n, &st);
  printf("chaos_worker: rank %u of %u ok: %llu rounds, %llu collectives exact in %.1f s "
         "(%llu packets lost to rank %u, rtt %.0f us)\n",
         r, n, (unsigned long long)round, (unsigned long long)ops, now_s() - t0,
         (unsigned long long)st.packets_lost, (r + 1) % n, st.smoothed_rtt_us);
  (void)elems;
  free(a64), free(f32), free(b32), free(gs), free(gr), free(rs), free(rr);
  nexar_client_del(c);
  return 0;
}
