/* ONNX nodes mapped to salus ops. Each mapper accepts only the attributes
 * it implements (anything else is refused by name), reads operands that
 * must be constants (shapes, axes, clip bounds) from folded entries, and
 * refuses what it cannot compute exactly as ONNX defines it: a node is
 * either imported faithfully or refused with the reason. */
#include "onnx_internal.h"

#include <float.h>
#include <stdio.h>
#include <math.h>
#include <string.h>

/* onnx_fold.c */
int sl_onnx_reshaped(sl_onnx_imp *m, const Onnx__NodeProto *n, unsigned xnd, const int64_t *xdims,
                     const struct ent *arg, unsigned *nd, int64_t *dims);
bool sl_onnx_slice_range(int64_t dim, int64_t *start, int64_t *end, int64_t step);

#define UNSUP(...) sl_onnx_fail(m, SL_EUNSUPPORTED, __VA_ARGS__)

/* Input i of n: its entry, or NULL (absent or empty name). */
static struct ent *input(sl_onnx_imp *m, const Onnx__NodeProto *n, size_t i)
{
    if (i >= n->n_input || !n->input[i][0])
        return NULL;
    return sl_onnx_find(m, n->input[i]);
}

/* An input's graph value as f32 (integer constants uploaded as floats). */
static salus_value fvalue(sl_onnx_imp *m, struct ent *e)
{
    if (!e)
        return UNSUP("a required input is missing"), SALUS_NO_VALUE;
    if (e->kind == ENT_CONST && !e->uploaded && e->ctype == CT_INT) {
        /* an integer constant used as floats (Pow's exponent): a float copy,
         * the entry keeping its type for the shape arithmetic */
        struct ent tmp = *e;
        tmp.ctype = CT_FLOAT;
        salus_value v = sl_onnx_value(m, &tmp);
        return v;
    }
    return sl_onnx_value(m, e);
}

static salus_value scalar(sl_onnx_imp *m, double v)
{
    struct ent tmp = {.name = "(scalar)"};
    if (sl_onnx_const_alloc(m, &tmp, CT_FLOAT, 0, NULL))
        return SALUS_NO_VALUE;
    tmp.d[0] = v;
    salus_value r = sl_onnx_value(m, &tmp);
    sl_free(tmp.d);
    return r;
}

static void shape_of(sl_onnx_imp *m, salus_value v, sl_shape *s)
{
    int dtype, ndim;
    *s = (sl_shape){0};
    if (v != SALUS_NO_VALUE && salus_graph_shape(m->g, v, &dtype, &ndim, s->dims) == SL_OK) {
        s->dtype = (uint8_t) dtype;
        s->ndim = (uint8_t) ndim;
    }
}

/* Names output i of n as value v. Outputs beyond those a mapper produces
 * must be unused (empty names). */
static int set_out(sl_onnx_imp *m, const Onnx__NodeProto *n, size_t produced, const salus_value *v)
{
    if (m->code)
        return m->code;
    for (size_t i = produced; i < n->n_output; i++)
        if (n->output[i][0])
            return UNSUP("output %zu ('%.64s') is not supported", i, n->output[i]);
    for (size_t i = 0; i < produced && i < n->n_output; i++) {
        if (!n->output[i][0])
            continue;
        if (v[i] == SALUS_NO_VALUE)
            return m->code ? m->code : UNSUP("no value");
        struct ent *e;
        int rc = sl_onnx_add(m, n->output[i], &e);
        if (rc)
            return rc;
        e->kind = ENT_VALUE;
        e->v = v[i];
    }
    return SL_OK;
}

static salus_value reshape(sl_onnx_imp *m, salus_value x, unsigned nd, const int64_t *dims)
{
    sl_shape s;
    shape_of(m, x, &s);
    if (s.ndim == nd && memcmp(s.dims, dims, nd * sizeof *dims) == 0)
        return x;
    return sl_onnx_op(m, "reshape", 1, &x, nd, dims, 0, NULL);
}

static salus_value binary(sl_onnx_imp *m, int kind, salus_value a, salus_value b)
{
    sl_shape sa, sb;
    shape_of(m, a, &sa);
    shape_of(m, b, &sb);
    salus_value in[2] = {a, b};
    if (sl_shape_equal(&sa, &sb) && (kind == 0 || kind == 2))
        return sl_onnx_op(m, kind == 0 ? "add" : "mul", 2, in, 0, NULL, 0, NULL);
    int64_t k = kind;
    return sl_onnx_op(m, "ew_binary", 2, in, 1, &k, 0, NULL);
}

static salus_value unary(sl_onnx_imp *m, int kind, salus_value x, float p, float q)
{
    int64_t k = kind;
    float f[2] = {p, q};
    return sl_onnx_op(m, "ew_unary", 1, &x, 1, &k, 2, f);
}

static const char *const NO_ATTRS[] = {NULL};

static int map_binary(sl_onnx_imp *m, const Onnx__NodeProto *n, int kind)
{
    if (sl_onnx_known_attrs(m, n, NO_ATTRS))
        return m->code;
    if (n->n_input < 1)
        return UNSUP("no inputs");
    salus_value acc = fvalue(m, input(m, n, 0));
    for (size_t i = 1; i < n->n_input; i++) /* Sum, Max, Min are variadic */
        acc = binary(m, kind, acc, fvalue(m, input(m, n, i)));
    return set_out(m, n, 1, &acc);
}

