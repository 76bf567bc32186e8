/* AVX2 + F16C kernels. Each function carries its own target attribute, so
 * the file needs no special flags and the dispatcher only calls in here when
 * the CPU has both features. Every operation reproduces reduce.c bit for bit;
 * the tail that does not fill a vector is handed to the scalar kernels. */
#include "reduce/reduce.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define TGT __attribute__((target("avx2,f16c")))
#define INL static inline __attribute__((always_inline)) TGT

typedef unsigned char uchar;

/* ------------------------------------------------------------- floats */

/* x86 NaN results copy an operand or are negative (inf - inf): replace any
 * NaN with the default quiet NaN like the scalar kernels. */
INL __m256 canon_ps(__m256 r) {
  return _mm256_blendv_ps(r, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)),
                          _mm256_cmp_ps(r, r, _CMP_UNORD_Q));
}

INL __m256 sum_ps(__m256 x, __m256 y) {
  return canon_ps(_mm256_add_ps(x, y));
}

INL __m256 prod_ps(__m256 x, __m256 y) {
  return canon_ps(_mm256_mul_ps(x, y));
}

/* vminps returns its second operand on equality or NaN. Taking both operand
 * orders and OR-ing gives the minimum when the inputs differ and x|y when
 * they compare equal, which is -0 for {-0, +0}; NaNs are then overwritten. */
INL __m256 min_ps(__m256 x, __m256 y) {
  __m256 m = _mm256_or_ps(_mm256_min_ps(x, y), _mm256_min_ps(y, x));
  return _mm256_blendv_ps(m, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)),
                          _mm256_cmp_ps(x, y, _CMP_UNORD_Q));
}

/* As min_ps with AND: +0 & -0 is +0. */
INL __m256 max_ps(__m256 x, __m256 y) {
  __m256 m = _mm256_and_ps(_mm256_max_ps(x, y), _mm256_max_ps(y, x));
  return _mm256_blendv_ps(m, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)),
                          _mm256_cmp_ps(x, y, _CMP_UNORD_Q));
}

INL __m256d canon_pd(__m256d r) {
  return _mm256_blendv_pd(r, _mm256_castsi256_pd(_mm256_set1_epi64x(0x7ff8000000000000ll)),
                          _mm256_cmp_pd(r, r, _CMP_UNORD_Q));
}

INL __m256d sum_pd(__m256d x, __m256d y) {
  return canon_pd(_mm256_add_pd(x, y));
}

INL __m256d prod_pd(__m256d x, __m256d y) {
  return canon_pd(_mm256_mul_pd(x, y));
}

INL __m256d min_pd(__m256d x, __m256d y) {
  __m256d m = _mm256_or_pd(_mm256_min_pd(x, y), _mm256_min_pd(y, x));
  return _mm256_blendv_pd(m, _mm256_castsi256_pd(_mm256_set1_epi64x(0x7ff8000000000000ll)),
                          _mm256_cmp_pd(x, y, _CMP_UNORD_Q));
}

INL __m256d max_pd(__m256d x, __m256d y) {
  __m256d m = _mm256_and_pd(_mm256_max_pd(x, y), _mm256_max_pd(y, x));
  return _mm256_blendv_pd(m, _mm256_castsi256_pd(_mm256_set1_epi64x(0x7ff8000000000000ll)),
                          _mm256_cmp_pd(x, y, _CMP_UNORD_Q));
}

/* ------------------------------------------- 16-bit float loads/stores */

/* vcvtph2ps is exact and quiets NaNs exactly like nx_f16_to_f32. */
INL __m256 ld_f16(const uchar *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* vcvtps2ph with immediate 0 rounds to nearest even, subnormals included. */
INL void st_f16(uchar *p, __m256 v) {
  _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* bf16 -> f32 is a 16-bit shift, which interleaving with zeros does for free:
 * the low and high halves of each 128-bit lane become two f32 vectors, and
 * packus below undoes the interleave. A signaling NaN stays signaling here,
 * unlike in nx_bf16_to_f32, but sum and prod turn any NaN into the default. */
INL __m256 bf16_lo(__m256i v) {
  return _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), v));
}

