/*
 * nexar-perf: collective and point-to-point benchmark in the style of
 * nccl-tests.
 *
 *   nexar-perf OP -n RANKS [-b MIN] [-e MAX] [-f FACTOR] [-d DTYPE] [-o REDOP]
 *              [-r ROOT] [-w WARMUP] [-i ITERS] [-c 0|1] [-a 0|1|2|3]
 *              [--procs] [--csv FILE]
 *
 * OP: all_reduce broadcast all_gather reduce_scatter reduce all_to_all gather
 * scatter scan barrier sendrecv (underscores optional).
 *
 * Ranks run as threads of this process (nexar_bootstrap_local) by default.
 * With --procs, a seed runs in this process on 127.0.0.1 and the program
 * starts itself RANKS times with NEXAR_SEED_ADDR, NEXAR_WORLD_SIZE, NEXAR_RANK
 * and NEXAR_CLUSTER_TOKEN set (and --worker appended); rank 0 prints. Started
 * by a launcher instead (nexar-run -n N -- nexar-perf OP ...), a copy that
 * finds NEXAR_SEED_ADDR and no -n (or --worker) runs as one rank.
 *
 * Conventions (nccl-tests): the size column is the largest buffer an op
 * touches on one rank (all_gather: the gathered total; reduce_scatter: the
 * input; all_to_all: the data each rank sends; gather/scatter: the root's
 * total), count = size / sizeof(type). all_reduce, broadcast, reduce and scan
 * run in place, the others out of place. Each rank times ITERS back-to-back
 * ops after WARMUP ops and a barrier; its time is the mean per op; the table
 * reports the maximum over ranks (-a 3, default; -a 0 rank 0, 1 mean, 2 min).
 * sendrecv is a ping-pong between ranks 0 and 1: time = half the round trip
 * measured on rank 0. algbw = size / time (GB = 1e9 B); busbw = algbw times
 * 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter,
 * all_to_all, gather and scatter, 1 for broadcast, reduce, scan and sendrecv.
 *
 * -c 1 (default) runs one more op after the timing on fresh inputs that
 * differ per rank and per element and counts the elements that differ from
 * a reference computed locally (#wrong); the exit status is 1 if any did.
 * At the end the peak resident set size (getrusage) is printed: the maximum
 * over ranks with --procs, the whole process with threads.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <nexar/nexar.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_THREAD_RANKS 256
#define MAX_PROC_RANKS 1024
#define PROGRESS_AFTER_S 2.0  /* a size running longer than this shows progress */
#define PROGRESS_EVERY_S 10.0 /* when stderr is not a terminal */

typedef enum {
  OP_ALL_REDUCE,
  OP_BROADCAST,
  OP_ALL_GATHER,
  OP_REDUCE_SCATTER,
  OP_REDUCE,
  OP_ALL_TO_ALL,
  OP_GATHER,
  OP_SCATTER,
  OP_SCAN,
  OP_BARRIER,
  OP_SENDRECV,
  OP_COUNT
} bench_op;

static const char *const op_names[OP_COUNT] = {
    "all_reduce", "broadcast", "all_gather", "reduce_scatter", "reduce",  "all_to_all",
    "gather",     "scatter",   "scan",       "barrier",        "sendrecv"};

/* Ops whose data is split into one block per rank. */
static int op_blocked(bench_op op) {
  return op == OP_ALL_GATHER || op == OP_REDUCE_SCATTER || op == OP_ALL_TO_ALL || op == OP_GATHER ||
         op == OP_SCATTER;
}
static int op_reduces(bench_op op) {
  return op == OP_ALL_REDUCE || op == OP_REDUCE_SCATTER || op == OP_REDUCE || op == OP_SCAN;
}
static int op_rooted(bench_op op) {
  return op == OP_BROADCAST || op == OP_REDUCE || op == OP_GATHER || op == OP_SCATTER;
}

static double busbw_factor(bench_op op, uint32_t n) {
  double dn = (double)n;
  switch (op) {
  case OP_ALL_REDUCE:
    return 2.0 * (dn - 1) / dn;
  case OP_ALL_GATHER:
  case OP_REDUCE_SCATTER:
  case OP_ALL_TO_ALL:
  case OP_GATHER:
  case OP_SCATTER:
    return (dn - 1) / dn;
  case OP_BARRIER:
    return 0;
  default:
    return 1;
  }
}

/* nccl-tests type names first, then libnexar's. */
static const struct {
  const char *nccl, *nexar;
  nexar_dtype dt;
} dtypes[] = {{"float", "f32", NEXAR_F32},  {"double", "f64", NEXAR_F64},
              {"half", "f16", NEXAR_F16},   {"bfloat16", "bf16", NEXAR_BF16},
              {"int8", "i8", NEXAR_I8},     {"int32", "i32", NEXAR_I32},
              {"int64", "i64", NEXAR_I64},  {"uint8", "u8", NEXAR_U8},
              {"uint32", "u32", NEXAR_U32}, {"uint64", "u64", NEXAR_U64}};
#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])

static const char *dtype_label(nexar_dtype dt) {
  for (size_t i = 0; i < N_DTYPES; i++)
    if (dtypes[i].dt == dt) return dtypes[i].nccl;
  return "?";
}

typedef struct opts {
  bench_op op;
  uint32_t nranks; /* 0: not given */
  size_t min_bytes, max_bytes;
  uint64_t factor;
  nexar_dtype dt;
  nexar_op redop;
  uint32_t root;
  long warmup, iters;
  int check;
  int agg; /* 0 rank 0, 1 mean, 2 min, 3 max */
  int procs, worker;
  const char *csv;
} opts;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------ parsing */

static int parse_u64(const char *s, uint64_t *out) {
  if (!s || !*s || *s == '-') return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end) return -1;
  *out = v;
  return 0;
}

/* Bytes with an optional K, M or G suffix (powers of 1024). */
static int parse_bytes(const char *s, size_t *out) {
  if (!s || !*s || *s == '-') return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  unsigned shift = 0;
  switch (*end) {
  case 'k':
  case 'K':
    shift = 10;
    break;
  case 'm':
  case 'M':
    shift = 20;
    break;
  case 'g':
  case 'G':
    shift = 30;
    break;
  case '\0':
    break;
  default:
    return -1;
  }
  if (*end && end[1] && !((end[1] == 'B' || end[1] == 'b') && !end[2]) &&
      !(end[1] == 'i' && end[2] == 'B' && !end[3]))
    return -1;
  if (shift && v > (SIZE_MAX >> shift)) return -1;
  *out = (size_t)(v << shift);
  return 0;
}

