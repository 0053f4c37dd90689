/* maxpool, avgpool and their gradients over NCHW: custom kernels rather than
 * cuDNN, which has neither asymmetric pads nor a defined tie rule.
 *
 * Semantics (docs/ops.md): windows are clipped to the input (padding never wins a
 * max; the registry keeps every pad below the kernel, so no window is
 * empty). A window's max is its first maximum in row-major order, NaN above
 * every number. avgpool divides by KH*KW with count_include_pad (with the
 * floor output size no window reaches past the padded input), else by the
 * clipped window's size.
 *
 * The gradients are gathers, one thread per input element, over the (few)
 * windows that contain it: deterministic, no atomics, no memset.
 * maxpool_grad recomputes each covering window's first maximum from x
 * instead of trusting y, so ties follow the rule even when several elements
 * equal y.
 *
 * Every op runs in f32, bf16 and f16 (T): windows are read into f32, sums
 * are f32, the result is rounded once into T. */
#include "kernels.cuh"

#include "ops_geom.h"

#include <math.h>

struct pool_geom {
    long long h, w, oh, ow;
    long long kh, kw, sh, sw, ph, pw; /* kernel, strides, begin pads */
    bool include_pad;
};

/* A window clipped to the input: rows [h0, h1), columns [w0, w1). */
struct window {
    long long h0, h1, w0, w1;
};

__device__ static window window_at(const pool_geom &g, long long oh, long long ow)
{
    long long hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
    window wd = {hs > 0 ? hs : 0, hs + g.kh < g.h ? hs + g.kh : g.h, ws > 0 ? ws : 0,
                 ws + g.kw < g.w ? ws + g.kw : g.w};
    return wd;
}

/* Offset in the plane of the window's first maximum. */
template <class T>
__device__ static long long window_argmax(const T *plane, const pool_geom &g, window wd)
{
    long long best = wd.h0 * g.w + wd.w0;
    float bv = ld(plane[best]);
    for (long long h = wd.h0; h < wd.h1; h++)
        for (long long w = wd.w0; w < wd.w1; w++) {
            float v = ld(plane[h * g.w + w]);
            if (v > bv || (isnan(v) && !isnan(bv))) {
                bv = v;
                best = h * g.w + w;
            }
        }
    return best;
}

__device__ static float window_divisor(const pool_geom &g, window wd)
{
    return g.include_pad ? (float) (g.kh * g.kw) : (float) ((wd.h1 - wd.h0) * (wd.w1 - wd.w0));
}

/* One thread per output element. */
template <class T, class I, bool MAX>
__global__ void k_pool(const T *x, T *y, I n, pool_geom g, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(I, i, n)
    {
        I ow = i % (I) g.ow, t = i / (I) g.ow;
        I oh = t % (I) g.oh, plane = t / (I) g.oh;
        const T *xp = x + (uint64_t) plane * (uint64_t) (g.h * g.w);
        window wd = window_at(g, (long long) oh, (long long) ow);
        if constexpr (MAX) {
            y[i] = xp[window_argmax(xp, g, wd)];
        } else {
            float s = 0.0f;
            for (long long h = wd.h0; h < wd.h1; h++)
                for (long long w = wd.w0; w < wd.w1; w++)
                    s += ld(xp[h * g.w + w]);
            y[i] = st<T>(s / window_divisor(g, wd));
        }
    }
}

/* The output indices along one axis whose windows contain input index v:
 * o * s - p <= v < o * s - p + k, clipped to [0, out). Empty when lo > hi. */
__device__ static void covering(long long v, long long k, long long s, long long p, long long out,
                                long long *lo, long long *hi)
{
    long long num = v + p - k; /* o > num / s */
    *lo = num < 0 ? 0 : num / s + 1;
    long long h = (v + p) / s;
    *hi = h < out - 1 ? h : out - 1;
}

