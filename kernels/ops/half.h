/* bf16 and f16 (enum sl_dtype): conversions to and from f32, shared by the
 * backends, the client library and the tests, so that every place rounds
 * the same way. Narrowing rounds to nearest, ties to even (as IEEE 754 and
 * PyTorch's .to() do); NaN stays NaN (quiet), overflow becomes infinity,
 * and f16's subnormals are exact both ways. Widening is exact. */
#ifndef SL_HALF_H
#define SL_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t sl_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float sl_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float sl_f32_from_bf16(uint16_t h)
{
    return sl_f32_from_bits((uint32_t) h << 16);
}

static inline uint16_t sl_bf16_from_f32(float f)
{
    uint32_t u = sl_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep the sign, make it quiet */
        return (uint16_t) ((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u); /* ties to even; a carry rounds into the exponent */
    return (uint16_t) (u >> 16);
}

static inline float sl_f32_from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t) (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 31) /* infinity, NaN */
        return sl_f32_from_bits(sign | 0x7f800000u | (m << 13));
    if (e != 0)
        return sl_f32_from_bits(sign | ((e + 112) << 23) | (m << 13));
    if (m == 0)
        return sl_f32_from_bits(sign);
    uint32_t shift = 0; /* subnormal: m * 2^-24, normalised for f32 */
    while (!(m & 0x400u)) {
        m <<= 1;
        shift++;
    }
    return sl_f32_from_bits(sign | ((113 - shift) << 23) | ((m & 0x3ffu) << 13));
}

static inline uint16_t sl_f16_from_f32(float f)
{
    uint32_t u = sl_f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN */
        return (uint16_t) (sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* from 65520 up (ties to even past 65504): infinity */
        return (uint16_t) (sign | 0x7c00u);
    if (a >= 0x38800000u) { /* normal in f16: rebias, round the 13 dropped bits */
        a += 0xfffu + ((a >> 13) & 1u);
        return (uint16_t) (sign | ((a - 0x38000000u) >> 13));
    }
    if (a < 0x33000000u) /* below 2^-25: rounds to zero */
        return (uint16_t) sign;
    /* subnormal in f16: k * 2^-24 with k = mantissa >> (126 - exponent) */
    uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126 - (a >> 23);
    uint32_t k = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (k & 1u)))
        k++;
    return (uint16_t) (sign | k);
}

/* Converts n elements between a float dtype's storage and f32 (src and dst
 * must not overlap). dtype: SL_F32 (a copy), SL_BF16 or SL_F16. */
void sl_half_to_f32(unsigned dtype, const void *src, float *dst, size_t n);
void sl_half_from_f32(unsigned dtype, const float *src, void *dst, size_t n);

#endif