static int parse_op(const char *s, bench_op *out) {
  char norm[32];
  size_t k = 0;
  for (const char *p = s; *p && k + 1 < sizeof norm; p++)
    if (*p != '_' && *p != '-') norm[k++] = *p;
  norm[k] = '\0';
  if (!strcmp(norm, "allreduce"))
    *out = OP_ALL_REDUCE;
  else if (!strcmp(norm, "broadcast") || !strcmp(norm, "bcast"))
    *out = OP_BROADCAST;
  else if (!strcmp(norm, "allgather"))
    *out = OP_ALL_GATHER;
  else if (!strcmp(norm, "reducescatter"))
    *out = OP_REDUCE_SCATTER;
  else if (!strcmp(norm, "reduce"))
    *out = OP_REDUCE;
  else if (!strcmp(norm, "alltoall"))
    *out = OP_ALL_TO_ALL;
  else if (!strcmp(norm, "gather"))
    *out = OP_GATHER;
  else if (!strcmp(norm, "scatter"))
    *out = OP_SCATTER;
  else if (!strcmp(norm, "scan"))
    *out = OP_SCAN;
  else if (!strcmp(norm, "barrier"))
    *out = OP_BARRIER;
  else if (!strcmp(norm, "sendrecv") || !strcmp(norm, "pingpong"))
    *out = OP_SENDRECV;
  else
    return -1;
  return 0;
}

static int parse_dtype(const char *s, nexar_dtype *out) {
  for (size_t i = 0; i < N_DTYPES; i++)
    if (!strcmp(s, dtypes[i].nccl) || !strcmp(s, dtypes[i].nexar)) {
      *out = dtypes[i].dt;
      return 0;
    }
  return -1;
}

static int parse_redop(const char *s, nexar_op *out) {
  static const nexar_op ops[] = {NEXAR_SUM, NEXAR_PROD, NEXAR_MIN, NEXAR_MAX};
  for (size_t i = 0; i < 4; i++)
    if (!strcmp(s, nexar_op_name(ops[i]))) {
      *out = ops[i];
      return 0;
    }
  return -1;
}

static void usage(FILE *f) {
  fprintf(f, "usage: nexar-perf OP -n RANKS [-b MIN] [-e MAX] [-f FACTOR] [-d DTYPE] [-o REDOP]\n"
             "                  [-r ROOT] [-w WARMUP] [-i ITERS] [-c 0|1] [-a 0|1|2|3]\n"
             "                  [--procs] [--csv FILE]\n"
             "\n"
             "OP: all_reduce broadcast all_gather reduce_scatter reduce all_to_all gather\n"
             "    scatter scan barrier sendrecv (ping-pong between ranks 0 and 1)\n"
             "  -n RANKS   world size (ranks are threads of this process unless --procs)\n"
             "  -b, -e     smallest and largest size in bytes, K/M/G suffixes (8, 64M)\n"
             "  -f FACTOR  multiply the size by FACTOR between rows (2)\n"
             "  -d DTYPE   float double half bfloat16 int8 int32 int64 uint8 uint32 uint64\n"
             "             (or f32 f64 f16 bf16 i8 i32 i64 u8 u32 u64; default float)\n"
             "  -o REDOP   sum prod min max (sum)\n"
             "  -r ROOT    root of broadcast, reduce, gather, scatter (0)\n"
             "  -w, -i     warm-up and timed iterations per size (5, 20)\n"
             "  -c 0|1     check results against a local reference (1)\n"
             "  -a 0..3    time reported: 0 rank 0, 1 mean, 2 min, 3 max over ranks (3)\n"
             "  --procs    ranks as processes through a seed in this process\n"
             "  --csv FILE append one row per size to FILE\n"
             "  --worker   run as one rank joining through NEXAR_SEED_ADDR (set by --procs,\n"
             "             implied under nexar-run when -n is not given)\n");
}

static int parse_args(int argc, char **argv, opts *o) {
  memset(o, 0, sizeof *o);
  o->min_bytes = 8;
  o->max_bytes = 64u << 20;
  o->factor = 2;
  o->dt = NEXAR_F32;
  o->redop = NEXAR_SUM;
  o->warmup = 5;
  o->iters = 20;
  o->check = 1;
  o->agg = 3;
  static const struct option longs[] = {{"procs", no_argument, NULL, 'P'},
                                        {"worker", no_argument, NULL, 'W'},
                                        {"csv", required_argument, NULL, 'C'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  int have_op = 0;
  optind = 1;
  for (;;) {
    /* leading '-': non-options come back as option 1, in order */
    int ch = getopt_long(argc, argv, "-n:b:e:f:d:o:r:w:i:c:a:h", longs, NULL);
    if (ch == -1) break;
    if (ch == 1) {
      if (have_op) {
        fprintf(stderr, "nexar-perf: unexpected argument '%s'\n", optarg);
        return -1;
      }
      if (parse_op(optarg, &o->op)) {
        fprintf(stderr, "nexar-perf: unknown op '%s'\n", optarg);
        return -1;
      }
      have_op = 1;
      continue;
    }
    uint64_t v = 0;
    switch (ch) {
    case 'n':
      if (parse_u64(optarg, &v) || v < 1 || v > MAX_PROC_RANKS) {
        fprintf(stderr, "nexar-perf: -n wants 1..%d\n", MAX_PROC_RANKS);
        return -1;
      }
      o->nranks = (uint32_t)v;
      break;
    case 'b':
    case 'e':
      if (parse_bytes(optarg, ch == 'b' ? &o->min_bytes : &o->max_bytes)) {
        fprintf(stderr, "nexar-perf: bad size '%s'\n", optarg);
        return -1;
      }
      break;
    case 'f':
      if (parse_u64(optarg, &v) || v < 2) {
        fprintf(stderr, "nexar-perf: -f wants an integer >= 2\n");
        return -1;
      }
      o->factor = v;
      break;
    case 'd':
      if (parse_dtype(optarg, &o->dt)) {
        fprintf(stderr, "nexar-perf: unknown type '%s'\n", optarg);
        return -1;
      }
      break;
    case 'o':
      if (parse_redop(optarg, &o->redop)) {
        fprintf(stderr, "nexar-perf: unknown reduction '%s'\n", optarg);
        return -1;
      }
      break;
    case 'r':
      if (parse_u64(optarg, &v) || v >= MAX_PROC_RANKS) {
        fprintf(stderr, "nexar-perf: bad root '%s'\n", optarg);
        return -1;
      }
      o->root = (uint32_t)v;
      break;
    case 'w':
    case 'i':
      if (parse_u64(optarg, &v) || v > 100000000 || (ch == 'i' && v < 1)) {
        fprintf(stderr, "nexar-perf: bad -%c '%s'\n", ch, optarg);
        return -1;
      }
      if (ch == 'w')
        o->warmup = (long)v;
      else
        o->iters = (long)v;
      break;
    case 'c':
      if (parse_u64(optarg, &v) || v > 1) {
        fprintf(stderr, "nexar-perf: -c wants 0 or 1\n");
        return -1;
      }
      o->check = (int)v;
      break;
    case 'a':
      if (parse_u64(optarg, &v) || v > 3) {
        fprintf(stderr, "nexar-perf: -a wants 0..3\n");
        return -1;
      }
      o->agg = (int)v;
      break;
    case 'P':
      o->procs = 1;
      break;
    case 'W':
      o->worker = 1;
      break;
    case 'C':
      o->csv = optarg;
      break;
    case 'h':
      usage(stdout);
      exit(0);
    default:
      usage(stderr);
      return -1;
    }
  }
  if (!have_op || optind < argc) {
    usage(stderr);
    return -1;
  }
  if (o->min_bytes > o->max_bytes) {
    fprintf(stderr, "nexar-perf: -b is larger than -e\n");
    return -1;
  }
  return 0;
}

/* ----------------------------------------------- element values, reference */

static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
  if (e == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
  int32_t he = (int32_t)e - 127 + 15;
  if (he >= 31) return (uint16_t)(sign | 0x7c00u);
  if (he <= 0) {
    if (he < -10) return (uint16_t)sign;
    m |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - he), h = m >> shift, rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)he << 10) | (m >> 13), rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* may carry into inf: correct */
  return (uint16_t)(sign | h);
}

