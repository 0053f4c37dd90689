/* bf16 matmul, matmul_acc and batch_matmul on oneDNN's matmul primitive
 * (cached per stream by dnnl.c, like the convolutions): bf16 operands in
 * salus's own row-major layouts (a transposed operand is described by its
 * strides, so nothing is reordered), products summed in f32, and the bf16
 * output rounded once. matmul_acc's `alpha` is the primitive's output
 * scale and its `beta` a sum post-op over the old `acc`, which the
 * primitive reads in f32 before the one rounding; with beta 0 there is no
 * post-op, so `acc` is not read, as the registry says. f32 matmuls stay on
 * gemm.c's single-threaded GEMM in row bands (ops.c). */
#include "dnnl_cache.h"

#include "sl_error.h"

/* A [rows, cols] bf16 matrix, stored transposed ([cols, rows] row-major)
 * when trans. */
static dnnl_status_t matrix_md(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, bool trans)
{
    dnnl_dims_t dims = {rows, cols}, strides = {trans ? 1 : cols, trans ? rows : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dnnl_bf16, strides);
}

static void add_arg(sl_cpu_prim_spec *s, int arg, int tensor, const dnnl_memory_desc_t *user)
{
    s->args[s->n_args++] = (sl_cpu_prim_arg){.arg = arg, .tensor = tensor, .user = *user};
}

/* matmul_acc's alpha and beta as primitive attributes on a copy of attr
 * (which carries the user scratchpad mode). */
static dnnl_status_t acc_attr(const_dnnl_primitive_attr_t attr, float alpha, float beta,
                              dnnl_primitive_attr_t *out)
{
    dnnl_post_ops_t po = NULL;
    dnnl_status_t st = dnnl_primitive_attr_clone(out, attr);
    if (st == dnnl_success && alpha != 1.0f)
        st = dnnl_primitive_attr_set_output_scales(*out, 1, 0, &alpha);
    if (st == dnnl_success && beta != 0.0f) {
        st = dnnl_post_ops_create(&po);
        if (st == dnnl_success)
            st = dnnl_post_ops_append_sum(po, beta);
        if (st == dnnl_success)
            st = dnnl_primitive_attr_set_post_ops(*out, po);
        if (po)
            dnnl_post_ops_destroy(po);
    }
    if (st != dnnl_success && *out) {
        dnnl_primitive_attr_destroy(*out);
        *out = NULL;
    }
    return st;
}

/* matmul: in0 a, in1 b -> out y; matmul_acc: in0 a, in1 b, in2 acc (read
 * and written). */
static dnnl_status_t build_matmul(dnnl_engine_t eng, const_dnnl_primitive_attr_t attr,
                                  const sl_op_call *c, sl_cpu_prim_spec *s)
{
    bool acc = c->op == SL_OP_MATMUL_ACC, ta = c->attrs.i[0] != 0, tb = c->attrs.i[1] != 0;
    const sl_shape *ys = acc ? &c->in[2].shape : &c->out[0].shape;
    int64_t m = ys->dims[0], n = ys->dims[1], k = c->in[0].shape.dims[ta ? 0 : 1];
    dnnl_memory_desc_t a, b, y;
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t own = NULL;
    dnnl_status_t st = matrix_md(&a, m, k, ta);
    if (st == dnnl_success)
        st = matrix_md(&b, k, n, tb);
    if (st == dnnl_success)
        st = matrix_md(&y, m, n, false);
    if (st == dnnl_success)
        st = dnnl_matmul_desc_init(&md, &a, &b, NULL, &y);
    if (st == dnnl_success && acc)
        st = acc_attr(attr, c->attrs.f[0], c->attrs.f[1], &own);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&s->pd, &md, own ? own : attr, eng, NULL);
    if (own)
        dnnl_primitive_attr_destroy(own);
    if (st != dnnl_success)
        return st;
    add_arg(s, DNNL_ARG_SRC, 0, &a);
    add_arg(s, DNNL_ARG_WEIGHTS, 1, &b);
    add_arg(s, DNNL_ARG_DST, acc ? 2 : -1, &y);
    return dnnl_success;
}

/* batch_matmul: in0 a [B|1,M,K], in1 b [B|1,K,N] -> out y [B,M,N]; a batch
 * of 1 broadcasts, which oneDNN's matmul does itself. */
static dnnl_status_t build_batch_matmul(dnnl_engine_t eng, const_dnnl_primitive_attr_t attr,
                                        const sl_op_call *c, sl_cpu_prim_spec *s)
{
    dnnl_memory_desc_t a, b, y;
    dnnl_matmul_desc_t md;
    const sl_shape *as = &c->in[0].shape, *bs = &c->in[1].shape, *ys = &c->out[0].shape;
    dnnl_dims_t ad = {as->dims[0], as->dims[1], as->dims[2]};
    dnnl_dims_t bd = {bs->dims[0], bs->dims[1], bs->dims[2]};
    dnnl_dims_t yd = {ys->dims[0], ys->dims[1], ys->dims[2]};
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(&a, 3, ad, dnnl_bf16, dnnl_abc);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_tag(&b, 3, bd, dnnl_bf16, dnnl_abc);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_tag(&y, 3, yd, dnnl_bf16, dnnl_abc);
    if (st == dnnl_success)
        st = dnnl_matmul_desc_init(&md, &a, &b, NULL, &y);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&s->pd, &md, attr, eng, NULL);
    if (st != dnnl_success)
        return st;
    add_arg(s, DNNL_ARG_SRC, 0, &a);
    add_arg(s, DNNL_ARG_WEIGHTS, 1, &b);
    add_arg(s, DNNL_ARG_DST, -1, &y);
    return dnnl_success;
}

int sl_cpu_dnnl_matmul(sl_cpu_exec *x, const sl_op_call *c)
{
    switch (c->op) {
    case SL_OP_MATMUL:
    case SL_OP_MATMUL_ACC:
        return sl_cpu_dnnl_run(x, c, build_matmul);
    case SL_OP_BATCH_MATMUL:
        return sl_cpu_dnnl_run(x, c, build_batch_matmul);
    default:
        return SL_EINTERNAL;
    }
}
