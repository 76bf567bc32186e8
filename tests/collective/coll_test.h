/* Shared helpers of the collective tests: ranks as threads over
 * nexar_bootstrap_local, per-rank per-element distinct inputs, and a
 * reference reduction computed independently of the library's kernels. */
#ifndef NX_TESTS_COLL_TEST_H
#define NX_TESTS_COLL_TEST_H

#include <nexar/nexar.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tctx {
  nexar_client *c; /* this rank's root communicator */
  uint32_t rank, n;
  void *arg;
} tctx;

typedef void (*rank_fn)(tctx *t);

extern uint32_t t_timeout_ms;

/* Bootstraps n ranks, runs fn on one thread per rank, joins, deletes. */
void t_run_world(uint32_t n, rank_fn fn, void *arg);
/* Failures: counted and printed; t_fatal exits the process at once. */
void t_fail(const tctx *t, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void t_fatal(const tctx *t, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int t_failures(void);
void *t_xmalloc(size_t n);

#define T_RC(t, call)                                                                              \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_) t_fatal((t), __LINE__, "%s -> %d: %s", #call, rc_, nexar_last_error());               \
  } while (0)
#define T_CHECK(t, cond, ...)                                                                      \
  do {                                                                                             \
    if (!(cond)) t_fail((t), __LINE__, __VA_ARGS__);                                               \
  } while (0)

/* Input element i of `rank` (exact in every dtype, see coll_util.c). */
void t_fill(void *buf, size_t count, nexar_dtype dt, nexar_op op, uint32_t rank, size_t idx0,
            int salt);
/* Float inputs whose sums and products round (floats only): for checking
 * that every rank gets the same bits. */
void t_fill_inexact(void *buf, size_t count, nexar_dtype dt, nexar_op op, uint32_t rank, int salt);
/* exp[i] = in(lo, idx0+i) op ... op in(hi-1, idx0+i), ranks in order
 * (NEXAR_AVG: the sum divided by hi - lo). */
void t_fold(void *exp, size_t count, nexar_dtype dt, nexar_op op, uint32_t lo, uint32_t hi,
            size_t idx0, int salt);
/* The identity of op for dt (sum 0, prod 1, min +inf / max, max -inf / min,
 * avg 0, band all ones, bor and bxor 0). */
void t_identity(void *buf, size_t count, nexar_dtype dt, nexar_op op);
/* Bitwise comparison; reports the first differing element. */
int t_check_buf(const tctx *t, int line, const char *what, const void *got, const void *exp,
                size_t count, nexar_dtype dt);
#define T_BUF(t, what, got, exp, count, dt)                                                        \
  t_check_buf((t), __LINE__, (what), (got), (exp), (count), (dt))

#endif