static double f16_to_double(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0)
    v = ldexp(m, -24);
  else if (e == 31)
    v = m ? NAN : INFINITY;
  else
    v = ldexp(m + 1024, e - 25);
  return (h & 0x8000) ? -v : v;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static double bf16_to_double(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* How the values of one (dtype, reduction, world) are drawn. Every input is a
 * small integer, chosen so that the reduction is exact in any order: rank r,
 * element i contributes
 *   sum:      a(r) + b(i)        a(r) = r + 1 (or 0 when the sum would not be
 *                                exact), b(i) = i % B (shifted for signed ints)
 *   prod:     +-1 or +-2         2 on rank i % n only; negative when (i+r)%3==0
 *                                (unsigned types: never negative)
 *   min, max: c(i) + d(r)        c(i) = i % 37 (-18), d(r) = 5r % 7 (-3)
 * so the reference over ranks 0..m-1 has a closed form. */
typedef struct valgen {
  nexar_dtype dt;
  nexar_op op;
  uint32_t n;
  size_t esize;
  int is_float, is_signed;
  unsigned bits;
  int a_on;   /* sum: a(r) = r + 1 */
  uint64_t B; /* sum: b(i) = i % B */
} valgen;

static void valgen_init(valgen *g, nexar_dtype dt, nexar_op op, uint32_t n) {
  memset(g, 0, sizeof *g);
  g->dt = dt;
  g->op = op;
  g->n = n;
  g->esize = nexar_dtype_size(dt);
  g->is_float = dt == NEXAR_F32 || dt == NEXAR_F64 || dt == NEXAR_F16 || dt == NEXAR_BF16;
  g->is_signed = g->is_float || dt == NEXAR_I8 || dt == NEXAR_I32 || dt == NEXAR_I64;
  g->bits = (unsigned)g->esize * 8;
  if (g->is_float) {
    /* largest L with every integer in [0, L] exact */
    double L = dt == NEXAR_F64   ? 9007199254740992.0
               : dt == NEXAR_F32 ? 16777216.0
               : dt == NEXAR_F16 ? 2048.0
                                 : 256.0;
    double asum = (double)n * ((double)n + 1) / 2;
    g->a_on = asum <= L / 2;
    double room = L - (g->a_on ? asum : 0);
    double B = floor(room / n);
    if (B > 1e6) B = 1e6;
    g->B = B < 1 ? 1 : (uint64_t)B;
  } else {
    g->a_on = 1;
    g->B = 1000;
  }
}

static int64_t val_d(const valgen *g, uint64_t r) {
  int64_t d = (int64_t)((r * 5) % 7);
  return g->is_signed ? d - 3 : d;
}

/* Input of rank r at element i. */
static int64_t val_in(const valgen *g, uint32_t r, uint64_t i) {
  switch (g->op) {
  case NEXAR_SUM: {
    int64_t b = (int64_t)(i % g->B);
    if (!g->is_float && g->is_signed) b -= (int64_t)(g->B / 2);
    return (g->a_on ? (int64_t)r + 1 : 0) + b;
  }
  case NEXAR_PROD: {
    int64_t v = (i % g->n) == r ? 2 : 1;
    if (g->is_signed && (i + r) % 3 == 0) v = -v;
    return v;
  }
  default: {
    int64_t c = (int64_t)(i % 37);
    if (g->is_signed) c -= 18;
    return c + val_d(g, r);
  }
  }
}

/* Reduction over ranks 0..m-1 at element i (exact, before truncation). */
static int64_t val_ref(const valgen *g, uint32_t m, uint64_t i) {
  switch (g->op) {
  case NEXAR_SUM: {
    int64_t b = (int64_t)(i % g->B);
    if (!g->is_float && g->is_signed) b -= (int64_t)(g->B / 2);
    uint64_t a = g->a_on ? (uint64_t)m * (m + 1) / 2 : 0;
    return (int64_t)(a + (uint64_t)m * (uint64_t)b); /* wraps like the integer types */
  }
  case NEXAR_PROD: {
    int64_t v = (i % g->n) < m ? 2 : 1;
    if (g->is_signed) {
      uint64_t r0 = (3 - i % 3) % 3, neg = r0 < m ? (m - 1 - r0) / 3 + 1 : 0;
      if (neg & 1) v = -v;
    }
    return v;
  }
  default: {
    int64_t c = (int64_t)(i % 37);
    if (g->is_signed) c -= 18;
    int64_t best = val_d(g, 0);
    for (uint32_t q = 1; q < m && q < 7; q++) {
      int64_t d = val_d(g, q);
      if (g->op == NEXAR_MIN ? d < best : d > best) best = d;
    }
    return c + best;
  }
  }
}

static void store_elem(const valgen *g, void *buf, uint64_t i, int64_t v) {
  unsigned char *p = (unsigned char *)buf + i * g->esize;
  switch (g->dt) {
  case NEXAR_F32: {
    float f = (float)v;
    memcpy(p, &f, 4);
    break;
  }
  case NEXAR_F64: {
    double d = (double)v;
    memcpy(p, &d, 8);
    break;
  }
  case NEXAR_F16: {
    uint16_t h = f32_to_f16((float)v);
    memcpy(p, &h, 2);
    break;
  }
  case NEXAR_BF16: {
    uint16_t h = f32_to_bf16((float)v);
    memcpy(p, &h, 2);
    break;
  }
  default: {
    uint64_t u = (uint64_t)v; /* little-endian: the low bytes */
    memcpy(p, &u, g->esize);
    break;
  }
  }
}

/* 1 when element i of buf equals the exact value want. */
static int elem_ok(const valgen *g, const void *buf, uint64_t i, int64_t want) {
  const unsigned char *p = (const unsigned char *)buf + i * g->esize;
  switch (g->dt) {
  case NEXAR_F32: {
    float f;
    memcpy(&f, p, 4);
    return (double)f == (double)want;
  }
  case NEXAR_F64: {
    double d;
    memcpy(&d, p, 8);
    return d == (double)want;
  }
  case NEXAR_F16: {
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_double(h) == (double)want;
  }
  case NEXAR_BF16: {
    uint16_t h;
    memcpy(&h, p, 2);
    return bf16_to_double(h) == (double)want;
  }
  default: {
    uint64_t got = 0, w = (uint64_t)want;
    memcpy(&got, p, g->esize);
    if (g->bits < 64) w &= (UINT64_C(1) << g->bits) - 1;
    return got == w;
  }
  }
}

static void fill_vals(const valgen *g, void *buf, uint32_t r, uint64_t first, uint64_t count) {
  for (uint64_t k = 0; k < count; k++)
    store_elem(g, buf, k, val_in(g, r, first + k));
}

static uint64_t check_vals(const valgen *g, const void *buf, uint32_t m, uint64_t first,
                           uint64_t count) {
  uint64_t bad = 0;
  for (uint64_t k = 0; k < count; k++)
    bad += !elem_ok(g, buf, k, val_ref(g, m, first + k));
  return bad;
}

/* Byte pattern of stream s (distinct per rank and block; period 4 GiB). */
static inline unsigned char pat(uint32_t s, uint64_t j) {
  return (unsigned char)(((uint32_t)j * 0x9E3779B1u + s * 0x85EBCA77u) >> 24);
}

static void fill_pat(void *buf, uint32_t s, size_t len) {
  unsigned char *p = buf;
  for (size_t j = 0; j < len; j++)
    p[j] = pat(s, j);
}

/* Number of elements (of esize bytes) of buf that differ from stream s. */
static uint64_t check_pat(const void *buf, uint32_t s, size_t len, size_t esize) {
  const unsigned char *p = buf;
  uint64_t bad = 0;
  for (size_t j = 0; j < len; j += esize) {
    int wrong = 0;
    for (size_t k = 0; k < esize; k++)
      wrong |= p[j + k] != pat(s, j + k);
    bad += (uint64_t)wrong;
  }
  return bad;
}

/* ------------------------------------------------------------ one rank */

/* Effective shape of one row. */
typedef struct shape {
  size_t bytes;   /* size column */
  size_t count;   /* count column (elements) */
  size_t per;     /* blocked ops: elements per rank / per peer */
  size_t nominal; /* the requested size */
} shape;

static void shape_of(const opts *o, uint32_t n, size_t nominal, shape *s) {
  size_t es = nexar_dtype_size(o->dt);
  memset(s, 0, sizeof *s);
  s->nominal = nominal;
  if (o->op == OP_BARRIER) return;
  size_t count = nominal / es;
  if (count == 0) count = 1;
  if (op_blocked(o->op)) {
    s->per = count / n ? count / n : 1;
    count = s->per * n;
  }
  s->count = count;
  s->bytes = count * es;
}

/* Largest buffers one rank needs over the whole sweep. */
static void buffer_sizes(const opts *o, uint32_t n, uint32_t me, size_t max_bytes, size_t *a,
                         size_t *b) {
  shape s;
  shape_of(o, n, max_bytes, &s);
  size_t es = nexar_dtype_size(o->dt), blk = s.per * es;
  *a = *b = 0;
  switch (o->op) {
  case OP_ALL_REDUCE:
  case OP_BROADCAST:
  case OP_REDUCE:
  case OP_SCAN:
    *a = s.bytes;
    break;
  case OP_ALL_GATHER:
    *a = blk;
    *b = s.bytes;
    break;
  case OP_REDUCE_SCATTER:
    *a = s.bytes;
    *b = blk;
    break;
  case OP_ALL_TO_ALL:
    *a = *b = s.bytes;
    break;
  case OP_GATHER:
    *a = blk;
    *b = me == o->root ? s.bytes : 0;
    break;
  case OP_SCATTER:
    *a = me == o->root ? s.bytes : 0;
    *b = blk;
    break;
  case OP_SENDRECV:
    *a = s.bytes;
    *b = me == 0 ? s.bytes : 0;
    break;
  default:
    break;
  }
}

typedef struct rank_state {
  nexar_client *c;
  const opts *o;
  uint32_t me, n;
  unsigned char *a, *b; /* send/in-place buffer, receive buffer */
  valgen g;
  const char *mode; /* "threads" or "procs" */
  FILE *csv;
  /* progress (rank 0) */
  double size_t0, last_progress;
  int tty, progress_shown;
} rank_state;

/* Runs one op. Returns a NEXAR code. */
static int run_op(rank_state *st, const shape *s) {
  const opts *o = st->o;
  nexar_client *c = st->c;
  switch (o->op) {
  case OP_ALL_REDUCE:
    return nexar_all_reduce(c, st->a, s->count, o->dt, o->redop);
  case OP_BROADCAST:
    return nexar_broadcast(c, st->a, s->count, o->dt, o->root);
  case OP_ALL_GATHER:
    return nexar_all_gather(c, st->a, st->b, s->per, o->dt);
  case OP_REDUCE_SCATTER:
    return nexar_reduce_scatter(c, st->a, st->b, s->per, o->dt, o->redop);
  case OP_REDUCE:
    return nexar_reduce(c, st->a, s->count, o->dt, o->redop, o->root);
  case OP_ALL_TO_ALL:
    return nexar_all_to_all(c, st->a, st->b, s->per, o->dt);
  case OP_GATHER:
    return nexar_gather(c, st->a, st->b, s->per, o->dt, o->root);
  case OP_SCATTER:
    return nexar_scatter(c, st->a, st->b, s->per, o->dt, o->root);
  case OP_SCAN:
    return nexar_scan(c, st->a, s->count, o->dt, o->redop);
  case OP_BARRIER:
    return nexar_barrier(c);
  case OP_SENDRECV: {
    int rc = NEXAR_OK;
    if (st->me == 0) {
      rc = nexar_send(c, st->a, s->bytes, 1, 1);
      if (!rc) rc = nexar_recv(c, st->b, s->bytes, 1, 2);
    } else if (st->me == 1) {
      rc = nexar_recv(c, st->a, s->bytes, 0, 1);
      if (!rc) rc = nexar_send(c, st->a, s->bytes, 0, 2);
    }
    return rc;
  }
  default:
    return NEXAR_ERR_INVALID_ARGUMENT;
  }
}

/* Fresh inputs for the checked op. */
static void prepare(rank_state *st, const shape *s) {
  const opts *o = st->o;
  uint32_t me = st->me, n = st->n;
  size_t es = nexar_dtype_size(o->dt), blk = s->per * es;
  switch (o->op) {
  case OP_ALL_REDUCE:
  case OP_REDUCE:
  case OP_SCAN:
    fill_vals(&st->g, st->a, me, 0, s->count);
    break;
  case OP_REDUCE_SCATTER:
    fill_vals(&st->g, st->a, me, 0, s->count);
    fill_pat(st->b, n + me, blk);
    break;
  case OP_BROADCAST:
    fill_pat(st->a, me == o->root ? o->root : n + me, s->bytes);
    break;
  case OP_ALL_GATHER:
    fill_pat(st->a, me, blk);
    fill_pat(st->b, 2 * n + me, s->bytes);
    break;
  case OP_ALL_TO_ALL:
    for (uint32_t p = 0; p < n; p++)
      fill_pat(st->a + p * blk, me * n + p, blk);
    fill_pat(st->b, n * n + me, s->bytes);
    break;
  case OP_GATHER:
    fill_pat(st->a, me, blk);
    if (me == o->root) fill_pat(st->b, 2 * n + me, s->bytes);
    break;
  case OP_SCATTER:
    if (me == o->root)
      for (uint32_t p = 0; p < n; p++)
        fill_pat(st->a + p * blk, p, blk);
    fill_pat(st->b, 2 * n + me, blk);
    break;
  case OP_SENDRECV:
    fill_pat(st->a, me == 0 ? 0 : 1, s->bytes);
    if (me == 0) fill_pat(st->b, 2, s->bytes);
    break;
  default:
    break;
  }
}

/* Elements of this rank's output that differ from the reference. */
static uint64_t verify(rank_state *st, const shape *s) {
  const opts *o = st->o;
  uint32_t me = st->me, n = st->n;
  size_t es = nexar_dtype_size(o->dt), blk = s->per * es;
  uint64_t bad = 0;
  switch (o->op) {
  case OP_ALL_REDUCE:
    return check_vals(&st->g, st->a, n, 0, s->count);
  case OP_REDUCE:
    return me == o->root ? check_vals(&st->g, st->a, n, 0, s->count) : 0;
  case OP_SCAN:
    return check_vals(&st->g, st->a, me + 1, 0, s->count);
  case OP_REDUCE_SCATTER:
    return check_vals(&st->g, st->b, n, (uint64_t)me * s->per, s->per);
  case OP_BROADCAST:
    return check_pat(st->a, o->root, s->bytes, es);
  case OP_ALL_GATHER:
    for (uint32_t q = 0; q < n; q++)
      bad += check_pat(st->b + q * blk, q, blk, es);
    return bad;
  case OP_ALL_TO_ALL:
    for (uint32_t q = 0; q < n; q++)
      bad += check_pat(st->b + q * blk, q * n + me, blk, es);
    return bad;
  case OP_GATHER:
    if (me == o->root)
      for (uint32_t q = 0; q < n; q++)
        bad += check_pat(st->b + q * blk, q, blk, es);
    return bad;
  case OP_SCATTER:
    return check_pat(st->b, me, blk, es);
  case OP_SENDRECV:
    if (me == 0) return check_pat(st->b, 0, s->bytes, es);
    if (me == 1) return check_pat(st->a, 0, s->bytes, es);
    return 0;
  default:
    return 0;
  }
}

static void fmt_size(char *out, size_t cap, size_t b) {
  if (b >= (1u << 30) && b % (1u << 30) == 0)
    snprintf(out, cap, "%zuG", b >> 30);
  else if (b >= (1u << 20) && b % (1u << 20) == 0)
    snprintf(out, cap, "%zuM", b >> 20);
  else if (b >= 1024 && b % 1024 == 0)
    snprintf(out, cap, "%zuK", b >> 10);
  else
    snprintf(out, cap, "%zu", b);
}

static void progress(rank_state *st, const shape *s, const char *phase, long k, long total) {
  if (st->me != 0) return;
  double t = now_s();
  if (t - st->size_t0 < PROGRESS_AFTER_S) return;
  if (!st->tty && st->progress_shown && t - st->last_progress < PROGRESS_EVERY_S) return;
  if (st->tty && t - st->last_progress < 0.2) return;
  st->last_progress = t;
  st->progress_shown = 1;
  char sz[32];
  fmt_size(sz, sizeof sz, s->bytes);
  fprintf(stderr, "%s# %s %s B: %s %ld/%ld, %.1f s%s", st->tty ? "\r" : "", op_names[st->o->op], sz,
          phase, k, total, t - st->size_t0, st->tty ? "\033[K" : "\n");
  fflush(stderr);
}

static void progress_clear(rank_state *st) {
  if (st->me == 0 && st->tty && st->progress_shown) {
    fputs("\r\033[K", stderr);
    fflush(stderr);
  }
  st->progress_shown = 0;
}

#define TRY(call)                                                                                  \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != NEXAR_OK) {                                                                         \
      fprintf(stderr, "nexar-perf: rank %u: %s: %s (%s)\n", st->me, #call, nexar_strerror(rc_),    \
              nexar_last_error());                                                                 \
      return -1;                                                                                   \
    }                                                                                              \
  } while (0)

