/* ONNX nodes that reshape, move or reduce data mapped to salus ops:
 * reductions (with the L1, L2, sum-of-squares and log forms composed),
 * Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Slice, Split,
 * Gather, Pad (constant), DepthToSpace and SpaceToDepth. Shapes, axes and
 * pads must be constants: salus graphs have static shapes. */
#include "onnx_ops.h"

#include <stdio.h>
#include <string.h>

/* The axes of a reduction as a bit mask (all when none are given). */
static int reduce_mask(sl_onnx_imp *m, const Onnx__NodeProto *n, unsigned rank, int64_t *mask)
{
    int64_t axes[SL_MAX_DIMS];
    size_t na = 0;
    struct ent *ax = sl_onnx_input(m, n, 1);
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
        sl_onnx_ints(axes, a, na);
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

int sl_onnx_map_reduce(sl_onnx_imp *m, const Onnx__NodeProto *n, int kind)
{
    return sl_onnx_map_reduce_ex(m, n, kind, RED_PLAIN);
}

int sl_onnx_map_reduce_ex(sl_onnx_imp *m, const Onnx__NodeProto *n, int kind, int form)
{
    static const char *const k[] = {"axes", "keepdims", "noop_with_empty_axes", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    salus_value x = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    sl_shape s;
    sl_onnx_shape_of(m, x, &s);
    int64_t mask = 0;
    if (m->code || reduce_mask(m, n, s.ndim, &mask))
        return m->code;
    if (s.ndim == 0)
        return UNSUP("a scalar input");
    if (form == RED_L1)
        x = sl_onnx_unary(m, SL_EW_ABS, x, 0, 0);
    else if (form == RED_L2 || form == RED_SUM_SQUARE)
        x = sl_onnx_binary(m, SL_EW_MUL, x, x);
    else if (form == RED_LOG_SUM_EXP)
        x = sl_onnx_unary(m, SL_EW_EXP, x, 0, 0);
    int64_t at[2] = {kind, mask};
    salus_value y = sl_onnx_op(m, "reduce_axes", 1, &x, 2, at, 0, NULL);
    if (form == RED_L2)
        y = sl_onnx_unary(m, SL_EW_SQRT, y, 0, 0);
    else if (form == RED_LOG_SUM || form == RED_LOG_SUM_EXP)
        y = sl_onnx_unary(m, SL_EW_LOG, y, 0, 0);
    if (!sl_onnx_attr_i(n, "keepdims", 1)) {
        int64_t dims[SL_MAX_DIMS];
        unsigned nd = 0;
        for (unsigned d = 0; d < s.ndim; d++)
            if (!(mask & ((int64_t) 1 << d)))
                dims[nd++] = s.dims[d];
        y = sl_onnx_reshape(m, y, nd, dims);
    }
    return sl_onnx_set_out(m, n, 1, &y);
}

int sl_onnx_map_reshape(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"axis", "axes", "allowzero", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    struct ent *x = sl_onnx_input(m, n, 0), *arg = sl_onnx_input(m, n, 1);
    if (!x)
        return UNSUP("no input");
    if (arg && arg->kind != ENT_CONST)
        return UNSUP("a shape or axes computed at run time (dynamic shape)");
    salus_value v = sl_onnx_value(m, x);
    sl_shape s;
    sl_onnx_shape_of(m, v, &s);
    unsigned nd;
    int64_t dims[SL_MAX_DIMS];
    if (m->code || sl_onnx_reshaped(m, n, s.ndim, s.dims, arg, &nd, dims))
        return m->code;
    salus_value y = sl_onnx_reshape(m, v, nd, dims);
    return sl_onnx_set_out(m, n, 1, &y);
}

int sl_onnx_map_transpose(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"perm", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    struct ent *e = sl_onnx_input(m, n, 0);
    salus_value x = e ? sl_onnx_value(m, e) : SALUS_NO_VALUE;
    sl_shape s;
    sl_onnx_shape_of(m, x, &s);
    const Onnx__AttributeProto *a = sl_onnx_attr(n, "perm");
    if (m->code)
        return m->code;
    if (a && a->n_ints != s.ndim)
        return UNSUP("perm of %zu values for rank %u", a->n_ints, s.ndim);
    int64_t perm[SL_MAX_DIMS];
    for (unsigned d = 0; d < s.ndim; d++)
        perm[d] = a ? a->ints[d] : (int64_t) (s.ndim - 1 - d);
    salus_value y = sl_onnx_op(m, "transpose", 1, &x, s.ndim, perm, 0, NULL);
    return sl_onnx_set_out(m, n, 1, &y);
}

int sl_onnx_map_concat(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"axis", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    if (n->n_input < 1)
        return UNSUP("no inputs");
    struct ent *e = sl_onnx_input(m, n, 0);
    salus_value y = e ? sl_onnx_value(m, e) : SALUS_NO_VALUE;
    sl_shape s;
    sl_onnx_shape_of(m, y, &s);
    unsigned axis;
    if (m->code || sl_onnx_axis(m, sl_onnx_attr_i(n, "axis", m->opset < 4 ? 1 : 0), s.ndim, &axis))
        return m->code;
    int64_t ax = axis;
    for (size_t i = 1; i < n->n_input; i++) {
        struct ent *b = sl_onnx_input(m, n, i);
        salus_value in[2] = {y, b ? sl_onnx_value(m, b) : SALUS_NO_VALUE};
        y = sl_onnx_op(m, "concat", 2, in, 1, &ax, 0, NULL);
    }
    return sl_onnx_set_out(m, n, 1, &y);
}

/* One slice per axis that does not keep its whole extent. */
static salus_value slice_axis(sl_onnx_imp *m, salus_value x, unsigned axis, int64_t start,
                              int64_t end, int64_t step)
{
    sl_shape s;
    sl_onnx_shape_of(m, x, &s);
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

int sl_onnx_map_slice(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    int64_t st[SL_MAX_DIMS], en[SL_MAX_DIMS], ax[SL_MAX_DIMS], sp[SL_MAX_DIMS];
    size_t ns = 0, ne = 0, na = 0, np = 0;
    struct ent *e = sl_onnx_input(m, n, 0);
    salus_value y = e ? sl_onnx_value(m, e) : SALUS_NO_VALUE;
    sl_shape s;
    sl_onnx_shape_of(m, y, &s);
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
        sl_onnx_ints(st, a[0], ns);
        sl_onnx_ints(en, a[1], ns);
        if (a[2])
            sl_onnx_ints(ax, a[2], ns), na = ns;
    } else {
        if (sl_onnx_known_attrs(m, n, sl_onnx_no_attrs) ||
            const_ints(m, sl_onnx_input(m, n, 1), "starts", st, &ns) ||
            const_ints(m, sl_onnx_input(m, n, 2), "ends", en, &ne) ||
            (sl_onnx_input(m, n, 3) && const_ints(m, sl_onnx_input(m, n, 3), "axes", ax, &na)) ||
            (sl_onnx_input(m, n, 4) && const_ints(m, sl_onnx_input(m, n, 4), "steps", sp, &np)))
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
    return sl_onnx_set_out(m, n, 1, &y);
}

int sl_onnx_map_split(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"axis", "split", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    struct ent *e = sl_onnx_input(m, n, 0);
    salus_value x = e ? sl_onnx_value(m, e) : SALUS_NO_VALUE;
    sl_shape s;
    sl_onnx_shape_of(m, x, &s);
    unsigned axis;
    if (m->code || sl_onnx_axis(m, sl_onnx_attr_i(n, "axis", 0), s.ndim, &axis))
        return m->code;
    size_t parts = n->n_output;
    if (parts == 0 || parts > 64)
        return UNSUP("%zu outputs", parts);
    int64_t len[64];
    size_t nl = 0;
    const Onnx__AttributeProto *a = sl_onnx_attr(n, "split");
    struct ent *se = sl_onnx_input(m, n, 1);
    if (se) {
        if (se->kind != ENT_CONST || se->n != parts)
            return UNSUP("split lengths that are not constant");
        for (size_t i = 0; i < parts; i++)
            len[i] = (int64_t) se->d[i];
        nl = parts;
    } else if (a) {
        if (a->n_ints != parts)
            return UNSUP("split of %zu lengths for %zu outputs", a->n_ints, parts);
        sl_onnx_ints(len, a, parts);
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
    return sl_onnx_set_out(m, n, parts, out);
}

int sl_onnx_map_gather(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"axis", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    struct ent *d = sl_onnx_input(m, n, 0), *ix = sl_onnx_input(m, n, 1);
    if (!d || !ix)
        return UNSUP("missing inputs");
    if (ix->kind == ENT_CONST)
        ix->ctype = ix->uploaded ? ix->ctype : CT_INT;
    salus_value in[2] = {sl_onnx_value(m, d), sl_onnx_value(m, ix)};
    sl_shape s;
    sl_onnx_shape_of(m, in[0], &s);
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
    return sl_onnx_set_out(m, n, 1, &y);
}

/* Pad, constant mode: the constant blocks joined on each side of each axis
 * (negative pads slice). */
int sl_onnx_map_pad(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"mode", "pads", "value", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    const Onnx__AttributeProto *mode = sl_onnx_attr(n, "mode");
    char how[16] = "constant";
    if (mode && mode->has_s)
        snprintf(how, sizeof how, "%.*s",
                 (int) (mode->s.data && mode->s.len < 16 ? mode->s.len : 0),
                 mode->s.data ? (const char *) mode->s.data : "");
    bool reflect = !strcmp(how, "reflect"), edge = !strcmp(how, "edge");
    if (!reflect && !edge && strcmp(how, "constant") != 0)
        return UNSUP("mode '%s'", how);
    salus_value y = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    sl_shape s;
    sl_onnx_shape_of(m, y, &s);
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
        sl_onnx_ints(pads, pa, np);
        value = sl_onnx_attr_f(n, "value", 0);
    } else {
        struct ent *pe = sl_onnx_input(m, n, 1), *ve = sl_onnx_input(m, n, 2);
        if (!pe || pe->kind != ENT_CONST || pe->n != 2u * s.ndim)
            return UNSUP("pads that are not a constant of 2 * rank values");
        np = (size_t) pe->n;
        for (size_t i = 0; i < np; i++)
            pads[i] = (int64_t) pe->d[i];
        if (ve && (ve->kind != ENT_CONST || ve->n != 1))
            return UNSUP("a pad value that is not a constant scalar");
        value = ve ? ve->d[0] : 0;
        if (sl_onnx_input(m, n, 3))
            return UNSUP("the axes input");
    }
    for (unsigned d = 0; d < s.ndim && !m->code; d++) {
        int64_t before = pads[d], after = pads[d + s.ndim];
        sl_onnx_shape_of(m, y, &s);
        if (before < 0 || after < 0) {
            int64_t lo = before < 0 ? -before : 0, hi = s.dims[d] - (after < 0 ? -after : 0);
            if (lo >= hi)
                return UNSUP("pads that leave nothing");
            y = slice_axis(m, y, d, lo, hi, 1);
            sl_onnx_shape_of(m, y, &s);
        }
        if ((reflect || edge) && (before > 0 || after > 0)) {
            /* each side as rows of the unpadded tensor, joined: reflect
             * mirrors without repeating the border, edge repeats it */
            int64_t len = s.dims[d];
            if (reflect && (before >= len || after >= len))
                return UNSUP("reflect pads of %lld and %lld for %lld rows", (long long) before,
                             (long long) after, (long long) len);
            salus_value y0 = y, out = SALUS_NO_VALUE;
            int64_t ax = d;
            for (int side = 0; side < 2; side++) {
                int64_t w = side == 0 ? before : after;
                for (int64_t k = 0; k < w && !m->code; k++) {
                    int64_t row =
                        side == 0 ? (reflect ? w - k : 0) : (reflect ? len - 2 - k : len - 1);
                    salus_value r = slice_axis(m, y0, d, row, row + 1, 1);
                    salus_value in[2] = {out, r};
                    out =
                        out == SALUS_NO_VALUE ? r : sl_onnx_op(m, "concat", 2, in, 1, &ax, 0, NULL);
                }
                if (side == 0) {
                    salus_value in[2] = {out, y0};
                    out = out == SALUS_NO_VALUE ? y0
                                                : sl_onnx_op(m, "concat", 2, in, 1, &ax, 0, NULL);
                }
            }
            y = out;
            continue;
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
            sl_onnx_shape_of(m, y, &s);
        }
    }
    return sl_onnx_set_out(m, n, 1, &y);
}

/* DepthToSpace and SpaceToDepth: a reshape to rank 6, a transpose, a
 * reshape back (ONNX's own definition). */
int sl_onnx_map_depth_space(sl_onnx_imp *m, const Onnx__NodeProto *n, bool to_space)
{
    static const char *const k[] = {"blocksize", "mode", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    salus_value x = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    sl_shape s;
    sl_onnx_shape_of(m, x, &s);
    int64_t b = sl_onnx_attr_i(n, "blocksize", 0);
    if (m->code)
        return m->code;
    if (s.ndim != 4 || b < 1)
        return UNSUP("an input of rank %u or blocksize %lld", s.ndim, (long long) b);
    int64_t N = s.dims[0], C = s.dims[1], H = s.dims[2], W = s.dims[3];
    const Onnx__AttributeProto *mode = sl_onnx_attr(n, "mode");
    bool crd = mode && mode->has_s && mode->s.len == 3 && !memcmp(mode->s.data, "CRD", 3);
    if (mode && mode->has_s && !crd && !(mode->s.len == 3 && !memcmp(mode->s.data, "DCR", 3)))
        return UNSUP("mode %.*s", (int) (mode->s.data && mode->s.len < 8 ? mode->s.len : 0),
                     mode->s.data ? (const char *) mode->s.data : "");
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
    salus_value y = sl_onnx_reshape(m, x, 6, six);
    y = sl_onnx_op(m, "transpose", 1, &y, 6, perm, 0, NULL);
    y = sl_onnx_reshape(m, y, 4, out);
    return sl_onnx_set_out(m, n, 1, &y);
}

/* Tile: the tensor joined to itself along each axis as often as the
 * constant repeats say. */
int sl_onnx_map_tile(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    if (sl_onnx_known_attrs(m, n, sl_onnx_no_attrs))
        return m->code;
    if (m->opset < 6)
        return UNSUP("opset %lld's tiles and axis inputs", (long long) m->opset);
    struct ent *e = sl_onnx_input(m, n, 0);
    salus_value y = e ? sl_onnx_value(m, e) : SALUS_NO_VALUE;
    sl_shape s;
    sl_onnx_shape_of(m, y, &s);
    int64_t reps[SL_MAX_DIMS];
    size_t nr = 0;
    if (m->code || const_ints(m, sl_onnx_input(m, n, 1), "repeats", reps, &nr))
        return m->code;
    if (nr != s.ndim)
        return UNSUP("%zu repeats for rank %u", nr, s.ndim);
    for (unsigned d = 0; d < s.ndim && !m->code; d++) {
        if (reps[d] < 1 || reps[d] > 4096)
            return UNSUP("repeats %lld (1 to 4096)", (long long) reps[d]);
        salus_value y0 = y;
        int64_t ax = d;
        for (int64_t k = 1; k < reps[d] && !m->code; k++) {
            salus_value in[2] = {y, y0};
            y = sl_onnx_op(m, "concat", 2, in, 1, &ax, 0, NULL);
        }
    }
    return sl_onnx_set_out(m, n, 1, &y);
}
