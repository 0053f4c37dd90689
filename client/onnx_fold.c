/* Constant folding at import: Constant nodes, Shape and Size of any value
 * (every shape is static), and the shape arithmetic PyTorch's exporter
 * emits around Reshape and Flatten (Gather, Concat, Unsqueeze, Slice, Cast,
 * integer math) when all inputs are constants. Values are held as double:
 * exact for float32 and for integers below 2^53, which shapes are; a
 * sentinel such as INT64_MAX (Slice's "to the end") rounds up and is
 * clamped back when read as an integer. Anything not folded here is mapped
 * to salus ops (onnx_ops.c). */
#include "half.h"
#include "onnx_ops.h"

#include <math.h>
#include <string.h>

/* A double read as an int64, saturating (2^63 is not an int64). */
static int64_t to_i64(double v)
{
    if (isnan(v))
        return 0;
    if (v >= 9.2233720368547758e18)
        return INT64_MAX;
    if (v <= -9.2233720368547758e18)
        return INT64_MIN;
    return (int64_t) v;
}

/* Moves a finished constant tmp into a new entry named name. */
static int emit(sl_onnx_imp *m, const char *name, struct ent *tmp)
{
    struct ent *e;
    int rc = sl_onnx_add(m, name, &e);
    if (rc) {
        sl_free(tmp->d);
        return rc;
    }
    tmp->name = e->name;
    tmp->v = SALUS_NO_VALUE;
    tmp->uploaded = false;
    *e = *tmp;
    return SL_OK;
}

static int new_const(sl_onnx_imp *m, struct ent *tmp, int ctype, unsigned ndim, const int64_t *dims)
{
    *tmp = (struct ent){.name = "(folded)"};
    return sl_onnx_const_alloc(m, tmp, ctype, ndim, dims);
}

/* Integer values of a 1-D (or scalar) constant, at most max of them. */
static int ints_of(sl_onnx_imp *m, const struct ent *e, int64_t *out, size_t max, size_t *n)
{
    if (e->ndim > 1 || e->n > max)
        return sl_onnx_fail(m, SL_EUNSUPPORTED, "'%.64s': need at most %zu integers", e->name, max);
    for (uint64_t i = 0; i < e->n; i++)
        out[i] = to_i64(e->d[i]);
    *n = (size_t) e->n;
    return SL_OK;
}

/* ONNX Mod: with fmod (C's, the dividend's sign; floats always) or
 * Python's (the divisor's sign). A zero divisor gives 0. */
static double mod(double a, double b, bool cmod)
{
    if (b == 0)
        return 0;
    return cmod ? fmod(a, b) : a - b * floor(a / b);
}

static double binop(const char *op, double a, double b, bool ints)
{
    if (!strcmp(op, "Add"))
        return a + b;
    if (!strcmp(op, "Sub"))
        return a - b;
    if (!strcmp(op, "Mul"))
        return a * b;
    if (!strcmp(op, "Div"))
        return ints ? (b == 0 ? 0 : trunc(a / b)) : (double) ((float) a / (float) b);
    if (!strcmp(op, "Pow"))
        return pow(a, b);
    if (!strcmp(op, "Equal"))
        return a == b;
    if (!strcmp(op, "Less"))
        return a < b;
    if (!strcmp(op, "Greater"))
        return a > b;
    if (!strcmp(op, "LessOrEqual"))
        return a <= b;
    if (!strcmp(op, "GreaterOrEqual"))
        return a >= b;
    if (!strcmp(op, "And"))
        return a != 0 && b != 0;
    if (!strcmp(op, "Or"))
        return a != 0 || b != 0;
    if (!strcmp(op, "Xor"))
        return (a != 0) != (b != 0);
    if (!strcmp(op, "Max"))
        return a > b ? a : b;
    return a < b ? a : b; /* Min */
}

