/* AVX-512 (F, BW, DQ) kernels: reduce_avx2.c at twice the width, with mask
 * registers for the NaN and signed-zero fix-ups. Same rules as there: own
 * target attributes, bit-identical to reduce.c, scalar tail. */
#include "reduce/reduce.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512dq,avx2,f16c")))
#define INL static inline __attribute__((always_inline)) TGT

typedef unsigned char uchar;

/* ------------------------------------------------------------- floats */

INL __m512 qnan_ps(void) {
  return _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000));
}

INL __m512d qnan_pd(void) {
  return _mm512_castsi512_pd(_mm512_set1_epi64(0x7ff8000000000000ll));
}

/* Any NaN result becomes the default quiet NaN (see reduce.h). */
INL __m512 canon_ps(__m512 r) {
  return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q), qnan_ps());
}

INL __m512 sum_ps(__m512 x, __m512 y) {
  return canon_ps(_mm512_add_ps(x, y));
}

INL __m512 prod_ps(__m512 x, __m512 y) {
  return canon_ps(_mm512_mul_ps(x, y));
}

/* vminps gives its second operand on equality and NaN: on equality take x|y
 * (-0 for {-0, +0}), on NaN the default NaN. */
INL __m512 min_ps(__m512 x, __m512 y) {
  __m512 m = _mm512_min_ps(x, y);
  __m512 both = _mm512_or_ps(x, y);
  m = _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(x, y, _CMP_EQ_OQ), both);
  return _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(x, y, _CMP_UNORD_Q), qnan_ps());
}

/* As min_ps with x&y: +0 for {-0, +0}. */
INL __m512 max_ps(__m512 x, __m512 y) {
  __m512 m = _mm512_max_ps(x, y);
  __m512 both = _mm512_and_ps(x, y);
  m = _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(x, y, _CMP_EQ_OQ), both);
  return _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(x, y, _CMP_UNORD_Q), qnan_ps());
}

INL __m512d canon_pd(__m512d r) {
  return _mm512_mask_mov_pd(r, _mm512_cmp_pd_mask(r, r, _CMP_UNORD_Q), qnan_pd());
}

INL __m512d sum_pd(__m512d x, __m512d y) {
  return canon_pd(_mm512_add_pd(x, y));
}

INL __m512d prod_pd(__m512d x, __m512d y) {
  return canon_pd(_mm512_mul_pd(x, y));
}

INL __m512d min_pd(__m512d x, __m512d y) {
  __m512d m = _mm512_min_pd(x, y);
  __m512d both = _mm512_or_pd(x, y);
  m = _mm512_mask_mov_pd(m, _mm512_cmp_pd_mask(x, y, _CMP_EQ_OQ), both);
  return _mm512_mask_mov_pd(m, _mm512_cmp_pd_mask(x, y, _CMP_UNORD_Q), qnan_pd());
}

INL __m512d max_pd(__m512d x, __m512d y) {
  __m512d m = _mm512_max_pd(x, y);
  __m512d both = _mm512_and_pd(x, y);
  m = _mm512_mask_mov_pd(m, _mm512_cmp_pd_mask(x, y, _CMP_EQ_OQ), both);
  return _mm512_mask_mov_pd(m, _mm512_cmp_pd_mask(x, y, _CMP_UNORD_Q), qnan_pd());
}

/* ------------------------------------------- 16-bit float loads/stores */

/* vcvtph2ps: exact, NaNs quieted as nx_f16_to_f32 does. */
INL __m512 ld_f16(const uchar *p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* vcvtps2ph, immediate 0: round to nearest even, subnormals included. */
INL void st_f16(uchar *p, __m512 v) {
  _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* bf16 -> f32 by interleaving with zeros (a 16-bit shift); packus undoes the
 * interleave per 128-bit lane. Signaling NaNs stay signaling, but sum and
 * prod map every NaN to the default one. */
INL __m512 bf16_lo(__m512i v) {
  return _mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), v));
}

INL __m512 bf16_hi(__m512i v) {
  return _mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), v));
}

/* Round to nearest even into the low 16 bits. vcvtneps2bf16 is not used: it
 * flushes subnormals. NaNs here are the default NaN -> 0x7fc0. */
INL __m512i bf16_round(__m512 v) {
  __m512i x = _mm512_castps_si512(v);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  x = _mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  return _mm512_srli_epi32(x, 16);
}