/* Measures one row; rank 0 prints it. Adds the wrong count to *wrong_total and
 * busbw to *bw_sum. */
static int bench_row(rank_state *st, const shape *s, uint64_t *wrong_total, double *bw_sum) {
  const opts *o = st->o;
  uint32_t n = st->n;
  st->size_t0 = now_s();
  st->last_progress = 0;
  /* inputs for the timed ops (the checked op gets fresh ones) */
  if (o->op != OP_BARRIER) prepare(st, s);
  for (long k = 0; k < o->warmup; k++) {
    TRY(run_op(st, s));
    progress(st, s, "warm-up", k + 1, o->warmup);
  }
  TRY(nexar_barrier(st->c));
  double t0 = now_s();
  for (long k = 0; k < o->iters; k++) {
    TRY(run_op(st, s));
    if (st->me == 0) progress(st, s, "iteration", k + 1, o->iters);
  }
  double per = (now_s() - t0) / (double)o->iters;
  uint64_t bad = 0;
  if (o->check && o->op != OP_BARRIER) {
    prepare(st, s);
    TRY(nexar_barrier(st->c));
    TRY(run_op(st, s));
    bad = verify(st, s);
  }
  if (o->op == OP_SENDRECV) per = st->me == 0 ? per / 2 : 0;
  double mine[2] = {per, (double)bad};
  double *all = st->me == 0 ? calloc((size_t)n * 2, sizeof(double)) : NULL;
  if (st->me == 0 && !all) {
    fprintf(stderr, "nexar-perf: out of memory\n");
    nexar_abort(st->c);
    return -1;
  }
  int rc = nexar_gather(st->c, mine, all, 2, NEXAR_F64, 0);
  if (rc) {
    fprintf(stderr, "nexar-perf: rank %u: gather of timings: %s (%s)\n", st->me, nexar_strerror(rc),
            nexar_last_error());
    free(all);
    return -1;
  }
  progress_clear(st);
  if (st->me != 0) return 0;
  double tmax = 0, tmin = 1e300, tsum = 0, wrong = 0;
  for (uint32_t q = 0; q < n; q++) {
    double t = all[2 * q];
    wrong += all[2 * q + 1];
    if (o->op == OP_SENDRECV && q != 0) continue; /* rank 0 times the round trips */
    tsum += t;
    if (t > tmax) tmax = t;
    if (t < tmin) tmin = t;
  }
  uint32_t timed = o->op == OP_SENDRECV ? 1 : n;
  double tavg = tsum / timed;
  double t = o->agg == 0 ? all[0] : o->agg == 1 ? tavg : o->agg == 2 ? tmin : tmax;
  free(all);
  double algbw = t > 0 ? (double)s->bytes / t / 1e9 : 0;
  double busbw = algbw * busbw_factor(o->op, n);
  *wrong_total += (uint64_t)wrong;
  *bw_sum += busbw;
  const char *redop = op_reduces(o->op) ? nexar_op_name(o->redop) : "none";
  long root = op_rooted(o->op) ? (long)o->root : -1;
  const char *type = o->op == OP_BARRIER ? "none" : dtype_label(o->dt);
  printf("%12zu  %12zu  %8s  %6s  %6ld  %10.2f  %8.3f  %8.3f  %6.0f\n", s->bytes, s->count, type,
         redop, root, t * 1e6, algbw, busbw, wrong);
  fflush(stdout);
  if (st->csv) {
    fprintf(st->csv, "%s,%s,%u,%zu,%zu,%s,%s,%ld,%ld,%ld,%.3f,%.3f,%.3f,%.4f,%.4f,%.0f\n",
            op_names[o->op], st->mode, n, s->bytes, s->count, type, redop, root, o->warmup,
            o->iters, t * 1e6, tavg * 1e6, tmin * 1e6, algbw, busbw, wrong);
    fflush(st->csv);
  }
  return 0;
}

