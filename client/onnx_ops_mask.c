/* ONNX nodes on bool tensors: comparisons (Equal, Less, Greater and their
 * OrEqual forms), logic (Not, And, Or, Xor), Where, and the Casts that
 * start or end at a bool or an integer. salus has no bool dtype: a bool is
 * an i32 of 0 or 1, the masks that the registry's compare makes and its
 * where and masked_fill read. An entry remembers when its ONNX type is
 * bool (ent.boolean), which is what makes a Cast of it to a float exact. */
#include "onnx_ops.h"

#include <math.h>

static bool is_float_ent(sl_onnx_imp *m, const struct ent *e)
{
    if (e->kind == ENT_CONST)
        return e->ctype == CT_FLOAT;
    sl_shape s;
    sl_onnx_shape(m, e, &s);
    return sl_dtype_is_float(s.dtype);
}

/* A scalar i32 constant uploaded for this graph. */
static salus_value int_scalar(sl_onnx_imp *m, int64_t v)
{
    struct ent tmp = {.name = "(int scalar)"};
    if (sl_onnx_const_alloc(m, &tmp, CT_INT, 0, NULL))
        return SALUS_NO_VALUE;
    tmp.d[0] = (double) v;
    salus_value r = sl_onnx_value(m, &tmp);
    sl_free(tmp.d);
    return r;
}

/* Names n's only output v and records that it is an ONNX bool. */
static int set_bool_out(sl_onnx_imp *m, const Onnx__NodeProto *n, salus_value v)
{
    int rc = sl_onnx_set_out(m, n, 1, &v);
    struct ent *e =
        rc == SL_OK && n->n_output && n->output[0][0] ? sl_onnx_find(m, n->output[0]) : NULL;
    if (e)
        e->boolean = true;
    return rc;
}

/* a kind b as a mask: floats when either operand is a float (an integer
 * constant beside it is uploaded as one), else both as i32. */
static salus_value compare(sl_onnx_imp *m, int kind, struct ent *a, struct ent *b)
{
    if (!a || !b)
        return UNSUP("a required input is missing"), SALUS_NO_VALUE;
    bool fa = is_float_ent(m, a), fb = is_float_ent(m, b);
    if (fa != fb && (a->kind == ENT_VALUE && b->kind == ENT_VALUE))
        return UNSUP("one operand is a float and the other an integer"), SALUS_NO_VALUE;
    salus_value in[2];
    if (fa || fb)
        in[0] = sl_onnx_fvalue(m, a), in[1] = sl_onnx_fvalue(m, b);
    else
        in[0] = sl_onnx_value(m, a), in[1] = sl_onnx_value(m, b);
    int64_t k = kind;
    return sl_onnx_op(m, "compare", 2, in, 1, &k, 0, NULL);
}

int sl_onnx_map_compare(sl_onnx_imp *m, const Onnx__NodeProto *n, int kind)
{
    if (sl_onnx_known_attrs(m, n, sl_onnx_no_attrs))
        return m->code;
    if (n->n_input != 2)
        return UNSUP("%zu inputs", n->n_input);
    salus_value y = compare(m, kind, sl_onnx_input(m, n, 0), sl_onnx_input(m, n, 1));
    return set_bool_out(m, n, y);
}

/* Not x: x == 0. */
int sl_onnx_map_not(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    if (sl_onnx_known_attrs(m, n, sl_onnx_no_attrs))
        return m->code;
    struct ent *x = sl_onnx_input(m, n, 0);
    if (!x)
        return UNSUP("a required input is missing");
    salus_value in[2] = {sl_onnx_value(m, x), int_scalar(m, 0)};
    int64_t k = SL_CMP_EQ;
    salus_value y = sl_onnx_op(m, "compare", 2, in, 1, &k, 0, NULL);
    return set_bool_out(m, n, y);
}

/* The mask of a condition: itself when it is an integer (a bool carried as
 * i32), else where it is nonzero. */
static salus_value mask_of(sl_onnx_imp *m, struct ent *c)
{
    if (!c)
        return UNSUP("a required input is missing"), SALUS_NO_VALUE;
    if (!is_float_ent(m, c))
        return sl_onnx_value(m, c);
    salus_value in[2] = {sl_onnx_fvalue(m, c), sl_onnx_scalar(m, 0)};
    int64_t k = SL_CMP_NE;
    return sl_onnx_op(m, "compare", 2, in, 1, &k, 0, NULL);
}

