/* Reduction kernels and 16-bit float conversions: every dtype x op against a
 * per-element reference written independently of src/reduce, the NaN and
 * signed-zero rules, wrap-around, identities, exhaustive f16/bf16 conversion
 * checks, and every SIMD kernel set against the scalar one, bit for bit, at
 * awkward lengths and misalignments. */
#include "reduce/reduce.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define TEST_X86 1
#else
#define TEST_X86 0
#endif

static int failures;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      if (++failures <= 40) {                                                                      \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                       \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
      }                                                                                            \
    }                                                                                              \
  } while (0)

/* ------------------------------------------------------------- helpers */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) { /* splitmix64: deterministic, good enough */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float bitsf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint64_t dbits(double f) {
  uint64_t u;
  memcpy(&u, &f, 8);
  return u;
}

static double bitsd(uint64_t u) {
  double f;
  memcpy(&f, &u, 8);
  return f;
}

static const nexar_dtype all_dtypes[] = {NEXAR_F32, NEXAR_F64, NEXAR_F16, NEXAR_BF16, NEXAR_I8,
                                         NEXAR_I32, NEXAR_I64, NEXAR_U8,  NEXAR_U32,  NEXAR_U64};
static const nexar_op all_ops[] = {NEXAR_SUM, NEXAR_PROD, NEXAR_MIN, NEXAR_MAX,
                                   NEXAR_AVG, NEXAR_BAND, NEXAR_BOR, NEXAR_BXOR};
#define N_OPS 8

/* Element at index i of an unaligned buffer, as a zero-extended bit pattern. */
static uint64_t get_elem(const void *buf, size_t i, size_t size) {
  uint64_t v = 0;
  memcpy(&v, (const unsigned char *)buf + i * size, size); /* little-endian host */
  return v;
}

static void set_elem(void *buf, size_t i, size_t size, uint64_t v) {
  memcpy((unsigned char *)buf + i * size, &v, size);
}

/* --------------------------------------- reference 16-bit float rounding */

/* Rounds v to a binary format with p significand bits, minimum normal
 * exponent emin and overflow threshold `inf_from` (the halfway point above the
 * largest finite value), by scaling to an integer and using rint (ties to
 * even). Returns the rounded value as a double (inf on overflow). */
static double ref_round(double v, int p, int emin, double inf_from) {
  double av = fabs(v);
  if (av >= inf_from) return copysign(INFINITY, v);
  if (av == 0) return v;
  int ex;
  frexp(av, &ex); /* av = m * 2^ex, m in [0.5, 1) */
  int e = ex - 1 < emin ? emin : ex - 1;
  double ulp = ldexp(1.0, e - (p - 1));
  return copysign(rint(av / ulp) * ulp, v);
}

static double ref_round_f16(double v) {
  return ref_round(v, 11, -14, 65520.0);
}

static double ref_round_bf16(double v) {
  return ref_round(v, 8, -126, ldexp(511.0, 119));
}

/* Exact value of a binary16 pattern, decoded by hand (not via the library). */
static double ref_f16_value(uint16_t h) {
  int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double s = (h & 0x8000) ? -1.0 : 1.0;
  if (exp == 31) return man ? NAN : s * INFINITY;
  if (exp == 0) return s * ldexp(man, -24);
  return s * ldexp(1024 + man, exp - 25);
}

static double ref_bf16_value(uint16_t h) {
  int exp = (h >> 7) & 0xff, man = h & 0x7f;
  double s = (h & 0x8000) ? -1.0 : 1.0;
  if (exp == 255) return man ? NAN : s * INFINITY;
  if (exp == 0) return s * ldexp(man, -133);
  return s * ldexp(128 + man, exp - 134);
}

/* ------------------------------------------------- conversion tests */

static void test_f16_exhaustive(void) {
  for (uint32_t i = 0; i < 65536; i++) {
    uint16_t h = (uint16_t)i;
    float f = nx_f16_to_f32(h);
    double want = ref_f16_value(h);
    uint16_t back = nx_f32_to_f16(f);
    if (isnan(want)) {
      /* Quiet NaN of the same sign carrying the 10-bit payload. */
      uint32_t exp_bits =
          ((uint32_t)(h & 0x8000) << 16) | 0x7fc00000u | ((uint32_t)(h & 0x1ff) << 13);
      CHECK(fbits(f) == exp_bits, "f16 %04x -> f32 %08x, want %08x", h, fbits(f), exp_bits);
      CHECK(back == (h | 0x200), "f16 NaN %04x round trip gave %04x", h, back);
    } else {
      CHECK((double)f == want && !!signbit(f) == !!signbit(want), "f16 %04x -> %a, want %a", h,
            (double)f, want);
      CHECK(back == h, "f16 %04x round trip gave %04x", h, back);
    }
  }
}

static void test_bf16_exhaustive(void) {
  for (uint32_t i = 0; i < 65536; i++) {
    uint16_t h = (uint16_t)i;
    float f = nx_bf16_to_f32(h);
    double want = ref_bf16_value(h);
    uint16_t back = nx_f32_to_bf16(f);
    if (isnan(want)) {
      uint32_t exp_bits = ((uint32_t)h << 16) | 0x400000u;
      CHECK(fbits(f) == exp_bits, "bf16 %04x -> f32 %08x, want %08x", h, fbits(f), exp_bits);
      CHECK(back == (h | 0x40), "bf16 NaN %04x round trip gave %04x", h, back);
    } else {
      CHECK((double)f == want && !!signbit(f) == !!signbit(want), "bf16 %04x -> %a, want %a", h,
            (double)f, want);
      CHECK(back == h, "bf16 %04x round trip gave %04x", h, back);
    }
  }
}

/* One f32 -> f16 and f32 -> bf16 conversion against the reference. The
 * decoders are verified exhaustively above, so results compare as values. */
static void check_narrow(float x) {
  uint16_t h = nx_f32_to_f16(x), b = nx_f32_to_bf16(x);
  uint32_t xb = fbits(x);
  if (isnan(x)) {
    uint16_t sign = (uint16_t)((xb >> 16) & 0x8000);
    uint16_t wh = (uint16_t)(sign | 0x7e00 | ((xb >> 13) & 0x3ff));
    uint16_t wb = (uint16_t)((xb >> 16) | 0x40);
    CHECK(h == wh, "f32 NaN %08x -> f16 %04x, want %04x", xb, h, wh);
    CHECK(b == wb, "f32 NaN %08x -> bf16 %04x, want %04x", xb, b, wb);
    return;
  }
  double wh = ref_round_f16(x), wb = ref_round_bf16(x);
  double gh = ref_f16_value(h), gb = ref_bf16_value(b);
  CHECK(gh == wh && !!signbit(gh) == !!signbit(wh), "f32 %08x (%a) -> f16 %04x (%a), want %a", xb,
        (double)x, h, gh, wh);
  CHECK(gb == wb && !!signbit(gb) == !!signbit(wb), "f32 %08x (%a) -> bf16 %04x (%a), want %a", xb,
        (double)x, b, gb, wb);
}

/* Each representable 16-bit value, its neighbours, and the exact halfway
 * points to the next value plus one f32 ulp either side: ties, near-ties,
 * the subnormal range and the overflow edge. */
static void check_around(double v, double next) {
  float pts[6];
  float mid = (float)((v + next) / 2); /* exact: at most p+1 significant bits */
  pts[0] = (float)v;
  pts[1] = nextafterf((float)v, INFINITY);
  pts[2] = nextafterf((float)v, -INFINITY);
  pts[3] = mid;
  pts[4] = nextafterf(mid, INFINITY);
  pts[5] = nextafterf(mid, -INFINITY);
  for (int k = 0; k < 6; k++) {
    check_narrow(pts[k]);
    check_narrow(-pts[k]);
  }
}

static void test_narrowing(void) {
  for (uint32_t h = 0; h < 0x7c00; h++) /* 0x7bff's next is 2^16: the overflow tie */
    check_around(ref_f16_value((uint16_t)h),
                 h == 0x7bff ? 65536.0 : ref_f16_value((uint16_t)(h + 1)));
  for (uint32_t h = 0; h < 0x7f80; h++)
    check_around(ref_bf16_value((uint16_t)h),
                 h == 0x7f7f ? ldexp(1.0, 128) : ref_bf16_value((uint16_t)(h + 1)));
  /* Everything else: a spread over all 2^32 patterns, NaNs and infs included. */
  for (uint64_t u = 0; u < (1ull << 32); u += 4093)
    check_narrow(bitsf((uint32_t)u));
  for (int i = 0; i < 200000; i++)
    check_narrow(bitsf((uint32_t)rnd()));
  check_narrow(INFINITY);
  check_narrow(-INFINITY);
  check_narrow(bitsf(0x7f800001u)); /* signaling NaN with a payload below f16's bits */
  CHECK(nx_f32_to_f16(bitsf(0x7f800001u)) == 0x7e00, "sNaN must stay NaN in f16");
  CHECK(nx_f32_to_bf16(bitsf(0xff800001u)) == 0xffc0, "sNaN must stay NaN in bf16");
  CHECK(nx_f32_to_bf16(bitsf(0x7f7fffffu)) == 0x7f80, "FLT_MAX rounds to bf16 inf");
  CHECK(nx_f32_to_f16(65519.0f) == 0x7bff && nx_f32_to_f16(65520.0f) == 0x7c00, "f16 overflow");
  CHECK(nx_f32_to_f16(ldexpf(1, -25)) == 0 && nx_f32_to_f16(ldexpf(3, -26)) == 1, "f16 tiny");
}

#if TEST_X86
/* F16C agrees with the scalar conversions (the AVX kernels rely on it). */
__attribute__((target("avx,f16c"))) static void test_f16c_agrees(void) {
  for (uint32_t i = 0; i < 65536; i += 8) {
    uint16_t in[8];
    float out[8];
    for (int k = 0; k < 8; k++)
      in[k] = (uint16_t)(i + (uint32_t)k);
    _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)in)));
    for (int k = 0; k < 8; k++)
      CHECK(fbits(out[k]) == fbits(nx_f16_to_f32(in[k])), "vcvtph2ps %04x: %08x vs %08x", in[k],
            fbits(out[k]), fbits(nx_f16_to_f32(in[k])));
  }
  for (uint64_t u = 0; u < (1ull << 32); u += 8 * 1021) {
    uint32_t in[8];
    uint16_t out[8];
    for (int k = 0; k < 8; k++)
      in[k] = (uint32_t)(u + (uint64_t)k * 7);
    __m256 v = _mm256_loadu_ps((const float *)in);
    _mm_storeu_si128((__m128i *)out, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    for (int k = 0; k < 8; k++)
      CHECK(out[k] == nx_f32_to_f16(bitsf(in[k])), "vcvtps2ph %08x: %04x vs %04x", in[k], out[k],
            nx_f32_to_f16(bitsf(in[k])));
  }
}
#endif

