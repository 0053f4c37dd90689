/* Shape inference and cost of the ops that work along axes of any rank:
 * broadcasting element-wise math (ew_binary, ew_unary), layout and indexing
 * (transpose, slice, concat, gather), reductions over chosen axes
 * (reduce_axes), log_softmax, batch_matmul, and selection by a mask
 * (where, masked_fill) and the comparisons that make masks (compare). They
 * are what ONNX graphs exported from PyTorch need beyond the dense and
 * convolution ops.
 *
 * Cost (flops, bytes read + written), for the sim backend's timing model:
 *   ew_binary    n flops (n = output elems; 8n for pow), reads both
 *                inputs, writes n
 *   ew_unary     n flops (8n for the transcendental kinds), reads n, writes n
 *   transpose, slice, concat, gather  0 flops, reads and writes the output's
 *                bytes (gather also reads its indices)
 *   reduce_axes  input elems flops, reads the input, writes the output
 *   log_softmax  5n flops, reads n, writes n
 *   batch_matmul 2*B*M*N*K flops, reads a + b, writes B*M*N
 *   where, masked_fill  n flops, reads every input, writes n
 *   compare      n flops, reads both inputs, writes n i32 */
#include "ops_axes.h"
#include "ops_impl.h"

#include "sl_error.h"

#include <math.h>

int sl_ops_broadcast(const sl_shape *a, const sl_shape *b, sl_shape *out, char *err, size_t errlen)
{
    unsigned nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    sl_shape s = {.dtype = a->dtype, .ndim = (uint8_t) nd};
    for (unsigned d = 0; d < nd; d++) {
        int da = (int) d - (int) (nd - a->ndim), db = (int) d - (int) (nd - b->ndim);
        int64_t x = da >= 0 ? a->dims[da] : 1, y = db >= 0 ? b->dims[db] : 1;
        if (x != y && x != 1 && y != 1) {
            char sa[SL_SHAPE_STR_LEN], sb[SL_SHAPE_STR_LEN];
            return sl_ops_fail(err, errlen, "in0 %s and in1 %s do not broadcast (dim %u)",
                               sl_shape_str(a, sa, sizeof sa), sl_shape_str(b, sb, sizeof sb), d);
        }
        s.dims[d] = x == 1 ? y : x;
    }
    *out = s;
    return SL_OK;
}

int sl_ops_infer_ew_binary(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                           size_t errlen)
{
    int rc = sl_ops_need_f32(in, 2, err, errlen);
    if (rc)
        return rc;
    if (a->i[0] < 0 || a->i[0] >= SL_EW_BINARY_COUNT)
        return sl_ops_fail(err, errlen, "i[0] (kind) = %lld: must be in [0, %d)",
                           (long long) a->i[0], SL_EW_BINARY_COUNT);
    return sl_ops_broadcast(&in[0], &in[1], &out[0], err, errlen);
}

void sl_ops_cost_ew_binary(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                           sl_op_cost *c)
{
    uint64_t n = sl_shape_elems(&out[0]);
    c->flops = a->i[0] == SL_EW_POW ? 8 * n : n;
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&out[0]);
}

int sl_ops_infer_ew_unary(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                          size_t errlen)
{
    int rc = sl_ops_need_f32(in, 1, err, errlen);
    if (rc)
        return rc;
    if (a->i[0] < 0 || a->i[0] >= SL_EW_UNARY_COUNT)
        return sl_ops_fail(err, errlen, "i[0] (kind) = %lld: must be in [0, %d)",
                           (long long) a->i[0], SL_EW_UNARY_COUNT);
    if (isnan(a->f[0]) || isnan(a->f[1]))
        return sl_ops_fail(err, errlen, "f[0] and f[1] must not be NaN");
    if (a->i[0] == SL_EW_CLIP && !(a->f[0] <= a->f[1]))
        return sl_ops_fail(err, errlen, "clip: f[0] (min) %g is above f[1] (max) %g",
                           (double) a->f[0], (double) a->f[1]);
    out[0] = in[0];
    return SL_OK;
}

