/*
 * Point-to-point integration test, written against the public API only.
 *
 *   p2p_test N      ranks as threads: nexar_bootstrap_local + one pthread per rank
 *   (process mode)  when NEXAR_SEED_ADDR is set (nexar-run), this process is one rank
 *                   joined with nexar_init_from_env; N, if given, must equal the world.
 *
 * Every rank runs the same sequence of checks; between checks the ranks meet at a
 * barrier built from point-to-point messages only. The first failed check prints
 * a line naming the rank, the check and nexar_last_error(), aborts the communicator
 * (so the other ranks fail fast instead of waiting for a timeout) and the program
 * exits 1.
 */
#include <nexar/nexar.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORLD 64
#define OP_TIMEOUT_MS 5000

/* Tags used by the checks; every check has its own range. */
enum {
  T_RING = 100,
  T_SELF = 200,
  T_ZERO = 300,
  T_SIZES = 400,
  T_ORDER = 500,
  T_TAG_A = 600,
  T_TAG_B = 601,
  T_SRC = 650,
  T_IOV = 700,
  T_MISMATCH = 800,
  T_PROBE = 900,
  T_NB = 1000,
  T_TEST = 1100,
  T_WAITALL = 1200,
  T_POSTED = 1300,
  T_EXCHANGE = 1400,
  T_STATS = 1500,
  T_THREADS = 1600, /* + thread index */
  T_THREADS_SHARED = 1700,
  T_MAXTAG = 0xFFFFFFF0u,
  T_SYNC_UP = 0xFFFFFFFEu,
  T_SYNC_DOWN = 0xFFFFFFFDu,
};

static int g_proc_mode;
static atomic_int g_failed; /* every failure */
static atomic_int g_hard;   /* failures that aborted the communicator */
static nexar_client *g_clients[MAX_WORLD];
static uint32_t g_nclients;

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Records a failure once, with context, and aborts every communicator this process
 * owns so that the other ranks stop waiting. Returns 1 for `return fail(...)`. */
static int fail_at(nexar_client *c, const char *check, int line, const char *fmt, ...) {
  int first = atomic_fetch_add(&g_hard, 1) == 0;
  atomic_fetch_add(&g_failed, 1);
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "FAIL%s rank %u [%s] p2p_test.c:%d: %s\n    last_error: %s\n",
          first ? "" : " (after an earlier failure)", c ? nexar_rank(c) : 0u, check, line, msg,
          nexar_last_error());
  if (g_proc_mode) {
    if (c) nexar_abort(c);
  } else {
    for (uint32_t i = 0; i < g_nclients; i++)
      nexar_abort(g_clients[i]);
  }
  return 1;
}

/* A contract violation that does not disturb the following steps: reported (the program
 * will fail) but the checks go on, so that one run shows every such violation. */
static void soft_fail_at(nexar_client *c, const char *check, int line, const char *fmt, ...) {
  atomic_fetch_add(&g_failed, 1);
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "FAIL rank %u [%s] p2p_test.c:%d: %s (continuing)\n", c ? nexar_rank(c) : 0u,
          check, line, msg);
}

#define FAIL(...) return fail_at(c, check, __LINE__, __VA_ARGS__)
#define CHECK_SOFT(cond, ...)                                                                      \
  do {                                                                                             \
    if (!(cond)) soft_fail_at(c, check, __LINE__, __VA_ARGS__);                                    \
  } while (0)
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) FAIL(__VA_ARGS__);                                                                \
  } while (0)
/* A call that must return NEXAR_OK. */
#define CHECK_OK(call)                                                                             \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != NEXAR_OK) FAIL("%s returned %d (%s)", #call, rc_, nexar_strerror(rc_));             \
  } while (0)
/* A call that must return the given error code. */
#define CHECK_RC(call, want)                                                                       \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != (want))                                                                             \
      FAIL("%s returned %d (%s), expected %s", #call, rc_, nexar_strerror(rc_), #want);            \
  } while (0)

/* Per-rank context. */
typedef struct rank_ctx {
  nexar_client *c;
  uint32_t rank, n, next, prev, partner;
} rank_ctx;

/* Byte i of the pattern sent by rank src for a given variant. */
static inline uint8_t pat(uint32_t variant, uint32_t src, size_t i) {
  return (uint8_t)(i * 131u + (i >> 9) * 7u + src * 17u + variant * 29u + 1u);
}

static void fill(uint8_t *b, size_t len, uint32_t variant, uint32_t src) {
  for (size_t i = 0; i < len; i++)
    b[i] = pat(variant, src, i);
}

/* Index of the first byte that differs from the pattern, or len. */
static size_t first_bad(const uint8_t *b, size_t len, uint32_t variant, uint32_t src) {
  for (size_t i = 0; i < len; i++)
    if (b[i] != pat(variant, src, i)) return i;
  return len;
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "FAIL: malloc(%zu) failed\n", n);
    exit(1);
  }
  return p;
}

/* A barrier from point-to-point messages only: everyone reports to rank 0, which
 * then releases everyone. */
static int p2p_sync(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "p2p_sync";
  uint8_t b = 0;
  if (x->rank == 0) {
    for (uint32_t r = 1; r < x->n; r++)
      CHECK_OK(nexar_recv(c, &b, 1, r, T_SYNC_UP));
    for (uint32_t r = 1; r < x->n; r++)
      CHECK_OK(nexar_send(c, &b, 1, r, T_SYNC_DOWN));
  } else {
    CHECK_OK(nexar_send(c, &b, 1, 0, T_SYNC_UP));
    CHECK_OK(nexar_recv(c, &b, 1, 0, T_SYNC_DOWN));
  }
  return 0;
}

/* ---------------------------------------------------------------- checks */

/* Each rank sends its rank-dependent value to next and receives from prev. */
static int t_ring(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "ring";
  uint64_t out = 1000u * x->rank + 7u, in = 0;
  nexar_request *req = NULL;
  CHECK_OK(nexar_send_nb(c, &out, sizeof out, x->next, T_RING, &req));
  CHECK(req != NULL, "send_nb succeeded but left *req NULL");
  CHECK_OK(nexar_recv(c, &in, sizeof in, x->prev, T_RING));
  CHECK_OK(nexar_wait(req));
  CHECK(in == 1000u * x->prev + 7u, "got %llu from rank %u, expected %llu", (unsigned long long)in,
        x->prev, (unsigned long long)(1000u * x->prev + 7u));
  /* A second lap in the other direction with blocking sends of a small message. */
  out = 5000u + x->rank;
  CHECK_OK(nexar_send(c, &out, sizeof out, x->prev, T_RING + 1));
  CHECK_OK(nexar_recv(c, &in, sizeof in, x->next, T_RING + 1));
  CHECK(in == 5000u + x->next, "reverse lap: got %llu from rank %u", (unsigned long long)in,
        x->next);
  return 0;
}

