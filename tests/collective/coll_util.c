/* Test harness and reference arithmetic for the collective tests. The
 * reference decodes each element, combines in double (floats, whose inputs
 * are chosen so every partial result is exact in the element type) or in
 * 64-bit two's complement (integers, wrapped to the width), and encodes. */
#include "coll_test.h"
#include "reduce/reduce.h" /* only the f16/bf16 converters, exact on our values */

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t t_timeout_ms = 10000;
static atomic_int failures;

int t_failures(void) {
  return atomic_load(&failures);
}

void *t_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "out of memory (%zu bytes)\n", n);
    exit(2);
  }
  return p;
}

static void vreport(const tctx *t, int line, const char *fmt, va_list ap) {
  char msg[600];
  vsnprintf(msg, sizeof msg, fmt, ap);
  fprintf(stderr, "FAIL [n=%u rank=%u] line %d: %s\n", t ? t->n : 0, t ? t->rank : 0, line, msg);
}

void t_fail(const tctx *t, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(t, line, fmt, ap);
  va_end(ap);
  if (atomic_fetch_add(&failures, 1) > 50) {
    fprintf(stderr, "too many failures\n");
    exit(1);
  }
}

void t_fatal(const tctx *t, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(t, line, fmt, ap);
  va_end(ap);
  fflush(stderr);
  exit(1); /* one rank stopping would leave the others to time out */
}

typedef struct targ {
  tctx t;
  rank_fn fn;
} targ;

static void *rank_main(void *p) {
  targ *a = p;
  a->fn(&a->t);
  return NULL;
}

void t_run_world(uint32_t n, rank_fn fn, void *arg) {
  nexar_config cfg;
  if (nexar_config_default(&cfg)) t_fatal(NULL, __LINE__, "config: %s", nexar_last_error());
  cfg.collective_timeout_ms = t_timeout_ms;
  cfg.barrier_timeout_ms = t_timeout_ms;
  nexar_client **cl = t_xmalloc(n * sizeof *cl);
  int rc = nexar_bootstrap_local(cl, n, &cfg);
  if (rc) t_fatal(NULL, __LINE__, "bootstrap_local(%u): %d %s", n, rc, nexar_last_error());
  targ *a = t_xmalloc(n * sizeof *a);
  pthread_t *th = t_xmalloc(n * sizeof *th);
  for (uint32_t i = 0; i < n; i++) {
    a[i] = (targ){.t = {.c = cl[i], .rank = i, .n = n, .arg = arg}, .fn = fn};
    if (nexar_rank(cl[i]) != i || nexar_world_size(cl[i]) != n)
      t_fatal(NULL, __LINE__, "client %u has rank %u of %u", i, nexar_rank(cl[i]),
              nexar_world_size(cl[i]));
    if (pthread_create(&th[i], NULL, rank_main, &a[i])) t_fatal(NULL, __LINE__, "pthread_create");
  }
  for (uint32_t i = 0; i < n; i++)
    pthread_join(th[i], NULL);
  for (uint32_t i = 0; i < n; i++)
    nexar_client_del(cl[i]);
  free(th);
  free(a);
  free(cl);
}

/* ------------------------------------------------------------ elements */

static int is_float(nexar_dtype dt) {
  return dt == NEXAR_F32 || dt == NEXAR_F64 || dt == NEXAR_F16 || dt == NEXAR_BF16;
}
static int is_signed(nexar_dtype dt) {
  return dt == NEXAR_I8 || dt == NEXAR_I32 || dt == NEXAR_I64;
}

static double get_f(const void *buf, size_t i, nexar_dtype dt) {
  const char *p = (const char *)buf + i * nexar_dtype_size(dt);
  float f;
  double d;
  uint16_t h;
  switch (dt) {
  case NEXAR_F32:
    memcpy(&f, p, 4);
    return f;
  case NEXAR_F64:
    memcpy(&d, p, 8);
    return d;
  case NEXAR_F16:
    memcpy(&h, p, 2);
    return nx_f16_to_f32(h);
  default:
    memcpy(&h, p, 2);
    return nx_bf16_to_f32(h);
  }
}

