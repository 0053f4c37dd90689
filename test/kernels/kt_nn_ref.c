/* Helpers and double-precision references of kt_nn.h: direct loops over the
 * definitions in docs/ops.md, no cleverness. */
#include "kt_nn.h"

#include "sl_alloc.h"

#include <math.h>
#include <string.h>

#define FD_H 1e-6

float *kt_fvec(size_t n)
{
    float *p = sl_calloc(n ? n : 1, sizeof *p);
    assert_non_null(p);
    return p;
}

double *kt_dvec(size_t n)
{
    double *p = sl_calloc(n ? n : 1, sizeof *p);
    assert_non_null(p);
    return p;
}

void kt_widen(const float *x, double *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i];
}

void kt_expect_close(const char *what, const float *got, const double *want, size_t n, double tol)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= tol * (1.0 + fabs(want[i]))))
            fail_msg("%s[%zu]: got %.9g, want %.9g (tol %g)", what, i, (double) got[i], want[i],
                     tol);
}

void kt_expect_equal_i32(const char *what, const int32_t *got, const int32_t *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s[%zu]: got %d, want %d", what, i, (int) got[i], (int) want[i]);
}

void kt_fd_grad(kt_scalar_fn f, const void *ctx, double *x, size_t n, double *grad)
{
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + FD_H;
        double up = f(x, ctx);
        x[i] = keep - FD_H;
        double down = f(x, ctx);
        x[i] = keep;
        grad[i] = (up - down) / (2 * FD_H);
    }
}

/* ---- geometry ---- */

static int64_t or_one(int64_t v)
{
    return v ? v : 1;
}

int64_t kt_out_extent(int64_t in, int64_t k, int64_t stride, int64_t pb, int64_t pe, int64_t dil)
{
    return (in + pb + pe - dil * (k - 1) - 1) / stride + 1;
}

void kt_conv_out(const int64_t xd[4], const int64_t wd[4], const sl_op_attrs *a, int64_t yd[4])
{
    yd[0] = xd[0];
    yd[1] = wd[0];
    for (int ax = 0; ax < 2; ax++)
        yd[2 + ax] = kt_out_extent(xd[2 + ax], wd[2 + ax], or_one(a->i[ax]), a->i[2 + ax],
                                   a->i[4 + ax], or_one(a->i[6 + ax]));
}

void kt_pool_out(const int64_t xd[4], const sl_op_attrs *a, int64_t yd[4])
{
    yd[0] = xd[0];
    yd[1] = xd[1];
    for (int ax = 0; ax < 2; ax++)
        yd[2 + ax] = kt_out_extent(xd[2 + ax], a->i[ax], or_one(a->i[2 + ax]), a->i[4 + ax],
                                   a->i[6 + ax], 1);
}

size_t kt_elems(const int64_t *d, unsigned n)
{
    size_t e = 1;
    for (unsigned i = 0; i < n; i++)
        e *= (size_t) d[i];
    return e;
}

/* ---- convolution ---- */

enum conv_mode { CONV_Y, CONV_DX, CONV_DW };

/* The one loop nest of conv2d; each mode accumulates one product of it:
 * y += x*w, dx += dy*w or dw += dy*x (the adjoints of the forward). */