/* Whether shape s broadcasts to shape t without growing it. */
static bool broadcasts_to(const sl_shape *s, const sl_shape *t)
{
    if (s->ndim > t->ndim)
        return false;
    for (unsigned d = 0, off = t->ndim - s->ndim; d < s->ndim; d++)
        if (s->dims[d] != 1 && s->dims[d] != t->dims[d + off])
            return false;
    return true;
}

/* Where(cond, a, b). A one-element constant a beside a b of the output's
 * shape is masked_fill (an attention mask's -inf): no tensor of the fill,
 * and b's memory can take the result. */
int sl_onnx_map_where(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    if (sl_onnx_known_attrs(m, n, sl_onnx_no_attrs))
        return m->code;
    struct ent *c = sl_onnx_input(m, n, 0), *a = sl_onnx_input(m, n, 1),
               *b = sl_onnx_input(m, n, 2);
    if (!c || !a || !b)
        return UNSUP("a required input is missing");
    if (!is_float_ent(m, a) || !is_float_ent(m, b))
        return UNSUP("a selection between integers (salus selects between floats)");
    salus_value mask = mask_of(m, c);
    salus_value bv = sl_onnx_fvalue(m, b), y;
    sl_shape ms, bs;
    sl_onnx_shape_of(m, mask, &ms);
    sl_onnx_shape_of(m, bv, &bs);
    if (m->code)
        return m->code;
    bool fill = a->kind == ENT_CONST && a->n == 1 && !isnan(a->d[0]) && a->ndim <= bs.ndim &&
                broadcasts_to(&ms, &bs);
    if (fill) {
        salus_value in[2] = {bv, mask};
        float v = (float) a->d[0];
        y = sl_onnx_op(m, "masked_fill", 2, in, 0, NULL, 1, &v);
    } else {
        salus_value in[3] = {mask, sl_onnx_fvalue(m, a), bv};
        y = sl_onnx_op(m, "where", 3, in, 0, NULL, 0, NULL);
    }
    return sl_onnx_set_out(m, n, 1, &y);
}

/* The integer ONNX types whose values a bool's 0 and 1, or an i32, fit. */
static bool is_int_type(int64_t t)
{
    switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64:
        return true;
    default:
        return false;
    }
}

int sl_onnx_map_cast_int(sl_onnx_imp *m, const Onnx__NodeProto *n, struct ent *x, int64_t to_type)
{
    int to = sl_onnx_float_dtype(to_type);
    bool from_float = is_float_ent(m, x), src_bool = x->kind == ENT_VALUE && x->boolean;
    salus_value y = SALUS_NO_VALUE;
    if (to_type == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL) {
        if (src_bool)
            return set_bool_out(m, n, sl_onnx_value(m, x));
        /* nonzero is true (NaN included, as ONNX's) */
        salus_value in[2] = {from_float ? sl_onnx_fvalue(m, x) : sl_onnx_value(m, x),
                             from_float ? sl_onnx_scalar(m, 0) : int_scalar(m, 0)};
        int64_t k = SL_CMP_NE;
        return set_bool_out(m, n, sl_onnx_op(m, "compare", 2, in, 1, &k, 0, NULL));
    }
    if (from_float)
        return UNSUP("a cast from a float to ONNX data type %lld: salus casts floats to float, "
                     "float16, bfloat16 and bool",
                     (long long) to_type);
    if (is_int_type(to_type)) {
        /* an i32 stays an i32: the narrower types hold a bool's 0 and 1,
         * the wider ones every i32 */
        bool narrow = to_type != ONNX__TENSOR_PROTO__DATA_TYPE__INT32 &&
                      to_type != ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
        if (narrow && !src_bool)
            return UNSUP("a cast of integers to ONNX data type %lld (salus carries integers as "
                         "i32)",
                         (long long) to_type);
        y = sl_onnx_value(m, x);
        return sl_onnx_set_out(m, n, 1, &y);
    }
    if (to < 0)
        return UNSUP("a cast to ONNX data type %lld", (long long) to_type);
    if (!src_bool)
        return UNSUP("a cast of i32 integers to a float (salus converts bools: 0 and 1)");
    /* a bool to a float: where(x, 1, 0) in the target dtype */
    m->fdtype = (uint8_t) to;
    salus_value in[3] = {sl_onnx_value(m, x), sl_onnx_scalar(m, 1), sl_onnx_scalar(m, 0)};
    y = sl_onnx_op(m, "where", 3, in, 0, NULL, 0, NULL);
    return sl_onnx_set_out(m, n, 1, &y);
}
