/* Max pooling in plain C: the forward pass for windows that tile the plane
 * (stride = kernel, no padding: the usual 2x2/2 of a CNN) and for any
 * undilated window (overlapping, padded: ResNet's 3x3/2 pad 1), and the
 * gradient for every geometry.
 *
 * The forward pass: oneDNN 2.6 has JIT pooling only for blocked and
 * channels-last layouts; on salus's NCHW it falls back to a generic loop
 * that took 18 ms for a 128x16x28x28 tensor here, where one streaming pass
 * in C takes well under one (and 11 ms of a 60 ms ResNet-18 inference at
 * batch 1, for its one 3x3/2 max pool). Overlapping windows take the max
 * over the window's rows first, for a whole row at once (a loop the
 * compiler vectorises), then over the window's columns of that row. A NaN in a window is the
 * window's max (the first NaN, as in PyTorch), which is what maxpool_grad's tie rule expects.
 *
 * maxpool_grad, from x, y and dy. oneDNN's max-pool backward
 * needs the forward pass's workspace, which salus's maxpool (a separate op
 * that may run in an inference graph) does not keep; recomputing the argmax
 * from y is one compare per window element, cheaper than re-running the
 * forward pass, and it gives the ONNX/PyTorch tie rule directly: the
 * gradient goes to the first element of the window (row-major) that equals
 * the max. Padding never holds the max, so only real elements are scanned. */
#include "cpu.h"
#include "half.h"
#include "ops_geom.h"

#include "sl_error.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static inline int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Every plane (image, channel) of c (of x, input `xin`) by fn, split
 * across the team from SL_CPU_TEAM_MIN_ELEMS elements of x: the planes
 * share nothing. */
static void run_planes(const sl_op_call *c, unsigned xin, sl_cpu_units_fn fn, int threads)
{
    const sl_shape *xs = &c->in[xin].shape;
    sl_cpu_run_units(c, fn, (uint64_t) (xs->dims[0] * xs->dims[1]), sl_shape_elems(xs),
                     SL_CPU_TEAM_MIN_ELEMS, threads);
}

/* g where hit, else +0.0, without a branch (a select compiles to a
 * mispredicted jump per element here). */
static inline float keep_if(bool hit, float g)
{
    uint32_t bits;
    memcpy(&bits, &g, sizeof bits);
    bits &= 0u - (uint32_t) hit;
    memcpy(&g, &bits, sizeof g);
    return g;
}

/* The first element of x's window (rows [hb, he), columns [wb, we)) equal
 * to m, scanning row-major; -1 if none. A NaN max matches the first NaN. */
static int64_t first_max(const float *x, int64_t w, int64_t hb, int64_t he, int64_t wb, int64_t we,
                         float m)
{
    bool nan = isnan(m);
    for (int64_t r = hb; r < he; r++)
        for (int64_t s = wb; s < we; s++) {
            float v = x[r * w + s];
            if (v == m || (nan && isnan(v)))
                return r * w + s;
        }
    return -1;
}

/* Windows that tile the plane without overlap or padding (stride = kernel,
 * the usual 2x2/2): every element is written once, the max gets dy and the
 * rest 0, branch-free; rows and columns no window covers get 0. */
static void grad_tiled(const float *x, const float *y, const float *dy, float *dx, int64_t h,
                       int64_t w, int64_t oh, int64_t ow, int64_t kh, int64_t kw)
{
    for (int64_t i = 0; i < oh; i++) {
        for (int64_t j = 0; j < ow; j++) {
            float m = y[i * ow + j], g = dy[i * ow + j];
            if (isnan(m)) { /* rare: keep the NaN rule out of the fast loop */
                int64_t at = first_max(x, w, i * kh, i * kh + kh, j * kw, j * kw + kw, m);
                for (int64_t r = i * kh; r < i * kh + kh; r++)
                    for (int64_t s = j * kw; s < j * kw + kw; s++)
                        dx[r * w + s] = r * w + s == at ? g : 0.0f;
                continue;
            }
            bool found = false;
            for (int64_t r = i * kh; r < i * kh + kh; r++)
                for (int64_t s = j * kw; s < j * kw + kw; s++) {
                    bool hit = !found & (x[r * w + s] == m);
                    dx[r * w + s] = keep_if(hit, g);
                    found |= hit;
                }
        }
        for (int64_t r = i * kh; r < i * kh + kh; r++)
            memset(dx + r * w + ow * kw, 0, (size_t) (w - ow * kw) * sizeof *dx);
    }
    memset(dx + oh * kh * w, 0, (size_t) ((h - oh * kh) * w) * sizeof *dx);
}

/* One row of 2x2 windows: per output, masks pick the first of a, b, c, d
 * equal to the max, all in integer bit operations so the loop vectorises.
 * A NaN max matches nothing; returns true when one was seen, and the caller
 * redoes the row with first_max. */
