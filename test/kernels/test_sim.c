/* The sim backend: profiles, the cost model against hand-computed figures,
 * processor sharing in virtual time, and the real-time device (timing of
 * launched ops, sharing between streams, ordering, callbacks, sticky errors,
 * synchronize, memory as address space). Timing assertions are loose: the
 * machine running this may be a loaded 2-core VM. */
#include "sl_test.h"

#include "device.h"
#include "ops.h"
#include "sim/sim.h"
#include "sl_alloc.h"
#include "sl_time.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GIB (1024ull * 1024ull * 1024ull)
#define MS 1000000ull

static sl_shape f32_2(int64_t a, int64_t b)
{
    return (sl_shape){.dtype = SL_F32, .ndim = 2, .dims = {a, b}};
}

static sl_shape f32_4(int64_t n, int64_t c, int64_t h, int64_t w)
{
    return (sl_shape){.dtype = SL_F32, .ndim = 4, .dims = {n, c, h, w}};
}

static const sl_sim_profile *profile(const char *name)
{
    const sl_sim_profile *p = NULL;
    assert_sl_ok(sl_sim_profile_find(name, &p));
    assert_non_null(p);
    return p;
}

/* ---- profiles ---- */

static void test_profiles(void **state)
{
    (void) state;
    static const struct {
        const char *name;
        uint64_t capacity;
        double fp32, bw;
        unsigned sms;
    } want[] = {
        {"p100", 16 * GIB, 10.6e12, 732e9, 56},   {"v100", 16 * GIB, 15.7e12, 900e9, 80},
        {"a100", 40 * GIB, 19.5e12, 1555e9, 108}, {"a100-80", 80 * GIB, 19.5e12, 2039e9, 108},
        {"h100", 80 * GIB, 67e12, 3350e9, 132},   {"h200", 141 * GIB, 67e12, 4800e9, 132},
    };
    assert_int_equal(sl_sim_profile_count(), sizeof want / sizeof want[0]);
    for (unsigned i = 0; i < sizeof want / sizeof want[0]; i++) {
        const sl_sim_profile *p = profile(want[i].name);
        assert_ptr_equal(p, sl_sim_profile_at(i));
        assert_int_equal(p->capacity, want[i].capacity);
        assert_true(fabs(p->peak_flops[SL_SIM_FP32] - want[i].fp32) < 1e6);
        assert_true(fabs(p->mem_bw - want[i].bw) < 1e3);
        assert_int_equal(p->sm_count, want[i].sms);
        assert_int_equal(p->threads_per_sm, 2048); /* compute capabilities 6.0 to 9.0 */
        assert_true(p->pcie_bw >= 10e9 && p->pcie_bw <= 64e9);
        assert_true(p->launch_ns > 0 && p->launch_ns < 100000);
        assert_true(p->eff_compute > 0 && p->eff_compute <= 1);
        assert_true(p->eff_mem > 0 && p->eff_mem <= 1);
        assert_non_null(p->description);
        for (unsigned k = 0; k < SL_SIM_PREC_COUNT; k++)
            assert_true(p->peak_flops[k] >= 0);
    }
    assert_null(sl_sim_profile_at(sl_sim_profile_count()));
    /* Volta has no BF16 and no TF32; tensor FP16 is 8x its FP32 peak. */
    assert_true(profile("v100")->peak_flops[SL_SIM_BF16_TC] == 0);
    assert_true(profile("v100")->peak_flops[SL_SIM_TF32_TC] == 0);
    assert_true(profile("v100")->peak_flops[SL_SIM_FP16_TC] == 125e12);
    /* Pascal: packed FP16 at twice FP32, nothing else */
    assert_true(profile("p100")->peak_flops[SL_SIM_FP16_TC] == 21.2e12);
    assert_true(profile("p100")->peak_flops[SL_SIM_BF16_TC] == 0);
    assert_true(profile("p100")->peak_flops[SL_SIM_TF32_TC] == 0);
    /* Ampere and Hopper, dense (half the datasheets' sparsity figures) */
    static const struct {
        const char *name;
        double tf32, half;
    } tc[] = {{"a100", 156e12, 312e12},
              {"a100-80", 156e12, 312e12},
              {"h100", 494.5e12, 989.5e12},
              {"h200", 494.5e12, 989.5e12}};
    for (unsigned i = 0; i < sizeof tc / sizeof tc[0]; i++) {
        const sl_sim_profile *p = profile(tc[i].name);
        assert_true(p->peak_flops[SL_SIM_TF32_TC] == tc[i].tf32);
        assert_true(p->peak_flops[SL_SIM_BF16_TC] == tc[i].half);
        assert_true(p->peak_flops[SL_SIM_FP16_TC] == tc[i].half);
        assert_int_equal(sl_sim_dtypes(p), SL_DTS_FLOAT);
    }
    assert_int_equal(sl_sim_dtypes(profile("v100")), SL_DTS(SL_F32) | SL_DTS(SL_F16));
    assert_int_equal(sl_sim_dtypes(profile("p100")), SL_DTS(SL_F32) | SL_DTS(SL_F16));

    const sl_sim_profile *p;
    assert_sl_ok(sl_sim_profile_find("V100", &p)); /* case-insensitive */
    assert_string_equal(p->name, "v100");
    assert_sl_err(sl_sim_profile_find("v200", &p), SL_ENOTFOUND);
    assert_sl_err(sl_sim_profile_find("", &p), SL_ENOTFOUND);
    assert_sl_err(sl_sim_profile_find(NULL, &p), SL_EINVAL);
    assert_sl_err(sl_sim_profile_find("v100", NULL), SL_EINVAL);

    char names[128];
    assert_string_equal(sl_sim_profile_names(names, sizeof names),
                        "p100, v100, a100, a100-80, h100, h200");
    char tiny[5];
    assert_int_equal(strlen(sl_sim_profile_names(tiny, sizeof tiny)), 4);
}

/* ---- the cost model ---- */

static uint64_t ceil_ns(double seconds)
{
    return (uint64_t) ceil(seconds * 1e9);
}

static void test_cost_matmul(void **state)
{
    (void) state;
    const sl_sim_profile *v100 = profile("v100");
    sl_shape in[2] = {f32_2(4096, 4096), f32_2(4096, 4096)}, out[1];
    sl_op_attrs a = {0};
    char err[128];
    assert_sl_ok(sl_op_infer(SL_OP_MATMUL, &a, in, 2, out, err, sizeof err));

    /* 2 * 4096^3 flops at 15.7 TFLOPS * eff, plus 5 us of launch. */
    double flops = 2.0 * 4096.0 * 4096.0 * 4096.0;
    uint64_t want = 5000 + ceil_ns(flops / (15.7e12 * v100->eff_compute));
    sl_sim_timing t;
    assert_sl_ok(sl_sim_op_timing(v100, SL_OP_MATMUL, &a, in, out, &t));
    assert_int_equal(t.launch_ns, 5000);
    assert_int_equal(t.launch_ns + t.work_ns, want);
    assert_false(t.memory_bound);
    assert_int_equal(t.resource, SL_SIM_RES_DEVICE);
    assert_int_equal(t.flops, (uint64_t) flops);
    uint64_t ns;
    assert_sl_ok(sl_sim_op_time_ns(v100, SL_OP_MATMUL, &a, in, out, &ns));
    assert_int_equal(ns, want);
    /* At the calibrated eff 0.76 that is 11.52 ms. */
    if (v100->eff_compute == 0.76)
        assert_true(ns > 11500 * 1000 && ns < 11540 * 1000);

    /* The same matmul on H100 is faster by the ratio of FP32 peaks. */
    uint64_t h100_ns;
    assert_sl_ok(sl_sim_op_time_ns(profile("h100"), SL_OP_MATMUL, &a, in, out, &h100_ns));
    double ratio = (double) (ns - 5000) / (double) (h100_ns - 5000);
    assert_true(fabs(ratio - 67.0 / 15.7) < 0.01);
}

static void test_cost_memory_bound(void **state)
{
    (void) state;
    const sl_sim_profile *v100 = profile("v100");
    /* add of two 2^28-element tensors: reads 2n, writes n, 4 bytes each. */
    int64_t n = 1ll << 28;
    sl_shape in[2] = {f32_2(n / 1024, 1024), f32_2(n / 1024, 1024)}, out[1];
    char err[128];
    assert_sl_ok(sl_op_infer(SL_OP_ADD, NULL, in, 2, out, err, sizeof err));
    sl_sim_timing t;
    assert_sl_ok(sl_sim_op_timing(v100, SL_OP_ADD, NULL, in, out, &t));
    double bytes = 3.0 * 4.0 * (double) n;
    assert_true(t.memory_bound);
    assert_int_equal(t.bytes, (uint64_t) bytes);
    assert_int_equal(t.work_ns, ceil_ns(bytes / (900e9 * v100->eff_mem)));
    if (v100->eff_mem == 0.80) /* 3.22 GB at 720 GB/s: 4.47 ms */
        assert_true(t.work_ns > 4400 * 1000 && t.work_ns < 4550 * 1000);

    /* Copies: the host link for h2d/d2h, device memory (read + write) for d2d. */
    sl_sim_copy_timing(v100, SL_SIM_COPY_H2D, 1200000000ull, &t);
    assert_int_equal(t.resource, SL_SIM_RES_H2D);
    assert_int_equal(t.work_ns, ceil_ns(1.2e9 / v100->pcie_bw));
    assert_int_equal(t.launch_ns, v100->launch_ns);
    sl_sim_copy_timing(v100, SL_SIM_COPY_D2H, 1200000000ull, &t);
    assert_int_equal(t.resource, SL_SIM_RES_D2H);
    sl_sim_copy_timing(v100, SL_SIM_COPY_D2D, 1200000000ull, &t);
    assert_int_equal(t.resource, SL_SIM_RES_DEVICE);
    assert_int_equal(t.work_ns, ceil_ns(2.4e9 / (900e9 * v100->eff_mem)));
    sl_sim_copy_timing(v100, SL_SIM_COPY_H2D, 0, &t);
    assert_int_equal(t.work_ns, 0);
}

