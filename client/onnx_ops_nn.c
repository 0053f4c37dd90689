/* ONNX nodes of dense and convolutional networks mapped to salus ops:
 * Softmax and LogSoftmax on any axis, MatMul (batched), Gemm, Conv and the
 * pools (1-D as 2-D over a trailing dim of 1), BatchNormalization (any
 * rank; inference and training forms), LayerNormalization and
 * InstanceNormalization (as the reductions and element-wise ops of their
 * definitions), ArgMax and ArgMin. */
#include "onnx_ops.h"

#include <stdio.h>
#include <string.h>

/* Softmax or LogSoftmax along an axis: rows of a 2-D view, the axis moved
 * last first when it is not (opset 13's single-axis form). */
int sl_onnx_map_softmax(sl_onnx_imp *m, const Onnx__NodeProto *n, bool log)
{
    static const char *const k[] = {"axis", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    salus_value x = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    sl_shape s;
    sl_onnx_shape_of(m, x, &s);
    if (s.ndim == 0)
        return UNSUP("a scalar input");
    unsigned axis;
    if (sl_onnx_axis(m, sl_onnx_attr_i(n, "axis", m->opset < 13 ? 1 : -1), s.ndim, &axis))
        return m->code;
    const char *op = log ? "log_softmax" : "softmax";
    int64_t perm[SL_MAX_DIMS];
    bool moved = m->opset >= 13 && axis != s.ndim - 1u;
    if (moved) {
        for (unsigned d = 0; d < s.ndim; d++)
            perm[d] = d;
        perm[axis] = s.ndim - 1;
        perm[s.ndim - 1] = axis;
        x = sl_onnx_op(m, "transpose", 1, &x, s.ndim, perm, 0, NULL);
        sl_onnx_shape_of(m, x, &s);
        axis = s.ndim - 1;
    }
    int64_t rows = 1, cols = 1;
    for (unsigned d = 0; d < s.ndim; d++)
        *(d < axis ? &rows : &cols) *= s.dims[d];
    int64_t two[2] = {rows, cols};
    salus_value y = sl_onnx_reshape(m, x, 2, two);
    y = sl_onnx_op(m, op, 1, &y, 0, NULL, 0, NULL);
    y = sl_onnx_reshape(m, y, s.ndim, s.dims);
    if (moved)
        y = sl_onnx_op(m, "transpose", 1, &y, s.ndim, perm, 0, NULL);
    return sl_onnx_set_out(m, n, 1, &y);
}

int sl_onnx_map_matmul(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    if (sl_onnx_known_attrs(m, n, sl_onnx_no_attrs))
        return m->code;
    salus_value a = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0)),
                b = sl_onnx_fvalue(m, sl_onnx_input(m, n, 1));
    sl_shape sa, sb;
    sl_onnx_shape_of(m, a, &sa);
    sl_onnx_shape_of(m, b, &sb);
    if (m->code)
        return m->code;
    if (sa.ndim < 2 || sb.ndim < 2)
        return UNSUP("a 1-D operand");
    int64_t M = sa.dims[sa.ndim - 2], K = sa.dims[sa.ndim - 1], N = sb.dims[sb.ndim - 1];
    int64_t ba = 1, bb = 1;
    for (unsigned d = 0; d + 2 < sa.ndim; d++)
        ba *= sa.dims[d];
    for (unsigned d = 0; d + 2 < sb.ndim; d++)
        bb *= sb.dims[d];
    /* the output's batch dims: the longer operand's, which must then be
     * the other's or all ones */
    const sl_shape *lead = sa.ndim >= sb.ndim ? &sa : &sb;
    if (ba != 1 && bb != 1 &&
        (sa.ndim != sb.ndim || memcmp(sa.dims, sb.dims, (sa.ndim - 2) * sizeof *sa.dims)))
        return UNSUP("batch dims that broadcast partly");
    if (ba == 1 && bb != 1)
        lead = &sb;
    else if (bb == 1 && ba != 1)
        lead = &sa;
    sl_shape out = *lead;
    out.dims[out.ndim - 2] = M;
    out.dims[out.ndim - 1] = N;
    salus_value y;
    if (bb == 1) {
        int64_t a2[2] = {ba * M, K}, b2[2] = {K, N};
        salus_value in[2] = {sl_onnx_reshape(m, a, 2, a2), sl_onnx_reshape(m, b, 2, b2)};
        y = sl_onnx_op(m, "matmul", 2, in, 0, NULL, 0, NULL);
    } else {
        int64_t a3[3] = {ba, M, K}, b3[3] = {bb, K, N};
        salus_value in[2] = {sl_onnx_reshape(m, a, 3, a3), sl_onnx_reshape(m, b, 3, b3)};
        y = sl_onnx_op(m, "batch_matmul", 2, in, 0, NULL, 0, NULL);
    }
    y = sl_onnx_reshape(m, y, out.ndim, out.dims);
    return sl_onnx_set_out(m, n, 1, &y);
}