/* ----------------------------------------------- per-element reference */

/* The documented semantics, written out plainly per type. */
static uint64_t ref_float_minmax_bits(int is_min, double x, double y, uint64_t xb, uint64_t yb,
                                      uint64_t qnan) {
  if (isnan(x) || isnan(y)) return qnan;
  if (x == 0 && y == 0) { /* -0 < +0 */
    int neg = is_min ? (signbit(x) || signbit(y)) : (signbit(x) && signbit(y));
    return neg ? (signbit(x) ? xb : yb) : (signbit(x) ? yb : xb);
  }
  if (is_min) return x <= y ? xb : yb;
  return x >= y ? xb : yb;
}

static uint64_t ref_elem(nexar_dtype dt, nexar_op op, uint64_t xb, uint64_t yb) {
  if (op == NEXAR_AVG) op = NEXAR_SUM; /* kernels sum; nx_avg_div divides the end result */
  if (op >= NEXAR_BAND) {              /* integers only */
    size_t size = nexar_dtype_size(dt);
    uint64_t m = size == 8 ? ~0ull : (1ull << (8 * size)) - 1;
    xb &= m, yb &= m;
    return op == NEXAR_BAND ? (xb & yb) : op == NEXAR_BOR ? (xb | yb) : (xb ^ yb);
  }
  switch (dt) {
  case NEXAR_F32: {
    float x = bitsf((uint32_t)xb), y = bitsf((uint32_t)yb);
    if (op >= NEXAR_MIN) return ref_float_minmax_bits(op == NEXAR_MIN, x, y, xb, yb, 0x7fc00000u);
    /* Double then float rounds correctly: 53 >= 2*24 + 2. */
    float r = (float)(op == NEXAR_SUM ? (double)x + (double)y : (double)x * (double)y);
    return isnan(r) ? 0x7fc00000u : fbits(r);
  }
  case NEXAR_F64: {
    double x = bitsd(xb), y = bitsd(yb);
    if (op >= NEXAR_MIN)
      return ref_float_minmax_bits(op == NEXAR_MIN, x, y, xb, yb, 0x7ff8000000000000ull);
    volatile double r = op == NEXAR_SUM ? x + y : x * y;
    return isnan(r) ? 0x7ff8000000000000ull : dbits(r);
  }
  case NEXAR_F16:
  case NEXAR_BF16: {
    int f16 = dt == NEXAR_F16;
    double x = f16 ? ref_f16_value((uint16_t)xb) : ref_bf16_value((uint16_t)xb);
    double y = f16 ? ref_f16_value((uint16_t)yb) : ref_bf16_value((uint16_t)yb);
    uint64_t qnan = f16 ? 0x7e00 : 0x7fc0;
    if (op >= NEXAR_MIN) return ref_float_minmax_bits(op == NEXAR_MIN, x, y, xb, yb, qnan);
    /* f16: sums and products are exact in double. bf16: products are exact,
     * sums round once to double, which cannot change the final rounding. */
    double r = op == NEXAR_SUM ? x + y : x * y;
    if (isnan(r)) return qnan;
    r = f16 ? ref_round_f16(r) : ref_round_bf16(r);
    /* Encode an exactly representable value: the conversions were checked. */
    return f16 ? nx_f32_to_f16((float)r) : nx_f32_to_bf16((float)r);
  }
  case NEXAR_I8: {
    int8_t x = (int8_t)xb, y = (int8_t)yb;
    if (op == NEXAR_SUM) return (uint8_t)(x + y);
    if (op == NEXAR_PROD) return (uint8_t)(x * y);
    return (uint8_t)(op == NEXAR_MIN ? (x < y ? x : y) : (x > y ? x : y));
  }
  case NEXAR_U8: {
    uint8_t x = (uint8_t)xb, y = (uint8_t)yb;
    if (op == NEXAR_SUM) return (uint8_t)(x + y);
    if (op == NEXAR_PROD) return (uint8_t)(x * y);
    return op == NEXAR_MIN ? (x < y ? x : y) : (x > y ? x : y);
  }
  case NEXAR_I32: {
    int32_t x = (int32_t)(uint32_t)xb, y = (int32_t)(uint32_t)yb;
    if (op == NEXAR_SUM) return (uint32_t)((int64_t)x + y);
    if (op == NEXAR_PROD) return (uint32_t)((int64_t)x * y);
    return (uint32_t)(op == NEXAR_MIN ? (x < y ? x : y) : (x > y ? x : y));
  }
  case NEXAR_U32: {
    uint32_t x = (uint32_t)xb, y = (uint32_t)yb;
    if (op == NEXAR_SUM) return (uint32_t)((uint64_t)x + y);
    if (op == NEXAR_PROD) return (uint32_t)((uint64_t)x * y);
    return op == NEXAR_MIN ? (x < y ? x : y) : (x > y ? x : y);
  }
  case NEXAR_I64: {
    int64_t x = (int64_t)xb, y = (int64_t)yb;
#ifdef __SIZEOF_INT128__ /* wide arithmetic, truncated: independent of the library's */
    if (op == NEXAR_SUM) return (uint64_t)((__int128)x + y);
    if (op == NEXAR_PROD) return (uint64_t)((__int128)x * y);
#else
    if (op == NEXAR_SUM) return xb + yb;
    if (op == NEXAR_PROD) return xb * yb;
#endif
    return (uint64_t)(op == NEXAR_MIN ? (x < y ? x : y) : (x > y ? x : y));
  }
  case NEXAR_U64: {
    uint64_t x = xb, y = yb;
#ifdef __SIZEOF_INT128__
    if (op == NEXAR_SUM) return (uint64_t)((unsigned __int128)x + y);
    if (op == NEXAR_PROD) return (uint64_t)((unsigned __int128)x * y);
#else
    if (op == NEXAR_SUM) return x + y;
    if (op == NEXAR_PROD) return x * y;
#endif
    return op == NEXAR_MIN ? (x < y ? x : y) : (x > y ? x : y);
  }
  }
  return 0;
}

