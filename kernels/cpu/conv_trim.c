/* Convolutions whose kernel overhangs the input on every output position.
 *
 * A 3x3 convolution with padding 1 over a 1x1 plane only ever multiplies
 * its centre tap by data: the other eight meet padding at every output.
 * That is the last stage of a ResNet on 32x32 images (1x1 planes, 512
 * channels, 72 % of the model's weights). oneDNN computes such a
 * convolution as it is: it reorders all nine taps into its blocked layout
 * for the forward and the backward data passes, reorders a nine-tap weight
 * gradient back, and walks the padding. The same convolution with the
 * kernel cut down to the taps that meet the input (and the padding cut by
 * as much, so that every output sees the same input rows and columns) is
 * the same sum without the zero terms, on a ninth of the weights.
 *
 * So conv2d and its gradients run on the trimmed kernel: conv.c views the
 * used taps of w (or of dw) in place, as a sub-tensor of the full kernel,
 * and oneDNN's reorder into its blocked layout reads only those (and,
 * for versioned weights, keeps that smaller copy). The weight gradient's
 * other taps are zero: no output depends on them.
 *
 * When the trimmed kernel covers the input exactly and the output is one
 * pixel (that ResNet stage again: a 3x3 kernel on a 1x1 plane, or a 3x3
 * stride-2 kernel on a 2x2 plane), the convolution is a matrix product
 * over the batch, y[n, o] = sum_k x[n, k] w'[o, k] with k running over
 * input channels and pixels, and it runs as one: the cpu matmul (split
 * across the team) on the plain tensors, with no layout change at all.
 * The trimmed kernel w' is then copied out; for versioned weights the copy
 * is kept per stream while the version holds, so a model served for
 * inference copies once (a training step writes its weights, so each of
 * its passes copies). */
#include "dnnl_cache.h"
#include "ops_geom.h"

#include "sl_alloc.h"
#include "sl_error.h"

#include <string.h>

/* Trimmed kernels kept per stream: the matmul-shaped convolutions of a
 * model (ResNet-18's last stage keeps 2.9 MB). Beyond either bound a
 * kernel is copied at every call instead, into the region below. */
#define KEEP_ENTRIES 32
#define KEEP_BYTES (32ull << 20)
#define TRIM_ALIGN 64

/* The used taps of the kernel along both axes: [lo, hi] each. */
struct trim {
    int64_t lo[2], hi[2];
};

/* A trimmed kernel of the weights at src, as they were at version. */
struct kept {
    const void *src;
    uint64_t version, last_used;
    int64_t full[4];
    struct trim t;
    float *buf;
    size_t bytes;
};

struct sl_cpu_trims {
    unsigned n;
    uint64_t clock;
    size_t bytes;
    struct kept k[KEEP_ENTRIES];
};

void sl_cpu_trims_free(sl_cpu_trims *t)
{
    if (!t)
        return;
    for (unsigned i = 0; i < t->n; i++)
        sl_free(t->k[i].buf);
    sl_free(t);
}

/* The shapes of x, w and y of a conv2d call or of its gradients'. */
static void conv_shapes(const sl_op_call *c, const sl_shape **x, const sl_shape **w,
                        const sl_shape **y)
{
    switch (c->op) {
    case SL_OP_CONV2D: /* x, w -> y */
        *x = &c->in[0].shape, *w = &c->in[1].shape, *y = &c->out[0].shape;
        break;
    case SL_OP_CONV2D_GRAD_INPUT: /* dy, w, x -> dx */
        *y = &c->in[0].shape, *w = &c->in[1].shape, *x = &c->in[2].shape;
        break;
    default: /* conv2d_grad_filter: dy, x, w -> dw */
        *y = &c->in[0].shape, *x = &c->in[1].shape, *w = &c->in[2].shape;
        break;
    }
}

/* Whether call c's kernel has taps that meet only padding, and which taps
 * are used. False also when cutting them would need a negative padding
 * (a tap beyond the input on one side only for some outputs is still
 * used; the cut stays a plain padded convolution). */