/* One thread per input element, gathering from the windows containing it. */
template <class T, class I, bool MAX>
__global__ void k_pool_grad(const T *dy, const T *x, T *dx, I n, pool_geom g, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(I, i, n)
    {
        I w = i % (I) g.w, t = i / (I) g.w;
        I h = t % (I) g.h, plane = t / (I) g.h;
        const T *dyp = dy + (uint64_t) plane * (uint64_t) (g.oh * g.ow);
        const T *xp = MAX ? x + (uint64_t) plane * (uint64_t) (g.h * g.w) : NULL;
        long long oh0, oh1, ow0, ow1, self = (long long) h * g.w + (long long) w;
        covering((long long) h, g.kh, g.sh, g.ph, g.oh, &oh0, &oh1);
        covering((long long) w, g.kw, g.sw, g.pw, g.ow, &ow0, &ow1);
        float acc = 0.0f;
        for (long long oh = oh0; oh <= oh1; oh++)
            for (long long ow = ow0; ow <= ow1; ow++) {
                window wd = window_at(g, oh, ow);
                if constexpr (MAX) {
                    if (window_argmax(xp, g, wd) == self)
                        acc += ld(dyp[oh * g.ow + ow]);
                } else {
                    acc += ld(dyp[oh * g.ow + ow]) / window_divisor(g, wd);
                }
            }
        dx[i] = st<T>(acc);
    }
}

/* One thread per element of the output: y for the forward ops, dx (x's
 * shape; in0 dy, in1 x) for the gradients. */
template <class T, class I, bool MAX>
static void launch_pool(const sl_cuda_exec *x, const sl_op_call *c, const pool_geom &g, bool grad)
{
    uint64_t n = sl_shape_elems(&c->out[0].shape);
    const T *in0 = (const T *) c->in[0].data;
    T *out = (T *) c->out[0].data;
    if (!grad)
        k_pool<T, I, MAX><<<blocks_for(n), BLOCK, 0, x->stream>>>(in0, out, (I) n, g, x->flag_dev);
    else
        k_pool_grad<T, I, MAX><<<blocks_for(n), BLOCK, 0, x->stream>>>(
            in0, (const T *) c->in[1].data, out, (I) n, g, x->flag_dev);
}

template <class T>
static void launch_any(const sl_cuda_exec *x, const sl_op_call *c, const pool_geom &g, bool grad,
                       bool max, bool narrow)
{
    if (max && narrow)
        launch_pool<T, uint32_t, true>(x, c, g, grad);
    else if (max)
        launch_pool<T, uint64_t, true>(x, c, g, grad);
    else if (narrow)
        launch_pool<T, uint32_t, false>(x, c, g, grad);
    else
        launch_pool<T, uint64_t, false>(x, c, g, grad);
}

extern "C" int sl_cuda_run_pool(sl_cuda_exec *x, const sl_op_call *c)
{
    bool grad = c->op == SL_OP_MAXPOOL_GRAD || c->op == SL_OP_AVGPOOL_GRAD;
    bool max = c->op == SL_OP_MAXPOOL || c->op == SL_OP_MAXPOOL_GRAD;
    if (!grad && !max && c->op != SL_OP_AVGPOOL)
        return SL_EUNSUPPORTED;
    /* x is in0 for the forward ops, in1 for the gradients; y / dy the other. */
    const sl_shape *xs = &c->in[grad ? 1 : 0].shape;
    const sl_shape *ys = grad ? &c->in[0].shape : &c->out[0].shape;
    sl_window2d w = sl_pool_window(&c->attrs);
    pool_geom g;
    g.h = xs->dims[2], g.w = xs->dims[3], g.oh = ys->dims[2], g.ow = ys->dims[3];
    g.kh = w.kernel[0], g.kw = w.kernel[1], g.sh = w.stride[0], g.sw = w.stride[1];
    g.ph = w.pad_begin[0], g.pw = w.pad_begin[1];
    g.include_pad = w.count_include_pad;

    uint64_t nx = sl_shape_elems(xs), ny = sl_shape_elems(ys);
    bool narrow = use_32bit(nx > ny ? nx : ny);
    SL_FLOAT_DISPATCH(c->in[0].shape.dtype, launch_any, x, c, g, grad, max, narrow);
    return LAUNCHED("cuda.pool");
}