/* ---------------------------------------------------- random elements */

/* Random element bits: NaNs with payloads (signaling too), infinities, signed
 * zeros, subnormals, extremes, ordinary numbers and raw bit patterns. */
static uint64_t gen_float(int ebits, int mbits) {
  uint64_t r = rnd(), sign = (r & 1) << (ebits + mbits);
  uint64_t emax = (1ull << ebits) - 1, mmask = (1ull << mbits) - 1;
  uint64_t m = (r >> 8) & mmask;
  switch ((r >> 1) % 16) {
  case 0: /* quiet NaN */
    return sign | emax << mbits | 1ull << (mbits - 1) | (m >> 1);
  case 1: /* signaling NaN */
    return sign | emax << mbits | ((m >> 1) ? (m >> 1) : 1);
  case 2:
    return sign | emax << mbits;
  case 3:
    return sign;
  case 4: /* subnormal */
    return sign | (m ? m : 1);
  case 5: /* largest finite, smallest normal */
    return sign | ((r >> 5) & 1 ? (emax - 1) << mbits | mmask : 1ull << mbits);
  case 6:
    return rnd() & ((2ull << (ebits + mbits)) - 1);
  default: { /* ordinary: exponent near 1.0 so sums and products round */
    uint64_t bias = (1ull << (ebits - 1)) - 1;
    uint64_t e = bias - 6 + (r >> 60) % 13;
    return sign | e << mbits | m;
  }
  }
}

