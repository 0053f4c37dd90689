/* ONNX nodes mapped to salus ops. Each mapper accepts only the attributes
 * it implements (anything else is refused by name), reads operands that
 * must be constants (shapes, axes, clip bounds) from folded entries, and
 * refuses what it cannot compute exactly as ONNX defines it: a node is
 * either imported faithfully or refused with the reason. */
#include "onnx_ops.h"

#include <float.h>
#include <stdio.h>
#include <math.h>
#include <string.h>

/* Input i of n: its entry, or NULL (absent or empty name). */
struct ent *sl_onnx_input(sl_onnx_imp *m, const Onnx__NodeProto *n, size_t i)
{
    if (i >= n->n_input || !n->input[i][0])
        return NULL;
    return sl_onnx_find(m, n->input[i]);
}

/* An input's graph value as f32 (integer constants uploaded as floats). */
salus_value sl_onnx_fvalue(sl_onnx_imp *m, struct ent *e)
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

salus_value sl_onnx_scalar(sl_onnx_imp *m, double v)
{
    struct ent tmp = {.name = "(scalar)"};
    if (sl_onnx_const_alloc(m, &tmp, CT_FLOAT, 0, NULL))
        return SALUS_NO_VALUE;
    tmp.d[0] = v;
    salus_value r = sl_onnx_value(m, &tmp);
    sl_free(tmp.d);
    return r;
}

void sl_onnx_shape_of(sl_onnx_imp *m, salus_value v, sl_shape *s)
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
int sl_onnx_set_out(sl_onnx_imp *m, const Onnx__NodeProto *n, size_t produced, const salus_value *v)
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
        salus_value out = sl_onnx_autocast_out(m, n->output[i], v[i]);
        if (out == SALUS_NO_VALUE)
            return m->code;
        struct ent *e;
        int rc = sl_onnx_add(m, n->output[i], &e);
        if (rc)
            return rc;
        e->kind = ENT_VALUE;
        e->v = out;
    }
    return SL_OK;
}

salus_value sl_onnx_reshape(sl_onnx_imp *m, salus_value x, unsigned nd, const int64_t *dims)
{
    sl_shape s;
    sl_onnx_shape_of(m, x, &s);
    if (s.ndim == nd && memcmp(s.dims, dims, nd * sizeof *dims) == 0)
        return x;
    return sl_onnx_op(m, "reshape", 1, &x, nd, dims, 0, NULL);
}

salus_value sl_onnx_binary(sl_onnx_imp *m, int kind, salus_value a, salus_value b)
{
    sl_shape sa, sb;
    sl_onnx_shape_of(m, a, &sa);
    sl_onnx_shape_of(m, b, &sb);
    salus_value in[2] = {a, b};
    if (sl_shape_equal(&sa, &sb) && (kind == 0 || kind == 2))
        return sl_onnx_op(m, kind == 0 ? "add" : "mul", 2, in, 0, NULL, 0, NULL);
    int64_t k = kind;
    return sl_onnx_op(m, "ew_binary", 2, in, 1, &k, 0, NULL);
}

salus_value sl_onnx_unary(sl_onnx_imp *m, int kind, salus_value x, float p, float q)
{
    int64_t k = kind;
    float f[2] = {p, q};
    return sl_onnx_op(m, "ew_unary", 1, &x, 1, &k, 2, f);
}

const char *const sl_onnx_no_attrs[] = {NULL};