int sl_onnx_map_gemm(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    /* broadcast (before opset 7): C broadcast to the product's shape, as
     * numpy does, which is what the C path below does anyway */
    static const char *const k[] = {"alpha", "beta", "transA", "transB", "broadcast", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    float alpha = sl_onnx_attr_f(n, "alpha", 1), beta = sl_onnx_attr_f(n, "beta", 1);
    int64_t t[2] = {sl_onnx_attr_i(n, "transA", 0) != 0, sl_onnx_attr_i(n, "transB", 0) != 0};
    salus_value in[2] = {sl_onnx_fvalue(m, sl_onnx_input(m, n, 0)),
                         sl_onnx_fvalue(m, sl_onnx_input(m, n, 1))};
    salus_value y = sl_onnx_op(m, "matmul", 2, in, 2, t, 0, NULL);
    if (alpha != 1.0f)
        y = sl_onnx_op(m, "scale", 1, &y, 0, NULL, 1, &alpha);
    struct ent *ce = sl_onnx_input(m, n, 2);
    if (ce && beta != 0.0f) {
        salus_value c = sl_onnx_fvalue(m, ce);
        if (beta != 1.0f)
            c = sl_onnx_op(m, "scale", 1, &c, 0, NULL, 1, &beta);
        sl_shape sy, sc;
        sl_onnx_shape_of(m, y, &sy);
        sl_onnx_shape_of(m, c, &sc);
        salus_value yc[2] = {y, c};
        if (sc.ndim == 1 && sc.dims[0] == sy.dims[1] && sy.dims[1] > 1)
            y = sl_onnx_op(m, "bias_add", 2, yc, 0, NULL, 0, NULL);
        else
            y = sl_onnx_binary(m, SL_EW_ADD, y, c);
    }
    return sl_onnx_set_out(m, n, 1, &y);
}

/* The pads of one spatial axis under auto_pad (NOTSET: from pads). */
static int auto_pads(sl_onnx_imp *m, const Onnx__NodeProto *n, unsigned r, const int64_t *in_hw,
                     const int64_t *k, const int64_t *stride, const int64_t *dil, int64_t *pads)
{
    const Onnx__AttributeProto *ap = sl_onnx_attr(n, "auto_pad");
    const char *mode = "NOTSET";
    char buf[16] = "";
    if (ap && ap->has_s) {
        if (ap->s.data)
            snprintf(buf, sizeof buf, "%.*s", (int) (ap->s.len < 15 ? ap->s.len : 15),
                     (const char *) ap->s.data);
        mode = buf;
    }
    const Onnx__AttributeProto *pa = sl_onnx_attr(n, "pads");
    if (!strcmp(mode, "NOTSET")) {
        if (pa && pa->n_ints != 2 * r)
            return UNSUP("pads of %zu values for %u spatial dims", pa->n_ints, r);
        memset(pads, 0, 4 * sizeof *pads);
        for (unsigned i = 0; pa && i < r; i++)
            pads[i] = pa->ints[i], pads[i + 2] = pa->ints[i + r];
    } else if (!strcmp(mode, "VALID")) {
        memset(pads, 0, 4 * sizeof *pads);
    } else if (!strcmp(mode, "SAME_UPPER") || !strcmp(mode, "SAME_LOWER")) {
        memset(pads, 0, 4 * sizeof *pads);
        for (unsigned a = 0; a < r; a++) {
            int64_t out = (in_hw[a] + stride[a] - 1) / stride[a];
            int64_t total = (out - 1) * stride[a] + (k[a] - 1) * dil[a] + 1 - in_hw[a];
            total = total < 0 ? 0 : total;
            int64_t small = total / 2;
            pads[a] = mode[5] == 'U' ? small : total - small;
            pads[a + 2] = total - pads[a];
        }
    } else
        return UNSUP("auto_pad %s", mode);
    for (int i = 0; i < 4; i++)
        if (pads[i] < 0)
            return UNSUP("negative pads");
    return SL_OK;
}

/* An int list attribute of 2 values (strides, dilations, kernel_shape). */
static int pair(sl_onnx_imp *m, const Onnx__NodeProto *n, const char *name, int64_t dflt,
                unsigned r, int64_t *v)
{
    const Onnx__AttributeProto *a = sl_onnx_attr(n, name);
    v[0] = v[1] = dflt;
    if (!a)
        return SL_OK;
    if (a->n_ints != r)
        return UNSUP("%s of %zu values for %u spatial dims", name, a->n_ints, r);
    for (unsigned i = 0; i < r; i++)
        if ((v[i] = a->ints[i]) < 1)
            return UNSUP("%s below 1", name);
    return SL_OK;
}

int sl_onnx_map_conv(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"auto_pad", "dilations", "group", "kernel_shape",
                                    "pads",     "strides",   NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    salus_value x = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0)),
                w = sl_onnx_fvalue(m, sl_onnx_input(m, n, 1));
    sl_shape sx, sw;
    sl_onnx_shape_of(m, x, &sx);
    sl_onnx_shape_of(m, w, &sw);
    if (m->code)
        return m->code;
    if ((sx.ndim != 4 && sx.ndim != 3) || sw.ndim != sx.ndim)
        return UNSUP("a %u-D convolution (salus has 1-D and 2-D)", sx.ndim >= 2 ? sx.ndim - 2 : 0);
    unsigned r = sx.ndim - 2u;
    /* 1-D as 2-D over [N, C, L, 1] */
    int64_t xd[4] = {sx.dims[0], sx.dims[1], sx.dims[2], r == 2 ? sx.dims[3] : 1};
    int64_t wd[4] = {sw.dims[0], sw.dims[1], sw.dims[2], r == 2 ? sw.dims[3] : 1};
    int64_t st[2], dil[2], ks[2], pads[4];
    if (pair(m, n, "strides", 1, r, st) || pair(m, n, "dilations", 1, r, dil) ||
        pair(m, n, "kernel_shape", 0, r, ks))
        return m->code;
    if (ks[0] && (ks[0] != wd[2] || (r == 2 && ks[1] != wd[3])))
        return UNSUP("kernel_shape differs from the weights'");
    if (auto_pads(m, n, r, &xd[2], &wd[2], st, dil, pads))
        return m->code;
    int64_t at[9] = {st[0],   st[1],   pads[0],
                     pads[1], pads[2], pads[3],
                     dil[0],  dil[1],  sl_onnx_attr_i(n, "group", 1)};
    salus_value in[2] = {sl_onnx_reshape(m, x, 4, xd), sl_onnx_reshape(m, w, 4, wd)};
    salus_value y = sl_onnx_op(m, "conv2d", 2, in, 9, at, 0, NULL);
    struct ent *b = sl_onnx_input(m, n, 2);
    if (b) {
        salus_value yb[2] = {y, sl_onnx_fvalue(m, b)};
        y = sl_onnx_op(m, "channel_bias_add", 2, yb, 0, NULL, 0, NULL);
    }
    if (r == 1) {
        sl_shape sy;
        sl_onnx_shape_of(m, y, &sy);
        y = sl_onnx_reshape(m, y, 3, sy.dims);
    }
    return sl_onnx_set_out(m, n, 1, &y);
}