INL __m256 bf16_hi(__m256i v) {
  return _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), v));
}

/* Round to nearest even as nx_f32_to_bf16, result in the low 16 bits. NaNs
 * here are always the default NaN, which this maps to 0x7fc0. */
INL __m256i bf16_round(__m256 v) {
  __m256i x = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  x = _mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  return _mm256_srli_epi32(x, 16);
}

INL __m256i bf16_pack(__m256 lo, __m256 hi) {
  return _mm256_packus_epi32(bf16_round(lo), bf16_round(hi));
}

/* min/max of 16-bit floats need no conversion: flipping the magnitude bits
 * of negative values makes signed 16-bit order the float order, with -0
 * (0xffff) below +0. The flip is its own inverse. */
INL __m256i half_key(__m256i h) {
  return _mm256_xor_si256(h, _mm256_and_si256(_mm256_srai_epi16(h, 15), _mm256_set1_epi16(0x7fff)));
}

/* All-ones in lanes where x or y is a NaN (magnitude above inf's pattern). */
INL __m256i half_nan(__m256i x, __m256i y, short inf) {
  __m256i m = _mm256_set1_epi16(0x7fff);
  __m256i mag = _mm256_max_epu16(_mm256_and_si256(x, m), _mm256_and_si256(y, m));
  return _mm256_cmpgt_epi16(mag, _mm256_set1_epi16(inf));
}

#define HALF_MINMAX(NAME, OP, INF, QNAN)                                                           \
  INL __m256i NAME(__m256i x, __m256i y) {                                                         \
    __m256i r = half_key(OP(half_key(x), half_key(y)));                                            \
    return _mm256_blendv_epi8(r, _mm256_set1_epi16(QNAN), half_nan(x, y, INF));                    \
  }
HALF_MINMAX(min_f16, _mm256_min_epi16, 0x7c00, 0x7e00)
HALF_MINMAX(max_f16, _mm256_max_epi16, 0x7c00, 0x7e00)
HALF_MINMAX(min_bf16, _mm256_min_epi16, 0x7f80, 0x7fc0)
HALF_MINMAX(max_bf16, _mm256_max_epi16, 0x7f80, 0x7fc0)

/* ------------------------------------------------------------ integers */

/* No byte multiply: multiply 16-bit lanes twice, even and odd bytes. The low
 * byte of a 16-bit product only depends on the low bytes of the factors. */
INL __m256i mullo_epi8(__m256i x, __m256i y) {
  __m256i even = _mm256_mullo_epi16(x, y);
  __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(x, 8), _mm256_srli_epi16(y, 8));
  return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0xff)),
                         _mm256_slli_epi16(odd, 8));
}

/* Low 64 bits of x*y from 32x32->64 products; the hi*hi term falls off. */
INL __m256i mullo_epi64(__m256i x, __m256i y) {
  __m256i lo = _mm256_mul_epu32(x, y);
  __m256i c1 = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), y);
  __m256i c2 = _mm256_mul_epu32(x, _mm256_srli_epi64(y, 32));
  return _mm256_add_epi64(lo, _mm256_slli_epi64(_mm256_add_epi64(c1, c2), 32));
}

INL __m256i min_epi64(__m256i x, __m256i y) {
  return _mm256_blendv_epi8(x, y, _mm256_cmpgt_epi64(x, y));
}

INL __m256i max_epi64(__m256i x, __m256i y) {
  return _mm256_blendv_epi8(y, x, _mm256_cmpgt_epi64(x, y));
}

/* Unsigned order is signed order with the sign bits flipped. */
INL __m256i gt_epu64(__m256i x, __m256i y) {
  __m256i s = _mm256_set1_epi64x((long long)0x8000000000000000ull);
  return _mm256_cmpgt_epi64(_mm256_xor_si256(x, s), _mm256_xor_si256(y, s));
}

INL __m256i min_epu64(__m256i x, __m256i y) {
  return _mm256_blendv_epi8(x, y, gt_epu64(x, y));
}

INL __m256i max_epu64(__m256i x, __m256i y) {
  return _mm256_blendv_epi8(y, x, gt_epu64(x, y));
}

