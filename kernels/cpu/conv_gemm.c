/* conv2d_grad_filter as im2col + GEMM, for inputs with few channels.
 *
 * oneDNN's fast convolutions on AVX2 work on channels in blocks of 8 (16 on
 * AVX-512) and pad a short channel dimension up to a block: a first layer
 * over grayscale images (one channel) then computes its weight gradient on
 * 8x the data, after reordering the input into that padded layout. Its
 * GEMM-based alternative is no faster on one thread and degrades badly on
 * two. Here each sample's patches are unrolled into a [C*R*S, P] matrix
 * (P = output pixels, the layout dy already has per sample) and
 * dw[K, C*R*S] accumulates dy_n[K, P] * cols_n^T (gemm.c): no
 * padding, no reorder of x or dy, and the multiplication runs at GEMM speed.
 * The unrolled matrix is R*S times one sample of x, a few tens of KiB for
 * such inputs. */
#include "dnnl_cache.h"
#include "ops_geom.h"

#include "sl_alloc.h"
#include "sl_error.h"

#include <string.h>

/* Input channels below oneDNN's smallest channel block (AVX2's 8): where its
 * blocked kernels waste most of their work on padding. */
#define GEMM_MAX_CHANNELS 7
/* Largest unrolled sample: beyond it (huge kernels or planes) oneDNN's path,
 * which needs no such buffer, is the safer choice; it also keeps every
 * GEMM dimension within cblas's int, and one sample per thread within a
 * lane's default workspace (32 MiB on cpu). */
#define GEMM_MAX_COLS_BYTES (4ll << 20)

bool sl_cpu_conv_grad_filter_by_gemm(const sl_op_call *c)
{
    const int64_t *dyd = c->in[0].shape.dims, *xd = c->in[1].shape.dims;
    const int64_t *wd = c->in[2].shape.dims;
    sl_window2d g = sl_conv_window(&c->attrs, &c->in[2].shape);
    int64_t taps = xd[1] * wd[2] * wd[3], p = dyd[2] * dyd[3]; /* each at most SL_MAX_ELEMS */
    return g.group == 1 && xd[1] <= GEMM_MAX_CHANNELS &&
           p <= GEMM_MAX_COLS_BYTES / (int64_t) sizeof(float) / taps;
}

/* Unrolls sample x[C, H, W] into cols[C*R*S, OH*OW]: row (c, r, s) holds,
 * for every output pixel, the input element its window puts under kernel
 * tap (r, s), or 0 in the padding. */
static void im2col(const float *x, float *cols, int64_t ch, int64_t h, int64_t w, int64_t oh,
                   int64_t ow, const sl_window2d *g)
{
    for (int64_t c = 0; c < ch; c++)
        for (int64_t r = 0; r < g->kernel[0]; r++)
            for (int64_t s = 0; s < g->kernel[1]; s++) {
                const float *xc = x + c * h * w;
                for (int64_t i = 0; i < oh; i++, cols += ow) {
                    int64_t ih = i * g->stride[0] - g->pad_begin[0] + r * g->dilation[0];
                    if (ih < 0 || ih >= h) {
                        memset(cols, 0, (size_t) ow * sizeof *cols);
                        continue;
                    }
                    const float *row = xc + ih * w;
                    int64_t off = s * g->dilation[1] - g->pad_begin[1];
                    for (int64_t j = 0; j < ow; j++) {
                        int64_t iw = j * g->stride[1] + off;
                        cols[j] = iw >= 0 && iw < w ? row[iw] : 0.0f;
                    }
                }
            }
}

/* Samples [b0, b1) into acc[K, C*R*S] (zeroed first), unrolling each into
 * cols. */
static void grad_filter_samples(const sl_op_call *c, const sl_window2d *g, int64_t b0, int64_t b1,
                                float *cols, float *acc)
{
    const float *dy = c->in[0].data, *xs = c->in[1].data;
    const int64_t *dyd = c->in[0].shape.dims, *xd = c->in[1].shape.dims;
    int64_t ch = xd[1], h = xd[2], w = xd[3];
    int64_t k = dyd[1], oh = dyd[2], ow = dyd[3], p = oh * ow;
    int64_t taps = ch * g->kernel[0] * g->kernel[1];
    memset(acc, 0, (size_t) (k * taps) * sizeof *acc);
    for (int64_t b = b0; b < b1; b++) {
        im2col(xs + b * ch * h * w, cols, ch, h, w, oh, ow, g);
        sl_cpu_sgemm(false, true, (int) k, (int) taps, (int) p, 1.0f, dy + b * k * p, (int) p, cols,
                     (int) p, 1.0f, acc, (int) taps);
    }
}

/* One thread's share (sl_cpu_parallel): a band of samples. */
struct band {
    const sl_op_call *c;
    const sl_window2d *g;
    int64_t n;
    float *dw;
    char *scratch, *parts;
    size_t cols_bytes, part_bytes;
};

static void grad_filter_band(void *arg, int t, int threads)
{
    const struct band *b = arg;
    grad_filter_samples(b->c, b->g, b->n * t / threads, b->n * (t + 1) / threads,
                        (float *) (b->scratch + (size_t) t * b->cols_bytes),
                        t ? (float *) (b->parts + (size_t) (t - 1) * b->part_bytes) : b->dw);
}

/* With more than one thread each takes a band of samples into a partial
 * sum of its own (the first straight into dw), and the partials are added
 * at the end; each GEMM stays on one thread (cpu.h). */
int sl_cpu_conv_grad_filter_gemm(sl_cpu_exec *x, const sl_op_call *c)
{
    float *dw = c->out[0].data;
    const int64_t *dyd = c->in[0].shape.dims;
    sl_window2d g = sl_conv_window(&c->attrs, &c->in[2].shape);
    int64_t n = dyd[0], k = dyd[1], p = dyd[2] * dyd[3];
    int64_t taps = c->in[1].shape.dims[1] * g.kernel[0] * g.kernel[1];
    uint64_t flops = 2ull * (uint64_t) (n * k) * (uint64_t) (taps * p);
    int threads = x->threads > 1 && flops >= SL_CPU_PARALLEL_MIN_FLOPS ? x->threads : 1;
    if (threads > n)
        threads = (int) n;
    size_t cols_bytes = sl_align_up((size_t) (taps * p) * sizeof(float), 64);
    size_t part_bytes = sl_align_up((size_t) (k * taps) * sizeof(float), 64);
    size_t need = (size_t) threads * cols_bytes + (size_t) (threads - 1) * part_bytes;
    if (x->workspace && need > x->workspace_bytes) { /* a small workspace: one thread fits best */
        threads = 1;
        need = cols_bytes;
    }
    char *scratch;
    int rc = sl_cpu_scratch(x, need, (void **) &scratch);
    if (rc != SL_OK)
        return rc;
    char *parts = scratch + (size_t) threads * cols_bytes;
    struct band b = {c, &g, n, dw, scratch, parts, cols_bytes, part_bytes};
    sl_cpu_parallel(threads, grad_filter_band, &b);
    for (int t = 1; t < threads; t++) {
        const float *part = (const float *) (parts + (size_t) (t - 1) * part_bytes);
        for (int64_t i = 0; i < k * taps; i++)
            dw[i] += part[i];
    }
    return SL_OK;
}