static long peak_rss_kib(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru)) return 0;
  return ru.ru_maxrss;
}

static void print_header(const rank_state *st, size_t largest) {
  const opts *o = st->o;
  char lo[32], hi[32];
  fmt_size(lo, sizeof lo, o->min_bytes);
  fmt_size(hi, sizeof hi, o->max_bytes);
  static const char *const agg[] = {"rank 0", "mean over ranks", "min over ranks",
                                    "max over ranks"};
  printf("# nexar-perf %s: %u ranks as %s, libnexar %s\n", op_names[o->op], st->n,
         !strcmp(st->mode, "threads") ? "threads of one process" : "processes", nexar_version());
  if (o->op == OP_BARRIER)
    printf("# warm-up %ld, iterations %ld\n", o->warmup, o->iters);
  else
    printf("# sizes %s .. %s B, factor %llu, warm-up %ld, iterations %ld, check %d, "
           "largest buffer %.1f MiB\n",
           lo, hi, (unsigned long long)o->factor, o->warmup, o->iters, o->check,
           (double)largest / 1048576.0);
  printf("# time: per-rank mean over iterations, %s%s; GB = 1e9 B\n",
         o->op == OP_SENDRECV ? "half round trip on rank 0" : agg[o->agg],
         o->op == OP_ALL_REDUCE || o->op == OP_BROADCAST || o->op == OP_REDUCE || o->op == OP_SCAN
             ? "; in place"
             : "");
  printf("#\n");
  printf("# %10s  %12s  %8s  %6s  %6s  %10s  %8s  %8s  %6s\n", "size", "count", "type", "redop",
         "root", "time", "algbw", "busbw", "#wrong");
  printf("# %10s  %12s  %8s  %6s  %6s  %10s  %8s  %8s  %6s\n", "(B)", "(elements)", "", "", "",
         "(us)", "(GB/s)", "(GB/s)", "");
  fflush(stdout);
}

