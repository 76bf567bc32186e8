/* Unexpected-data budget under a flood (one process per rank, nexar-run -n 3).
 * Rank 1 sends FLOOD_N messages of FLOOD_LEN bytes with a tag rank 0 does not
 * receive yet (from a second thread, since its sends must block). Meanwhile
 * ranks 0, 1 and 2 run allreduces: runtime traffic progresses while the
 * budget is full. Then rank 0 checks its peak RSS (VmHWM) against
 * NEXAR_UNEXPECTED_BUDGET_BYTES + 32 MiB and receives every message in order.
 * Exit 0 on success. */
#include <nexar/nexar.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TAG 7

/* ASan/TSan allocators keep freed memory (quarantine) and add redzones:
 * RSS says nothing about the budget there, so only order and progress are
 * checked. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RSS_CHECKED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RSS_CHECKED 0
#endif
#endif
#ifndef RSS_CHECKED
#define RSS_CHECKED 1
#endif
#define SLACK_MIB 32

static size_t flood_n = 10000, flood_len = 64 * 1024;
static nexar_client *cl;
static int flood_rc;

static long rss_kib(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  size_t fl = strlen(field);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, field, fl)) v = strtol(line + fl + 1, NULL, 10);
  if (f) fclose(f);
  return v;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fill(uint8_t *b, size_t len, uint32_t i) {
  for (size_t k = 0; k < len; k += 4096)
    b[k] = (uint8_t)(i * 31 + k / 4096);
  memcpy(b, &i, sizeof i);
}

static void *flood(void *arg) {
  (void)arg;
  uint8_t *b = malloc(flood_len);
  double t0 = now_s();
  for (uint32_t i = 0; i < flood_n; i++) {
    fill(b, flood_len, i);
    int rc = nexar_send(cl, b, flood_len, 0, TAG);
    if (rc) {
      fprintf(stderr, "rank 1: send %u: %s (%s)\n", i, nexar_strerror(rc), nexar_last_error());
      flood_rc = rc;
      break;
    }
  }
  fprintf(stderr, "rank 1: flood of %zu x %zu B sent in %.2f s\n", flood_n, flood_len,
          now_s() - t0);
  free(b);
  return NULL;
}

static int allreduces(int n, uint32_t world) {
  for (int k = 0; k < n; k++) {
    double v[4] = {1, 2, 3, (double)k};
    int rc = nexar_all_reduce(cl, v, 4, NEXAR_F64, NEXAR_SUM);
    if (rc || v[0] != world || v[3] != (double)k * world) {
      fprintf(stderr, "rank %u: allreduce %d under flood: %s (%s)\n", nexar_rank(cl), k,
              nexar_strerror(rc), rc ? nexar_last_error() : "wrong sum");
      return 1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  (void)argc, (void)argv;
  if (getenv("FLOOD_N")) flood_n = strtoul(getenv("FLOOD_N"), NULL, 10);
  if (getenv("FLOOD_LEN")) flood_len = strtoul(getenv("FLOOD_LEN"), NULL, 10);
  const char *bv = getenv("NEXAR_UNEXPECTED_BUDGET_BYTES");
  long budget_mib = bv ? strtol(bv, NULL, 10) >> 20 : 256;
  if (bv && strchr(bv, 'M')) budget_mib = strtol(bv, NULL, 10);
  int rc = nexar_init_from_env(&cl);
  if (rc) {
    fprintf(stderr, "init: %s (%s)\n", nexar_strerror(rc), nexar_last_error());
    return 1;
  }
  uint32_t r = nexar_rank(cl), world = nexar_world_size(cl);
  int fail = 0;
  if (world != 3) {
    fprintf(stderr, "flood_worker needs 3 ranks\n");
    return 2;
  }
  pthread_t th;
  if (nexar_barrier(cl)) return 1;
  long rss0 = rss_kib("VmRSS:");
  if (r == 1) pthread_create(&th, NULL, flood, NULL);
  /* let the flood fill the budget: rank 0 watches its RSS settle */
  if (r == 0) {
    long last = -1, now = 0;
    int k;
    for (k = 0; k < 40; k++) { /* up to 20 s */
      usleep(500000);
      now = rss_kib("VmRSS:");
      if (k >= 1 && now - last < 512) break; /* grew < 512 KiB in 0.5 s: the sender waits */
      last = now;
    }
    fprintf(stderr, "rank 0: RSS %ld KiB after %.1f s of flood\n", now, (k + 1) / 2.0);
  }
  /* runtime traffic while rank 0 holds the budget */
  if ((rc = nexar_barrier(cl))) {
    fprintf(stderr, "rank %u: barrier under flood: %s (%s)\n", r, nexar_strerror(rc),
            nexar_last_error());
    fail = 1;
  }
  double t0 = now_s();
  if (!fail) fail = allreduces(50, world);
  if (r == 0) {
    long hwm = rss_kib("VmHWM:");
    long bound = (budget_mib + SLACK_MIB) * 1024;
    fprintf(stderr,
            "rank 0: 50 allreduces under the flood in %.2f s; RSS before %ld KiB, peak %ld KiB, "
            "bound (budget %ld MiB + %d MiB) %ld KiB\n",
            now_s() - t0, rss0, hwm, budget_mib, SLACK_MIB, bound);
    if (!RSS_CHECKED) fprintf(stderr, "rank 0: sanitizer build: RSS not checked\n");
    if (RSS_CHECKED && hwm > bound) {
      fprintf(stderr, "FAIL: rank 0 peak RSS %ld KiB over budget + %d MiB\n", hwm, SLACK_MIB);
      fail = 1;
    }
    uint8_t *b = malloc(flood_len);
    for (uint32_t i = 0; i < flood_n && !fail; i++) {
      rc = nexar_recv(cl, b, flood_len, 1, TAG);
      uint32_t got;
      memcpy(&got, b, sizeof got);
      if (rc || got != i || b[4096 % flood_len] != (uint8_t)(i * 31 + (flood_len > 4096))) {
        fprintf(stderr, "FAIL: recv %u: rc %s, got message %u\n", i, nexar_strerror(rc), got);
        fail = 1;
      }
    }
    free(b);
    if (!fail) fprintf(stderr, "rank 0: all %zu messages arrived in order\n", flood_n);
  }
  if (r == 1) {
    pthread_join(th, NULL);
    if (flood_rc) fail = 1;
  }
  if (nexar_barrier(cl)) fail = 1;
  nexar_client_del(cl);
  return fail;
}