/* dest == own rank: blocking for a small message, _nb for a large one. */
static int t_self(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "self-send";
  char out[64], in[64];
  snprintf(out, sizeof out, "hello from rank %u to itself", x->rank);
  memset(in, 0, sizeof in);
  CHECK_OK(nexar_send(c, out, sizeof out, x->rank, T_SELF));
  CHECK_OK(nexar_recv(c, in, sizeof in, x->rank, T_SELF));
  CHECK(memcmp(in, out, sizeof out) == 0, "self message corrupted: \"%.64s\"", in);

  size_t big = (size_t)1 << 20;
  uint8_t *sb = xmalloc(big), *rb = xmalloc(big);
  fill(sb, big, 3, x->rank);
  memset(rb, 0, big);
  nexar_request *req = NULL;
  int rc = nexar_send_nb(c, sb, big, x->rank, T_SELF + 1, &req);
  int rc2 = rc ? rc : nexar_recv(c, rb, big, x->rank, T_SELF + 1);
  int rc3 = rc ? rc : nexar_wait(req);
  size_t bad = first_bad(rb, big, 3, x->rank);
  free(sb);
  free(rb);
  CHECK(rc == 0 && rc2 == 0 && rc3 == 0, "1 MiB self-send: send_nb %d, recv %d, wait %d", rc, rc2,
        rc3);
  CHECK(bad == big, "1 MiB self-send: byte %zu differs", bad);
  return 0;
}

static int t_zero(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "zero-byte";
  uint8_t dummy_out = 0xAB, dummy_in = 0xCD;
  CHECK_OK(nexar_send(c, &dummy_out, 0, x->next, T_ZERO));
  CHECK_OK(nexar_send(c, &dummy_out, 0, x->next, T_ZERO));
  size_t len = 99;
  CHECK_OK(nexar_probe(c, x->prev, T_ZERO, &len));
  CHECK(len == 0, "probe of a 0-byte message reported %zu bytes", len);
  CHECK_OK(nexar_recv(c, &dummy_in, 0, x->prev, T_ZERO));
  CHECK(dummy_in == 0xCD, "a 0-byte receive wrote into the buffer");
  /* A 0-byte message must not match a 1-byte receive. */
  CHECK_RC(nexar_recv(c, &dummy_in, 1, x->prev, T_ZERO), NEXAR_ERR_SIZE_MISMATCH);
  CHECK_OK(nexar_recv(c, &dummy_in, 0, x->prev, T_ZERO));
  /* A 0-byte message to self through _nb. */
  nexar_request *s = NULL, *r = NULL;
  CHECK_OK(nexar_recv_nb(c, &dummy_in, 0, x->rank, T_ZERO + 1, &r));
  CHECK_OK(nexar_send_nb(c, &dummy_out, 0, x->rank, T_ZERO + 1, &s));
  CHECK_OK(nexar_wait(s));
  CHECK_OK(nexar_wait(r));
  return 0;
}

static int t_sizes(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "sizes";
  static const size_t sizes[] = {1, 4095, 65536, (size_t)1 << 20, (size_t)16 << 20};
  for (uint32_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t len = sizes[k];
    uint8_t *sb = xmalloc(len), *rb = xmalloc(len);
    fill(sb, len, 10 + k, x->rank);
    memset(rb, 0, len);
    nexar_request *req = NULL;
    uint64_t t0 = now_ms();
    int rs = nexar_send_nb(c, sb, len, x->next, T_SIZES + k, &req);
    int rr = rs ? 0 : nexar_recv(c, rb, len, x->prev, T_SIZES + k);
    int rw = rs ? 0 : nexar_wait(req);
    uint64_t dt = now_ms() - t0;
    size_t bad = first_bad(rb, len, 10 + k, x->prev);
    free(sb);
    free(rb);
    CHECK(rs == 0 && rr == 0 && rw == 0, "%zu bytes: send_nb %d (%s), recv %d (%s), wait %d (%s)",
          len, rs, nexar_strerror(rs), rr, nexar_strerror(rr), rw, nexar_strerror(rw));
    CHECK(bad == len, "%zu bytes from rank %u: byte %zu is wrong", len, x->prev, bad);
    if (x->rank == 0 && len >= ((size_t)16 << 20))
      printf("  rank 0: %zu bytes ring step in %llu ms\n", len, (unsigned long long)dt);
  }
  return 0;
}

/* 200 messages with one (src, tag), of varying sizes, arrive in the order sent. */
static int t_order(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "non-overtaking";
  enum { N = 200 };
  nexar_request *reqs[N];
  uint8_t *bufs[N];
  for (uint32_t i = 0; i < N; i++) {
    size_t len = 8 + (size_t)(i % 5) * 3000;
    bufs[i] = xmalloc(len);
    memset(bufs[i], (int)(i & 0xFF), len);
    memcpy(bufs[i], &i, sizeof i);
    reqs[i] = NULL;
    int rc = nexar_send_nb(c, bufs[i], len, x->next, T_ORDER, &reqs[i]);
    if (rc) {
      nexar_wait_all(reqs, i);
      for (uint32_t j = 0; j <= i; j++)
        free(bufs[j]);
      FAIL("send_nb #%u: %d (%s)", i, rc, nexar_strerror(rc));
    }
  }
  uint8_t *in = xmalloc(8 + 4 * 3000);
  int result = 0;
  for (uint32_t i = 0; i < N && !result; i++) {
    size_t len = 8 + (size_t)(i % 5) * 3000;
    int rc = nexar_recv(c, in, len, x->prev, T_ORDER);
    uint32_t seq = 0;
    memcpy(&seq, in, sizeof seq);
    if (rc)
      result = fail_at(c, check, __LINE__, "recv #%u (%zu bytes): %d (%s)", i, len, rc,
                       nexar_strerror(rc));
    else if (seq != i)
      result = fail_at(c, check, __LINE__, "message #%u carries sequence %u: overtaken", i, seq);
    else if (in[len - 1] != (uint8_t)(i & 0xFF))
      result = fail_at(c, check, __LINE__, "message #%u: last byte wrong", i);
  }
  int rc = nexar_wait_all(reqs, N);
  for (uint32_t i = 0; i < N; i++)
    free(bufs[i]);
  free(in);
  if (result) return result;
  CHECK(rc == 0, "wait_all on the 200 sends: %d (%s)", rc, nexar_strerror(rc));
  return 0;
}