/* Runs the whole sweep on one rank. Returns 0, 1 (wrong results) or -1. */
static int run_rank(nexar_client *c, const opts *o, const char *mode) {
  rank_state stv, *st = &stv;
  memset(st, 0, sizeof *st);
  st->c = c;
  st->o = o;
  st->me = nexar_rank(c);
  st->n = nexar_world_size(c);
  st->mode = mode;
  st->tty = isatty(STDERR_FILENO);
  if (op_rooted(o->op) && o->root >= st->n) {
    if (st->me == 0) fprintf(stderr, "nexar-perf: root %u >= %u ranks\n", o->root, st->n);
    return -1;
  }
  if (o->op == OP_SENDRECV && st->n < 2) {
    if (st->me == 0) fprintf(stderr, "nexar-perf: sendrecv needs 2 ranks\n");
    return -1;
  }
  valgen_init(&st->g, o->dt, o->redop, st->n);
  size_t la = 0, lb = 0;
  if (o->op != OP_BARRIER) buffer_sizes(o, st->n, st->me, o->max_bytes, &la, &lb);
  /* page-aligned and touched now, so page faults stay out of the timing */
  if ((la && posix_memalign((void **)&st->a, 4096, la)) ||
      (lb && posix_memalign((void **)&st->b, 4096, lb))) {
    fprintf(stderr, "nexar-perf: rank %u: cannot allocate %zu + %zu bytes\n", st->me, la, lb);
    free(st->a);
    nexar_abort(c);
    return -1;
  }
  if (la) memset(st->a, 0, la);
  if (lb) memset(st->b, 0, lb);
  if (st->me == 0 && o->csv) {
    st->csv = fopen(o->csv, "a");
    if (!st->csv) {
      fprintf(stderr, "nexar-perf: cannot open %s: %s\n", o->csv, strerror(errno));
    } else if (ftell(st->csv) == 0) {
      fprintf(st->csv, "op,mode,nranks,bytes,count,type,redop,root,warmup,iters,time_us,"
                       "time_avg_us,time_min_us,algbw_GBps,busbw_GBps,wrong\n");
    }
  }
  if (st->me == 0) print_header(st, la > lb ? la : lb);

  int rc = 0;
  uint64_t wrong = 0;
  double bw_sum = 0;
  int rows = 0;
  size_t last_bytes = SIZE_MAX;
  if (o->op == OP_BARRIER) {
    shape s;
    shape_of(o, st->n, 0, &s);
    rc = bench_row(st, &s, &wrong, &bw_sum);
    rows = 1;
  } else {
    for (size_t nominal = o->min_bytes; nominal <= o->max_bytes;) {
      shape s;
      shape_of(o, st->n, nominal, &s);
      if (s.bytes != last_bytes) { /* sizes that round to the same shape run once */
        rc = bench_row(st, &s, &wrong, &bw_sum);
        if (rc) break;
        rows++;
        last_bytes = s.bytes;
      }
      if (nominal > o->max_bytes / o->factor || nominal == 0) break;
      nominal *= o->factor;
    }
  }
  /* peak memory, the largest over ranks */
  double rss = (double)peak_rss_kib(), *all = NULL;
  if (!rc) {
    all = st->me == 0 ? calloc(st->n, sizeof(double)) : NULL;
    int grc = nexar_gather(c, &rss, all, 1, NEXAR_F64, 0);
    if (grc) {
      fprintf(stderr, "nexar-perf: rank %u: gather of peak RSS: %s (%s)\n", st->me,
              nexar_strerror(grc), nexar_last_error());
      rc = -1;
    }
  }
  if (st->me == 0 && !rc) {
    double mx = 0;
    uint32_t who = 0;
    for (uint32_t q = 0; q < st->n && all; q++)
      if (all[q] > mx) mx = all[q], who = q;
    size_t buf = la > lb ? la : lb;
    printf("# Out of bounds values : %llu %s\n", (unsigned long long)wrong,
           wrong ? "FAILED" : "OK");
    if (o->op != OP_BARRIER) printf("# Avg bus bandwidth    : %.3f GB/s\n", bw_sum / rows);
    if (!strcmp(mode, "threads"))
      printf("# Peak RSS             : %.1f MiB (whole process, %u ranks)\n", mx / 1024.0, st->n);
    else
      printf("# Peak RSS             : %.1f MiB (max over ranks, rank %u)%s", mx / 1024.0, who,
             buf ? "" : "\n");
    if (strcmp(mode, "threads") && buf)
      printf(", %.2f x the largest buffer (%.1f MiB)\n", mx * 1024.0 / (double)buf,
             (double)buf / 1048576.0);
    fflush(stdout);
  }
  free(all);
  if (st->csv) fclose(st->csv);
  free(st->a);
  free(st->b);
  if (rc) {
    nexar_abort(c);
    return -1;
  }
  return wrong ? 1 : 0;
}

