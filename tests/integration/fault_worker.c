/*
 * One rank of a process fault test (fault_proc_test.sh, netns_fault_test.sh).
 *
 *   fault_worker OP [--count N (p2p: messages of 4N bytes)] [--start-delay-ms D] [--max-seconds S]
 * [--linger-ms L]
 *                   [--split]
 *
 * OP is allreduce, barrier, broadcast or p2p. The worker joins with
 * nexar_init_from_env, meets the others at a barrier and prints
 *
 *   rank R: ready pid P world N
 *
 * then, after D ms, runs OP in a loop (results checked exactly) until a call
 * fails or S seconds pass (exit 2). p2p is an all-pairs exchange per round
 * (recv_nb from every rank, send_nb to every rank, wait_all), so that every
 * rank needs every other in every round. broadcast rotates the root. With
 * --split the loop runs on a child communicator made by nexar_split with
 * reversed keys (child rank = N - 1 - R), to check failures are reported in
 * the child's numbering. On the first failure it prints
 *
 *   rank R: op OP #I failed with CODE after T ms at U; failed=[a,b] parent_failed=[..]: why
 *
 * (T: time in that call, U: CLOCK_REALTIME in ms, failed: nexar_failed_ranks of
 * the communicator used, in its numbering), then
 *
 *   rank R: settled failed=[..]
 *   rank R: later op OP -> CODE in T ms
 *
 * (the failed set once it is non-empty, polled for up to 3 s; the later call
 * is OP again, for p2p a receive from the first dead rank), stays L ms
 * (default 1500) so that the other survivors see the fault rather than this
 * rank's departure, and exits 0 if the first failure was NEXAR_ERR_PEER_LOST,
 * 3 otherwise. A wrong result exits 4.
 */
#include <nexar/nexar.h>

#include "codes.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORLD 64
#define P2P_TAG 4242u

static void usage(void) {
  fprintf(stderr, "usage: fault_worker allreduce|barrier|broadcast|p2p [--count N] "
                  "[--start-delay-ms D] [--max-seconds S] [--linger-ms L] [--split]\n");
  exit(64);
}

static void format_failed(nexar_client *c, char *out, size_t len) {
  uint32_t r[MAX_WORLD];
  size_t n = 0;
  if (!c || nexar_failed_ranks(c, r, MAX_WORLD, &n)) {
    snprintf(out, len, "?");
    return;
  }
  int pos = snprintf(out, len, "[");
  for (size_t i = 0; i < n && i < MAX_WORLD && pos > 0 && (size_t)pos < len; i++)
    pos += snprintf(out + pos, len - (size_t)pos, "%s%u", i ? "," : "", r[i]);
  if (pos > 0 && (size_t)pos < len) snprintf(out + pos, len - (size_t)pos, "]");
}

typedef struct state {
  nexar_client *c;
  const char *op;
  size_t count;
  uint32_t rank, world, world_rank;
  int32_t *buf;
  uint8_t *sbuf, *rbuf; /* p2p: one block per peer */
  size_t p2p_bytes;     /* p2p message size: 4096, or 4 x --count when given */
  int first_rc;         /* p2p: the first request that failed, when, and why */
  long long first_unix;
  double first_mono;
  char first_why[512];
} state;

/* One round; 0, a NEXAR_ERR_* code, or 1 for a wrong result. */
/* Records the op's first failure as it happens (a call refused at once
 * counts too: the loop below may then wait for a survivor's message). */
static int note_first(state *s, int rc) {
  if (!s->first_rc) {
    s->first_rc = rc;
    s->first_unix = unix_ms();
    s->first_mono = mono_ms();
    snprintf(s->first_why, sizeof s->first_why, "%s", nexar_last_error());
  }
  return rc;
}