int sl_onnx_map_pool(sl_onnx_imp *m, const Onnx__NodeProto *n, bool avg, bool global)
{
    static const char *const k[] = {"auto_pad",      "ceil_mode",    "count_include_pad",
                                    "dilations",     "kernel_shape", "pads",
                                    "storage_order", "strides",      NULL};
    if (sl_onnx_known_attrs(m, n, global ? sl_onnx_no_attrs : k))
        return m->code;
    salus_value x = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    sl_shape sx;
    sl_onnx_shape_of(m, x, &sx);
    if (m->code)
        return m->code;
    if (sx.ndim != 4 && sx.ndim != 3)
        return UNSUP("%u-D pooling (salus has 1-D and 2-D)", sx.ndim >= 2 ? sx.ndim - 2 : 0);
    unsigned r = sx.ndim - 2u;
    int64_t xd[4] = {sx.dims[0], sx.dims[1], sx.dims[2], r == 2 ? sx.dims[3] : 1};
    int64_t ks[2] = {xd[2], xd[3]}, st[2] = {1, 1}, dil[2], pads[4] = {0};
    if (!global) {
        if (pair(m, n, "kernel_shape", 0, r, ks) || pair(m, n, "strides", 1, r, st) ||
            pair(m, n, "dilations", 1, r, dil))
            return m->code;
        if (!ks[0])
            return UNSUP("no kernel_shape");
        if (r == 1)
            ks[1] = 1;
        if (dil[0] != 1 || dil[1] != 1)
            return UNSUP("dilations other than 1");
        if (sl_onnx_attr_i(n, "storage_order", 0) != 0)
            return UNSUP("storage_order 1");
        if (auto_pads(m, n, r, &xd[2], ks, st, dil, pads))
            return m->code;
        if (sl_onnx_attr_i(n, "ceil_mode", 0)) {
            /* ceil mode adds a last window where floor mode has none: the
             * same output as floor mode when the windows fit exactly */
            for (int a = 0; a < 2; a++)
                if ((xd[2 + a] + pads[a] + pads[a + 2] - ks[a]) % st[a] != 0)
                    return UNSUP("ceil_mode 1 with a partial last window");
        }
    }
    int64_t at[9] = {ks[0],   ks[1],   st[0],
                     st[1],   pads[0], pads[1],
                     pads[2], pads[3], sl_onnx_attr_i(n, "count_include_pad", 0) != 0};
    x = sl_onnx_reshape(m, x, 4, xd);
    salus_value y = sl_onnx_op(m, avg ? "avgpool" : "maxpool", 1, &x, avg ? 9 : 8, at, 0, NULL);
    if (r == 1) {
        sl_shape sy;
        sl_onnx_shape_of(m, y, &sy);
        y = sl_onnx_reshape(m, y, 3, sy.dims);
    }
    return sl_onnx_set_out(m, n, 1, &y);
}

