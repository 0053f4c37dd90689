/* cpu kernels of the ops along axes of any rank (ops_axes.h): broadcasting
 * element-wise math, transpose, slice, concat, gather, reductions over axes,
 * log_softmax, batch_matmul, where, masked_fill and compare. Shapes were
 * validated by the registry.
 * Walks over a shape keep a counter per dim and step the innermost dim in a
 * plain loop, so the broadcast and permuted cases cost one add per element
 * rather than a division per dim. Reductions accumulate in double.
 * Each walk runs over a range of output rows (or elements), so that an op
 * with enough elements is cut into bands, one per thread of the worker's
 * team (team.c): the ops between two oneDNN ops (a transformer's layer
 * norm, GELU and residual adds, a ConvNeXt block's permutes) would
 * otherwise leave every core but one idle. The bands share no output and
 * each element is computed as on one thread, so the results do not depend
 * on the thread count. */
#include "cpu.h"
#include "elementwise.h"

#include "ops_axes.h"
#include "sl_error.h"
#include "sum.h"

#include <math.h>
#include <string.h>

/* Strides (in elements) of a dense shape. */
static void dense_strides(const sl_shape *s, int64_t *st)
{
    int64_t acc = 1;
    for (int d = s->ndim - 1; d >= 0; d--) {
        st[d] = acc;
        acc *= s->dims[d];
    }
}

/* in's strides seen from out's dims under broadcasting: 0 along the dims
 * in has as 1 (or lacks). */
static void bcast_strides(const sl_shape *in, const sl_shape *out, int64_t *st)
{
    int64_t dense[SL_MAX_DIMS];
    dense_strides(in, dense);
    unsigned off = out->ndim - in->ndim;
    for (unsigned d = 0; d < out->ndim; d++)
        st[d] = d < off || in->dims[d - off] == 1 ? 0 : dense[d - off];
}

/* From this many output elements an op is split across the team: a
 * spinning helper takes its band within a microsecond, so even an add of
 * 16 Ki floats (several microseconds) gains, and erf or a strided
 * transpose gain several times that. */
#define AXES_TEAM_MIN_ELEMS (16u << 10)

/* The index of row r of shape s (its dims but the last) into idx. */
static void unravel_row(const sl_shape *s, uint64_t r, int64_t *idx)
{
    for (int d = (int) s->ndim - 2; d >= 0; d--) {
        idx[d] = (int64_t) (r % (uint64_t) s->dims[d]);
        r /= (uint64_t) s->dims[d];
    }
}

/* The offset of row index idx under strides st (dims but the last). */
static int64_t row_offset(const sl_shape *s, const int64_t *idx, const int64_t *st)
{
    int64_t off = 0;
    for (int d = 0; d + 1 < (int) s->ndim; d++)
        off += idx[d] * st[d];
    return off;
}

/* Runs fn over rows [0, rows) of an op with elems output elements: on
 * the calling thread alone below AXES_TEAM_MIN_ELEMS, else in up to
 * `threads` bands. */
static void run_rows(const sl_op_call *c, sl_cpu_units_fn fn, uint64_t rows, uint64_t elems,
                     int threads)
{
    sl_cpu_run_units(c, fn, rows, elems, AXES_TEAM_MIN_ELEMS, threads);
}

/* One innermost row of ew_binary with the kind's loop hoisted out of the
 * element loop; inlined with constant strides, the common cases
 * (contiguous, or one side a broadcast scalar) vectorise. No restrict: y
 * may be a or b (in-place execution), each element read before it is
 * written. Pow by 2 is a product: what PyTorch computes for it, and
 * correctly rounded, where powf may be an ulp off. */
static inline __attribute__((always_inline)) void
binary_row_k(int kind, float *y, const float *a, int64_t sa, const float *b, int64_t sb, int64_t n)
{
    switch (kind) {
    case SL_EW_ADD:
        for (int64_t i = 0; i < n; i++)
            y[i] = a[i * sa] + b[i * sb];
        break;
    case SL_EW_SUB:
        for (int64_t i = 0; i < n; i++)
            y[i] = a[i * sa] - b[i * sb];
        break;
    case SL_EW_MUL:
        for (int64_t i = 0; i < n; i++)
            y[i] = a[i * sa] * b[i * sb];
        break;
    case SL_EW_DIV:
        for (int64_t i = 0; i < n; i++)
            y[i] = a[i * sa] / b[i * sb];
        break;
    case SL_EW_POW:
        if (sb == 0 && b[0] == 2.0f) {
            for (int64_t i = 0; i < n; i++)
                y[i] = a[i * sa] * a[i * sa];
            break;
        }
        /* fall through */
    default:
        for (int64_t i = 0; i < n; i++)
            y[i] = sl_ew_binary(kind, a[i * sa], b[i * sb]);
    }
}