static void put_f(void *buf, size_t i, nexar_dtype dt, double v) {
  char *p = (char *)buf + i * nexar_dtype_size(dt);
  float f = (float)v;
  uint16_t h;
  switch (dt) {
  case NEXAR_F32:
    memcpy(p, &f, 4);
    break;
  case NEXAR_F64:
    memcpy(p, &v, 8);
    break;
  case NEXAR_F16:
    h = nx_f32_to_f16(f);
    memcpy(p, &h, 2);
    break;
  default:
    h = nx_f32_to_bf16(f);
    memcpy(p, &h, 2);
    break;
  }
}

/* Raw bits zero-extended (little-endian host). */
static uint64_t get_u(const void *buf, size_t i, nexar_dtype dt) {
  size_t es = nexar_dtype_size(dt);
  uint64_t u = 0;
  memcpy(&u, (const char *)buf + i * es, es);
  return u;
}
static void put_u(void *buf, size_t i, nexar_dtype dt, uint64_t u) {
  size_t es = nexar_dtype_size(dt);
  memcpy((char *)buf + i * es, &u, es);
}
static int64_t sext(uint64_t u, nexar_dtype dt) {
  unsigned bits = (unsigned)nexar_dtype_size(dt) * 8;
  if (bits == 64) return (int64_t)u;
  uint64_t m = 1ull << (bits - 1);
  u &= (1ull << bits) - 1;
  return (int64_t)((u ^ m) - m);
}

static double gen(nexar_dtype dt, nexar_op op, uint32_t rank, size_t i, int salt) {
  if (op >= NEXAR_BAND) { /* bit patterns that differ per rank and element */
    uint64_t h = ((uint64_t)rank * 0x9e3779b97f4a7c15ull) ^
                 ((uint64_t)(i + 1) * 0xc2b2ae3d27d4eb4full) ^ (uint64_t)salt;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return (double)(int64_t)(h % 2000003) - 1000001; /* fits i32; narrower types wrap */
  }
  if (op == NEXAR_PROD) {
    static const double ft[5] = {1, 2, -1, 0.5, -2};
    size_t k = ((size_t)rank * 3 + i + (size_t)salt) % 5;
    return is_float(dt) ? ft[k] : (double)k - 2;
  }
  /* -7 .. 15: sums over 9 ranks stay exact in bf16 (< 256). */
  return (double)(((size_t)rank * 37 + i * 11 + (size_t)salt * 5) % 23) - 7;
}

static void put_v(void *buf, size_t i, nexar_dtype dt, double v) {
  if (is_float(dt))
    put_f(buf, i, dt, v);
  else
    put_u(buf, i, dt, (uint64_t)(int64_t)v);
}

void t_fill_inexact(void *buf, size_t count, nexar_dtype dt, nexar_op op, uint32_t rank, int salt) {
  for (size_t i = 0; i < count; i++) {
    uint64_t h = ((uint64_t)rank * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)i * 0xc2b2ae3d27d4eb4full) ^
                 ((uint64_t)salt * 0x165667b19e3779f9ull);
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    double u = (double)(h % 2000001) / 1000000.0 - 1.0; /* [-1, 1] */
    put_f(buf, i, dt, op == NEXAR_PROD ? 1.0 + u / 7.0 : u * 1000.0 / 3.0);
  }
}

void t_fill(void *buf, size_t count, nexar_dtype dt, nexar_op op, uint32_t rank, size_t idx0,
            int salt) {
  for (size_t i = 0; i < count; i++)
    put_v(buf, i, dt, gen(dt, op, rank, idx0 + i, salt));
}