static void test_cost_conv(void **state)
{
    (void) state;
    const sl_sim_profile *v100 = profile("v100");
    char err[128];
    sl_shape in[3], out[1];
    sl_op_cost c;
    sl_sim_timing t;

    /* 3x3 stride 1: charged 1/2.25 of the registry's direct flops. */
    sl_op_attrs a = {.i = {1, 1, 1, 1, 1, 1}};
    in[0] = f32_4(64, 256, 56, 56);
    in[1] = f32_4(256, 256, 3, 3);
    assert_sl_ok(sl_op_infer(SL_OP_CONV2D, &a, in, 2, out, err, sizeof err));
    sl_op_get(SL_OP_CONV2D)->cost(&a, in, out, &c);
    assert_int_equal(c.flops, 2ull * 64 * 256 * 56 * 56 * 256 * 9);
    assert_sl_ok(sl_sim_op_timing(v100, SL_OP_CONV2D, &a, in, out, &t));
    assert_int_equal(t.flops, (uint64_t) ((double) c.flops / 2.25));
    assert_false(t.memory_bound);

    /* Both gradients of that convolution get the same rule. */
    sl_shape gin[3] = {out[0], in[1], in[0]}, gout[1];
    assert_sl_ok(sl_op_infer(SL_OP_CONV2D_GRAD_INPUT, &a, gin, 3, gout, err, sizeof err));
    sl_op_get(SL_OP_CONV2D_GRAD_INPUT)->cost(&a, gin, gout, &c);
    assert_sl_ok(sl_sim_op_timing(v100, SL_OP_CONV2D_GRAD_INPUT, &a, gin, gout, &t));
    assert_int_equal(t.flops, (uint64_t) ((double) c.flops / 2.25));
    sl_shape fin[3] = {out[0], in[0], in[1]};
    assert_sl_ok(sl_op_infer(SL_OP_CONV2D_GRAD_FILTER, &a, fin, 3, gout, err, sizeof err));
    sl_op_get(SL_OP_CONV2D_GRAD_FILTER)->cost(&a, fin, gout, &c);
    assert_sl_ok(sl_sim_op_timing(v100, SL_OP_CONV2D_GRAD_FILTER, &a, fin, gout, &t));
    assert_int_equal(t.flops, (uint64_t) ((double) c.flops / 2.25));

    /* Stride 2, and 1x1 kernels: direct flops. */
    sl_op_attrs s2 = {.i = {2, 2, 1, 1, 1, 1}};
    assert_sl_ok(sl_op_infer(SL_OP_CONV2D, &s2, in, 2, out, err, sizeof err));
    sl_op_get(SL_OP_CONV2D)->cost(&s2, in, out, &c);
    assert_sl_ok(sl_sim_op_timing(v100, SL_OP_CONV2D, &s2, in, out, &t));
    assert_int_equal(t.flops, c.flops);
    sl_op_attrs one = {0};
    in[1] = f32_4(64, 256, 1, 1);
    assert_sl_ok(sl_op_infer(SL_OP_CONV2D, &one, in, 2, out, err, sizeof err));
    sl_op_get(SL_OP_CONV2D)->cost(&one, in, out, &c);
    assert_sl_ok(sl_sim_op_timing(v100, SL_OP_CONV2D, &one, in, out, &t));
    assert_int_equal(t.flops, c.flops);
}

static void test_cost_errors(void **state)
{
    (void) state;
    const sl_sim_profile *v100 = profile("v100");
    sl_shape in[2] = {f32_2(4, 4), f32_2(4, 4)}, out[1] = {f32_2(4, 4)};
    sl_sim_timing t;
    uint64_t ns;
    assert_sl_err(sl_sim_op_timing(NULL, SL_OP_ADD, NULL, in, out, &t), SL_EINVAL);
    assert_sl_err(sl_sim_op_timing(v100, SL_OP_COUNT, NULL, in, out, &t), SL_EINVAL);
    assert_sl_err(sl_sim_op_timing(v100, SL_OP_ADD, NULL, NULL, out, &t), SL_EINVAL);
    assert_sl_err(sl_sim_op_timing(v100, SL_OP_ADD, NULL, in, out, NULL), SL_EINVAL);
    assert_sl_err(sl_sim_op_time_ns(v100, SL_OP_ADD, NULL, in, out, NULL), SL_EINVAL);
    /* An op without a cost in the registry cannot be modeled. */
    for (unsigned op = 0; op < SL_OP_COUNT; op++) {
        const sl_op_def *d = sl_op_get(op);
        if (!d->name || !d->cost)
            assert_sl_err(sl_sim_op_timing(v100, op, NULL, in, out, &t), SL_EUNSUPPORTED);
    }
    assert_sl_ok(sl_sim_op_time_ns(v100, SL_OP_ADD, NULL, in, out, &ns));
    assert_true(ns >= v100->launch_ns);
}

static sl_shape typed(sl_shape s, unsigned dtype)
{
    s.dtype = (uint8_t) dtype;
    return s;
}

/* The work of a square matmul of size n in dtype under math on p. */
static sl_sim_timing matmul_timing(const sl_sim_profile *p, int64_t n, unsigned dtype,
                                   unsigned math)
{
    sl_shape in[2] = {typed(f32_2(n, n), dtype), typed(f32_2(n, n), dtype)};
    sl_shape out[1] = {typed(f32_2(n, n), dtype)};
    sl_sim_timing t;
    assert_sl_ok(sl_sim_op_timing_math(p, SL_OP_MATMUL, NULL, math, in, out, &t));
    return t;
}

static double work_ratio(const sl_sim_timing *slow, const sl_sim_timing *fast)
{
    return (double) slow->work_ns / (double) fast->work_ns;
}

/* Precision: half-precision and TF32 matmuls and convolutions at the
 * profile's tensor-core peaks, other ops at FP32 with their bytes in their
 * dtype, and no dtype a profile lacks. */