static bool plan_trim(const sl_op_call *c, struct trim *t)
{
    const sl_shape *x, *w, *y;
    conv_shapes(c, &x, &w, &y);
    sl_window2d g = sl_conv_window(&c->attrs, w);
    bool cut = false;
    for (int a = 0; a < 2; a++) {
        int64_t in = x->dims[2 + a], out = y->dims[2 + a], k = g.kernel[a];
        int64_t s = g.stride[a], d = g.dilation[a], pb = g.pad_begin[a];
        t->lo[a] = k;
        t->hi[a] = -1;
        for (int64_t tap = 0; tap < k; tap++) {
            /* the first output whose row for this tap is not above the
             * input; rows grow with the output index */
            int64_t row0 = tap * d - pb;
            int64_t o = row0 >= 0 ? 0 : (-row0 + s - 1) / s;
            if (o < out && o * s + row0 < in) {
                if (t->lo[a] == k)
                    t->lo[a] = tap;
                t->hi[a] = tap;
            }
        }
        if (t->hi[a] < 0)
            return false; /* no tap meets the input: left to oneDNN */
        if (t->lo[a] * d > pb || (k - 1 - t->hi[a]) * d > g.pad_end[a])
            return false;
        cut |= t->lo[a] > 0 || t->hi[a] < k - 1;
    }
    return cut;
}

/* Copies planes [p0, p1) of the used taps between the full kernel (in[0])
 * and the trimmed one (out[0]), f32: attrs.i[0..1] the first used taps,
 * attrs.i[2] the direction (0: full to trimmed; else trimmed to full, every
 * other tap of the plane zeroed, so each plane is written once). */
static void move_planes(const sl_op_call *c, uint64_t p0, uint64_t p1)
{
    const sl_shape *full = &c->in[0].shape, *cut = &c->out[0].shape;
    int64_t kh = full->dims[2], kw = full->dims[3], th = cut->dims[2], tw = cut->dims[3];
    int64_t first = c->attrs.i[0] * kw + c->attrs.i[1];
    float *f = c->in[0].data, *t = c->out[0].data;
    for (uint64_t p = p0; p < p1; p++) {
        float *fp = f + p * (uint64_t) (kh * kw) + first, *tp = t + p * (uint64_t) (th * tw);
        if (c->attrs.i[2]) {
            float *plane = f + p * (uint64_t) (kh * kw);
            for (int64_t i = 0; i < kh * kw; i++)
                plane[i] = 0.0f;
            for (int64_t r = 0; r < th; r++)
                for (int64_t q = 0; q < tw; q++)
                    fp[r * kw + q] = tp[r * tw + q];
        } else {
            for (int64_t r = 0; r < th; r++)
                for (int64_t q = 0; q < tw; q++)
                    tp[r * tw + q] = fp[r * kw + q];
        }
    }
}

static void move_taps(sl_cpu_exec *x, const struct trim *t, const sl_shape *full, void *full_data,
                      const sl_shape *cut, void *cut_data, bool back)
{
    sl_op_call m;
    memset(&m, 0, sizeof m);
    m.in[0].shape = *full;
    m.in[0].data = full_data;
    m.out[0].shape = *cut;
    m.out[0].data = cut_data;
    m.attrs.i[0] = t->lo[0];
    m.attrs.i[1] = t->lo[1];
    m.attrs.i[2] = back;
    sl_cpu_run_units(&m, move_planes, (uint64_t) (full->dims[0] * full->dims[1]),
                     sl_shape_elems(full), SL_CPU_TEAM_MIN_ELEMS, x->threads);
}

/* Whether the trimmed convolution is a matrix product over the batch: f32,
 * one group, one output pixel, and a trimmed kernel that covers the input
 * exactly (no padding left, dense taps). */
static bool is_matmul(const sl_op_call *c, const struct trim *t)
{
    const sl_shape *x, *w, *y;
    conv_shapes(c, &x, &w, &y);
    if (x->dtype != SL_F32)
        return false;
    sl_window2d g = sl_conv_window(&c->attrs, w);
    if (g.group != 1 || y->dims[2] != 1 || y->dims[3] != 1)
        return false;
    for (int a = 0; a < 2; a++) {
        int64_t n = t->hi[a] - t->lo[a] + 1;
        if (n != x->dims[2 + a] || (n > 1 && g.dilation[a] != 1) ||
            g.pad_begin[a] != t->lo[a] * g.dilation[a])
            return false;
    }
    return true;
}