/* Tag A then tag B sent; B received first. And sources don't block each other. */
static int t_tags(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "tags-independent";
  uint32_t a = 0xAAAA0000u + x->rank, b = 0xBBBB0000u + x->rank, in = 0;
  CHECK_OK(nexar_send(c, &a, sizeof a, x->next, T_TAG_A));
  CHECK_OK(nexar_send(c, &b, sizeof b, x->next, T_TAG_B));
  CHECK_OK(nexar_recv(c, &in, sizeof in, x->prev, T_TAG_B));
  CHECK(in == 0xBBBB0000u + x->prev, "tag B receive got 0x%x", in);
  CHECK_OK(nexar_recv(c, &in, sizeof in, x->prev, T_TAG_A));
  CHECK(in == 0xAAAA0000u + x->prev, "tag A receive got 0x%x", in);

  /* Highest tag values belong to the application too. */
  CHECK_OK(nexar_send(c, &a, sizeof a, x->next, T_MAXTAG));
  CHECK_OK(nexar_recv(c, &in, sizeof in, x->prev, T_MAXTAG));
  CHECK(in == 0xAAAA0000u + x->prev, "tag 0x%x receive got 0x%x", (unsigned)T_MAXTAG, in);

  /* Everyone sends to prev first, then next; receive from next before prev. */
  if (x->n >= 3) {
    uint32_t v = x->rank;
    CHECK_OK(nexar_send(c, &v, sizeof v, x->prev, T_SRC));
    CHECK_OK(nexar_send(c, &v, sizeof v, x->next, T_SRC));
    CHECK_OK(nexar_recv(c, &in, sizeof in, x->next, T_SRC));
    CHECK(in == x->next, "from rank %u got %u", x->next, in);
    CHECK_OK(nexar_recv(c, &in, sizeof in, x->prev, T_SRC));
    CHECK(in == x->prev, "from rank %u got %u", x->prev, in);
  }
  return 0;
}

/* Sent from 3 regions, received into 2 regions of another layout. */
static int t_iov(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "iov";
  enum { L0 = 10, L1 = 1000, L2 = 5000, TOTAL = L0 + L1 + L2, R0 = 3001 };
  uint8_t whole[TOTAL];
  fill(whole, TOTAL, 40, x->rank);
  uint8_t *s0 = xmalloc(L0), *s1 = xmalloc(L1), *s2 = xmalloc(L2);
  memcpy(s0, whole, L0);
  memcpy(s1, whole + L0, L1);
  memcpy(s2, whole + L0 + L1, L2);
  uint8_t *r0 = xmalloc(R0), *r1 = xmalloc(TOTAL - R0);
  memset(r0, 0, R0);
  memset(r1, 0, TOTAL - R0);
  nexar_iovec siov[3] = {{s0, L0}, {s1, L1}, {s2, L2}};
  nexar_iovec riov[2] = {{r0, R0}, {r1, TOTAL - R0}};
  int rs = nexar_send_iov(c, siov, 3, x->next, T_IOV);
  int rr = rs ? 0 : nexar_recv_iov(c, riov, 2, x->prev, T_IOV);
  uint8_t got[TOTAL];
  memcpy(got, r0, R0);
  memcpy(got + R0, r1, TOTAL - R0);
  free(s0);
  free(s1);
  free(s2);
  free(r0);
  free(r1);
  CHECK(rs == 0, "send_iov: %d (%s)", rs, nexar_strerror(rs));
  CHECK(rr == 0, "recv_iov: %d (%s)", rr, nexar_strerror(rr));
  size_t bad = first_bad(got, TOTAL, 40, x->prev);
  CHECK(bad == TOTAL, "iov data wrong at byte %zu of %d", bad, TOTAL);

  /* A contiguous send received through iov, and an iov send received contiguously. */
  uint8_t buf[TOTAL];
  CHECK_OK(nexar_send(c, whole, TOTAL, x->next, T_IOV + 1));
  uint8_t a[100], b[TOTAL - 100];
  nexar_iovec riov2[2] = {{a, sizeof a}, {b, sizeof b}};
  CHECK_OK(nexar_recv_iov(c, riov2, 2, x->prev, T_IOV + 1));
  memcpy(buf, a, sizeof a);
  memcpy(buf + sizeof a, b, sizeof b);
  bad = first_bad(buf, TOTAL, 40, x->prev);
  CHECK(bad == TOTAL, "contiguous->iov data wrong at byte %zu", bad);
  nexar_iovec siov2[2] = {{whole, 1}, {whole + 1, TOTAL - 1}};
  CHECK_OK(nexar_send_iov(c, siov2, 2, x->next, T_IOV + 2));
  memset(buf, 0, sizeof buf);
  CHECK_OK(nexar_recv(c, buf, TOTAL, x->prev, T_IOV + 2));
  bad = first_bad(buf, TOTAL, 40, x->prev);
  CHECK(bad == TOTAL, "iov->contiguous data wrong at byte %zu", bad);
  /* Empty regions anywhere in either layout. */
  nexar_iovec siov3[4] = {{whole, 0}, {whole, 7}, {whole + 7, 0}, {whole + 7, TOTAL - 7}};
  CHECK_OK(nexar_send_iov(c, siov3, 4, x->next, T_IOV + 3));
  memset(buf, 0, sizeof buf);
  nexar_iovec riov3[3] = {{buf, TOTAL - 1}, {buf, 0}, {buf + TOTAL - 1, 1}};
  CHECK_OK(nexar_recv_iov(c, riov3, 3, x->prev, T_IOV + 3));
  bad = first_bad(buf, TOTAL, 40, x->prev);
  CHECK(bad == TOTAL, "iov with empty regions: data wrong at byte %zu", bad);
  return 0;
}

/* Wrong receive length: SIZE_MISMATCH and the message stays queued. */
static int t_mismatch(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "size-mismatch";
  uint8_t out[100], in[101];
  fill(out, sizeof out, 50, x->rank);
  CHECK_OK(nexar_send(c, out, sizeof out, x->next, T_MISMATCH));
  memset(in, 0xEE, sizeof in);
  CHECK_RC(nexar_recv(c, in, 99, x->prev, T_MISMATCH), NEXAR_ERR_SIZE_MISMATCH);
  const char *le = nexar_last_error();
  CHECK(le != NULL && le[0] != '\0', "nexar_last_error() empty after SIZE_MISMATCH");
  CHECK_RC(nexar_recv(c, in, 101, x->prev, T_MISMATCH), NEXAR_ERR_SIZE_MISMATCH);
  /* iov receive with a wrong total length too */
  nexar_iovec riov[2] = {{in, 50}, {in + 50, 10}};
  CHECK_RC(nexar_recv_iov(c, riov, 2, x->prev, T_MISMATCH), NEXAR_ERR_SIZE_MISMATCH);
  CHECK_OK(nexar_recv(c, in, 100, x->prev, T_MISMATCH));
  size_t bad = first_bad(in, 100, 50, x->prev);
  CHECK(bad == 100, "message after the failed receives is wrong at byte %zu", bad);
  /* A non-blocking receive of the wrong length fails the same way at wait. */
  CHECK_OK(nexar_send(c, out, sizeof out, x->next, T_MISMATCH + 1));
  nexar_request *r = NULL;
  int rc = nexar_recv_nb(c, in, 60, x->prev, T_MISMATCH + 1, &r);
  if (rc == NEXAR_OK) rc = nexar_wait(r);
  CHECK(rc == NEXAR_ERR_SIZE_MISMATCH, "recv_nb of 60 bytes for a 100-byte message gave %d (%s)",
        rc, nexar_strerror(rc));
  CHECK_OK(nexar_recv(c, in, 100, x->prev, T_MISMATCH + 1));
  bad = first_bad(in, 100, 50, x->prev);
  CHECK(bad == 100, "message after the failed recv_nb is wrong at byte %zu", bad);
  return 0;
}