void sl_ops_cost_ew_unary(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                          sl_op_cost *c)
{
    (void) out;
    uint64_t n = sl_shape_elems(&in[0]);
    bool cheap = a->i[0] == SL_EW_NEG || a->i[0] == SL_EW_ABS || a->i[0] == SL_EW_CLIP ||
                 a->i[0] == SL_EW_LEAKY_RELU || a->i[0] == SL_EW_FLOOR || a->i[0] == SL_EW_CEIL ||
                 a->i[0] == SL_EW_SOFTSIGN || a->i[0] == SL_EW_SIGN || a->i[0] == SL_EW_ROUND ||
                 a->i[0] == SL_EW_THRESHOLDED_RELU || a->i[0] == SL_EW_HARD_SWISH ||
                 a->i[0] == SL_EW_SHRINK;
    c->flops = cheap ? n : 8 * n;
    c->bytes = 2 * sl_shape_bytes(&in[0]);
}

int sl_ops_infer_transpose(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                           size_t errlen)
{
    unsigned nd = in[0].ndim;
    unsigned seen = 0;
    sl_shape s = in[0];
    for (unsigned d = 0; d < SL_MAX_DIMS; d++) {
        int64_t p = a->i[d];
        if (d >= nd) {
            if (p != 0)
                return sl_ops_fail(err, errlen, "i[%u] = %lld: beyond the rank %u, must be 0", d,
                                   (long long) p, nd);
            continue;
        }
        if (p < 0 || p >= (int64_t) nd || (seen & (1u << p)))
            return sl_ops_fail(err, errlen,
                               "i[0..%u) must be a permutation of the %u axes; i[%u] = %lld", nd,
                               nd, d, (long long) p);
        seen |= 1u << p;
        s.dims[d] = in[0].dims[p];
    }
    out[0] = s;
    return SL_OK;
}

/* Bytes moved by a copy-like op: its output read and written. */
void sl_ops_cost_layout(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                        sl_op_cost *c)
{
    (void) a;
    (void) in;
    c->flops = 0;
    c->bytes = 2 * sl_shape_bytes(&out[0]);
}

static int need_axis(int64_t axis, unsigned nd, char *err, size_t errlen)
{
    if (axis < 0 || axis >= (int64_t) nd)
        return sl_ops_fail(err, errlen, "axis %lld: must be in [0, %u)", (long long) axis, nd);
    return SL_OK;
}

int sl_ops_infer_slice(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                       size_t errlen)
{
    int rc = need_axis(a->i[0], in[0].ndim, err, errlen);
    if (rc)
        return rc;
    int64_t dim = in[0].dims[a->i[0]], start = a->i[1], end = a->i[2];
    int64_t step = sl_slice_step(a);
    int64_t count;
    if (step < -(int64_t) SL_MAX_ELEMS || step > (int64_t) SL_MAX_ELEMS)
        return sl_ops_fail(err, errlen, "step %lld: out of range", (long long) step);
    if (step > 0) {
        if (start < 0 || start >= end || end > dim)
            return sl_ops_fail(
                err, errlen, "step %lld: need 0 <= start (%lld) < end (%lld) <= %lld",
                (long long) step, (long long) start, (long long) end, (long long) dim);
        count = (end - start + step - 1) / step;
    } else {
        if (end < -1 || end >= start || start >= dim)
            return sl_ops_fail(
                err, errlen, "step %lld: need -1 <= end (%lld) < start (%lld) < %lld",
                (long long) step, (long long) end, (long long) start, (long long) dim);
        count = (start - end + (-step) - 1) / (-step);
    }
    out[0] = in[0];
    out[0].dims[a->i[0]] = count;
    return SL_OK;
}

int sl_ops_infer_concat(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                        size_t errlen)
{
    int rc = need_axis(a->i[0], in[0].ndim, err, errlen);
    if (rc)
        return rc;
    if (in[0].dtype != in[1].dtype || in[0].ndim != in[1].ndim)
        return sl_ops_fail(err, errlen, "in0 and in1 must have the same dtype and rank");
    for (unsigned d = 0; d < in[0].ndim; d++)
        if ((int64_t) d != a->i[0] && in[0].dims[d] != in[1].dims[d])
            return sl_ops_fail(err, errlen, "in0 and in1 differ in dim %u, not the axis", d);
    out[0] = in[0];
    out[0].dims[a->i[0]] += in[1].dims[a->i[0]];
    if (!sl_shape_valid(&out[0]))
        return sl_ops_fail(err, errlen, "the result is too large");
    return SL_OK;
}

