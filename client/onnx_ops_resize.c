/* Resize and Upsample in the ONNX importer: interpolation is separable, so
 * each resized axis is one pass. A pass gathers the input's taps along the
 * axis (constant i32 indices, clamped to the edge as ONNX's reference pads)
 * and sums them weighted by constants: one gather for nearest, two for
 * linear, four for cubic. The coordinate transformations, nearest modes,
 * cubic_coeff_a and exclude_outside follow the operator's definition.
 *
 * Refused: tf_crop_and_resize (it needs the roi), output sizes that are
 * not constants, a tap table above a million entries. */
#include "onnx_ops.h"

#include <math.h>
#include <string.h>

enum mode { NEAREST, LINEAR, CUBIC };
enum coord { HALF_PIXEL, PYTORCH_HALF_PIXEL, ALIGN_CORNERS, ASYMMETRIC, TF_HALF_PIXEL_NN };
enum nearest { ROUND_PREFER_FLOOR, ROUND_PREFER_CEIL, FLOOR, CEIL };

struct resize {
    enum mode mode;
    enum coord coord;
    enum nearest nearest;
    double cubic_a;
    bool exclude_outside;
};

static bool attr_is(const Onnx__AttributeProto *a, const char *s)
{
    return a && a->s.len == strlen(s) && !memcmp(a->s.data, s, a->s.len);
}

/* A constant of ctype with dims, values v, as a graph value. */
static salus_value constant(sl_onnx_imp *m, int ctype, unsigned nd, const int64_t *dims,
                            const double *v)
{
    struct ent tmp = {.name = "(resize table)"};
    if (sl_onnx_const_alloc(m, &tmp, ctype, nd, dims))
        return SALUS_NO_VALUE;
    memcpy(tmp.d, v, tmp.n * sizeof *v);
    salus_value r = sl_onnx_value(m, &tmp);
    sl_free(tmp.d);
    return r;
}

/* The input coordinate of output coordinate o along an axis of in -> out
 * elements at scale. */
static double source(const struct resize *r, int64_t o, int64_t in, int64_t out, double scale)
{
    switch (r->coord) {
    case HALF_PIXEL:
        return ((double) o + 0.5) / scale - 0.5;
    case PYTORCH_HALF_PIXEL:
        return out > 1 ? ((double) o + 0.5) / scale - 0.5 : 0.0;
    case ALIGN_CORNERS:
        return out > 1 ? (double) o * (double) (in - 1) / (double) (out - 1) : 0.0;
    case TF_HALF_PIXEL_NN:
        return ((double) o + 0.5) / scale;
    case ASYMMETRIC:
    default:
        return (double) o / scale;
    }
}