static uint64_t gen_elem(nexar_dtype dt) {
  uint64_t r = rnd();
  switch (dt) {
  case NEXAR_F32:
    return gen_float(8, 23);
  case NEXAR_F64:
    return gen_float(11, 52);
  case NEXAR_F16:
    return gen_float(5, 10);
  case NEXAR_BF16:
    return gen_float(8, 7);
  default:
    break;
  }
  size_t bits = 8 * nexar_dtype_size(dt);
  uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
  switch (r % 8) {
  case 0:
    return mask >> 1; /* signed max */
  case 1:
    return (mask >> 1) + 1; /* signed min */
  case 2:
    return mask; /* -1 / unsigned max */
  case 3:
    return (r >> 8) % 5; /* small */
  default:
    return rnd() & mask;
  }
}

/* Fills a and b; sometimes b[i] repeats a[i] or its negation so that min/max
 * see equal operands and {-0, +0}. */
static void gen_pair(void *a, void *b, size_t n, nexar_dtype dt) {
  size_t size = nexar_dtype_size(dt);
  uint64_t sbit = 1ull << (8 * size - 1);
  for (size_t i = 0; i < n; i++) {
    uint64_t x = gen_elem(dt), y = gen_elem(dt), r = rnd() % 10;
    if (r == 0) y = x;
    if (r == 1) y = x ^ sbit;
    set_elem(a, i, size, x);
    set_elem(b, i, size, y);
  }
}

/* -------------------------------------------------------- kernel sets */

static const char *impls[3];
static int n_impls;

static void find_impls(void) {
  static const char *const names[] = {"scalar", "avx2", "avx512"};
  for (int i = 0; i < 3; i++)
    if (nx_reduce_set_impl(names[i]) == 0) impls[n_impls++] = names[i];
  nx_reduce_set_impl(NULL);
  printf("reduce kernels available:");
  for (int i = 0; i < n_impls; i++)
    printf(" %s", impls[i]);
  printf(" (default %s)\n", nx_reduce_impl_name());
  fflush(stdout);
}

/* Every dtype x op, each kernel set, against ref_elem for every element. */
static void test_against_reference(void) {
  enum { N = 4097 };
  unsigned char a[N * 8], b[N * 8], d[N * 8];
  for (int s = 0; s < n_impls; s++) {
    CHECK(nx_reduce_set_impl(impls[s]) == 0, "select %s", impls[s]);
    for (size_t t = 0; t < 10; t++) {
      for (size_t o = 0; o < N_OPS; o++) {
        nexar_dtype dt = all_dtypes[t];
        nexar_op op = all_ops[o];
        if (!nx_op_dtype_valid(dt, op)) continue;
        size_t size = nexar_dtype_size(dt);
        gen_pair(a, b, N, dt);
        memcpy(d, a, N * size);
        nx_reduce(d, b, N, dt, op);
        int bad = 0;
        for (size_t i = 0; i < N && bad < 3; i++) {
          uint64_t x = get_elem(a, i, size), y = get_elem(b, i, size);
          uint64_t got = get_elem(d, i, size), want = ref_elem(dt, op, x, y);
          if (got != want) bad++;
          CHECK(got == want, "%s %s %s [%zu]: %llx op %llx = %llx, want %llx", impls[s],
                nexar_dtype_name(dt), nexar_op_name(op), i, (unsigned long long)x,
                (unsigned long long)y, (unsigned long long)got, (unsigned long long)want);
        }
      }
    }
  }
  nx_reduce_set_impl(NULL);
}

/* Hand-picked cases stated in reduce.h, run through every kernel set. Uses
 * vectors of 40 copies so the SIMD bodies, not only the tails, see them. */
static uint64_t run1(nexar_dtype dt, nexar_op op, uint64_t x, uint64_t y) {
  enum { R = 40 };
  unsigned char d[R * 8], s[R * 8];
  size_t size = nexar_dtype_size(dt);
  for (size_t i = 0; i < R; i++) {
    set_elem(d, i, size, x);
    set_elem(s, i, size, y);
  }
  nx_reduce(d, s, R, dt, op);
  uint64_t r = get_elem(d, 0, size);
  for (size_t i = 1; i < R; i++)
    CHECK(get_elem(d, i, size) == r, "%s %s lanes disagree at %zu", nexar_dtype_name(dt),
          nexar_op_name(op), i);
  return r;
}