/* ---------------------------------------------------------- threads mode */

typedef struct thread_arg {
  nexar_client *c;
  const opts *o;
  int rc;
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *t = p;
  t->rc = run_rank(t->c, t->o, "threads");
  return NULL;
}

static int run_threads(const opts *o) {
  uint32_t n = o->nranks ? o->nranks : 2;
  if (n > MAX_THREAD_RANKS) {
    fprintf(stderr, "nexar-perf: at most %d ranks as threads (use --procs)\n", MAX_THREAD_RANKS);
    return 2;
  }
  nexar_client **cl = calloc(n, sizeof *cl);
  thread_arg *ta = calloc(n, sizeof *ta);
  pthread_t *th = calloc(n, sizeof *th);
  if (!cl || !ta || !th) {
    fprintf(stderr, "nexar-perf: out of memory\n");
    free(cl), free(ta), free(th);
    return 2;
  }
  int rc = nexar_bootstrap_local(cl, n, NULL);
  if (rc) {
    fprintf(stderr, "nexar-perf: nexar_bootstrap_local(%u): %s (%s)\n", n, nexar_strerror(rc),
            nexar_last_error());
    free(cl), free(ta), free(th);
    return 2;
  }
  uint32_t started = 0;
  for (uint32_t i = 0; i < n; i++) {
    ta[i].c = cl[i];
    ta[i].o = o;
    if (pthread_create(&th[i], NULL, thread_main, &ta[i])) {
      fprintf(stderr, "nexar-perf: cannot start thread %u\n", i);
      for (uint32_t k = 0; k < n; k++)
        nexar_abort(cl[k]);
      break;
    }
    started++;
  }
  int worst = started == n ? 0 : 2;
  for (uint32_t i = 0; i < started; i++) {
    pthread_join(th[i], NULL);
    if (ta[i].rc < 0)
      worst = 2;
    else if (ta[i].rc > 0 && worst == 0)
      worst = 1;
  }
  for (uint32_t i = 0; i < n; i++)
    nexar_client_del(cl[i]);
  free(cl), free(ta), free(th);
  return worst;
}