/* Broadcast shape of a and b into out (numpy rules). */
static int bcast_shape(sl_onnx_imp *m, const struct ent *a, const struct ent *b, unsigned *nd,
                       int64_t *dims)
{
    unsigned n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (unsigned d = 0; d < n; d++) {
        int da = (int) d - (int) (n - a->ndim), db = (int) d - (int) (n - b->ndim);
        int64_t x = da >= 0 ? a->dims[da] : 1, y = db >= 0 ? b->dims[db] : 1;
        if (x != y && x != 1 && y != 1)
            return sl_onnx_fail(m, SL_EINVAL, "constants do not broadcast");
        dims[d] = x == 1 ? y : x;
    }
    *nd = n;
    return SL_OK;
}

/* Offset into e of the element at out-index idx under broadcasting. */
static uint64_t bcast_off(const struct ent *e, unsigned nd, const int64_t *idx)
{
    uint64_t off = 0;
    unsigned skip = nd - e->ndim;
    for (unsigned d = 0; d < e->ndim; d++)
        off = off * (uint64_t) e->dims[d] + (uint64_t) (e->dims[d] == 1 ? 0 : idx[d + skip]);
    return off;
}

static void next_index(int64_t *idx, const int64_t *dims, unsigned nd)
{
    for (int d = (int) nd - 1; d >= 0; d--) {
        if (++idx[d] < dims[d])
            return;
        idx[d] = 0;
    }
}

/* The ops folded as fold_binary's whose result is a bool. */
static const char *const cmp_ops[] = {"Equal",          "Less", "Greater", "LessOrEqual",
                                      "GreaterOrEqual", "And",  "Or",      "Xor"};

static bool is_cmp(const char *op)
{
    for (size_t i = 0; i < sizeof cmp_ops / sizeof *cmp_ops; i++)
        if (!strcmp(op, cmp_ops[i]))
            return true;
    return false;
}

static int fold_binary(sl_onnx_imp *m, const Onnx__NodeProto *n, struct ent **in, struct ent *out)
{
    unsigned nd = 0;
    int64_t dims[SL_MAX_DIMS] = {0};
    int rc = bcast_shape(m, in[0], in[1], &nd, dims);
    bool ints = in[0]->ctype == CT_INT && in[1]->ctype == CT_INT;
    bool cmp = is_cmp(n->op_type);
    if (rc || (rc = new_const(m, out, ints || cmp ? CT_INT : CT_FLOAT, nd, dims)))
        return rc;
    int64_t idx[SL_MAX_DIMS] = {0};
    for (uint64_t i = 0; i < out->n; i++, next_index(idx, dims, nd)) {
        double a = in[0]->d[bcast_off(in[0], nd, idx)], b = in[1]->d[bcast_off(in[1], nd, idx)];
        double v = !strcmp(n->op_type, "Mod") ? mod(a, b, !ints || sl_onnx_attr_i(n, "fmod", 0))
                                              : binop(n->op_type, a, b, ints);
        out->d[i] = out->ctype == CT_FLOAT ? (double) (float) v : v;
    }
    return SL_OK;
}

static int fold_gather(sl_onnx_imp *m, const Onnx__NodeProto *n, struct ent **in, struct ent *out)
{
    const struct ent *x = in[0], *ix = in[1];
    unsigned axis;
    int rc = sl_onnx_axis(m, sl_onnx_attr_i(n, "axis", 0), x->ndim, &axis);
    if (rc)
        return rc;
    if (x->ndim - 1 + ix->ndim > SL_MAX_DIMS)
        return sl_onnx_fail(m, SL_EUNSUPPORTED, "result rank above %d", SL_MAX_DIMS);
    int64_t dims[SL_MAX_DIMS];
    unsigned k = 0;
    for (unsigned d = 0; d < axis; d++)
        dims[k++] = x->dims[d];
    for (unsigned d = 0; d < ix->ndim; d++)
        dims[k++] = ix->dims[d];
    for (unsigned d = axis + 1; d < x->ndim; d++)
        dims[k++] = x->dims[d];
    if ((rc = new_const(m, out, x->ctype, k, dims)))
        return rc;
    uint64_t outer = 1, inner = 1, dim = (uint64_t) x->dims[axis];
    for (unsigned d = 0; d < axis; d++)
        outer *= (uint64_t) x->dims[d];
    for (unsigned d = axis + 1; d < x->ndim; d++)
        inner *= (uint64_t) x->dims[d];
    for (uint64_t o = 0, w = 0; o < outer; o++)
        for (uint64_t j = 0; j < ix->n; j++) {
            int64_t i = to_i64(ix->d[j]);
            if (i < -(int64_t) dim || i >= (int64_t) dim) /* out->d: the caller frees */
                return sl_onnx_fail(m, SL_EINVAL, "index %lld out of range", (long long) i);
            uint64_t src = (o * dim + (uint64_t) (i < 0 ? i + (int64_t) dim : i)) * inner;
            memcpy(out->d + w, x->d + src, inner * sizeof *out->d);
            w += inner;
        }
    return SL_OK;
}