/* ------------------------------------------------------------- kernels */

/* A kernel processes whole vectors and returns how many elements it did. */
typedef size_t (*kernel_fn)(uchar *, const uchar *, const uchar *, size_t);

#define K_PS(NAME, FN)                                                                             \
  static TGT size_t NAME(uchar *d, const uchar *x, const uchar *y, size_t n) {                     \
    size_t i = 0;                                                                                  \
    for (; i + 8 <= n; i += 8)                                                                     \
      _mm256_storeu_ps((float *)(d + 4 * i), FN(_mm256_loadu_ps((const float *)(x + 4 * i)),       \
                                                _mm256_loadu_ps((const float *)(y + 4 * i))));     \
    return i;                                                                                      \
  }

#define K_PD(NAME, FN)                                                                             \
  static TGT size_t NAME(uchar *d, const uchar *x, const uchar *y, size_t n) {                     \
    size_t i = 0;                                                                                  \
    for (; i + 4 <= n; i += 4)                                                                     \
      _mm256_storeu_pd((double *)(d + 8 * i), FN(_mm256_loadu_pd((const double *)(x + 8 * i)),     \
                                                 _mm256_loadu_pd((const double *)(y + 8 * i))));   \
    return i;                                                                                      \
  }

/* f16 sums and products go through f32, eight at a time. */
#define K_F16(NAME, FN)                                                                            \
  static TGT size_t NAME(uchar *d, const uchar *x, const uchar *y, size_t n) {                     \
    size_t i = 0;                                                                                  \
    for (; i + 8 <= n; i += 8)                                                                     \
      st_f16(d + 2 * i, FN(ld_f16(x + 2 * i), ld_f16(y + 2 * i)));                                 \
    return i;                                                                                      \
  }

/* bf16 sums and products: sixteen per step, as two f32 vectors. */
#define K_BF16(NAME, FN)                                                                           \
  static TGT size_t NAME(uchar *d, const uchar *x, const uchar *y, size_t n) {                     \
    size_t i = 0;                                                                                  \
    for (; i + 16 <= n; i += 16) {                                                                 \
      __m256i a = _mm256_loadu_si256((const __m256i *)(x + 2 * i));                                \
      __m256i b = _mm256_loadu_si256((const __m256i *)(y + 2 * i));                                \
      _mm256_storeu_si256((__m256i *)(d + 2 * i),                                                  \
                          bf16_pack(FN(bf16_lo(a), bf16_lo(b)), FN(bf16_hi(a), bf16_hi(b))));      \
    }                                                                                              \
    return i;                                                                                      \
  }

/* ESZ bytes per element, 32/ESZ elements per vector. */
#define K_INT(NAME, ESZ, FN)                                                                       \
  static TGT size_t NAME(uchar *d, const uchar *x, const uchar *y, size_t n) {                     \
    size_t i = 0;                                                                                  \
    for (; i + 32 / ESZ <= n; i += 32 / ESZ)                                                       \
      _mm256_storeu_si256((__m256i *)(d + ESZ * i),                                                \
                          FN(_mm256_loadu_si256((const __m256i *)(x + ESZ * i)),                   \
                             _mm256_loadu_si256((const __m256i *)(y + ESZ * i))));                 \
    return i;                                                                                      \
  }

