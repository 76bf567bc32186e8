/*
 * RPC integration test, written against the public API only: world 3, ranks as
 * threads (nexar_bootstrap_local + one pthread per rank).
 *
 * Every rank registers the same handlers, then the ranks meet at a barrier made of
 * point-to-point messages (collectives are not used). The first failed check prints
 * the rank, the check and nexar_last_error(), aborts every communicator so the
 * other ranks stop at once, and the program exits 1.
 */
#include <nexar/nexar.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WORLD 3
#define RPC_TIMEOUT_MS 5000

enum {
  FN_ECHO = 1,    /* reply: (own rank, caller) + args reversed and xor 0x5A */
  FN_FAIL = 2,    /* returns non-zero after setting a reply */
  FN_BIG = 3,     /* checks a pattern in args; reply: args + 1 per byte */
  FN_FORWARD = 4, /* sends a p2p message to another rank */
  FN_ZERO = 5,    /* expects empty args; empty reply */
  FN_TEMP = 6,    /* unregistered during the test */
  FN_NESTED = 7,  /* calls FN_ECHO on the next rank and returns its reply */
  FN_UNKNOWN = 999,
};
enum { T_SYNC_UP = 0xFFFFFF00u, T_SYNC_DOWN = 0xFFFFFF01u, T_FWD = 50 };
enum { CALL_THREADS = 4, CALLS_PER_THREAD = 30 };

static nexar_client *g_clients[WORLD];
static atomic_int g_failed;
static atomic_long g_echo_calls;
static atomic_int g_bad_caller; /* a handler saw a caller outside the world */

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int fail_at(nexar_client *c, const char *check, int line, const char *fmt, ...) {
  int first = atomic_fetch_add(&g_failed, 1) == 0;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "FAIL%s rank %u [%s] rpc_test.c:%d: %s\n    last_error: %s\n",
          first ? "" : " (after an earlier failure)", c ? nexar_rank(c) : 0u, check, line, msg,
          nexar_last_error());
  for (uint32_t i = 0; i < WORLD; i++)
    if (g_clients[i]) nexar_abort(g_clients[i]);
  return 1;
}

#define FAIL(...) return fail_at(c, check, __LINE__, __VA_ARGS__)
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) FAIL(__VA_ARGS__);                                                                \
  } while (0)
#define CHECK_OK(call)                                                                             \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != NEXAR_OK) FAIL("%s returned %d (%s)", #call, rc_, nexar_strerror(rc_));             \
  } while (0)

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "FAIL: malloc(%zu) failed\n", n);
    exit(1);
  }
  return p;
}

static inline uint8_t pat(uint32_t seed, size_t i) {
  return (uint8_t)(i * 151u + (i >> 10) * 13u + seed * 71u + 3u);
}

/* ------------------------------------------------------------- handlers */

static int h_echo(void *ctx, uint32_t caller, const void *args, size_t args_len, void **reply,
                  size_t *reply_len) {
  nexar_client *c = ctx;
  atomic_fetch_add(&g_echo_calls, 1);
  if (caller >= WORLD) atomic_store(&g_bad_caller, 1);
  uint8_t *r = malloc(8 + args_len);
  if (!r) return -1;
  uint32_t hdr[2] = {nexar_rank(c), caller};
  memcpy(r, hdr, sizeof hdr);
  const uint8_t *a = args;
  for (size_t i = 0; i < args_len; i++)
    r[8 + i] = (uint8_t)(a[args_len - 1 - i] ^ 0x5A);
  *reply = r;
  *reply_len = 8 + args_len;
  return 0;
}

static int h_fail(void *ctx, uint32_t caller, const void *args, size_t args_len, void **reply,
                  size_t *reply_len) {
  /* A reply set by a failing handler must be freed by the library, not delivered. */
  *reply = malloc(16);
  if (*reply) memset(*reply, 0x77, 16);
  *reply_len = 16;
  return 7;
}

static int h_big(void *ctx, uint32_t caller, const void *args, size_t args_len, void **reply,
                 size_t *reply_len) {
  const uint8_t *a = args;
  for (size_t i = 0; i < args_len; i++)
    if (a[i] != pat(caller, i)) return -2; /* the caller sees RPC_FAILED */
  uint8_t *r = malloc(args_len ? args_len : 1);
  if (!r) return -1;
  for (size_t i = 0; i < args_len; i++)
    r[i] = (uint8_t)(a[i] + 1u);
  *reply = r;
  *reply_len = args_len;
  return 0;
}

