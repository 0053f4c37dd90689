/* Convolution (forward, backward data, backward weights) and pooling
 * (max and average forward, average backward) through oneDNN. Each builder
 * below describes one op to oneDNN; dnnl.c caches and runs the result.
 *
 * Convolutions let oneDNN pick the layouts (format "any"): on AVX2/AVX-512
 * it then chooses its direct JIT kernels on blocked layouts, about 3x faster
 * than its GEMM-based convolution on plain NCHW for the shapes of a small
 * CNN, and dnnl.c reorders to and from salus's NCHW tensors. The weight
 * gradient of a convolution over fewer channels than those layouts block
 * (a first layer over grayscale or RGB images) goes to conv_gemm.c instead.
 * A kernel with taps that meet only padding at every output (a 3x3 kernel
 * over a 1x1 plane) runs trimmed to the taps that meet the input
 * (conv_trim.c): the call comes back here with the weights viewed in
 * place through a sub-tensor descriptor, or runs as a matmul.
 *
 * Pooling is memory-bound, so it runs on the plain layouts directly: a
 * reorder would cost as much as the pooling. Max pooling whose windows
 * tile the plane (the usual 2x2/2) does not come here: oneDNN has no fast
 * kernel for it on NCHW, and pool.c's loop is one streaming pass.
 */
#include "dnnl_cache.h"
#include "ops_geom.h"

#include "sl_error.h"

#include <string.h>

/* oneDNN's view of a window: dilation counts the gaps (0 = dense). */
struct dnnl_window {
    dnnl_dims_t kernel, strides, dilates, pad_l, pad_r;
};

static struct dnnl_window to_dnnl(const sl_window2d *g)
{
    struct dnnl_window d;
    memset(&d, 0, sizeof d);
    for (int i = 0; i < 2; i++) {
        d.kernel[i] = g->kernel[i];
        d.strides[i] = g->stride[i];
        d.dilates[i] = g->dilation[i] - 1;
        d.pad_l[i] = g->pad_begin[i];
        d.pad_r[i] = g->pad_end[i];
    }
    return d;
}

/* The plain layout of a convolution's weights (dims wdims), or for a
 * trimmed call (sl_cpu_conv_trimmed) the view of its taps inside the full
 * kernel the tensor holds. */
static dnnl_status_t weights_md(const sl_op_attrs *a, int wn, const int64_t *wdims, unsigned dt,
                                dnnl_format_tag_t wtag, dnnl_memory_desc_t *md)
{
    if (!a->i[SL_CPU_TRIM_LO_H])
        return sl_cpu_plain_md(md, wn, wdims, dt, wtag);
    int64_t full[5];
    dnnl_dims_t sub, offs;
    for (int i = 0; i < wn; i++) {
        full[i] = wdims[i];
        sub[i] = wdims[i];
        offs[i] = 0;
    }
    uint64_t ext = (uint64_t) a->i[SL_CPU_TRIM_FULL];
    full[wn - 2] = (int64_t) (ext >> 32);
    full[wn - 1] = (int64_t) (ext & 0xffffffffu);
    offs[wn - 2] = a->i[SL_CPU_TRIM_LO_H] - 1;
    offs[wn - 1] = a->i[SL_CPU_TRIM_LO_W] - 1;
    dnnl_memory_desc_t parent;
    dnnl_status_t st = sl_cpu_plain_md(&parent, wn, full, dt, wtag);
    return st == dnnl_success ? dnnl_memory_desc_init_submemory(md, &parent, sub, offs) : st;
}

/* Descriptors of one convolution: x, w and y in layout "any" (what the
 * primitive computes on) and in salus's plain layouts. */
struct conv_mds {
    dnnl_memory_desc_t x, w, y;       /* format any */
    dnnl_memory_desc_t x_u, w_u, y_u; /* plain: nchw, oihw or goihw */
    struct dnnl_window win;
};

/* Every tensor in x's dtype: f32, or bf16 on oneDNN's bf16 kernels, which
 * sum in f32 and round their output once. */
static dnnl_status_t conv_mds(const sl_op_attrs *a, const sl_shape *x, const sl_shape *w,
                              const sl_shape *y, struct conv_mds *m)
{
    unsigned dt = x->dtype;
    sl_window2d g = sl_conv_window(a, w);
    m->win = to_dnnl(&g);
    int64_t wd[5] = {g.group, w->dims[0] / g.group, w->dims[1], w->dims[2], w->dims[3]};
    int wn = g.group > 1 ? 5 : 4;
    const int64_t *wdims = g.group > 1 ? wd : w->dims;
    dnnl_format_tag_t wtag = g.group > 1 ? dnnl_goihw : dnnl_oihw;
    dnnl_status_t st = sl_cpu_plain_md(&m->x_u, 4, x->dims, dt, dnnl_nchw);
    if (st == dnnl_success)
        st = weights_md(a, wn, wdims, dt, wtag, &m->w_u);
    if (st == dnnl_success)
        st = sl_cpu_plain_md(&m->y_u, 4, y->dims, dt, dnnl_nchw);
    if (st == dnnl_success)
        st = sl_cpu_plain_md(&m->x, 4, x->dims, dt, dnnl_format_tag_any);
    if (st == dnnl_success)
        st = sl_cpu_plain_md(&m->w, wn, wdims, dt, dnnl_format_tag_any);
    if (st == dnnl_success)
        st = sl_cpu_plain_md(&m->y, 4, y->dims, dt, dnnl_format_tag_any);
    return st;
}