static void test_rules(void) {
  struct {
    nexar_dtype dt;
    nexar_op op;
    uint64_t x, y, want;
  } cases[] = {
      /* signed zeros, both orders */
      {NEXAR_F32, NEXAR_MIN, 0x80000000u, 0, 0x80000000u},
      {NEXAR_F32, NEXAR_MIN, 0, 0x80000000u, 0x80000000u},
      {NEXAR_F32, NEXAR_MAX, 0x80000000u, 0, 0},
      {NEXAR_F32, NEXAR_MAX, 0, 0x80000000u, 0},
      {NEXAR_F64, NEXAR_MIN, 0, 0x8000000000000000ull, 0x8000000000000000ull},
      {NEXAR_F64, NEXAR_MAX, 0x8000000000000000ull, 0, 0},
      {NEXAR_F16, NEXAR_MIN, 0, 0x8000, 0x8000},
      {NEXAR_F16, NEXAR_MAX, 0x8000, 0, 0},
      {NEXAR_BF16, NEXAR_MIN, 0x8000, 0, 0x8000},
      {NEXAR_BF16, NEXAR_MAX, 0, 0x8000, 0},
      /* NaN in either place gives the default NaN, payload and sign dropped */
      {NEXAR_F32, NEXAR_MIN, 0xffc01234u, 0x3f800000u, 0x7fc00000u},
      {NEXAR_F32, NEXAR_MAX, 0x3f800000u, 0x7f800001u, 0x7fc00000u},
      {NEXAR_F32, NEXAR_SUM, 0x7f800000u, 0xff800000u, 0x7fc00000u}, /* x86 gives 0xffc00000 */
      {NEXAR_F32, NEXAR_PROD, 0, 0x7f800000u, 0x7fc00000u},
      {NEXAR_F32, NEXAR_SUM, 0xffc00001u, 0x7fc00002u, 0x7fc00000u},
      {NEXAR_F64, NEXAR_MIN, 0x7ff0000000000001ull, 0, 0x7ff8000000000000ull},
      {NEXAR_F64, NEXAR_SUM, 0xfff0000000000000ull, 0x7ff0000000000000ull, 0x7ff8000000000000ull},
      {NEXAR_F16, NEXAR_MAX, 0x3c00, 0xfe01, 0x7e00},
      {NEXAR_F16, NEXAR_SUM, 0x7c00, 0xfc00, 0x7e00},
      {NEXAR_F16, NEXAR_MIN, 0x7c01, 0x3c00, 0x7e00},
      {NEXAR_BF16, NEXAR_MIN, 0x3f80, 0xff81, 0x7fc0},
      {NEXAR_BF16, NEXAR_PROD, 0x7f80, 0, 0x7fc0},
      /* infinities order normally */
      {NEXAR_F32, NEXAR_MIN, 0xff800000u, 0x3f800000u, 0xff800000u},
      {NEXAR_F32, NEXAR_MAX, 0x7f800000u, 0x3f800000u, 0x7f800000u},
      /* f16 rounding: 2048 + 1 ties to even, 2048 + 3 rounds up; overflow */
      {NEXAR_F16, NEXAR_SUM, 0x6800, 0x3c00, 0x6800},
      {NEXAR_F16, NEXAR_SUM, 0x6800, 0x4200, 0x6802},
      {NEXAR_F16, NEXAR_SUM, 0x7bff, 0x7bff, 0x7c00},
      {NEXAR_F16, NEXAR_PROD, 0x0001, 0x3800, 0x0000}, /* 2^-25: tie to even zero */
      {NEXAR_F16, NEXAR_PROD, 0x0003, 0x3800, 0x0002}, /* 1.5 * 2^-24: tie to even 2 */
      {NEXAR_BF16, NEXAR_SUM, 0x4380, 0x3f80, 0x4380}, /* 256 + 1: tie to even 256 */
      {NEXAR_BF16, NEXAR_SUM, 0x4381, 0x3f80, 0x4382}, /* 258 + 1: tie to even 260 */
      {NEXAR_BF16, NEXAR_SUM, 0x7f7f, 0x7f7f, 0x7f80},
      {NEXAR_BF16, NEXAR_PROD, 0x0001, 0x3f00, 0x0000}, /* subnormal tie to even */
      /* wrap-around */
      {NEXAR_I8, NEXAR_SUM, 0x7f, 0x01, 0x80},
      {NEXAR_I8, NEXAR_PROD, 0x80, 0xff, 0x80}, /* -128 * -1 */
      {NEXAR_I8, NEXAR_PROD, 0x10, 0x10, 0x00},
      {NEXAR_U8, NEXAR_SUM, 0xff, 0x01, 0x00},
      {NEXAR_U8, NEXAR_PROD, 0xff, 0xff, 0x01},
      {NEXAR_I32, NEXAR_SUM, 0x7fffffffu, 1, 0x80000000u},
      {NEXAR_I32, NEXAR_PROD, 0x80000000u, 0xffffffffu, 0x80000000u},
      {NEXAR_U32, NEXAR_PROD, 0x10000u, 0x10000u, 0},
      {NEXAR_I64, NEXAR_SUM, 0x7fffffffffffffffull, 1, 0x8000000000000000ull},
      {NEXAR_I64, NEXAR_PROD, 0x123456789abcdefull, 0xfedcba987654321ull,
       (uint64_t)(0x123456789abcdefull * 0xfedcba987654321ull)},
      {NEXAR_U64, NEXAR_SUM, ~0ull, 2, 1},
      {NEXAR_U64, NEXAR_PROD, 1ull << 32, 1ull << 32, 0},
      /* signed vs unsigned order */
      {NEXAR_I8, NEXAR_MIN, 0x80, 0x7f, 0x80},
      {NEXAR_U8, NEXAR_MIN, 0x80, 0x7f, 0x7f},
      {NEXAR_I32, NEXAR_MAX, 0xffffffffu, 0, 0},
      {NEXAR_U32, NEXAR_MAX, 0xffffffffu, 0, 0xffffffffu},
      {NEXAR_I64, NEXAR_MIN, 0x8000000000000000ull, 1, 0x8000000000000000ull},
      {NEXAR_U64, NEXAR_MIN, 0x8000000000000000ull, 1, 1},
      {NEXAR_U64, NEXAR_MAX, 0x7fffffffffffffffull, 0x8000000000000000ull, 0x8000000000000000ull},
  };
  for (int s = 0; s < n_impls; s++) {
    nx_reduce_set_impl(impls[s]);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      uint64_t got = run1(cases[c].dt, cases[c].op, cases[c].x, cases[c].y);
      CHECK(got == cases[c].want, "%s case %zu: %s %s(%llx, %llx) = %llx, want %llx", impls[s], c,
            nexar_dtype_name(cases[c].dt), nexar_op_name(cases[c].op),
            (unsigned long long)cases[c].x, (unsigned long long)cases[c].y, (unsigned long long)got,
            (unsigned long long)cases[c].want);
    }
  }
  nx_reduce_set_impl(NULL);
}