static int t_probe(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "probe";
  uint8_t out[777], in[777];
  fill(out, sizeof out, 60, x->rank);
  CHECK_OK(nexar_send(c, out, sizeof out, x->next, T_PROBE));
  size_t len = 0;
  CHECK_OK(nexar_probe(c, x->prev, T_PROBE, &len));
  CHECK(len == sizeof out, "probe reported %zu bytes, expected %zu", len, sizeof out);
  len = 0;
  CHECK_OK(nexar_probe(c, x->prev, T_PROBE, &len));
  CHECK(len == sizeof out, "second probe reported %zu bytes (message consumed?)", len);
  uint32_t src = UINT32_MAX;
  len = 0;
  CHECK_OK(nexar_probe_any(c, T_PROBE, &src, &len));
  CHECK(src == x->prev && len == sizeof out, "probe_any reported src %u len %zu, expected %u %zu",
        src, len, x->prev, sizeof out);
  CHECK_OK(nexar_recv(c, in, sizeof in, x->prev, T_PROBE));
  size_t bad = first_bad(in, sizeof in, 60, x->prev);
  CHECK(bad == sizeof in, "probed message wrong at byte %zu", bad);

  /* probe_any while the message is still on its way: rank 0 is the only sender. */
  if (x->n >= 2) {
    if (x->rank == 0) {
      usleep(50 * 1000);
      for (uint32_t r = 1; r < x->n; r++) {
        uint32_t v = 4242u + r;
        CHECK_OK(nexar_send(c, &v, sizeof v, r, T_PROBE + 1));
      }
    } else {
      src = UINT32_MAX;
      len = 0;
      CHECK_OK(nexar_probe_any(c, T_PROBE + 1, &src, &len));
      CHECK(src == 0 && len == 4, "probe_any reported src %u len %zu, expected 0 4", src, len);
      uint32_t v = 0;
      CHECK_OK(nexar_recv(c, &v, sizeof v, 0, T_PROBE + 1));
      CHECK(v == 4242u + x->rank, "probed value %u", v);
    }
  }

  /* probe_any picks the earliest-arrived message: rank 0 makes sure rank 1's message
   * is there before rank 2 sends its own (rank 1 tells rank 2 to go through rank 0). */
  if (x->n >= 3 && x->rank <= 2) {
    uint32_t v = 0, go = 1;
    if (x->rank == 1) {
      v = 11;
      CHECK_OK(nexar_send(c, &v, sizeof v, 0, T_PROBE + 2));
    } else if (x->rank == 0) {
      CHECK_OK(nexar_probe(c, 1, T_PROBE + 2, &len)); /* rank 1's message has arrived */
      CHECK_OK(nexar_send(c, &go, sizeof go, 2, T_PROBE + 3));
      CHECK_OK(nexar_probe(c, 2, T_PROBE + 2, &len)); /* and now rank 2's too */
      for (uint32_t want = 1; want <= 2; want++) {
        src = UINT32_MAX;
        CHECK_OK(nexar_probe_any(c, T_PROBE + 2, &src, &len));
        CHECK(src == want, "probe_any reported rank %u, expected rank %u (earliest arrived)", src,
              want);
        CHECK_OK(nexar_recv(c, &v, sizeof v, src, T_PROBE + 2));
        CHECK(v == 10u + want, "from rank %u got %u", want, v);
      }
    } else {
      CHECK_OK(nexar_recv(c, &go, sizeof go, 0, T_PROBE + 3));
      v = 12;
      CHECK_OK(nexar_send(c, &v, sizeof v, 0, T_PROBE + 2));
    }
  }
  return 0;
}

/* send_nb/recv_nb with wait, test and wait_all. */
static int t_nb(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "nonblocking";
  /* Plain wait. */
  uint64_t out = 0x1234500000ull + x->rank, in = 0;
  nexar_request *s = NULL, *r = NULL;
  CHECK_OK(nexar_recv_nb(c, &in, sizeof in, x->prev, T_NB, &r));
  CHECK_OK(nexar_send_nb(c, &out, sizeof out, x->next, T_NB, &s));
  CHECK(r != NULL && s != NULL, "successful _nb left *req NULL");
  CHECK_OK(nexar_wait(s));
  CHECK_OK(nexar_wait(r));
  CHECK(in == 0x1234500000ull + x->prev, "recv_nb got 0x%llx", (unsigned long long)in);

  /* test: poll until done; the send comes after a delay. */
  in = 0;
  r = NULL;
  CHECK_OK(nexar_recv_nb(c, &in, sizeof in, x->prev, T_TEST, &r));
  int done = -1;
  CHECK_OK(nexar_test(r, &done));
  CHECK(done == 0 || done == 1, "nexar_test set *done = %d", done);
  usleep(30 * 1000);
  CHECK_OK(nexar_send_nb(c, &out, sizeof out, x->next, T_TEST, &s));
  uint64_t deadline = now_ms() + OP_TIMEOUT_MS;
  done = 0;
  while (!done) {
    CHECK_OK(nexar_test(r, &done));
    if (!done) {
      if (now_ms() > deadline) FAIL("nexar_test never reported the receive done");
      usleep(200);
    }
  }
  /* test again after done: still done, not freed yet */
  CHECK_OK(nexar_test(r, &done));
  CHECK(done == 1, "nexar_test went back to not done");
  CHECK_OK(nexar_wait(r));
  CHECK(in == 0x1234500000ull + x->prev, "polled recv_nb got 0x%llx", (unsigned long long)in);
  done = 0;
  deadline = now_ms() + OP_TIMEOUT_MS;
  while (!done) {
    CHECK_OK(nexar_test(s, &done));
    if (!done) {
      if (now_ms() > deadline) FAIL("nexar_test never reported the send done");
      usleep(200);
    }
  }
  CHECK_OK(nexar_wait(s));

  /* wait_all over many requests, tags posted in opposite orders, with NULL holes. */
  enum { M = 48 };
  nexar_request *reqs[2 * M + 2];
  uint32_t sv[M], rv[M];
  memset(reqs, 0, sizeof reqs);
  for (uint32_t i = 0; i < M; i++) {
    rv[i] = UINT32_MAX;
    CHECK_OK(nexar_recv_nb(c, &rv[i], sizeof rv[i], x->prev, T_WAITALL + i, &reqs[i]));
  }
  for (uint32_t i = M; i-- > 0;) {
    sv[i] = x->rank * 1000u + i;
    CHECK_OK(nexar_send_nb(c, &sv[i], sizeof sv[i], x->next, T_WAITALL + i, &reqs[M + 1 + i]));
  }
  CHECK_OK(nexar_wait_all(reqs, 2 * M + 2));
  for (size_t i = 0; i < 2 * M + 2; i++)
    CHECK(reqs[i] == NULL, "wait_all left reqs[%zu] non-NULL", i);
  for (uint32_t i = 0; i < M; i++)
    CHECK(rv[i] == x->prev * 1000u + i, "wait_all receive %u got %u", i, rv[i]);
  CHECK_OK(nexar_wait_all(reqs, 0));

  /* wait_all waits for every request, returns the lowest-index error and frees all;
   * the message of a failed receive stays queued. */
  {
    uint64_t a = 0;
    uint8_t small[3];
    uint32_t ok1 = 0;
    nexar_request *w[3] = {NULL, NULL, NULL};
    CHECK_OK(nexar_recv_nb(c, &ok1, sizeof ok1, x->prev, T_NB + 1, &w[0]));
    CHECK_OK(nexar_recv_nb(c, small, sizeof small, x->prev, T_NB + 2, &w[1]));
    /* Tell prev that the receives are posted; send once next has posted its own. */
    uint8_t token = 0;
    CHECK_OK(nexar_send(c, &token, 1, x->prev, T_NB + 3));
    CHECK_OK(nexar_recv(c, &token, 1, x->next, T_NB + 3));
    uint32_t v1 = 31u + x->rank;
    uint64_t v2 = 0xABCDEF00ull + x->rank;
    CHECK_OK(nexar_send(c, &v1, sizeof v1, x->next, T_NB + 1));
    CHECK_OK(nexar_send_nb(c, &v2, sizeof v2, x->next, T_NB + 2, &w[2]));
    int rc = nexar_wait_all(w, 3);
    CHECK(rc == NEXAR_ERR_SIZE_MISMATCH,
          "wait_all with a 3-byte receive of an 8-byte message: %d (%s), expected "
          "SIZE_MISMATCH",
          rc, nexar_strerror(rc));
    CHECK(w[0] == NULL && w[1] == NULL && w[2] == NULL, "wait_all left a request non-NULL");
    CHECK(ok1 == 31u + x->prev, "the good receive in wait_all got %u", ok1);
    CHECK_OK(nexar_recv(c, &a, sizeof a, x->prev, T_NB + 2));
    CHECK(a == 0xABCDEF00ull + x->prev, "message after failed recv_nb: 0x%llx",
          (unsigned long long)a);
  }

  /* Receives posted for one (src, tag) match in the order posted. */
  uint32_t p[4] = {0, 0, 0, 0};
  nexar_request *pr[4] = {NULL, NULL, NULL, NULL};
  for (int i = 0; i < 4; i++)
    CHECK_OK(nexar_recv_nb(c, &p[i], sizeof p[i], x->prev, T_POSTED, &pr[i]));
  for (uint32_t i = 0; i < 4; i++) {
    uint32_t v = 77u + i;
    CHECK_OK(nexar_send(c, &v, sizeof v, x->next, T_POSTED));
  }
  CHECK_OK(nexar_wait_all(pr, 4));
  for (uint32_t i = 0; i < 4; i++)
    CHECK(p[i] == 77u + i, "posted receive #%u got %u (posted order not kept)", i, p[i]);
  return 0;
}