K_PS(k_sum_f32, sum_ps)
K_PS(k_prod_f32, prod_ps)
K_PS(k_min_f32, min_ps)
K_PS(k_max_f32, max_ps)
K_PD(k_sum_f64, sum_pd)
K_PD(k_prod_f64, prod_pd)
K_PD(k_min_f64, min_pd)
K_PD(k_max_f64, max_pd)
K_F16(k_sum_f16, sum_ps)
K_F16(k_prod_f16, prod_ps)
K_INT(k_min_f16, 2, min_f16)
K_INT(k_max_f16, 2, max_f16)
K_BF16(k_sum_bf16, sum_ps)
K_BF16(k_prod_bf16, prod_ps)
K_INT(k_min_bf16, 2, min_bf16)
K_INT(k_max_bf16, 2, max_bf16)
/* Wrapping sums and products are the same bits for signed and unsigned. */
K_INT(k_sum_x8, 1, _mm256_add_epi8)
K_INT(k_prod_x8, 1, mullo_epi8)
K_INT(k_min_i8, 1, _mm256_min_epi8)
K_INT(k_max_i8, 1, _mm256_max_epi8)
K_INT(k_min_u8, 1, _mm256_min_epu8)
K_INT(k_max_u8, 1, _mm256_max_epu8)
K_INT(k_sum_x32, 4, _mm256_add_epi32)
K_INT(k_prod_x32, 4, _mm256_mullo_epi32)
K_INT(k_min_i32, 4, _mm256_min_epi32)
K_INT(k_max_i32, 4, _mm256_max_epi32)
K_INT(k_min_u32, 4, _mm256_min_epu32)
K_INT(k_max_u32, 4, _mm256_max_epu32)
K_INT(k_sum_x64, 8, _mm256_add_epi64)
K_INT(k_prod_x64, 8, mullo_epi64)
K_INT(k_min_i64, 8, min_epi64)
K_INT(k_max_i64, 8, max_epi64)
K_INT(k_min_u64, 8, min_epu64)
K_INT(k_max_u64, 8, max_epu64)
/* Bitwise operators: the same bits whatever the element width or sign. */
K_INT(k_band_x8, 1, _mm256_and_si256)
K_INT(k_bor_x8, 1, _mm256_or_si256)
K_INT(k_bxor_x8, 1, _mm256_xor_si256)
K_INT(k_band_x32, 4, _mm256_and_si256)
K_INT(k_bor_x32, 4, _mm256_or_si256)
K_INT(k_bxor_x32, 4, _mm256_xor_si256)
K_INT(k_band_x64, 8, _mm256_and_si256)
K_INT(k_bor_x64, 8, _mm256_or_si256)
K_INT(k_bxor_x64, 8, _mm256_xor_si256)

/* Indexed [nexar_dtype][nexar_op]. */
/* NEXAR_AVG reduces as a sum (the division is a separate pass); the bitwise
 * operators have no float kernels (callers refuse them). */
static const kernel_fn kernels[10][8] = {
    {k_sum_f32, k_prod_f32, k_min_f32, k_max_f32, k_sum_f32, NULL, NULL, NULL},
    {k_sum_f64, k_prod_f64, k_min_f64, k_max_f64, k_sum_f64, NULL, NULL, NULL},
    {k_sum_f16, k_prod_f16, k_min_f16, k_max_f16, k_sum_f16, NULL, NULL, NULL},
    {k_sum_bf16, k_prod_bf16, k_min_bf16, k_max_bf16, k_sum_bf16, NULL, NULL, NULL},
    {k_sum_x8, k_prod_x8, k_min_i8, k_max_i8, k_sum_x8, k_band_x8, k_bor_x8, k_bxor_x8},
    {k_sum_x32, k_prod_x32, k_min_i32, k_max_i32, k_sum_x32, k_band_x32, k_bor_x32, k_bxor_x32},
    {k_sum_x64, k_prod_x64, k_min_i64, k_max_i64, k_sum_x64, k_band_x64, k_bor_x64, k_bxor_x64},
    {k_sum_x8, k_prod_x8, k_min_u8, k_max_u8, k_sum_x8, k_band_x8, k_bor_x8, k_bxor_x8},
    {k_sum_x32, k_prod_x32, k_min_u32, k_max_u32, k_sum_x32, k_band_x32, k_bor_x32, k_bxor_x32},
    {k_sum_x64, k_prod_x64, k_min_u64, k_max_u64, k_sum_x64, k_band_x64, k_bor_x64, k_bxor_x64},
};

void nx_reduce3_avx2(void *dst, const void *a, const void *b, size_t count, nexar_dtype dt,
                     nexar_op op) {
  kernel_fn k = kernels[dt][op];
  if (!k) return;
  size_t done = k(dst, a, b, count);
  if (done < count) {
    size_t off = done * nexar_dtype_size(dt);
    nx_reduce3_scalar((uchar *)dst + off, (const uchar *)a + off, (const uchar *)b + off,
                      count - done, dt, op);
  }
}