/* Whether a node other than n, or a graph output, reads the value name. */
static bool used_elsewhere(const sl_onnx_imp *m, const Onnx__NodeProto *n, const char *name)
{
    const Onnx__GraphProto *g = m->graph;
    if (!g || !name[0])
        return false;
    for (size_t i = 0; i < g->n_node; i++)
        for (size_t j = 0; g->node[i] != n && j < g->node[i]->n_input; j++)
            if (!strcmp(g->node[i]->input[j], name))
                return true;
    for (size_t i = 0; i < g->n_output; i++)
        if (g->output[i]->name && !strcmp(g->output[i]->name, name))
            return true;
    return false;
}

/* Whether BatchNormalization n normalises with the batch's statistics:
 * training_mode 1 from opset 14; before it (opsets 7 to 13), the form with
 * more than one output (mean, var, saved_mean, saved_var) is training. */
static bool bn_training(const sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    if (m->opset >= 14)
        return sl_onnx_attr_i(n, "training_mode", 0) != 0;
    for (size_t i = 1; i < n->n_output; i++)
        if (n->output[i][0])
            return true;
    return false;
}

/* The training form maps to salus's batchnorm op, which updates the running
 * statistics in place (ONNX: running = running * momentum + batch * (1 -
 * momentum); PyTorch's momentum 0.1 exports as 0.9) and has a gradient, so
 * the graph trains through autodiff. Checked before anything is uploaded:
 * the running statistics must be initialisers that only this node reads
 * (their persistent tensors become the model's batch-norm state, not
 * trained parameters), and the node's extra outputs (updated statistics,
 * saved mean and variance) must be unused: with the update in place there
 * is no separate value to hand on. */
static int bn_train_check(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    for (size_t i = 3; i < 5; i++) {
        struct ent *e = sl_onnx_input(m, n, i);
        if (e && (e->kind != ENT_CONST || e->uploaded || used_elsewhere(m, n, n->input[i])))
            return UNSUP("training mode with %s ('%.64s') not an initialiser that only this "
                         "node reads (salus updates the running statistics in place)",
                         i == 3 ? "input_mean" : "input_var", n->input[i]);
    }
    for (size_t i = 1; i < n->n_output; i++)
        if (used_elsewhere(m, n, n->output[i]))
            return UNSUP("training mode with output %zu ('%.64s') in use (salus updates the "
                         "running statistics in place and has no separate value for them)",
                         i, n->output[i]);
    float mom = sl_onnx_attr_f(n, "momentum", 0.9f);
    if (!(mom >= 0.0f && mom <= 1.0f))
        return UNSUP("momentum %g outside [0, 1]", (double) mom);
    return SL_OK;
}