/* ----------------------------------------------------------- identities */

static void test_identities(void) {
  static const uint64_t want[N_OPS][10] = {
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
      {0x3f800000u, 0x3ff0000000000000ull, 0x3c00, 0x3f80, 1, 1, 1, 1, 1, 1},
      {0x7f800000u, 0x7ff0000000000000ull, 0x7c00, 0x7f80, 0x7f, 0x7fffffffu, 0x7fffffffffffffffull,
       0xff, 0xffffffffu, ~0ull},
      {0xff800000u, 0xfff0000000000000ull, 0xfc00, 0xff80, 0x80, 0x80000000u, 0x8000000000000000ull,
       0, 0, 0},
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},                                   /* avg: a sum */
      {0, 0, 0, 0, 0xff, 0xffffffffu, ~0ull, 0xff, 0xffffffffu, ~0ull}, /* band */
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},                                   /* bor */
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},                                   /* bxor */
  };
  unsigned char buf[1 + 33 * 8 + 1], x[33 * 8], d[33 * 8];
  for (size_t t = 0; t < 10; t++) {
    for (size_t o = 0; o < N_OPS; o++) {
      nexar_dtype dt = all_dtypes[t];
      nexar_op op = all_ops[o];
      if (!nx_op_dtype_valid(dt, op)) continue;
      size_t size = nexar_dtype_size(dt);
      memset(buf, 0xa5, sizeof buf);
      nx_fill_identity(buf + 1, 33, dt, op); /* unaligned on purpose */
      for (size_t i = 0; i < 33; i++)
        CHECK(get_elem(buf + 1, i, size) == want[op][dt], "identity %s %s [%zu] = %llx",
              nexar_dtype_name(dt), nexar_op_name(op), i,
              (unsigned long long)get_elem(buf + 1, i, size));
      CHECK(buf[0] == 0xa5 && buf[1 + 33 * size] == 0xa5, "identity %s %s wrote outside",
            nexar_dtype_name(dt), nexar_op_name(op));
      /* op(identity, x) == x for non-NaN x (sum: +0 is not neutral for -0). */
      gen_pair(x, d, 33, dt);
      memcpy(d, buf + 1, 33 * size);
      nx_reduce(d, x, 33, dt, op);
      for (size_t i = 0; i < 33; i++) {
        uint64_t xi = get_elem(x, i, size), di = get_elem(d, i, size);
        int is_float = t < 4;
        uint64_t sbit = 1ull << (8 * size - 1);
        if (is_float && ref_elem(dt, NEXAR_MIN, xi, xi) != xi) continue;              /* NaN */
        if (is_float && (op == NEXAR_SUM || op == NEXAR_AVG) && xi == sbit) continue; /* -0 */
        CHECK(di == xi, "%s %s(identity, %llx) = %llx", nexar_dtype_name(dt), nexar_op_name(op),
              (unsigned long long)xi, (unsigned long long)di);
      }
    }
  }
}

/* ---------------------------------------------- SIMD against scalar */

/* Each SIMD set against scalar on random data at many lengths and byte
 * misalignments, in place and out of place, with guard bytes around dst. */