static void test_cost_precision(void **state)
{
    (void) state;
    const sl_sim_profile *h100 = profile("h100"), *v100 = profile("v100"), *p100 = profile("p100");
    /* 8192^3 on H100: compute-bound in every precision (bf16: 1.1 TFLOP
     * against 0.4 GB), so the work scales with the peaks: 989.5 / 67 =
     * 14.8x for bf16 and f16, 494.5 / 67 = 7.4x for TF32. */
    sl_sim_timing f32 = matmul_timing(h100, 8192, SL_F32, 0);
    sl_sim_timing bf16 = matmul_timing(h100, 8192, SL_BF16, 0);
    sl_sim_timing f16 = matmul_timing(h100, 8192, SL_F16, 0);
    sl_sim_timing tf32 = matmul_timing(h100, 8192, SL_F32, SL_MATH_MATMUL_TF32);
    assert_int_equal(f32.prec, SL_SIM_FP32);
    assert_int_equal(bf16.prec, SL_SIM_BF16_TC);
    assert_int_equal(f16.prec, SL_SIM_FP16_TC);
    assert_int_equal(tf32.prec, SL_SIM_TF32_TC);
    assert_false(bf16.memory_bound || tf32.memory_bound);
    assert_int_equal(bf16.flops, f32.flops);
    assert_int_equal(2 * bf16.bytes, f32.bytes);
    assert_true(fabs(work_ratio(&f32, &bf16) - 989.5 / 67) < 1e-3);
    assert_true(fabs(work_ratio(&f32, &f16) - 989.5 / 67) < 1e-3);
    assert_true(fabs(work_ratio(&f32, &tf32) - 494.5 / 67) < 1e-3);
    assert_true(fabs(work_ratio(&f32, &bf16) - 14.8) < 0.05);
    assert_true(fabs(work_ratio(&f32, &tf32) - 7.4) < 0.05);
    /* The matmul bit does not make convolutions TF32, nor the other way
     * round; PyTorch's default (convolutions only) leaves matmuls exact. */
    assert_int_equal(matmul_timing(h100, 8192, SL_F32, SL_MATH_CONV_TF32).work_ns, f32.work_ns);
    assert_int_equal(matmul_timing(h100, 8192, SL_F32, SL_MATH_DEFAULT).work_ns, f32.work_ns);
    /* sl_sim_op_timing is math 0: exact f32, bit for bit */
    sl_shape mm_in[2] = {f32_2(8192, 8192), f32_2(8192, 8192)}, mm_out[1] = {f32_2(8192, 8192)};
    sl_sim_timing t;
    assert_sl_ok(sl_sim_op_timing(h100, SL_OP_MATMUL, NULL, mm_in, mm_out, &t));
    assert_int_equal(t.work_ns, f32.work_ns);

    /* A 3x3 convolution: TF32 under the convolution bit (the Winograd rule
     * applies in every precision), bf16 on tensor cores. */
    sl_op_attrs pad1 = {.i = {1, 1, 1, 1, 1, 1}};
    sl_shape cin[2] = {f32_4(64, 256, 56, 56), f32_4(256, 256, 3, 3)}, cout[1];
    char err[128];
    assert_sl_ok(sl_op_infer(SL_OP_CONV2D, &pad1, cin, 2, cout, err, sizeof err));
    sl_sim_timing c32, ctf, cmm, cbf;
    assert_sl_ok(sl_sim_op_timing_math(h100, SL_OP_CONV2D, &pad1, 0, cin, cout, &c32));
    assert_sl_ok(
        sl_sim_op_timing_math(h100, SL_OP_CONV2D, &pad1, SL_MATH_CONV_TF32, cin, cout, &ctf));
    assert_sl_ok(
        sl_sim_op_timing_math(h100, SL_OP_CONV2D, &pad1, SL_MATH_MATMUL_TF32, cin, cout, &cmm));
    assert_int_equal(ctf.prec, SL_SIM_TF32_TC);
    assert_int_equal(cmm.prec, SL_SIM_FP32);
    assert_int_equal(cmm.work_ns, c32.work_ns);
    assert_int_equal(ctf.flops, c32.flops);
    assert_true(c32.work_ns > 7 * ctf.work_ns);
    sl_shape bin[2] = {typed(cin[0], SL_BF16), typed(cin[1], SL_BF16)};
    sl_shape bout[1] = {typed(cout[0], SL_BF16)};
    assert_sl_ok(sl_sim_op_timing_math(h100, SL_OP_CONV2D, &pad1, 0, bin, bout, &cbf));
    assert_int_equal(cbf.prec, SL_SIM_BF16_TC);
    assert_true(c32.work_ns > 14 * cbf.work_ns);
    /* the gradients follow the same rule */
    sl_shape gin[3] = {cout[0], cin[1], cin[0]}, gout[1];
    assert_sl_ok(sl_op_infer(SL_OP_CONV2D_GRAD_INPUT, &pad1, gin, 3, gout, err, sizeof err));
    assert_sl_ok(sl_sim_op_timing_math(h100, SL_OP_CONV2D_GRAD_INPUT, &pad1, SL_MATH_DEFAULT, gin,
                                       gout, &t));
    assert_int_equal(t.prec, SL_SIM_TF32_TC);
    for (unsigned op = 0; op < SL_OP_COUNT; op++) {
        bool tc = op == SL_OP_MATMUL || op == SL_OP_MATMUL_ACC || op == SL_OP_BATCH_MATMUL ||
                  op == SL_OP_CONV2D || op == SL_OP_CONV2D_GRAD_INPUT ||
                  op == SL_OP_CONV2D_GRAD_FILTER;
        assert_int_equal(sl_sim_op_prec(h100, op, SL_BF16, 0), tc ? SL_SIM_BF16_TC : SL_SIM_FP32);
        assert_int_equal(sl_sim_op_prec(h100, op, SL_F16, 0), tc ? SL_SIM_FP16_TC : SL_SIM_FP32);
        assert_int_equal(sl_sim_op_prec(h100, op, SL_F32, SL_MATH_MATMUL_TF32 | SL_MATH_CONV_TF32),
                         tc ? SL_SIM_TF32_TC : SL_SIM_FP32);
        assert_int_equal(sl_sim_op_prec(h100, op, SL_I32, 0), SL_SIM_FP32);
    }

    /* Element-wise: memory-bound, FP32 arithmetic, half the bytes: 2x. */
    int64_t n = 1ll << 28;
    sl_shape ain[2] = {f32_2(n / 1024, 1024), f32_2(n / 1024, 1024)}, aout[1];
    assert_sl_ok(sl_op_infer(SL_OP_ADD, NULL, ain, 2, aout, err, sizeof err));
    sl_sim_timing a32, a16;
    assert_sl_ok(sl_sim_op_timing(h100, SL_OP_ADD, NULL, ain, aout, &a32));
    sl_shape hin[2] = {typed(ain[0], SL_BF16), typed(ain[1], SL_BF16)};
    sl_shape hout[1] = {typed(aout[0], SL_BF16)};
    assert_sl_ok(
        sl_sim_op_timing_math(h100, SL_OP_ADD, NULL, SL_MATH_MATMUL_TF32, hin, hout, &a16));
    assert_true(a32.memory_bound && a16.memory_bound);
    assert_int_equal(a16.prec, SL_SIM_FP32);
    assert_int_equal(2 * a16.bytes, a32.bytes);
    assert_true(fabs(work_ratio(&a32, &a16) - 2.0) < 1e-5);
    /* a cast f32 -> bf16 reads 4 and writes 2 bytes an element */
    sl_op_attrs to_bf16 = {.i = {SL_BF16}};
    sl_shape cast_out[1];
    assert_sl_ok(sl_op_infer(SL_OP_CAST, &to_bf16, ain, 1, cast_out, err, sizeof err));
    assert_sl_ok(sl_sim_op_timing(h100, SL_OP_CAST, &to_bf16, ain, cast_out, &t));
    assert_int_equal(t.bytes, 6 * (uint64_t) n);
    assert_true(t.memory_bound);

    /* V100: f16 on its tensor cores (125 / 15.7 = 8x), no TF32 (the math
     * mode changes nothing), no bf16 at all, a cast to it included. */
    sl_sim_timing v32 = matmul_timing(v100, 8192, SL_F32, 0);
    sl_sim_timing v16 = matmul_timing(v100, 8192, SL_F16, 0);
    assert_true(fabs(work_ratio(&v32, &v16) - 125 / 15.7) < 1e-3);
    sl_sim_timing vtf = matmul_timing(v100, 8192, SL_F32, SL_MATH_MATMUL_TF32);
    assert_int_equal(vtf.prec, SL_SIM_FP32);
    assert_int_equal(vtf.work_ns, v32.work_ns);
    sl_shape vin[2] = {typed(mm_in[0], SL_BF16), typed(mm_in[1], SL_BF16)};
    sl_shape vout[1] = {typed(mm_out[0], SL_BF16)};
    assert_sl_err(sl_sim_op_timing(v100, SL_OP_MATMUL, NULL, vin, vout, &t), SL_EUNSUPPORTED);
    assert_sl_err(sl_sim_op_timing(v100, SL_OP_ADD, NULL, hin, hout, &t), SL_EUNSUPPORTED);
    assert_sl_err(sl_sim_op_timing(v100, SL_OP_CAST, &to_bf16, ain, cast_out, &t), SL_EUNSUPPORTED);
    assert_sl_err(sl_sim_op_timing(p100, SL_OP_ADD, NULL, hin, hout, &t), SL_EUNSUPPORTED);
    /* P100: f16 as packed half2 at twice FP32 */
    sl_sim_timing p32 = matmul_timing(p100, 8192, SL_F32, 0);
    sl_sim_timing p16 = matmul_timing(p100, 8192, SL_F16, 0);
    assert_true(fabs(work_ratio(&p32, &p16) - 2.0) < 1e-3);

    /* On a partition of the whole device a bf16 matmul keeps its
     * tensor-core time (the partition model charges the op's precision). */
    sl_sim_timing part;
    assert_sl_ok(sl_sim_part_timing(h100, &bf16, h100->sm_count, 1.0, &part));
    assert_true(part.work_ns <= bf16.work_ns + 1 && part.work_ns + 1 >= bf16.work_ns);
    assert_sl_ok(sl_sim_part_timing(h100, &bf16, h100->sm_count / 2, 1.0, &part));
    assert_true(part.work_ns < f32.work_ns / 4);
}

/* Occupancy: output tiles of 128 x 128 at 2 blocks per SM for GEMM-like
 * ops, one thread per element (2048 per SM) for the rest (model.c). */
static void test_occupancy(void **state)
{
    (void) state;
    const sl_sim_profile *p100 = profile("p100"), *v100 = profile("v100");
    char err[128];
    sl_sim_timing t;

    /* a big matmul fills the device; a batch-1 classifier's does not:
     * [1, 2048] x [2048, 1000] is 1 x 8 tiles, 8 of v100's 160 slots */
    sl_shape in[3] = {f32_2(4096, 4096), f32_2(4096, 4096)}, out[1];
    assert_sl_ok(sl_op_infer(SL_OP_MATMUL, NULL, in, 2, out, err, sizeof err));
    assert_sl_ok(sl_sim_op_timing(v100, SL_OP_MATMUL, NULL, in, out, &t));
    assert_true(t.occupancy == 1.0);
    in[0] = f32_2(1, 2048);
    in[1] = f32_2(2048, 1000);
    assert_sl_ok(sl_op_infer(SL_OP_MATMUL, NULL, in, 2, out, err, sizeof err));
    assert_sl_ok(sl_sim_op_timing(v100, SL_OP_MATMUL, NULL, in, out, &t));
    assert_true(fabs(t.occupancy - 8.0 / 160.0) < 1e-12);
    uint64_t small_ns = t.launch_ns + t.work_ns;
    /* occupancy does not change an op's time alone */
    uint64_t ns;
    assert_sl_ok(sl_sim_op_time_ns(v100, SL_OP_MATMUL, NULL, in, out, &ns));
    assert_int_equal(ns, small_ns);

    /* a batch-1 3x3 convolution at 56 x 56 with 64 channels: M = 3136 is
     * 25 row tiles, N = 64 one column: 25 of the P100's 112 slots */
    sl_op_attrs pad1 = {.i = {1, 1, 1, 1, 1, 1}};
    in[0] = f32_4(1, 64, 56, 56);
    in[1] = f32_4(64, 64, 3, 3);
    assert_sl_ok(sl_op_infer(SL_OP_CONV2D, &pad1, in, 2, out, err, sizeof err));
    assert_sl_ok(sl_sim_op_timing(p100, SL_OP_CONV2D, &pad1, in, out, &t));
    assert_true(fabs(t.occupancy - 25.0 / 112.0) < 1e-12);
    double one = t.occupancy;
    /* its input gradient is the same GEMM shape */
    sl_shape gin[3] = {out[0], in[1], in[0]}, gout[1];
    assert_sl_ok(sl_op_infer(SL_OP_CONV2D_GRAD_INPUT, &pad1, gin, 3, gout, err, sizeof err));
    assert_sl_ok(sl_sim_op_timing(p100, SL_OP_CONV2D_GRAD_INPUT, &pad1, gin, gout, &t));
    assert_true(fabs(t.occupancy - one) < 1e-12);
    /* the filter gradient: 64 x 576 is 1 x 5 tiles, K = 3136 one slice */
    sl_shape fin[3] = {out[0], in[0], in[1]};
    assert_sl_ok(sl_op_infer(SL_OP_CONV2D_GRAD_FILTER, &pad1, fin, 3, gout, err, sizeof err));
    assert_sl_ok(sl_sim_op_timing(p100, SL_OP_CONV2D_GRAD_FILTER, &pad1, fin, gout, &t));
    assert_true(fabs(t.occupancy - 5.0 / 112.0) < 1e-12);
    /* at batch 32 the same layers fill the P100 (K split for the filter) */
    in[0] = f32_4(32, 64, 56, 56);
    assert_sl_ok(sl_op_infer(SL_OP_CONV2D, &pad1, in, 2, out, err, sizeof err));
    assert_sl_ok(sl_sim_op_timing(p100, SL_OP_CONV2D, &pad1, in, out, &t));
    assert_true(t.occupancy == 1.0 && one < 1.0);
    sl_shape fin32[3] = {out[0], in[0], in[1]};
    assert_sl_ok(sl_op_infer(SL_OP_CONV2D_GRAD_FILTER, &pad1, fin32, 3, gout, err, sizeof err));
    assert_sl_ok(sl_sim_op_timing(p100, SL_OP_CONV2D_GRAD_FILTER, &pad1, fin32, gout, &t));
    assert_true(t.occupancy == 1.0);

    /* element-wise: one thread per element of the largest tensor */
    in[0] = f32_2(10, 100);
    in[1] = f32_2(10, 100);
    assert_sl_ok(sl_op_infer(SL_OP_ADD, NULL, in, 2, out, err, sizeof err));
    assert_sl_ok(sl_sim_op_timing(p100, SL_OP_ADD, NULL, in, out, &t));
    assert_true(fabs(t.occupancy - 1000.0 / (56.0 * 2048.0)) < 1e-12);
    in[0] = in[1] = f32_2(1024, 1024);
    assert_sl_ok(sl_op_infer(SL_OP_ADD, NULL, in, 2, out, err, sizeof err));
    assert_sl_ok(sl_sim_op_timing(p100, SL_OP_ADD, NULL, in, out, &t));
    assert_true(t.occupancy == 1.0);

    /* copies: the host link is its own resource; a device copy is an
     * element-wise kernel over its 4-byte words */
    sl_sim_copy_timing(v100, SL_SIM_COPY_H2D, 4096, &t);
    assert_true(t.occupancy == 1.0);
    sl_sim_copy_timing(v100, SL_SIM_COPY_D2D, 4096, &t);
    assert_true(fabs(t.occupancy - 1024.0 / (80.0 * 2048.0)) < 1e-12);

    /* the helper: at least one block, capped at 1, 1 without an SM count */
    assert_true(fabs(sl_sim_occupancy(p100, 0, 2) - 1.0 / 112.0) < 1e-12);
    assert_true(sl_sim_occupancy(p100, 1000, 2) == 1.0);
    sl_sim_profile bare = *p100;
    bare.sm_count = 0;
    assert_true(sl_sim_occupancy(&bare, 1, 1) == 1.0);
    assert_true(sl_sim_occupancy(NULL, 1, 1) == 1.0);

    /* on a capped device, two such small ops run side by side at full
     * speed and two full ones share the device */
    uint64_t arrive[2] = {0, 0}, solo[2] = {1000000, 1000000}, done[2];
    double cap[2] = {one, one};
    assert_sl_ok(sl_sim_psc_schedule(2, arrive, solo, cap, done));
    assert_int_equal(done[0], 1000000);
    assert_int_equal(done[1], 1000000);
    cap[0] = cap[1] = 1.0;
    assert_sl_ok(sl_sim_psc_schedule(2, arrive, solo, cap, done));
    assert_int_equal(done[0], 2000000);
}