static dnnl_status_t conv_fwd_desc(dnnl_convolution_desc_t *cd, struct conv_mds *m)
{
    return dnnl_dilated_convolution_forward_desc_init(
        cd, dnnl_forward_training, dnnl_convolution_direct, &m->x, &m->w, NULL, &m->y,
        m->win.strides, m->win.dilates, m->win.pad_l, m->win.pad_r);
}

static void add_arg(sl_cpu_prim_spec *s, int arg, int tensor, const dnnl_memory_desc_t *user)
{
    s->args[s->n_args++] = (sl_cpu_prim_arg){.arg = arg, .tensor = tensor, .user = *user};
}

/* conv2d: in0 x, in1 w -> out y. */
static dnnl_status_t build_conv(dnnl_engine_t eng, const_dnnl_primitive_attr_t attr,
                                const sl_op_call *c, sl_cpu_prim_spec *s)
{
    struct conv_mds m;
    dnnl_convolution_desc_t cd;
    dnnl_status_t st = conv_mds(&c->attrs, &c->in[0].shape, &c->in[1].shape, &c->out[0].shape, &m);
    if (st == dnnl_success)
        st = conv_fwd_desc(&cd, &m);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&s->pd, &cd, attr, eng, NULL);
    if (st != dnnl_success)
        return st;
    add_arg(s, DNNL_ARG_SRC, 0, &m.x_u);
    add_arg(s, DNNL_ARG_WEIGHTS, 1, &m.w_u);
    add_arg(s, DNNL_ARG_DST, -1, &m.y_u);
    return dnnl_success;
}

/* The forward descriptor a backward one needs as a hint. */
static dnnl_status_t conv_hint(dnnl_engine_t eng, struct conv_mds *m, dnnl_primitive_desc_t *hint)
{
    dnnl_convolution_desc_t cd;
    dnnl_status_t st = conv_fwd_desc(&cd, m);
    return st == dnnl_success ? dnnl_primitive_desc_create(hint, &cd, NULL, eng, NULL) : st;
}

/* conv2d_grad_input: in0 dy, in1 w, in2 x (shape only) -> out dx. */
static dnnl_status_t build_conv_bwd_data(dnnl_engine_t eng, const_dnnl_primitive_attr_t attr,
                                         const sl_op_call *c, sl_cpu_prim_spec *s)
{
    struct conv_mds m;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t hint = NULL;
    dnnl_status_t st = conv_mds(&c->attrs, &c->in[2].shape, &c->in[1].shape, &c->in[0].shape, &m);
    if (st == dnnl_success)
        st = conv_hint(eng, &m, &hint);
    if (st == dnnl_success)
        st = dnnl_dilated_convolution_backward_data_desc_init(
            &cd, dnnl_convolution_direct, &m.x, &m.w, &m.y, m.win.strides, m.win.dilates,
            m.win.pad_l, m.win.pad_r);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&s->pd, &cd, attr, eng, hint);
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    if (st != dnnl_success)
        return st;
    add_arg(s, DNNL_ARG_DIFF_DST, 0, &m.y_u);
    add_arg(s, DNNL_ARG_WEIGHTS, 1, &m.w_u);
    add_arg(s, DNNL_ARG_DIFF_SRC, -1, &m.x_u);
    return dnnl_success;
}

/* conv2d_grad_filter: in0 dy, in1 x, in2 w (shape only) -> out dw. */
static dnnl_status_t build_conv_bwd_weights(dnnl_engine_t eng, const_dnnl_primitive_attr_t attr,
                                            const sl_op_call *c, sl_cpu_prim_spec *s)
{
    struct conv_mds m;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t hint = NULL;
    dnnl_status_t st = conv_mds(&c->attrs, &c->in[1].shape, &c->in[2].shape, &c->in[0].shape, &m);
    if (st == dnnl_success)
        st = conv_hint(eng, &m, &hint);
    if (st == dnnl_success)
        st = dnnl_dilated_convolution_backward_weights_desc_init(
            &cd, dnnl_convolution_direct, &m.x, &m.w, NULL, &m.y, m.win.strides, m.win.dilates,
            m.win.pad_l, m.win.pad_r);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&s->pd, &cd, attr, eng, hint);
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    if (st != dnnl_success)
        return st;
    add_arg(s, DNNL_ARG_DIFF_DST, 0, &m.y_u);
    add_arg(s, DNNL_ARG_SRC, 1, &m.x_u);
    add_arg(s, DNNL_ARG_DIFF_WEIGHTS, -1, &m.w_u);
    return dnnl_success;
}