int sl_onnx_map_batchnorm(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"epsilon", "momentum",      "spatial",
                                    "is_test", "training_mode", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    if (sl_onnx_attr_i(n, "spatial", 1) != 1)
        return UNSUP("spatial 0");
    if (m->opset < 7 && sl_onnx_attr_i(n, "is_test", 0) == 0)
        return UNSUP("is_test 0 (the training form of opsets before 7)");
    bool training = bn_training(m, n);
    if (training && bn_train_check(m, n))
        return m->code;
    salus_value in[5];
    for (size_t i = 0; i < 5; i++)
        in[i] = sl_onnx_fvalue(m, sl_onnx_input(m, n, i));
    sl_shape sx;
    sl_onnx_shape_of(m, in[0], &sx);
    if (m->code)
        return m->code;
    if (sx.ndim < 2)
        return UNSUP("an input of rank %u", sx.ndim);
    /* any rank as [N, C, rest, 1]: statistics are per channel either way */
    int64_t four[4] = {sx.dims[0], sx.dims[1], 1, 1};
    for (unsigned d = 2; d < sx.ndim; d++)
        four[2] *= sx.dims[d];
    if (sx.ndim != 2 && sx.ndim != 4)
        in[0] = sl_onnx_reshape(m, in[0], 4, four);
    float f[2] = {sl_onnx_attr_f(n, "epsilon", 1e-5f), sl_onnx_attr_f(n, "momentum", 0.9f)};
    salus_value y = training ? sl_onnx_op(m, "batchnorm", 5, in, 0, NULL, 2, f)
                             : sl_onnx_op(m, "batchnorm_infer", 5, in, 0, NULL, 1, f);
    if (m->code)
        return m->code;
    y = sl_onnx_reshape(m, y, sx.ndim, sx.dims);
    if (!training)
        return sl_onnx_set_out(m, n, 1, &y);
    /* the extra outputs are unused (bn_train_check): only Y gets a name */
    if (m->code || !n->output[0][0])
        return m->code;
    if ((y = sl_onnx_autocast_out(m, n->output[0], y)) == SALUS_NO_VALUE)
        return m->code;
    struct ent *e;
    int rc = sl_onnx_add(m, n->output[0], &e);
    if (rc)
        return rc;
    e->kind = ENT_VALUE;
    e->v = y;
    return SL_OK;
}

/* LayerNormalization (opset 17) as the reductions and element-wise ops of
 * its definition: y = (x - mean) / sqrt(var + epsilon) * scale + bias. */
int sl_onnx_map_layernorm(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"axis", "epsilon", "stash_type", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    salus_value x = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    sl_shape s;
    sl_onnx_shape_of(m, x, &s);
    unsigned axis;
    if (m->code || sl_onnx_axis(m, sl_onnx_attr_i(n, "axis", -1), s.ndim, &axis))
        return m->code;
    int64_t at[2] = {SL_REDUCE_MEAN, (((int64_t) 1 << s.ndim) - 1) & ~(((int64_t) 1 << axis) - 1)};
    salus_value mean = sl_onnx_op(m, "reduce_axes", 1, &x, 2, at, 0, NULL);
    salus_value d = sl_onnx_binary(m, SL_EW_SUB, x, mean);
    salus_value var = sl_onnx_op(
        m, "reduce_axes", 1, (salus_value[]){sl_onnx_binary(m, SL_EW_MUL, d, d)}, 2, at, 0, NULL);
    salus_value sd = sl_onnx_unary(
        m, SL_EW_SQRT,
        sl_onnx_binary(m, SL_EW_ADD, var, sl_onnx_scalar(m, sl_onnx_attr_f(n, "epsilon", 1e-5f))),
        0, 0);
    salus_value y = sl_onnx_binary(m, SL_EW_DIV, d, sd);
    y = sl_onnx_binary(m, SL_EW_MUL, y, sl_onnx_fvalue(m, sl_onnx_input(m, n, 1)));
    if (sl_onnx_input(m, n, 2))
        y = sl_onnx_binary(m, SL_EW_ADD, y, sl_onnx_fvalue(m, sl_onnx_input(m, n, 2)));
    /* the optional outputs: the mean and 1 / sqrt(var + epsilon), as ONNX
     * keeps them (the reduced dims as 1) */
    salus_value outs[3] = {y, mean, SALUS_NO_VALUE};
    size_t n_out = n->n_output > 3 ? 3 : n->n_output;
    if (n_out == 3 && n->output[2][0])
        outs[2] = sl_onnx_unary(m, SL_EW_RECIPROCAL, sd, 0, 0);
    else if (n_out == 3)
        n_out = 2;
    if (n_out == 2 && !n->output[1][0])
        n_out = 1;
    return sl_onnx_set_out(m, n, n_out, outs);
}

