/* cpu kernels of the per-channel ops on [N,C] and [N,C,H,W] tensors:
 * channel bias and batch normalisation. Element (n, c, s) of a tensor with
 * `spatial` = H*W values per channel (1 for [N,C]) lives at (n*C + c)*spatial
 * + s. The loops walk channels in blocks so that per-channel accumulators
 * stay in registers or L1 while the batch streams by in memory order (for
 * [N,C] a row at a time), and never allocate. Statistics accumulate in
 * double, in two passes: the mean, then the squared deviations from it
 * (never E[x^2] - E[x]^2, which cancels when the mean is far above the
 * deviation). Normalisation subtracts the mean before scaling, never
 * folding it into the bias: x * a + (bias - mean * a) loses the digits of
 * x - mean to the rounding of two large terms when |mean| >> std. */
#include "cpu.h"
#include "sum.h"

#include "sl_error.h"

#include <math.h>
#include <stdint.h>

#define CH_BLOCK 64

static inline float *f32(const sl_tensor_ref *t)
{
    return t->data;
}

struct layout {
    uint64_t n, c, spatial;
};

static struct layout layout_of(const sl_shape *x)
{
    struct layout l = {(uint64_t) x->dims[0], (uint64_t) x->dims[1], 1};
    for (unsigned d = 2; d < x->ndim; d++)
        l.spatial *= (uint64_t) x->dims[d];
    return l;
}

static inline uint64_t at(const struct layout *l, uint64_t n, uint64_t c)
{
    return (n * l->c + c) * l->spatial;
}

/* The block of channels from c0, at most CH_BLOCK and none from c_end. */
static inline uint64_t block_width(uint64_t c0, uint64_t c_end)
{
    return c_end - c0 < CH_BLOCK ? c_end - c0 : CH_BLOCK;
}

/* y = ((x - m_hi[c]) - m_lo[c]) * a[c] + b[c] for the channels [c0, c0 +
 * w): m_hi + m_lo is the mean to about twice float precision, and x - m_hi
 * is exact for x within a factor 2 of m_hi (Sterbenz), so the centred
 * value keeps its digits however far the mean is from 0. */
static void center_affine_block(const struct layout *l, const float *x, float *y, uint64_t c0,
                                uint64_t w, const float *m_hi, const float *m_lo, const float *a,
                                const float *b)
{
    for (uint64_t n = 0; n < l->n; n++)
        for (uint64_t j = 0; j < w; j++) {
            const float *xp = x + at(l, n, c0 + j);
            float *yp = y + at(l, n, c0 + j);
            float hi = m_hi[j], lo = m_lo[j], aj = a[j], bj = b[j];
            for (uint64_t s = 0; s < l->spatial; s++)
                yp[s] = ((xp[s] - hi) - lo) * aj + bj;
        }
}

/* A double mean split into float parts for center_affine_block. */
static void split_mean(double mean, float *hi, float *lo)
{
    *hi = (float) mean;
    *lo = (float) (mean - (double) *hi);
}

int sl_cpu_channel_bias_add(const sl_op_call *c)
{
    struct layout l = layout_of(&c->in[0].shape);
    const float *x = f32(&c->in[0]), *bias = f32(&c->in[1]);
    float *y = f32(&c->out[0]);
    for (uint64_t n = 0; n < l.n; n++)
        for (uint64_t ch = 0; ch < l.c; ch++) {
            uint64_t o = at(&l, n, ch);
            float b = bias[ch];
            for (uint64_t s = 0; s < l.spatial; s++)
                y[o + s] = x[o + s] + b;
        }
    return SL_OK;
}

/* sum[j] over batch and space for channel c0 + j. */
static void channel_sums(const struct layout *l, const float *x, uint64_t c0, uint64_t w,
                         double *sum)
{
    for (uint64_t j = 0; j < w; j++)
        sum[j] = 0;
    for (uint64_t n = 0; n < l->n; n++)
        for (uint64_t j = 0; j < w; j++)
            sum[j] += sl_cpu_sum(x + at(l, n, c0 + j), l->spatial);
}