static int h_forward(void *ctx, uint32_t caller, const void *args, size_t args_len, void **reply,
                     size_t *reply_len) {
  nexar_client *c = ctx;
  uint32_t a[3]; /* dest, tag, value */
  if (args_len != sizeof a) return -1;
  memcpy(a, args, sizeof a);
  int32_t rc = nexar_send(c, &a[2], sizeof a[2], a[0], a[1]);
  int32_t *r = malloc(sizeof *r);
  if (!r) return -1;
  *r = rc;
  *reply = r;
  *reply_len = sizeof *r;
  return 0;
}

static int h_zero(void *ctx, uint32_t caller, const void *args, size_t args_len, void **reply,
                  size_t *reply_len) {
  if (args_len != 0) return -1;
  *reply = NULL;
  *reply_len = 0;
  return 0;
}

static int h_temp(void *ctx, uint32_t caller, const void *args, size_t args_len, void **reply,
                  size_t *reply_len) {
  uint32_t *r = malloc(sizeof *r);
  if (!r) return -1;
  *r = (uint32_t)(uintptr_t)ctx;
  *reply = r;
  *reply_len = sizeof *r;
  return 0;
}

static int h_nested(void *ctx, uint32_t caller, const void *args, size_t args_len, void **reply,
                    size_t *reply_len) {
  nexar_client *c = ctx;
  uint32_t next = (nexar_rank(c) + 1) % nexar_world_size(c);
  return nexar_rpc(c, next, FN_ECHO, args, args_len, reply, reply_len);
}

/* ---------------------------------------------------------------- checks */

typedef struct rank_ctx {
  nexar_client *c;
  uint32_t rank, n, next, prev;
} rank_ctx;

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

/* Calls FN_ECHO on target with args and checks the reply. */
static int echo_call(nexar_client *c, const char *check, uint32_t target, const uint8_t *args,
                     size_t len) {
  void *reply = NULL;
  size_t rlen = 0;
  int rc = nexar_rpc(c, target, FN_ECHO, args, len, &reply, &rlen);
  if (rc)
    return fail_at(c, check, __LINE__, "rpc echo to rank %u (%zu bytes): %d (%s)", target, len, rc,
                   nexar_strerror(rc));
  int bad = 0;
  uint32_t hdr[2] = {UINT32_MAX, UINT32_MAX};
  if (rlen != 8 + len || !reply) {
    bad = 1;
  } else {
    memcpy(hdr, reply, sizeof hdr);
    const uint8_t *r = reply;
    if (hdr[0] != target || hdr[1] != nexar_rank(c)) bad = 2;
    for (size_t i = 0; i < len && !bad; i++)
      if (r[8 + i] != (uint8_t)(args[len - 1 - i] ^ 0x5A)) bad = 3;
  }
  nexar_free(reply);
  if (bad)
    return fail_at(c, check, __LINE__,
                   "echo reply from rank %u wrong (%s): %zu bytes for %zu, served by %u for "
                   "caller %u",
                   target,
                   bad == 1   ? "length"
                   : bad == 2 ? "header: wrong server or caller"
                              : "content (another call's reply?)",
                   rlen, len, hdr[0], hdr[1]);
  return 0;
}

typedef struct call_arg {
  rank_ctx *x;
  uint32_t t;
  int rc;
} call_arg;

static void *caller_thread(void *p) {
  call_arg *a = p;
  nexar_client *c = a->x->c;
  uint8_t *buf = xmalloc(4096);
  for (uint32_t i = 0; i < CALLS_PER_THREAD && !a->rc; i++) {
    uint32_t target = (a->x->rank + i + a->t) % a->x->n;
    size_t len = 1 + (size_t)((i * 37u + a->t * 11u + a->x->rank * 5u) % 3000u);
    for (size_t k = 0; k < len; k++)
      buf[k] = (uint8_t)(k * 7u + i * 13u + a->t * 101u + a->x->rank * 31u);
    a->rc = echo_call(c, "concurrent-calls", target, buf, len);
  }
  free(buf);
  return NULL;
}