static int map_binary(sl_onnx_imp *m, const Onnx__NodeProto *n, int kind)
{
    /* before opset 7 the arithmetic ops broadcast only when asked, and then
     * b aligned at `axis` of a (numpy's alignment is at the right) */
    static const char *const legacy[] = {"broadcast", "axis", NULL};
    if (sl_onnx_known_attrs(m, n, m->opset < 7 ? legacy : sl_onnx_no_attrs))
        return m->code;
    if (n->n_input < 1)
        return UNSUP("no inputs");
    salus_value acc = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    for (size_t i = 1; i < n->n_input; i++) { /* Sum, Max, Min are variadic */
        salus_value b = sl_onnx_fvalue(m, sl_onnx_input(m, n, i));
        const Onnx__AttributeProto *ax = sl_onnx_attr(n, "axis");
        if (ax && ax->has_i && sl_onnx_attr_i(n, "broadcast", 0) && n->n_input == 2) {
            sl_shape sa, sb;
            sl_onnx_shape_of(m, acc, &sa);
            sl_onnx_shape_of(m, b, &sb);
            unsigned axis;
            if (m->code || sl_onnx_axis(m, ax->i, sa.ndim, &axis))
                return m->code;
            if (axis + sb.ndim > sa.ndim)
                return UNSUP("b does not fit at axis %u", axis);
            int64_t dims[SL_MAX_DIMS];
            unsigned nd = 0;
            for (unsigned d = 0; d < sb.ndim; d++)
                dims[nd++] = sb.dims[d];
            while (nd < sa.ndim - axis)
                dims[nd++] = 1;
            b = sl_onnx_reshape(m, b, nd, dims);
        }
        acc = sl_onnx_binary(m, kind, acc, b);
    }
    return sl_onnx_set_out(m, n, 1, &acc);
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
                                                         : sl_onnx_no_attrs))
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
    salus_value y = sl_onnx_unary(m, kind, sl_onnx_fvalue(m, sl_onnx_input(m, n, 0)), p, q);
    return sl_onnx_set_out(m, n, 1, &y);
}

/* Mod of float values: with fmod (required for floats) C's, the dividend's
 * sign: a - b * trunc(a / b), trunc(q) = sign(q) * floor(|q|). Python's
 * (integer inputs, folded when constant) a - b * floor(a / b). */
static int map_mod(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"fmod", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    salus_value a = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    salus_value b = sl_onnx_fvalue(m, sl_onnx_input(m, n, 1));
    salus_value q = sl_onnx_binary(m, SL_EW_DIV, a, b);
    if (sl_onnx_attr_i(n, "fmod", 0))
        q = sl_onnx_binary(
            m, SL_EW_MUL, sl_onnx_unary(m, SL_EW_SIGN, q, 0, 0),
            sl_onnx_unary(m, SL_EW_FLOOR, sl_onnx_unary(m, SL_EW_ABS, q, 0, 0), 0, 0));
    else
        q = sl_onnx_unary(m, SL_EW_FLOOR, q, 0, 0);
    salus_value y = sl_onnx_binary(m, SL_EW_SUB, a, sl_onnx_binary(m, SL_EW_MUL, b, q));
    return sl_onnx_set_out(m, n, 1, &y);
}

/* Trilu of a graph value: y = max(min(x, hi), lo) with hi = +inf, lo = -inf
 * where an element is kept and both 0 where it is zeroed: exact for every
 * x, infinities included (a 0/1 mask would turn a masked -inf into NaN).
 * The bounds are [rows, cols] constants broadcast over the leading axes; k
 * must be a constant. */
static int map_trilu(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const attrs[] = {"upper", NULL};
    if (sl_onnx_known_attrs(m, n, attrs))
        return m->code;
    struct ent *ke = sl_onnx_input(m, n, 1);
    if (ke && ke->kind != ENT_CONST)
        return UNSUP("k that is not a constant");
    int64_t k = ke && ke->n ? (int64_t) ke->d[0] : 0;
    bool upper = sl_onnx_attr_i(n, "upper", 1) != 0;
    salus_value x = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    sl_shape s;
    sl_onnx_shape_of(m, x, &s);
    if (m->code)
        return m->code;
    if (s.ndim < 2)
        return UNSUP("an input of rank %u", s.ndim);
    int64_t dims[2] = {s.dims[s.ndim - 2], s.dims[s.ndim - 1]};
    struct ent hi = {.name = "(trilu upper bound)"}, lo = {.name = "(trilu lower bound)"};
    if (sl_onnx_const_alloc(m, &hi, CT_FLOAT, 2, dims) ||
        sl_onnx_const_alloc(m, &lo, CT_FLOAT, 2, dims)) {
        sl_free(hi.d);
        return m->code;
    }
    for (int64_t r = 0; r < dims[0]; r++)
        for (int64_t c = 0; c < dims[1]; c++) {
            bool keep = upper ? c - r >= k : c - r <= k;
            hi.d[r * dims[1] + c] = keep ? INFINITY : 0;
            lo.d[r * dims[1] + c] = keep ? -INFINITY : 0;
        }
    salus_value hv = sl_onnx_value(m, &hi), lv = sl_onnx_value(m, &lo);
    sl_free(hi.d), sl_free(lo.d);
    salus_value y = sl_onnx_binary(m, SL_EW_MAX, sl_onnx_binary(m, SL_EW_MIN, x, hv), lv);
    return sl_onnx_set_out(m, n, 1, &y);
}