static bool grad_row_2x2(const float *x0, const float *x1, const float *y, const float *dy,
                         float *d0, float *d1, int64_t ow)
{
    uint32_t nan_seen = 0;
    for (int64_t j = 0; j < ow; j++) {
        float m = y[j];
        uint32_t g = sl_f32_bits(dy[j]);
        uint32_t ma = 0u - (uint32_t) (x0[2 * j] == m);
        uint32_t mb = (0u - (uint32_t) (x0[2 * j + 1] == m)) & ~ma;
        uint32_t mc = (0u - (uint32_t) (x1[2 * j] == m)) & ~(ma | mb);
        uint32_t md = (0u - (uint32_t) (x1[2 * j + 1] == m)) & ~(ma | mb | mc);
        nan_seen |= (uint32_t) (m != m);
        d0[2 * j] = sl_f32_from_bits(g & ma);
        d0[2 * j + 1] = sl_f32_from_bits(g & mb);
        d1[2 * j] = sl_f32_from_bits(g & mc);
        d1[2 * j + 1] = sl_f32_from_bits(g & md);
    }
    return nan_seen != 0;
}

/* grad_tiled for 2x2 windows, the common CNN pool. */
static void grad_tiled_2x2(const float *x, const float *y, const float *dy, float *dx, int64_t h,
                           int64_t w, int64_t oh, int64_t ow)
{
    for (int64_t i = 0; i < oh; i++) {
        const float *x0 = x + 2 * i * w, *x1 = x0 + w;
        float *d0 = dx + 2 * i * w, *d1 = d0 + w;
        if (grad_row_2x2(x0, x1, y + i * ow, dy + i * ow, d0, d1, ow)) {
            for (int64_t j = 0; j < ow; j++) {
                int64_t at = first_max(x, w, 2 * i, 2 * i + 2, 2 * j, 2 * j + 2, y[i * ow + j]);
                for (int64_t r = 2 * i; r < 2 * i + 2; r++)
                    for (int64_t s = 2 * j; s < 2 * j + 2; s++)
                        dx[r * w + s] = keep_if(r * w + s == at, dy[i * ow + j]);
            }
        }
        if (w > 2 * ow) {
            d0[w - 1] = 0.0f;
            d1[w - 1] = 0.0f;
        }
    }
    if (h > 2 * oh)
        memset(dx + (h - 1) * w, 0, (size_t) w * sizeof *dx);
}

/* Any window geometry: zero dx, then add each window's dy at its max. */
static void grad_general(const float *x, const float *y, const float *dy, float *dx, int64_t h,
                         int64_t w, int64_t oh, int64_t ow, const sl_window2d *g)
{
    memset(dx, 0, (size_t) (h * w) * sizeof *dx);
    for (int64_t i = 0; i < oh; i++) {
        int64_t h0 = i * g->stride[0] - g->pad_begin[0];
        int64_t hb = max64(h0, 0), he = min64(h0 + g->kernel[0], h);
        for (int64_t j = 0; j < ow; j++) {
            int64_t w0 = j * g->stride[1] - g->pad_begin[1];
            int64_t at =
                first_max(x, w, hb, he, max64(w0, 0), min64(w0 + g->kernel[1], w), y[i * ow + j]);
            /* No match only if y is not maxpool(x): the gradient has nowhere
             * to go. */
            if (at >= 0)
                dx[at] += dy[i * ow + j];
        }
    }
}

/* a if it is the max so far (larger, or a NaN), else m: NaN stays. */
static inline float max_nan(float m, float a)
{
    return a > m || a != a ? a : m;
}

/* One output row of 2x2 windows over input rows x0 and x1. */
static void pool_row_2x2(const float *x0, const float *x1, float *y, int64_t ow)
{
    for (int64_t j = 0; j < ow; j++) {
        float m = x0[2 * j];
        m = max_nan(m, x0[2 * j + 1]);
        m = max_nan(m, x1[2 * j]);
        y[j] = max_nan(m, x1[2 * j + 1]);
    }
}

bool sl_cpu_maxpool_tiles(const sl_op_call *c)
{
    sl_window2d g = sl_pool_window(&c->attrs);
    return g.stride[0] == g.kernel[0] && g.stride[1] == g.kernel[1] && !g.pad_begin[0] &&
           !g.pad_begin[1] && !g.pad_end[0] && !g.pad_end[1] && g.dilation[0] == 1 &&
           g.dilation[1] == 1;
}