INL __m512i bf16_pack(__m512 lo, __m512 hi) {
  return _mm512_packus_epi32(bf16_round(lo), bf16_round(hi));
}

/* 16-bit float min/max in the integer domain: flipping the magnitude bits of
 * negative values makes signed order the float order (-0 below +0). */
INL __m512i half_key(__m512i h) {
  return _mm512_xor_si512(h, _mm512_and_si512(_mm512_srai_epi16(h, 15), _mm512_set1_epi16(0x7fff)));
}

INL __mmask32 half_nan(__m512i x, __m512i y, short inf) {
  __m512i m = _mm512_set1_epi16(0x7fff);
  __m512i mag = _mm512_max_epu16(_mm512_and_si512(x, m), _mm512_and_si512(y, m));
  return _mm512_cmpgt_epu16_mask(mag, _mm512_set1_epi16(inf));
}

#define HALF_MINMAX(NAME, OP, INF, QNAN)                                                           \
  INL __m512i NAME(__m512i x, __m512i y) {                                                         \
    __m512i r = half_key(OP(half_key(x), half_key(y)));                                            \
    return _mm512_mask_mov_epi16(r, half_nan(x, y, INF), _mm512_set1_epi16(QNAN));                 \
  }
HALF_MINMAX(min_f16, _mm512_min_epi16, 0x7c00, 0x7e00)
HALF_MINMAX(max_f16, _mm512_max_epi16, 0x7c00, 0x7e00)
HALF_MINMAX(min_bf16, _mm512_min_epi16, 0x7f80, 0x7fc0)
HALF_MINMAX(max_bf16, _mm512_max_epi16, 0x7f80, 0x7fc0)

/* ------------------------------------------------------------ integers */

/* Byte products from two 16-bit multiplies (even bytes, then odd bytes). */
INL __m512i mullo_epi8(__m512i x, __m512i y) {
  __m512i even = _mm512_mullo_epi16(x, y);
  __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(x, 8), _mm512_srli_epi16(y, 8));
  return _mm512_mask_blend_epi8((__mmask64)0xaaaaaaaaaaaaaaaaull, even, _mm512_slli_epi16(odd, 8));
}

/* ------------------------------------------------------------- kernels */

typedef size_t (*kernel_fn)(uchar *, const uchar *, const uchar *, size_t);

#define K_PS(NAME, FN)                                                                             \
  static TGT size_t NAME(uchar *d, const uchar *x, const uchar *y, size_t n) {                     \
    size_t i = 0;                                                                                  \
    for (; i + 16 <= n; i += 16)                                                                   \
      _mm512_storeu_ps(d + 4 * i, FN(_mm512_loadu_ps(x + 4 * i), _mm512_loadu_ps(y + 4 * i)));     \
    return i;                                                                                      \
  }

#define K_PD(NAME, FN)                                                                             \
  static TGT size_t NAME(uchar *d, const uchar *x, const uchar *y, size_t n) {                     \
    size_t i = 0;                                                                                  \
    for (; i + 8 <= n; i += 8)                                                                     \
      _mm512_storeu_pd(d + 8 * i, FN(_mm512_loadu_pd(x + 8 * i), _mm512_loadu_pd(y + 8 * i)));     \
    return i;                                                                                      \
  }

#define K_F16(NAME, FN)                                                                            \
  static TGT size_t NAME(uchar *d, const uchar *x, const uchar *y, size_t n) {                     \
    size_t i = 0;                                                                                  \
    for (; i + 16 <= n; i += 16)                                                                   \
      st_f16(d + 2 * i, FN(ld_f16(x + 2 * i), ld_f16(y + 2 * i)));                                 \
    return i;                                                                                      \
  }

#define K_BF16(NAME, FN)                                                                           \
  static TGT size_t NAME(uchar *d, const uchar *x, const uchar *y, size_t n) {                     \
    size_t i = 0;                                                                                  \
    for (; i + 32 <= n; i += 32) {                                                                 \
      __m512i a = _mm512_loadu_si512(x + 2 * i), b = _mm512_loadu_si512(y + 2 * i);                \
      _mm512_storeu_si512(d + 2 * i,                                                               \
                          bf16_pack(FN(bf16_lo(a), bf16_lo(b)), FN(bf16_hi(a), bf16_hi(b))));      \
    }                                                                                              \
    return i;                                                                                      \
  }