static void binary_row(int kind, float *y, const float *a, int64_t sa, const float *b, int64_t sb,
                       int64_t n)
{
    if (sa == 1 && sb == 1)
        binary_row_k(kind, y, a, 1, b, 1, n);
    else if (sa == 1 && sb == 0)
        binary_row_k(kind, y, a, 1, b, 0, n);
    else if (sa == 0 && sb == 1)
        binary_row_k(kind, y, a, 0, b, 1, n);
    else
        binary_row_k(kind, y, a, sa, b, sb, n);
}

static void ew_binary_rows(const sl_op_call *c, uint64_t r0, uint64_t r1)
{
    const sl_shape *os = &c->out[0].shape;
    int kind = (int) c->attrs.i[0];
    const float *a = c->in[0].data, *b = c->in[1].data;
    float *y = c->out[0].data;
    int64_t sa[SL_MAX_DIMS], sb[SL_MAX_DIMS], idx[SL_MAX_DIMS] = {0};
    bcast_strides(&c->in[0].shape, os, sa);
    bcast_strides(&c->in[1].shape, os, sb);
    unsigned last = os->ndim - 1;
    int64_t inner = os->dims[last];
    unravel_row(os, r0, idx);
    int64_t oa = row_offset(os, idx, sa), ob = row_offset(os, idx, sb);
    for (uint64_t r = r0; r < r1; r++) {
        binary_row(kind, y + r * (uint64_t) inner, a + oa, sa[last], b + ob, sb[last], inner);
        for (int d = (int) last - 1; d >= 0; d--) {
            oa += sa[d];
            ob += sb[d];
            if (++idx[d] < os->dims[d])
                break;
            oa -= sa[d] * os->dims[d];
            ob -= sb[d] * os->dims[d];
            idx[d] = 0;
        }
    }
}

static int k_ew_binary(const sl_op_call *c, int threads)
{
    const sl_shape *os = &c->out[0].shape;
    if (os->ndim == 0) {
        float *y = c->out[0].data;
        y[0] = sl_ew_binary((int) c->attrs.i[0], *(const float *) c->in[0].data,
                            *(const float *) c->in[1].data);
        return SL_OK;
    }
    uint64_t n = sl_shape_elems(os);
    run_rows(c, ew_binary_rows, n / (uint64_t) os->dims[os->ndim - 1], n, threads);
    return SL_OK;
}

static void select_rows(const sl_op_call *c, uint64_t r0, uint64_t r1)
{
    const sl_shape *os = &c->out[0].shape;
    bool fill = c->op == SL_OP_MASKED_FILL;
    const sl_tensor_ref *cond = &c->in[fill ? 1 : 0];
    const float *a = fill ? NULL : c->in[1].data, *b = c->in[fill ? 0 : 2].data;
    const int32_t *m = cond->data;
    float v = c->attrs.f[0], *y = c->out[0].data;
    int64_t sm[SL_MAX_DIMS], sa[SL_MAX_DIMS] = {0}, sb[SL_MAX_DIMS], idx[SL_MAX_DIMS] = {0};
    bcast_strides(&cond->shape, os, sm);
    if (!fill)
        bcast_strides(&c->in[1].shape, os, sa);
    bcast_strides(&c->in[fill ? 0 : 2].shape, os, sb);
    unsigned last = os->ndim - 1;
    int64_t inner = os->dims[last];
    unravel_row(os, r0, idx);
    int64_t om = row_offset(os, idx, sm), oa = row_offset(os, idx, sa),
            ob = row_offset(os, idx, sb);
    for (uint64_t r = r0; r < r1; r++) {
        float *yr = y + r * (uint64_t) inner;
        for (int64_t i = 0; i < inner; i++)
            yr[i] = m[om + i * sm[last]] ? (fill ? v : a[oa + i * sa[last]]) : b[ob + i * sb[last]];
        for (int d = (int) last - 1; d >= 0; d--) {
            om += sm[d];
            oa += sa[d];
            ob += sb[d];
            if (++idx[d] < os->dims[d])
                break;
            om -= sm[d] * os->dims[d];
            oa -= sa[d] * os->dims[d];
            ob -= sb[d] * os->dims[d];
            idx[d] = 0;
        }
    }
}