static int fold_concat(sl_onnx_imp *m, const Onnx__NodeProto *n, struct ent **in, size_t n_in,
                       struct ent *out, int64_t dflt_axis)
{
    if (n_in == 0)
        return sl_onnx_fail(m, SL_EINVAL, "no inputs");
    unsigned axis;
    int rc = sl_onnx_axis(m, sl_onnx_attr_i(n, "axis", dflt_axis), in[0]->ndim, &axis);
    if (rc)
        return rc;
    int64_t dims[SL_MAX_DIMS];
    memcpy(dims, in[0]->dims, sizeof dims);
    dims[axis] = 0;
    for (size_t i = 0; i < n_in; i++) {
        if (in[i]->ndim != in[0]->ndim)
            return sl_onnx_fail(m, SL_EINVAL, "inputs of different ranks");
        for (unsigned d = 0; d < in[0]->ndim; d++)
            if (d != axis && in[i]->dims[d] != in[0]->dims[d])
                return sl_onnx_fail(m, SL_EINVAL, "inputs differ off the axis");
        dims[axis] += in[i]->dims[axis];
    }
    if ((rc = new_const(m, out, in[0]->ctype, in[0]->ndim, dims)))
        return rc;
    uint64_t outer = 1, inner = 1;
    for (unsigned d = 0; d < axis; d++)
        outer *= (uint64_t) dims[d];
    for (unsigned d = axis + 1; d < in[0]->ndim; d++)
        inner *= (uint64_t) dims[d];
    uint64_t w = 0;
    for (uint64_t o = 0; o < outer; o++)
        for (size_t i = 0; i < n_in; i++) {
            uint64_t len = (uint64_t) in[i]->dims[axis] * inner;
            memcpy(out->d + w, in[i]->d + o * len, len * sizeof *out->d);
            w += len;
        }
    return SL_OK;
}

/* Copies data with a new shape (Reshape, Flatten, Squeeze, Unsqueeze,
 * Identity, Cast). */
static int fold_view(sl_onnx_imp *m, const struct ent *x, unsigned nd, const int64_t *dims,
                     int ctype, struct ent *out)
{
    int rc = new_const(m, out, ctype, nd, dims);
    if (rc)
        return rc;
    if (out->n != x->n) /* out->d: the caller frees */
        return sl_onnx_fail(m, SL_EINVAL, "%llu elements reshaped to %llu",
                            (unsigned long long) x->n, (unsigned long long) out->n);
    memcpy(out->d, x->d, x->n * sizeof *out->d);
    return SL_OK;
}