static void tiled_planes(const sl_op_call *c, uint64_t p0, uint64_t p1)
{
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    const int64_t *xd = c->in[0].shape.dims, *yd = c->out[0].shape.dims;
    sl_window2d g = sl_pool_window(&c->attrs);
    int64_t h = xd[2], w = xd[3], oh = yd[2], ow = yd[3], kh = g.kernel[0], kw = g.kernel[1];
    for (uint64_t p = p0; p < p1; p++) {
        const float *xp = x + p * (uint64_t) (h * w);
        float *yp = y + p * (uint64_t) (oh * ow);
        for (int64_t i = 0; i < oh; i++) {
            const float *row = xp + i * kh * w;
            if (kh == 2 && kw == 2) {
                pool_row_2x2(row, row + w, yp + i * ow, ow);
                continue;
            }
            for (int64_t j = 0; j < ow; j++) {
                float m = row[j * kw];
                for (int64_t r = 0; r < kh; r++)
                    for (int64_t s = 0; s < kw; s++)
                        m = max_nan(m, row[r * w + j * kw + s]);
                yp[i * ow + j] = m;
            }
        }
    }
}

int sl_cpu_maxpool_tiled(const sl_op_call *c, int threads)
{
    run_planes(c, 0, tiled_planes, threads);
    return SL_OK;
}

bool sl_cpu_maxpool_rows(const sl_op_call *c)
{
    sl_window2d g = sl_pool_window(&c->attrs);
    /* the registry keeps pads below the kernel, so with dilation 1 every
     * window holds at least one element of the plane */
    return g.dilation[0] == 1 && g.dilation[1] == 1 && g.pad_begin[0] < g.kernel[0] &&
           g.pad_begin[1] < g.kernel[1] && g.pad_end[0] < g.kernel[0] &&
           g.pad_end[1] < g.kernel[1] && c->in[0].shape.dims[3] <= SL_CPU_POOL_ROW_MAX;
}

static void rows_planes(const sl_op_call *c, uint64_t p0, uint64_t p1)
{
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    const int64_t *xd = c->in[0].shape.dims, *yd = c->out[0].shape.dims;
    sl_window2d g = sl_pool_window(&c->attrs);
    int64_t h = xd[2], w = xd[3], oh = yd[2], ow = yd[3];
    float rowmax[SL_CPU_POOL_ROW_MAX];
    for (uint64_t p = p0; p < p1; p++) {
        const float *xp = x + p * (uint64_t) (h * w);
        float *yp = y + p * (uint64_t) (oh * ow);
        for (int64_t i = 0; i < oh; i++) {
            int64_t hb = max64(i * g.stride[0] - g.pad_begin[0], 0);
            int64_t he = min64(i * g.stride[0] - g.pad_begin[0] + g.kernel[0], h);
            memcpy(rowmax, xp + hb * w, (size_t) w * sizeof *rowmax);
            for (int64_t r = hb + 1; r < he; r++)
                for (int64_t s = 0; s < w; s++)
                    rowmax[s] = max_nan(rowmax[s], xp[r * w + s]);
            for (int64_t j = 0; j < ow; j++) {
                int64_t wb = max64(j * g.stride[1] - g.pad_begin[1], 0);
                int64_t we = min64(j * g.stride[1] - g.pad_begin[1] + g.kernel[1], w);
                float m = rowmax[wb];
                for (int64_t s = wb + 1; s < we; s++)
                    m = max_nan(m, rowmax[s]);
                yp[i * ow + j] = m;
            }
        }
    }
}

int sl_cpu_maxpool_by_rows(const sl_op_call *c, int threads)
{
    run_planes(c, 0, rows_planes, threads);
    return SL_OK;
}

static void grad_planes(const sl_op_call *c, uint64_t p0, uint64_t p1)
{
    const float *dy = c->in[0].data, *x = c->in[1].data, *y = c->in[2].data;
    float *dx = c->out[0].data;
    const int64_t *xd = c->in[1].shape.dims, *yd = c->in[2].shape.dims;
    sl_window2d g = sl_pool_window(&c->attrs);
    int64_t h = xd[2], w = xd[3], oh = yd[2], ow = yd[3];
    bool tiled = g.stride[0] == g.kernel[0] && g.stride[1] == g.kernel[1] && !g.pad_begin[0] &&
                 !g.pad_begin[1] && !g.pad_end[0] && !g.pad_end[1];
    for (uint64_t p = p0; p < p1; p++) {
        uint64_t xo = p * (uint64_t) (h * w), yo = p * (uint64_t) (oh * ow);
        if (tiled && g.kernel[0] == 2 && g.kernel[1] == 2)
            grad_tiled_2x2(x + xo, y + yo, dy + yo, dx + xo, h, w, oh, ow);
        else if (tiled)
            grad_tiled(x + xo, y + yo, dy + yo, dx + xo, h, w, oh, ow, g.kernel[0], g.kernel[1]);
        else
            grad_general(x + xo, y + yo, dy + yo, dx + xo, h, w, oh, ow, &g);
    }
}

int sl_cpu_maxpool_grad(const sl_op_call *c, int threads)
{
    run_planes(c, 1, grad_planes, threads);
    return SL_OK;
}