/* where and masked_fill: y = cond ? a : b with each operand broadcast to
 * y's shape (masked_fill: cond is the mask, a the fill value, b x). One
 * walk over y's rows, as ew_binary's. */
static int k_select(const sl_op_call *c, int threads)
{
    const sl_shape *os = &c->out[0].shape;
    if (os->ndim == 0) {
        bool fill = c->op == SL_OP_MASKED_FILL;
        const int32_t *m = c->in[fill ? 1 : 0].data;
        const float *b = c->in[fill ? 0 : 2].data;
        float *y = c->out[0].data;
        y[0] = m[0] ? (fill ? c->attrs.f[0] : *(const float *) c->in[1].data) : b[0];
        return SL_OK;
    }
    uint64_t n = sl_shape_elems(os);
    run_rows(c, select_rows, n / (uint64_t) os->dims[os->ndim - 1], n, threads);
    return SL_OK;
}

static void compare_rows(const sl_op_call *c, uint64_t r0, uint64_t r1)
{
    const sl_shape *os = &c->out[0].shape;
    int kind = (int) c->attrs.i[0];
    bool ints = c->in[0].shape.dtype == SL_I32;
    const float *fa = c->in[0].data, *fb = c->in[1].data;
    const int32_t *ia = c->in[0].data, *ib = c->in[1].data;
    int32_t *y = c->out[0].data;
    int64_t sa[SL_MAX_DIMS], sb[SL_MAX_DIMS], idx[SL_MAX_DIMS] = {0};
    bcast_strides(&c->in[0].shape, os, sa);
    bcast_strides(&c->in[1].shape, os, sb);
    unsigned last = os->ndim - 1;
    int64_t inner = os->dims[last];
    unravel_row(os, r0, idx);
    int64_t oa = row_offset(os, idx, sa), ob = row_offset(os, idx, sb);
    for (uint64_t r = r0; r < r1; r++) {
        int32_t *yr = y + r * (uint64_t) inner;
        if (ints)
            for (int64_t i = 0; i < inner; i++)
                yr[i] = sl_cmp_i32(kind, ia[oa + i * sa[last]], ib[ob + i * sb[last]]);
        else
            for (int64_t i = 0; i < inner; i++)
                yr[i] = sl_cmp_f32(kind, fa[oa + i * sa[last]], fb[ob + i * sb[last]]);
        for (int d = (int) last - 1; d >= 0; d--) {
            oa += sa[d];
            ob += sb[d];
            if (++idx[d] < os->dims[d])
                break;
            oa -= sa[d] * os->dims[d];
            ob -= sb[d] * os->dims[d];
            idx[d] = 0;
        }
    }
}

/* compare: an i32 mask from a and b (both float or both i32) broadcast to
 * y's shape; one walk over y's rows, as ew_binary's. */
static int k_compare(const sl_op_call *c, int threads)
{
    const sl_shape *os = &c->out[0].shape;
    if (os->ndim == 0) {
        int kind = (int) c->attrs.i[0];
        int32_t *y = c->out[0].data;
        y[0] = c->in[0].shape.dtype == SL_I32 ? sl_cmp_i32(kind, *(const int32_t *) c->in[0].data,
                                                           *(const int32_t *) c->in[1].data)
                                              : sl_cmp_f32(kind, *(const float *) c->in[0].data,
                                                           *(const float *) c->in[1].data);
        return SL_OK;
    }
    uint64_t n = sl_shape_elems(os);
    run_rows(c, compare_rows, n / (uint64_t) os->dims[os->ndim - 1], n, threads);
    return SL_OK;
}

/* ew_unary over elements [16 r0, 16 r1): rows of 16 elements, one cache
 * line of output each, so that two bands never write one line. */