/* Two ranks send 8 MiB to each other at the same time with _nb. */
static int t_exchange(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "exchange-8MiB";
  size_t len = (size_t)8 << 20;
  uint8_t *sb = xmalloc(len), *rb = xmalloc(len);
  fill(sb, len, 70, x->rank);
  memset(rb, 0, len);
  nexar_request *reqs[2] = {NULL, NULL};
  int rc = nexar_send_nb(c, sb, len, x->partner, T_EXCHANGE, &reqs[0]);
  if (rc == 0) rc = nexar_recv_nb(c, rb, len, x->partner, T_EXCHANGE, &reqs[1]);
  int rw = nexar_wait_all(reqs, 2);
  size_t bad = first_bad(rb, len, 70, x->partner);
  free(sb);
  free(rb);
  CHECK(rc == 0, "posting the exchange with rank %u: %d (%s)", x->partner, rc, nexar_strerror(rc));
  CHECK(rw == 0, "wait_all of the exchange with rank %u: %d (%s)", x->partner, rw,
        nexar_strerror(rw));
  CHECK(bad == len, "8 MiB from rank %u wrong at byte %zu", x->partner, bad);
  return 0;
}

/* Argument errors: they fail at once and send nothing. */
static int t_errors(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "argument-errors";
  uint8_t b[16] = {0};
  uint64_t t0 = now_ms();
  CHECK_RC(nexar_recv(c, b, sizeof b, x->n, T_NB), NEXAR_ERR_INVALID_RANK);
  CHECK_RC(nexar_recv(c, b, sizeof b, UINT32_MAX, T_NB), NEXAR_ERR_INVALID_RANK);
  CHECK_RC(nexar_send(c, b, sizeof b, x->n, T_NB), NEXAR_ERR_INVALID_RANK);
  size_t len = 5;
  CHECK_RC(nexar_probe(c, x->n + 3, T_NB, &len), NEXAR_ERR_INVALID_RANK);
  CHECK_SOFT(len == 0, "failed probe left *len = %zu (out-parameters must be 0 on failure)", len);
  nexar_request *req = (nexar_request *)b;
  CHECK_RC(nexar_send_nb(c, b, sizeof b, x->n, T_NB, &req), NEXAR_ERR_INVALID_RANK);
  CHECK_SOFT(req == NULL, "failed send_nb left *req non-NULL");
  req = (nexar_request *)b;
  CHECK_RC(nexar_recv_nb(c, b, sizeof b, x->n, T_NB, &req), NEXAR_ERR_INVALID_RANK);
  CHECK_SOFT(req == NULL, "failed recv_nb left *req non-NULL");

  CHECK_RC(nexar_send(c, NULL, 10, x->next, T_NB), NEXAR_ERR_INVALID_ARGUMENT);
  CHECK_RC(nexar_recv(c, NULL, 10, x->prev, T_NB), NEXAR_ERR_INVALID_ARGUMENT);
  req = (nexar_request *)b;
  CHECK_RC(nexar_send_nb(c, NULL, 10, x->next, T_NB, &req), NEXAR_ERR_INVALID_ARGUMENT);
  CHECK_SOFT(req == NULL, "failed send_nb left *req non-NULL");
  req = (nexar_request *)b;
  CHECK_RC(nexar_recv_nb(c, NULL, 10, x->prev, T_NB, &req), NEXAR_ERR_INVALID_ARGUMENT);
  CHECK_SOFT(req == NULL, "failed recv_nb left *req non-NULL");
  CHECK_RC(nexar_send_nb(c, b, 4, x->next, T_NB, NULL), NEXAR_ERR_INVALID_ARGUMENT);
  CHECK_RC(nexar_recv_nb(c, b, 4, x->prev, T_NB, NULL), NEXAR_ERR_INVALID_ARGUMENT);
  CHECK_RC(nexar_send(NULL, b, 4, 0, T_NB), NEXAR_ERR_INVALID_ARGUMENT);
  CHECK_RC(nexar_recv(NULL, b, 4, 0, T_NB), NEXAR_ERR_INVALID_ARGUMENT);
  CHECK_RC(nexar_probe(c, x->prev, T_NB, NULL), NEXAR_ERR_INVALID_ARGUMENT);
  uint32_t src = 0;
  src = 7;
  CHECK_RC(nexar_probe_any(c, T_NB, &src, NULL), NEXAR_ERR_INVALID_ARGUMENT);
  CHECK_SOFT(src == 0, "probe_any with NULL len left *src = %u (out-parameters must be 0)", src);
  len = 5;
  CHECK_RC(nexar_probe_any(c, T_NB, NULL, &len), NEXAR_ERR_INVALID_ARGUMENT);
  CHECK_SOFT(len == 0, "probe_any with NULL src left *len = %zu (out-parameters must be 0)", len);
  CHECK_RC(nexar_send_iov(c, NULL, 2, x->next, T_NB), NEXAR_ERR_INVALID_ARGUMENT);
  nexar_iovec bad_iov[2] = {{b, 4}, {NULL, 4}};
  CHECK_RC(nexar_send_iov(c, bad_iov, 2, x->next, T_NB), NEXAR_ERR_INVALID_ARGUMENT);
  CHECK_RC(nexar_recv_iov(c, bad_iov, 2, x->prev, T_NB), NEXAR_ERR_INVALID_ARGUMENT);
  CHECK_RC(nexar_wait(NULL), NEXAR_ERR_INVALID_ARGUMENT);
  int done = 0;
  CHECK_RC(nexar_test(NULL, &done), NEXAR_ERR_INVALID_ARGUMENT);

  nexar_peer_stats st;
  CHECK_RC(nexar_peer_stats_get(c, x->n, &st), NEXAR_ERR_INVALID_RANK);
  CHECK_RC(nexar_peer_stats_get(c, x->next, NULL), NEXAR_ERR_INVALID_ARGUMENT);
  uint64_t dt = now_ms() - t0;
  CHECK(dt < 1000, "argument errors took %llu ms (they must fail at once)", (unsigned long long)dt);
  /* None of the failed calls sent anything: a ring message still matches exactly. */
  uint32_t v = 99u + x->rank, in = 0;
  CHECK_OK(nexar_send(c, &v, sizeof v, x->next, T_NB));
  CHECK_OK(nexar_recv(c, &in, sizeof in, x->prev, T_NB));
  CHECK(in == 99u + x->prev, "after the argument errors got %u", in);
  return 0;
}