/* InstanceNormalization: per sample and channel over the spatial dims,
 * y = scale[c] * (x - mean) / sqrt(var + epsilon) + bias[c]. */
int sl_onnx_map_instancenorm(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"epsilon", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    salus_value x = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    sl_shape s;
    sl_onnx_shape_of(m, x, &s);
    if (m->code)
        return m->code;
    if (s.ndim < 3)
        return UNSUP("an input of rank %u", s.ndim);
    int64_t at[2] = {SL_REDUCE_MEAN, (((int64_t) 1 << s.ndim) - 1) & ~(int64_t) 3};
    salus_value mean = sl_onnx_op(m, "reduce_axes", 1, &x, 2, at, 0, NULL);
    salus_value d = sl_onnx_binary(m, SL_EW_SUB, x, mean);
    salus_value var = sl_onnx_op(
        m, "reduce_axes", 1, (salus_value[]){sl_onnx_binary(m, SL_EW_MUL, d, d)}, 2, at, 0, NULL);
    salus_value sd = sl_onnx_unary(
        m, SL_EW_SQRT,
        sl_onnx_binary(m, SL_EW_ADD, var, sl_onnx_scalar(m, sl_onnx_attr_f(n, "epsilon", 1e-5f))),
        0, 0);
    /* scale and bias [C] as [C, 1, ...] against [N, C, ...] */
    int64_t cdims[SL_MAX_DIMS] = {s.dims[1]};
    for (unsigned i = 1; i + 1 < s.ndim; i++)
        cdims[i] = 1;
    salus_value sc =
        sl_onnx_reshape(m, sl_onnx_fvalue(m, sl_onnx_input(m, n, 1)), s.ndim - 1, cdims);
    salus_value bi =
        sl_onnx_reshape(m, sl_onnx_fvalue(m, sl_onnx_input(m, n, 2)), s.ndim - 1, cdims);
    salus_value y = sl_onnx_binary(
        m, SL_EW_ADD, sl_onnx_binary(m, SL_EW_MUL, sl_onnx_binary(m, SL_EW_DIV, d, sd), sc), bi);
    return sl_onnx_set_out(m, n, 1, &y);
}

/* ArgMax / ArgMin along an axis: salus' argmax over rows (the first index
 * on ties, as ONNX without select_last_index), ArgMin as ArgMax of -x. */
