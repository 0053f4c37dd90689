/* The ops along axes of any rank (ops_axes.h) on cuda: broadcasting
 * element-wise math, transpose, slice, concat, gather, reductions over
 * axes, log_softmax, where, masked_fill and compare. One thread per output
 * element; an element's input offsets are decoded from its flat index with
 * the shapes passed by value (at most 6 dims). 64-bit indices throughout:
 * these ops serve imported graphs, where they are seldom the hot path.
 * batch_matmul is cuBLAS's strided batched GEMM (exec.c). The math per
 * element is the cpu backend's (kernels/cpu/axes.c).
 *
 * The element-wise ops run in f32, bf16 and f16 (T, computing in f32); the
 * ops that move elements (transpose, slice, concat, gather) move words of
 * the element's size (W), whatever its dtype; reduce_axes and log_softmax
 * are f32 only, as the registry declares. */
#include "elementwise.h"
#include "kernels.cuh"

#include "ops_axes.h"

/* Dims and element strides of one tensor seen from the output's dims. */
struct view {
    int nd;
    int64_t dims[SL_MAX_DIMS];
    int64_t st[SL_MAX_DIMS];
};

static view dense_view(const sl_shape *s)
{
    view v = {};
    v.nd = s->ndim;
    int64_t acc = 1;
    for (int d = s->ndim - 1; d >= 0; d--) {
        v.dims[d] = s->dims[d];
        v.st[d] = acc;
        acc *= s->dims[d];
    }
    return v;
}

/* in's strides under broadcasting to out (0 along the dims it has as 1). */
static view bcast_view(const sl_shape *in, const sl_shape *out)
{
    view d = dense_view(in), v = {};
    v.nd = out->ndim;
    int off = out->ndim - in->ndim;
    for (int k = 0; k < out->ndim; k++) {
        v.dims[k] = out->dims[k];
        v.st[k] = k < off || in->dims[k - off] == 1 ? 0 : d.st[k - off];
    }
    return v;
}

/* The offset in a tensor of strides v.st of the element whose index in
 * dims v.dims is the flat index i. */
__device__ static inline int64_t offset_of(const view &v, uint64_t i)
{
    int64_t off = 0;
    for (int d = v.nd - 1; d >= 0; d--) {
        off += (int64_t) (i % (uint64_t) v.dims[d]) * v.st[d];
        i /= (uint64_t) v.dims[d];
    }
    return off;
}

/* y may alias a or b (in-place execution): each thread reads its inputs
 * before writing its own element, and an aliased input has y's shape. */
template <class T>
__global__ void k_ew_binary(T *y, const T *a, view va, const T *b, view vb, uint64_t n, int kind,
                            const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    y[i] = st<T>(sl_ew_binary(kind, ld(a[offset_of(va, i)]), ld(b[offset_of(vb, i)])));
}

template <class T>
__global__ void k_ew_unary(T *y, const T *x, uint64_t n, int kind, float p, float q,
                           const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    y[i] = st<T>(sl_ew_unary(kind, ld(x[i]), p, q));
}

/* where (a given) and masked_fill (a NULL: the fill value v): y = cond ? a
 * : b, each operand broadcast to y's shape. y may alias masked_fill's x. */
template <class T>
__global__ void k_select(T *y, const int32_t *m, view vm, const T *a, view va, float v, const T *b,
                         view vb, uint64_t n, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    {
        bool c = m[offset_of(vm, i)] != 0;
        y[i] = c ? (a ? a[offset_of(va, i)] : st<T>(v)) : b[offset_of(vb, i)];
    }
}

template <class T> static void launch_select(sl_cuda_exec *x, const sl_op_call *c)
{
    const sl_shape *os = &c->out[0].shape;
    uint64_t n = sl_shape_elems(os);
    bool fill = c->op == SL_OP_MASKED_FILL;
    const sl_tensor_ref *m = &c->in[fill ? 1 : 0], *b = &c->in[fill ? 0 : 2];
    view va = fill ? view{} : bcast_view(&c->in[1].shape, os);
    k_select<<<blocks_for(n), BLOCK, 0, x->stream>>>(
        (T *) c->out[0].data, i32(m), bcast_view(&m->shape, os),
        fill ? (const T *) NULL : (const T *) c->in[1].data, va, c->attrs.f[0], (const T *) b->data,
        bcast_view(&b->shape, os), n, x->flag_dev);
}

