/* cpu kernels of the transformer training ops (ops_train.c's, registry in
 * ops_table.c): layer_norm and its gradient, ew_unary_grad, softmax_axis
 * and its gradient, embedding_grad, dropout and its gradient. Shapes were
 * validated by the registry.
 *
 * Each op's work is a number of independent units (rows of a layer norm,
 * lanes along a softmax's axis, columns of an embedding table, elements)
 * and one function that runs a range of them; from SL_CPU_TEAM_MIN_ELEMS
 * elements the ranges are split across the stream's thread team. Every
 * unit is computed the same way whatever the split, so results do not
 * depend on the thread count. Statistics and sums accumulate in double. */
#include "cpu.h"
#include "elementwise.h"

#include "sl_error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Runs fn over [0, units), on the team when the op touches `elems`
 * elements, enough to pay for waking it. */
static void run_units(const sl_cpu_exec *x, const sl_op_call *c, uint64_t units, uint64_t elems,
                      sl_cpu_units_fn fn)
{
    sl_cpu_run_units(c, fn, units, elems, SL_CPU_TEAM_MIN_ELEMS, x->threads);
}

static const float *fin(const sl_op_call *c, unsigned i)
{
    return c->in[i].data;
}

static float *fout(const sl_op_call *c, unsigned o)
{
    return c->out[o].data;
}

/* Elements of the dims from `axis` on: a layer norm's row, a table's row. */
static uint64_t tail_elems(const sl_shape *s, unsigned axis)
{
    uint64_t n = 1;
    for (unsigned d = axis; d < s->ndim; d++)
        n *= (uint64_t) s->dims[d];
    return n;
}

/* ---- layer_norm ---- */

static void ln_rows(const sl_op_call *c, uint64_t r0, uint64_t r1)
{
    uint64_t d = tail_elems(&c->in[0].shape, (unsigned) c->attrs.i[0]);
    const float *w = fin(c, 1), *b = fin(c, 2);
    float eps = c->attrs.f[0];
    for (uint64_t r = r0; r < r1; r++) {
        const float *xr = fin(c, 0) + r * d;
        float *yr = fout(c, 0) + r * d;
        double s = 0, ss = 0;
        for (uint64_t j = 0; j < d; j++)
            s += xr[j];
        double mean = s / (double) d;
        for (uint64_t j = 0; j < d; j++) {
            double t = xr[j] - mean;
            ss += t * t;
        }
        float rstd = (float) (1.0 / sqrt(ss / (double) d + eps)), m = (float) mean;
        for (uint64_t j = 0; j < d; j++)
            yr[j] = (xr[j] - m) * rstd * w[j] + b[j];
        fout(c, 1)[r] = m;
        fout(c, 2)[r] = rstd;
    }
}

/* dx of layer_norm_grad, one row at a time. */
static void ln_grad_rows(const sl_op_call *c, uint64_t r0, uint64_t r1)
{
    uint64_t d = tail_elems(&c->in[1].shape, (unsigned) c->attrs.i[0]);
    const float *w = fin(c, 2);
    for (uint64_t r = r0; r < r1; r++) {
        const float *dy = fin(c, 0) + r * d, *x = fin(c, 1) + r * d;
        float mean = fin(c, 3)[r], rstd = fin(c, 4)[r];
        float *dx = fout(c, 0) + r * d;
        double sg = 0, sgx = 0;
        for (uint64_t j = 0; j < d; j++) {
            double g = (double) dy[j] * w[j];
            sg += g;
            sgx += g * ((x[j] - mean) * rstd);
        }
        float mg = (float) (sg / (double) d), mgx = (float) (sgx / (double) d);
        for (uint64_t j = 0; j < d; j++) {
            float xhat = (x[j] - mean) * rstd;
            dx[j] = rstd * (dy[j] * w[j] - mg - xhat * mgx);
        }
    }
}

/* dweight and dbias of layer_norm_grad, a range of columns over every row:
 * a block of columns at a time, the rows added in order into double
 * accumulators (each column's sum in row order, read a row at a time). */