int sl_onnx_map_argmax(sl_onnx_imp *m, const Onnx__NodeProto *n, bool min)
{
    static const char *const k[] = {"axis", "keepdims", "select_last_index", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    if (sl_onnx_attr_i(n, "select_last_index", 0))
        return UNSUP("select_last_index 1");
    salus_value x = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    sl_shape s;
    sl_onnx_shape_of(m, x, &s);
    unsigned axis;
    if (m->code || sl_onnx_axis(m, sl_onnx_attr_i(n, "axis", 0), s.ndim, &axis))
        return m->code;
    if (min)
        x = sl_onnx_unary(m, SL_EW_NEG, x, 0, 0);
    /* the axis moved last, the others kept in order: rows then follow the
     * output's order */
    int64_t perm[SL_MAX_DIMS];
    unsigned np = 0;
    for (unsigned d = 0; d < s.ndim; d++)
        if (d != axis)
            perm[np++] = d;
    perm[np] = axis;
    if (axis != s.ndim - 1u)
        x = sl_onnx_op(m, "transpose", 1, &x, s.ndim, perm, 0, NULL);
    int64_t rows = 1;
    for (unsigned d = 0; d < s.ndim; d++)
        rows *= d == axis ? 1 : s.dims[d];
    int64_t two[2] = {rows, s.dims[axis]};
    salus_value y = sl_onnx_op(m, "argmax", 1, (salus_value[]){sl_onnx_reshape(m, x, 2, two)}, 0,
                               NULL, 0, NULL);
    int64_t dims[SL_MAX_DIMS];
    unsigned nd = 0;
    bool keep = sl_onnx_attr_i(n, "keepdims", 1) != 0;
    for (unsigned d = 0; d < s.ndim; d++)
        if (d != axis || keep)
            dims[nd++] = d == axis ? 1 : s.dims[d];
    y = sl_onnx_reshape(m, y, nd, dims);
    return sl_onnx_set_out(m, n, 1, &y);
}

/* ConvTranspose (2-D) as the adjoint of Conv: conv2d_grad_input with the
 * input in dy's place and the weights [C_in, C_out/group, kH, kW] as the
 * filter. Its third operand only gives the output's shape and is never
 * read: a zero constant of that shape, uploaded once (its memory is the
 * cost of this mapping). */
int sl_onnx_map_conv_transpose(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"auto_pad",       "dilations", "group",   "kernel_shape",
                                    "output_padding", "pads",      "strides", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    if (sl_onnx_attr(n, "output_shape"))
        return UNSUP("output_shape");
    const Onnx__AttributeProto *ap = sl_onnx_attr(n, "auto_pad");
    if (ap && ap->has_s && !(ap->s.len == 6 && ap->s.data && !memcmp(ap->s.data, "NOTSET", 6)))
        return UNSUP("auto_pad other than NOTSET");
    salus_value x = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0)),
                w = sl_onnx_fvalue(m, sl_onnx_input(m, n, 1));
    sl_shape sx, sw;
    sl_onnx_shape_of(m, x, &sx);
    sl_onnx_shape_of(m, w, &sw);
    if (m->code)
        return m->code;
    if (sx.ndim != 4 || sw.ndim != 4)
        return UNSUP("a %u-D transposed convolution (salus has 2-D)",
                     sx.ndim >= 2 ? sx.ndim - 2 : 0);
    int64_t st[2], dil[2], ks[2], op[2] = {0, 0}, pads[4], group = sl_onnx_attr_i(n, "group", 1);
    if (pair(m, n, "strides", 1, 2, st) || pair(m, n, "dilations", 1, 2, dil) ||
        pair(m, n, "kernel_shape", 0, 2, ks) ||
        auto_pads(m, n, 2, &sx.dims[2], &sw.dims[2], st, dil, pads))
        return m->code;
    const Onnx__AttributeProto *opa = sl_onnx_attr(n, "output_padding");
    if (opa) {
        if (opa->n_ints != 2)
            return UNSUP("output_padding of %zu values", opa->n_ints);
        op[0] = opa->ints[0], op[1] = opa->ints[1];
        if (op[0] < 0 || op[1] < 0 || op[0] >= st[0] || op[1] >= st[1])
            return UNSUP("output_padding not below the strides");
    }
    if (ks[0] && (ks[0] != sw.dims[2] || ks[1] != sw.dims[3]))
        return UNSUP("kernel_shape differs from the weights'");
    if (group < 1 || sx.dims[1] != sw.dims[0])
        return UNSUP("weights of %lld input channels for %lld", (long long) sw.dims[0],
                     (long long) sx.dims[1]);
    int64_t out[4] = {sx.dims[0], sw.dims[1] * group, 0, 0};
    for (int a = 0; a < 2; a++) {
        out[2 + a] = (sx.dims[2 + a] - 1) * st[a] - pads[a] - pads[a + 2] +
                     dil[a] * (sw.dims[2 + a] - 1) + 1 + op[a];
        if (out[2 + a] < 1)
            return UNSUP("an empty output");
    }
    struct ent shape_only = {.name = "(conv_transpose shape)"};
    if (sl_onnx_const_alloc(m, &shape_only, CT_FLOAT, 4, out))
        return m->code;
    salus_value like = sl_onnx_value(m, &shape_only);
    m->const_elems -= shape_only.n;
    sl_free(shape_only.d);
    int64_t at[9] = {st[0], st[1], pads[0], pads[1], pads[2], pads[3], dil[0], dil[1], group};
    salus_value in[3] = {x, w, like};
    salus_value y = sl_onnx_op(m, "conv2d_grad_input", 3, in, 9, at, 0, NULL);
    struct ent *b = sl_onnx_input(m, n, 2);
    if (b) {
        salus_value yb[2] = {y, sl_onnx_fvalue(m, b)};
        y = sl_onnx_op(m, "channel_bias_add", 2, yb, 0, NULL, 0, NULL);
    }
    return sl_onnx_set_out(m, n, 1, &y);
}