/* Peer stats count the bytes and messages of this check. */
static int t_stats(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "peer-stats";
  if (x->n < 2) return 0;
  enum { K = 10, LEN = 1000 };
  nexar_peer_stats s0, r0, s1, r1;
  /* Snapshot, then sync so that prev has its snapshot too before anything is sent. */
  CHECK_OK(nexar_peer_stats_get(c, x->next, &s0));
  CHECK_OK(nexar_peer_stats_get(c, x->prev, &r0));
  CHECK_OK(p2p_sync(x));
  uint8_t b[LEN];
  memset(b, 1, sizeof b);
  for (int i = 0; i < K; i++)
    CHECK_OK(nexar_send(c, b, LEN, x->next, T_STATS));
  for (int i = 0; i < K; i++)
    CHECK_OK(nexar_recv(c, b, LEN, x->prev, T_STATS));
  CHECK_OK(p2p_sync(x));
  CHECK_OK(nexar_peer_stats_get(c, x->next, &s1));
  CHECK_OK(nexar_peer_stats_get(c, x->prev, &r1));
  CHECK(s1.bytes_sent - s0.bytes_sent >= (uint64_t)K * LEN,
        "bytes_sent to rank %u grew by %llu, expected >= %d", x->next,
        (unsigned long long)(s1.bytes_sent - s0.bytes_sent), K * LEN);
  CHECK(s1.messages_sent - s0.messages_sent >= (uint64_t)K,
        "messages_sent to rank %u grew by %llu, expected >= %d", x->next,
        (unsigned long long)(s1.messages_sent - s0.messages_sent), K);
  CHECK(r1.bytes_received - r0.bytes_received >= (uint64_t)K * LEN,
        "bytes_received from rank %u grew by %llu, expected >= %d", x->prev,
        (unsigned long long)(r1.bytes_received - r0.bytes_received), K * LEN);
  CHECK(r1.messages_received - r0.messages_received >= (uint64_t)K,
        "messages_received from rank %u grew by %llu, expected >= %d", x->prev,
        (unsigned long long)(r1.messages_received - r0.messages_received), K);
  CHECK(s1.smoothed_rtt_us >= 0.0, "negative smoothed_rtt_us %f", s1.smoothed_rtt_us);
  /* A smaller out_size is filled partially (or refused), never overrun. */
  uint64_t partial[2] = {0, 0xDEADBEEF};
  int rc =
      nexar_peer_stats_get_sized(c, x->next, (nexar_peer_stats *)(void *)partial, sizeof(uint64_t));
  CHECK(rc == 0 || rc == NEXAR_ERR_INVALID_ARGUMENT, "peer_stats_get_sized(8 bytes): %d (%s)", rc,
        nexar_strerror(rc));
  CHECK(partial[1] == 0xDEADBEEF, "peer_stats_get wrote past out_size");
  return 0;
}

/* Many threads of one rank send at once. */
enum { SENDERS = 8, PER_SENDER = 40 };
typedef struct thr_arg {
  rank_ctx *x;
  uint32_t idx;
  int rc;
  int line;
  uint32_t detail;
} thr_arg;

static void *sender_thread(void *p) {
  thr_arg *a = p;
  for (uint32_t i = 0; i < PER_SENDER && !a->rc; i++) {
    uint32_t msg[64];
    for (int k = 0; k < 64; k++)
      msg[k] = a->idx * 100000u + i;
    size_t len = sizeof(uint32_t) * (1 + (i % 64));
    int rc = nexar_send(a->x->c, msg, len, a->x->next, T_THREADS + a->idx);
    if (rc) {
      a->rc = rc;
      a->line = __LINE__;
      a->detail = i;
    }
    uint32_t shared[2] = {a->idx, i};
    rc = nexar_send(a->x->c, shared, sizeof shared, a->x->next, T_THREADS_SHARED);
    if (rc && !a->rc) {
      a->rc = rc;
      a->line = __LINE__;
      a->detail = i;
    }
  }
  return NULL;
}

static void *receiver_thread(void *p) {
  thr_arg *a = p;
  for (uint32_t i = 0; i < PER_SENDER && !a->rc; i++) {
    uint32_t msg[64];
    size_t len = sizeof(uint32_t) * (1 + (i % 64));
    int rc = nexar_recv(a->x->c, msg, len, a->x->prev, T_THREADS + a->idx);
    if (rc) {
      a->rc = rc;
      a->line = __LINE__;
      a->detail = i;
      break;
    }
    for (size_t k = 0; k < len / sizeof(uint32_t); k++)
      if (msg[k] != a->idx * 100000u + i) {
        a->rc = -1000;
        a->line = __LINE__;
        a->detail = i;
        break;
      }
  }
  return NULL;
}

