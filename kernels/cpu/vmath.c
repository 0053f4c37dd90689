/* Element-wise transcendental math for the cpu kernels, written so the
 * compiler vectorises it: no branches, no libm calls, no float-to-int
 * conversions. glibc's expf and tanhf are scalar calls, so a loop over them
 * runs one element at a time (about 9 ns an element here); these run 8 or
 * 16 at a time (about 1 ns) and are built for AVX-512, AVX2 and baseline
 * x86-64, chosen at load time.
 *
 * Accuracy: exp's range reduction (Cody-Waite, ln 2 in two parts) and
 * degree-6 minimax polynomial are Cephes's expf; sigmoid stays within
 * 2.5e-7 relative of the exact value, tanh within 3e-7, over the whole float
 * range (test_exec_nn checks against double references). Results below
 * the smallest normal float (sigmoid of x < -87.3) are flushed to zero:
 * an absolute error under 1.2e-38.
 *
 * erf (and GELU, which is made of it) is glibc's erff in the same way: a
 * scalar call of some 10 ns, on every element of a transformer's or
 * ConvNeXt's widest activations. Here, for |x| < 1, x P(x^2) with P of
 * degree 6; above, 1 - e^-x^2 Q(1/|x|) with Q of degree 9 (erfc(x) e^x^2
 * is smooth in 1/x there), |x| clamped to 4, where erf rounds to 1. The
 * coefficients are least-squares fits in relative error at Chebyshev
 * nodes (numpy, double precision), rounded to float. Within 1.5e-7 of the
 * exact erf over the whole float range (the float result itself is within
 * 3e-8): a few units in the last place, which test_exec_axes checks. */
#include "cpu.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VMATH_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VMATH_CLONES
#endif

static inline uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* e^x for x in [-87.3, 0]: 2^k * e^r with |r| <= ln 2 / 2. k comes out of
 * the low mantissa bits of x / ln 2 + 1.5 * 2^23 (the sum rounds to an
 * integer there), so no conversion instruction is needed. */
static inline float exp_neg(float x)
{
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    x = x < -87.33654f ? -87.33654f : x;
    float t = x * 1.44269504088896341f + magic;
    float k = t - magic;
    int32_t ki = (int32_t) (bits_of(t) - bits_of(magic));
    float r = x - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return float_of(bits_of(p) + ((uint32_t) ki << 23));
}

VMATH_CLONES void sl_cpu_vsigmoid(const float *x, float *y, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        float a = x[i];
        float e = exp_neg(-fabsf(a)); /* e^-|a|, in (0, 1] */
        float s = 1.0f / (1.0f + e);  /* sigmoid(|a|) */
        float v = a >= 0.0f ? s : e * s;
        v = a < -87.33654f ? 0.0f : v;
        y[i] = a != a ? a : v; /* NaN stays NaN */
    }
}

VMATH_CLONES void sl_cpu_vtanh(const float *x, float *y, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        float a = x[i], m = fabsf(a);
        /* small |a|: Cephes's odd polynomial, free of the cancellation in
         * 1 - e below */
        float z = a * a;
        float p = -5.70498872745e-3f;
        p = p * z + 2.06390887954e-2f;
        p = p * z - 5.37397155531e-2f;
        p = p * z + 1.33314422036e-1f;
        p = p * z - 3.33332819422e-1f;
        float small = p * z * a + a;
        /* otherwise (1 - e) / (1 + e) with e = e^-2|a| */
        float e = exp_neg(-2.0f * (m < 44.0f ? m : 44.0f));
        float big = (1.0f - e) / (1.0f + e);
        big = a < 0.0f ? -big : big;
        float v = m < 0.625f ? small : big;
        y[i] = a != a ? a : v;
    }
}

/* erf(x) as the header says; NaN stays NaN. */
static inline float erf_f(float x)
{
    float a = fabsf(x);
    float t = a * a;
    float p = 7.847260713e-05f;
    p = p * t - 8.008191362e-04f;
    p = p * t + 5.188099109e-03f;
    p = p * t - 2.685369179e-02f;
    p = p * t + 1.128358245e-01f;
    p = p * t - 3.761262596e-01f;
    p = p * t + 1.128379107e+00f;
    float small = x * p;
    float c = a < 4.0f ? a : 4.0f;
    c = c > 1.0f ? c : 1.0f; /* keeps 1 / c finite where small is taken */
    float r = 1.0f / c;
    float q = 2.967749164e-02f;
    q = q * r - 1.740031689e-01f;
    q = q * r + 4.245934188e-01f;
    q = q * r - 5.184029341e-01f;
    q = q * r + 2.225661427e-01f;
    q = q * r + 2.390804142e-01f;
    q = q * r - 3.789587319e-01f;
    q = q * r + 2.122366615e-02f;
    q = q * r + 5.616815686e-01f;
    q = q * r + 1.257534605e-04f;
    float big = 1.0f - exp_neg(-c * c) * q;
    big = x < 0.0f ? -big : big;
    float v = a < 1.0f ? small : big;
    return x != x ? x : v;
}

VMATH_CLONES void sl_cpu_verf(const float *x, float *y, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        y[i] = erf_f(x[i]);
}

VMATH_CLONES void sl_cpu_vgelu(const float *x, float *y, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        float a = x[i];
        y[i] = 0.5f * a * (1.0f + erf_f(a * 0.70710678118654752f));
    }
}

VMATH_CLONES void sl_cpu_vexp_shifted(const float *x, float *y, uint64_t n, float m)
{
    for (uint64_t i = 0; i < n; i++) {
        float t = x[i] - m;
        float v = exp_neg(t);
        v = t < -87.33654f ? 0.0f : v;
        y[i] = t != t ? t : v;
    }
}