/* ------------------------------------------------------------ procs mode */

static int run_worker(const opts *o) {
  nexar_client *c = NULL;
  int rc = nexar_init_from_env(&c);
  if (rc) {
    fprintf(stderr, "nexar-perf: nexar_init_from_env: %s (%s)\n", nexar_strerror(rc),
            nexar_last_error());
    return 2;
  }
  if (o->nranks && o->nranks != nexar_world_size(c)) {
    fprintf(stderr, "nexar-perf: -n %u but the world has %u ranks\n", o->nranks,
            nexar_world_size(c));
    nexar_client_del(c);
    return 2;
  }
  rc = run_rank(c, o, "procs");
  nexar_client_del(c);
  return rc < 0 ? 2 : rc;
}

static int env_skip(const char *e) {
  static const char *const drop[] = {"NEXAR_SEED_ADDR=", "NEXAR_WORLD_SIZE=", "NEXAR_RANK=",
                                     "NEXAR_CLUSTER_TOKEN=", "NEXAR_LOCAL_RANK="};
  for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
    if (!strncmp(e, drop[i], strlen(drop[i]))) return 1;
  return 0;
}

static char *concat_alloc(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *s = malloc(la + lb + 1);
  if (!s) return NULL;
  memcpy(s, a, la);
  memcpy(s + la, b, lb + 1);
  return s;
}

static int run_procs(const opts *o, int argc, char **argv) {
  uint32_t n = o->nranks ? o->nranks : 2;
  nexar_seed *seed = NULL;
  int rc = nexar_seed_new(&seed, "127.0.0.1:0", n, NULL);
  if (rc) {
    fprintf(stderr, "nexar-perf: nexar_seed_new: %s (%s)\n", nexar_strerror(rc),
            nexar_last_error());
    return 2;
  }
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) {
    fprintf(stderr, "nexar-perf: cannot find my executable: %s\n", strerror(errno));
    nexar_seed_del(seed);
    return 2;
  }
  exe[len] = '\0';

  /* argv + --worker; environment without the NEXAR_* launch variables + ours */
  char **cargv = calloc((size_t)argc + 2, sizeof *cargv);
  size_t nenv = 0;
  while (environ[nenv])
    nenv++;
  char **cenv = calloc(nenv + 5, sizeof *cenv);
  char *own[4] = {NULL, NULL, NULL, NULL};
  pid_t *pids = calloc(n, sizeof *pids);
  int result = 0;
  if (!cargv || !cenv || !pids) {
    fprintf(stderr, "nexar-perf: out of memory\n");
    result = 2;
    goto out;
  }
  for (int i = 0; i < argc; i++)
    cargv[i] = argv[i];
  cargv[argc] = "--worker";
  size_t k = 0;
  for (size_t i = 0; i < nenv; i++)
    if (!env_skip(environ[i])) cenv[k++] = environ[i];
  char num[32];
  own[0] = concat_alloc("NEXAR_SEED_ADDR=", nexar_seed_addr(seed));
  snprintf(num, sizeof num, "%u", n);
  own[1] = concat_alloc("NEXAR_WORLD_SIZE=", num);
  own[2] = concat_alloc("NEXAR_CLUSTER_TOKEN=", nexar_seed_token(seed));
  if (!own[0] || !own[1] || !own[2]) {
    result = 2;
    goto out;
  }
  cenv[k++] = own[0];
  cenv[k++] = own[1];
  cenv[k++] = own[2];
  size_t rank_slot = k++;
  cenv[k] = NULL;

  uint32_t started = 0;
  for (uint32_t r = 0; r < n; r++) {
    snprintf(num, sizeof num, "%u", r);
    free(own[3]);
    own[3] = concat_alloc("NEXAR_RANK=", num);
    if (!own[3]) {
      result = 2;
      break;
    }
    cenv[rank_slot] = own[3];
    int e = posix_spawn(&pids[r], exe, NULL, NULL, cargv, cenv);
    if (e) {
      fprintf(stderr, "nexar-perf: cannot start rank %u: %s\n", r, strerror(e));
      result = 2;
      break;
    }
    started++;
  }
  if (result)
    for (uint32_t r = 0; r < started; r++)
      kill(pids[r], SIGTERM);
  /* wait; the first failing rank stops the others */
  uint32_t left = started;
  while (left) {
    int status;
    pid_t p = waitpid(-1, &status, 0);
    if (p < 0) {
      if (errno == EINTR) continue;
      break;
    }
    uint32_t r = 0;
    while (r < started && pids[r] != p)
      r++;
    if (r == started) continue;
    pids[r] = 0;
    left--;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code && !result) {
      result = code == 1 ? 1 : 2;
      if (code != 1) {
        fprintf(stderr, "nexar-perf: rank %u %s %d; stopping the others\n", r,
                WIFEXITED(status) ? "exited with" : "was killed by signal",
                WIFEXITED(status) ? code : WTERMSIG(status));
        for (uint32_t q = 0; q < started; q++)
          if (pids[q] > 0) kill(pids[q], SIGTERM);
      }
    }
  }
out:
  for (int i = 0; i < 4; i++)
    free(own[i]);
  free(cargv);
  free(cenv);
  free(pids);
  nexar_seed_del(seed);
  return result;
}

int main(int argc, char **argv) {
  opts o;
  if (parse_args(argc, argv, &o)) return 2;
  signal(SIGPIPE, SIG_IGN);
  if (o.worker || (!o.procs && !o.nranks && getenv("NEXAR_SEED_ADDR"))) return run_worker(&o);
  if (o.procs) return run_procs(&o, argc, argv);
  return run_threads(&o);
}