static void ln_grad_cols(const sl_op_call *c, uint64_t j0, uint64_t j1)
{
    enum { BLOCK = 128 };
    uint64_t d = tail_elems(&c->in[1].shape, (unsigned) c->attrs.i[0]);
    uint64_t rows = sl_shape_elems(&c->in[1].shape) / d;
    const float *dy = fin(c, 0), *x = fin(c, 1), *mean = fin(c, 3), *rstd = fin(c, 4);
    for (uint64_t b0 = j0; b0 < j1; b0 += BLOCK) {
        uint64_t w = j1 - b0 < BLOCK ? j1 - b0 : BLOCK;
        double sw[BLOCK] = {0}, sb[BLOCK] = {0};
        for (uint64_t r = 0; r < rows; r++) {
            const float *dyr = dy + r * d + b0, *xr = x + r * d + b0;
            float m = mean[r], rs = rstd[r];
            for (uint64_t j = 0; j < w; j++) {
                float xhat = (xr[j] - m) * rs;
                sw[j] += (double) dyr[j] * xhat;
                sb[j] += dyr[j];
            }
        }
        for (uint64_t j = 0; j < w; j++) {
            fout(c, 1)[b0 + j] = (float) sw[j];
            fout(c, 2)[b0 + j] = (float) sb[j];
        }
    }
}

/* ---- softmax_axis: lanes along the axis, `inner` apart ---- */

struct lanes {
    uint64_t len, inner;
};

static struct lanes lanes_of(const sl_shape *s, unsigned axis)
{
    struct lanes l = {(uint64_t) s->dims[axis], tail_elems(s, axis + 1)};
    return l;
}

/* A lane along the last axis (contiguous): the vector exp (vmath.c) into
 * y, the sum in double, then y scaled, or overwritten with x - lse. */
static void softmax_row(const float *x, float *y, uint64_t len, bool logsm)
{
    float mx = x[0];
    for (uint64_t j = 1; j < len; j++)
        mx = x[j] > mx || isnan(x[j]) ? x[j] : mx;
    sl_cpu_vexp_shifted(x, y, len, mx);
    double s = 0;
    for (uint64_t j = 0; j < len; j++)
        s += y[j];
    if (logsm) {
        double lse = mx + log(s);
        for (uint64_t j = 0; j < len; j++)
            y[j] = (float) ((double) x[j] - lse);
    } else {
        float inv = (float) (1.0 / s);
        for (uint64_t j = 0; j < len; j++)
            y[j] *= inv;
    }
}

static void softmax_lanes(const sl_op_call *c, uint64_t l0, uint64_t l1)
{
    struct lanes l = lanes_of(&c->in[0].shape, (unsigned) c->attrs.i[0]);
    bool logsm = c->attrs.i[1] != 0;
    if (l.inner == 1) {
        for (uint64_t k = l0; k < l1; k++)
            softmax_row(fin(c, 0) + k * l.len, fout(c, 0) + k * l.len, l.len, logsm);
        return;
    }
    for (uint64_t k = l0; k < l1; k++) {
        uint64_t base = k / l.inner * l.len * l.inner + k % l.inner;
        const float *x = fin(c, 0) + base;
        float *y = fout(c, 0) + base;
        float mx = x[0];
        for (uint64_t j = 1; j < l.len; j++)
            mx = x[j * l.inner] > mx || isnan(x[j * l.inner]) ? x[j * l.inner] : mx;
        double s = 0;
        for (uint64_t j = 0; j < l.len; j++)
            s += exp((double) x[j * l.inner] - mx);
        if (logsm) {
            double lse = mx + log(s);
            for (uint64_t j = 0; j < l.len; j++)
                y[j * l.inner] = (float) ((double) x[j * l.inner] - lse);
        } else {
            for (uint64_t j = 0; j < l.len; j++)
                y[j * l.inner] = (float) (exp((double) x[j * l.inner] - mx) / s);
        }
    }
}