static int map_unary(sl_onnx_imp *m, const Onnx__NodeProto *n, int kind)
{
    float p = 0, q = 0;
    static const char *const alpha[] = {"alpha", NULL}, *const ab[] = {"alpha", "beta", NULL},
                             *const ag[] = {"alpha", "gamma", NULL},
                             *const lb[] = {"lambd", "bias", NULL};
    if (sl_onnx_known_attrs(m, n,
                            kind == SL_EW_LEAKY_RELU || kind == SL_EW_ELU ||
                                    kind == SL_EW_THRESHOLDED_RELU || kind == SL_EW_CELU
                                ? alpha
                            : kind == SL_EW_HARD_SIGMOID ? ab
                            : kind == SL_EW_SELU         ? ag
                            : kind == SL_EW_SHRINK       ? lb
                                                         : NO_ATTRS))
        return m->code;
    if (kind == SL_EW_THRESHOLDED_RELU || kind == SL_EW_CELU)
        p = sl_onnx_attr_f(n, "alpha", 1.0f);
    if (kind == SL_EW_CELU && p == 0.0f)
        return UNSUP("alpha 0");
    if (kind == SL_EW_SHRINK)
        p = sl_onnx_attr_f(n, "lambd", 0.5f), q = sl_onnx_attr_f(n, "bias", 0.0f);
    if (kind == SL_EW_LEAKY_RELU)
        p = sl_onnx_attr_f(n, "alpha", 0.01f);
    if (kind == SL_EW_ELU)
        p = sl_onnx_attr_f(n, "alpha", 1.0f);
    if (kind == SL_EW_SELU)
        p = sl_onnx_attr_f(n, "alpha", 1.67326319217681884765625f),
        q = sl_onnx_attr_f(n, "gamma", 1.05070102214813232421875f);
    if (kind == SL_EW_HARD_SIGMOID)
        p = sl_onnx_attr_f(n, "alpha", 0.2f), q = sl_onnx_attr_f(n, "beta", 0.5f);
    salus_value y = unary(m, kind, fvalue(m, input(m, n, 0)), p, q);
    return set_out(m, n, 1, &y);
}

static int map_simple(sl_onnx_imp *m, const Onnx__NodeProto *n, const char *op)
{
    if (sl_onnx_known_attrs(m, n, NO_ATTRS))
        return m->code;
    salus_value x = fvalue(m, input(m, n, 0));
    salus_value y = sl_onnx_op(m, op, 1, &x, 0, NULL, 0, NULL);
    return set_out(m, n, 1, &y);
}

static int map_clip(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    float lo = -INFINITY, hi = INFINITY;
    if (m->opset < 11) {
        static const char *const k[] = {"min", "max", NULL};
        if (sl_onnx_known_attrs(m, n, k))
            return m->code;
        lo = sl_onnx_attr_f(n, "min", -FLT_MAX), hi = sl_onnx_attr_f(n, "max", FLT_MAX);
    } else {
        if (sl_onnx_known_attrs(m, n, NO_ATTRS))
            return m->code;
        struct ent *lo_e = input(m, n, 1), *hi_e = input(m, n, 2);
        if ((lo_e && (lo_e->kind != ENT_CONST || lo_e->n != 1)) ||
            (hi_e && (hi_e->kind != ENT_CONST || hi_e->n != 1))) {
            /* bounds computed at run time: min(max(x, lo), hi), NaN
             * propagating as Clip's does */
            salus_value y = fvalue(m, input(m, n, 0));
            if (lo_e)
                y = binary(m, SL_EW_MAX, y, fvalue(m, lo_e));
            if (hi_e)
                y = binary(m, SL_EW_MIN, y, fvalue(m, hi_e));
            return set_out(m, n, 1, &y);
        }
        if (lo_e)
            lo = (float) lo_e->d[0];
        if (hi_e)
            hi = (float) hi_e->d[0];
    }
    if (!(lo <= hi))
        return UNSUP("min above max");
    salus_value x = fvalue(m, input(m, n, 0)), y;
    if (lo == 0.0f && hi == INFINITY)
        y = sl_onnx_op(m, "relu", 1, &x, 0, NULL, 0, NULL);
    else
        y = unary(m, SL_EW_CLIP, x, lo, hi);
    return set_out(m, n, 1, &y);
}

/* Identity, Dropout at inference, Cast to float of a float: the output is
 * the input. */
static int map_alias(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    const char *op = n->op_type;
    if (!strcmp(op, "Dropout")) {
        static const char *const k[] = {"ratio", "seed", "is_test", NULL};
        if (sl_onnx_known_attrs(m, n, k))
            return m->code;
        if (m->opset < 7 && sl_onnx_attr_i(n, "is_test", 0) == 0)
            return UNSUP("is_test 0 (training mode; salus imports inference graphs)");
        struct ent *train = input(m, n, 2);
        if (train && (train->kind != ENT_CONST || train->n != 1 || train->d[0] != 0))
            return UNSUP("training_mode (salus imports inference graphs)");
    } else if (!strcmp(op, "Cast")) {
        static const char *const k[] = {"to", NULL};
        if (sl_onnx_known_attrs(m, n, k))
            return m->code;
        sl_shape s;
        struct ent *x = input(m, n, 0);
        if (x)
            sl_onnx_shape(m, x, &s);
        if (!x || s.dtype != SL_F32 ||
            sl_onnx_attr_i(n, "to", 0) != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
            return UNSUP("only a cast of float to float");
    } else if (sl_onnx_known_attrs(m, n, NO_ATTRS))
        return m->code;
    struct ent *x = input(m, n, 0);
    salus_value v = x ? sl_onnx_value(m, x) : SALUS_NO_VALUE;
    return set_out(m, n, 1, &v);
}

/* Softmax or LogSoftmax along an axis: rows of a 2-D view, the axis moved
 * last first when it is not (opset 13's single-axis form). */
static int map_softmax(sl_onnx_imp *m, const Onnx__NodeProto *n, bool log)
{
    static const char *const k[] = {"axis", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    salus_value x = fvalue(m, input(m, n, 0));
    sl_shape s;
    shape_of(m, x, &s);
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
        shape_of(m, x, &s);
        axis = s.ndim - 1;
    }
    int64_t rows = 1, cols = 1;
    for (unsigned d = 0; d < s.ndim; d++)
        *(d < axis ? &rows : &cols) *= s.dims[d];
    int64_t two[2] = {rows, cols};
    salus_value y = reshape(m, x, 2, two);
    y = sl_onnx_op(m, op, 1, &y, 0, NULL, 0, NULL);
    y = reshape(m, y, s.ndim, s.dims);
    if (moved)
        y = sl_onnx_op(m, "transpose", 1, &y, s.ndim, perm, 0, NULL);
    return set_out(m, n, 1, &y);
}

static int map_matmul(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    if (sl_onnx_known_attrs(m, n, NO_ATTRS))
        return m->code;
    salus_value a = fvalue(m, input(m, n, 0)), b = fvalue(m, input(m, n, 1));
    sl_shape sa, sb;
    shape_of(m, a, &sa);
    shape_of(m, b, &sb);
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
        salus_value in[2] = {reshape(m, a, 2, a2), reshape(m, b, 2, b2)};
        y = sl_onnx_op(m, "matmul", 2, in, 0, NULL, 0, NULL);
    } else {
        int64_t a3[3] = {ba, M, K}, b3[3] = {bb, K, N};
        salus_value in[2] = {reshape(m, a, 3, a3), reshape(m, b, 3, b3)};
        y = sl_onnx_op(m, "batch_matmul", 2, in, 0, NULL, 0, NULL);
    }
    y = reshape(m, y, out.ndim, out.dims);
    return set_out(m, n, 1, &y);
}