/* The region for a trimmed kernel that is not kept (sl_cpu_front_region). */
static int trim_region(sl_cpu_exec *x, const sl_op_call *c, size_t bytes, float **out)
{
    char *p;
    int rc =
        sl_cpu_front_region(x, c, "its trimmed kernel", bytes, &x->trim_buf, &x->trim_bytes, &p);
    *out = (float *) p;
    return rc;
}

/* The kept entry for w's trimmed kernel (a free or least recently used
 * one when none is w's yet), or NULL: not kept (no version, or too big). */
static struct kept *keep_slot(sl_cpu_exec *x, const void *src, const sl_shape *w,
                              const struct trim *t, size_t bytes)
{
    if (!x->trims && !(x->trims = sl_calloc(1, sizeof *x->trims)))
        return NULL;
    sl_cpu_trims *k = x->trims;
    struct kept *lru = NULL;
    for (unsigned i = 0; i < k->n; i++) {
        struct kept *e = &k->k[i];
        if (e->src == src && !memcmp(e->full, w->dims, sizeof e->full) &&
            !memcmp(&e->t, t, sizeof *t))
            return e;
        if (!lru || e->last_used < lru->last_used)
            lru = e;
    }
    /* a slot never used holds nothing (calloc) */
    struct kept *e = k->n < KEEP_ENTRIES ? &k->k[k->n] : lru;
    if (bytes > KEEP_BYTES - k->bytes + e->bytes)
        return NULL;
    float *buf = e->bytes >= bytes ? e->buf : sl_aligned_alloc(TRIM_ALIGN, bytes);
    if (!buf)
        return NULL;
    if (buf != e->buf) {
        k->bytes -= e->bytes;
        sl_free(e->buf);
        e->buf = buf;
        e->bytes = bytes;
        k->bytes += bytes;
    }
    if (e == &k->k[k->n])
        k->n++;
    e->src = src;
    e->version = 0;
    memcpy(e->full, w->dims, sizeof e->full);
    e->t = *t;
    return e;
}

/* w's trimmed kernel in *out: kept and current, copied now into the kept
 * entry, or copied into the region. */
static int trimmed_weights(sl_cpu_exec *x, const sl_op_call *c, const struct trim *t,
                           const sl_shape *cut, float **out)
{
    const sl_shape *w = &c->in[1].shape;
    uint64_t version = c->in_version[1];
    size_t bytes = sl_align_up(sl_shape_bytes(cut), TRIM_ALIGN);
    struct kept *e = version ? keep_slot(x, c->in[1].data, w, t, bytes) : NULL;
    if (e) {
        e->last_used = ++x->trims->clock;
        if (e->version != version) {
            move_taps(x, t, w, c->in[1].data, cut, e->buf, false);
            e->version = version;
        }
        *out = e->buf;
        return SL_OK;
    }
    int rc = trim_region(x, c, bytes, out);
    if (rc == SL_OK)
        move_taps(x, t, w, c->in[1].data, cut, *out, false);
    return rc;
}

/* A 2-D f32 matmul call: out = op(a) op(b). */
static sl_op_call matmul_call(void *a, int64_t ar, int64_t ac, bool ta, void *b, int64_t br,
                              int64_t bc, bool tb, void *out, int64_t m, int64_t n)
{
    sl_op_call mm;
    memset(&mm, 0, sizeof mm);
    mm.op = SL_OP_MATMUL;
    mm.n_in = 2;
    mm.n_out = 1;
    mm.in[0] = (sl_tensor_ref){.data = a, .shape = {.ndim = 2, .dtype = SL_F32, .dims = {ar, ac}}};
    mm.in[1] = (sl_tensor_ref){.data = b, .shape = {.ndim = 2, .dtype = SL_F32, .dims = {br, bc}}};
    mm.out[0] = (sl_tensor_ref){.data = out, .shape = {.ndim = 2, .dtype = SL_F32, .dims = {m, n}}};
    mm.attrs.i[0] = ta;
    mm.attrs.i[1] = tb;
    return mm;
}

