/* Scalar reference kernels, 16-bit float conversions, identities and the
 * run-time choice of kernel set. The semantics are described in reduce.h; the
 * SIMD files must match this file bit for bit. */
#include "reduce/reduce.h"

#include "core/config.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define NX_REDUCE_X86 1
#include <cpuid.h>
#else
#define NX_REDUCE_X86 0
#endif

/* ------------------------------------------------------------ bit casts */

static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float f32_from(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint64_t f64_bits(double f) {
  uint64_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline double f64_from(uint64_t u) {
  double f;
  memcpy(&f, &u, sizeof f);
  return f;
}

#define F32_QNAN 0x7fc00000u
#define F64_QNAN 0x7ff8000000000000ull

/* ---------------------------------------------------------- conversions */

static inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) /* inf, or NaN made quiet like vcvtph2ps does */
    return f32_from(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0));
  if (exp == 0) {
    if (man == 0) return f32_from(sign);
    /* Subnormal: shift the leading 1 up to the implicit bit (bit 10). */
    int shift = __builtin_clz(man) - 21;
    man = (man << shift) & 0x3ffu;
    return f32_from(sign | ((uint32_t)(113 - shift) << 23) | (man << 13));
  }
  return f32_from(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) /* NaN: quiet, top payload bits kept (as vcvtps2ph) */
    return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  /* 65520 is halfway between 65504 (odd mantissa) and 2^16: ties go to inf. */
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (ax < 0x38800000u) { /* below 2^-14: subnormal or zero result */
    uint32_t e = ax >> 23;
    if (e < 102) return sign; /* below 2^-25: rounds to zero (ties included) */
    /* value = m * 2^(e-150); result units are 2^-24, so shift by 126-e. */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14..24 */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++; /* may carry into 2^-14: fine */
    return (uint16_t)(sign | r);
  }
  uint32_t r = (ax >> 13) - (112u << 10), rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++; /* carry into exponent: fine */
  return (uint16_t)(sign | r);
}

static inline float bf16_to_f32(uint16_t h) {
  if ((h & 0x7fffu) > 0x7f80u) h |= 0x40u; /* quiet a signaling NaN */
  return f32_from((uint32_t)h << 16);
}

static inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  /* Round to nearest even; a carry walks into the exponent and up to inf. */
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float nx_f16_to_f32(uint16_t h) {
  return f16_to_f32(h);
}

uint16_t nx_f32_to_f16(float f) {
  return f32_to_f16(f);
}

float nx_bf16_to_f32(uint16_t h) {
  return bf16_to_f32(h);
}

uint16_t nx_f32_to_bf16(float f) {
  return f32_to_bf16(f);
}

/* -------------------------------------------------------- element ops */

static inline float canon_f32(float r) {
  return r != r ? f32_from(F32_QNAN) : r;
}

static inline double canon_f64(double r) {
  return r != r ? f64_from(F64_QNAN) : r;
}

static inline float sum_f32(float x, float y) {
  return canon_f32(x + y);
}

static inline float prod_f32(float x, float y) {
  return canon_f32(x * y);
}

static inline float min_f32(float x, float y) {
  if (x != x || y != y) return f32_from(F32_QNAN);
  if (x < y) return x;
  if (y < x) return y;
  return f32_from(f32_bits(x) | f32_bits(y)); /* equal: same bits, or -0 and +0 */
}

static inline float max_f32(float x, float y) {
  if (x != x || y != y) return f32_from(F32_QNAN);
  if (x > y) return x;
  if (y > x) return y;
  return f32_from(f32_bits(x) & f32_bits(y));
}

static inline double sum_f64(double x, double y) {
  return canon_f64(x + y);
}

static inline double prod_f64(double x, double y) {
  return canon_f64(x * y);
}

static inline double min_f64(double x, double y) {
  if (x != x || y != y) return f64_from(F64_QNAN);
  if (x < y) return x;
  if (y < x) return y;
  return f64_from(f64_bits(x) | f64_bits(y));
}