static int t_concurrent(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "concurrent-calls";
  pthread_t th[CALL_THREADS];
  call_arg a[CALL_THREADS];
  for (uint32_t t = 0; t < CALL_THREADS; t++) {
    a[t] = (call_arg){x, t, 0};
    CHECK(pthread_create(&th[t], NULL, caller_thread, &a[t]) == 0, "pthread_create");
  }
  int rc = 0;
  for (uint32_t t = 0; t < CALL_THREADS; t++) {
    pthread_join(th[t], NULL);
    if (a[t].rc) rc = a[t].rc;
  }
  return rc;
}

static int t_self(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "rpc-to-self";
  uint8_t args[100];
  for (int i = 0; i < 100; i++)
    args[i] = (uint8_t)(i * 3 + 1);
  if (echo_call(c, check, x->rank, args, sizeof args)) return 1;
  /* Empty args to echo: the reply is just the header. */
  if (echo_call(c, check, x->rank, args, 0)) return 1;
  return 0;
}

static int t_errors(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "rpc-errors";
  uint8_t args[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  void *reply = (void *)args;
  size_t rlen = 12345;
  /* Unknown function id: answered at once, not after rpc_timeout_ms. */
  uint64_t t0 = now_ms();
  int rc = nexar_rpc(c, x->next, FN_UNKNOWN, args, sizeof args, &reply, &rlen);
  uint64_t dt = now_ms() - t0;
  CHECK(rc == NEXAR_ERR_RPC_NO_HANDLER, "unknown fn id: %d (%s), expected RPC_NO_HANDLER", rc,
        nexar_strerror(rc));
  CHECK(dt < 1000, "unknown fn id answered after %llu ms (rpc timeout %d ms): not at once",
        (unsigned long long)dt, RPC_TIMEOUT_MS);
  CHECK(reply == NULL && rlen == 0, "failed rpc left reply %p, reply_len %zu", reply, rlen);
  CHECK(nexar_last_error()[0] != '\0', "last_error empty after RPC_NO_HANDLER");
  /* Unknown fn id on self too. */
  reply = (void *)args;
  rlen = 1;
  rc = nexar_rpc(c, x->rank, FN_UNKNOWN, args, sizeof args, &reply, &rlen);
  CHECK(rc == NEXAR_ERR_RPC_NO_HANDLER, "unknown fn id on self: %d (%s)", rc, nexar_strerror(rc));
  CHECK(reply == NULL && rlen == 0, "failed rpc left reply %p, reply_len %zu", reply, rlen);

  /* A handler returning non-zero: RPC_FAILED, nothing delivered. */
  reply = (void *)args;
  rlen = 12345;
  t0 = now_ms();
  rc = nexar_rpc(c, x->next, FN_FAIL, args, sizeof args, &reply, &rlen);
  dt = now_ms() - t0;
  CHECK(rc == NEXAR_ERR_RPC_FAILED, "failing handler: %d (%s), expected RPC_FAILED", rc,
        nexar_strerror(rc));
  CHECK(reply == NULL && rlen == 0, "RPC_FAILED left reply %p, reply_len %zu", reply, rlen);
  CHECK(dt < 1000, "failing handler answered after %llu ms", (unsigned long long)dt);

  /* Argument errors. */
  reply = (void *)args;
  rlen = 5;
  rc = nexar_rpc(c, x->n, FN_ECHO, args, sizeof args, &reply, &rlen);
  CHECK(rc == NEXAR_ERR_INVALID_RANK, "rpc to rank %u: %d (%s), expected INVALID_RANK", x->n, rc,
        nexar_strerror(rc));
  CHECK(reply == NULL && rlen == 0, "INVALID_RANK left reply %p, reply_len %zu", reply, rlen);
  rc = nexar_rpc(c, x->next, FN_ECHO, NULL, 10, &reply, &rlen);
  CHECK(rc == NEXAR_ERR_INVALID_ARGUMENT, "NULL args with length 10: %d (%s)", rc,
        nexar_strerror(rc));
  rc = nexar_rpc(c, x->next, FN_ECHO, args, sizeof args, NULL, &rlen);
  CHECK(rc == NEXAR_ERR_INVALID_ARGUMENT, "NULL reply pointer: %d (%s)", rc, nexar_strerror(rc));
  rc = nexar_rpc(c, x->next, FN_ECHO, args, sizeof args, &reply, NULL);
  CHECK(rc == NEXAR_ERR_INVALID_ARGUMENT, "NULL reply_len pointer: %d (%s)", rc,
        nexar_strerror(rc));
  rc = nexar_rpc(NULL, x->next, FN_ECHO, args, sizeof args, &reply, &rlen);
  CHECK(rc == NEXAR_ERR_INVALID_ARGUMENT, "NULL client: %d (%s)", rc, nexar_strerror(rc));
  rc = nexar_rpc_register(NULL, 42, h_temp, NULL);
  CHECK(rc == NEXAR_ERR_INVALID_ARGUMENT, "register on NULL client: %d (%s)", rc,
        nexar_strerror(rc));
  /* Unregistering an id that has no handler is harmless. */
  CHECK_OK(nexar_rpc_register(c, 4242, NULL, NULL));
  return 0;
}

static int t_big(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "4MiB-args-and-reply";
  size_t len = (size_t)4 << 20;
  uint8_t *args = xmalloc(len);
  for (size_t i = 0; i < len; i++)
    args[i] = pat(x->rank, i);
  uint32_t targets[2] = {x->next, x->rank};
  for (int k = 0; k < 2; k++) {
    void *reply = NULL;
    size_t rlen = 0;
    uint64_t t0 = now_ms();
    int rc = nexar_rpc(c, targets[k], FN_BIG, args, len, &reply, &rlen);
    uint64_t dt = now_ms() - t0;
    size_t bad = len;
    if (rc == 0 && rlen == len && reply) {
      const uint8_t *r = reply;
      for (size_t i = 0; i < len; i++)
        if (r[i] != (uint8_t)(args[i] + 1u)) {
          bad = i;
          break;
        }
    }
    nexar_free(reply);
    if (rc) free(args);
    CHECK(rc == 0, "4 MiB rpc to rank %u: %d (%s)%s", targets[k], rc, nexar_strerror(rc),
          rc == NEXAR_ERR_RPC_FAILED ? " - the handler saw corrupted args" : "");
    if (rlen != len || bad != len) free(args);
    CHECK(rlen == len, "4 MiB rpc to rank %u: reply of %zu bytes", targets[k], rlen);
    CHECK(bad == len, "4 MiB rpc to rank %u: reply byte %zu wrong", targets[k], bad);
    if (x->rank == 0)
      printf("  rank 0: 4 MiB rpc round trip to rank %u in %llu ms\n", targets[k],
             (unsigned long long)dt);
  }
  free(args);
  return 0;
}

/* Caller r asks r+1 to send a p2p message to r+2; rank x gets it from prev. */
static int t_forward(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "handler-does-p2p";
  uint32_t dest = (x->rank + 2) % x->n;
  uint32_t a[3] = {dest, T_FWD + x->rank, x->rank * 100u + 5u};
  void *reply = NULL;
  size_t rlen = 0;
  CHECK_OK(nexar_rpc(c, x->next, FN_FORWARD, a, sizeof a, &reply, &rlen));
  int32_t hrc = -999;
  if (reply && rlen == sizeof hrc) memcpy(&hrc, reply, sizeof hrc);
  nexar_free(reply);
  CHECK(rlen == sizeof hrc, "forward reply of %zu bytes", rlen);
  CHECK(hrc == 0, "nexar_send inside the handler on rank %u returned %d (%s)", x->next, hrc,
        nexar_strerror(hrc));
  uint32_t from_caller = (x->rank + 1) % x->n; /* the rank whose call made prev send to us */
  uint32_t v = 0;
  CHECK_OK(nexar_recv(c, &v, sizeof v, x->prev, T_FWD + from_caller));
  CHECK(v == from_caller * 100u + 5u, "forwarded value %u, expected %u", v,
        from_caller * 100u + 5u);
  return 0;
}

/* Caller r calls FN_NESTED on r+1, whose handler calls FN_ECHO on r+2. */
static int t_nested(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "handler-does-rpc";
  uint8_t args[5] = {9, 8, 7, 6, (uint8_t)x->rank};
  void *reply = NULL;
  size_t rlen = 0;
  CHECK_OK(nexar_rpc(c, x->next, FN_NESTED, args, sizeof args, &reply, &rlen));
  uint32_t hdr[2] = {UINT32_MAX, UINT32_MAX};
  int ok = reply && rlen == 8 + sizeof args;
  if (ok) {
    memcpy(hdr, reply, sizeof hdr);
    const uint8_t *r = reply;
    for (size_t i = 0; i < sizeof args; i++)
      if (r[8 + i] != (uint8_t)(args[sizeof args - 1 - i] ^ 0x5A)) ok = 0;
  }
  nexar_free(reply);
  uint32_t server = (x->rank + 2) % x->n;
  CHECK(ok, "nested reply wrong (%zu bytes)", rlen);
  CHECK(hdr[0] == server && hdr[1] == x->next,
        "nested reply served by %u for caller %u, expected %u for %u", hdr[0], hdr[1], server,
        x->next);
  return 0;
}

static int t_zero(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "zero-length";
  uint8_t dummy = 0;
  for (uint32_t k = 0; k < 2; k++) {
    uint32_t target = k ? x->rank : x->next;
    void *reply = &dummy;
    size_t rlen = 99;
    int rc = nexar_rpc(c, target, FN_ZERO, &dummy, 0, &reply, &rlen);
    CHECK(rc == 0, "zero-length rpc to rank %u: %d (%s)%s", target, rc, nexar_strerror(rc),
          rc == NEXAR_ERR_RPC_FAILED ? " - handler saw args_len != 0" : "");
    CHECK(rlen == 0, "zero-length reply reported %zu bytes", rlen);
    if (reply != &dummy) nexar_free(reply);
    CHECK(reply != &dummy, "a successful rpc left *reply untouched");
  }
  return 0;
}

/* A handler that works, is unregistered (then NO_HANDLER), and is registered again. */
static int t_unregister(rank_ctx *x) {
  nexar_client *c = x->c;
  const char *check = "unregister";
  void *reply = NULL;
  size_t rlen = 0;
  uint32_t v = 0;
  CHECK_OK(nexar_rpc(c, x->next, FN_TEMP, &v, 0, &reply, &rlen));
  if (reply && rlen == 4) memcpy(&v, reply, 4);
  nexar_free(reply);
  CHECK(rlen == 4 && v == 1000u + x->next, "temp handler reply %u (%zu bytes)", v, rlen);
  if (p2p_sync(x)) return 1;
  CHECK_OK(nexar_rpc_register(c, FN_TEMP, NULL, NULL));
  if (p2p_sync(x)) return 1;
  uint64_t t0 = now_ms();
  int rc = nexar_rpc(c, x->next, FN_TEMP, &v, 0, &reply, &rlen);
  uint64_t dt = now_ms() - t0;
  CHECK(rc == NEXAR_ERR_RPC_NO_HANDLER, "unregistered handler: %d (%s), expected NO_HANDLER", rc,
        nexar_strerror(rc));
  CHECK(dt < 1000, "NO_HANDLER after %llu ms", (unsigned long long)dt);
  CHECK(reply == NULL && rlen == 0, "NO_HANDLER left reply %p, reply_len %zu", reply, rlen);
  if (p2p_sync(x)) return 1;
  CHECK_OK(nexar_rpc_register(c, FN_TEMP, h_temp, (void *)(uintptr_t)(2000u + x->rank)));
  if (p2p_sync(x)) return 1;
  CHECK_OK(nexar_rpc(c, x->next, FN_TEMP, &v, 0, &reply, &rlen));
  if (reply && rlen == 4) memcpy(&v, reply, 4);
  nexar_free(reply);
  CHECK(rlen == 4 && v == 2000u + x->next, "re-registered handler reply %u (%zu bytes)", v, rlen);
  return 0;
}

/* ------------------------------------------ timeouts (a separate 2-rank world) */

static atomic_int g_slow_running;

static int h_slow(void *ctx, uint32_t caller, const void *args, size_t args_len, void **reply,
                  size_t *reply_len) {
  atomic_store(&g_slow_running, 1);
  usleep(1200 * 1000);
  uint32_t *r = malloc(sizeof *r);
  atomic_store(&g_slow_running, 0);
  if (!r) return -1;
  *r = 0x51077u;
  *reply = r;
  *reply_len = sizeof *r;
  return 0;
}

typedef struct unreg_arg {
  nexar_client *c;
  int rc;
  int running_after;
} unreg_arg;

static void *unregister_slow(void *p) {
  unreg_arg *a = p;
  a->rc = nexar_rpc_register(a->c, FN_TEMP, NULL, NULL);
  a->running_after = atomic_load(&g_slow_running);
  return NULL;
}

/* rpc_timeout_ms 500: a request before registration is NO_HANDLER; a handler slower
 * than the timeout gives TIMEOUT, and its late reply is not taken for a later call's;
 * unregistering waits until the running handler has returned. */
static int timeout_checks(void) {
  nexar_client *c = NULL;
  const char *check = "rpc-timeout";
  nexar_config cfg;
  CHECK_OK(nexar_config_default(&cfg));
  cfg.rpc_timeout_ms = 500;
  cfg.collective_timeout_ms = 5000;
  cfg.connect_timeout_ms = 20000;
  nexar_client *cl[2] = {NULL, NULL};
  CHECK_OK(nexar_bootstrap_local(cl, 2, &cfg));
  c = cl[0];
  g_clients[0] = cl[0];
  g_clients[1] = cl[1];
  int result = 0;
  void *reply = NULL;
  size_t rlen = 0;
  uint8_t arg = 1;
  uint64_t t0 = now_ms();
  int rc = nexar_rpc(cl[0], 1, FN_ECHO, &arg, 1, &reply, &rlen);
  uint64_t dt = now_ms() - t0;
  if (rc != NEXAR_ERR_RPC_NO_HANDLER || dt > 400)
    result = fail_at(c, check, __LINE__,
                     "call before registration: %d (%s) after %llu ms, expected RPC_NO_HANDLER "
                     "at once",
                     rc, nexar_strerror(rc), (unsigned long long)dt);
  if (!result && (rc = nexar_rpc_register(cl[1], FN_TEMP, h_slow, NULL)) != 0)
    result = fail_at(c, check, __LINE__, "register: %d", rc);
  if (!result && (rc = nexar_rpc_register(cl[1], FN_ECHO, h_echo, cl[1])) != 0)
    result = fail_at(c, check, __LINE__, "register: %d", rc);
  if (!result) {
    reply = &arg;
    rlen = 3;
    t0 = now_ms();
    rc = nexar_rpc(cl[0], 1, FN_TEMP, &arg, 1, &reply, &rlen);
    dt = now_ms() - t0;
    if (rc != NEXAR_ERR_TIMEOUT || dt < 400 || dt > 1100)
      result = fail_at(c, check, __LINE__,
                       "handler slower than rpc_timeout_ms 500: %d (%s) after %llu ms, expected "
                       "TIMEOUT after about 500 ms",
                       rc, nexar_strerror(rc), (unsigned long long)dt);
    else if (reply != NULL || rlen != 0)
      result =
          fail_at(c, check, __LINE__, "timed-out rpc left reply %p, reply_len %zu", reply, rlen);
    else if (strstr(nexar_last_error(), "1") == NULL)
      result =
          fail_at(c, check, __LINE__, "last_error does not name rank 1: %s", nexar_last_error());
  }
  if (!result) {
    /* The slow handler still runs; unregistering it waits for it to return. */
    unreg_arg ua = {cl[1], -1, -1};
    pthread_t th;
    if (pthread_create(&th, NULL, unregister_slow, &ua)) {
      fprintf(stderr, "FAIL: pthread_create\n");
      exit(1);
    }
    /* Meanwhile a fast call gets its own reply, not the late one. */
    for (int k = 0; k < 20 && !result; k++) {
      uint8_t a2[4] = {1, 2, 3, (uint8_t)k};
      result = echo_call(cl[0], check, 1, a2, sizeof a2);
      usleep(50 * 1000);
    }
    pthread_join(th, NULL);
    if (!result && ua.rc != 0)
      result = fail_at(c, check, __LINE__, "unregister: %d (%s)", ua.rc, nexar_strerror(ua.rc));
    else if (!result && ua.running_after != 0)
      result = fail_at(c, check, __LINE__,
                       "rpc_register(fn NULL) returned while the handler was still running");
  }
  nexar_client_del(cl[0]);
  nexar_client_del(cl[1]);
  g_clients[0] = g_clients[1] = NULL;
  if (!result) printf("ok   %-20s\n", "rpc-timeout");
  return result;
}

typedef int (*check_fn)(rank_ctx *);
static const struct {
  const char *name;
  check_fn fn;
} checks[] = {
    {"concurrent-calls", t_concurrent},
    {"rpc-to-self", t_self},
    {"rpc-errors", t_errors},
    {"4MiB-args-and-reply", t_big},
    {"handler-does-p2p", t_forward},
    {"handler-does-rpc", t_nested},
    {"zero-length", t_zero},
    {"unregister", t_unregister},
};

static int run_rank(nexar_client *c) {
  const char *check = "register";
  rank_ctx x = {c, nexar_rank(c), nexar_world_size(c), 0, 0};
  x.next = (x.rank + 1) % x.n;
  x.prev = (x.rank + x.n - 1) % x.n;
  CHECK_OK(nexar_rpc_register(c, FN_ECHO, h_echo, c));
  CHECK_OK(nexar_rpc_register(c, FN_FAIL, h_fail, c));
  CHECK_OK(nexar_rpc_register(c, FN_BIG, h_big, c));
  CHECK_OK(nexar_rpc_register(c, FN_FORWARD, h_forward, c));
  CHECK_OK(nexar_rpc_register(c, FN_ZERO, h_zero, c));
  CHECK_OK(nexar_rpc_register(c, FN_TEMP, h_temp, (void *)(uintptr_t)(1000u + x.rank)));
  CHECK_OK(nexar_rpc_register(c, FN_NESTED, h_nested, c));
  if (p2p_sync(&x)) return 1;
  for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
    uint64_t t0 = now_ms();
    if (checks[i].fn(&x)) return 1;
    if (p2p_sync(&x)) return 1;
    if (x.rank == 0)
      printf("ok   %-20s (%llu ms)\n", checks[i].name, (unsigned long long)(now_ms() - t0));
  }
  return 0;
}