/* ssd[j]: the sum of (x - mean[j])^2 over batch and space for channel
 * c0 + j (the second pass). */
static void channel_sqdev(const struct layout *l, const float *x, uint64_t c0, uint64_t w,
                          const double *mean, double *ssd)
{
    for (uint64_t j = 0; j < w; j++)
        ssd[j] = 0;
    for (uint64_t n = 0; n < l->n; n++)
        for (uint64_t j = 0; j < w; j++)
            ssd[j] += sl_cpu_sum_sqdev(x + at(l, n, c0 + j), l->spatial, mean[j]);
}

int sl_cpu_channel_bias_grad(const sl_op_call *c)
{
    struct layout l = layout_of(&c->in[0].shape);
    float *db = f32(&c->out[0]);
    for (uint64_t c0 = 0; c0 < l.c; c0 += CH_BLOCK) {
        uint64_t w = block_width(c0, l.c);
        double sum[CH_BLOCK];
        channel_sums(&l, f32(&c->in[0]), c0, w, sum);
        for (uint64_t j = 0; j < w; j++)
            db[c0 + j] = (float) sum[j];
    }
    return SL_OK;
}

/* Training: normalise with the batch statistics, update the running ones
 * (ONNX / PyTorch momentum convention, unbiased running variance), save the
 * mean and inverse std for the backward pass. */
static void train_channels(const sl_op_call *c, uint64_t c_begin, uint64_t c_end)
{
    struct layout l = layout_of(&c->in[0].shape);
    const float *x = f32(&c->in[0]), *scale = f32(&c->in[1]), *bias = f32(&c->in[2]);
    float *run_mean = f32(&c->in[3]), *run_var = f32(&c->in[4]);
    float *y = f32(&c->out[0]), *saved_mean = f32(&c->out[1]), *saved_istd = f32(&c->out[2]);
    double eps = c->attrs.f[0], momentum = c->attrs.f[1];
    double count = (double) (l.n * l.spatial); /* >= 2: the registry checked */
    for (uint64_t c0 = c_begin; c0 < c_end; c0 += CH_BLOCK) {
        uint64_t w = block_width(c0, c_end);
        double sum[CH_BLOCK], mean[CH_BLOCK], ssd[CH_BLOCK];
        float a[CH_BLOCK], b[CH_BLOCK], m_hi[CH_BLOCK], m_lo[CH_BLOCK];
        channel_sums(&l, x, c0, w, sum);
        for (uint64_t j = 0; j < w; j++)
            mean[j] = sum[j] / count;
        channel_sqdev(&l, x, c0, w, mean, ssd);
        for (uint64_t j = 0; j < w; j++) {
            uint64_t ch = c0 + j;
            double var = ssd[j] / count;
            double istd = 1.0 / sqrt(var + eps);
            a[j] = (float) (scale[ch] * istd);
            b[j] = bias[ch];
            split_mean(mean[j], &m_hi[j], &m_lo[j]);
            saved_mean[ch] = (float) mean[j];
            saved_istd[ch] = (float) istd;
            run_mean[ch] = (float) (run_mean[ch] * momentum + mean[j] * (1 - momentum));
            run_var[ch] =
                (float) (run_var[ch] * momentum + var * count / (count - 1) * (1 - momentum));
        }
        center_affine_block(&l, x, y, c0, w, m_hi, m_lo, a, b);
    }
}