/* compare: y = a kind b as 0 or 1, a and b broadcast to y's shape. Floats
 * compare in f32 (exact for the halves), i32 as integers. */
__device__ static inline int32_t cmp_elem(int kind, float a, float b)
{
    return sl_cmp_f32(kind, a, b);
}

__device__ static inline int32_t cmp_elem(int kind, int32_t a, int32_t b)
{
    return sl_cmp_i32(kind, a, b);
}

__device__ static inline int32_t load_cmp(int32_t v)
{
    return v;
}

template <class T> __device__ static inline float load_cmp(T v)
{
    return ld(v);
}

template <class T>
__global__ void k_compare(int32_t *y, const T *a, view va, const T *b, view vb, uint64_t n,
                          int kind, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    y[i] = cmp_elem(kind, load_cmp(a[offset_of(va, i)]), load_cmp(b[offset_of(vb, i)]));
}

template <class T> static void launch_compare(sl_cuda_exec *x, const sl_op_call *c)
{
    const sl_shape *os = &c->out[0].shape;
    uint64_t n = sl_shape_elems(os);
    k_compare<<<blocks_for(n), BLOCK, 0, x->stream>>>(
        i32(&c->out[0]), (const T *) c->in[0].data, bcast_view(&c->in[0].shape, os),
        (const T *) c->in[1].data, bcast_view(&c->in[1].shape, os), n, (int) c->attrs.i[0],
        x->flag_dev);
}

/* transpose: v has the output's dims and the input's permuted strides. */
template <class W>
__global__ void k_gather_view(W *y, const W *x, view v, uint64_t n, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    y[i] = x[offset_of(v, i)];
}

/* slice: output [outer, count, inner] from input rows start + k * step. */
template <class W>
__global__ void k_slice(W *y, const W *x, uint64_t count, uint64_t inner, int64_t dim,
                        int64_t start, int64_t step, uint64_t n, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    {
        uint64_t in = i % inner, k = (i / inner) % count, o = i / inner / count;
        y[i] = x[(o * (uint64_t) dim + (uint64_t) (start + (int64_t) k * step)) * inner + in];
    }
}

/* concat: each output row of na + nb elements from a row of a and one of b. */
template <class W>
__global__ void k_concat(W *y, const W *a, const W *b, uint64_t na, uint64_t nb, uint64_t n,
                         const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    {
        uint64_t o = i / (na + nb), j = i % (na + nb);
        y[i] = j < na ? a[o * na + j] : b[o * nb + (j - na)];
    }
}

/* gather (rows: the output) and index_write (rows: src, written into
 * base): one thread per element of rows [outer, n_idx, inner], each moving
 * it from or to row idx[j] of base [outer, dim, inner]. An index outside
 * [-dim, dim) raises the stream's flag and is never used as an address. */
template <class W, bool WRITE>
__global__ void k_index_rows(W *base, W *rows, const int32_t *idx, uint64_t n_idx, uint64_t inner,
                             int64_t dim, uint64_t n, int *flag)
{
    SKIP_IF_FAILED(flag);
    GRID_STRIDE(uint64_t, i, n)
    {
        uint64_t in = i % inner, j = (i / inner) % n_idx, o = i / inner / n_idx;
        int64_t k = idx[j];
        if (k < -dim || k >= dim) {
            raise_flag(flag, SL_CUDA_FLAG_BAD_INDEX);
            return;
        }
        k = k < 0 ? k + dim : k;
        W *at = &base[(o * (uint64_t) dim + (uint64_t) k) * inner + in];
        if (WRITE)
            *at = rows[i];
        else
            rows[i] = *at;
    }
}