static int round_once(state *s, uint64_t it) {
  uint32_t r = s->rank, n = s->world;
  if (strcmp(s->op, "barrier") == 0) return nexar_barrier(s->c);
  if (strcmp(s->op, "allreduce") == 0) {
    for (size_t i = 0; i < s->count; i++)
      s->buf[i] = (int32_t)(r + i % 7 + it % 5);
    int rc = nexar_all_reduce(s->c, s->buf, s->count, NEXAR_I32, NEXAR_SUM);
    if (rc) return rc;
    for (size_t i = 0; i < s->count; i++) {
      int32_t want = (int32_t)(n * (i % 7 + it % 5) + n * (n - 1) / 2);
      if (s->buf[i] != want) {
        printf("rank %u: allreduce #%llu element %zu = %d, want %d\n", s->world_rank,
               (unsigned long long)it, i, s->buf[i], want);
        return 1;
      }
    }
    return 0;
  }
  if (strcmp(s->op, "broadcast") == 0) {
    uint32_t root = (uint32_t)(it % n);
    for (size_t i = 0; i < s->count; i++)
      s->buf[i] = r == root ? (int32_t)(root * 1000 + i + it) : -1;
    int rc = nexar_broadcast(s->c, s->buf, s->count, NEXAR_I32, root);
    if (rc) return rc;
    for (size_t i = 0; i < s->count; i++)
      if (s->buf[i] != (int32_t)(root * 1000 + i + it)) {
        printf("rank %u: broadcast #%llu element %zu wrong\n", s->world_rank,
               (unsigned long long)it, i);
        return 1;
      }
    return 0;
  }
  /* p2p: all pairs */
  nexar_request *rq[2 * MAX_WORLD] = {0};
  int first = 0;
  for (uint32_t j = 0; j < n; j++) {
    if (j == r) continue;
    int rc =
        nexar_recv_nb(s->c, s->rbuf + (size_t)j * s->p2p_bytes, s->p2p_bytes, j, P2P_TAG, &rq[j]);
    if (rc && !first) first = note_first(s, rc);
  }
  for (uint32_t j = 0; j < n; j++) {
    if (j == r) continue;
    uint8_t *b = s->sbuf + (size_t)j * s->p2p_bytes;
    for (size_t i = 0; i < s->p2p_bytes; i++)
      b[i] = (uint8_t)(r * 31 + j * 7 + i + it);
    int rc = nexar_send_nb(s->c, b, s->p2p_bytes, j, P2P_TAG, &rq[MAX_WORLD + j]);
    if (rc && !first) first = note_first(s, rc);
  }
  /* Finish each request as it completes, noting the first failure when it
   * happens: wait_all would also wait for a survivor that is one round behind
   * and never sends this round's message. */
  int rc = 0, left = 1;
  while (left) {
    left = 0;
    for (size_t i = 0; i < 2 * MAX_WORLD; i++) {
      if (!rq[i]) continue;
      int done = 0;
      if (nexar_test(rq[i], &done) || done) {
        int w = nexar_wait(rq[i]);
        rq[i] = NULL;
        if (w && !rc) rc = first ? w : note_first(s, w);
        /* the loss revokes the communicator, so the exchange with a live
         * rank may end first, with ABORTED: the round failed because of the
         * lost peer, which a later request of the same round reports */
        if (w == NEXAR_ERR_PEER_LOST && s->first_rc == NEXAR_ERR_ABORTED) {
          s->first_rc = rc = w;
          snprintf(s->first_why, sizeof s->first_why, "%s", nexar_last_error());
        }
      } else {
        left = 1;
      }
    }
    if (left) {
      struct timespec ts = {0, 500000L};
      nanosleep(&ts, NULL);
    }
  }
  if (first) return first;
  if (rc) return rc;
  for (uint32_t j = 0; j < n; j++) {
    if (j == r) continue;
    const uint8_t *b = s->rbuf + (size_t)j * s->p2p_bytes;
    for (size_t i = 0; i < s->p2p_bytes; i++)
      if (b[i] != (uint8_t)(j * 31 + r * 7 + i + it)) {
        printf("rank %u: p2p #%llu byte %zu from rank %u wrong\n", s->world_rank,
               (unsigned long long)it, i, j);
        return 1;
      }
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) usage();
  setvbuf(stdout, NULL, _IOLBF, 0);
  state s = {0};
  s.op = argv[1];
  if (strcmp(s.op, "allreduce") && strcmp(s.op, "barrier") && strcmp(s.op, "broadcast") &&
      strcmp(s.op, "p2p"))
    usage();
  unsigned long count = 65536, delay_ms = 0, max_s = 30, linger_ms = 1500;
  int split = 0, count_given = 0;
  for (int i = 2; i < argc; i++) {
    unsigned long *dst = NULL;
    if (strcmp(argv[i], "--split") == 0) {
      split = 1;
      continue;
    }
    if (strcmp(argv[i], "--count") == 0) dst = &count, count_given = 1;
    if (strcmp(argv[i], "--start-delay-ms") == 0) dst = &delay_ms;
    if (strcmp(argv[i], "--max-seconds") == 0) dst = &max_s;
    if (strcmp(argv[i], "--linger-ms") == 0) dst = &linger_ms;
    if (!dst || i + 1 >= argc || parse_u(argv[i + 1], 1ul << 28, dst)) usage();
    i++;
  }
  s.count = count;

  nexar_client *world;
  int rc = nexar_init_from_env(&world);
  if (rc) {
    fprintf(stderr, "fault_worker: init_from_env: %s (%s)\n", nexar_strerror(rc),
            nexar_last_error());
    return 1;
  }
  s.world_rank = nexar_rank(world);
  s.c = world;
  if (split) {
    uint32_t n = nexar_world_size(world);
    rc = nexar_split(world, 0, n - 1 - s.world_rank, &s.c);
    if (rc) {
      fprintf(stderr, "fault_worker: split: %s (%s)\n", nexar_strerror(rc), nexar_last_error());
      return 1;
    }
  }
  s.rank = nexar_rank(s.c);
  s.world = nexar_world_size(s.c);
  if (s.world > MAX_WORLD) return 1;
  s.buf = malloc((s.count ? s.count : 1) * sizeof *s.buf);
  s.p2p_bytes = count_given ? s.count * 4 : 4096;
  s.sbuf = malloc((size_t)s.world * s.p2p_bytes);
  s.rbuf = malloc((size_t)s.world * s.p2p_bytes);
  if (!s.buf || !s.sbuf || !s.rbuf) return 1;
  if ((rc = nexar_barrier(s.c))) {
    fprintf(stderr, "fault_worker: first barrier: %s (%s)\n", nexar_strerror(rc),
            nexar_last_error());
    return 1;
  }
  printf("rank %u: ready pid %ld world %u comm_rank %u\n", s.world_rank, (long)getpid(), s.world,
         s.rank);
  if (delay_ms) {
    struct timespec ts = {(time_t)(delay_ms / 1000), (long)(delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  double deadline = mono_ms() + (double)max_s * 1000.0;
  int exit_code = 2;
  for (uint64_t it = 0; mono_ms() < deadline; it++) {
    double t0 = mono_ms();
    s.first_rc = 0;
    rc = round_once(&s, it);
    if (rc == 0) continue;
    if (rc == 1) {
      exit_code = 4;
      break;
    }
    double t = mono_ms() - t0;
    long long u = unix_ms();
    char why[512], failed[256], pfailed[256];
    snprintf(why, sizeof why, "%s", nexar_last_error());
    if (s.first_rc) { /* p2p: when the first request failed */
      t = s.first_mono - t0;
      u = s.first_unix;
      snprintf(why, sizeof why, "%s", s.first_why);
    }
    format_failed(s.c, failed, sizeof failed);
    format_failed(split ? world : NULL, pfailed, sizeof pfailed);
    printf("rank %u: op %s #%llu failed with %s after %.0f ms at %lld; failed=%s "
           "parent_failed=%s: %s\n",
           s.world_rank, s.op, (unsigned long long)it, code_name(rc), t, u, failed,
           split ? pfailed : "-", why);
    /* The failed set once the fault is detected here (the first failure may
     * come from a survivor that left first), then stay a while, so that the
     * others detect the fault itself rather than this rank's departure. */
    size_t nf = 0;
    for (int i = 0; i < 300 && !nexar_failed_ranks(s.c, NULL, 0, &nf) && nf == 0; i++) {
      struct timespec ts = {0, 10000000L};
      nanosleep(&ts, NULL);
    }
    format_failed(s.c, failed, sizeof failed);
    printf("rank %u: settled failed=%s\n", s.world_rank, failed);
    /* A later call that needs the dead rank: the op again, or for p2p a
     * receive from the first dead rank (a full exchange could also wait for a
     * survivor that is one round behind). */
    t0 = mono_ms();
    int rc2;
    uint32_t dead = 0;
    if (strcmp(s.op, "p2p") == 0 && nf > 0 && !nexar_failed_ranks(s.c, &dead, 1, &nf))
      rc2 = nexar_recv(s.c, s.rbuf, s.p2p_bytes, dead, P2P_TAG);
    else
      rc2 = round_once(&s, it + 1);
    printf("rank %u: later op %s -> %s in %.0f ms\n", s.world_rank, s.op, code_name(rc2),
           mono_ms() - t0);
    struct timespec linger = {(time_t)(linger_ms / 1000), (long)(linger_ms % 1000) * 1000000L};
    nanosleep(&linger, NULL);
    exit_code = rc == NEXAR_ERR_PEER_LOST ? 0 : 3;
    break;
  }
  if (exit_code == 2) printf("rank %u: no failure within %lu s\n", s.world_rank, max_s);
  double t0 = mono_ms();
  if (split) nexar_client_del(s.c);
  nexar_client_del(world);
  printf("rank %u: client_del took %.0f ms\n", s.world_rank, mono_ms() - t0);
  free(s.buf);
  free(s.sbuf);
  free(s.rbuf);
  return exit_code;
}