static void ew_unary_rows(const sl_op_call *c, uint64_t r0, uint64_t r1)
{
    const float *x = c->in[0].data;
    float *y = c->out[0].data, p = c->attrs.f[0], q = c->attrs.f[1];
    int kind = (int) c->attrs.i[0];
    uint64_t n = sl_shape_elems(&c->out[0].shape);
    uint64_t i0 = r0 * 16, i1 = r1 * 16 < n ? r1 * 16 : n;
    if (kind == SL_EW_CLIP) {
        for (uint64_t i = i0; i < i1; i++)
            y[i] = x[i] < p ? p : x[i] > q ? q : x[i];
        return;
    }
    if (i1 <= i0)
        return;
    if (kind == SL_EW_ERF) {
        sl_cpu_verf(x + i0, y + i0, i1 - i0);
        return;
    }
    if (kind == SL_EW_GELU) {
        sl_cpu_vgelu(x + i0, y + i0, i1 - i0);
        return;
    }
    for (uint64_t i = i0; i < i1; i++)
        y[i] = sl_ew_unary(kind, x[i], p, q);
}

static int k_ew_unary(const sl_op_call *c, int threads)
{
    uint64_t n = sl_shape_elems(&c->out[0].shape);
    run_rows(c, ew_unary_rows, (n + 15) / 16, n, threads);
    return SL_OK;
}

/* Any dtype: elements of 4 bytes (f32, i32) or 2 (bf16, f16) move as
 * words of their size. */
static void transpose_rows(const sl_op_call *c, uint64_t r0, uint64_t r1)
{
    const sl_shape *is = &c->in[0].shape, *os = &c->out[0].shape;
    size_t es = sl_dtype_size(is->dtype);
    int64_t in_st[SL_MAX_DIMS], st[SL_MAX_DIMS], idx[SL_MAX_DIMS] = {0};
    dense_strides(is, in_st);
    for (unsigned d = 0; d < os->ndim; d++)
        st[d] = in_st[c->attrs.i[d]];
    unsigned last = os->ndim - 1;
    int64_t inner = os->dims[last], s_last = st[last];
    unravel_row(os, r0, idx);
    int64_t off = row_offset(os, idx, st);
    for (uint64_t r = r0; r < r1; r++) {
        if (es == 4) {
            const uint32_t *x = c->in[0].data;
            uint32_t *row = (uint32_t *) c->out[0].data + r * (uint64_t) inner;
            for (int64_t i = 0; i < inner; i++)
                row[i] = x[off + i * s_last];
        } else {
            const uint16_t *x = c->in[0].data;
            uint16_t *row = (uint16_t *) c->out[0].data + r * (uint64_t) inner;
            for (int64_t i = 0; i < inner; i++)
                row[i] = x[off + i * s_last];
        }
        for (int d = (int) last - 1; d >= 0; d--) {
            off += st[d];
            if (++idx[d] < os->dims[d])
                break;
            off -= st[d] * os->dims[d];
            idx[d] = 0;
        }
    }
}

/* A transpose that swaps the last two axes and keeps the others: a batch of
 * matrix transposes (a weight's .t(), attention's k^T and their
 * gradients), whose rows gather along a large stride and touch a cache line
 * per element. These go in square tiles instead: each tile's reads and
 * writes stay within TILE lines. */
#define TILE 32

static bool swaps_last_two(const sl_op_call *c)
{
    unsigned nd = c->out[0].shape.ndim;
    if (nd < 2)
        return false;
    for (unsigned d = 0; d + 2 < nd; d++)
        if (c->attrs.i[d] != (int64_t) d)
            return false;
    return c->attrs.i[nd - 2] == nd - 1 && c->attrs.i[nd - 1] == nd - 2;
}

#define TILE_LOOP(T)                                                                               \
    do {                                                                                           \
        const T *x = (const T *) c->in[0].data + b * rows * cols;                                  \
        T *y = (T *) c->out[0].data + b * rows * cols;                                             \
        for (uint64_t j0 = 0; j0 < cols; j0 += TILE) {                                             \
            uint64_t j1 = j0 + TILE < cols ? j0 + TILE : cols;                                     \
            for (uint64_t j = j0; j < j1; j++)                                                     \
                for (uint64_t i = i0; i < i1; i++)                                                 \
                    y[j * rows + i] = x[i * cols + j];                                             \
        }                                                                                          \
    } while (0)