int sl_ops_infer_gather(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                        size_t errlen)
{
    int rc = need_axis(a->i[0], in[0].ndim, err, errlen);
    if (rc)
        return rc;
    if (in[1].dtype != SL_I32)
        return sl_ops_fail(err, errlen, "in1 (indices) must be i32");
    unsigned axis = (unsigned) a->i[0], nd = in[0].ndim - 1 + in[1].ndim;
    if (nd > SL_MAX_DIMS)
        return sl_ops_fail(err, errlen, "the result would have rank %u, above %d", nd, SL_MAX_DIMS);
    sl_shape s = {.dtype = in[0].dtype, .ndim = (uint8_t) nd};
    unsigned k = 0;
    for (unsigned d = 0; d < axis; d++)
        s.dims[k++] = in[0].dims[d];
    for (unsigned d = 0; d < in[1].ndim; d++)
        s.dims[k++] = in[1].dims[d];
    for (unsigned d = axis + 1; d < in[0].ndim; d++)
        s.dims[k++] = in[0].dims[d];
    if (!sl_shape_valid(&s))
        return sl_ops_fail(err, errlen, "the result is too large");
    out[0] = s;
    return SL_OK;
}

void sl_ops_cost_gather(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                        sl_op_cost *c)
{
    (void) a;
    c->flops = 0;
    c->bytes = 2 * sl_shape_bytes(&out[0]) + sl_shape_bytes(&in[1]);
}

int sl_ops_infer_index_write(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                             size_t errlen)
{
    (void) out;
    int rc = need_axis(a->i[0], in[0].ndim, err, errlen);
    if (rc)
        return rc;
    if (in[1].dtype != SL_I32 || in[1].ndim != 1)
        return sl_ops_fail(err, errlen, "in1 (index) must be an i32 vector");
    sl_shape want = in[0];
    want.dims[a->i[0]] = in[1].dims[0];
    return sl_ops_need_shape(in, 2, &want, "dst's shape with the index's length at axis", err,
                             errlen);
}

void sl_ops_cost_index_write(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                             sl_op_cost *c)
{
    (void) a, (void) out;
    c->flops = 0;
    c->bytes = 2 * sl_shape_bytes(&in[2]) + sl_shape_bytes(&in[1]);
}

int sl_ops_infer_reduce_axes(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                             size_t errlen)
{
    int rc = sl_ops_need_f32(in, 1, err, errlen);
    if (rc)
        return rc;
    if (a->i[0] < 0 || a->i[0] >= SL_REDUCE_COUNT)
        return sl_ops_fail(err, errlen, "i[0] (kind) = %lld: must be in [0, %d)",
                           (long long) a->i[0], SL_REDUCE_COUNT);
    int64_t mask = a->i[1];
    if (mask <= 0 || mask >= (int64_t) 1 << in[0].ndim)
        return sl_ops_fail(err, errlen,
                           "i[1] (axes) = %lld: a nonzero bit mask of the %u axes of in0",
                           (long long) mask, in[0].ndim);
    out[0] = in[0];
    for (unsigned d = 0; d < in[0].ndim; d++)
        if (mask & ((int64_t) 1 << d))
            out[0].dims[d] = 1;
    return SL_OK;
}

void sl_ops_cost_reduce_axes(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                             sl_op_cost *c)
{
    (void) a;
    c->flops = sl_shape_elems(&in[0]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&out[0]);
}

int sl_ops_infer_batch_matmul(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                              size_t errlen)
{
    (void) a;
    int rc = sl_ops_need_f32(in, 2, err, errlen);
    if (!rc)
        rc = sl_ops_need_rank(in, 0, 3, err, errlen);
    if (!rc)
        rc = sl_ops_need_rank(in, 1, 3, err, errlen);
    if (rc)
        return rc;
    int64_t ba = in[0].dims[0], bb = in[1].dims[0];
    if (ba != bb && ba != 1 && bb != 1)
        return sl_ops_fail(err, errlen, "batches %lld and %lld: equal, or one of them 1",
                           (long long) ba, (long long) bb);
    if (in[0].dims[2] != in[1].dims[1])
        return sl_ops_fail(err, errlen, "in0 [B,M,K] has K = %lld, in1 [B,K,N] has K = %lld",
                           (long long) in[0].dims[2], (long long) in[1].dims[1]);
    out[0] = (sl_shape){
        .dtype = SL_F32, .ndim = 3, .dims = {ba > bb ? ba : bb, in[0].dims[1], in[1].dims[2]}};
    if (!sl_shape_valid(&out[0]))
        return sl_ops_fail(err, errlen, "the result is too large");
    return SL_OK;
}