/* The new shape of a Reshape, Flatten, Squeeze or Unsqueeze (onnx_ops.h). */
int sl_onnx_reshaped(sl_onnx_imp *m, const Onnx__NodeProto *n, unsigned xnd, const int64_t *xdims,
                     const struct ent *arg, unsigned *nd, int64_t *dims)
{
    const char *op = n->op_type;
    int64_t v[SL_MAX_DIMS + 1];
    size_t nv = 0;
    int rc;
    uint64_t elems = 1;
    for (unsigned d = 0; d < xnd; d++)
        elems *= (uint64_t) xdims[d];
    if (!strcmp(op, "Reshape")) {
        if (!arg)
            return sl_onnx_fail(m, SL_EUNSUPPORTED, "a shape that is not a constant");
        if ((rc = ints_of(m, arg, v, SL_MAX_DIMS, &nv)))
            return rc;
        if (sl_onnx_attr_i(n, "allowzero", 0))
            return sl_onnx_fail(m, SL_EUNSUPPORTED, "allowzero=1");
        int infer = -1;
        uint64_t known = 1;
        for (size_t d = 0; d < nv; d++) {
            if (v[d] == 0) {
                if (d >= xnd)
                    return sl_onnx_fail(m, SL_EINVAL, "shape copies a dim the input lacks");
                v[d] = xdims[d];
            }
            if (v[d] == -1 && infer < 0) {
                infer = (int) d;
                continue;
            }
            if (v[d] < 1)
                return sl_onnx_fail(m, SL_EUNSUPPORTED, "shape dim %lld", (long long) v[d]);
            known *= (uint64_t) v[d];
        }
        if (infer >= 0) {
            if (known == 0 || elems % known)
                return sl_onnx_fail(m, SL_EINVAL, "cannot infer the -1 dim");
            v[infer] = (int64_t) (elems / known);
        }
    } else if (!strcmp(op, "Flatten")) {
        unsigned axis;
        int64_t a = sl_onnx_attr_i(n, "axis", 1);
        if (a == (int64_t) xnd)
            axis = xnd;
        else if ((rc = sl_onnx_axis(m, a, xnd, &axis)))
            return rc;
        int64_t lead = 1;
        for (unsigned d = 0; d < axis; d++)
            lead *= xdims[d];
        v[0] = lead;
        v[1] = (int64_t) elems / lead;
        nv = 2;
    } else {
        /* Squeeze / Unsqueeze: axes from the attribute (opset < 13) or arg */
        int64_t axes[SL_MAX_DIMS + 1];
        size_t na = 0;
        if (arg) {
            if ((rc = ints_of(m, arg, axes, SL_MAX_DIMS, &na)))
                return rc;
        } else {
            const Onnx__AttributeProto *at = sl_onnx_attr(n, "axes");
            if (at) {
                if (at->n_ints > SL_MAX_DIMS)
                    return sl_onnx_fail(m, SL_EUNSUPPORTED, "too many axes");
                na = at->n_ints;
                sl_onnx_ints(axes, at, na);
            }
        }
        bool sq = !strcmp(op, "Squeeze");
        unsigned out_nd = sq ? xnd : xnd + (unsigned) na;
        if (out_nd > SL_MAX_DIMS)
            return sl_onnx_fail(m, SL_EUNSUPPORTED, "rank above %d", SL_MAX_DIMS);
        bool mark[SL_MAX_DIMS + 1] = {false};
        for (size_t i = 0; i < na; i++) {
            unsigned ax;
            if ((rc = sl_onnx_axis(m, axes[i], sq ? xnd : out_nd, &ax)))
                return rc;
            if (mark[ax] || (sq && xdims[ax] != 1))
                return sl_onnx_fail(m, SL_EINVAL, "bad axis %lld", (long long) axes[i]);
            mark[ax] = true;
        }
        if (sq) {
            for (unsigned d = 0; d < xnd; d++)
                if (na ? !mark[d] : xdims[d] != 1)
                    v[nv++] = xdims[d];
        } else {
            for (unsigned d = 0, k = 0; d < out_nd; d++)
                v[nv++] = mark[d] ? 1 : xdims[k++];
        }
    }
    *nd = (unsigned) nv;
    memcpy(dims, v, nv * sizeof *dims);
    return SL_OK;
}

/* ONNX Slice's starts/ends clamped for one axis of extent dim (onnx_ops.h). */
bool sl_onnx_slice_range(int64_t dim, int64_t *start, int64_t *end, int64_t step)
{
    int64_t s = *start, e = *end;
    if (s < 0)
        s = s < -dim ? -dim : s, s += dim;
    if (e < 0)
        e = e < -dim ? -dim : e, e += dim;
    if (step > 0) {
        s = s > dim ? dim : s;
        e = e > dim ? dim : e;
        *start = s, *end = e;
        return s < e;
    }
    s = s > dim - 1 ? dim - 1 : s;
    e = e > dim - 1 ? dim - 1 : e;
    if (*end < -dim) /* to the beginning, inclusive */
        e = -1;
    *start = s, *end = e;
    return s > e;
}