static inline double max_f64(double x, double y) {
  if (x != x || y != y) return f64_from(F64_QNAN);
  if (x > y) return x;
  if (y > x) return y;
  return f64_from(f64_bits(x) & f64_bits(y));
}

#define HALF_OPS(NAME, TO, FROM)                                                                   \
  static inline uint16_t sum_##NAME(uint16_t x, uint16_t y) {                                      \
    return FROM(sum_f32(TO(x), TO(y)));                                                            \
  }                                                                                                \
  static inline uint16_t prod_##NAME(uint16_t x, uint16_t y) {                                     \
    return FROM(prod_f32(TO(x), TO(y)));                                                           \
  }                                                                                                \
  static inline uint16_t min_##NAME(uint16_t x, uint16_t y) {                                      \
    return FROM(min_f32(TO(x), TO(y)));                                                            \
  }                                                                                                \
  static inline uint16_t max_##NAME(uint16_t x, uint16_t y) {                                      \
    return FROM(max_f32(TO(x), TO(y)));                                                            \
  }
HALF_OPS(f16, f16_to_f32, f32_to_f16)
HALF_OPS(bf16, bf16_to_f32, f32_to_bf16)

/* Integers travel as unsigned bit patterns: wrap-around is then defined, and
 * signed order is unsigned order with the sign bit flipped. */
#define INT_OPS(BITS)                                                                              \
  static inline uint##BITS##_t sum_u##BITS(uint##BITS##_t x, uint##BITS##_t y) {                   \
    return (uint##BITS##_t)(x + y);                                                                \
  }                                                                                                \
  static inline uint##BITS##_t prod_u##BITS(uint##BITS##_t x, uint##BITS##_t y) {                  \
    return (uint##BITS##_t)((uint64_t)x * y);                                                      \
  }                                                                                                \
  static inline uint##BITS##_t min_u##BITS(uint##BITS##_t x, uint##BITS##_t y) {                   \
    return x < y ? x : y;                                                                          \
  }                                                                                                \
  static inline uint##BITS##_t max_u##BITS(uint##BITS##_t x, uint##BITS##_t y) {                   \
    return x > y ? x : y;                                                                          \
  }                                                                                                \
  static inline uint##BITS##_t min_i##BITS(uint##BITS##_t x, uint##BITS##_t y) {                   \
    const uint##BITS##_t s = (uint##BITS##_t)1 << (BITS - 1);                                      \
    return (uint##BITS##_t)(x ^ s) < (uint##BITS##_t)(y ^ s) ? x : y;                              \
  }                                                                                                \
  static inline uint##BITS##_t max_i##BITS(uint##BITS##_t x, uint##BITS##_t y) {                   \
    const uint##BITS##_t s = (uint##BITS##_t)1 << (BITS - 1);                                      \
    return (uint##BITS##_t)(x ^ s) > (uint##BITS##_t)(y ^ s) ? x : y;                              \
  }
INT_OPS(8)
INT_OPS(32)
INT_OPS(64)
/* Bitwise operators: one definition per width serves both signs. */
#define BIT_OPS(BITS)                                                                              \
  static inline uint##BITS##_t band_x##BITS(uint##BITS##_t x, uint##BITS##_t y) {                  \
    return (uint##BITS##_t)(x & y);                                                                \
  }                                                                                                \
  static inline uint##BITS##_t bor_x##BITS(uint##BITS##_t x, uint##BITS##_t y) {                   \
    return (uint##BITS##_t)(x | y);                                                                \
  }                                                                                                \
  static inline uint##BITS##_t bxor_x##BITS(uint##BITS##_t x, uint##BITS##_t y) {                  \
    return (uint##BITS##_t)(x ^ y);                                                                \
  }
BIT_OPS(8)
BIT_OPS(32)
BIT_OPS(64)
#define sum_i8 sum_u8
#define prod_i8 prod_u8
#define sum_i32 sum_u32
#define prod_i32 prod_u32
#define sum_i64 sum_u64
#define prod_i64 prod_u64

/* ------------------------------------------------------ scalar kernels */