static void cubic_coeffs(double t, double a, double c[4])
{
    double s = t + 1, u = 1 - t, v = 2 - t;
    c[0] = ((a * s - 5 * a) * s + 8 * a) * s - 4 * a;
    c[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
    c[2] = ((a + 2) * u - (a + 3)) * u * u + 1;
    c[3] = ((a * v - 5 * a) * v + 8 * a) * v - 4 * a;
}

/* One pass: x resized along axis from in to out elements. */
static salus_value pass(sl_onnx_imp *m, const struct resize *r, salus_value x, const sl_shape *s,
                        unsigned axis, int64_t out, double scale)
{
    int64_t in = s->dims[axis];
    unsigned taps = r->mode == NEAREST ? 1 : r->mode == LINEAR ? 2 : 4;
    double *idx = sl_calloc((size_t) (out * taps), sizeof *idx);
    double *w = sl_calloc((size_t) (out * taps), sizeof *w);
    if (!idx || !w) {
        sl_free(idx), sl_free(w);
        return sl_onnx_fail(m, SL_ENOMEM, "out of memory"), SALUS_NO_VALUE;
    }
    for (int64_t o = 0; o < out; o++) {
        double xs = source(r, o, in, out, scale);
        double *ix = idx + o * taps, *wt = w + o * taps;
        if (r->mode == NEAREST) {
            double k = r->nearest == FLOOR               ? floor(xs)
                       : r->nearest == CEIL              ? ceil(xs)
                       : r->nearest == ROUND_PREFER_CEIL ? floor(xs + 0.5)
                                                         : ceil(xs - 0.5);
            ix[0] = fmin(fmax(k, 0), (double) (in - 1));
            wt[0] = 1;
            continue;
        }
        double base = floor(xs), t = xs - base, c[4];
        if (r->mode == LINEAR)
            c[0] = 1 - t, c[1] = t;
        else
            cubic_coeffs(t, r->cubic_a, c);
        double first = r->mode == LINEAR ? base : base - 1, sum = 0;
        for (unsigned k = 0; k < taps; k++) {
            double at = first + k;
            bool outside = at < 0 || at > (double) (in - 1);
            if (outside && r->exclude_outside)
                c[k] = 0;
            sum += c[k];
            ix[k] = fmin(fmax(at, 0), (double) (in - 1));
        }
        for (unsigned k = 0; k < taps; k++)
            wt[k] = r->exclude_outside && sum != 0 ? c[k] / sum : c[k];
    }
    /* tap k's indices [out] and weights [out, 1, ...] (broadcast over the
     * axes after this one) */
    int64_t wdims[SL_MAX_DIMS] = {out};
    unsigned wnd = s->ndim - axis;
    for (unsigned d = 1; d < wnd; d++)
        wdims[d] = 1;
    salus_value y = SALUS_NO_VALUE;
    double *col = sl_calloc((size_t) out, sizeof *col);
    for (unsigned k = 0; col && k < taps && !m->code; k++) {
        for (int64_t o = 0; o < out; o++)
            col[o] = idx[o * taps + k];
        int64_t ax = axis;
        salus_value g = sl_onnx_op(
            m, "gather", 2, (salus_value[]){x, constant(m, CT_INT, 1, &out, col)}, 1, &ax, 0, NULL);
        if (taps > 1) {
            for (int64_t o = 0; o < out; o++)
                col[o] = w[o * taps + k];
            g = sl_onnx_binary(m, SL_EW_MUL, g, constant(m, CT_FLOAT, wnd, wdims, col));
        }
        y = k == 0 ? g : sl_onnx_binary(m, SL_EW_ADD, y, g);
    }
    if (!col)
        sl_onnx_fail(m, SL_ENOMEM, "out of memory");
    sl_free(col), sl_free(idx), sl_free(w);
    return y;
}

/* Resizes x to out[] (scales[] where given, else out / in). */
static int resize(sl_onnx_imp *m, const Onnx__NodeProto *n, const struct resize *r, salus_value x,
                  const int64_t *out, const double *scales)
{
    sl_shape s;
    sl_onnx_shape_of(m, x, &s);
    for (unsigned d = 0; d < s.ndim && !m->code; d++) {
        if (out[d] == s.dims[d] && (!scales || scales[d] == 1.0))
            continue;
        if (out[d] < 1 || out[d] * (int64_t) (r->mode == CUBIC ? 4 : 2) > (1 << 20))
            return UNSUP("axis %u resized to %lld elements", d, (long long) out[d]);
        double scale = scales ? scales[d] : (double) out[d] / (double) s.dims[d];
        x = pass(m, r, x, &s, d, out[d], scale);
        sl_onnx_shape_of(m, x, &s);
    }
    return m->code ? m->code : sl_onnx_set_out(m, n, 1, &x);
}

/* scales (a float constant, one per axis) or sizes (an int constant) into
 * out[] and sc[] (NULL when from sizes). */
static int targets(sl_onnx_imp *m, const sl_shape *s, struct ent *scales, struct ent *sizes,
                   int64_t *out, double *sc, bool *have_sc)
{
    *have_sc = false;
    if (scales && scales->n) {
        if (scales->kind != ENT_CONST || scales->n != s->ndim)
            return UNSUP("scales that are not a constant with one value per axis");
        for (unsigned d = 0; d < s->ndim; d++) {
            sc[d] = scales->d[d];
            if (!(sc[d] > 0) || !isfinite(sc[d]))
                return UNSUP("scale %g", sc[d]);
            out[d] = (int64_t) floor((double) s->dims[d] * sc[d]);
        }
        *have_sc = true;
        return SL_OK;
    }
    if (!sizes || sizes->kind != ENT_CONST || sizes->n != s->ndim)
        return UNSUP("sizes that are not a constant with one value per axis");
    for (unsigned d = 0; d < s->ndim; d++) {
        if (!(sizes->d[d] >= 1 && sizes->d[d] <= (double) (1 << 20)))
            return UNSUP("size %g", sizes->d[d]);
        out[d] = (int64_t) sizes->d[d];
    }
    return SL_OK;
}

static int read_mode(sl_onnx_imp *m, const Onnx__NodeProto *n, struct resize *r)
{
    const Onnx__AttributeProto *mode = sl_onnx_attr(n, "mode");
    r->mode = NEAREST;
    if (attr_is(mode, "linear") || attr_is(mode, "bilinear"))
        r->mode = LINEAR;
    else if (attr_is(mode, "cubic"))
        r->mode = CUBIC;
    else if (mode && !attr_is(mode, "nearest"))
        return UNSUP("mode '%.*s'", (int) (mode->s.len > 20 ? 20 : mode->s.len),
                     (const char *) mode->s.data);
    return SL_OK;
}

int sl_onnx_map_resize(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"coordinate_transformation_mode",
                                    "cubic_coeff_a",
                                    "exclude_outside",
                                    "extrapolation_value",
                                    "mode",
                                    "nearest_mode",
                                    NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    struct resize r = {.cubic_a = sl_onnx_attr_f(n, "cubic_coeff_a", -0.75f),
                       .exclude_outside = sl_onnx_attr_i(n, "exclude_outside", 0) != 0};
    if (read_mode(m, n, &r))
        return m->code;
    /* opset 10 had the asymmetric transformation and floor rounding only */
    r.coord = m->opset < 11 ? ASYMMETRIC : HALF_PIXEL;
    r.nearest = m->opset < 11 ? FLOOR : ROUND_PREFER_FLOOR;
    const Onnx__AttributeProto *ct = sl_onnx_attr(n, "coordinate_transformation_mode");
    if (ct) {
        static const char *const names[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
                                            "asymmetric", "tf_half_pixel_for_nn"};
        unsigned i = 0;
        while (i < 5 && !attr_is(ct, names[i]))
            i++;
        if (i == 5)
            return UNSUP("coordinate_transformation_mode '%.*s'",
                         (int) (ct->s.len > 24 ? 24 : ct->s.len), (const char *) ct->s.data);
        r.coord = (enum coord) i;
    }
    const Onnx__AttributeProto *nm = sl_onnx_attr(n, "nearest_mode");
    if (nm) {
        static const char *const names[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                            "ceil"};
        unsigned i = 0;
        while (i < 4 && !attr_is(nm, names[i]))
            i++;
        if (i == 4)
            return UNSUP("nearest_mode '%.*s'", (int) (nm->s.len > 24 ? 24 : nm->s.len),
                         (const char *) nm->s.data);
        r.nearest = (enum nearest) i;
    }
    salus_value x = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    sl_shape s;
    sl_onnx_shape_of(m, x, &s);
    if (m->code)
        return m->code;
    int64_t out[SL_MAX_DIMS];
    double sc[SL_MAX_DIMS];
    bool have_sc;
    struct ent *scales = m->opset < 11 ? sl_onnx_input(m, n, 1) : sl_onnx_input(m, n, 2);
    struct ent *sizes = m->opset < 11 ? NULL : sl_onnx_input(m, n, 3);
    if (targets(m, &s, scales, sizes, out, sc, &have_sc))
        return m->code;
    return resize(m, n, &r, x, out, have_sc ? sc : NULL);
}

/* Upsample (opsets 7 and 9; Resize replaced it): nearest or linear, the
 * asymmetric transformation, scales an attribute (7) or an input (9). */
int sl_onnx_map_upsample(sl_onnx_imp *m, const Onnx__NodeProto *n)
{
    static const char *const k[] = {"mode", "scales", NULL};
    if (sl_onnx_known_attrs(m, n, k))
        return m->code;
    struct resize r = {.coord = ASYMMETRIC, .nearest = FLOOR};
    if (read_mode(m, n, &r))
        return m->code;
    if (r.mode == CUBIC)
        return UNSUP("mode 'cubic'");
    salus_value x = sl_onnx_fvalue(m, sl_onnx_input(m, n, 0));
    sl_shape s;
    sl_onnx_shape_of(m, x, &s);
    if (m->code)
        return m->code;
    int64_t out[SL_MAX_DIMS];
    double sc[SL_MAX_DIMS];
    const Onnx__AttributeProto *a = sl_onnx_attr(n, "scales");
    if (a) {
        if (a->n_floats != s.ndim)
            return UNSUP("%zu scales for rank %u", a->n_floats, s.ndim);
        for (unsigned d = 0; d < s.ndim; d++) {
            sc[d] = a->floats[d];
            if (!(sc[d] > 0) || !isfinite(sc[d]))
                return UNSUP("scale %g", sc[d]);
            out[d] = (int64_t) floor((double) s.dims[d] * sc[d]);
        }
    } else {
        bool have_sc;
        if (targets(m, &s, sl_onnx_input(m, n, 1), NULL, out, sc, &have_sc))
            return m->code;
    }
    return resize(m, n, &r, x, out, sc);
}