static int t_threads(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "concurrent-senders";
  pthread_t st[SENDERS], rt[SENDERS];
  thr_arg sa[SENDERS], ra[SENDERS];
  for (uint32_t i = 0; i < SENDERS; i++) {
    sa[i] = (thr_arg){x, i, 0, 0, 0};
    ra[i] = (thr_arg){x, i, 0, 0, 0};
    if (pthread_create(&st[i], NULL, sender_thread, &sa[i]) ||
        pthread_create(&rt[i], NULL, receiver_thread, &ra[i])) {
      fprintf(stderr, "FAIL: pthread_create\n");
      exit(1);
    }
  }
  /* Meanwhile this thread takes the shared-tag messages: per sender in order. */
  uint32_t next_seq[SENDERS] = {0};
  int result = 0;
  for (uint32_t k = 0; k < SENDERS * PER_SENDER && !result; k++) {
    uint32_t m[2] = {UINT32_MAX, UINT32_MAX};
    int rc = nexar_recv(c, m, sizeof m, x->prev, T_THREADS_SHARED);
    if (rc)
      result =
          fail_at(c, check, __LINE__, "shared-tag recv #%u: %d (%s)", k, rc, nexar_strerror(rc));
    else if (m[0] >= SENDERS || m[1] != next_seq[m[0]])
      result = fail_at(c, check, __LINE__,
                       "shared-tag message #%u is (thread %u, seq %u), expected seq %u: "
                       "one thread's messages overtook each other",
                       k, m[0], m[1], m[0] < SENDERS ? next_seq[m[0]] : 0u);
    else
      next_seq[m[0]]++;
  }
  for (uint32_t i = 0; i < SENDERS; i++) {
    pthread_join(st[i], NULL);
    pthread_join(rt[i], NULL);
  }
  if (result) return result;
  for (uint32_t i = 0; i < SENDERS; i++) {
    CHECK(sa[i].rc == 0, "sender thread %u, message %u, line %d: %d (%s)", i, sa[i].detail,
          sa[i].line, sa[i].rc, nexar_strerror(sa[i].rc));
    CHECK(ra[i].rc == 0, "receiver thread %u, message %u, line %d: %d (%s)", i, ra[i].detail,
          ra[i].line, ra[i].rc, ra[i].rc == -1000 ? "wrong content" : nexar_strerror(ra[i].rc));
  }
  return 0;
}

/* ------------------------------------------------------------- driver */

typedef int (*check_fn)(rank_ctx *);
static const struct {
  const char *name;
  check_fn fn;
} checks[] = {
    {"ring", t_ring},
    {"self-send", t_self},
    {"zero-byte", t_zero},
    {"sizes 1..16MiB", t_sizes},
    {"non-overtaking", t_order},
    {"tags-independent", t_tags},
    {"iov", t_iov},
    {"size-mismatch", t_mismatch},
    {"probe", t_probe},
    {"nonblocking", t_nb},
    {"exchange-8MiB", t_exchange},
    {"argument-errors", t_errors},
    {"peer-stats", t_stats},
    {"concurrent-senders", t_threads},
};

static int run_rank(nexar_client *c) {
  rank_ctx x;
  x.c = c;
  x.rank = nexar_rank(c);
  x.n = nexar_world_size(c);
  x.next = (x.rank + 1) % x.n;
  x.prev = (x.rank + x.n - 1) % x.n;
  x.partner = (x.rank ^ 1u) < x.n ? (x.rank ^ 1u) : x.rank;
  for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
    uint64_t t0 = now_ms();
    if (checks[i].fn(&x)) return 1;
    if (p2p_sync(&x)) return 1;
    if (x.rank == 0)
      printf("ok   %-20s (%llu ms)\n", checks[i].name, (unsigned long long)(now_ms() - t0));
    fflush(stdout);
  }
  return 0;
}

static void *rank_thread(void *p) {
  run_rank(p);
  return NULL;
}

/* Ends the program if a wait does not return in time (a hang in a freed object). */
static atomic_int g_watch_done;
static void *watchdog(void *p) {
  const char *what = p;
  for (int i = 0; i < 100 && !atomic_load(&g_watch_done); i++)
    usleep(50 * 1000);
  if (!atomic_load(&g_watch_done)) {
    fprintf(stderr, "FAIL [timeout] %s did not return within 5 s\n", what);
    fflush(stderr);
    _exit(1);
  }
  return NULL;
}

/* A recv nobody sends to times out after about collective_timeout_ms (1000 here). */
static int timeout_check(void) {
  nexar_client *c = NULL;
  const char *check = "timeout";
  nexar_client *cl[2] = {NULL, NULL};
  nexar_config cfg;
  CHECK_OK(nexar_config_default(&cfg));
  cfg.collective_timeout_ms = 1000;
  cfg.connect_timeout_ms = 20000;
  CHECK_OK(nexar_bootstrap_local(cl, 2, &cfg));
  c = cl[0];
  uint8_t b[8];
  uint64_t t0 = now_ms();
  int rc = nexar_recv(cl[0], b, sizeof b, 1, 4711);
  uint64_t dt = now_ms() - t0;
  char le[512];
  snprintf(le, sizeof le, "%s", nexar_last_error());
  int result = 0;
  if (rc != NEXAR_ERR_TIMEOUT)
    result = fail_at(c, check, __LINE__, "recv with no sender returned %d (%s), expected TIMEOUT",
                     rc, nexar_strerror(rc));
  else if (dt < 900 || dt > 3000)
    result = fail_at(c, check, __LINE__, "recv timed out after %llu ms, expected about 1000",
                     (unsigned long long)dt);
  else if (strstr(le, "rank 1") == NULL)
    result =
        fail_at(c, check, __LINE__, "last_error does not name the peer (\"rank 1\"): \"%s\"", le);
  if (!result) {
    /* A probe waits and times out the same way; a timed-out recv_nb fails at wait. */
    size_t len = 7;
    t0 = now_ms();
    rc = nexar_probe(cl[0], 1, 4712, &len);
    dt = now_ms() - t0;
    if (rc != NEXAR_ERR_TIMEOUT || dt < 900 || dt > 3000)
      result = fail_at(c, check, __LINE__, "probe: %d (%s) after %llu ms, expected TIMEOUT", rc,
                       nexar_strerror(rc), (unsigned long long)dt);
    CHECK_SOFT(len == 0, "timed-out probe left *len = %zu (out-parameters must be 0 on failure)",
               len);
  }
  if (!result) {
    nexar_request *r = NULL;
    rc = nexar_recv_nb(cl[1], b, sizeof b, 0, 4713, &r);
    if (rc == 0) rc = nexar_wait(r);
    if (rc != NEXAR_ERR_TIMEOUT)
      result = fail_at(cl[1], check, __LINE__, "recv_nb + wait: %d (%s), expected TIMEOUT", rc,
                       nexar_strerror(rc));
    else if (strstr(nexar_last_error(), "rank 0") == NULL)
      result = fail_at(cl[1], check, __LINE__, "last_error after wait does not name rank 0: %s",
                       nexar_last_error());
  }
  if (!result) {
    /* The communicator still works after the timeouts, and a late message for a
     * timed-out receive goes to the next receive, not to the one that gave up. */
    static const struct {
      uint32_t from, to, tag;
    } late[] = {{1, 0, 4711}, {0, 1, 4713}, {1, 0, 4714}};
    for (size_t k = 0; k < 3 && !result; k++) {
      uint64_t v = 500u + k, in = 0;
      rc = nexar_send(cl[late[k].from], &v, sizeof v, late[k].to, late[k].tag);
      if (rc == 0) rc = nexar_recv(cl[late[k].to], &in, sizeof in, late[k].from, late[k].tag);
      if (rc != 0 || in != v)
        result = fail_at(cl[late[k].to], check, __LINE__,
                         "tag %u after the timeouts: %d (%s), got %llu (a timed-out receive "
                         "kept matching?)",
                         late[k].tag, rc, nexar_strerror(rc), (unsigned long long)in);
    }
  }
  /* A receive still pending at nexar_client_del completes with ABORTED; its wait stays
   * valid after the delete. */
  nexar_request *pending = NULL;
  uint64_t pend_buf = 0;
  int prc = result ? -1 : nexar_recv_nb(cl[0], &pend_buf, sizeof pend_buf, 1, 4715, &pending);
  nexar_client_del(cl[0]);
  nexar_client_del(cl[1]);
  if (prc == 0) {
    pthread_t wd;
    atomic_store(&g_watch_done, 0);
    int wdok = pthread_create(&wd, NULL, watchdog,
                              "nexar_wait on a recv_nb pending at nexar_client_del") == 0;
    rc = nexar_wait(pending);
    atomic_store(&g_watch_done, 1);
    if (wdok) pthread_join(wd, NULL);
    if (rc != NEXAR_ERR_ABORTED)
      result = fail_at(NULL, check, __LINE__,
                       "recv_nb pending at client_del: wait gave %d (%s), expected ABORTED", rc,
                       nexar_strerror(rc));
  } else if (!result) {
    result = fail_at(NULL, check, __LINE__, "recv_nb: %d (%s)", prc, nexar_strerror(prc));
  }
  if (!result) printf("ok   %-20s (%s)\n", "timeout", le);
  return result;
}

