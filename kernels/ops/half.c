#include "half.h"

#include "tensor.h"

void sl_half_to_f32(unsigned dtype, const void *src, float *dst, size_t n)
{
    const uint16_t *h = src;
    if (dtype == SL_BF16)
        for (size_t i = 0; i < n; i++)
            dst[i] = sl_f32_from_bf16(h[i]);
    else if (dtype == SL_F16)
        for (size_t i = 0; i < n; i++)
            dst[i] = sl_f32_from_f16(h[i]);
    else
        memcpy(dst, src, n * sizeof *dst);
}

void sl_half_from_f32(unsigned dtype, const float *src, void *dst, size_t n)
{
    uint16_t *h = dst;
    if (dtype == SL_BF16)
        for (size_t i = 0; i < n; i++)
            h[i] = sl_bf16_from_f32(src[i]);
    else if (dtype == SL_F16)
        for (size_t i = 0; i < n; i++)
            h[i] = sl_f16_from_f32(src[i]);
    else
        memcpy(dst, src, n * sizeof *src);
}