static int map_simple(sl_onnx_imp *m, const Onnx__NodeProto *n, const char *op)
{
    if (sl_onnx_known_attrs(m, n, sl_onnx_no_attrs))
        return m->code;
    salus_value x = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    salus_value y = sl_onnx_op(m, op, 1, &x, 0, NULL, 0, NULL);
    return sl_onnx_set_out(m, n, 1, &y);
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
        if (sl_onnx_known_attrs(m, n, sl_onnx_no_attrs))
            return m->code;
        struct ent *lo_e = sl_onnx_input(m, n, 1), *hi_e = sl_onnx_input(m, n, 2);
        if ((lo_e && (lo_e->kind != ENT_CONST || lo_e->n != 1)) ||
            (hi_e && (hi_e->kind != ENT_CONST || hi_e->n != 1))) {
            /* bounds computed at run time: min(max(x, lo), hi), NaN
             * propagating as Clip's does */
            salus_value y = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
            if (lo_e)
                y = sl_onnx_binary(m, SL_EW_MAX, y, sl_onnx_fvalue(m, lo_e));
            if (hi_e)
                y = sl_onnx_binary(m, SL_EW_MIN, y, sl_onnx_fvalue(m, hi_e));
            return sl_onnx_set_out(m, n, 1, &y);
        }
        if (lo_e)
            lo = (float) lo_e->d[0];
        if (hi_e)
            hi = (float) hi_e->d[0];
    }
    if (!(lo <= hi))
        return UNSUP("min above max");
    salus_value x = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0)), y;
    if (lo == 0.0f && hi == INFINITY)
        y = sl_onnx_op(m, "relu", 1, &x, 0, NULL, 0, NULL);
    else
        y = sl_onnx_unary(m, SL_EW_CLIP, x, lo, hi);
    return sl_onnx_set_out(m, n, 1, &y);
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
        struct ent *train = sl_onnx_input(m, n, 2);
        if (train && (train->kind != ENT_CONST || train->n != 1 || train->d[0] != 0))
            return UNSUP("training_mode (salus imports inference graphs)");
    } else if (sl_onnx_known_attrs(m, n, sl_onnx_no_attrs))
        return m->code;
    struct ent *x = sl_onnx_input(m, n, 0);
    salus_value v = x ? sl_onnx_value(m, x) : SALUS_NO_VALUE;
    return sl_onnx_set_out(m, n, 1, &v);
}

/* Cast between the float types salus computes in (float, float16,
 * bfloat16): the same type is the value itself, another the registry's
 * cast (rounding to nearest even). Casts from or to bools and integers are
 * onnx_ops_mask.c's. */
static int map_cast(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"to", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    struct ent *x = sl_onnx_input(m, n, 0);
    if (!x)
        return UNSUP("a required input is missing");
    sl_shape s;
    sl_onnx_shape(m, x, &s);
    int64_t to_type = sl_onnx_attr_i(n, "to", 0);
    int to = sl_onnx_float_dtype(to_type);
    if (!sl_dtype_is_float(s.dtype) || to < 0)
        return sl_onnx_map_cast_int(m, n, x, to_type);
    salus_value v = sl_onnx_value(m, x);
    if (v != SALUS_NO_VALUE && (unsigned) to != s.dtype) {
        int64_t attr = to;
        v = sl_onnx_op(m, "cast", 1, &v, 1, &attr, 0, NULL);
    }
    return v == SALUS_NO_VALUE ? m->code : sl_onnx_set_out(m, n, 1, &v);
}