/* ---- processor sharing in virtual time ---- */

static void test_ps_basic(void **state)
{
    (void) state;
    uint64_t done[3];
    /* Equal jobs arriving together finish together at 2w. */
    uint64_t arr2[2] = {0, 0}, w2[2] = {100, 100};
    assert_sl_ok(sl_sim_ps_schedule(2, arr2, w2, done));
    assert_int_equal(done[0], 200);
    assert_int_equal(done[1], 200);
    /* Short and long: the short one leaves at 2*50, the long one gets the
     * rest of the device: 100 + 50. */
    uint64_t w3[2] = {100, 50};
    assert_sl_ok(sl_sim_ps_schedule(2, arr2, w3, done));
    assert_int_equal(done[0], 150);
    assert_int_equal(done[1], 100);
    /* Staggered: A alone for 50, shared until A's last 50 are served at 150,
     * then B alone. */
    uint64_t arr3[2] = {0, 50};
    assert_sl_ok(sl_sim_ps_schedule(2, arr3, w2, done));
    assert_int_equal(done[0], 150);
    assert_int_equal(done[1], 200);
    /* Zero work completes at arrival; three-way sharing; absolute times. */
    uint64_t arr4[3] = {1000, 1000, 1000}, w4[3] = {0, 30, 30};
    assert_sl_ok(sl_sim_ps_schedule(3, arr4, w4, done));
    assert_int_equal(done[0], 1000);
    assert_int_equal(done[1], 1060);
    assert_int_equal(done[2], 1060);
    /* A gap: the resource idles between the jobs. */
    uint64_t arr5[2] = {0, 500};
    assert_sl_ok(sl_sim_ps_schedule(2, arr5, w2, done));
    assert_int_equal(done[0], 100);
    assert_int_equal(done[1], 600);
    assert_sl_ok(sl_sim_ps_schedule(0, NULL, NULL, NULL));
    assert_sl_err(sl_sim_ps_schedule(1, arr5, NULL, done), SL_EINVAL);
}

struct resubmit {
    sl_sim_ps *ps;
    unsigned left;
    uint64_t last_done;
};

static void resubmit_fn(void *arg, sl_sim_ps_job *job)
{
    struct resubmit *r = arg;
    r->last_done = job->done_ns;
    if (r->left) {
        r->left--;
        sl_sim_ps_submit(r->ps, job, job->done_ns + 10, 40); /* launch 10, work 40 */
    }
}

static void test_ps_incremental(void **state)
{
    (void) state;
    sl_sim_ps ps;
    sl_sim_ps_init(&ps, 0);
    assert_int_equal(sl_sim_ps_next_event_ns(&ps), UINT64_MAX);
    sl_sim_ps_job a = {0}, b = {0};
    sl_sim_ps_submit(&ps, &a, 10, 100);
    assert_int_equal(sl_sim_ps_next_event_ns(&ps), 10);
    /* Looking late does not stretch anything: done_ns is exact. */
    assert_int_equal(sl_sim_ps_advance(&ps, 5000, NULL, NULL), 1);
    assert_true(a.done);
    assert_int_equal(a.done_ns, 110);
    /* Idle: the state stays at the departure, so a back-to-back arrival at
     * 115 (before the 5000 we looked at) still counts from 115. */
    sl_sim_ps_submit(&ps, &b, 115, 100);
    assert_int_equal(sl_sim_ps_advance(&ps, 5000, NULL, NULL), 1);
    assert_int_equal(b.done_ns, 215);
    /* Busy: an arrival in the past is taken as now. */
    sl_sim_ps_submit(&ps, &a, 6000, 1000);
    assert_int_equal(sl_sim_ps_advance(&ps, 6500, NULL, NULL), 0);
    sl_sim_ps_submit(&ps, &b, 100, 100); /* joins at 6500 */
    assert_int_equal(sl_sim_ps_next_event_ns(&ps), 6500);
    assert_int_equal(sl_sim_ps_advance(&ps, 6500, NULL, NULL), 0);
    assert_int_equal(sl_sim_ps_next_event_ns(&ps), 6700);
    assert_int_equal(sl_sim_ps_advance(&ps, 6699, NULL, NULL), 0);
    assert_int_equal(sl_sim_ps_advance(&ps, 6700, NULL, NULL), 1);
    assert_true(b.done && !a.done);
    assert_int_equal(sl_sim_ps_advance(&ps, 10000, NULL, NULL), 1);
    assert_int_equal(a.done_ns, 7100); /* 500 + 100 served by 6700, 400 alone */

    /* A stream of ops resubmitted from the completion callback, beside a
     * long job: each op of 40 takes 80 while shared. */
    struct resubmit r = {.ps = &ps, .left = 4};
    sl_sim_ps_init(&ps, 0);
    sl_sim_ps_submit(&ps, &a, 0, 1000);
    sl_sim_ps_submit(&ps, &b, 10, 40);
    unsigned n = sl_sim_ps_advance(&ps, 100000, resubmit_fn, &r);
    assert_int_equal(n, 6);
    assert_int_equal(r.left, 0);
    /* b: 5 ops, each 10 of launch (a alone) + 80 shared: ends at 450; a got
     * 5*10 + 5*40 = 250 by then, 750 left alone. */
    assert_int_equal(b.done_ns, 450);
    assert_int_equal(a.done_ns, 1200);
}

/* Random arrivals: the work is conserved (the resource is never idle while a
 * job waits, so the last departure of a busy period is its start plus the
 * sum of its work), every job takes at least its work, and advancing in
 * random steps gives exactly the times of advancing once. */
static void test_ps_random(void **state)
{
    (void) state;
    enum { N = 64 };
    uint64_t seed = 12345;
    for (unsigned round = 0; round < 50; round++) {
        uint64_t arr[N], work[N], done[N];
        uint64_t t = 0;
        for (unsigned i = 0; i < N; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            t += (seed >> 33) % 50;
            arr[i] = t;
            work[i] = 1 + (seed >> 20) % 200;
        }
        assert_sl_ok(sl_sim_ps_schedule(N, arr, work, done));
        uint64_t busy_end = 0, total = 0, last = 0;
        for (unsigned i = 0; i < N; i++) {
            assert_true(done[i] >= arr[i] + work[i]);
            busy_end = arr[i] > busy_end ? arr[i] : busy_end;
            busy_end += work[i];
            total += work[i];
            last = done[i] > last ? done[i] : last;
        }
        /* Work conserving: the last departure is where a FIFO server would
         * finish too (up to 1 ns of rounding per departure). */
        assert_true(last <= busy_end + N && last + N >= busy_end);
        assert_true(last + N >= arr[0] + total);

        sl_sim_ps ps;
        sl_sim_ps_job jobs[N];
        memset(jobs, 0, sizeof jobs);
        sl_sim_ps_init(&ps, 0);
        for (unsigned i = 0; i < N; i++)
            sl_sim_ps_submit(&ps, &jobs[i], arr[i], work[i]);
        unsigned completed = 0;
        for (uint64_t now = 0; completed < N;) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            now += (seed >> 40) % 97;
            completed += sl_sim_ps_advance(&ps, now, NULL, NULL);
        }
        for (unsigned i = 0; i < N; i++)
            assert_int_equal(jobs[i].done_ns, done[i]);
    }
}

/* Stream priorities: the high class is water-filled first, the low one
 * shares what is left; a high job that needs SMs the low one's running
 * blocks hold waits for one of its blocks (or what is left of it). */
static void test_psc_priority(void **state)
{
    (void) state;
    sl_sim_psc ps;
    sl_sim_psc_job lp = {0}, hp = {0};
    /* lp alone from 0 at cap 0.8 for 1 ms, blocks of 100 us; hp at 200 us,
     * cap 0.5 for 300 us: 0.2 free < 0.5, so it waits one lp block */
    sl_sim_psc_init(&ps, 0);
    sl_sim_psc_submit_prio(&ps, &lp, 0, 1000000, 0.8, 0.0, -1, 100000);
    sl_sim_psc_submit_prio(&ps, &hp, 200000, 300000, 0.5, 0.0, 1, 0);
    (void) sl_sim_psc_advance(&ps, UINT64_MAX - 1, NULL, NULL);
    assert_true(hp.done && lp.done);
    /* hp joins at 300 us and runs at its cap, alone of its class: 600 us */
    assert_int_equal(hp.done_ns, 600000);
    assert_int_equal(ps.block_waits, 1);
    /* lp: 300 us at 0.8 (300 us of solo), 300 us at 0.5 of 0.8 (187.5 us
     * of solo time), the remaining 512.5 us at its cap: 1112.5 us */
    assert_true(lp.done_ns >= 1112499 && lp.done_ns <= 1112501);

    /* with free SMs enough for it, no wait: lp at 0.3 leaves 0.7 >= 0.5 */
    sl_sim_psc_job lp2 = {0}, hp2 = {0};
    sl_sim_psc_init(&ps, 0);
    sl_sim_psc_submit_prio(&ps, &lp2, 0, 1000000, 0.3, 0.0, -1, 100000);
    sl_sim_psc_submit_prio(&ps, &hp2, 200000, 300000, 0.5, 0.0, 1, 0);
    (void) sl_sim_psc_advance(&ps, UINT64_MAX - 1, NULL, NULL);
    assert_int_equal(hp2.done_ns, 500000);
    assert_int_equal(lp2.done_ns, 1000000);
    assert_int_equal(ps.block_waits, 0);

    /* an uncapped high job leaves the low class nothing */
    sl_sim_psc_job lp3 = {0}, hp3 = {0};
    sl_sim_psc_init(&ps, 0);
    sl_sim_psc_submit_prio(&ps, &hp3, 0, 400000, 1.0, 0.0, 1, 0);
    sl_sim_psc_submit_prio(&ps, &lp3, 0, 400000, 1.0, 0.0, -1, 0);
    (void) sl_sim_psc_advance(&ps, UINT64_MAX - 1, NULL, NULL);
    assert_int_equal(hp3.done_ns, 400000);
    assert_int_equal(lp3.done_ns, 800000);
}