void sl_ops_cost_batch_matmul(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                              sl_op_cost *c)
{
    (void) a;
    c->flops = 2 * sl_shape_elems(&out[0]) * (uint64_t) in[0].dims[2];
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&out[0]);
}

static int need_mask(const sl_shape *m, const char *what, char *err, size_t errlen)
{
    if (m->dtype != SL_I32)
        return sl_ops_fail(err, errlen, "%s (the mask) must be i32, not %s", what,
                           sl_dtype_name(m->dtype));
    return SL_OK;
}

int sl_ops_infer_where(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                       size_t errlen)
{
    (void) a;
    int rc = need_mask(&in[0], "in0", err, errlen);
    for (unsigned i = 1; i < 3 && !rc; i++)
        if (in[i].dtype != SL_F32)
            rc = sl_ops_fail(err, errlen, "in%u must be a float tensor", i);
    sl_shape ab, all;
    if (!rc)
        rc = sl_ops_broadcast(&in[1], &in[2], &ab, err, errlen);
    if (!rc)
        rc = sl_ops_broadcast(&ab, &in[0], &all, err, errlen);
    if (rc)
        return rc;
    all.dtype = SL_F32;
    out[0] = all;
    return SL_OK;
}

void sl_ops_cost_where(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out, sl_op_cost *c)
{
    (void) a;
    c->flops = sl_shape_elems(&out[0]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&in[2]) +
               sl_shape_bytes(&out[0]);
}

int sl_ops_infer_masked_fill(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                             size_t errlen)
{
    int rc = sl_ops_need_f32(in, 1, err, errlen);
    if (!rc)
        rc = need_mask(&in[1], "in1", err, errlen);
    sl_shape b;
    if (!rc)
        rc = sl_ops_broadcast(&in[0], &in[1], &b, err, errlen);
    if (rc)
        return rc;
    b.dtype = in[0].dtype;
    if (!sl_shape_equal(&b, &in[0]))
        return sl_ops_fail(err, errlen, "in1 (the mask) must broadcast to in0's shape");
    if (isnan(a->f[0]))
        return sl_ops_fail(err, errlen, "f[0] (value) must not be NaN");
    out[0] = in[0];
    return SL_OK;
}

void sl_ops_cost_masked_fill(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                             sl_op_cost *c)
{
    (void) a;
    c->flops = sl_shape_elems(&out[0]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&out[0]);
}

int sl_ops_infer_compare(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                         size_t errlen)
{
    if (a->i[0] < 0 || a->i[0] >= SL_CMP_COUNT)
        return sl_ops_fail(err, errlen, "i[0] (kind) must be in [0, %d), got %lld", SL_CMP_COUNT,
                           (long long) a->i[0]);
    /* float inputs arrive here as f32 (the registry checked they share a
     * dtype); an i32 one must then be beside another i32 */
    for (unsigned i = 0; i < 2; i++)
        if (in[i].dtype != SL_F32 && in[i].dtype != SL_I32)
            return sl_ops_fail(err, errlen, "in%u must be a float or i32 tensor, not %s", i,
                               sl_dtype_name(in[i].dtype));
    if (in[0].dtype != in[1].dtype)
        return sl_ops_fail(err, errlen, "in0 and in1 must both be float or both be i32");
    sl_shape s;
    int rc = sl_ops_broadcast(&in[0], &in[1], &s, err, errlen);
    if (rc)
        return rc;
    s.dtype = SL_I32;
    out[0] = s;
    return SL_OK;
}

void sl_ops_cost_compare(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                         sl_op_cost *c)
{
    (void) a;
    c->flops = sl_shape_elems(&out[0]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&out[0]);
}
