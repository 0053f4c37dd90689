/* cpu kernels of the row-wise and whole-tensor ops: softmax, softmax
 * cross-entropy and its gradient, reductions, argmax. Sums accumulate in
 * double (sum.h). */
#include "cpu.h"
#include "sum.h"

#include "sl_error.h"

#include <math.h>
#include <stdint.h>

static inline float *f32(const sl_tensor_ref *t)
{
    return t->data;
}

static float row_max(const float *x, uint64_t n)
{
    float m = x[0];
    for (uint64_t j = 1; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

/* p = exp(x - max(x)); returns the sum of p in double and the max in *max. */
static double exp_row(const float *x, float *p, uint64_t n, float *max)
{
    float m = row_max(x, n);
    for (uint64_t j = 0; j < n; j++)
        p[j] = expf(x[j] - m);
    *max = m;
    return sl_cpu_sum(p, n);
}

static void scale_row(float *p, uint64_t n, double sum)
{
    float inv = (float) (1.0 / sum);
    for (uint64_t j = 0; j < n; j++)
        p[j] *= inv;
}

/* Rows [r0, r1) of softmax: e^(x - max) on vmath.c's vector exp (a
 * scalar expf per element was most of the op), summed in double. */
static void softmax_rows(const sl_op_call *c, uint64_t r0, uint64_t r1)
{
    const float *x = f32(&c->in[0]);
    float *y = f32(&c->out[0]);
    uint64_t cols = (uint64_t) c->in[0].shape.dims[1];
    for (uint64_t r = r0; r < r1; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        sl_cpu_vexp_shifted(xr, yr, cols, row_max(xr, cols));
        scale_row(yr, cols, sl_cpu_sum(yr, cols));
    }
}

struct softmax_job {
    const sl_op_call *c;
    uint64_t rows;
};

static void softmax_part(void *arg, int part, int parts)
{
    const struct softmax_job *j = arg;
    softmax_rows(j->c, j->rows * (uint64_t) part / (uint64_t) parts,
                 j->rows * (uint64_t) (part + 1) / (uint64_t) parts);
}

int sl_cpu_softmax(const sl_op_call *c, int threads)
{
    uint64_t rows = (uint64_t) c->in[0].shape.dims[0], cols = (uint64_t) c->in[0].shape.dims[1];
    if (threads > 1 && rows > 1 && rows * cols >= SL_CPU_TEAM_MIN_ELEMS / 4) {
        struct softmax_job j = {c, rows};
        sl_cpu_parallel(rows < (uint64_t) threads ? (int) rows : threads, softmax_part, &j);
    } else {
        softmax_rows(c, 0, rows);
    }
    return SL_OK;
}

/* Every label in [0, cols); a bad one fails the op before anything is
 * written, and is never used as an index. */
static int check_labels(const int32_t *labels, uint64_t rows, uint64_t cols)
{
    for (uint64_t r = 0; r < rows; r++)
        if (labels[r] < 0 || (uint64_t) labels[r] >= cols)
            return SL_EINVAL;
    return SL_OK;
}

int sl_cpu_softmax_xent(const sl_op_call *c)
{
    const float *x = f32(&c->in[0]);
    const int32_t *labels = c->in[1].data;
    float *probs = f32(&c->out[1]);
    uint64_t rows = (uint64_t) c->in[0].shape.dims[0], cols = (uint64_t) c->in[0].shape.dims[1];
    int rc = check_labels(labels, rows, cols);
    if (rc)
        return rc;
    double loss = 0;
    for (uint64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *pr = probs + r * cols, m;
        double sum = exp_row(xr, pr, cols, &m);
        /* -log softmax[label] = log(sum) + max - x[label], without rounding
         * a tiny probability to 0 first. */
        loss += log(sum) + (double) m - (double) xr[labels[r]];
        scale_row(pr, cols, sum);
    }
    *f32(&c->out[0]) = (float) (loss / (double) rows);
    return SL_OK;
}

int sl_cpu_softmax_xent_grad(const sl_op_call *c)
{
    const float *probs = f32(&c->in[0]);
    const int32_t *labels = c->in[1].data;
    float *g = f32(&c->out[0]);
    uint64_t rows = (uint64_t) c->in[0].shape.dims[0], cols = (uint64_t) c->in[0].shape.dims[1];
    int rc = check_labels(labels, rows, cols);
    if (rc)
        return rc;
    float inv_n = (float) (1.0 / (double) rows);
    for (uint64_t r = 0; r < rows; r++) {
        const float *pr = probs + r * cols;
        float *gr = g + r * cols;
        for (uint64_t j = 0; j < cols; j++)
            gr[j] = pr[j] * inv_n;
        gr[labels[r]] = (pr[labels[r]] - 1.0f) * inv_n;
    }
    return SL_OK;
}

int sl_cpu_reduce_sum(const sl_op_call *c)
{
    *f32(&c->out[0]) = (float) sl_cpu_sum(f32(&c->in[0]), sl_shape_elems(&c->in[0].shape));
    return SL_OK;
}

int sl_cpu_reduce_mean(const sl_op_call *c)
{
    uint64_t n = sl_shape_elems(&c->in[0].shape);
    *f32(&c->out[0]) = (float) (sl_cpu_sum(f32(&c->in[0]), n) / (double) n);
    return SL_OK;
}

/* First index of each row's max; a NaN counts as the max (as in NumPy), so
 * a diverged model's predictions stay visibly wrong rather than silently
 * picking some finite entry. */
int sl_cpu_argmax(const sl_op_call *c)
{
    const float *x = f32(&c->in[0]);
    int32_t *out = c->out[0].data;
    uint64_t rows = (uint64_t) c->in[0].shape.dims[0], cols = (uint64_t) c->in[0].shape.dims[1];
    for (uint64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        uint64_t best = 0;
        for (uint64_t j = 0; j < cols && !isnan(xr[best]); j++)
            if (xr[j] > xr[best] || isnan(xr[j]))
                best = j;
        out[r] = (int32_t) best;
    }
    return SL_OK;
}