/* reduce_axes: one thread per output element walks its reduced elements
 * (vo: the output's dims with the input's strides for the kept axes; vr:
 * the reduced axes' dims and strides). Accumulates in double. */
__global__ void k_reduce_axes(float *y, const float *x, view vo, view vr, uint64_t per_out,
                              uint64_t n, int kind, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    {
        int64_t base = offset_of(vo, i);
        double acc = kind == SL_REDUCE_MAX ? -INFINITY : kind == SL_REDUCE_MIN ? INFINITY : 0.0;
        bool nan = false;
        for (uint64_t k = 0; k < per_out; k++) {
            double v = x[base + offset_of(vr, k)];
            nan |= isnan(v);
            acc = kind == SL_REDUCE_MAX   ? fmax(acc, v)
                  : kind == SL_REDUCE_MIN ? fmin(acc, v)
                                          : acc + v;
        }
        if (kind == SL_REDUCE_MEAN)
            acc /= (double) per_out;
        y[i] = nan ? NAN : (float) acc;
    }
}

/* log_softmax: one thread per row. */
__global__ void k_log_softmax(float *y, const float *x, uint64_t rows, uint64_t cols,
                              const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, r, rows)
    {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float mx = xr[0];
        for (uint64_t j = 1; j < cols; j++)
            mx = xr[j] > mx ? xr[j] : mx;
        double sum = 0.0;
        for (uint64_t j = 0; j < cols; j++)
            sum += exp((double) xr[j] - mx);
        double lse = mx + log(sum);
        for (uint64_t j = 0; j < cols; j++)
            yr[j] = (float) ((double) xr[j] - lse);
    }
}

static void split_at(const sl_shape *s, unsigned axis, uint64_t *outer, uint64_t *inner)
{
    *outer = 1;
    *inner = 1;
    for (unsigned d = 0; d < axis; d++)
        *outer *= (uint64_t) s->dims[d];
    for (unsigned d = axis + 1; d < s->ndim; d++)
        *inner *= (uint64_t) s->dims[d];
}

template <class T> static void launch_ew(sl_cuda_exec *x, const sl_op_call *c)
{
    const sl_shape *os = &c->out[0].shape;
    uint64_t n = sl_shape_elems(os);
    T *y = (T *) c->out[0].data;
    const T *a = (const T *) c->in[0].data;
    int kind = (int) c->attrs.i[0];
    if (c->op == SL_OP_EW_BINARY)
        k_ew_binary<<<blocks_for(n), BLOCK, 0, x->stream>>>(
            y, a, bcast_view(&c->in[0].shape, os), (const T *) c->in[1].data,
            bcast_view(&c->in[1].shape, os), n, kind, x->flag_dev);
    else
        k_ew_unary<<<blocks_for(n), BLOCK, 0, x->stream>>>(y, a, n, kind, c->attrs.f[0],
                                                           c->attrs.f[1], x->flag_dev);
}