/* The convolution as a matrix product (is_matmul): n samples, o output
 * channels, k = input channels x pixels, all plain row-major. */
static int run_matmul(sl_cpu_exec *x, const sl_op_call *c, const struct trim *t,
                      const sl_shape *cut)
{
    const sl_shape *xs, *ws, *ys;
    conv_shapes(c, &xs, &ws, &ys);
    int64_t n = xs->dims[0], o = ws->dims[0], k = sl_shape_elems(xs) / n;
    float *w;
    int rc;
    sl_op_call mm;
    switch (c->op) {
    case SL_OP_CONV2D: /* y[n, o] = x[n, k] w'[o, k]^T */
        if ((rc = trimmed_weights(x, c, t, cut, &w)))
            return rc;
        mm = matmul_call(c->in[0].data, n, k, false, w, o, k, true, c->out[0].data, n, o);
        return sl_cpu_run_op_f32(x, &mm);
    case SL_OP_CONV2D_GRAD_INPUT: /* dx[n, k] = dy[n, o] w'[o, k] */
        if ((rc = trimmed_weights(x, c, t, cut, &w)))
            return rc;
        mm = matmul_call(c->in[0].data, n, o, false, w, o, k, false, c->out[0].data, n, k);
        return sl_cpu_run_op_f32(x, &mm);
    default: /* dw'[o, k] = dy[n, o]^T x[n, k], then spread over dw */
        if ((rc = trim_region(x, c, sl_align_up(sl_shape_bytes(cut), TRIM_ALIGN), &w)))
            return rc;
        mm = matmul_call(c->in[0].data, n, o, true, c->in[1].data, n, k, false, w, o, k);
        if ((rc = sl_cpu_run_op_f32(x, &mm)) == SL_OK)
            move_taps(x, t, &c->out[0].shape, c->out[0].data, cut, w, true);
        return rc;
    }
}

int sl_cpu_conv_trimmed(sl_cpu_exec *x, const sl_op_call *c, bool *done)
{
    struct trim t;
    *done = false;
    if ((c->op != SL_OP_CONV2D && c->op != SL_OP_CONV2D_GRAD_INPUT &&
         c->op != SL_OP_CONV2D_GRAD_FILTER) ||
        !plan_trim(c, &t))
        return SL_OK;
    *done = true;
    const sl_shape *xs, *ws, *ys;
    conv_shapes(c, &xs, &ws, &ys);
    sl_window2d g = sl_conv_window(&c->attrs, ws);
    sl_shape cut = *ws; /* the trimmed kernel's shape */
    for (int a = 0; a < 2; a++)
        cut.dims[2 + a] = t.hi[a] - t.lo[a] + 1;
    if (is_matmul(c, &t))
        return run_matmul(x, c, &t, &cut);
    /* the padding cut by the taps dropped */
    sl_op_call f = *c;
    for (int a = 0; a < 2; a++) {
        f.attrs.i[2 + a] = g.pad_begin[a] - t.lo[a] * g.dilation[a];
        f.attrs.i[4 + a] = g.pad_end[a] - (g.kernel[a] - 1 - t.hi[a]) * g.dilation[a];
    }
    f.attrs.i[SL_CPU_TRIM_LO_H] = t.lo[0] + 1;
    f.attrs.i[SL_CPU_TRIM_LO_W] = t.lo[1] + 1;
    f.attrs.i[SL_CPU_TRIM_FULL] = (int64_t) ((uint64_t) g.kernel[0] << 32 | (uint64_t) g.kernel[1]);
    if (c->op == SL_OP_CONV2D_GRAD_FILTER) {
        /* the taps no output depends on have a gradient of exactly zero;
         * the trimmed call writes the others */
        memset(c->out[0].data, 0, sl_shape_bytes(&c->out[0].shape));
        f.in[2].shape = cut;
        f.out[0].shape = cut;
    } else {
        f.in[1].shape = cut;
    }
    return sl_cpu_dnnl_op(x, &f);
}