/* Units [u0, u1): unit u is TILE input rows of one matrix. */
static void transpose_tiles(const sl_op_call *c, uint64_t u0, uint64_t u1)
{
    const sl_shape *is = &c->in[0].shape;
    uint64_t rows = (uint64_t) is->dims[is->ndim - 2], cols = (uint64_t) is->dims[is->ndim - 1];
    uint64_t strips = (rows + TILE - 1) / TILE;
    for (uint64_t u = u0; u < u1; u++) {
        uint64_t b = u / strips, i0 = u % strips * TILE;
        uint64_t i1 = i0 + TILE < rows ? i0 + TILE : rows;
        if (sl_dtype_size(is->dtype) == 4)
            TILE_LOOP(uint32_t);
        else
            TILE_LOOP(uint16_t);
    }
}

static int k_transpose(const sl_op_call *c, int threads)
{
    const sl_shape *os = &c->out[0].shape;
    if (os->ndim == 0) {
        memcpy(c->out[0].data, c->in[0].data, sl_dtype_size(c->in[0].shape.dtype));
        return SL_OK;
    }
    uint64_t n = sl_shape_elems(os);
    if (swaps_last_two(c) && os->dims[os->ndim - 1] > 1 && os->dims[os->ndim - 2] > 1) {
        uint64_t rows = (uint64_t) os->dims[os->ndim - 1];
        run_rows(c, transpose_tiles,
                 n / rows / (uint64_t) os->dims[os->ndim - 2] * ((rows + TILE - 1) / TILE), n,
                 threads);
        return SL_OK;
    }
    run_rows(c, transpose_rows, n / (uint64_t) os->dims[os->ndim - 1], n, threads);
    return SL_OK;
}

/* Elements before and after axis `axis` of s. */
static void split_at(const sl_shape *s, unsigned axis, uint64_t *outer, uint64_t *inner)
{
    *outer = 1;
    *inner = 1;
    for (unsigned d = 0; d < axis; d++)
        *outer *= (uint64_t) s->dims[d];
    for (unsigned d = axis + 1; d < s->ndim; d++)
        *inner *= (uint64_t) s->dims[d];
}

static int k_slice(const sl_op_call *c)
{
    unsigned axis = (unsigned) c->attrs.i[0];
    int64_t start = c->attrs.i[1], step = sl_slice_step(&c->attrs);
    int64_t dim = c->in[0].shape.dims[axis], count = c->out[0].shape.dims[axis];
    uint64_t outer, inner;
    split_at(&c->in[0].shape, axis, &outer, &inner);
    size_t es = sl_dtype_size(c->in[0].shape.dtype);
    const char *x = c->in[0].data;
    char *y = c->out[0].data;
    if (step == 1) { /* one run per outer index (a split along the last axis: rows) */
        for (uint64_t o = 0; o < outer; o++)
            memcpy(y + o * (uint64_t) count * inner * es,
                   x + (o * (uint64_t) dim + (uint64_t) start) * inner * es,
                   (uint64_t) count * inner * es);
        return SL_OK;
    }
    for (uint64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < count; k++)
            memcpy(y + (o * (uint64_t) count + (uint64_t) k) * inner * es,
                   x + (o * (uint64_t) dim + (uint64_t) (start + k * step)) * inner * es,
                   inner * es);
    return SL_OK;
}

static int k_concat(const sl_op_call *c)
{
    unsigned axis = (unsigned) c->attrs.i[0];
    uint64_t outer, inner;
    split_at(&c->out[0].shape, axis, &outer, &inner);
    uint64_t na = (uint64_t) c->in[0].shape.dims[axis] * inner;
    uint64_t nb = (uint64_t) c->in[1].shape.dims[axis] * inner;
    size_t es = sl_dtype_size(c->in[0].shape.dtype);
    const char *a = c->in[0].data, *b = c->in[1].data;
    char *y = c->out[0].data;
    for (uint64_t o = 0; o < outer; o++) {
        memcpy(y + o * (na + nb) * es, a + o * na * es, na * es);
        memcpy(y + (o * (na + nb) + na) * es, b + o * nb * es, nb * es);
    }
    return SL_OK;
}

/* gather (rows: the output) and index_write (rows: in2, written into in0):
 * rows of `inner` elements moved from or to row idx[j] of in0 along the
 * axis, every index checked before anything moves. */