/* The average's division for f32 and f64 (IEEE division is correctly
 * rounded, so the bits equal the scalar kernel's); every other dtype, and the
 * tail, goes to the scalar one. */
static TGT size_t avg_f32(uchar *p, size_t count, uint32_t n) {
  __m256 d = _mm256_set1_ps((float)n);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 q = _mm256_div_ps(_mm256_loadu_ps((const float *)(p + 4 * i)), d);
    _mm256_storeu_ps((float *)(p + 4 * i), canon_ps(q));
  }
  return i;
}

static TGT size_t avg_f64(uchar *p, size_t count, uint32_t n) {
  __m256d d = _mm256_set1_pd((double)n);
  size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    __m256d q = _mm256_div_pd(_mm256_loadu_pd((const double *)(p + 8 * i)), d);
    _mm256_storeu_pd((double *)(p + 8 * i), canon_pd(q));
  }
  return i;
}

/* f16/bf16 as the scalar kernel does: widen (exact), divide in double, round
 * to f32 with round-to-odd, then once to the 16-bit format (nearest even).
 * Round-to-odd: truncate toward zero (step back one unit when the nearest-even
 * conversion went away from zero) and set the last bit when inexact. */
INL __m128i lo32_of_64(__m256d m) {
  return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(
      _mm256_castpd_si256(m), _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
}

INL __m128 pd_to_ps_odd(__m256d q) {
  __m128 t = _mm256_cvtpd_ps(q);
  __m256d back = _mm256_cvtps_pd(t);
  __m256d abs = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffll));
  __m128i inexact = lo32_of_64(_mm256_cmp_pd(back, q, _CMP_NEQ_UQ));
  __m128i away =
      lo32_of_64(_mm256_cmp_pd(_mm256_and_pd(back, abs), _mm256_and_pd(q, abs), _CMP_GT_OQ));
  __m128i b = _mm_add_epi32(_mm_castps_si128(t), away); /* away is -1: one unit back */
  b = _mm_or_si128(b, _mm_and_si128(inexact, _mm_set1_epi32(1)));
  return _mm_castsi128_ps(b);
}

/* Eight widened values divided by d, rounded to odd; NaN lanes the default NaN. */
INL __m256 avg8_odd(__m256 x, __m256d d) {
  __m128 a = pd_to_ps_odd(_mm256_div_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), d));
  __m128 b = pd_to_ps_odd(_mm256_div_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), d));
  __m256 r = _mm256_insertf128_ps(_mm256_castps128_ps256(a), b, 1);
  return _mm256_blendv_ps(r, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)),
                          _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

static TGT size_t avg_f16(uchar *p, size_t count, uint32_t n) {
  __m256d d = _mm256_set1_pd((double)n);
  size_t i = 0;
  for (; i + 8 <= count; i += 8)
    st_f16(p + 2 * i, avg8_odd(ld_f16(p + 2 * i), d));
  return i;
}

static TGT size_t avg_bf16(uchar *p, size_t count, uint32_t n) {
  __m256d d = _mm256_set1_pd((double)n);
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m256i v = _mm256_loadu_si256((const __m256i *)(p + 2 * i));
    _mm256_storeu_si256((__m256i *)(p + 2 * i),
                        bf16_pack(avg8_odd(bf16_lo(v), d), avg8_odd(bf16_hi(v), d)));
  }
  return i;
}

void nx_avg_div_avx2(void *buf, size_t count, nexar_dtype dt, uint32_t n) {
  size_t done = 0;
  if (n > 1 && dt == NEXAR_F32) done = avg_f32(buf, count, n);
  if (n > 1 && dt == NEXAR_F64) done = avg_f64(buf, count, n);
  if (n > 1 && dt == NEXAR_F16) done = avg_f16(buf, count, n);
  if (n > 1 && dt == NEXAR_BF16) done = avg_bf16(buf, count, n);
  size_t off = done * nexar_dtype_size(dt);
  nx_avg_div_scalar((uchar *)buf + off, count - done, dt, n);
}

#else
typedef int nx_reduce_avx2_not_x86; /* keeps the translation unit non-empty */
#endif