static void conv_loops(enum conv_mode mode, const double *x, const double *w, const double *dy,
                       double *out, const int64_t xd[4], const int64_t wd[4], const sl_op_attrs *a)
{
    int64_t yd[4];
    kt_conv_out(xd, wd, a, yd);
    int64_t sh = or_one(a->i[0]), sw = or_one(a->i[1]), ph = a->i[2], pw = a->i[3];
    int64_t dh = or_one(a->i[6]), dw = or_one(a->i[7]), groups = or_one(a->i[8]);
    int64_t cg = xd[1] / groups, kg = wd[0] / groups;
    for (int64_t n = 0; n < yd[0]; n++)
        for (int64_t k = 0; k < yd[1]; k++)
            for (int64_t oh = 0; oh < yd[2]; oh++)
                for (int64_t ow = 0; ow < yd[3]; ow++) {
                    size_t yi = (size_t) (((n * yd[1] + k) * yd[2] + oh) * yd[3] + ow);
                    double acc = 0;
                    for (int64_t ci = 0; ci < cg; ci++) {
                        int64_t c = (k / kg) * cg + ci;
                        for (int64_t r = 0; r < wd[2]; r++)
                            for (int64_t s = 0; s < wd[3]; s++) {
                                int64_t ih = oh * sh - ph + r * dh, iw = ow * sw - pw + s * dw;
                                if (ih < 0 || ih >= xd[2] || iw < 0 || iw >= xd[3])
                                    continue;
                                size_t xi = (size_t) (((n * xd[1] + c) * xd[2] + ih) * xd[3] + iw);
                                size_t wi = (size_t) (((k * wd[1] + ci) * wd[2] + r) * wd[3] + s);
                                if (mode == CONV_Y)
                                    acc += x[xi] * w[wi];
                                else if (mode == CONV_DX)
                                    out[xi] += dy[yi] * w[wi];
                                else
                                    out[wi] += dy[yi] * x[xi];
                            }
                    }
                    if (mode == CONV_Y)
                        out[yi] = acc;
                }
}

void kt_ref_conv2d(const double *x, const double *w, double *y, const int64_t xd[4],
                   const int64_t wd[4], const sl_op_attrs *a)
{
    conv_loops(CONV_Y, x, w, NULL, y, xd, wd, a);
}

void kt_ref_conv2d_grad_input(const double *dy, const double *w, double *dx, const int64_t xd[4],
                              const int64_t wd[4], const sl_op_attrs *a)
{
    memset(dx, 0, kt_elems(xd, 4) * sizeof *dx);
    conv_loops(CONV_DX, NULL, w, dy, dx, xd, wd, a);
}

void kt_ref_conv2d_grad_filter(const double *dy, const double *x, double *dw, const int64_t xd[4],
                               const int64_t wd[4], const sl_op_attrs *a)
{
    memset(dw, 0, kt_elems(wd, 4) * sizeof *dw);
    conv_loops(CONV_DW, x, NULL, dy, dw, xd, wd, a);
}

/* ---- pooling ---- */

/* One output window, clipped to the input: rows [h0, h1), columns [w0, w1)
 * of plane `plane`; out is the output's flat index. */
struct pool_window {
    size_t out, plane;
    int64_t h0, h1, w0, w1;
    double divisor;
};

/* Calls visit once per output window. */
static void
pool_windows(const int64_t xd[4], const sl_op_attrs *a,
             void (*visit)(const struct pool_window *pw, const int64_t xd[4], void *ctx), void *ctx)
{
    int64_t yd[4];
    kt_pool_out(xd, a, yd);
    int64_t kh = a->i[0], kw = a->i[1], sh = or_one(a->i[2]), sw = or_one(a->i[3]);
    for (int64_t p = 0; p < xd[0] * xd[1]; p++)
        for (int64_t oh = 0; oh < yd[2]; oh++)
            for (int64_t ow = 0; ow < yd[3]; ow++) {
                int64_t hs = oh * sh - a->i[4], ws = ow * sw - a->i[5];
                struct pool_window pw = {
                    .out = (size_t) ((p * yd[2] + oh) * yd[3] + ow),
                    .plane = (size_t) p,
                    .h0 = hs < 0 ? 0 : hs,
                    .h1 = hs + kh > xd[2] ? xd[2] : hs + kh,
                    .w0 = ws < 0 ? 0 : ws,
                    .w1 = ws + kw > xd[3] ? xd[3] : ws + kw,
                };
                pw.divisor =
                    a->i[8] ? (double) (kh * kw) : (double) ((pw.h1 - pw.h0) * (pw.w1 - pw.w0));
                visit(&pw, xd, ctx);
            }
}

struct pool_ctx {
    bool max;
    const double *x;
    const double *dy;
    double *out;
};