static void test_simd_vs_scalar(void) {
  static const size_t lens[] = {0,  1,  2,  3,  7,  8,  9,  15,   16,
                                17, 31, 32, 33, 63, 64, 65, 1000, 4097};
  static const size_t offs[][3] = {{0, 0, 0}, {1, 3, 5}, {2, 2, 2},
                                   {7, 1, 0}, {3, 0, 6}, {5, 7, 4}};
  enum { MAXN = 4097, PAD = 64, BYTES = MAXN * 8 + 2 * PAD };
  static unsigned char a[BYTES], b[BYTES], d0[BYTES], d1[BYTES], w[BYTES];
  int simd_sets = 0;
  for (int s = 0; s < n_impls; s++) {
    if (strcmp(impls[s], "scalar") == 0) continue;
    simd_sets++;
    for (size_t t = 0; t < 10; t++) {
      for (size_t o = 0; o < N_OPS; o++) {
        nexar_dtype dt = all_dtypes[t];
        nexar_op op = all_ops[o];
        if (!nx_op_dtype_valid(dt, op)) continue;
        size_t size = nexar_dtype_size(dt);
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
          size_t n = lens[li];
          const size_t *off = offs[li % (sizeof offs / sizeof offs[0])];
          unsigned char *pa = a + PAD + off[0], *pb = b + PAD + off[1];
          gen_pair(pa, pb, n, dt);
          /* scalar reference, out of place */
          memset(d0, 0x5a, BYTES);
          nx_reduce3_scalar(d0 + PAD + off[2], pa, pb, n, dt, op);
          /* SIMD out of place, with guards */
          nx_reduce_set_impl(impls[s]);
          memset(d1, 0x5a, BYTES);
          nx_reduce3(d1 + PAD + off[2], pa, pb, n, dt, op);
          CHECK(memcmp(d0, d1, BYTES) == 0, "%s %s %s n=%zu off=%zu,%zu,%zu: differs from scalar",
                impls[s], nexar_dtype_name(dt), nexar_op_name(op), n, off[0], off[1], off[2]);
          /* in place: dst aliases the first source */
          memcpy(w, a, BYTES);
          nx_reduce(w + PAD + off[0], pb, n, dt, op);
          CHECK(memcmp(w + PAD + off[0], d0 + PAD + off[2], n * size) == 0,
                "%s %s %s n=%zu: in place differs", impls[s], nexar_dtype_name(dt),
                nexar_op_name(op), n);
          CHECK(memcmp(w, a, PAD + off[0]) == 0 &&
                    memcmp(w + PAD + off[0] + n * size, a + PAD + off[0] + n * size,
                           BYTES - PAD - off[0] - n * size) == 0,
                "%s %s %s n=%zu: in place wrote outside", impls[s], nexar_dtype_name(dt),
                nexar_op_name(op), n);
          /* dst aliases the second source */
          memcpy(w, b, BYTES);
          nx_reduce3(w + PAD + off[1], pa, w + PAD + off[1], n, dt, op);
          CHECK(memcmp(w + PAD + off[1], d0 + PAD + off[2], n * size) == 0,
                "%s %s %s n=%zu: dst == b differs", impls[s], nexar_dtype_name(dt),
                nexar_op_name(op), n);
          nx_reduce_set_impl(NULL);
        }
      }
    }
  }
  if (!simd_sets) printf("note: no SIMD kernel set on this machine; compared scalar only\n");
}

/* --------------------------------------------------- names and dispatch */

static void test_names_and_dispatch(void) {
  static const char *const dn[] = {"f32", "f64", "f16", "bf16", "i8",
                                   "i32", "i64", "u8",  "u32",  "u64"};
  static const size_t ds[] = {4, 8, 2, 2, 1, 4, 8, 1, 4, 8};
  for (int i = 0; i < 10; i++) {
    CHECK(strcmp(nexar_dtype_name((nexar_dtype)i), dn[i]) == 0, "dtype name %d", i);
    CHECK(nexar_dtype_size((nexar_dtype)i) == ds[i], "dtype size %d", i);
    CHECK(nx_dtype_valid(i), "dtype %d valid", i);
  }
  CHECK(nexar_dtype_size((nexar_dtype)10) == 0 && nexar_dtype_size((nexar_dtype)-1) == 0,
        "invalid dtype size");
  CHECK(strcmp(nexar_dtype_name((nexar_dtype)10), "?") == 0, "invalid dtype name");
  CHECK(strcmp(nexar_dtype_name((nexar_dtype)-1), "?") == 0, "negative dtype name");
  CHECK(!nx_dtype_valid(10) && !nx_dtype_valid(-1), "dtype validity");
  static const char *const on[] = {"sum", "prod", "min", "max", "avg", "band", "bor", "bxor"};
  for (int i = 0; i < N_OPS; i++) {
    CHECK(strcmp(nexar_op_name((nexar_op)i), on[i]) == 0, "op name %d", i);
    CHECK(nx_op_valid(i), "op %d valid", i);
    for (int t = 0; t < 10; t++)
      CHECK(nx_op_dtype_valid(t, i) == (i < NEXAR_BAND || t >= NEXAR_I8), "op %d on dtype %d", i,
            t);
  }
  CHECK(strcmp(nexar_op_name((nexar_op)8), "?") == 0 && !nx_op_valid(8) && !nx_op_valid(-1),
        "invalid op");

  nx_reduce_force_scalar(1);
  CHECK(strcmp(nx_reduce_impl_name(), "scalar") == 0, "force scalar: %s", nx_reduce_impl_name());
  nx_reduce_force_scalar(0);
  CHECK(strcmp(nx_reduce_impl_name(), impls[n_impls - 1]) == 0, "auto picks the best: %s",
        nx_reduce_impl_name());
  CHECK(nx_reduce_set_impl("bogus") == -1, "unknown kernel set accepted");
  setenv("NEXAR_REDUCE_IMPL", "scalar", 1);
  nx_reduce_set_impl(NULL);
  CHECK(strcmp(nx_reduce_impl_name(), "scalar") == 0, "NEXAR_REDUCE_IMPL ignored");
  unsetenv("NEXAR_REDUCE_IMPL");
  nx_reduce_set_impl(NULL);

  /* Invalid dt/op and count 0 leave memory alone (and accept NULL). */
  float d[4] = {1, 2, 3, 4}, s[4] = {1, 1, 1, 1};
  nx_reduce(d, s, 4, (nexar_dtype)10, NEXAR_SUM);
  nx_reduce(d, s, 4, NEXAR_F32, (nexar_op)7);
  nx_reduce(NULL, NULL, 0, NEXAR_F32, NEXAR_SUM);
  nx_fill_identity(d, 4, (nexar_dtype)-3, NEXAR_SUM);
  CHECK(d[0] == 1 && d[3] == 4, "invalid arguments changed dst");
}

/* nx_avg_div against an independent quotient: floats in double (f32: a double
 * then float rounding is correct, 53 >= 2*24 + 2; f16/bf16: the double
 * quotient lies far closer to the exact one than any rounding boundary, and
 * ref_round rounds it once), integers by C division of the wide value. */