static int strerror_check(int verbose) {
  nexar_client *c = NULL;
  const char *check = "strerror";
  for (int e = 5; e >= -40; e--) {
    const char *s = nexar_strerror(e);
    CHECK(s != NULL, "nexar_strerror(%d) is NULL", e);
    CHECK(e < -15 || e > 0 || s[0] != '\0', "nexar_strerror(%d) is empty", e);
  }
  CHECK(nexar_strerror(INT32_MIN) != NULL, "nexar_strerror(INT_MIN) is NULL");
  CHECK(strstr(nexar_strerror(NEXAR_ERR_TIMEOUT), "TIMEOUT") != NULL,
        "nexar_strerror(TIMEOUT) = \"%s\" does not name the code",
        nexar_strerror(NEXAR_ERR_TIMEOUT));
  CHECK(nexar_last_error() != NULL, "nexar_last_error() is NULL");
  if (verbose) printf("ok   %-20s\n", "strerror");
  return 0;
}

static int parse_u32(const char *s, uint32_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || end == s || *end != '\0' || v == 0 || v > MAX_WORLD) return -1;
  *out = (uint32_t)v;
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  uint32_t n = 0;
  if (argc > 1 && parse_u32(argv[1], &n)) {
    fprintf(stderr, "usage: p2p_test WORLD_SIZE (1..%d)\n", MAX_WORLD);
    return 2;
  }
  const char *seed = getenv("NEXAR_SEED_ADDR");
  if (seed && seed[0]) {
    g_proc_mode = 1;
    nexar_client *c = NULL;
    int rc = nexar_init_from_env(&c);
    if (rc) {
      fprintf(stderr, "FAIL: nexar_init_from_env: %d (%s): %s\n", rc, nexar_strerror(rc),
              nexar_last_error());
      return 1;
    }
    if (n && nexar_world_size(c) != n) {
      fprintf(stderr, "FAIL: world size %u, expected %u\n", nexar_world_size(c), n);
      nexar_client_del(c);
      return 1;
    }
    if (nexar_rank(c) == 0) printf("p2p_test: process mode, world %u\n", nexar_world_size(c));
    run_rank(c);
    if (!atomic_load(&g_hard)) strerror_check(nexar_rank(c) == 0);
    uint32_t rank = nexar_rank(c);
    nexar_client_del(c);
    if (atomic_load(&g_failed)) {
      fprintf(stderr, "p2p_test (process rank %u): FAILED\n", rank);
      return 1;
    }
    return 0;
  }
  if (n == 0) {
    fprintf(stderr, "usage: p2p_test WORLD_SIZE (1..%d)\n", MAX_WORLD);
    return 2;
  }

  nexar_config cfg;
  int rc = nexar_config_default(&cfg);
  if (rc) {
    fprintf(stderr, "FAIL: nexar_config_default: %s\n", nexar_last_error());
    return 1;
  }
  cfg.collective_timeout_ms = OP_TIMEOUT_MS;
  cfg.barrier_timeout_ms = OP_TIMEOUT_MS;
  cfg.rpc_timeout_ms = OP_TIMEOUT_MS;
  cfg.connect_timeout_ms = 20000;
  uint64_t t0 = now_ms();
  rc = nexar_bootstrap_local(g_clients, n, &cfg);
  if (rc) {
    fprintf(stderr, "FAIL: nexar_bootstrap_local(%u): %d (%s): %s\n", n, rc, nexar_strerror(rc),
            nexar_last_error());
    return 1;
  }
  g_nclients = n;
  printf("p2p_test: threads mode, world %u formed in %llu ms\n", n,
         (unsigned long long)(now_ms() - t0));
  for (uint32_t i = 0; i < n; i++) {
    if (nexar_rank(g_clients[i]) != i || nexar_world_size(g_clients[i]) != n) {
      fprintf(stderr, "FAIL: clients[%u] has rank %u world %u\n", i, nexar_rank(g_clients[i]),
              nexar_world_size(g_clients[i]));
      return 1;
    }
  }
  pthread_t th[MAX_WORLD];
  for (uint32_t i = 0; i < n; i++)
    if (pthread_create(&th[i], NULL, rank_thread, g_clients[i])) {
      fprintf(stderr, "FAIL: pthread_create\n");
      return 1;
    }
  for (uint32_t i = 0; i < n; i++)
    pthread_join(th[i], NULL);
  for (uint32_t i = 0; i < n; i++)
    nexar_client_del(g_clients[i]);
  g_nclients = 0;
  if (!atomic_load(&g_hard)) {
    timeout_check();
    strerror_check(1);
  }
  if (atomic_load(&g_failed)) {
    fprintf(stderr, "p2p_test (world %u): FAILED\n", n);
    return 1;
  }
  printf("p2p_test (world %u): all checks passed\n", n);
  return 0;
}