/* Priority 0 everywhere is the unprioritised model, to the bit. */
static void test_psc_priority_zero_same(void **state)
{
    (void) state;
    enum { N = 40 };
    sl_sim_psc a, b;
    sl_sim_psc_job ja[N], jb[N];
    memset(ja, 0, sizeof ja);
    memset(jb, 0, sizeof jb);
    sl_sim_psc_init(&a, 0);
    sl_sim_psc_init(&b, 0);
    uint64_t seed = 7;
    for (int i = 0; i < N; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t at = (seed >> 40) % 3000000, solo = 1000 + (seed >> 20) % 900000;
        double cap = 0.05 + (double) ((seed >> 8) % 96) / 100.0;
        double launch = i % 3 ? 0.0 : 0.1 * (double) (i % 7);
        sl_sim_psc_submit_ex(&a, &ja[i], at, solo, cap, launch);
        sl_sim_psc_submit_prio(&b, &jb[i], at, solo, cap, launch, 0, 50000);
    }
    (void) sl_sim_psc_advance(&a, UINT64_MAX - 1, NULL, NULL);
    (void) sl_sim_psc_advance(&b, UINT64_MAX - 1, NULL, NULL);
    for (int i = 0; i < N; i++)
        assert_int_equal(ja[i].done_ns, jb[i].done_ns);
}

/* ---- processor sharing with rate caps ---- */

static void test_psc_basic(void **state)
{
    (void) state;
    uint64_t done[3];
    /* Alone: exactly the solo time, whatever the cap. */
    uint64_t a1[1] = {100}, s1[1] = {1000};
    double c1[1] = {0.25};
    assert_sl_ok(sl_sim_psc_schedule(1, a1, s1, c1, done));
    assert_int_equal(done[0], 1100);
    /* Caps summing to at most 1: both as if alone. */
    uint64_t a2[2] = {0, 0}, s2[2] = {1000, 1000};
    double c2[2] = {0.4, 0.5};
    assert_sl_ok(sl_sim_psc_schedule(2, a2, s2, c2, done));
    assert_int_equal(done[0], 1000);
    assert_int_equal(done[1], 1000);
    /* 0.8 + 0.8: each gets 0.5, 800 of work takes 1600. */
    double c3[2] = {0.8, 0.8};
    assert_sl_ok(sl_sim_psc_schedule(2, a2, s2, c3, done));
    assert_int_equal(done[0], 1600);
    assert_int_equal(done[1], 1600);
    /* 0.3 beside 1: the small one keeps its 0.3 (done at its solo time),
     * the other gets 0.7, then the whole device for its last 300. */
    double c4[2] = {0.3, 1.0};
    assert_sl_ok(sl_sim_psc_schedule(2, a2, s2, c4, done));
    assert_int_equal(done[0], 1000);
    assert_int_equal(done[1], 1300);
    /* 0.6 beside 1: the level 0.5 is below both caps; 600 of work takes
     * 1200, the other has 400 left alone. */
    double c5[2] = {0.6, 1.0};
    assert_sl_ok(sl_sim_psc_schedule(2, a2, s2, c5, done));
    assert_int_equal(done[0], 1200);
    assert_int_equal(done[1], 1600);
    /* 0.2, 1, 1: level 0.4 until the small one leaves at 1000, then 0.5
     * each for the last 600. */
    uint64_t a6[3] = {0, 0, 0}, s6[3] = {1000, 1000, 1000};
    double c6[3] = {1.0, 0.2, 1.0};
    assert_sl_ok(sl_sim_psc_schedule(3, a6, s6, c6, done));
    assert_int_equal(done[0], 2200);
    assert_int_equal(done[1], 1000);
    assert_int_equal(done[2], 2200);
    /* A status change mid-way, and a cap out of range taken as 1: A (0.9)
     * runs at its cap alone until B joins at 500; the level 0.5 is then
     * below both caps, so they share the device equally. */
    uint64_t a7[2] = {0, 500}, s7[2] = {1000, 1000};
    double c7[2] = {0.9, 7.0};
    assert_sl_ok(sl_sim_psc_schedule(2, a7, s7, c7, done));
    /* A: 450 of work by 500, 450 left at 0.5: done at 1400; B: 450 by
     * 1400, 550 alone: 1950. */
    assert_int_equal(done[0], 1400);
    assert_int_equal(done[1], 1950);
    assert_sl_ok(sl_sim_psc_schedule(0, NULL, NULL, NULL, NULL));
    assert_sl_err(sl_sim_psc_schedule(1, a1, s1, NULL, done), SL_EINVAL);
}

/* The launch path: jobs that launch share one launch server, so packed
 * launch-bound jobs together launch at most one op per launch_ns; a job
 * that hardly launches keeps its solo speed; launch shares that fit in 1
 * change nothing, to the bit. */
static void test_psc_launch(void **state)
{
    (void) state;
    /* four jobs that each fill 0.1 of the SMs and launch half their time:
     * the SMs would run them side by side (0.4 in all), the launch path
     * cannot (2 launch servers' worth): each runs at 1/2 of its speed */
    enum { N = 4 };
    sl_sim_psc ps;
    sl_sim_psc_job jobs[N + 1];
    memset(jobs, 0, sizeof jobs);
    sl_sim_psc_init(&ps, 0);
    for (unsigned i = 0; i < N; i++)
        sl_sim_psc_submit_ex(&ps, &jobs[i], 0, 1000, 0.1, 0.5);
    (void) sl_sim_psc_advance(&ps, UINT64_MAX - 1, NULL, NULL);
    for (unsigned i = 0; i < N; i++) {
        assert_true(jobs[i].done);
        assert_int_equal(jobs[i].done_ns, 2000);
    }
    /* the bound: by 2000 they launched N x 1000 x 0.5, the launch path
     * busy all along: it never serves more than one launch at a time */
    assert_true((double) N * 1000 * 0.5 <= (double) jobs[0].done_ns);
    /* without launch shares they run as if alone */
    sl_sim_psc_init(&ps, 0);
    for (unsigned i = 0; i < N; i++)
        sl_sim_psc_submit(&ps, &jobs[i], 0, 1000, 0.1);
    (void) sl_sim_psc_advance(&ps, UINT64_MAX - 1, NULL, NULL);
    for (unsigned i = 0; i < N; i++)
        assert_int_equal(jobs[i].done_ns, 1000);
    /* a compute-bound job (cap 0.5, launches 1 % of its time) beside three
     * launch-bound ones (cap 0.05, launch 0.9): it keeps all the launches
     * it needs (water-filling: 0.01 is below the level) and the SMs have
     * room, so it ends at its solo time; the others share the rest of the
     * launch path, 0.99 / 3 each: speed 0.33 / 0.9 */
    sl_sim_psc_init(&ps, 0);
    sl_sim_psc_submit_ex(&ps, &jobs[N], 0, 1000, 0.5, 0.01);
    for (unsigned i = 0; i < 3; i++)
        sl_sim_psc_submit_ex(&ps, &jobs[i], 0, 1000, 0.05, 0.9);
    (void) sl_sim_psc_advance(&ps, 1000, NULL, NULL);
    assert_true(jobs[N].done);
    assert_int_equal(jobs[N].done_ns, 1000);
    for (unsigned i = 0; i < 3; i++)
        assert_false(jobs[i].done);
    /* from 1000 on the three have the launch path to themselves: 1/3 each,
     * speed 0.37; 1000 x 0.33 / 0.9 = 366.7 of 1000 done by then */
    (void) sl_sim_psc_advance(&ps, UINT64_MAX - 1, NULL, NULL);
    for (unsigned i = 0; i < 3; i++) {
        double left = 1000.0 - 1000.0 * (0.99 / 3) / 0.9;
        double want = 1000.0 + left / ((1.0 / 3) / 0.9);
        assert_true(fabs((double) jobs[i].done_ns - want) <= 1.0);
    }
    /* launch shares that fit in 1 (each at most 1/N of it) change nothing:
     * random arrivals, sizes and caps, bit for bit */
    enum { M = 32 };
    uint64_t seed = 4242;
    for (unsigned round = 0; round < 20; round++) {
        sl_sim_psc a, b;
        sl_sim_psc_job ja[M], jb[M];
        memset(ja, 0, sizeof ja);
        memset(jb, 0, sizeof jb);
        sl_sim_psc_init(&a, 0);
        sl_sim_psc_init(&b, 0);
        uint64_t t = 0;
        for (unsigned i = 0; i < M; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            t += (seed >> 33) % 50;
            uint64_t work = 1 + (seed >> 20) % 2000007;
            double cap = (double) (1 + (seed >> 40) % 100) / 100.0;
            double launch = (double) ((seed >> 50) % 100) / 100.0 / M;
            sl_sim_psc_submit(&a, &ja[i], t * 10007, work, cap);
            sl_sim_psc_submit_ex(&b, &jb[i], t * 10007, work, cap, launch);
        }
        (void) sl_sim_psc_advance(&a, UINT64_MAX - 1, NULL, NULL);
        (void) sl_sim_psc_advance(&b, UINT64_MAX - 1, NULL, NULL);
        for (unsigned i = 0; i < M; i++)
            assert_int_equal(jb[i].done_ns, ja[i].done_ns);
    }
}

/* With every cap 1 the capped resource is sl_sim_ps to the bit, looked at
 * all at once or at random times. */