static uint64_t ref_avg(nexar_dtype dt, uint64_t xb, uint32_t n) {
  switch (dt) {
  case NEXAR_F32: {
    float r = (float)((double)bitsf((uint32_t)xb) / n);
    return isnan(r) ? 0x7fc00000u : fbits(r);
  }
  case NEXAR_F64: {
    volatile double r = bitsd(xb) / n;
    return isnan(r) ? 0x7ff8000000000000ull : dbits(r);
  }
  case NEXAR_F16:
  case NEXAR_BF16: {
    int f16 = dt == NEXAR_F16;
    double x = f16 ? ref_f16_value((uint16_t)xb) : ref_bf16_value((uint16_t)xb);
    if (isnan(x)) return f16 ? 0x7e00 : 0x7fc0;
    double r = f16 ? ref_round_f16(x / n) : ref_round_bf16(x / n);
    return f16 ? nx_f32_to_f16((float)r) : nx_f32_to_bf16((float)r);
  }
  case NEXAR_I8:
    return (uint8_t)((int8_t)xb / (int64_t)n);
  case NEXAR_I32:
    return (uint32_t)((int32_t)(uint32_t)xb / (int64_t)n);
  case NEXAR_I64:
    return (uint64_t)((int64_t)xb / (int64_t)n);
  case NEXAR_U8:
    return (uint8_t)xb / n;
  case NEXAR_U32:
    return (uint32_t)xb / n;
  case NEXAR_U64:
    return xb / n;
  }
  return 0;
}

static void test_avg_div(void) {
  static const uint32_t ns[] = {1, 2, 3, 5, 7, 9, 1000, 4097, 65535};
  enum { N = 2049 };
  unsigned char x[N * 8 + 1], d[N * 8 + 2], tmp[N * 8];
  for (int si = 0; si < n_impls; si++) { /* every kernel set, against the reference */
    CHECK(nx_reduce_set_impl(impls[si]) == 0, "select %s", impls[si]);
    for (size_t t = 0; t < 10; t++)
      for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        nexar_dtype dt = all_dtypes[t];
        size_t size = nexar_dtype_size(dt);
        gen_pair(x, tmp, N, dt);
        if (dt == NEXAR_F16) /* every f16 pattern once (N > 2048 only covers part: shift by k) */
          for (size_t i = 0; i < N; i++)
            set_elem(x, i, 2, (uint16_t)(i * 32 + k));
        d[0] = 0x77, d[1 + N * size] = 0x77;
        memcpy(d + 1, x, N * size); /* unaligned */
        nx_avg_div(d + 1, N, dt, ns[k]);
        int bad = 0;
        for (size_t i = 0; i < N && bad < 3; i++) {
          uint64_t xi = get_elem(x, i, size), got = get_elem(d + 1, i, size);
          uint64_t want = ns[k] == 1 ? xi : ref_avg(dt, xi, ns[k]);
          bad += got != want;
          CHECK(got == want, "%s avg %s / %u [%zu]: %llx -> %llx, want %llx", impls[si],
                nexar_dtype_name(dt), ns[k], i, (unsigned long long)xi, (unsigned long long)got,
                (unsigned long long)want);
        }
        CHECK(d[0] == 0x77 && d[1 + N * size] == 0x77, "avg %s wrote outside",
              nexar_dtype_name(dt));
      }
  }
  nx_reduce_set_impl(NULL);
  /* every f16 and bf16 pattern through every kernel set, against the reference */
  static uint16_t all[65536 + 3];
  static const uint32_t ns2[] = {3, 6, 7, 11, 12345, 30001, 54321, 65521};
  for (int dti = 0; dti < 2; dti++)
    for (size_t k = 0; k < sizeof ns2 / sizeof *ns2; k++)
      for (int si = 0; si < n_impls; si++) {
        nexar_dtype dt = dti ? NEXAR_BF16 : NEXAR_F16;
        for (size_t i = 0; i < 65536; i++)
          all[i + 1] = (uint16_t)i;
        nx_reduce_set_impl(impls[si]);
        nx_avg_div(all + 1, 65536, dt, ns2[k]);
        int bad = 0;
        for (size_t i = 0; i < 65536 && bad < 3; i++) {
          uint64_t want = ref_avg(dt, i, ns2[k]);
          bad += all[i + 1] != want;
          CHECK(all[i + 1] == want, "%s avg %s %zx / %u = %x, want %llx", impls[si],
                nexar_dtype_name(dt), i, ns2[k], all[i + 1], (unsigned long long)want);
        }
      }
  nx_reduce_set_impl(NULL);
  /* the documented cases: integers truncate toward zero; bf16 rounds to even */
  int32_t v[4] = {7, -7, 5, -1};
  nx_avg_div(v, 4, NEXAR_I32, 2);
  CHECK(v[0] == 3 && v[1] == -3 && v[2] == 2 && v[3] == 0, "i32 avg truncation");
  uint16_t h = nx_f32_to_bf16(3.0f); /* 3 / 2 = 1.5 exact; 257 / 2 = 128.5 -> 128 (even) */
  nx_avg_div(&h, 1, NEXAR_BF16, 2);
  CHECK(nx_bf16_to_f32(h) == 1.5f, "bf16 avg 3/2");
}

int main(void) {
  /* Kernel sets are selected explicitly below; the automatic choice is
   * checked against the best available one, so ignore any override. */
  unsetenv("NEXAR_REDUCE_IMPL");
  find_impls();
  test_names_and_dispatch();
  test_f16_exhaustive();
  test_bf16_exhaustive();
  test_narrowing();
#if TEST_X86
  unsigned eax, ebx, ecx = 0, edx;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C))
    test_f16c_agrees();
#endif
  test_rules();
  test_identities();
  test_against_reference();
  test_simd_vs_scalar();
  test_avg_div();
  if (failures) {
    fprintf(stderr, "reduce_test: %d failure(s)\n", failures);
    return 1;
  }
  printf("reduce_test: ok\n");
  return 0;
}