static void softmax_grad_lanes(const sl_op_call *c, uint64_t l0, uint64_t l1)
{
    struct lanes l = lanes_of(&c->in[1].shape, (unsigned) c->attrs.i[0]);
    bool logsm = c->attrs.i[1] != 0;
    for (uint64_t k = l0; k < l1; k++) {
        uint64_t base = k / l.inner * l.len * l.inner + k % l.inner;
        const float *dy = fin(c, 0) + base, *y = fin(c, 1) + base;
        float *dx = fout(c, 0) + base;
        double s = 0;
        for (uint64_t j = 0; j < l.len; j++)
            s += logsm ? (double) dy[j * l.inner] : (double) dy[j * l.inner] * y[j * l.inner];
        float sf = (float) s;
        for (uint64_t j = 0; j < l.len; j++) {
            uint64_t o = j * l.inner;
            dx[o] = logsm ? dy[o] - expf(y[o]) * sf : y[o] * (dy[o] - sf);
        }
    }
}

/* ---- element-wise ---- */

/* GELU's derivative, Phi(x) + x phi(x), on the vector erf and exp
 * (vmath.c) a block at a time: a transformer's MLP gradient is this op over
 * every hidden unit, and libm's erff and expf per element were a tenth of a
 * GPT training step. */
static void gelu_grad_range(const float *dy, const float *x, float *dx, uint64_t i0, uint64_t i1)
{
    enum { BLOCK = 256 };
    float cdf[BLOCK], pdf[BLOCK];
    for (uint64_t i = i0; i < i1; i += BLOCK) {
        uint64_t n = i1 - i < BLOCK ? i1 - i : BLOCK;
        for (uint64_t j = 0; j < n; j++) {
            cdf[j] = x[i + j] * 0.70710678118654752f;
            pdf[j] = -0.5f * x[i + j] * x[i + j];
        }
        sl_cpu_verf(cdf, cdf, n);
        sl_cpu_vexp_shifted(pdf, pdf, n, 0.0f);
        for (uint64_t j = 0; j < n; j++)
            dx[i + j] =
                dy[i + j] * (0.5f * (1.0f + cdf[j]) + x[i + j] * 0.39894228040143268f * pdf[j]);
    }
}

static void unary_grad_range(const sl_op_call *c, uint64_t i0, uint64_t i1)
{
    int kind = (int) c->attrs.i[0];
    float p = c->attrs.f[0], q = c->attrs.f[1];
    const float *dy = fin(c, 0), *x = fin(c, 1);
    float *dx = fout(c, 0);
    if (kind == SL_EW_GELU) {
        gelu_grad_range(dy, x, dx, i0, i1);
        return;
    }
    for (uint64_t i = i0; i < i1; i++)
        dx[i] = dy[i] * sl_ew_unary_deriv(kind, x[i], p, q);
}

static void dropout_range(const sl_op_call *c, uint64_t i0, uint64_t i1)
{
    const int32_t *seed = c->in[1].data;
    uint32_t s0 = (uint32_t) seed[0], s1 = (uint32_t) seed[1], off = (uint32_t) c->attrs.i[0];
    float p = c->attrs.f[0], scale = 1.0f / (1.0f - p);
    uint64_t thr = sl_dropout_threshold(p);
    const float *x = fin(c, 0);
    float *y = fout(c, 0);
    int32_t *mask = c->out[1].data;
    uint32_t words[4];
    for (uint64_t i = i0; i < i1; i++) {
        if (i == i0 || (i & 3) == 0)
            sl_dropout_block(i >> 2, s0, s1, off, words);
        int keep = words[i & 3] >= thr;
        mask[i] = keep;
        y[i] = keep ? x[i] * scale : 0.0f;
    }
}

static void dropout_grad_range(const sl_op_call *c, uint64_t i0, uint64_t i1)
{
    const float *dy = fin(c, 0);
    const int32_t *mask = c->in[1].data;
    float scale = c->attrs.f[0], *dx = fout(c, 0);
    for (uint64_t i = i0; i < i1; i++)
        dx[i] = mask[i] ? dy[i] * scale : 0.0f;
}