/* memcpy keeps unaligned elements defined; compilers emit plain moves. */
#define LOADER(NAME, T)                                                                            \
  static inline T ld_##NAME(const unsigned char *p, size_t i) {                                    \
    T v;                                                                                           \
    memcpy(&v, p + i * sizeof(T), sizeof(T));                                                      \
    return v;                                                                                      \
  }                                                                                                \
  static inline void st_##NAME(unsigned char *p, size_t i, T v) {                                  \
    memcpy(p + i * sizeof(T), &v, sizeof(T));                                                      \
  }
LOADER(f32, float)
LOADER(f64, double)
LOADER(u8, uint8_t)
LOADER(u16, uint16_t)
LOADER(u32, uint32_t)
LOADER(u64, uint64_t)

#define KERNEL(FN, LD)                                                                             \
  static void k_##FN(unsigned char *d, const unsigned char *x, const unsigned char *y, size_t n) { \
    for (size_t i = 0; i < n; i++)                                                                 \
      st_##LD(d, i, FN(ld_##LD(x, i), ld_##LD(y, i)));                                             \
  }
#define KERNELS(T, LD)                                                                             \
  KERNEL(sum_##T, LD) KERNEL(prod_##T, LD) KERNEL(min_##T, LD) KERNEL(max_##T, LD)
KERNELS(f32, f32)
KERNELS(f64, f64)
KERNELS(f16, u16)
KERNELS(bf16, u16)
KERNELS(i8, u8)
KERNELS(i32, u32)
KERNELS(i64, u64)
KERNELS(u8, u8)
KERNELS(u32, u32)
KERNELS(u64, u64)
#define BIT_KERNELS(W, LD) KERNEL(band_##W, LD) KERNEL(bor_##W, LD) KERNEL(bxor_##W, LD)
BIT_KERNELS(x8, u8)
BIT_KERNELS(x32, u32)
BIT_KERNELS(x64, u64)

typedef void (*kernel_fn)(unsigned char *, const unsigned char *, const unsigned char *, size_t);

/* NEXAR_AVG reduces as a sum (nx_avg_div divides the final sum once); floats
 * have no bitwise kernels (callers refuse them: nx_op_dtype_valid). */
#define ROW(T)                                                                                     \
  { k_sum_##T, k_prod_##T, k_min_##T, k_max_##T, k_sum_##T, NULL, NULL, NULL }
#define IROW(T, W)                                                                                 \
  { k_sum_##T, k_prod_##T, k_min_##T, k_max_##T, k_sum_##T, k_band_##W, k_bor_##W, k_bxor_##W }
/* Indexed by the wire values of nexar_dtype and nexar_op. */
static const kernel_fn scalar_kernels[10][8] = {
    ROW(f32),       ROW(f64),       ROW(f16),     ROW(bf16),      IROW(i8, x8),
    IROW(i32, x32), IROW(i64, x64), IROW(u8, x8), IROW(u32, x32), IROW(u64, x64)};

void nx_reduce3_scalar(void *dst, const void *a, const void *b, size_t count, nexar_dtype dt,
                       nexar_op op) {
  if (count == 0 || !nx_op_dtype_valid((int)dt, (int)op)) return;
  scalar_kernels[dt][op](dst, a, b, count);
}

void nx_reduce_scalar(void *dst, const void *src, size_t count, nexar_dtype dt, nexar_op op) {
  nx_reduce3_scalar(dst, dst, src, count, dt, op);
}

/* ----------------------------------------------------------- identities */

void nx_fill_identity(void *buf, size_t count, nexar_dtype dt, nexar_op op) {
  if (count == 0 || !nx_op_dtype_valid((int)dt, (int)op)) return;
  /* Bit patterns, indexed [op][dt]; signed types differ from unsigned only
   * for min and max. avg is a sum until its final division; band's identity
   * is all ones (the low `size` bytes are taken below). */
  static const uint64_t id[8][10] = {
      /* f32, f64, f16, bf16, i8, i32, i64, u8, u32, u64 */
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
      {0x3f800000u, 0x3ff0000000000000ull, 0x3c00u, 0x3f80u, 1, 1, 1, 1, 1, 1},
      {0x7f800000u, 0x7ff0000000000000ull, 0x7c00u, 0x7f80u, 0x7fu, 0x7fffffffu,
       0x7fffffffffffffffull, 0xffu, 0xffffffffu, 0xffffffffffffffffull},
      {0xff800000u, 0xfff0000000000000ull, 0xfc00u, 0xff80u, 0x80u, 0x80000000u,
       0x8000000000000000ull, 0, 0, 0},
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
      {0, 0, 0, 0, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull},
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
  };
  size_t size = nexar_dtype_size(dt);
  uint64_t v = id[op][dt];
  unsigned char elem[8];
  /* Little-endian byte order of the low `size` bytes, as the wire wants. */
  for (size_t k = 0; k < size; k++)
    elem[k] = (unsigned char)(v >> (8 * k));
  unsigned char *p = buf;
  if (v == 0) {
    memset(p, 0, count * size);
    return;
  }
  for (size_t i = 0; i < count; i++)
    memcpy(p + i * size, elem, size);
}

/* ------------------------------------------------------------- average */

/* q rounded to float with round-to-odd (truncate, then set the last bit when
 * inexact): a value with 24 bits that rounds to any narrower format exactly
 * as q itself would, so the f16/bf16 quotient below is rounded once. */
static float f64_to_f32_odd(double q) {
  float t = (float)q;
  if ((double)t == q || q != q) return t;
  uint32_t b = f32_bits(t);
  if (fabs((double)t) > fabs(q)) b -= 1; /* rounded away from zero: step back */
  return f32_from(b | 1u);
}

/* In the 64-bit type of the same sign (n does not fit in a narrow one); C
 * division truncates toward zero, as NCCL's. */
#define AVG_INT(NAME, T, W)                                                                        \
  static void avg_##NAME(unsigned char *p, size_t count, uint32_t n) {                             \
    for (size_t i = 0; i < count; i++) {                                                           \
      T v;                                                                                         \
      memcpy(&v, p + i * sizeof v, sizeof v);                                                      \
      v = (T)((W)v / (W)n);                                                                        \
      memcpy(p + i * sizeof v, &v, sizeof v);                                                      \
    }                                                                                              \
  }
AVG_INT(i8, int8_t, int64_t)
AVG_INT(i32, int32_t, int64_t)
AVG_INT(i64, int64_t, int64_t)
AVG_INT(u8, uint8_t, uint64_t)
AVG_INT(u32, uint32_t, uint64_t)
AVG_INT(u64, uint64_t, uint64_t)

void nx_avg_div_scalar(void *buf, size_t count, nexar_dtype dt, uint32_t n) {
  unsigned char *p = buf;
  if (count == 0 || n <= 1 || !nx_dtype_valid((int)dt)) return;
  switch (dt) {
  case NEXAR_F32:
    for (size_t i = 0; i < count; i++)
      st_f32(p, i, canon_f32(ld_f32(p, i) / (float)n)); /* n < 2^24: exact as a float */
    return;
  case NEXAR_F64:
    for (size_t i = 0; i < count; i++)
      st_f64(p, i, canon_f64(ld_f64(p, i) / (double)n));
    return;
  case NEXAR_F16:
    for (size_t i = 0; i < count; i++)
      st_u16(p, i, f32_to_f16(canon_f32(f64_to_f32_odd((double)f16_to_f32(ld_u16(p, i)) / n))));
    return;
  case NEXAR_BF16:
    for (size_t i = 0; i < count; i++)
      st_u16(p, i, f32_to_bf16(canon_f32(f64_to_f32_odd((double)bf16_to_f32(ld_u16(p, i)) / n))));
    return;
  case NEXAR_I8:
    avg_i8(p, count, n);
    return;
  case NEXAR_I32:
    avg_i32(p, count, n);
    return;
  case NEXAR_I64:
    avg_i64(p, count, n);
    return;
  case NEXAR_U8:
    avg_u8(p, count, n);
    return;
  case NEXAR_U32:
    avg_u32(p, count, n);
    return;
  case NEXAR_U64:
    avg_u64(p, count, n);
    return;
  }
}

/* ------------------------------------------------------------ dispatch */

enum { IMPL_SCALAR = 0, IMPL_AVX2 = 1, IMPL_AVX512 = 2, IMPL_COUNT = 3 };
static const char *const impl_names[IMPL_COUNT] = {"scalar", "avx2", "avx512"};

/* -1 until the first call chooses; relaxed is enough, every thread that
 * races computes the same value. */
static _Atomic int g_impl = -1;

static int impl_available(int impl) {
  if (impl == IMPL_SCALAR) return 1;
#if NX_REDUCE_X86
  __builtin_cpu_init();
  /* clang's __builtin_cpu_supports has no "f16c": ask CPUID leaf 1. The
   * builtin's avx2 check already covers the OS saving the ymm registers. */
  unsigned eax, ebx, ecx = 0, edx;
  int f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
  int avx2 = __builtin_cpu_supports("avx2") && f16c;
  if (impl == IMPL_AVX2) return avx2;
  if (impl == IMPL_AVX512)
    return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq");
#endif
  return 0;
}

static int impl_by_name(const char *name) {
  for (int i = 0; i < IMPL_COUNT; i++)
    if (strcmp(name, impl_names[i]) == 0) return i;
  return -1;
}

static int impl_auto(void) {
  nx_knobs k; /* NEXAR_REDUCE_IMPL, checked by the config table ("auto": no impl of that name) */
  const char *env = nx_knobs_from_env(&k) == 0 ? k.reduce_impl : NULL;
  if (env && *env) {
    int i = impl_by_name(env);
    if (i >= 0 && impl_available(i)) return i;
  }
  for (int i = IMPL_COUNT - 1; i > IMPL_SCALAR; i--)
    if (impl_available(i)) return i;
  return IMPL_SCALAR;
}

static inline int impl_current(void) {
  int i = atomic_load_explicit(&g_impl, memory_order_relaxed);
  if (i < 0) {
    i = impl_auto();
    atomic_store_explicit(&g_impl, i, memory_order_relaxed);
  }
  return i;
}

int nx_reduce_set_impl(const char *name) {
  if (!name) {
    atomic_store_explicit(&g_impl, impl_auto(), memory_order_relaxed);
    return 0;
  }
  int i = impl_by_name(name);
  if (i < 0 || !impl_available(i)) return -1;
  atomic_store_explicit(&g_impl, i, memory_order_relaxed);
  return 0;
}

void nx_reduce_force_scalar(int on) {
  nx_reduce_set_impl(on ? "scalar" : NULL);
}

const char *nx_reduce_impl_name(void) {
  return impl_names[impl_current()];
}

void nx_reduce3(void *dst, const void *a, const void *b, size_t count, nexar_dtype dt,
                nexar_op op) {
  if (count == 0 || !nx_op_dtype_valid((int)dt, (int)op)) return;
  switch (impl_current()) {
#if NX_REDUCE_X86
  case IMPL_AVX512:
    nx_reduce3_avx512(dst, a, b, count, dt, op);
    return;
  case IMPL_AVX2:
    nx_reduce3_avx2(dst, a, b, count, dt, op);
    return;
#endif
  default:
    scalar_kernels[dt][op](dst, a, b, count);
  }
}

void nx_reduce(void *dst, const void *src, size_t count, nexar_dtype dt, nexar_op op) {
  nx_reduce3(dst, dst, src, count, dt, op);
}

void nx_avg_div(void *buf, size_t count, nexar_dtype dt, uint32_t n) {
  if (count == 0 || n <= 1 || !nx_dtype_valid((int)dt)) return;
  switch (impl_current()) {
#if NX_REDUCE_X86
  case IMPL_AVX512:
    nx_avg_div_avx512(buf, count, dt, n);
    return;
  case IMPL_AVX2:
    nx_avg_div_avx2(buf, count, dt, n);
    return;
#endif
  default:
    nx_avg_div_scalar(buf, count, dt, n);
  }
}