/* Pooling descriptors on plain layouts: x is the input, y the output. */
struct pool_mds {
    dnnl_memory_desc_t x, y;
    struct dnnl_window win;
    dnnl_alg_kind_t alg;
};

static dnnl_status_t pool_mds(const sl_op_call *c, const sl_shape *x, const sl_shape *y, bool avg,
                              struct pool_mds *m)
{
    sl_window2d g = sl_pool_window(&c->attrs);
    m->win = to_dnnl(&g);
    m->alg = !avg                  ? dnnl_pooling_max
             : g.count_include_pad ? dnnl_pooling_avg_include_padding
                                   : dnnl_pooling_avg_exclude_padding;
    dnnl_status_t st = sl_cpu_plain_md(&m->x, 4, x->dims, SL_F32, dnnl_nchw);
    return st == dnnl_success ? sl_cpu_plain_md(&m->y, 4, y->dims, SL_F32, dnnl_nchw) : st;
}

static dnnl_status_t pool_fwd_pd(dnnl_engine_t eng, const_dnnl_primitive_attr_t attr,
                                 struct pool_mds *m, dnnl_prop_kind_t prop,
                                 dnnl_primitive_desc_t *pd)
{
    dnnl_pooling_desc_t pdesc;
    dnnl_status_t st =
        dnnl_pooling_forward_desc_init(&pdesc, prop, m->alg, &m->x, &m->y, m->win.strides,
                                       m->win.kernel, m->win.pad_l, m->win.pad_r);
    return st == dnnl_success ? dnnl_primitive_desc_create(pd, &pdesc, attr, eng, NULL) : st;
}

/* maxpool / avgpool: in0 x -> out y. Inference propagation: no workspace. */
static dnnl_status_t build_pool(dnnl_engine_t eng, const_dnnl_primitive_attr_t attr,
                                const sl_op_call *c, sl_cpu_prim_spec *s)
{
    struct pool_mds m;
    dnnl_status_t st = pool_mds(c, &c->in[0].shape, &c->out[0].shape, c->op == SL_OP_AVGPOOL, &m);
    if (st == dnnl_success)
        st = pool_fwd_pd(eng, attr, &m, dnnl_forward_inference, &s->pd);
    if (st != dnnl_success)
        return st;
    add_arg(s, DNNL_ARG_SRC, 0, &m.x);
    add_arg(s, DNNL_ARG_DST, -1, &m.y);
    return dnnl_success;
}

/* avgpool_grad: in0 dy, in1 x (shape only) -> out dx. */
static dnnl_status_t build_avgpool_bwd(dnnl_engine_t eng, const_dnnl_primitive_attr_t attr,
                                       const sl_op_call *c, sl_cpu_prim_spec *s)
{
    struct pool_mds m;
    dnnl_pooling_desc_t pdesc;
    dnnl_primitive_desc_t hint = NULL;
    dnnl_status_t st = pool_mds(c, &c->in[1].shape, &c->in[0].shape, true, &m);
    if (st == dnnl_success)
        st = pool_fwd_pd(eng, NULL, &m, dnnl_forward_training, &hint);
    if (st == dnnl_success)
        st = dnnl_pooling_backward_desc_init(&pdesc, m.alg, &m.x, &m.y, m.win.strides, m.win.kernel,
                                             m.win.pad_l, m.win.pad_r);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&s->pd, &pdesc, attr, eng, hint);
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    if (st != dnnl_success)
        return st;
    add_arg(s, DNNL_ARG_DIFF_DST, 0, &m.y);
    add_arg(s, DNNL_ARG_DIFF_SRC, -1, &m.x);
    return dnnl_success;
}

int sl_cpu_dnnl_op(sl_cpu_exec *x, const sl_op_call *c)
{
    sl_cpu_prim_build build;
    bool trimmed;
    int rc = sl_cpu_conv_trimmed(x, c, &trimmed);
    if (trimmed)
        return rc;
    switch (c->op) {
    case SL_OP_CONV2D:
        build = build_conv;
        break;
    case SL_OP_CONV2D_GRAD_INPUT:
        build = build_conv_bwd_data;
        break;
    case SL_OP_CONV2D_GRAD_FILTER:
        if (!c->attrs.i[SL_CPU_TRIM_LO_H] && sl_cpu_conv_grad_filter_by_gemm(c))
            return sl_cpu_conv_grad_filter_gemm(x, c);
        build = build_conv_bwd_weights;
        break;
    case SL_OP_MAXPOOL:
        if (sl_cpu_maxpool_tiles(c))
            return sl_cpu_maxpool_tiled(c, x->threads);
        if (sl_cpu_maxpool_rows(c))
            return sl_cpu_maxpool_by_rows(c, x->threads);
        build = build_pool;
        break;
    case SL_OP_AVGPOOL:
        build = build_pool;
        break;
    case SL_OP_AVGPOOL_GRAD:
        build = build_avgpool_bwd;
        break;
    default:
        return SL_EINTERNAL;
    }
    return sl_cpu_dnnl_run(x, c, build);
}