static int map_gemm(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"alpha", "beta", "transA", "transB", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    float alpha = sl_onnx_attr_f(n, "alpha", 1), beta = sl_onnx_attr_f(n, "beta", 1);
    int64_t t[2] = {sl_onnx_attr_i(n, "transA", 0) != 0, sl_onnx_attr_i(n, "transB", 0) != 0};
    salus_value in[2] = {fvalue(m, input(m, n, 0)), fvalue(m, input(m, n, 1))};
    salus_value y = sl_onnx_op(m, "matmul", 2, in, 2, t, 0, NULL);
    if (alpha != 1.0f)
        y = sl_onnx_op(m, "scale", 1, &y, 0, NULL, 1, &alpha);
    struct ent *ce = input(m, n, 2);
    if (ce && beta != 0.0f) {
        salus_value c = fvalue(m, ce);
        if (beta != 1.0f)
            c = sl_onnx_op(m, "scale", 1, &c, 0, NULL, 1, &beta);
        sl_shape sy, sc;
        shape_of(m, y, &sy);
        shape_of(m, c, &sc);
        salus_value yc[2] = {y, c};
        if (sc.ndim == 1 && sc.dims[0] == sy.dims[1] && sy.dims[1] > 1)
            y = sl_onnx_op(m, "bias_add", 2, yc, 0, NULL, 0, NULL);
        else
            y = binary(m, SL_EW_ADD, y, c);
    }
    return set_out(m, n, 1, &y);
}