static void combine(void *acc, size_t i, nexar_dtype dt, nexar_op op, double xv) {
  if (op == NEXAR_AVG) op = NEXAR_SUM; /* divided once at the end (t_fold) */
  if (is_float(dt)) {
    double a = get_f(acc, i, dt), r;
    switch (op) {
    case NEXAR_SUM:
      r = a + xv;
      break;
    case NEXAR_PROD:
      r = a * xv;
      break;
    case NEXAR_MIN:
      r = fmin(a, xv);
      break;
    default:
      r = fmax(a, xv);
      break;
    }
    put_f(acc, i, dt, r);
    return;
  }
  size_t es = nexar_dtype_size(dt);
  uint64_t mask = es == 8 ? ~0ull : (1ull << (8 * es)) - 1;
  uint64_t a = get_u(acc, i, dt), x = (uint64_t)(int64_t)xv & mask, r;
  int lt = is_signed(dt) ? sext(a, dt) < sext(x, dt) : a < x;
  switch (op) {
  case NEXAR_SUM:
    r = a + x;
    break;
  case NEXAR_PROD:
    r = a * x;
    break;
  case NEXAR_MIN:
    r = lt ? a : x;
    break;
  case NEXAR_BAND:
    r = a & x;
    break;
  case NEXAR_BOR:
    r = a | x;
    break;
  case NEXAR_BXOR:
    r = a ^ x;
    break;
  default:
    r = lt ? x : a;
    break;
  }
  put_u(acc, i, dt, r);
}

/* The average's final division, independently of the library: floats in
 * double (the inputs are small integers, so k/n is never a tie of the
 * narrow format and one rounding from double is exact enough), integers by
 * C division of the sign-extended wrapped sum. */
static void divide(void *acc, size_t count, nexar_dtype dt, uint32_t n) {
  for (size_t i = 0; i < count; i++) {
    if (is_float(dt)) {
      put_f(acc, i, dt, get_f(acc, i, dt) / n);
    } else if (is_signed(dt)) {
      put_u(acc, i, dt, (uint64_t)(sext(get_u(acc, i, dt), dt) / (int64_t)n));
    } else {
      put_u(acc, i, dt, get_u(acc, i, dt) / n);
    }
  }
}

void t_fold(void *exp, size_t count, nexar_dtype dt, nexar_op op, uint32_t lo, uint32_t hi,
            size_t idx0, int salt) {
  t_fill(exp, count, dt, op, lo, idx0, salt);
  for (uint32_t r = lo + 1; r < hi; r++)
    for (size_t i = 0; i < count; i++)
      combine(exp, i, dt, op, gen(dt, op, r, idx0 + i, salt));
  if (op == NEXAR_AVG && hi - lo > 1) divide(exp, count, dt, hi - lo);
}

void t_identity(void *buf, size_t count, nexar_dtype dt, nexar_op op) {
  size_t es = nexar_dtype_size(dt);
  for (size_t i = 0; i < count; i++) {
    uint64_t u = 0;
    if (op == NEXAR_SUM || op == NEXAR_AVG || op == NEXAR_BOR || op == NEXAR_BXOR) {
      u = 0;
    } else if (op == NEXAR_BAND) {
      u = es == 8 ? ~0ull : (1ull << (8 * es)) - 1;
    } else if (op == NEXAR_PROD) {
      if (!is_float(dt)) {
        u = 1;
      } else {
        put_f(buf, i, dt, 1.0);
        continue;
      }
    } else if (is_float(dt)) {
      put_f(buf, i, dt, op == NEXAR_MIN ? INFINITY : -INFINITY);
      continue;
    } else {
      uint64_t all = es == 8 ? ~0ull : (1ull << (8 * es)) - 1;
      if (is_signed(dt))
        u = op == NEXAR_MIN ? all >> 1 : (all >> 1) + 1; /* max: 0x7f.., min: 0x80.. */
      else
        u = op == NEXAR_MIN ? all : 0;
    }
    put_u(buf, i, dt, u);
  }
}

int t_check_buf(const tctx *t, int line, const char *what, const void *got, const void *exp,
                size_t count, nexar_dtype dt) {
  size_t es = nexar_dtype_size(dt);
  if (count == 0 || memcmp(got, exp, count * es) == 0) return 1;
  size_t i = 0;
  while (memcmp((const char *)got + i * es, (const char *)exp + i * es, es) == 0)
    i++;
  size_t bad = 0;
  for (size_t k = i; k < count; k++)
    bad += memcmp((const char *)got + k * es, (const char *)exp + k * es, es) != 0;
  t_fail(t, line, "%s (%s, count %zu): element %zu is 0x%llx, expected 0x%llx (%zu wrong)", what,
         nexar_dtype_name(dt), count, i, (unsigned long long)get_u(got, i, dt),
         (unsigned long long)get_u(exp, i, dt), bad);
  return 0;
}