/* Expand: x broadcast to a constant shape, as x + zeros(shape). */
static int map_expand(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    if (sl_onnx_known_attrs(m, n, sl_onnx_no_attrs))
        return m->code;
    struct ent *se = sl_onnx_input(m, n, 1);
    if (!se || se->kind != ENT_CONST || se->ndim != 1 || se->n > SL_MAX_DIMS)
        return UNSUP("a shape that is not a constant (dynamic shape)");
    int64_t dims[SL_MAX_DIMS];
    for (uint64_t i = 0; i < se->n; i++)
        if ((dims[i] = (int64_t) se->d[i]) < 1)
            return UNSUP("a shape dim below 1");
    /* a bool mask (an i32 of 0s and 1s) is broadcast by or with zeros */
    struct ent *x = sl_onnx_input(m, n, 0);
    bool mask = x && x->kind == ENT_VALUE && x->boolean;
    struct ent zeros = {.name = "(expand)"};
    if (sl_onnx_const_alloc(m, &zeros, mask ? CT_INT : CT_FLOAT, (unsigned) se->n, dims))
        return m->code;
    salus_value z = sl_onnx_value(m, &zeros), y;
    m->const_elems -= zeros.n;
    sl_free(zeros.d);
    if (mask) {
        salus_value in[2] = {sl_onnx_value(m, x), z};
        int64_t k = SL_CMP_OR;
        y = sl_onnx_op(m, "compare", 2, in, 1, &k, 0, NULL);
    } else
        y = sl_onnx_binary(m, SL_EW_ADD, sl_onnx_fvalue(m, x), z);
    int rc = sl_onnx_set_out(m, n, 1, &y);
    struct ent *e = rc == SL_OK && mask && n->output[0][0] ? sl_onnx_find(m, n->output[0]) : NULL;
    if (e)
        e->boolean = true;
    return rc;
}

/* Mean of its inputs (broadcasting): their sum divided by their count. */
static int map_mean(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    if (sl_onnx_known_attrs(m, n, sl_onnx_no_attrs))
        return m->code;
    if (n->n_input < 1)
        return UNSUP("no inputs");
    salus_value acc = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    for (size_t i = 1; i < n->n_input; i++)
        acc = sl_onnx_binary(m, SL_EW_ADD, acc, sl_onnx_fvalue(m, sl_onnx_input(m, n, i)));
    if (n->n_input > 1)
        acc = sl_onnx_binary(m, SL_EW_DIV, acc, sl_onnx_scalar(m, (double) n->n_input));
    return sl_onnx_set_out(m, n, 1, &acc);
}

/* PRelu before opset 7: a slope of C values applies per channel (axis 1),
 * one value to all. */
static int map_prelu_legacy(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    if (sl_onnx_known_attrs(m, n, sl_onnx_no_attrs))
        return m->code;
    salus_value x = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    salus_value slope = sl_onnx_fvalue(m, sl_onnx_input(m, n, 1));
    sl_shape sx, ss;
    sl_onnx_shape_of(m, x, &sx);
    sl_onnx_shape_of(m, slope, &ss);
    if (m->code)
        return m->code;
    if (sx.ndim >= 2 && ss.ndim == 1 && ss.dims[0] == sx.dims[1] && ss.dims[0] > 1) {
        int64_t dims[SL_MAX_DIMS] = {ss.dims[0]};
        for (unsigned d = 1; d + 1 < sx.ndim; d++)
            dims[d] = 1;
        slope = sl_onnx_reshape(m, slope, sx.ndim - 1, dims);
    }
    salus_value y = sl_onnx_binary(m, SL_EW_PRELU, x, slope);
    return sl_onnx_set_out(m, n, 1, &y);
}

static int dispatch(sl_onnx_imp *m, const Onnx__NodeProto *n);

/* The ops that move or select elements of their first input without
 * changing them: of a bool, their outputs are bools. */
