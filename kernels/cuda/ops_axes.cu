/* The ops along axes of any rank (ops_axes.h) on cuda: broadcasting
 * element-wise math, transpose, slice, concat, gather, reductions over
 * axes and log_softmax. One thread per output element; an element's input
 * offsets are decoded from its flat index with the shapes passed by value
 * (at most 6 dims). 64-bit indices throughout: these ops serve imported
 * graphs, where they are seldom the hot path. batch_matmul is cuBLAS's
 * strided batched GEMM (exec.c). The math per element is the cpu
 * backend's (kernels/cpu/axes.c). */
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
__global__ void k_ew_binary(float *y, const float *a, view va, const float *b, view vb, uint64_t n,
                            int kind, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    y[i] = sl_ew_binary(kind, a[offset_of(va, i)], b[offset_of(vb, i)]);
}

__global__ void k_ew_unary(float *y, const float *x, uint64_t n, int kind, float p, float q,
                           const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    y[i] = sl_ew_unary(kind, x[i], p, q);
}

/* transpose: v has the output's dims and the input's permuted strides. */
__global__ void k_gather_view(uint32_t *y, const uint32_t *x, view v, uint64_t n, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    y[i] = x[offset_of(v, i)];
}

/* slice: output [outer, count, inner] from input rows start + k * step. */
__global__ void k_slice(uint32_t *y, const uint32_t *x, uint64_t count, uint64_t inner, int64_t dim,
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
__global__ void k_concat(uint32_t *y, const uint32_t *a, const uint32_t *b, uint64_t na,
                         uint64_t nb, uint64_t n, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    {
        uint64_t o = i / (na + nb), j = i % (na + nb);
        y[i] = j < na ? a[o * na + j] : b[o * nb + (j - na)];
    }
}

/* gather: output [outer, n_idx, inner]; an index outside [-dim, dim)
 * raises the stream's flag and is never used as an address. */
__global__ void k_gather(uint32_t *y, const uint32_t *x, const int32_t *idx, uint64_t n_idx,
                         uint64_t inner, int64_t dim, uint64_t n, int *flag)
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
        y[i] = x[(o * (uint64_t) dim + (uint64_t) k) * inner + in];
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

extern "C" int sl_cuda_run_axes(sl_cuda_exec *x, const sl_op_call *c)
{
    cudaStream_t st = x->stream;
    const sl_shape *os = &c->out[0].shape, *is = &c->in[0].shape;
    uint64_t n = sl_shape_elems(os);
    unsigned grid = blocks_for(n);
    const int64_t *ia = c->attrs.i;
    switch (c->op) {
    case SL_OP_EW_BINARY:
        k_ew_binary<<<grid, BLOCK, 0, st>>>(f32(&c->out[0]), f32(&c->in[0]), bcast_view(is, os),
                                            f32(&c->in[1]), bcast_view(&c->in[1].shape, os), n,
                                            (int) ia[0], x->flag_dev);
        break;
    case SL_OP_EW_UNARY:
        k_ew_unary<<<grid, BLOCK, 0, st>>>(f32(&c->out[0]), f32(&c->in[0]), n, (int) ia[0],
                                           c->attrs.f[0], c->attrs.f[1], x->flag_dev);
        break;
    case SL_OP_TRANSPOSE: {
        view in = dense_view(is), v = {};
        v.nd = os->ndim;
        for (int d = 0; d < os->ndim; d++) {
            v.dims[d] = os->dims[d];
            v.st[d] = in.st[ia[d]];
        }
        k_gather_view<<<grid, BLOCK, 0, st>>>((uint32_t *) c->out[0].data,
                                              (const uint32_t *) c->in[0].data, v, n, x->flag_dev);
        break;
    }
    case SL_OP_SLICE: {
        uint64_t outer, inner;
        split_at(is, (unsigned) ia[0], &outer, &inner);
        k_slice<<<grid, BLOCK, 0, st>>>((uint32_t *) c->out[0].data,
                                        (const uint32_t *) c->in[0].data,
                                        (uint64_t) os->dims[ia[0]], inner, is->dims[ia[0]], ia[1],
                                        sl_slice_step(&c->attrs), n, x->flag_dev);
        break;
    }
    case SL_OP_CONCAT: {
        uint64_t outer, inner;
        split_at(os, (unsigned) ia[0], &outer, &inner);
        k_concat<<<grid, BLOCK, 0, st>>>(
            (uint32_t *) c->out[0].data, (const uint32_t *) c->in[0].data,
            (const uint32_t *) c->in[1].data, (uint64_t) is->dims[ia[0]] * inner,
            (uint64_t) c->in[1].shape.dims[ia[0]] * inner, n, x->flag_dev);
        break;
    }
    case SL_OP_GATHER: {
        uint64_t outer, inner;
        split_at(is, (unsigned) ia[0], &outer, &inner);
        k_gather<<<grid, BLOCK, 0, st>>>(
            (uint32_t *) c->out[0].data, (const uint32_t *) c->in[0].data, i32(&c->in[1]),
            sl_shape_elems(&c->in[1].shape), inner, is->dims[ia[0]], n, x->flag_dev);
        break;
    }
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