/* The pads of one spatial axis under auto_pad (NOTSET: from pads). */
static int auto_pads(sl_onnx_imp *m, const Onnx__NodeProto *n, unsigned r, const int64_t *in_hw,
                     const int64_t *k, const int64_t *stride, const int64_t *dil, int64_t *pads)
{
    const Onnx__AttributeProto *ap = sl_onnx_attr(n, "auto_pad");
    const char *mode = "NOTSET";
    char buf[16] = "";
    if (ap && ap->has_s) {
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

static int map_conv(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"auto_pad", "dilations", "group", "kernel_shape",
                                    "pads",     "strides",   NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    salus_value x = fvalue(m, input(m, n, 0)), w = fvalue(m, input(m, n, 1));
    sl_shape sx, sw;
    shape_of(m, x, &sx);
    shape_of(m, w, &sw);
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
    salus_value in[2] = {reshape(m, x, 4, xd), reshape(m, w, 4, wd)};
    salus_value y = sl_onnx_op(m, "conv2d", 2, in, 9, at, 0, NULL);
    struct ent *b = input(m, n, 2);
    if (b) {
        salus_value yb[2] = {y, fvalue(m, b)};
        y = sl_onnx_op(m, "channel_bias_add", 2, yb, 0, NULL, 0, NULL);
    }
    if (r == 1) {
        sl_shape sy;
        shape_of(m, y, &sy);
        y = reshape(m, y, 3, sy.dims);
    }
    return set_out(m, n, 1, &y);
}

static int map_pool(sl_onnx_imp *m, const Onnx__NodeProto *n, bool avg, bool global)
{
    static const char *const k[] = {"auto_pad",      "ceil_mode",    "count_include_pad",
                                    "dilations",     "kernel_shape", "pads",
                                    "storage_order", "strides",      NULL};
    if (sl_onnx_known_attrs(m, n, global ? NO_ATTRS : k))
        return m->code;
    salus_value x = fvalue(m, input(m, n, 0));
    sl_shape sx;
    shape_of(m, x, &sx);
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
    x = reshape(m, x, 4, xd);
    salus_value y = sl_onnx_op(m, avg ? "avgpool" : "maxpool", 1, &x, avg ? 9 : 8, at, 0, NULL);
    if (r == 1) {
        sl_shape sy;
        shape_of(m, y, &sy);
        y = reshape(m, y, 3, sy.dims);
    }
    return set_out(m, n, 1, &y);
}

static int map_batchnorm(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"epsilon", "momentum",      "spatial",
                                    "is_test", "training_mode", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    if (sl_onnx_attr_i(n, "spatial", 1) != 1)
        return UNSUP("spatial 0");
    if (m->opset < 7 && sl_onnx_attr_i(n, "is_test", 0) == 0)
        return UNSUP("is_test 0 (training mode; salus imports inference graphs)");
    if (sl_onnx_attr_i(n, "training_mode", 0) != 0)
        return UNSUP("training_mode 1 (salus imports inference graphs)");
    salus_value in[5];
    for (size_t i = 0; i < 5; i++)
        in[i] = fvalue(m, input(m, n, i));
    sl_shape sx;
    shape_of(m, in[0], &sx);
    if (m->code)
        return m->code;
    if (sx.ndim < 2)
        return UNSUP("an input of rank %u", sx.ndim);
    /* any rank as [N, C, rest, 1]: statistics are per channel either way */
    int64_t four[4] = {sx.dims[0], sx.dims[1], 1, 1};
    for (unsigned d = 2; d < sx.ndim; d++)
        four[2] *= sx.dims[d];
    if (sx.ndim != 2 && sx.ndim != 4)
        in[0] = reshape(m, in[0], 4, four);
    float eps = sl_onnx_attr_f(n, "epsilon", 1e-5f);
    salus_value y = sl_onnx_op(m, "batchnorm_infer", 5, in, 0, NULL, 1, &eps);
    y = reshape(m, y, sx.ndim, sx.dims);
    return set_out(m, n, 1, &y);
}

/* The axes of a reduction as a bit mask (all when none are given). */
static int reduce_mask(sl_onnx_imp *m, const Onnx__NodeProto *n, unsigned rank, int64_t *mask)
{
    int64_t axes[SL_MAX_DIMS];
    size_t na = 0;
    struct ent *ax = input(m, n, 1);
    const Onnx__AttributeProto *a = sl_onnx_attr(n, "axes");
    if (ax) {
        if (ax->kind != ENT_CONST || ax->n > SL_MAX_DIMS)
            return UNSUP("axes that are not a constant");
        na = (size_t) ax->n;
        for (size_t i = 0; i < na; i++)
            axes[i] = (int64_t) ax->d[i];
    } else if (a) {
        if (a->n_ints > SL_MAX_DIMS)
            return UNSUP("too many axes");
        na = a->n_ints;
        memcpy(axes, a->ints, na * sizeof *axes);
    }
    if (na == 0 && sl_onnx_attr_i(n, "noop_with_empty_axes", 0))
        return UNSUP("noop_with_empty_axes");
    *mask = 0;
    for (size_t i = 0; i < na; i++) {
        unsigned d;
        if (sl_onnx_axis(m, axes[i], rank, &d))
            return m->code;
        *mask |= (int64_t) 1 << d;
    }
    if (na == 0)
        *mask = ((int64_t) 1 << rank) - 1;
    return SL_OK;
}

/* The reductions ONNX defines over a sum: a function before (abs, square,
 * exp) and after (sqrt, log), or none. */
enum { RED_PLAIN, RED_L1, RED_L2, RED_SUM_SQUARE, RED_LOG_SUM, RED_LOG_SUM_EXP };

static int map_reduce_ex(sl_onnx_imp *m, const Onnx__NodeProto *n, int kind, int form);

static int map_reduce(sl_onnx_imp *m, const Onnx__NodeProto *n, int kind)
{
    return map_reduce_ex(m, n, kind, RED_PLAIN);
}

static int map_reduce_ex(sl_onnx_imp *m, const Onnx__NodeProto *n, int kind, int form)
{
    static const char *const k[] = {"axes", "keepdims", "noop_with_empty_axes", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    salus_value x = fvalue(m, input(m, n, 0));
    sl_shape s;
    shape_of(m, x, &s);
    int64_t mask = 0;
    if (m->code || reduce_mask(m, n, s.ndim, &mask))
        return m->code;
    if (s.ndim == 0)
        return UNSUP("a scalar input");
    if (form == RED_L1)
        x = unary(m, SL_EW_ABS, x, 0, 0);
    else if (form == RED_L2 || form == RED_SUM_SQUARE)
        x = binary(m, SL_EW_MUL, x, x);
    else if (form == RED_LOG_SUM_EXP)
        x = unary(m, SL_EW_EXP, x, 0, 0);
    int64_t at[2] = {kind, mask};
    salus_value y = sl_onnx_op(m, "reduce_axes", 1, &x, 2, at, 0, NULL);
    if (form == RED_L2)
        y = unary(m, SL_EW_SQRT, y, 0, 0);
    else if (form == RED_LOG_SUM || form == RED_LOG_SUM_EXP)
        y = unary(m, SL_EW_LOG, y, 0, 0);
    if (!sl_onnx_attr_i(n, "keepdims", 1)) {
        int64_t dims[SL_MAX_DIMS];
        unsigned nd = 0;
        for (unsigned d = 0; d < s.ndim; d++)
            if (!(mask & ((int64_t) 1 << d)))
                dims[nd++] = s.dims[d];
        y = reshape(m, y, nd, dims);
    }
    return set_out(m, n, 1, &y);
}

static int map_reshape(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"axis", "axes", "allowzero", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    struct ent *x = input(m, n, 0), *arg = input(m, n, 1);
    if (!x)
        return UNSUP("no input");
    if (arg && arg->kind != ENT_CONST)
        return UNSUP("a shape or axes computed at run time (dynamic shape)");
    salus_value v = sl_onnx_value(m, x);
    sl_shape s;
    shape_of(m, v, &s);
    unsigned nd;
    int64_t dims[SL_MAX_DIMS];
    if (m->code || sl_onnx_reshaped(m, n, s.ndim, s.dims, arg, &nd, dims))
        return m->code;
    salus_value y = reshape(m, v, nd, dims);
    return set_out(m, n, 1, &y);
}

static int map_transpose(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"perm", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    struct ent *e = input(m, n, 0);
    salus_value x = e ? sl_onnx_value(m, e) : SALUS_NO_VALUE;
    sl_shape s;
    shape_of(m, x, &s);
    const Onnx__AttributeProto *a = sl_onnx_attr(n, "perm");
    if (m->code)
        return m->code;
    if (a && a->n_ints != s.ndim)
        return UNSUP("perm of %zu values for rank %u", a->n_ints, s.ndim);
    int64_t perm[SL_MAX_DIMS];
    for (unsigned d = 0; d < s.ndim; d++)
        perm[d] = a ? a->ints[d] : (int64_t) (s.ndim - 1 - d);
    salus_value y = sl_onnx_op(m, "transpose", 1, &x, s.ndim, perm, 0, NULL);
    return set_out(m, n, 1, &y);
}

static int map_concat(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"axis", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    if (n->n_input < 1)
        return UNSUP("no inputs");
    struct ent *e = input(m, n, 0);
    salus_value y = e ? sl_onnx_value(m, e) : SALUS_NO_VALUE;
    sl_shape s;
    shape_of(m, y, &s);
    unsigned axis;
    if (m->code || sl_onnx_axis(m, sl_onnx_attr_i(n, "axis", m->opset < 4 ? 1 : 0), s.ndim, &axis))
        return m->code;
    int64_t ax = axis;
    for (size_t i = 1; i < n->n_input; i++) {
        struct ent *b = input(m, n, i);
        salus_value in[2] = {y, b ? sl_onnx_value(m, b) : SALUS_NO_VALUE};
        y = sl_onnx_op(m, "concat", 2, in, 1, &ax, 0, NULL);
    }
    return set_out(m, n, 1, &y);
}

/* One slice per axis that does not keep its whole extent. */
static salus_value slice_axis(sl_onnx_imp *m, salus_value x, unsigned axis, int64_t start,
                              int64_t end, int64_t step)
{
    sl_shape s;
    shape_of(m, x, &s);
    if (axis >= s.ndim)
        return UNSUP("axis beyond the rank"), SALUS_NO_VALUE;
    if (!sl_onnx_slice_range(s.dims[axis], &start, &end, step))
        return UNSUP("an empty slice (salus has no empty tensors)"), SALUS_NO_VALUE;
    if (step == 1 && start == 0 && end == s.dims[axis])
        return x;
    int64_t at[4] = {axis, start, end, step};
    return sl_onnx_op(m, "slice", 1, &x, 4, at, 0, NULL);
}

static int const_ints(sl_onnx_imp *m, struct ent *e, const char *what, int64_t *v, size_t *n)
{
    if (!e || e->kind != ENT_CONST || e->ndim > 1 || e->n > SL_MAX_DIMS)
        return UNSUP("%s that are not a constant list", what);
    *n = (size_t) e->n;
    for (size_t i = 0; i < *n; i++)
        v[i] = e->d[i] >= 9.2e18 ? INT64_MAX : e->d[i] <= -9.2e18 ? INT64_MIN : (int64_t) e->d[i];
    return SL_OK;
}

static int map_slice(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    int64_t st[SL_MAX_DIMS], en[SL_MAX_DIMS], ax[SL_MAX_DIMS], sp[SL_MAX_DIMS];
    size_t ns = 0, ne = 0, na = 0, np = 0;
    struct ent *e = input(m, n, 0);
    salus_value y = e ? sl_onnx_value(m, e) : SALUS_NO_VALUE;
    sl_shape s;
    shape_of(m, y, &s);
    if (m->opset < 10) {
        static const char *const k[] = {"starts", "ends", "axes", NULL};
        if (sl_onnx_known_attrs(m, n, k))
            return m->code;
        const Onnx__AttributeProto *a[3] = {sl_onnx_attr(n, "starts"), sl_onnx_attr(n, "ends"),
                                            sl_onnx_attr(n, "axes")};
        if (!a[0] || !a[1] || a[0]->n_ints > SL_MAX_DIMS || a[1]->n_ints != a[0]->n_ints ||
            (a[2] && a[2]->n_ints != a[0]->n_ints))
            return UNSUP("bad starts/ends/axes");
        ns = ne = a[0]->n_ints;
        memcpy(st, a[0]->ints, ns * sizeof *st);
        memcpy(en, a[1]->ints, ns * sizeof *en);
        if (a[2])
            memcpy(ax, a[2]->ints, ns * sizeof *ax), na = ns;
    } else {
        if (sl_onnx_known_attrs(m, n, NO_ATTRS) ||
            const_ints(m, input(m, n, 1), "starts", st, &ns) ||
            const_ints(m, input(m, n, 2), "ends", en, &ne) ||
            (input(m, n, 3) && const_ints(m, input(m, n, 3), "axes", ax, &na)) ||
            (input(m, n, 4) && const_ints(m, input(m, n, 4), "steps", sp, &np)))
            return m->code;
        if (ne != ns || (na && na != ns) || (np && np != ns))
            return UNSUP("starts, ends, axes and steps of different lengths");
    }
    for (size_t i = 0; i < ns && !m->code; i++) {
        unsigned a;
        if (sl_onnx_axis(m, na ? ax[i] : (int64_t) i, s.ndim, &a))
            break;
        int64_t step = np ? sp[i] : 1;
        if (step == 0)
            return UNSUP("step 0");
        y = slice_axis(m, y, a, st[i], en[i], step);
    }
    return set_out(m, n, 1, &y);
}

static int map_split(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"axis", "split", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    struct ent *e = input(m, n, 0);
    salus_value x = e ? sl_onnx_value(m, e) : SALUS_NO_VALUE;
    sl_shape s;
    shape_of(m, x, &s);
    unsigned axis;
    if (m->code || sl_onnx_axis(m, sl_onnx_attr_i(n, "axis", 0), s.ndim, &axis))
        return m->code;
    size_t parts = n->n_output;
    if (parts == 0 || parts > 64)
        return UNSUP("%zu outputs", parts);
    int64_t len[64];
    size_t nl = 0;
    const Onnx__AttributeProto *a = sl_onnx_attr(n, "split");
    struct ent *se = input(m, n, 1);
    if (se) {
        if (se->kind != ENT_CONST || se->n != parts)
            return UNSUP("split lengths that are not constant");
        for (size_t i = 0; i < parts; i++)
            len[i] = (int64_t) se->d[i];
        nl = parts;
    } else if (a) {
        if (a->n_ints != parts)
            return UNSUP("split of %zu lengths for %zu outputs", a->n_ints, parts);
        memcpy(len, a->ints, parts * sizeof *len);
        nl = parts;
    }
    if (!nl) {
        if (s.dims[axis] % (int64_t) parts)
            return UNSUP("an uneven split");
        for (size_t i = 0; i < parts; i++)
            len[i] = s.dims[axis] / (int64_t) parts;
    }
    salus_value out[64];
    int64_t at = 0;
    for (size_t i = 0; i < parts; i++) {
        if (len[i] < 1 || len[i] > s.dims[axis] - at)
            return UNSUP("split lengths that do not cover the axis");
        out[i] = slice_axis(m, x, axis, at, at + len[i], 1);
        at += len[i];
    }
    if (at != s.dims[axis])
        return UNSUP("split lengths that do not cover the axis");
    return set_out(m, n, parts, out);
}

static int map_gather(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"axis", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    struct ent *d = input(m, n, 0), *ix = input(m, n, 1);
    if (!d || !ix)
        return UNSUP("missing inputs");
    if (ix->kind == ENT_CONST)
        ix->ctype = ix->uploaded ? ix->ctype : CT_INT;
    salus_value in[2] = {sl_onnx_value(m, d), sl_onnx_value(m, ix)};
    sl_shape s;
    shape_of(m, in[0], &s);
    unsigned axis;
    if (m->code || sl_onnx_axis(m, sl_onnx_attr_i(n, "axis", 0), s.ndim, &axis))
        return m->code;
    /* constant indices are checked here, where the node can be named; the
     * kernel checks those fed at run time */
    for (uint64_t i = 0; ix->kind == ENT_CONST && i < ix->n; i++)
        if (ix->d[i] < (double) -s.dims[axis] || ix->d[i] >= (double) s.dims[axis])
            return UNSUP("index %.0f outside [-%lld, %lld)", ix->d[i], (long long) s.dims[axis],
                         (long long) s.dims[axis]);
    int64_t ax = axis;
    salus_value y = sl_onnx_op(m, "gather", 2, in, 1, &ax, 0, NULL);
    return set_out(m, n, 1, &y);
}

/* LayerNormalization (opset 17) as the reductions and element-wise ops of
 * its definition: y = (x - mean) / sqrt(var + epsilon) * scale + bias. */
static int map_layernorm(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"axis", "epsilon", "stash_type", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    salus_value x = fvalue(m, input(m, n, 0));
    sl_shape s;
    shape_of(m, x, &s);
    unsigned axis;
    if (m->code || sl_onnx_axis(m, sl_onnx_attr_i(n, "axis", -1), s.ndim, &axis))
        return m->code;
    int64_t at[2] = {SL_REDUCE_MEAN, (((int64_t) 1 << s.ndim) - 1) & ~(((int64_t) 1 << axis) - 1)};
    salus_value mean = sl_onnx_op(m, "reduce_axes", 1, &x, 2, at, 0, NULL);
    salus_value d = binary(m, SL_EW_SUB, x, mean);
    salus_value var = sl_onnx_op(m, "reduce_axes", 1, (salus_value[]){binary(m, SL_EW_MUL, d, d)},
                                 2, at, 0, NULL);
    salus_value sd =
        unary(m, SL_EW_SQRT,
              binary(m, SL_EW_ADD, var, scalar(m, sl_onnx_attr_f(n, "epsilon", 1e-5f))), 0, 0);
    salus_value y = binary(m, SL_EW_DIV, d, sd);
    y = binary(m, SL_EW_MUL, y, fvalue(m, input(m, n, 1)));
    if (input(m, n, 2))
        y = binary(m, SL_EW_ADD, y, fvalue(m, input(m, n, 2)));
    /* the optional outputs: the mean and 1 / sqrt(var + epsilon), as ONNX
     * keeps them (the reduced dims as 1) */
    salus_value outs[3] = {y, mean, SALUS_NO_VALUE};
    size_t n_out = n->n_output > 3 ? 3 : n->n_output;
    if (n_out == 3 && n->output[2][0])
        outs[2] = unary(m, SL_EW_RECIPROCAL, sd, 0, 0);
    else if (n_out == 3)
        n_out = 2;
    if (n_out == 2 && !n->output[1][0])
        n_out = 1;
    return set_out(m, n, n_out, outs);
}

/* Pad, constant mode: the constant blocks joined on each side of each axis
 * (negative pads slice). */
static int map_pad(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"mode", "pads", "value", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    const Onnx__AttributeProto *mode = sl_onnx_attr(n, "mode");
    if (mode && mode->has_s && (mode->s.len != 8 || memcmp(mode->s.data, "constant", 8)))
        return UNSUP("mode %.*s (salus pads with a constant)",
                     (int) (mode->s.len < 16 ? mode->s.len : 16), (const char *) mode->s.data);
    salus_value y = fvalue(m, input(m, n, 0));
    sl_shape s;
    shape_of(m, y, &s);
    if (m->code)
        return m->code;
    int64_t pads[2 * SL_MAX_DIMS];
    size_t np = 0;
    double value = 0;
    if (m->opset < 11) {
        const Onnx__AttributeProto *pa = sl_onnx_attr(n, "pads");
        if (!pa || pa->n_ints != 2u * s.ndim)
            return UNSUP("pads of the wrong length");
        np = pa->n_ints;
        memcpy(pads, pa->ints, np * sizeof *pads);
        value = sl_onnx_attr_f(n, "value", 0);
    } else {
        struct ent *pe = input(m, n, 1), *ve = input(m, n, 2);
        if (!pe || pe->kind != ENT_CONST || pe->n != 2u * s.ndim)
            return UNSUP("pads that are not a constant of 2 * rank values");
        np = (size_t) pe->n;
        for (size_t i = 0; i < np; i++)
            pads[i] = (int64_t) pe->d[i];
        if (ve && (ve->kind != ENT_CONST || ve->n != 1))
            return UNSUP("a pad value that is not a constant scalar");
        value = ve ? ve->d[0] : 0;
        if (input(m, n, 3))
            return UNSUP("the axes input");
    }
    for (unsigned d = 0; d < s.ndim && !m->code; d++) {
        int64_t before = pads[d], after = pads[d + s.ndim];
        shape_of(m, y, &s);
        if (before < 0 || after < 0) {
            int64_t lo = before < 0 ? -before : 0, hi = s.dims[d] - (after < 0 ? -after : 0);
            if (lo >= hi)
                return UNSUP("pads that leave nothing");
            y = slice_axis(m, y, d, lo, hi, 1);
            shape_of(m, y, &s);
        }
        for (int side = 0; side < 2; side++) {
            int64_t w = side == 0 ? before : after;
            if (w <= 0)
                continue;
            struct ent blk = {.name = "(pad)"};
            int64_t dims[SL_MAX_DIMS];
            memcpy(dims, s.dims, sizeof dims);
            dims[d] = w;
            if (sl_onnx_const_alloc(m, &blk, CT_FLOAT, s.ndim, dims))
                return m->code;
            for (uint64_t i = 0; i < blk.n; i++)
                blk.d[i] = value;
            salus_value b = sl_onnx_value(m, &blk);
            m->const_elems -= blk.n;
            sl_free(blk.d);
            int64_t ax = d;
            salus_value in[2] = {side == 0 ? b : y, side == 0 ? y : b};
            y = sl_onnx_op(m, "concat", 2, in, 1, &ax, 0, NULL);
            shape_of(m, y, &s);
        }
    }
    return set_out(m, n, 1, &y);
}

/* ArgMax / ArgMin along an axis: salus' argmax over rows (the first index
 * on ties, as ONNX without select_last_index), ArgMin as ArgMax of -x. */
static int map_argmax(sl_onnx_imp *m, const Onnx__NodeProto *n, bool min)
{
    static const char *const k[] = {"axis", "keepdims", "select_last_index", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    if (sl_onnx_attr_i(n, "select_last_index", 0))
        return UNSUP("select_last_index 1");
    salus_value x = fvalue(m, input(m, n, 0));
    sl_shape s;
    shape_of(m, x, &s);
    unsigned axis;
    if (m->code || sl_onnx_axis(m, sl_onnx_attr_i(n, "axis", 0), s.ndim, &axis))
        return m->code;
    if (min)
        x = unary(m, SL_EW_NEG, x, 0, 0);
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
    salus_value y =
        sl_onnx_op(m, "argmax", 1, (salus_value[]){reshape(m, x, 2, two)}, 0, NULL, 0, NULL);
    int64_t dims[SL_MAX_DIMS];
    unsigned nd = 0;
    bool keep = sl_onnx_attr_i(n, "keepdims", 1) != 0;
    for (unsigned d = 0; d < s.ndim; d++)
        if (d != axis || keep)
            dims[nd++] = d == axis ? 1 : s.dims[d];
    y = reshape(m, y, nd, dims);
    return set_out(m, n, 1, &y);
}

/* Expand: x broadcast to a constant shape, as x + zeros(shape). */
static int map_expand(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    if (sl_onnx_known_attrs(m, n, NO_ATTRS))
        return m->code;
    struct ent *se = input(m, n, 1);
    if (!se || se->kind != ENT_CONST || se->ndim != 1 || se->n > SL_MAX_DIMS)
        return UNSUP("a shape that is not a constant (dynamic shape)");
    int64_t dims[SL_MAX_DIMS];
    for (uint64_t i = 0; i < se->n; i++)
        if ((dims[i] = (int64_t) se->d[i]) < 1)
            return UNSUP("a shape dim below 1");
    struct ent zeros = {.name = "(expand)"};
    if (sl_onnx_const_alloc(m, &zeros, CT_FLOAT, (unsigned) se->n, dims))
        return m->code;
    salus_value z = sl_onnx_value(m, &zeros);
    m->const_elems -= zeros.n;
    sl_free(zeros.d);
    salus_value y = binary(m, SL_EW_ADD, fvalue(m, input(m, n, 0)), z);
    return set_out(m, n, 1, &y);
}

/* Mean of its inputs (broadcasting): their sum divided by their count. */
static int map_mean(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    if (sl_onnx_known_attrs(m, n, NO_ATTRS))
        return m->code;
    if (n->n_input < 1)
        return UNSUP("no inputs");
    salus_value acc = fvalue(m, input(m, n, 0));
    for (size_t i = 1; i < n->n_input; i++)
        acc = binary(m, SL_EW_ADD, acc, fvalue(m, input(m, n, i)));
    if (n->n_input > 1)
        acc = binary(m, SL_EW_DIV, acc, scalar(m, (double) n->n_input));
    return set_out(m, n, 1, &acc);
}

/* DepthToSpace and SpaceToDepth: a reshape to rank 6, a transpose, a
 * reshape back (ONNX's own definition). */
static int map_depth_space(sl_onnx_imp *m, const Onnx__NodeProto *n, bool to_space)
{
    static const char *const k[] = {"blocksize", "mode", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    salus_value x = fvalue(m, input(m, n, 0));
    sl_shape s;
    shape_of(m, x, &s);
    int64_t b = sl_onnx_attr_i(n, "blocksize", 0);
    if (m->code)
        return m->code;
    if (s.ndim != 4 || b < 1)
        return UNSUP("an input of rank %u or blocksize %lld", s.ndim, (long long) b);
    int64_t N = s.dims[0], C = s.dims[1], H = s.dims[2], W = s.dims[3];
    const Onnx__AttributeProto *mode = sl_onnx_attr(n, "mode");
    bool crd = mode && mode->has_s && mode->s.len == 3 && !memcmp(mode->s.data, "CRD", 3);
    if (mode && mode->has_s && !crd && !(mode->s.len == 3 && !memcmp(mode->s.data, "DCR", 3)))
        return UNSUP("mode %.*s", (int) (mode->s.len < 8 ? mode->s.len : 8),
                     (const char *) mode->s.data);
    int64_t six[6], perm[6], out[4];
    if (to_space) {
        if (C % (b * b))
            return UNSUP("channels not a multiple of blocksize^2");
        int64_t c = C / (b * b);
        if (crd) {
            memcpy(six, (int64_t[]){N, c, b, b, H, W}, sizeof six);
            memcpy(perm, (int64_t[]){0, 1, 4, 2, 5, 3}, sizeof perm);
        } else {
            memcpy(six, (int64_t[]){N, b, b, c, H, W}, sizeof six);
            memcpy(perm, (int64_t[]){0, 3, 4, 1, 5, 2}, sizeof perm);
        }
        memcpy(out, (int64_t[]){N, c, H * b, W * b}, sizeof out);
    } else {
        if (crd)
            return UNSUP("mode CRD");
        if (H % b || W % b)
            return UNSUP("height or width not a multiple of blocksize");
        memcpy(six, (int64_t[]){N, C, H / b, b, W / b, b}, sizeof six);
        memcpy(perm, (int64_t[]){0, 3, 5, 1, 2, 4}, sizeof perm);
        memcpy(out, (int64_t[]){N, C * b * b, H / b, W / b}, sizeof out);
    }
    salus_value y = reshape(m, x, 6, six);
    y = sl_onnx_op(m, "transpose", 1, &y, 6, perm, 0, NULL);
    y = reshape(m, y, 4, out);
    return set_out(m, n, 1, &y);
}

/* InstanceNormalization: per sample and channel over the spatial dims,
 * y = scale[c] * (x - mean) / sqrt(var + epsilon) + bias[c]. */
static int map_instancenorm(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"epsilon", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    salus_value x = fvalue(m, input(m, n, 0));
    sl_shape s;
    shape_of(m, x, &s);
    if (m->code)
        return m->code;
    if (s.ndim < 3)
        return UNSUP("an input of rank %u", s.ndim);
    int64_t at[2] = {SL_REDUCE_MEAN, (((int64_t) 1 << s.ndim) - 1) & ~(int64_t) 3};
    salus_value mean = sl_onnx_op(m, "reduce_axes", 1, &x, 2, at, 0, NULL);
    salus_value d = binary(m, SL_EW_SUB, x, mean);
    salus_value var = sl_onnx_op(m, "reduce_axes", 1, (salus_value[]){binary(m, SL_EW_MUL, d, d)},
                                 2, at, 0, NULL);
    salus_value sd =
        unary(m, SL_EW_SQRT,
              binary(m, SL_EW_ADD, var, scalar(m, sl_onnx_attr_f(n, "epsilon", 1e-5f))), 0, 0);
    /* scale and bias [C] as [C, 1, ...] against [N, C, ...] */
    int64_t cdims[SL_MAX_DIMS] = {s.dims[1]};
    for (unsigned i = 1; i + 1 < s.ndim; i++)
        cdims[i] = 1;
    salus_value sc = reshape(m, fvalue(m, input(m, n, 1)), s.ndim - 1, cdims);
    salus_value bi = reshape(m, fvalue(m, input(m, n, 2)), s.ndim - 1, cdims);
    salus_value y = binary(m, SL_EW_ADD, binary(m, SL_EW_MUL, binary(m, SL_EW_DIV, d, sd), sc), bi);
    return set_out(m, n, 1, &y);
}

int sl_onnx_map(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    const char *op = n->op_type;
    for (size_t i = 0; i < n->n_input; i++)
        if (n->input[i][0] && !sl_onnx_find(m, n->input[i]))
            return sl_onnx_fail(m, SL_EINVAL, "input '%.64s' is not defined before", n->input[i]);
    static const struct {
        const char *name;
        int kind;
    } bin[] = {{"Add", SL_EW_ADD}, {"Sub", SL_EW_SUB}, {"Mul", SL_EW_MUL},
               {"Div", SL_EW_DIV}, {"Pow", SL_EW_POW}, {"Max", SL_EW_MAX},
               {"Min", SL_EW_MIN}, {"Sum", SL_EW_ADD}, {"PRelu", SL_EW_PRELU}},
      un[] = {{"Sqrt", SL_EW_SQRT},
              {"Erf", SL_EW_ERF},
              {"Exp", SL_EW_EXP},
              {"Log", SL_EW_LOG},
              {"Neg", SL_EW_NEG},
              {"Abs", SL_EW_ABS},
              {"Reciprocal", SL_EW_RECIPROCAL},
              {"LeakyRelu", SL_EW_LEAKY_RELU},
              {"Floor", SL_EW_FLOOR},
              {"Ceil", SL_EW_CEIL},
              {"HardSigmoid", SL_EW_HARD_SIGMOID},
              {"Elu", SL_EW_ELU},
              {"Selu", SL_EW_SELU},
              {"Softplus", SL_EW_SOFTPLUS},
              {"Softsign", SL_EW_SOFTSIGN},
              {"Sin", SL_EW_SIN},
              {"Cos", SL_EW_COS},
              {"Sign", SL_EW_SIGN},
              {"Tan", SL_EW_TAN},
              {"Sinh", SL_EW_SINH},
              {"Cosh", SL_EW_COSH},
              {"Asin", SL_EW_ASIN},
              {"Acos", SL_EW_ACOS},
              {"Atan", SL_EW_ATAN},
              {"Asinh", SL_EW_ASINH},
              {"Acosh", SL_EW_ACOSH},
              {"Atanh", SL_EW_ATANH},
              {"Round", SL_EW_ROUND},
              {"ThresholdedRelu", SL_EW_THRESHOLDED_RELU},
              {"HardSwish", SL_EW_HARD_SWISH},
              {"Celu", SL_EW_CELU},
              {"Shrink", SL_EW_SHRINK}},
      red[] = {{"ReduceSum", SL_REDUCE_SUM},
               {"ReduceMean", SL_REDUCE_MEAN},
               {"ReduceMax", SL_REDUCE_MAX},
               {"ReduceMin", SL_REDUCE_MIN}};
    for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++)
        if (!strcmp(op, bin[i].name))
            return map_binary(m, n, bin[i].kind);
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++)
        if (!strcmp(op, un[i].name))
            return map_unary(m, n, un[i].kind);
    for (size_t i = 0; i < sizeof red / sizeof red[0]; i++)
        if (!strcmp(op, red[i].name))
            return map_reduce(m, n, red[i].kind);
    if (!strcmp(op, "Relu"))
        return map_simple(m, n, "relu");
    if (!strcmp(op, "Sigmoid"))
        return map_simple(m, n, "sigmoid");
    if (!strcmp(op, "Tanh"))
        return map_simple(m, n, "tanh");
    if (!strcmp(op, "Clip"))
        return map_clip(m, n);
    if (!strcmp(op, "Identity") || !strcmp(op, "Dropout") || !strcmp(op, "Cast"))
        return map_alias(m, n);
    if (!strcmp(op, "Softmax") || !strcmp(op, "LogSoftmax"))
        return map_softmax(m, n, op[0] == 'L');
    if (!strcmp(op, "MatMul"))
        return map_matmul(m, n);
    if (!strcmp(op, "Gemm"))
        return map_gemm(m, n);
    if (!strcmp(op, "Conv"))
        return map_conv(m, n);
    if (!strcmp(op, "MaxPool") || !strcmp(op, "AveragePool"))
        return map_pool(m, n, op[0] == 'A', false);
    if (!strcmp(op, "GlobalAveragePool") || !strcmp(op, "GlobalMaxPool"))
        return map_pool(m, n, op[6] == 'A', true);
    if (!strcmp(op, "BatchNormalization"))
        return map_batchnorm(m, n);
    if (!strcmp(op, "Reshape") || !strcmp(op, "Flatten") || !strcmp(op, "Squeeze") ||
        !strcmp(op, "Unsqueeze"))
        return map_reshape(m, n);
    if (!strcmp(op, "Transpose"))
        return map_transpose(m, n);
    if (!strcmp(op, "Concat"))
        return map_concat(m, n);
    if (!strcmp(op, "Slice"))
        return map_slice(m, n);
    if (!strcmp(op, "Split"))
        return map_split(m, n);
    if (!strcmp(op, "Gather"))
        return map_gather(m, n);
    if (!strcmp(op, "LayerNormalization"))
        return map_layernorm(m, n);
    if (!strcmp(op, "Pad"))
        return map_pad(m, n);
    if (!strcmp(op, "Mean"))
        return map_mean(m, n);
    if (!strcmp(op, "DepthToSpace") || !strcmp(op, "SpaceToDepth"))
        return map_depth_space(m, n, op[0] == 'D');
    if (!strcmp(op, "InstanceNormalization"))
        return map_instancenorm(m, n);
    if (!strcmp(op, "ReduceL1"))
        return map_reduce_ex(m, n, SL_REDUCE_SUM, RED_L1);
    if (!strcmp(op, "ReduceL2"))
        return map_reduce_ex(m, n, SL_REDUCE_SUM, RED_L2);
    if (!strcmp(op, "ReduceSumSquare"))
        return map_reduce_ex(m, n, SL_REDUCE_SUM, RED_SUM_SQUARE);
    if (!strcmp(op, "ReduceLogSum"))
        return map_reduce_ex(m, n, SL_REDUCE_SUM, RED_LOG_SUM);
    if (!strcmp(op, "ReduceLogSumExp"))
        return map_reduce_ex(m, n, SL_REDUCE_SUM, RED_LOG_SUM_EXP);
    if (!strcmp(op, "ArgMax") || !strcmp(op, "ArgMin"))
        return map_argmax(m, n, op[4] == 'i');
    if (!strcmp(op, "Expand"))
        return map_expand(m, n);
    return UNSUP("op %.32s is not supported", op);
}