static void test_psc_equals_ps(void **state)
{
    (void) state;
    enum { N = 64 };
    uint64_t seed = 777;
    for (unsigned round = 0; round < 50; round++) {
        uint64_t arr[N], work[N], done[N], done_c[N];
        double cap[N];
        uint64_t t = 0;
        for (unsigned i = 0; i < N; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            t += (seed >> 33) % 50;
            arr[i] = t * 1000003;
            work[i] = 1 + (seed >> 20) % 200000007;
            cap[i] = 1.0;
        }
        assert_sl_ok(sl_sim_ps_schedule(N, arr, work, done));
        assert_sl_ok(sl_sim_psc_schedule(N, arr, work, cap, done_c));
        for (unsigned i = 0; i < N; i++)
            assert_int_equal(done_c[i], done[i]);
        sl_sim_psc ps;
        sl_sim_psc_job jobs[N];
        memset(jobs, 0, sizeof jobs);
        sl_sim_psc_init(&ps, 0);
        for (unsigned i = 0; i < N; i++)
            sl_sim_psc_submit(&ps, &jobs[i], arr[i], work[i], 1.0);
        unsigned completed = 0;
        for (uint64_t now = 0; completed < N;) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            now += (seed >> 40) % 97 * 1000003;
            completed += sl_sim_psc_advance(&ps, now, NULL, NULL);
        }
        for (unsigned i = 0; i < N; i++)
            assert_int_equal(jobs[i].done_ns, done[i]);
    }
}

/* Against a direct fluid simulation: at every event recompute the
 * water-filled rates from scratch and move every job's remaining work. */
static void psc_reference(unsigned n, const uint64_t *arr, const uint64_t *solo, const double *cap,
                          double *done)
{
    double left[64], now = 0;
    bool in[64] = {0}, fin[64] = {0};
    unsigned n_fin = 0;
    for (unsigned i = 0; i < n; i++)
        left[i] = (double) solo[i] * cap[i];
    while (n_fin < n) {
        double rate[64], level = INFINITY, c = 0;
        unsigned m = 0, order[64];
        for (unsigned i = 0; i < n; i++)
            if (in[i] && !fin[i])
                order[m++] = i;
        for (unsigned a = 1; a < m; a++) /* insertion sort by cap */
            for (unsigned b = a; b > 0 && cap[order[b]] < cap[order[b - 1]]; b--) {
                unsigned x = order[b];
                order[b] = order[b - 1];
                order[b - 1] = x;
            }
        unsigned rest = m;
        for (unsigned k = 0; k < m; k++) {
            if (cap[order[k]] * rest < 1 - c) {
                c += cap[order[k]];
                rest--;
            } else {
                level = (1 - c) / rest;
                break;
            }
        }
        double next = INFINITY;
        for (unsigned k = 0; k < m; k++) {
            unsigned i = order[k];
            rate[i] = cap[i] < level ? cap[i] : level;
            next = fmin(next, now + left[i] / rate[i]);
        }
        for (unsigned i = 0; i < n; i++)
            if (!in[i])
                next = fmin(next, (double) arr[i]);
        for (unsigned k = 0; k < m; k++)
            left[order[k]] -= rate[order[k]] * (next - now);
        now = next;
        for (unsigned i = 0; i < n; i++) {
            if (!in[i] && (double) arr[i] <= now)
                in[i] = true;
            else if (in[i] && !fin[i] && left[i] <= 1e-6 * (double) solo[i]) {
                fin[i] = true;
                done[i] = now;
                n_fin++;
            }
        }
    }
}

static void test_psc_random(void **state)
{
    (void) state;
    enum { N = 40 };
    uint64_t seed = 4242;
    for (unsigned round = 0; round < 100; round++) {
        uint64_t arr[N], solo[N], done[N];
        double cap[N], ref[N];
        uint64_t t = 0;
        for (unsigned i = 0; i < N; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            t += (seed >> 33) % 3000;
            arr[i] = t;
            solo[i] = 1 + (seed >> 20) % 20000;
            cap[i] = round % 4 == 0 ? 1.0 : 0.05 + (double) ((seed >> 45) % 96) / 100.0;
        }
        assert_sl_ok(sl_sim_psc_schedule(N, arr, solo, cap, done));
        psc_reference(N, arr, solo, cap, ref);
        for (unsigned i = 0; i < N; i++) {
            /* never faster than alone */
            assert_true(done[i] >= arr[i] + solo[i]);
            /* each departure rounds up to a whole ns: N ns at most apart */
            assert_true(fabs((double) done[i] - ref[i]) <= N + 1e-6 * ref[i]);
        }
    }
}

/* ---- the real-time device ---- */

static void test_open(void **state)
{
    (void) state;
    static const struct {
        const char *spec;
        int rc;
    } specs[] = {
        {"sim:v100", SL_OK},   {"sim:v100:0", SL_OK},     {"sim:H100:7", SL_OK},
        {"sim", SL_EINVAL},    {"sim:v200", SL_EINVAL},   {"sim:v100:8", SL_ENODEV},
        {"sim::0", SL_EINVAL}, {"sim:v100:x", SL_EINVAL},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        sl_device *dev = NULL;
        int rc = sl_dev_open(specs[i].spec, &dev);
        if (rc != specs[i].rc)
            fail_msg("spec \"%s\": got %s, want %s", specs[i].spec, sl_errname(rc),
                     sl_errname(specs[i].rc));
        if (rc == SL_OK) {
            assert_string_equal(dev->ops->name, "sim");
            const sl_sim_profile *p = sl_sim_device_profile(dev);
            assert_non_null(p);
            assert_int_equal(dev->total_bytes, p->capacity);
            assert_non_null(strstr(dev->description, "(sim)"));
        }
        sl_dev_close(dev);
    }
    sl_device *cpu;
    assert_sl_ok(sl_dev_open("cpu", &cpu));
    assert_null(sl_sim_device_profile(cpu));
    sl_dev_close(cpu);
}

static void test_memory(void **state)
{
    (void) state;
    sl_device *dev;
    assert_sl_ok(sl_dev_open("sim:h100", &dev));
    /* 64 GiB of a simulated 80 GiB device, whatever this machine has. */
    void *big = NULL, *more = NULL, *small = NULL;
    assert_sl_ok(dev->ops->mem_alloc(dev, 64 * GIB, &big));
    assert_non_null(big);
    assert_int_equal((uintptr_t) big % 256, 0);
    assert_sl_err(dev->ops->mem_alloc(dev, 17 * GIB, &more), SL_EEXHAUSTED);
    assert_sl_ok(dev->ops->mem_alloc(dev, 16 * GIB, &more));
    /* Distinct regions never overlap. */
    assert_true((uintptr_t) more >= (uintptr_t) big + 64 * GIB ||
                (uintptr_t) more + 16 * GIB <= (uintptr_t) big);
    assert_sl_err(dev->ops->mem_alloc(dev, 1, &small), SL_EEXHAUSTED);
    assert_sl_err(dev->ops->mem_alloc(dev, 0, &small), SL_EINVAL);
    dev->ops->mem_free(dev, more);
    assert_sl_ok(dev->ops->mem_alloc(dev, 1000, &small));
    assert_int_equal((uintptr_t) small % 256, 0);
    dev->ops->mem_free(dev, small);
    dev->ops->mem_free(dev, big);
    dev->ops->mem_free(dev, NULL);
    /* Everything is back: the whole capacity fits again. */
    assert_sl_ok(dev->ops->mem_alloc(dev, dev->total_bytes, &big));
    dev->ops->mem_free(dev, big);
    sl_dev_close(dev);
}

struct env {
    sl_device *dev;
    sl_stream *s[2];
    void *arena;
};

static void env_open(struct env *e, const char *spec)
{
    memset(e, 0, sizeof *e);
    assert_sl_ok(sl_dev_open(spec, &e->dev));
    assert_sl_ok(e->dev->ops->mem_alloc(e->dev, 4 * GIB, &e->arena));
    for (unsigned i = 0; i < 2; i++)
        assert_sl_ok(e->dev->ops->stream_create(e->dev, 0, &e->s[i]));
}

static void env_close(struct env *e)
{
    for (unsigned i = 0; i < 2; i++)
        e->dev->ops->stream_destroy(e->dev, e->s[i]);
    e->dev->ops->mem_free(e->dev, e->arena);
    sl_dev_close(e->dev);
}

/* A square matmul call of size n on arena addresses (never touched). */
static sl_op_call matmul_call(const struct env *e, int64_t n)
{
    char *base = e->arena;
    size_t sz = (size_t) (n * n * 4);
    sl_op_call c = {.op = SL_OP_MATMUL, .n_in = 2, .n_out = 1};
    c.in[0] = (sl_tensor_ref){base, f32_2(n, n)};
    c.in[1] = (sl_tensor_ref){base + sz, f32_2(n, n)};
    c.out[0] = (sl_tensor_ref){base + 2 * sz, f32_2(n, n)};
    return c;
}

static uint64_t model_ns(const struct env *e, const sl_op_call *c)
{
    uint64_t ns;
    sl_shape in[2] = {c->in[0].shape, c->in[1].shape}, out[1] = {c->out[0].shape};
    assert_sl_ok(sl_sim_op_time_ns(sl_sim_device_profile(e->dev), c->op, &c->attrs, in, out, &ns));
    return ns;
}

/* Under valgrind (one thread at a time, code ~50x slower) only the lower
 * timing bounds hold: the sim never finishes work before its modeled time. */
static bool slow_host(void)
{
    const char *preload = getenv("LD_PRELOAD");
    return preload && strstr(preload, "vgpreload");
}

static void assert_about(uint64_t got, uint64_t model, const char *what)
{
    if (got < model * 9 / 10 || (!slow_host() && got > 5 * model + 20 * MS))
        fail_msg("%s took %.3f ms, model %.3f ms", what, (double) got / 1e6, (double) model / 1e6);
}