static int k_index_rows(const sl_op_call *c, bool write)
{
    unsigned axis = (unsigned) c->attrs.i[0];
    int64_t dim = c->in[0].shape.dims[axis];
    uint64_t outer, inner, n_idx = sl_shape_elems(&c->in[1].shape);
    split_at(&c->in[0].shape, axis, &outer, &inner);
    size_t es = sl_dtype_size(c->in[0].shape.dtype), row = inner * es;
    char *base = c->in[0].data, *rows = write ? c->in[2].data : c->out[0].data;
    const int32_t *idx = c->in[1].data;
    for (uint64_t j = 0; j < n_idx; j++)
        if (idx[j] < -dim || idx[j] >= dim)
            return SL_EINVAL;
    for (uint64_t o = 0; o < outer; o++)
        for (uint64_t j = 0; j < n_idx; j++) {
            int64_t k = idx[j] < 0 ? idx[j] + dim : idx[j];
            char *at = base + (o * (uint64_t) dim + (uint64_t) k) * row;
            char *r = rows + (o * n_idx + j) * row;
            memcpy(write ? at : r, write ? r : at, row);
        }
    return SL_OK;
}

/* Outputs [o0, o1) of reduce_axes: for each, a walk over the reduced axes
 * of the input; when those are the innermost ones, each output reduces
 * one contiguous run (the same sum in the same order, without the walk). */
static void reduce_rows(const sl_op_call *c, uint64_t o0, uint64_t o1)
{
    const sl_shape *is = &c->in[0].shape, *os = &c->out[0].shape;
    int kind = (int) c->attrs.i[0];
    int64_t mask = c->attrs.i[1];
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    int64_t st[SL_MAX_DIMS];
    dense_strides(is, st);
    /* the reduced axes, and the count of elements each output reduces */
    unsigned red[SL_MAX_DIMS], n_red = 0;
    uint64_t per_out = 1;
    for (unsigned d = 0; d < is->ndim; d++)
        if (mask & ((int64_t) 1 << d)) {
            red[n_red++] = d;
            per_out *= (uint64_t) is->dims[d];
        }
    bool suffix = true, prefix = n_red > 0;
    for (unsigned r = 0; r < n_red; r++) {
        suffix &= red[r] == is->ndim - n_red + r;
        prefix &= red[r] == r;
    }
    if (prefix && !suffix && (kind == SL_REDUCE_SUM || kind == SL_REDUCE_MEAN)) {
        /* a bias's gradient: whole rows at a time, the same sums in the
         * same order as the walk below */
        sl_cpu_col_sums(x, per_out, sl_shape_elems(os), o0, o1,
                        kind == SL_REDUCE_MEAN ? (double) per_out : 1.0, y);
        return;
    }
    if (suffix) {
        for (uint64_t o = o0; o < o1; o++) {
            const float *xo = x + o * per_out;
            double acc = kind == SL_REDUCE_MAX ? -INFINITY : kind == SL_REDUCE_MIN ? INFINITY : 0.0;
            bool nan = false;
            if (kind == SL_REDUCE_MAX || kind == SL_REDUCE_MIN) {
                for (uint64_t k = 0; k < per_out; k++) {
                    double v = xo[k];
                    acc = kind == SL_REDUCE_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
                    nan |= isnan(v);
                }
            } else {
                /* a NaN propagates through the sum by itself */
                for (uint64_t k = 0; k < per_out; k++)
                    acc += xo[k];
            }
            if (kind == SL_REDUCE_MEAN)
                acc /= (double) per_out;
            y[o] = nan ? NAN : (float) acc;
        }
        return;
    }
    /* the index of output o0 in the input's dims (reduced dims at 0) */
    int64_t oidx[SL_MAX_DIMS] = {0};
    uint64_t rest = o0;
    for (int d = (int) os->ndim - 1; d >= 0; d--) {
        oidx[d] = (int64_t) (rest % (uint64_t) os->dims[d]);
        rest /= (uint64_t) os->dims[d];
    }
    for (uint64_t o = o0; o < o1; o++) {
        int64_t base = 0;
        for (unsigned d = 0; d < os->ndim; d++)
            base += oidx[d] * st[d];
        double acc = kind == SL_REDUCE_MAX ? -INFINITY : kind == SL_REDUCE_MIN ? INFINITY : 0.0;
        bool nan = false;
        int64_t ridx[SL_MAX_DIMS] = {0}, off = 0;
        for (uint64_t k = 0; k < per_out; k++) {
            double v = x[base + off];
            if (kind == SL_REDUCE_MAX)
                acc = v > acc ? v : acc;
            else if (kind == SL_REDUCE_MIN)
                acc = v < acc ? v : acc;
            else
                acc += v;
            nan |= isnan(v);
            for (int r = (int) n_red - 1; r >= 0; r--) {
                unsigned d = red[r];
                off += st[d];
                if (++ridx[r] < is->dims[d])
                    break;
                off -= st[d] * is->dims[d];
                ridx[r] = 0;
            }
        }
        if (kind == SL_REDUCE_MEAN)
            acc /= (double) per_out;
        y[o] = nan ? NAN : (float) acc;
        for (int d = (int) os->ndim - 1; d >= 0; d--) {
            if (++oidx[d] < os->dims[d])
                break;
            oidx[d] = 0;
        }
    }
}