#define K_INT(NAME, ESZ, FN)                                                                       \
  static TGT size_t NAME(uchar *d, const uchar *x, const uchar *y, size_t n) {                     \
    size_t i = 0;                                                                                  \
    for (; i + 64 / ESZ <= n; i += 64 / ESZ)                                                       \
      _mm512_storeu_si512(d + ESZ * i,                                                             \
                          FN(_mm512_loadu_si512(x + ESZ * i), _mm512_loadu_si512(y + ESZ * i)));   \
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
K_INT(k_sum_x8, 1, _mm512_add_epi8)
K_INT(k_prod_x8, 1, mullo_epi8)
K_INT(k_min_i8, 1, _mm512_min_epi8)
K_INT(k_max_i8, 1, _mm512_max_epi8)
K_INT(k_min_u8, 1, _mm512_min_epu8)
K_INT(k_max_u8, 1, _mm512_max_epu8)
K_INT(k_sum_x32, 4, _mm512_add_epi32)
K_INT(k_prod_x32, 4, _mm512_mullo_epi32)
K_INT(k_min_i32, 4, _mm512_min_epi32)
K_INT(k_max_i32, 4, _mm512_max_epi32)
K_INT(k_min_u32, 4, _mm512_min_epu32)
K_INT(k_max_u32, 4, _mm512_max_epu32)
K_INT(k_sum_x64, 8, _mm512_add_epi64)
K_INT(k_prod_x64, 8, _mm512_mullo_epi64)
K_INT(k_min_i64, 8, _mm512_min_epi64)
K_INT(k_max_i64, 8, _mm512_max_epi64)
K_INT(k_min_u64, 8, _mm512_min_epu64)
K_INT(k_max_u64, 8, _mm512_max_epu64)
/* Bitwise operators: the same bits whatever the element width or sign. */
K_INT(k_band_x8, 1, _mm512_and_si512)
K_INT(k_bor_x8, 1, _mm512_or_si512)
K_INT(k_bxor_x8, 1, _mm512_xor_si512)
K_INT(k_band_x32, 4, _mm512_and_si512)
K_INT(k_bor_x32, 4, _mm512_or_si512)
K_INT(k_bxor_x32, 4, _mm512_xor_si512)
K_INT(k_band_x64, 8, _mm512_and_si512)
K_INT(k_bor_x64, 8, _mm512_or_si512)
K_INT(k_bxor_x64, 8, _mm512_xor_si512)

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

void nx_reduce3_avx512(void *dst, const void *a, const void *b, size_t count, nexar_dtype dt,
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

/* The average's division for f32 and f64, as in reduce_avx2.c. */
static TGT size_t avg_f32(uchar *p, size_t count, uint32_t n) {
  __m512 d = _mm512_set1_ps((float)n);
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m512 q = _mm512_div_ps(_mm512_loadu_ps((const float *)(p + 4 * i)), d);
    _mm512_storeu_ps((float *)(p + 4 * i), canon_ps(q));
  }
  return i;
}

static TGT size_t avg_f64(uchar *p, size_t count, uint32_t n) {
  __m512d d = _mm512_set1_pd((double)n);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m512d q = _mm512_div_pd(_mm512_loadu_pd((const double *)(p + 8 * i)), d);
    _mm512_storeu_pd((double *)(p + 8 * i), canon_pd(q));
  }
  return i;
}

void nx_avg_div_avx512(void *buf, size_t count, nexar_dtype dt, uint32_t n) {
  if (dt == NEXAR_F16 || dt == NEXAR_BF16) { /* the AVX2 kernels (this CPU has them) */
    nx_avg_div_avx2(buf, count, dt, n);
    return;
  }
  size_t done = 0;
  if (n > 1 && dt == NEXAR_F32) done = avg_f32(buf, count, n);
  if (n > 1 && dt == NEXAR_F64) done = avg_f64(buf, count, n);
  size_t off = done * nexar_dtype_size(dt);
  nx_avg_div_scalar((uchar *)buf + off, count - done, dt, n);
}

#else
typedef int nx_reduce_avx512_not_x86; /* keeps the translation unit non-empty */
#endif