/* Offset in x of the window's first maximum (row-major, strict >). */
static size_t first_max(const struct pool_window *pw, const int64_t xd[4], const double *x)
{
    size_t base = pw->plane * (size_t) (xd[2] * xd[3]);
    size_t best = base + (size_t) (pw->h0 * xd[3] + pw->w0);
    for (int64_t h = pw->h0; h < pw->h1; h++)
        for (int64_t w = pw->w0; w < pw->w1; w++) {
            size_t i = base + (size_t) (h * xd[3] + w);
            if (x[i] > x[best])
                best = i;
        }
    return best;
}

static void visit_forward(const struct pool_window *pw, const int64_t xd[4], void *vctx)
{
    struct pool_ctx *c = vctx;
    if (c->max) {
        c->out[pw->out] = c->x[first_max(pw, xd, c->x)];
        return;
    }
    size_t base = pw->plane * (size_t) (xd[2] * xd[3]);
    double s = 0;
    for (int64_t h = pw->h0; h < pw->h1; h++)
        for (int64_t w = pw->w0; w < pw->w1; w++)
            s += c->x[base + (size_t) (h * xd[3] + w)];
    c->out[pw->out] = s / pw->divisor;
}

static void visit_backward(const struct pool_window *pw, const int64_t xd[4], void *vctx)
{
    struct pool_ctx *c = vctx;
    if (c->max) {
        c->out[first_max(pw, xd, c->x)] += c->dy[pw->out];
        return;
    }
    size_t base = pw->plane * (size_t) (xd[2] * xd[3]);
    for (int64_t h = pw->h0; h < pw->h1; h++)
        for (int64_t w = pw->w0; w < pw->w1; w++)
            c->out[base + (size_t) (h * xd[3] + w)] += c->dy[pw->out] / pw->divisor;
}

void kt_ref_pool(bool max, const double *x, double *y, const int64_t xd[4], const sl_op_attrs *a)
{
    struct pool_ctx c = {.max = max, .x = x, .out = y};
    pool_windows(xd, a, visit_forward, &c);
}

void kt_ref_pool_grad(bool max, const double *dy, const double *x, double *dx, const int64_t xd[4],
                      const sl_op_attrs *a)
{
    memset(dx, 0, kt_elems(xd, 4) * sizeof *dx);
    struct pool_ctx c = {.max = max, .x = x, .dy = dy, .out = dx};
    pool_windows(xd, a, visit_backward, &c);
}

/* ---- batch normalisation ---- */

#define BN_AT(n_, c_, i_) (((n_) *c + (c_)) * inner + (i_))

void kt_ref_batchnorm(const double *x, const double *scale, const double *bias, double *run_mean,
                      double *run_var, double *y, double *saved_mean, double *saved_inv, size_t n,
                      size_t c, size_t inner, double eps, double momentum)
{
    double m = (double) (n * inner);
    for (size_t ch = 0; ch < c; ch++) {
        double mean = 0, var = 0;
        for (size_t b = 0; b < n; b++)
            for (size_t i = 0; i < inner; i++)
                mean += x[BN_AT(b, ch, i)];
        mean /= m;
        for (size_t b = 0; b < n; b++)
            for (size_t i = 0; i < inner; i++)
                var += (x[BN_AT(b, ch, i)] - mean) * (x[BN_AT(b, ch, i)] - mean);
        var /= m; /* biased: what normalises */
        double inv = 1 / sqrt(var + eps);
        for (size_t b = 0; b < n; b++)
            for (size_t i = 0; i < inner; i++)
                y[BN_AT(b, ch, i)] = scale[ch] * (x[BN_AT(b, ch, i)] - mean) * inv + bias[ch];
        saved_mean[ch] = mean;
        saved_inv[ch] = inv;
        run_mean[ch] = run_mean[ch] * momentum + mean * (1 - momentum);
        run_var[ch] = run_var[ch] * momentum + var * m / (m - 1) * (1 - momentum);
    }
}