/* How many leading inputs folding op reads: each must be given (an absent
 * optional input is NULL in in[]). */
static size_t fold_inputs(const char *op, size_t n_in)
{
    static const char *const two[] = {"Add",   "Sub",  "Mul",     "Div",    "Pow",
                                      "Equal", "Less", "Greater", "Gather", "Mod"};
    static const char *const three[] = {"Where", "Range"}; /* Slice: its own check */
    for (size_t i = 0; i < sizeof two / sizeof *two; i++)
        if (!strcmp(op, two[i]))
            return 2;
    if (is_cmp(op))
        return 2;
    for (size_t i = 0; i < sizeof three / sizeof *three; i++)
        if (!strcmp(op, three[i]))
            return 3;
    if (!strcmp(op, "Concat") || ((!strcmp(op, "Max") || !strcmp(op, "Min")) && n_in == 2))
        return n_in;
    return 1;
}

static int fold_node(sl_onnx_imp *m, const Onnx__NodeProto *n, struct ent **in, size_t n_in,
                     struct ent *out)
{
    const char *op = n->op_type;
    for (size_t i = 0, need = fold_inputs(op, n_in); i < need; i++)
        if (i >= n_in || !in[i])
            return sl_onnx_fail(m, SL_EINVAL, "%.32s needs input %zu", op, i + 1);
    struct ent *x = in[0];
    if (!strcmp(op, "Identity") || !strcmp(op, "Dropout"))
        return fold_view(m, x, x->ndim, x->dims, x->ctype, out);
    if (!strcmp(op, "Cast")) {
        int64_t to = sl_onnx_attr_i(n, "to", 0);
        int fdtype = sl_onnx_float_dtype(to);
        bool f = fdtype >= 0 || to == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
        int rc = fold_view(m, x, x->ndim, x->dims, f ? CT_FLOAT : CT_INT, out);
        if (f)
            out->fdtype = (uint8_t) ((fdtype >= 0 ? fdtype : SL_F32) + 1);
        for (uint64_t i = 0; rc == SL_OK && i < out->n; i++)
            out->d[i] = to == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL ? out->d[i] != 0
                        : fdtype == SL_F32                        ? (double) (float) out->d[i]
                        : fdtype == SL_F16  ? sl_f32_from_f16(sl_f16_from_f32((float) out->d[i]))
                        : fdtype == SL_BF16 ? sl_f32_from_bf16(sl_bf16_from_f32((float) out->d[i]))
                        : f                 ? out->d[i]
                                            : trunc(out->d[i]);
        return rc;
    }
    if (!strcmp(op, "Reshape") || !strcmp(op, "Flatten") || !strcmp(op, "Squeeze") ||
        !strcmp(op, "Unsqueeze")) {
        unsigned nd = 0;
        int64_t dims[SL_MAX_DIMS];
        int rc = sl_onnx_reshaped(m, n, x->ndim, x->dims, n_in > 1 ? in[1] : NULL, &nd, dims);
        return rc ? rc : fold_view(m, x, nd, dims, x->ctype, out);
    }
    if (!strcmp(op, "Gather"))
        return fold_gather(m, n, in, out);
    if (!strcmp(op, "Concat"))
        return fold_concat(m, n, in, n_in, out, m->opset < 4 ? 1 : 0);
    if (!strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") || !strcmp(op, "Div") ||
        !strcmp(op, "Pow") || is_cmp(op) || !strcmp(op, "Mod") ||
        ((!strcmp(op, "Max") || !strcmp(op, "Min")) && n_in == 2))
        return fold_binary(m, n, in, out);
    if (!strcmp(op, "Trilu")) {
        /* zero the elements above (upper = 0) or below the k-th diagonal of
         * the last two axes */
        int64_t k = n_in > 1 && in[1] ? (in[1]->n ? (int64_t) in[1]->d[0] : 0) : 0;
        bool upper = sl_onnx_attr_i(n, "upper", 1) != 0;
        if (x->ndim < 2)
            return sl_onnx_fail(m, SL_EINVAL, "Trilu of rank %u", x->ndim);
        int rc = fold_view(m, x, x->ndim, x->dims, x->ctype, out);
        int64_t rows = x->dims[x->ndim - 2], cols = x->dims[x->ndim - 1];
        for (uint64_t i = 0; rc == SL_OK && i < out->n; i++) {
            int64_t c = (int64_t) (i % (uint64_t) cols),
                    r = (int64_t) (i / (uint64_t) cols % (uint64_t) rows);
            if (upper ? c - r < k : c - r > k)
                out->d[i] = 0;
        }
        return rc;
    }
    if (!strcmp(op, "Neg") || !strcmp(op, "Sqrt") || !strcmp(op, "Not") || !strcmp(op, "Abs") ||
        !strcmp(op, "Floor") || !strcmp(op, "Ceil")) {
        int rc = fold_view(m, x, x->ndim, x->dims, x->ctype, out);
        for (uint64_t i = 0; rc == SL_OK && i < out->n; i++) {
            double v = out->d[i];
            v = op[0] == 'N'   ? (op[1] == 'e' ? -v : v == 0)
                : op[0] == 'S' ? sqrt(v)
                : op[0] == 'A' ? fabs(v)
                : op[0] == 'F' ? floor(v)
                               : ceil(v);
            out->d[i] = out->ctype == CT_FLOAT ? (double) (float) v : v;
        }
        return rc;
    }
    if (!strcmp(op, "Where")) {
        /* folded only when all three have one shape: what shape code emits */
        /* (a broadcasting one is left to the mapper: a where op) */
        if (n_in != 3 || in[0]->n != in[1]->n || in[1]->n != in[2]->n)
            return SL_EUNSUPPORTED;
        int rc = fold_view(m, in[1], in[1]->ndim, in[1]->dims, in[1]->ctype, out);
        for (uint64_t i = 0; rc == SL_OK && i < out->n; i++)
            out->d[i] = in[0]->d[i] != 0 ? in[1]->d[i] : in[2]->d[i];
        return rc;
    }
    if (!strcmp(op, "ConstantOfShape")) {
        int64_t dims[SL_MAX_DIMS + 1];
        size_t nd;
        int rc = ints_of(m, x, dims, SL_MAX_DIMS, &nd);
        if (rc)
            return rc;
        const Onnx__AttributeProto *a = sl_onnx_attr(n, "value");
        struct ent val = {.name = "value"};
        double fill = 0;
        int ctype = CT_FLOAT;
        if (a && a->t) {
            if ((rc = sl_onnx_tensor(m, a->t, &val))) {
                sl_free(val.d);
                return rc;
            }
            fill = val.n ? val.d[0] : 0;
            ctype = val.ctype;
            m->const_elems -= val.n;
            sl_free(val.d);
        }
        if ((rc = new_const(m, out, ctype, (unsigned) nd, dims)))
            return rc;
        for (uint64_t i = 0; i < out->n; i++)
            out->d[i] = fill;
        return SL_OK;
    }
    if (!strcmp(op, "Range")) {
        if (n_in != 3 || in[0]->n != 1 || in[1]->n != 1 || in[2]->n != 1 || in[2]->d[0] == 0)
            return sl_onnx_fail(m, SL_EINVAL, "bad Range");
        double start = in[0]->d[0], limit = in[1]->d[0], delta = in[2]->d[0];
        double cnt = ceil((limit - start) / delta);
        int64_t len = cnt > 0 ? (int64_t) fmin(cnt, (double) SL_ONNX_MAX_CONST_ELEMS) : 0;
        int rc = new_const(m, out, in[0]->ctype, 1, &len);
        for (int64_t i = 0; rc == SL_OK && i < len; i++)
            out->d[i] = start + (double) i * delta;
        return rc;
    }
    if (!strcmp(op, "Slice")) {
        if (m->opset < 10 || n_in < 3)
            return sl_onnx_fail(m, SL_EUNSUPPORTED, "Slice of constants before opset 10");
        if (!in[1] || !in[2])
            return sl_onnx_fail(m, SL_EINVAL, "Slice needs its starts and ends");
        int64_t st[SL_MAX_DIMS + 1], en[SL_MAX_DIMS + 1], ax[SL_MAX_DIMS + 1], sp[SL_MAX_DIMS + 1];
        size_t ns, ne, na = 0, np = 0;
        int rc = ints_of(m, in[1], st, SL_MAX_DIMS, &ns);
        if (!rc)
            rc = ints_of(m, in[2], en, SL_MAX_DIMS, &ne);
        bool axes = n_in > 3 && in[3], steps = n_in > 4 && in[4]; /* optional */
        if (!rc && axes)
            rc = ints_of(m, in[3], ax, SL_MAX_DIMS, &na);
        if (!rc && steps)
            rc = ints_of(m, in[4], sp, SL_MAX_DIMS, &np);
        if (rc)
            return rc;
        if (ns != ne || (axes && na != ns) || (steps && np != ns))
            return sl_onnx_fail(m, SL_EINVAL, "Slice inputs of different lengths");
        int64_t lo[SL_MAX_DIMS] = {0}, step[SL_MAX_DIMS], dims[SL_MAX_DIMS];
        for (unsigned d = 0; d < x->ndim; d++)
            step[d] = 1, dims[d] = x->dims[d];
        for (size_t i = 0; i < ns; i++) {
            unsigned a;
            if ((rc = sl_onnx_axis(m, axes ? ax[i] : (int64_t) i, x->ndim, &a)))
                return rc;
            int64_t s = st[i], e = en[i], p = steps ? sp[i] : 1;
            if (p == 0)
                return sl_onnx_fail(m, SL_EINVAL, "step 0");
            bool any = sl_onnx_slice_range(x->dims[a], &s, &e, p);
            lo[a] = s, step[a] = p;
            dims[a] = !any ? 0 : p > 0 ? (e - s + p - 1) / p : (s - e + (-p) - 1) / (-p);
        }
        if ((rc = new_const(m, out, x->ctype, x->ndim, dims)))
            return rc;
        int64_t idx[SL_MAX_DIMS] = {0};
        for (uint64_t i = 0; i < out->n; i++, next_index(idx, dims, x->ndim)) {
            uint64_t off = 0;
            for (unsigned d = 0; d < x->ndim; d++)
                off = off * (uint64_t) x->dims[d] + (uint64_t) (lo[d] + idx[d] * step[d]);
            out->d[i] = x->d[off];
        }
        return SL_OK;
    }
    if (!strcmp(op, "Transpose")) {
        const Onnx__AttributeProto *a = sl_onnx_attr(n, "perm");
        int64_t perm[SL_MAX_DIMS], dims[SL_MAX_DIMS], st[SL_MAX_DIMS];
        if (a && a->n_ints != x->ndim)
            return sl_onnx_fail(m, SL_EINVAL, "perm of the wrong length");
        for (unsigned d = 0; d < x->ndim; d++) {
            perm[d] = a ? a->ints[d] : (int64_t) (x->ndim - 1 - d);
            if (perm[d] < 0 || perm[d] >= x->ndim)
                return sl_onnx_fail(m, SL_EINVAL, "bad perm");
            dims[d] = x->dims[perm[d]];
        }
        uint64_t acc = 1;
        for (int d = (int) x->ndim - 1; d >= 0; d--)
            st[d] = (int64_t) acc, acc *= (uint64_t) x->dims[d];
        int rc = new_const(m, out, x->ctype, x->ndim, dims);
        int64_t idx[SL_MAX_DIMS] = {0};
        for (uint64_t i = 0; rc == SL_OK && i < out->n; i++, next_index(idx, dims, x->ndim)) {
            uint64_t off = 0;
            for (unsigned d = 0; d < x->ndim; d++)
                off += (uint64_t) (idx[d] * st[perm[d]]);
            out->d[i] = x->d[off];
        }
        return rc;
    }
    return SL_EUNSUPPORTED; /* not foldable: map it */
}