static void test_launch_timing(void **state)
{
    (void) state;
    struct env e;
    env_open(&e, "sim:v100");
    const sl_device_ops *o = e.dev->ops;
    sl_op_call mm = matmul_call(&e, 4096);
    uint64_t t_op = model_ns(&e, &mm); /* ~11.5 ms */

    uint64_t t0 = sl_now_ns();
    assert_sl_ok(o->launch(e.dev, e.s[0], &mm));
    assert_true(slow_host() || sl_now_ns() - t0 < t_op / 2); /* submission does not wait */
    assert_sl_ok(o->synchronize(e.dev, e.s[0]));
    assert_about(sl_now_ns() - t0, t_op, "one matmul");

    /* Ten back to back: ten times the model, wake-up latency not added up. */
    t0 = sl_now_ns();
    for (unsigned i = 0; i < 10; i++)
        assert_sl_ok(o->launch(e.dev, e.s[0], &mm));
    assert_sl_ok(o->synchronize(e.dev, e.s[0]));
    assert_about(sl_now_ns() - t0, 10 * t_op, "ten matmuls");

    /* Copies: 240 MB up at 12 GB/s is 20 ms. */
    const sl_sim_profile *p = sl_sim_device_profile(e.dev);
    size_t n = 240u * 1000u * 1000u;
    char *host = sl_malloc(n);
    assert_non_null(host);
    sl_sim_timing ct;
    sl_sim_copy_timing(p, SL_SIM_COPY_H2D, n, &ct);
    t0 = sl_now_ns();
    assert_sl_ok(o->memcpy_h2d(e.dev, e.s[0], e.arena, host, n));
    assert_sl_ok(o->synchronize(e.dev, e.s[0]));
    assert_about(sl_now_ns() - t0, ct.launch_ns + ct.work_ns, "h2d copy");
    sl_free(host);
    env_close(&e);
}

static void test_sharing(void **state)
{
    (void) state;
    struct env e;
    env_open(&e, "sim:v100");
    const sl_device_ops *o = e.dev->ops;
    sl_op_call mm = matmul_call(&e, 8192);
    uint64_t t_op = model_ns(&e, &mm); /* ~92 ms */

    /* Two streams, one long op each (it fills the device: occupancy 1):
     * both finish at about twice the solo time (without sharing they
     * would finish at 1x). */
    uint64_t t0 = sl_now_ns();
    assert_sl_ok(o->launch(e.dev, e.s[0], &mm));
    assert_sl_ok(o->launch(e.dev, e.s[1], &mm));
    assert_sl_ok(o->synchronize(e.dev, e.s[0]));
    uint64_t t_a = sl_now_ns() - t0;
    assert_sl_ok(o->synchronize(e.dev, e.s[1]));
    uint64_t t_b = sl_now_ns() - t0;
    assert_about(t_a, 2 * t_op, "shared op A");
    assert_about(t_b, 2 * t_op, "shared op B");
    assert_true(t_a > t_op * 16 / 10);

    /* A copy uses the host link, not the SMs: an upload beside a kernel of
     * the same length leaves both at about 1x. */
    const sl_sim_profile *p = sl_sim_device_profile(e.dev);
    size_t n = (size_t) ((double) t_op / 1e9 * p->pcie_bw);
    char *host = sl_malloc(n);
    assert_non_null(host);
    t0 = sl_now_ns();
    assert_sl_ok(o->launch(e.dev, e.s[0], &mm));
    assert_sl_ok(o->memcpy_h2d(e.dev, e.s[1], e.arena, host, n));
    assert_sl_ok(o->synchronize(e.dev, e.s[0]));
    assert_sl_ok(o->synchronize(e.dev, e.s[1]));
    uint64_t t_both = sl_now_ns() - t0;
    assert_about(t_both, t_op, "kernel beside copy");
    assert_true(slow_host() || t_both < t_op * 15 / 10);
    sl_free(host);

    /* Ops too small to fill the SMs run side by side: [128, 65536] x
     * [65536, 128] is one output tile (occupancy 1/160 on v100), ~0.18 ms,
     * made 1000x slower so that real time can tell 1x from 2x with room for
     * a late worker thread (the one thing that can still move a modeled
     * start: a job submitted after the model's clock passed its launch). */
    char *base = e.arena;
    sl_op_call narrow = {.op = SL_OP_MATMUL, .n_in = 2, .n_out = 1};
    narrow.in[0] = (sl_tensor_ref){base, f32_2(128, 65536)};
    narrow.in[1] = (sl_tensor_ref){base + 128 * 65536 * 4, f32_2(65536, 128)};
    narrow.out[0] = (sl_tensor_ref){base + 2 * 128 * 65536 * 4, f32_2(128, 128)};
    uint64_t t_narrow = model_ns(&e, &narrow) * 1000;
    assert_sl_ok(sl_sim_set_slowdown(e.dev, 1000));
    t0 = sl_now_ns();
    assert_sl_ok(o->launch(e.dev, e.s[0], &narrow));
    assert_sl_ok(o->launch(e.dev, e.s[1], &narrow));
    assert_sl_ok(o->synchronize(e.dev, e.s[0]));
    assert_sl_ok(o->synchronize(e.dev, e.s[1]));
    uint64_t t_two = sl_now_ns() - t0;
    assert_about(t_two, t_narrow, "two narrow ops");
    /* side by side in the model itself (its completion times are exact,
     * whatever the host adds before this thread wakes up): each about 1x
     * from the launch, not the 2x of taking turns */
    for (int k = 0; k < 2; k++) {
        uint64_t modeled = sl_sim_stream_modeled_ns(e.s[k]) - t0;
        assert_true(modeled >= t_narrow * 9 / 10);
        assert_true(slow_host() || modeled < t_narrow * 15 / 10);
    }
    assert_sl_ok(sl_sim_set_slowdown(e.dev, 1));
    env_close(&e);
}

/* The real-time device runs every op in its profile's dtypes, and charges
 * a launched op its call's dtypes and math mode. */
static void test_launch_precision(void **state)
{
    (void) state;
    static const struct {
        const char *spec;
        unsigned dts;
    } devs[] = {{"sim:h100", SL_DTS_FLOAT},
                {"sim:a100", SL_DTS_FLOAT},
                {"sim:v100", SL_DTS(SL_F32) | SL_DTS(SL_F16)},
                {"sim:p100", SL_DTS(SL_F32) | SL_DTS(SL_F16)}};
    for (unsigned i = 0; i < sizeof devs / sizeof devs[0]; i++) {
        sl_device *dev;
        assert_sl_ok(sl_dev_open(devs[i].spec, &dev));
        for (unsigned op = 0; op < SL_OP_COUNT; op++) {
            const sl_op_def *d = sl_op_get(op);
            unsigned own = d->dtypes ? d->dtypes : SL_DTS(SL_F32);
            assert_int_equal(sl_dev_op_dtypes(dev, op), own & devs[i].dts);
        }
        /* a cast converts between every float dtype the GPU has */
        assert_int_equal(sl_dev_op_dtypes(dev, SL_OP_CAST), devs[i].dts);
        sl_dev_close(dev);
    }

    struct env e;
    env_open(&e, "sim:h100");
    const sl_device_ops *o = e.dev->ops;
    const sl_sim_profile *h100 = sl_sim_device_profile(e.dev);
    static const struct {
        unsigned dtype, math, prec;
    } runs[] = {{SL_F32, 0, SL_SIM_FP32},
                {SL_BF16, 0, SL_SIM_BF16_TC},
                {SL_F16, 0, SL_SIM_FP16_TC},
                {SL_F32, SL_MATH_MATMUL_TF32, SL_SIM_TF32_TC}};
    uint64_t took[4];
    for (unsigned i = 0; i < 4; i++) {
        sl_op_call mm = matmul_call(&e, 8192);
        mm.math = (uint8_t) runs[i].math;
        for (unsigned k = 0; k < 2; k++)
            mm.in[k].shape.dtype = (uint8_t) runs[i].dtype;
        mm.out[0].shape.dtype = (uint8_t) runs[i].dtype;
        sl_shape in[2] = {mm.in[0].shape, mm.in[1].shape}, out[1] = {mm.out[0].shape};
        sl_sim_timing t;
        assert_sl_ok(sl_sim_op_timing_math(h100, mm.op, NULL, mm.math, in, out, &t));
        assert_int_equal(t.prec, runs[i].prec);
        uint64_t t0 = sl_now_ns();
        assert_sl_ok(o->launch(e.dev, e.s[0], &mm));
        assert_sl_ok(o->synchronize(e.dev, e.s[0]));
        took[i] = sl_sim_stream_modeled_ns(e.s[0]) - t0;
        assert_about(took[i], t.launch_ns + t.work_ns, "matmul");
    }
    /* f32 21.6 ms, bf16 and f16 1.5 ms, TF32 2.9 ms: the modeled times,
     * which a late worker thread never stretches */
    assert_true(took[0] > 10 * took[1] && took[0] > 10 * took[2]);
    assert_true(took[0] > 5 * took[3] && took[3] > took[1]);
    env_close(&e);
}

/* Launches are reserved when an op is submitted: ops submitted together
 * launch back to back while earlier ones run (a whole iteration), an op
 * submitted after the previous one completed launches after it (a
 * stepwise op). Launch-bound ops, made 1000x slower so that real time can
 * tell the two apart; the modeled completion times are exact. */
static void test_pipelined_launches(void **state)
{
    (void) state;
    struct env e;
    env_open(&e, "sim:v100");
    const sl_device_ops *o = e.dev->ops;
    /* the smallest square matmul whose work is between a quarter of its
     * launch and its launch: launch-bound, and serial launches would cost
     * N x work more, well above the bound below */
    sl_op_call mm = {0};
    sl_sim_timing t = {0};
    for (int64_t n = 32; n <= 1024 && !(t.work_ns >= t.launch_ns / 4 && t.launch_ns); n += 32) {
        mm = matmul_call(&e, n);
        sl_shape in[2] = {mm.in[0].shape, mm.in[1].shape}, out[1] = {mm.out[0].shape};
        assert_sl_ok(sl_sim_op_timing(sl_sim_device_profile(e.dev), mm.op, &mm.attrs, in, out, &t));
    }
    assert_true(t.work_ns >= t.launch_ns / 4 && t.work_ns < t.launch_ns);
    uint64_t launch = t.launch_ns * 1000, work = t.work_ns * 1000;
    enum { N = 8 };
    assert_sl_ok(sl_sim_set_slowdown(e.dev, 1000));
    uint64_t t0 = sl_now_ns();
    for (unsigned i = 0; i < N; i++)
        assert_sl_ok(o->launch(e.dev, e.s[0], &mm));
    assert_sl_ok(o->synchronize(e.dev, e.s[0]));
    uint64_t together = sl_sim_stream_modeled_ns(e.s[0]) - t0;
    assert_true(together >= N * launch + work);
    /* the submissions themselves take microseconds; serially it would be
     * N x (launch + work) */
    assert_true(slow_host() || together < N * launch + work + launch / 2);
    t0 = sl_now_ns();
    for (unsigned i = 0; i < N; i++) {
        assert_sl_ok(o->launch(e.dev, e.s[0], &mm));
        assert_sl_ok(o->synchronize(e.dev, e.s[0]));
    }
    uint64_t one_by_one = sl_sim_stream_modeled_ns(e.s[0]) - t0;
    assert_true(one_by_one >= N * (launch + work));
    assert_sl_ok(sl_sim_set_slowdown(e.dev, 1));
    env_close(&e);
}