/* ---- embedding_grad: a range of the table's columns, every id ---- */

static void embedding_grad_cols(const sl_op_call *c, uint64_t j0, uint64_t j1)
{
    uint64_t d = tail_elems(&c->out[0].shape, 1), n = sl_shape_elems(&c->in[1].shape);
    int64_t v = c->out[0].shape.dims[0], pad = c->attrs.i[1];
    const int32_t *ids = c->in[1].data;
    const float *dy = fin(c, 0);
    float *dw = fout(c, 0);
    for (uint64_t k = 0; k < (uint64_t) v; k++)
        memset(dw + k * d + j0, 0, (j1 - j0) * sizeof *dw);
    for (uint64_t i = 0; i < n; i++) {
        int64_t k = ids[i] < 0 ? ids[i] + v : ids[i];
        if (k == pad)
            continue;
        float *row = dw + (uint64_t) k * d;
        const float *g = dy + i * d;
        for (uint64_t j = j0; j < j1; j++)
            row[j] += g[j];
    }
}

int sl_cpu_train_op(sl_cpu_exec *x, const sl_op_call *c)
{
    uint64_t n = sl_shape_elems(&c->in[0].shape);
    switch (c->op) {
    case SL_OP_LAYER_NORM: {
        uint64_t d = tail_elems(&c->in[0].shape, (unsigned) c->attrs.i[0]);
        run_units(x, c, n / d, n, ln_rows);
        return SL_OK;
    }
    case SL_OP_LAYER_NORM_GRAD: {
        uint64_t d = tail_elems(&c->in[1].shape, (unsigned) c->attrs.i[0]);
        run_units(x, c, n / d, n, ln_grad_rows);
        run_units(x, c, d, n, ln_grad_cols);
        return SL_OK;
    }
    case SL_OP_EW_UNARY_GRAD:
        run_units(x, c, n, n, unary_grad_range);
        return SL_OK;
    case SL_OP_SOFTMAX_AXIS:
    case SL_OP_SOFTMAX_AXIS_GRAD: {
        const sl_shape *s = &c->in[c->op == SL_OP_SOFTMAX_AXIS ? 0 : 1].shape;
        uint64_t lanes = n / (uint64_t) s->dims[c->attrs.i[0]];
        run_units(x, c, lanes, n, c->op == SL_OP_SOFTMAX_AXIS ? softmax_lanes : softmax_grad_lanes);
        return SL_OK;
    }
    case SL_OP_EMBEDDING_GRAD: {
        int64_t v = c->out[0].shape.dims[0];
        const int32_t *ids = c->in[1].data;
        uint64_t n_ids = sl_shape_elems(&c->in[1].shape);
        for (uint64_t i = 0; i < n_ids; i++)
            if (ids[i] < -v || ids[i] >= v) {
                (void) snprintf(x->failure, sizeof x->failure,
                                "embedding_grad: id %d at %llu is outside [-%lld, %lld)",
                                (int) ids[i], (unsigned long long) i, (long long) v, (long long) v);
                return SL_EINVAL;
            }
        run_units(x, c, tail_elems(&c->out[0].shape, 1), sl_shape_elems(&c->out[0].shape) + n,
                  embedding_grad_cols);
        return SL_OK;
    }
    case SL_OP_DROPOUT:
        run_units(x, c, n, n, dropout_range);
        return SL_OK;
    case SL_OP_DROPOUT_GRAD:
        run_units(x, c, n, n, dropout_grad_range);
        return SL_OK;
    default:
        return SL_EUNSUPPORTED;
    }
}

bool sl_cpu_is_train_op(unsigned op)
{
    return op >= SL_OP_LAYER_NORM && op <= SL_OP_DROPOUT_GRAD && op != SL_OP_WHERE &&
           op != SL_OP_MASKED_FILL;
}