static void infer_channels(const sl_op_call *c, uint64_t c_begin, uint64_t c_end)
{
    struct layout l = layout_of(&c->in[0].shape);
    const float *scale = f32(&c->in[1]), *bias = f32(&c->in[2]);
    const float *mean = f32(&c->in[3]), *var = f32(&c->in[4]);
    double eps = c->attrs.f[0];
    for (uint64_t c0 = c_begin; c0 < c_end; c0 += CH_BLOCK) {
        uint64_t w = block_width(c0, c_end);
        float a[CH_BLOCK], b[CH_BLOCK], m_hi[CH_BLOCK], m_lo[CH_BLOCK];
        for (uint64_t j = 0; j < w; j++) {
            uint64_t ch = c0 + j;
            a[j] = (float) (scale[ch] / sqrt((double) var[ch] + eps));
            b[j] = bias[ch];
            m_hi[j] = mean[ch]; /* already a float: exact */
            m_lo[j] = 0;
        }
        center_affine_block(&l, f32(&c->in[0]), f32(&c->out[0]), c0, w, m_hi, m_lo, a, b);
    }
}

/* With xhat = (x - mean) * istd and M values per channel:
 * dbias = sum dy, dscale = sum dy * xhat,
 * dx = scale * istd * (dy - dbias / M - xhat * dscale / M). */
static void grad_channels(const sl_op_call *c, uint64_t c_begin, uint64_t c_end)
{
    struct layout l = layout_of(&c->in[1].shape);
    const float *dy = f32(&c->in[0]), *x = f32(&c->in[1]), *scale = f32(&c->in[2]);
    const float *mean = f32(&c->in[3]), *istd = f32(&c->in[4]);
    float *dx = f32(&c->out[0]), *dscale = f32(&c->out[1]), *dbias = f32(&c->out[2]);
    double count = (double) (l.n * l.spatial);
    for (uint64_t c0 = c_begin; c0 < c_end; c0 += CH_BLOCK) {
        uint64_t w = block_width(c0, c_end);
        double s_dy[CH_BLOCK] = {0}, s_dyx[CH_BLOCK] = {0};
        for (uint64_t n = 0; n < l.n; n++)
            for (uint64_t j = 0; j < w; j++) {
                uint64_t o = at(&l, n, c0 + j);
                sl_cpu_sum_dot(dy + o, x + o, mean[c0 + j], l.spatial, &s_dy[j], &s_dyx[j]);
            }
        /* dx = k_dy * dy - k_x * (x - mean) - k_0 per channel. */
        float k_dy[CH_BLOCK], k_x[CH_BLOCK], k_0[CH_BLOCK];
        for (uint64_t j = 0; j < w; j++) {
            uint64_t ch = c0 + j;
            double is = istd[ch], ds = s_dyx[j] * is;
            dbias[ch] = (float) s_dy[j];
            dscale[ch] = (float) ds;
            double k = scale[ch] * is;
            k_dy[j] = (float) k;
            k_x[j] = (float) (k * ds * is / count);
            k_0[j] = (float) (k * s_dy[j] / count);
        }
        for (uint64_t n = 0; n < l.n; n++)
            for (uint64_t j = 0; j < w; j++) {
                uint64_t o = at(&l, n, c0 + j);
                float m = mean[c0 + j], a = k_dy[j], b = k_x[j], z = k_0[j];
                for (uint64_t s = 0; s < l.spatial; s++)
                    dx[o + s] = a * dy[o + s] - b * (x[o + s] - m) - z;
            }
    }
}

/* Channels are independent: a team splits them, each channel computed as
 * on one thread. */
int sl_cpu_batchnorm_op(const sl_op_call *c, int threads)
{
    bool grad = c->op == SL_OP_BATCHNORM_GRAD;
    const sl_shape *x = &c->in[grad ? 1 : 0].shape;
    sl_cpu_units_fn fn = grad                       ? grad_channels
                         : c->op == SL_OP_BATCHNORM ? train_channels
                                                    : infer_channels;
    sl_cpu_run_units(c, fn, (uint64_t) x->dims[1], sl_shape_elems(x), SL_CPU_TEAM_MIN_ELEMS,
                     threads);
    return SL_OK;
}
