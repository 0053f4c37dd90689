/* bf16 and f16 conversions (kernels/ops/half.h): every 16-bit pattern widens
 * and narrows back to itself, and narrowing rounds to nearest, ties to even,
 * checked against an independent reference over a sweep of f32 patterns. */
#include "sl_test.h"

#include "half.h"
#include "tensor.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

static void every_pattern_round_trips(void **state)
{
    (void) state;
    for (uint32_t h = 0; h < 65536; h++) {
        float b = sl_f32_from_bf16((uint16_t) h), f = sl_f32_from_f16((uint16_t) h);
        if (isnan(b))
            assert_true(isnan(sl_f32_from_bf16(sl_bf16_from_f32(b))));
        else
            assert_int_equal(sl_bf16_from_f32(b), h);
        if (isnan(f))
            assert_true(isnan(sl_f32_from_f16(sl_f16_from_f32(f))));
        else
            assert_int_equal(sl_f16_from_f32(f), h);
    }
}

/* The nearest of the two neighbours lo < x < hi (as doubles), ties to the
 * one whose pattern is even. */
static uint16_t nearest(double x, double lo, uint16_t lo_bits, double hi, uint16_t hi_bits)
{
    double dl = x - lo, dh = hi - x;
    if (dl < dh || (dl == dh && !(lo_bits & 1)))
        return lo_bits;
    return hi_bits;
}

/* Reference narrowing for finite, non-negative x below the largest finite
 * value of the format: x's two neighbours found by scanning the format's
 * patterns upward (monotonic in value for non-negative patterns). */
static uint16_t reference(float x, float (*widen)(uint16_t), uint16_t max_finite)
{
    uint32_t lo = 0, hi = max_finite;
    while (hi - lo > 1) { /* bisect on the pattern: value grows with it */
        uint32_t mid = (lo + hi) / 2;
        if (widen((uint16_t) mid) <= x)
            lo = mid;
        else
            hi = mid;
    }
    if (widen((uint16_t) lo) == x)
        return (uint16_t) lo;
    return nearest(x, widen((uint16_t) lo), (uint16_t) lo, widen((uint16_t) hi), (uint16_t) hi);
}

static void narrowing_rounds_to_nearest_even(void **state)
{
    (void) state;
    const float bf16_max = sl_f32_from_bf16(0x7f7f), f16_max = sl_f32_from_f16(0x7bff);
    /* every 4099th positive f32 pattern; every 262147th under valgrind */
    const uint64_t stride = getenv("SL_TEST_QUICK") ? 262147 : 4099;
    unsigned checked = 0;
    for (uint64_t u = 0; u < 0x7f800000u; u += stride) {
        float x = sl_f32_from_bits((uint32_t) u);
        if (x < bf16_max) {
            assert_int_equal(sl_bf16_from_f32(x), reference(x, sl_f32_from_bf16, 0x7f7f));
            assert_int_equal(sl_bf16_from_f32(-x), 0x8000 | reference(x, sl_f32_from_bf16, 0x7f7f));
        }
        if (x < f16_max) {
            assert_int_equal(sl_f16_from_f32(x), reference(x, sl_f32_from_f16, 0x7bff));
            assert_int_equal(sl_f16_from_f32(-x), 0x8000 | reference(x, sl_f32_from_f16, 0x7bff));
        }
        checked++;
    }
    assert_true(checked > 0x7f800000u / stride - 1);
    /* ties: 1 + 2^-8 lies halfway between bf16's 1 and 1 + 2^-7 (even: 1) */
    assert_int_equal(sl_bf16_from_f32(1.0f + 0x1p-8f), 0x3f80);
    assert_int_equal(sl_bf16_from_f32(1.0f + 3 * 0x1p-8f), 0x3f82);
    assert_int_equal(sl_f16_from_f32(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(sl_f16_from_f32(0x1p-25f), 0x0000); /* halfway to the least subnormal */
    assert_int_equal(sl_f16_from_f32(0x1.8p-25f), 0x0001);
}

static void overflow_and_nan(void **state)
{
    (void) state;
    assert_int_equal(sl_f16_from_f32(65504.0f), 0x7bff);
    assert_int_equal(sl_f16_from_f32(65519.0f), 0x7bff);
    assert_int_equal(sl_f16_from_f32(65520.0f), 0x7c00); /* the tie goes to even: infinity */
    assert_int_equal(sl_f16_from_f32(-1e9f), 0xfc00);
    assert_int_equal(sl_bf16_from_f32(FLT_MAX), 0x7f80);
    assert_int_equal(sl_bf16_from_f32(-INFINITY), 0xff80);
    assert_true(isnan(sl_f32_from_f16(sl_f16_from_f32(NAN))));
    assert_true(isnan(sl_f32_from_bf16(sl_bf16_from_f32(NAN))));
    /* a NaN whose payload sits in the dropped bits stays a NaN */
    float quiet_low = sl_f32_from_bits(0x7f800001u);
    assert_true(isnan(sl_f32_from_bf16(sl_bf16_from_f32(quiet_low))));
    assert_true(isnan(sl_f32_from_f16(sl_f16_from_f32(quiet_low))));
}

static void bulk_and_sizes(void **state)
{
    (void) state;
    float src[5] = {1.0f, -2.5f, 0.1f, 65504.0f, 3.0e-8f}, back[5];
    uint16_t h[5];
    for (unsigned dt = SL_BF16; dt <= SL_F16; dt++) {
        sl_half_from_f32(dt, src, h, 5);
        sl_half_to_f32(dt, h, back, 5);
        for (int i = 0; i < 5; i++) {
            uint16_t one = dt == SL_BF16 ? sl_bf16_from_f32(src[i]) : sl_f16_from_f32(src[i]);
            assert_int_equal(h[i], one);
            assert_true(back[i] == (dt == SL_BF16 ? sl_f32_from_bf16(one) : sl_f32_from_f16(one)));
        }
        assert_int_equal(sl_dtype_size(dt), 2);
        sl_shape s = {.dtype = (uint8_t) dt, .ndim = 2, .dims = {3, 5}};
        assert_int_equal(sl_shape_bytes(&s), 30);
    }
    assert_string_equal(sl_dtype_name(SL_BF16), "bf16");
    char names[32];
    assert_string_equal(sl_dtypes_str(SL_DTS_FLOAT, names, sizeof names), "f32, bf16, f16");
}

SL_TEST_MAIN("half", NULL, NULL, cmocka_unit_test(every_pattern_round_trips),
             cmocka_unit_test(narrowing_rounds_to_nearest_even), cmocka_unit_test(overflow_and_nan),
             cmocka_unit_test(bulk_and_sizes))