/* transpose, slice, concat and gather in words W of the element's size. */
template <class W> static void launch_move(sl_cuda_exec *x, const sl_op_call *c)
{
    cudaStream_t st = x->stream;
    const sl_shape *os = &c->out[0].shape, *is = &c->in[0].shape;
    uint64_t n = sl_shape_elems(os);
    unsigned grid = blocks_for(n);
    const int64_t *ia = c->attrs.i;
    W *y = (W *) c->out[0].data;
    const W *in = (const W *) c->in[0].data;
    uint64_t outer, inner;
    switch (c->op) {
    case SL_OP_TRANSPOSE: {
        view dense = dense_view(is), v = {};
        v.nd = os->ndim;
        for (int d = 0; d < os->ndim; d++) {
            v.dims[d] = os->dims[d];
            v.st[d] = dense.st[ia[d]];
        }
        k_gather_view<<<grid, BLOCK, 0, st>>>(y, in, v, n, x->flag_dev);
        break;
    }
    case SL_OP_SLICE:
        split_at(is, (unsigned) ia[0], &outer, &inner);
        k_slice<<<grid, BLOCK, 0, st>>>(y, in, (uint64_t) os->dims[ia[0]], inner, is->dims[ia[0]],
                                        ia[1], sl_slice_step(&c->attrs), n, x->flag_dev);
        break;
    case SL_OP_CONCAT:
        split_at(os, (unsigned) ia[0], &outer, &inner);
        k_concat<<<grid, BLOCK, 0, st>>>(
            y, in, (const W *) c->in[1].data, (uint64_t) is->dims[ia[0]] * inner,
            (uint64_t) c->in[1].shape.dims[ia[0]] * inner, n, x->flag_dev);
        break;
    case SL_OP_INDEX_WRITE: {
        /* no output: the work is src's elements, written into in0 */
        uint64_t m = sl_shape_elems(&c->in[2].shape);
        split_at(is, (unsigned) ia[0], &outer, &inner);
        k_index_rows<W, true><<<blocks_for(m), BLOCK, 0, st>>>(
            (W *) c->in[0].data, (W *) c->in[2].data, i32(&c->in[1]),
            sl_shape_elems(&c->in[1].shape), inner, is->dims[ia[0]], m, x->flag_dev);
        break;
    }
    default: /* SL_OP_GATHER */
        split_at(is, (unsigned) ia[0], &outer, &inner);
        k_index_rows<W, false><<<grid, BLOCK, 0, st>>>((W *) in, y, i32(&c->in[1]),
                                                       sl_shape_elems(&c->in[1].shape), inner,
                                                       is->dims[ia[0]], n, x->flag_dev);
        break;
    }
}

extern "C" int sl_cuda_run_axes(sl_cuda_exec *x, const sl_op_call *c)
{
    cudaStream_t st = x->stream;
    const sl_shape *os = &c->out[0].shape, *is = &c->in[0].shape;
    uint64_t n = sl_shape_elems(os);
    unsigned grid = blocks_for(n);
    const int64_t *ia = c->attrs.i;
    switch (c->op) {
    case SL_OP_EW_BINARY:
    case SL_OP_EW_UNARY:
        SL_FLOAT_DISPATCH(is->dtype, launch_ew, x, c);
        break;
    case SL_OP_WHERE:
    case SL_OP_MASKED_FILL:
        SL_FLOAT_DISPATCH(os->dtype, launch_select, x, c);
        break;
    case SL_OP_COMPARE:
        if (is->dtype == SL_I32)
            launch_compare<int32_t>(x, c);
        else
            SL_FLOAT_DISPATCH(is->dtype, launch_compare, x, c);
        break;
    case SL_OP_TRANSPOSE:
    case SL_OP_SLICE:
    case SL_OP_CONCAT:
    case SL_OP_GATHER:
    case SL_OP_INDEX_WRITE:
        if (sl_dtype_size(is->dtype) == 2)
            launch_move<uint16_t>(x, c);
        else
            launch_move<uint32_t>(x, c);
        break;
    case SL_OP_REDUCE_AXES: {
        view in = dense_view(is), vo = {}, vr = {};
        vo.nd = os->ndim;
        uint64_t per_out = 1;
        for (int d = 0; d < is->ndim; d++) {
            vo.dims[d] = os->dims[d];
            vo.st[d] = in.st[d];
            if (ia[1] & ((int64_t) 1 << d)) {
                vr.dims[vr.nd] = is->dims[d];
                vr.st[vr.nd++] = in.st[d];
                per_out *= (uint64_t) is->dims[d];
            }
        }
        k_reduce_axes<<<grid, BLOCK, 0, st>>>(f32(&c->out[0]), f32(&c->in[0]), vo, vr, per_out, n,
                                              (int) ia[0], x->flag_dev);
        break;
    }
    case SL_OP_LOG_SOFTMAX: {
        uint64_t rows = (uint64_t) is->dims[0];
        k_log_softmax<<<blocks_for(rows), BLOCK, 0, st>>>(f32(&c->out[0]), f32(&c->in[0]), rows,
                                                          (uint64_t) is->dims[1], x->flag_dev);
        break;
    }
    default:
        return SL_EUNSUPPORTED;
    }
    return LAUNCHED("cuda.axes");
}
