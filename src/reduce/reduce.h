/* Element-wise reduction kernels and the 16-bit float conversions.
 *
 * One reference semantics, bit-identical on every path (scalar, AVX2,
 * AVX-512) and for every input, so that every rank of a collective computes
 * the same bits whichever kernel its CPU selects:
 *  - integers wrap on overflow (two's complement);
 *  - f32/f64: IEEE round-to-nearest-even arithmetic; f16/bf16 are widened to
 *    f32, combined, and rounded back to nearest even (for +, * this equals the
 *    correctly rounded 16-bit result, as f32 has more than 2p+2 bits);
 *  - any float result that is a NaN is the type's default quiet NaN (f32
 *    0x7fc00000, f64 0x7ff8000000000000, f16 0x7e00, bf16 0x7fc0): IEEE leaves
 *    NaN payloads open and CPUs differ (x86 picks an operand, inf-inf gives a
 *    negative NaN), so NaNs are canonicalised for sum and prod as well;
 *  - min/max: a NaN operand gives the default NaN; -0 orders below +0.
 * The paths assume the default floating-point environment (round to nearest,
 * no FTZ/DAZ), which the library never changes.
 *
 * Buffers need no alignment, not even to the element size (network buffers
 * land at any offset). dst may be the same pointer as a source, but must not
 * overlap one partially. */
#ifndef NX_REDUCE_REDUCE_H
#define NX_REDUCE_REDUCE_H

#include <nexar/nexar.h>
#include <stddef.h>
#include <stdint.h>

/* 1 if dt (op) names an element type (operator) of nexar.h. */
int nx_dtype_valid(int dt);
int nx_op_valid(int op);
/* 1 if dt is an integer type. */
int nx_dtype_is_int(int dt);
/* 1 if op applies to dt (both valid; the bitwise ops need an integer dtype). */
int nx_op_dtype_valid(int dt, int op);

/* dst[i] = dst[i] op src[i] with the fastest available kernel. Callers
 * validate dt and op; invalid values leave dst untouched. */
void nx_reduce(void *dst, const void *src, size_t count, nexar_dtype dt, nexar_op op);
/* dst[i] = a[i] op b[i]; dst may equal a or b. */
void nx_reduce3(void *dst, const void *a, const void *b, size_t count, nexar_dtype dt, nexar_op op);
/* The portable reference kernels; the SIMD kernels use them for tails. */
void nx_reduce_scalar(void *dst, const void *src, size_t count, nexar_dtype dt, nexar_op op);
void nx_reduce3_scalar(void *dst, const void *a, const void *b, size_t count, nexar_dtype dt,
                       nexar_op op);

/* NEXAR_AVG: the kernels reduce it as a sum; nx_avg_div then divides the
 * final sum by n (the number of ranks), once, in place: f32/f64 by IEEE
 * division, f16/bf16 through f64 with a single rounding to nearest even
 * (exactly the correctly rounded quotient), integers by C division
 * (truncation toward zero) of the wrapped sum. NaN results are the default
 * NaN. n <= 1 leaves buf unchanged. */
void nx_avg_div(void *buf, size_t count, nexar_dtype dt, uint32_t n);
/* The reference division, and the SIMD ones (f32/f64 vectorised, the rest
 * and the tails by the reference): the same bits for every input. */
void nx_avg_div_scalar(void *buf, size_t count, nexar_dtype dt, uint32_t n);
void nx_avg_div_avx2(void *buf, size_t count, nexar_dtype dt, uint32_t n);
void nx_avg_div_avx512(void *buf, size_t count, nexar_dtype dt, uint32_t n);

/* Fills buf with count copies of op's identity: sum 0, prod 1, min +inf
 * (largest value for integers), max -inf (smallest value), avg 0 (a sum),
 * band all ones, bor 0, bxor 0. */
void nx_fill_identity(void *buf, size_t count, nexar_dtype dt, nexar_op op);

/* 16-bit float conversions, round to nearest even with subnormals, infinities
 * and overflow to inf. A NaN stays a NaN of the same sign, made quiet, keeping
 * its top payload bits (the F16C instructions behave the same way). */
float nx_f16_to_f32(uint16_t h);
uint16_t nx_f32_to_f16(float f);
float nx_bf16_to_f32(uint16_t h);
uint16_t nx_f32_to_bf16(float f);

/* Name of the kernel set nx_reduce uses now: "avx512", "avx2" or "scalar". */
const char *nx_reduce_impl_name(void);
/* Selects a kernel set by name ("scalar", "avx2", "avx512"), or NULL for the
 * automatic choice (the NEXAR_REDUCE_IMPL environment variable, else the best
 * the CPU supports). Returns 0, or -1 if that set is unknown or this CPU or
 * build lacks it (the selection is then unchanged). Meant for tests and
 * benchmarks; safe to call from any thread. */
int nx_reduce_set_impl(const char *name);
/* Tests: on != 0 forces the scalar kernels, 0 returns to the automatic choice. */
void nx_reduce_force_scalar(int on);

/* The SIMD kernel sets (reduce_avx2.c, reduce_avx512.c; x86 only): same
 * contract as nx_reduce3 for valid dt and op, but each needs its CPU features,
 * so only the dispatcher calls them. */
void nx_reduce3_avx2(void *dst, const void *a, const void *b, size_t count, nexar_dtype dt,
                     nexar_op op);
void nx_reduce3_avx512(void *dst, const void *a, const void *b, size_t count, nexar_dtype dt,
                       nexar_op op);

#endif