static void wait_for_flag(void *arg, int status)
{
    (void) status;
    struct timespec nap = {0, 100000};
    while (!atomic_load((atomic_bool *) arg))
        nanosleep(&nap, NULL);
}

/* Launches reserved at a slow device's speed do not outlive it: once the
 * slowdown is lifted, queued ops launch at the normal speed (they are
 * reserved again when they run), and the launch path is free from then. */
static void test_launches_rebased(void **state)
{
    (void) state;
    struct env e;
    env_open(&e, "sim:v100");
    const sl_device_ops *o = e.dev->ops;
    sl_op_call mm = matmul_call(&e, 64);
    atomic_bool go = false;
    assert_sl_ok(sl_sim_set_slowdown(e.dev, 100000)); /* 5 us launches: 0.5 s */
    assert_sl_ok(o->host_callback(e.dev, e.s[0], wait_for_flag, &go));
    for (int i = 0; i < 4; i++) /* reserved 0.5, 1.0, 1.5, 2.0 s ahead */
        assert_sl_ok(o->launch(e.dev, e.s[0], &mm));
    assert_sl_ok(sl_sim_set_slowdown(e.dev, 1));
    uint64_t t0 = sl_now_ns();
    atomic_store(&go, true);
    assert_sl_ok(o->synchronize(e.dev, e.s[0]));
    assert_true(slow_host() || sl_now_ns() - t0 < 250 * MS);
    /* another stream's launch does not queue behind the old reservations */
    t0 = sl_now_ns();
    assert_sl_ok(o->launch(e.dev, e.s[1], &mm));
    assert_sl_ok(o->synchronize(e.dev, e.s[1]));
    assert_true(slow_host() || sl_now_ns() - t0 < 250 * MS);
    env_close(&e);
}

struct trace {
    pthread_mutex_t lock;
    int order[16];
    int status[16];
    uint64_t at[16];
    unsigned n;
};

struct mark {
    struct trace *t;
    int id;
};

static void mark_fn(void *arg, int status)
{
    struct mark *m = arg;
    pthread_mutex_lock(&m->t->lock);
    unsigned i = m->t->n++;
    m->t->order[i] = m->id;
    m->t->status[i] = status;
    m->t->at[i] = sl_now_ns();
    pthread_mutex_unlock(&m->t->lock);
}

static void test_ordering_and_callbacks(void **state)
{
    (void) state;
    struct env e;
    env_open(&e, "sim:v100");
    const sl_device_ops *o = e.dev->ops;
    sl_op_call mm = matmul_call(&e, 4096);
    uint64_t t_op = model_ns(&e, &mm);
    struct trace tr = {.n = 0};
    pthread_mutex_init(&tr.lock, NULL);
    struct mark m[4] = {{&tr, 0}, {&tr, 1}, {&tr, 2}, {&tr, 3}};

    uint64_t t0 = sl_now_ns();
    assert_sl_ok(o->launch(e.dev, e.s[0], &mm));
    assert_sl_ok(o->host_callback(e.dev, e.s[0], mark_fn, &m[0]));
    assert_sl_ok(o->launch(e.dev, e.s[0], &mm));
    assert_sl_ok(o->launch(e.dev, e.s[0], &mm));
    assert_sl_ok(o->host_callback(e.dev, e.s[0], mark_fn, &m[1]));
    assert_sl_ok(o->synchronize(e.dev, e.s[0]));
    assert_int_equal(tr.n, 2);
    assert_int_equal(tr.order[0], 0);
    assert_int_equal(tr.order[1], 1);
    assert_sl_ok(tr.status[0]);
    assert_sl_ok(tr.status[1]);
    /* Each callback ran after the work before it. */
    assert_true(tr.at[0] - t0 >= t_op * 9 / 10);
    assert_true(tr.at[1] - t0 >= 3 * t_op * 9 / 10);

    /* Sticky error: work after the failure is skipped (takes no time), the
     * next callback gets the error, the one after it SL_OK. */
    tr.n = 0;
    t0 = sl_now_ns();
    assert_sl_ok(sl_sim_inject_error(e.s[0], SL_EDEVICE));
    for (unsigned i = 0; i < 20; i++)
        assert_sl_ok(o->launch(e.dev, e.s[0], &mm));
    assert_sl_ok(o->host_callback(e.dev, e.s[0], mark_fn, &m[2]));
    assert_sl_ok(o->host_callback(e.dev, e.s[0], mark_fn, &m[3]));
    assert_sl_ok(o->synchronize(e.dev, e.s[0]));
    assert_true(slow_host() || sl_now_ns() - t0 < 10 * t_op);
    assert_int_equal(tr.n, 2);
    assert_int_equal(tr.status[0], SL_EDEVICE);
    assert_sl_ok(tr.status[1]);

    /* Without a callback in between, synchronize reports and clears it. */
    assert_sl_ok(sl_sim_inject_error(e.s[1], SL_EINTERNAL));
    assert_sl_err(o->synchronize(e.dev, e.s[1]), SL_EINTERNAL);
    assert_sl_ok(o->synchronize(e.dev, e.s[1]));
    assert_sl_err(sl_sim_inject_error(e.s[1], SL_OK), SL_EINVAL);
    assert_sl_err(sl_sim_inject_error(e.s[1], SL_E_COUNT), SL_EINVAL);
    pthread_mutex_destroy(&tr.lock);
    env_close(&e);
}

struct chain {
    struct env *e;
    sl_op_call mm;
    atomic_int ran;
};

static void chain_fn(void *arg, int status)
{
    struct chain *c = arg;
    assert_int_equal(status, SL_OK);
    /* A callback may submit more work, to any stream. */
    if (atomic_fetch_add(&c->ran, 1) == 0) {
        (void) c->e->dev->ops->launch(c->e->dev, c->e->s[1], &c->mm);
        (void) c->e->dev->ops->host_callback(c->e->dev, c->e->s[1], chain_fn, c);
    }
}

static void test_submission(void **state)
{
    (void) state;
    struct env e;
    env_open(&e, "sim:v100");
    const sl_device_ops *o = e.dev->ops;
    sl_op_call mm = matmul_call(&e, 2048);

    /* Arity is checked at submission; nothing else about shapes is. */
    sl_op_call bad = mm;
    bad.n_in = 1;
    assert_sl_err(o->launch(e.dev, e.s[0], &bad), SL_EINVAL);
    bad = mm;
    bad.op = SL_OP_COUNT;
    assert_sl_err(o->launch(e.dev, e.s[0], &bad), SL_EUNSUPPORTED);
    assert_sl_err(o->launch(e.dev, e.s[0], NULL), SL_EINVAL);
    char host[64];
    assert_sl_err(o->memcpy_h2d(e.dev, e.s[0], NULL, host, 8), SL_EINVAL);
    assert_sl_err(o->memcpy_d2h(e.dev, e.s[0], host, NULL, 8), SL_EINVAL);
    assert_sl_ok(o->memcpy_d2d(e.dev, e.s[0], e.arena, e.arena, 0));
    assert_sl_err(o->host_callback(e.dev, e.s[0], NULL, NULL), SL_EINVAL);

    /* d2h zero-fills the host side; h2d leaves its source alone. */
    memset(host, 0xab, sizeof host);
    assert_sl_ok(o->memcpy_h2d(e.dev, e.s[0], e.arena, host, sizeof host));
    assert_sl_ok(o->synchronize(e.dev, e.s[0]));
    for (size_t i = 0; i < sizeof host; i++)
        assert_int_equal((unsigned char) host[i], 0xab);
    assert_sl_ok(o->memcpy_d2h(e.dev, e.s[0], host, e.arena, sizeof host - 8));
    assert_sl_ok(o->memcpy_d2d(e.dev, e.s[0], (char *) e.arena + 64, e.arena, 64));
    assert_sl_ok(o->synchronize(e.dev, e.s[0]));
    for (size_t i = 0; i < sizeof host; i++)
        assert_int_equal((unsigned char) host[i], i < sizeof host - 8 ? 0 : 0xab);

    /* Work submitted from a callback; synchronize of the other stream. */
    struct chain c = {.e = &e, .mm = mm};
    atomic_init(&c.ran, 0);
    assert_sl_ok(o->launch(e.dev, e.s[0], &mm));
    assert_sl_ok(o->host_callback(e.dev, e.s[0], chain_fn, &c));
    assert_sl_ok(o->synchronize(e.dev, e.s[0]));
    assert_sl_ok(o->synchronize(e.dev, e.s[1]));
    assert_int_equal(atomic_load(&c.ran), 2);

    /* Destroy waits for pending work. */
    sl_stream *s;
    sl_op_call big = matmul_call(&e, 4096);
    uint64_t t_op = model_ns(&e, &big);
    assert_sl_ok(o->stream_create(e.dev, 1, &s));
    uint64_t t0 = sl_now_ns();
    assert_sl_ok(o->launch(e.dev, s, &big));
    o->stream_destroy(e.dev, s);
    assert_about(sl_now_ns() - t0, t_op, "destroy after a matmul");
    env_close(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profiles),
        cmocka_unit_test(test_cost_matmul),
        cmocka_unit_test(test_cost_memory_bound),
        cmocka_unit_test(test_cost_conv),
        cmocka_unit_test(test_cost_errors),
        cmocka_unit_test(test_cost_precision),
        cmocka_unit_test(test_occupancy),
        cmocka_unit_test(test_ps_basic),
        cmocka_unit_test(test_ps_incremental),
        cmocka_unit_test(test_ps_random),
        cmocka_unit_test(test_psc_basic),
        cmocka_unit_test(test_psc_priority),
        cmocka_unit_test(test_psc_priority_zero_same),
        cmocka_unit_test(test_psc_launch),
        cmocka_unit_test(test_psc_equals_ps),
        cmocka_unit_test(test_psc_random),
        cmocka_unit_test(test_open),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_launch_timing),
        cmocka_unit_test(test_launch_precision),
        cmocka_unit_test(test_sharing),
        cmocka_unit_test(test_pipelined_launches),
        cmocka_unit_test(test_launches_rebased),
        cmocka_unit_test(test_ordering_and_callbacks),
        cmocka_unit_test(test_submission),
    };
    return cmocka_run_group_tests_name("sim", tests, NULL, NULL);
}