int sl_onnx_fold(sl_onnx_imp *m, const Onnx__NodeProto *n, bool *folded)
{
    const char *op = n->op_type;
    /* the folded constant; its storage is freed here on any error */
    struct ent tmp = {.name = "(folded)"};
    int rc;
    *folded = false;
    if (!strcmp(op, "Constant")) {
        const Onnx__AttributeProto *a = n->n_attribute == 1 ? n->attribute[0] : NULL;
        if (!a || n->n_output != 1)
            return sl_onnx_fail(m, SL_EUNSUPPORTED, "a Constant needs exactly one attribute");
        tmp = (struct ent){.name = "(constant)"};
        const char *an = a->name ? a->name : "";
        if (!strcmp(an, "value") && a->t)
            rc = sl_onnx_tensor(m, a->t, &tmp);
        else if (!strcmp(an, "value_float") || !strcmp(an, "value_int")) {
            rc = new_const(m, &tmp, an[6] == 'f' ? CT_FLOAT : CT_INT, 0, NULL);
            if (!rc)
                tmp.d[0] = an[6] == 'f' ? a->f : (double) a->i;
        } else if (!strcmp(an, "value_floats") || !strcmp(an, "value_ints")) {
            bool f = an[6] == 'f';
            int64_t len = (int64_t) (f ? a->n_floats : a->n_ints);
            rc = new_const(m, &tmp, f ? CT_FLOAT : CT_INT, 1, &len);
            for (int64_t i = 0; !rc && i < len; i++)
                tmp.d[i] = f ? a->floats[i] : (double) a->ints[i];
        } else
            return sl_onnx_fail(m, SL_EUNSUPPORTED, "Constant attribute '%.32s'", an);
        if (rc) {
            sl_free(tmp.d);
            return rc;
        }
        *folded = true;
        return emit(m, n->output[0], &tmp);
    }
    if (n->n_input == 0 || n->n_output < 1)
        return SL_OK;
    struct ent *in[16] = {0};
    size_t n_in = n->n_input;
    if (n_in > 16)
        return SL_OK;
    bool all_const = true;
    for (size_t i = 0; i < n_in; i++) {
        in[i] = n->input[i][0] ? sl_onnx_find(m, n->input[i]) : NULL;
        if (n->input[i][0] && !in[i])
            return sl_onnx_fail(m, SL_EINVAL, "input '%.64s' is not defined before", n->input[i]);
        all_const &= !in[i] || in[i]->kind == ENT_CONST;
    }
    if (!in[0])
        return SL_OK;
    if (!strcmp(op, "Shape") || !strcmp(op, "Size")) {
        sl_shape s;
        sl_onnx_shape(m, in[0], &s);
        int64_t lo = 0, hi = s.ndim;
        if (op[1] == 'h') {
            int64_t st = sl_onnx_attr_i(n, "start", 0), en = sl_onnx_attr_i(n, "end", s.ndim);
            st = st < 0 ? st + s.ndim : st;
            en = en < 0 ? en + s.ndim : en;
            lo = st < 0 ? 0 : st > s.ndim ? s.ndim : st;
            hi = en < 0 ? 0 : en > s.ndim ? s.ndim : en;
        }
        int64_t len = hi > lo ? hi - lo : 0;
        rc = op[1] == 'h' ? new_const(m, &tmp, CT_INT, 1, &len)
                          : new_const(m, &tmp, CT_INT, 0, NULL);
        if (rc)
            return rc;
        if (op[1] == 'h')
            for (int64_t d = lo; d < hi; d++)
                tmp.d[d - lo] = (double) s.dims[d];
        else
            tmp.d[0] = (double) sl_shape_elems(&s);
        *folded = true;
        return emit(m, n->output[0], &tmp);
    }
    if (!all_const)
        return SL_OK;
    /* Dropout folds only its first output; Shape-like ops have one */
    if (n->n_output > 1 && strcmp(op, "Dropout") != 0)
        return SL_OK;
    rc = fold_node(m, n, in, n_in, &tmp);
    if (rc) {
        sl_free(tmp.d);
        return rc == SL_EUNSUPPORTED && !m->code ? SL_OK : rc;
    }
    /* floats folded from constants of a declared dtype keep it */
    for (size_t i = 0; i < n_in && tmp.ctype == CT_FLOAT && !tmp.fdtype; i++)
        if (in[i] && in[i]->ctype == CT_FLOAT)
            tmp.fdtype = in[i]->fdtype;
    *folded = true;
    return emit(m, n->output[0], &tmp);
}