static void *rank_thread(void *p) {
  run_rank(p);
  return NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  nexar_config cfg;
  int rc = nexar_config_default(&cfg);
  if (rc) {
    fprintf(stderr, "FAIL: nexar_config_default: %s\n", nexar_last_error());
    return 1;
  }
  cfg.collective_timeout_ms = 5000;
  cfg.barrier_timeout_ms = 5000;
  cfg.rpc_timeout_ms = RPC_TIMEOUT_MS;
  cfg.connect_timeout_ms = 20000;
  nexar_client *cl[WORLD] = {NULL};
  rc = nexar_bootstrap_local(cl, WORLD, &cfg);
  if (rc) {
    fprintf(stderr, "FAIL: nexar_bootstrap_local(%d): %d (%s): %s\n", WORLD, rc, nexar_strerror(rc),
            nexar_last_error());
    return 1;
  }
  memcpy(g_clients, cl, sizeof cl);
  pthread_t th[WORLD];
  for (uint32_t i = 0; i < WORLD; i++)
    if (pthread_create(&th[i], NULL, rank_thread, cl[i])) {
      fprintf(stderr, "FAIL: pthread_create\n");
      return 1;
    }
  for (uint32_t i = 0; i < WORLD; i++)
    pthread_join(th[i], NULL);
  if (!atomic_load(&g_failed)) {
    /* Each rank: CALL_THREADS * CALLS_PER_THREAD + 2 (self) + 1 (nested). */
    long want = WORLD * (CALL_THREADS * CALLS_PER_THREAD + 3);
    long got = atomic_load(&g_echo_calls);
    if (got != want) {
      fprintf(stderr, "FAIL: echo handler ran %ld times, expected %ld\n", got, want);
      atomic_fetch_add(&g_failed, 1);
    }
    if (atomic_load(&g_bad_caller)) {
      fprintf(stderr, "FAIL: a handler was given a caller rank outside the world\n");
      atomic_fetch_add(&g_failed, 1);
    }
  }
  for (uint32_t i = 0; i < WORLD; i++) {
    nexar_client_del(cl[i]);
    g_clients[i] = NULL;
  }
  if (!atomic_load(&g_failed)) timeout_checks();
  if (atomic_load(&g_failed)) {
    fprintf(stderr, "rpc_test: FAILED\n");
    return 1;
  }
  printf("rpc_test: all checks passed\n");
  return 0;
}