static int k_reduce_axes(const sl_op_call *c, int threads)
{
    uint64_t n_out = sl_shape_elems(&c->out[0].shape);
    run_rows(c, reduce_rows, n_out, sl_shape_elems(&c->in[0].shape), threads);
    return SL_OK;
}

static int k_log_softmax(const sl_op_call *c)
{
    int64_t rows = c->in[0].shape.dims[0], cols = c->in[0].shape.dims[1];
    for (int64_t r = 0; r < rows; r++) {
        const float *x = (const float *) c->in[0].data + r * cols;
        float *y = (float *) c->out[0].data + r * cols;
        float mx = x[0];
        for (int64_t j = 1; j < cols; j++)
            mx = x[j] > mx ? x[j] : mx;
        double sum = 0.0;
        for (int64_t j = 0; j < cols; j++)
            sum += exp((double) x[j] - mx);
        double lse = mx + log(sum);
        for (int64_t j = 0; j < cols; j++)
            y[j] = (float) ((double) x[j] - lse);
    }
    return SL_OK;
}

/* Batches [b0, b1) of batch_matmul, one GEMM each on the calling thread. */
static void batch_matmul_rows(const sl_op_call *c, uint64_t b0, uint64_t b1)
{
    const int64_t *ad = c->in[0].shape.dims, *bd = c->in[1].shape.dims;
    int m = (int) ad[1], k = (int) ad[2], n = (int) bd[2];
    uint64_t sa = ad[0] == 1 ? 0 : (uint64_t) m * (uint64_t) k;
    uint64_t sb = bd[0] == 1 ? 0 : (uint64_t) k * (uint64_t) n;
    const float *a = c->in[0].data, *b = c->in[1].data;
    float *y = c->out[0].data;
    for (uint64_t i = b0; i < b1; i++)
        sl_cpu_sgemm(false, false, m, n, k, 1.0f, a + i * sa, k, b + i * sb, n, 0.0f,
                     y + i * (uint64_t) m * (uint64_t) n, n);
}

/* The batches are split across the team (each GEMM whole on one thread)
 * from SL_CPU_TEAM_MIN_FLOPS in all. */
static int k_batch_matmul(const sl_op_call *c, int threads)
{
    const int64_t *ad = c->in[0].shape.dims, *bd = c->in[1].shape.dims;
    uint64_t batch = (uint64_t) c->out[0].shape.dims[0];
    uint64_t flops = 2ull * batch * (uint64_t) ad[1] * (uint64_t) ad[2] * (uint64_t) bd[2];
    sl_cpu_run_units(c, batch_matmul_rows, batch, flops, SL_CPU_TEAM_MIN_FLOPS, threads);
    return SL_OK;
}

int sl_cpu_axes_op(const sl_op_call *c, int threads)
{
    switch (c->op) {
    case SL_OP_EW_BINARY:
        return k_ew_binary(c, threads);
    case SL_OP_EW_UNARY:
        return k_ew_unary(c, threads);
    case SL_OP_TRANSPOSE:
        return k_transpose(c, threads);
    case SL_OP_SLICE:
        return k_slice(c);
    case SL_OP_CONCAT:
        return k_concat(c);
    case SL_OP_GATHER:
    case SL_OP_INDEX_WRITE:
        return k_index_rows(c, c->op == SL_OP_INDEX_WRITE);
    case SL_OP_REDUCE_AXES:
        return k_reduce_axes(c, threads);
    case SL_OP_LOG_SOFTMAX:
        return k_log_softmax(c);
    case SL_OP_BATCH_MATMUL:
        return k_batch_matmul(c, threads);
    case SL_OP_WHERE:
    case SL_OP_MASKED_FILL:
        return k_select(c, threads);
    case SL_OP_COMPARE:
        return k_compare(c, threads);
    default:
        return SL_EUNSUPPORTED;
    }
}