void kt_ref_batchnorm_infer(const double *x, const double *scale, const double *bias,
                            const double *mean, const double *var, double *y, size_t n, size_t c,
                            size_t inner, double eps)
{
    for (size_t b = 0; b < n; b++)
        for (size_t ch = 0; ch < c; ch++)
            for (size_t i = 0; i < inner; i++)
                y[BN_AT(b, ch, i)] =
                    scale[ch] * (x[BN_AT(b, ch, i)] - mean[ch]) / sqrt(var[ch] + eps) + bias[ch];
}

void kt_ref_batchnorm_grad(const double *dy, const double *x, const double *scale,
                           const double *saved_mean, const double *saved_inv, double *dx,
                           double *dscale, double *dbias, size_t n, size_t c, size_t inner)
{
    double m = (double) (n * inner);
    for (size_t ch = 0; ch < c; ch++) {
        double sum_dy = 0, sum_dy_xhat = 0;
        for (size_t b = 0; b < n; b++)
            for (size_t i = 0; i < inner; i++) {
                double xhat = (x[BN_AT(b, ch, i)] - saved_mean[ch]) * saved_inv[ch];
                sum_dy += dy[BN_AT(b, ch, i)];
                sum_dy_xhat += dy[BN_AT(b, ch, i)] * xhat;
            }
        dbias[ch] = sum_dy;
        dscale[ch] = sum_dy_xhat;
        for (size_t b = 0; b < n; b++)
            for (size_t i = 0; i < inner; i++) {
                double xhat = (x[BN_AT(b, ch, i)] - saved_mean[ch]) * saved_inv[ch];
                dx[BN_AT(b, ch, i)] = scale[ch] * saved_inv[ch] / m *
                                      (m * dy[BN_AT(b, ch, i)] - sum_dy - xhat * sum_dy_xhat);
            }
    }
}

#undef BN_AT

/* ---- softmax family ---- */

/* Row r's maximum (*m) and sum of exp(x - max), the stable softmax's parts. */
static double exp_sum(const double *xr, size_t c, double *m)
{
    double s = 0;
    *m = xr[0];
    for (size_t j = 1; j < c; j++)
        *m = xr[j] > *m ? xr[j] : *m;
    for (size_t j = 0; j < c; j++)
        s += exp(xr[j] - *m);
    return s;
}

void kt_ref_softmax(const double *x, double *p, size_t n, size_t c)
{
    for (size_t r = 0; r < n; r++) {
        const double *xr = x + r * c;
        double m, s = exp_sum(xr, c, &m);
        for (size_t j = 0; j < c; j++)
            p[r * c + j] = exp(xr[j] - m) / s;
    }
}

double kt_ref_xent(const double *x, const int32_t *labels, size_t n, size_t c)
{
    double total = 0;
    for (size_t r = 0; r < n; r++) {
        const double *xr = x + r * c;
        double m, s = exp_sum(xr, c, &m);
        total += log(s) + m - xr[labels[r]];
    }
    return total / (double) n;
}

void kt_ref_xent_grad(const double *probs, const int32_t *labels, double *dx, size_t n, size_t c)
{
    for (size_t r = 0; r < n; r++)
        for (size_t j = 0; j < c; j++)
            dx[r * c + j] =
                (probs[r * c + j] - ((int32_t) j == labels[r] ? 1.0 : 0.0)) / (double) n;
}

void kt_ref_argmax(const float *x, int32_t *out, size_t n, size_t c)
{
    for (size_t r = 0; r < n; r++) {
        size_t best = 0;
        for (size_t j = 1; j < c; j++)
            if (x[r * c + j] > x[r * c + best])
                best = j;
        out[r] = (int32_t) best;
    }
}

void kt_ref_matmul_acc(const double *a, const double *b, double *acc, size_t m, size_t n, size_t k,
                       bool ta, bool tb, double alpha, double beta)
{
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            double sum = 0;
            for (size_t p = 0; p < k; p++)
                sum += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
            acc[i * n + j] = (beta == 0 ? 0 : beta * acc[i * n + j]) + alpha * sum;
        }
}