static bool moves_elements(const char *op)
{
    static const char *const movers[] = {
        "Reshape", "Flatten", "Squeeze",  "Unsqueeze", "Transpose",    "Concat",      "Slice",
        "Split",   "Gather",  "Identity", "Tile",      "DepthToSpace", "SpaceToDepth"};
    for (size_t i = 0; i < sizeof movers / sizeof *movers; i++)
        if (!strcmp(op, movers[i]))
            return true;
    return false;
}

int sl_onnx_map(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    struct ent *x = n->n_input && n->input[0][0] ? sl_onnx_find(m, n->input[0]) : NULL;
    bool of_bool = x && x->kind == ENT_VALUE && x->boolean && moves_elements(n->op_type);
    int rc = dispatch(m, n);
    for (size_t i = 0; rc == SL_OK && of_bool && i < n->n_output; i++) {
        struct ent *e = n->output[i][0] ? sl_onnx_find(m, n->output[i]) : NULL;
        if (e && e->kind == ENT_VALUE)
            e->boolean = true;
    }
    return rc;
}

static int dispatch(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    const char *op = n->op_type;
    for (size_t i = 0; i < n->n_input; i++)
        if (n->input[i][0] && !sl_onnx_find(m, n->input[i]))
            return sl_onnx_fail(m, SL_EINVAL, "input '%.64s' is not defined before", n->input[i]);
    /* the node's float dtype, for the constants made for it */
    m->fdtype = SL_F32;
    m->up = false;
    m->n_ups = 0;
    for (size_t i = 0, found = 0; i < n->n_input && !found; i++) {
        struct ent *e = sl_onnx_input(m, n, i);
        sl_shape s = {0};
        if (e && e->kind == ENT_VALUE)
            sl_onnx_shape(m, e, &s);
        else if (e && e->ctype == CT_FLOAT && e->fdtype)
            s.dtype = (uint8_t) (e->fdtype - 1);
        else
            continue;
        if ((found = sl_dtype_is_float(s.dtype)) != 0)
            m->fdtype = s.dtype;
    }
    bool fused;
    int rc = sl_onnx_fuse(m, n, &fused);
    if (rc || fused)
        return rc;
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
    if (!strcmp(op, "PRelu") && m->opset < 7)
        return map_prelu_legacy(m, n);
    for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++)
        if (!strcmp(op, bin[i].name))
            return map_binary(m, n, bin[i].kind);
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++)
        if (!strcmp(op, un[i].name))
            return map_unary(m, n, un[i].kind);
    for (size_t i = 0; i < sizeof red / sizeof red[0]; i++)
        if (!strcmp(op, red[i].name))
            return sl_onnx_map_reduce(m, n, red[i].kind);
    if (!strcmp(op, "Relu"))
        return map_simple(m, n, "relu");
    if (!strcmp(op, "Sigmoid"))
        return map_simple(m, n, "sigmoid");
    if (!strcmp(op, "Tanh"))
        return map_simple(m, n, "tanh");
    if (!strcmp(op, "Clip"))
        return map_clip(m, n);
    if (!strcmp(op, "Identity") || !strcmp(op, "Dropout"))
        return map_alias(m, n);
    if (!strcmp(op, "Cast"))
        return map_cast(m, n);
    if (!strcmp(op, "Softmax") || !strcmp(op, "LogSoftmax"))
        return sl_onnx_map_softmax(m, n, op[0] == 'L');
    if (!strcmp(op, "MatMul"))
        return sl_onnx_map_matmul(m, n);
    if (!strcmp(op, "Gemm"))
        return sl_onnx_map_gemm(m, n);
    if (!strcmp(op, "Conv"))
        return sl_onnx_map_conv(m, n);
    if (!strcmp(op, "MaxPool") || !strcmp(op, "AveragePool"))
        return sl_onnx_map_pool(m, n, op[0] == 'A', false);
    if (!strcmp(op, "GlobalAveragePool") || !strcmp(op, "GlobalMaxPool"))
        return sl_onnx_map_pool(m, n, op[6] == 'A', true);
    if (!strcmp(op, "BatchNormalization"))
        return sl_onnx_map_batchnorm(m, n);
    if (!strcmp(op, "Reshape") || !strcmp(op, "Flatten") || !strcmp(op, "Squeeze") ||
        !strcmp(op, "Unsqueeze"))
        return sl_onnx_map_reshape(m, n);
    if (!strcmp(op, "Transpose"))
        return sl_onnx_map_transpose(m, n);
    if (!strcmp(op, "Concat"))
        return sl_onnx_map_concat(m, n);
    if (!strcmp(op, "Slice"))
        return sl_onnx_map_slice(m, n);
    if (!strcmp(op, "Split"))
        return sl_onnx_map_split(m, n);
    if (!strcmp(op, "Gather"))
        return sl_onnx_map_gather(m, n);
    if (!strcmp(op, "LayerNormalization"))
        return sl_onnx_map_layernorm(m, n);
    if (!strcmp(op, "Pad"))
        return sl_onnx_map_pad(m, n);
    if (!strcmp(op, "ConvTranspose"))
        return sl_onnx_map_conv_transpose(m, n);
    if (!strcmp(op, "Tile"))
        return sl_onnx_map_tile(m, n);
    if (!strcmp(op, "Mod"))
        return map_mod(m, n);
    if (!strcmp(op, "Trilu"))
        return map_trilu(m, n);
    if (!strcmp(op, "Resize"))
        return sl_onnx_map_resize(m, n);
    if (!strcmp(op, "Upsample"))
        return sl_onnx_map_upsample(m, n);
    if (!strcmp(op, "LSTM"))
        return sl_onnx_map_lstm(m, n);
    if (!strcmp(op, "GRU"))
        return sl_onnx_map_gru(m, n);
    if (!strcmp(op, "RNN"))
        return sl_onnx_map_rnn(m, n);
    if (!strcmp(op, "Mean"))
        return map_mean(m, n);
    if (!strcmp(op, "DepthToSpace") || !strcmp(op, "SpaceToDepth"))
        return sl_onnx_map_depth_space(m, n, op[0] == 'D');
    if (!strcmp(op, "InstanceNormalization"))
        return sl_onnx_map_instancenorm(m, n);
    if (!strcmp(op, "ReduceL1"))
        return sl_onnx_map_reduce_ex(m, n, SL_REDUCE_SUM, RED_L1);
    if (!strcmp(op, "ReduceL2"))
        return sl_onnx_map_reduce_ex(m, n, SL_REDUCE_SUM, RED_L2);
    if (!strcmp(op, "ReduceSumSquare"))
        return sl_onnx_map_reduce_ex(m, n, SL_REDUCE_SUM, RED_SUM_SQUARE);
    if (!strcmp(op, "ReduceLogSum"))
        return sl_onnx_map_reduce_ex(m, n, SL_REDUCE_SUM, RED_LOG_SUM);
    if (!strcmp(op, "ReduceLogSumExp"))
        return sl_onnx_map_reduce_ex(m, n, SL_REDUCE_SUM, RED_LOG_SUM_EXP);
    if (!strcmp(op, "ArgMax") || !strcmp(op, "ArgMin"))
        return sl_onnx_map_argmax(m, n, op[4] == 'i');
    if (!strcmp(op, "Expand"))
        return map_expand(m, n);
    static const struct {
        const char *name;
        int kind;
    } cmp[] = {{"Equal", SL_CMP_EQ},
               {"Less", SL_CMP_LT},
               {"LessOrEqual", SL_CMP_LE},
               {"Greater", SL_CMP_GT},
               {"GreaterOrEqual", SL_CMP_GE},
               {"And", SL_CMP_AND},
               {"Or", SL_CMP_OR},
               {"Xor", SL_CMP_XOR}};
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++)
        if (!strcmp(op, cmp[i].name))
            return sl_onnx_map_compare(m, n, cmp[i].kind);
    if (!strcmp(op, "Not"))
        return sl_onnx_map_not(m, n);
    if (!strcmp(op, "Where"))
        return sl_onnx_map_where(m, n);
    return UNSUP("op %.32s is not supported", op);
}
