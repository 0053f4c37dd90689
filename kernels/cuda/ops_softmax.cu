/* Row-wise ops over [N,C]: softmax, softmax_xent (+ its mean loss),
 * softmax_xent_grad and argmax.
 *
 * A row is handled by a group of threads: one warp per row when C <=
 * WARP_ROW_MAX (8 rows per block, no shared memory), the whole block
 * otherwise. Groups walk the rows grid-stride. softmax_xent's mean loss is
 * deterministic: each block sums its rows' losses in double into the
 * workspace, and one block adds those partials.
 *
 * A label outside [0, C) is never used as an index: the kernel raises
 * SL_CUDA_FLAG_BAD_LABEL in the stream's flag word (the backend reports
 * SL_EINVAL at the next host callback, and the loss is left unwritten). */
#include "kernels.cuh"

#include <math.h>

#define WARP_ROW_MAX 1024
#define ROWS_PER_WARP_BLOCK (BLOCK / 32)

/* The threads sharing a row: a warp (lane = lane id) or the block. */
template <bool WARP> struct row_group {
    __device__ static unsigned lane()
    {
        return WARP ? threadIdx.x & 31 : threadIdx.x;
    }
    __device__ static unsigned width()
    {
        return WARP ? 32 : blockDim.x;
    }
    __device__ static uint64_t first()
    {
        return WARP ? (uint64_t) blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)
                    : (uint64_t) blockIdx.x;
    }
    __device__ static uint64_t stride()
    {
        return WARP ? (uint64_t) gridDim.x * (blockDim.x >> 5) : (uint64_t) gridDim.x;
    }
    template <class T, class Op> __device__ static T allreduce(T v, Op op, T identity)
    {
        if constexpr (WARP)
            return warp_allreduce(v, op);
        else
            return block_allreduce(v, op, identity);
    }
};

static inline unsigned row_blocks(uint64_t rows, bool warp)
{
    uint64_t b = warp ? (rows + ROWS_PER_WARP_BLOCK - 1) / ROWS_PER_WARP_BLOCK : rows;
    return b < 1 ? 1 : b > MAX_BLOCKS ? MAX_BLOCKS : (unsigned) b;
}

/* probs = softmax(x) row by row. With labels (softmax_xent), also sums the
 * rows' cross-entropies log(sum) + max - x[label] of this block into
 * loss_part[blockIdx.x]. Group loops are uniform: every thread of the block
 * reaches the final reduction. */
template <bool WARP>
__global__ void k_softmax(const float *x, float *probs, uint64_t rows, unsigned cols,
                          const int32_t *labels, double *loss_part, int *flag)
{
    SKIP_BLOCK_IF_FAILED(flag);
    typedef row_group<WARP> G;
    unsigned lane = G::lane(), width = G::width();
    double loss = 0.0;
    for (uint64_t r = G::first(); r < rows; r += G::stride()) {
        const float *xr = x + r * cols;
        float *pr = probs + r * cols;
        float m = -INFINITY;
        for (unsigned j = lane; j < cols; j += width)
            m = fmaxf(m, xr[j]);
        m = G::allreduce(m, op_max{}, -INFINITY);
        float s = 0.0f;
        for (unsigned j = lane; j < cols; j += width)
            s += expf(xr[j] - m);
        s = G::allreduce(s, op_sum{}, 0.0f);
        /* exp again rather than a store and a reload: one pass less */
        for (unsigned j = lane; j < cols; j += width)
            pr[j] = expf(xr[j] - m) / s;
        if (labels && lane == 0) {
            int32_t label = labels[r];
            if (label >= 0 && (unsigned) label < cols)
                loss += log((double) s) + (double) m - (double) xr[label];
            else
                raise_flag(flag, SL_CUDA_FLAG_BAD_LABEL);
        }
    }
    if (labels) {
        loss = block_allreduce(loss, op_sum{}, 0.0);
        if (threadIdx.x == 0)
            loss_part[blockIdx.x] = loss;
    }
}

__global__ void k_mean_finish(const double *part, unsigned parts, double divisor, float *out,
                              const int *failed)
{
    SKIP_BLOCK_IF_FAILED(failed);
    double acc = 0.0;
    for (unsigned i = threadIdx.x; i < parts; i += blockDim.x)
        acc += part[i];
    acc = block_allreduce(acc, op_sum{}, 0.0);
    if (threadIdx.x == 0)
        *out = (float) (acc / divisor);
}

/* dlogits = (probs - onehot(label)) * (1 / N), the rounding of the cpu
 * backend; a bad label matches no column. */
template <class I>
__global__ void k_xent_grad(float *dx, const float *probs, const int32_t *labels, I n, I cols,
                            float inv_rows, int *flag)
{
    SKIP_IF_FAILED(flag);
    GRID_STRIDE(I, i, n)
    {
        I r = i / cols, j = i - r * cols;
        int32_t label = labels[r];
        if (j == 0 && (label < 0 || (I) label >= cols))
            raise_flag(flag, SL_CUDA_FLAG_BAD_LABEL);
        dx[i] = (label >= 0 && (I) label == j ? probs[i] - 1.0f : probs[i]) * inv_rows;
    }
}

/* Whether (v, i) beats (bv, bi) for argmax: larger value, NaN above every
 * number, the first index on ties. A total order on distinct indices, so the
 * reduction's result does not depend on its shape. */
__device__ static bool argmax_better(float v, int i, float bv, int bi)
{
    bool vn = isnan(v), bn = isnan(bv);
    if (vn || bn)
        return vn && (!bn || i < bi);
    return v > bv || (v == bv && i < bi);
}

/* argmax runs in f32, bf16 and f16 (T, compared as f32); the softmax
 * family in f32 only, as the registry declares. */
template <class T, bool WARP>
__global__ void k_argmax(const T *x, int32_t *out, uint64_t rows, unsigned cols, const int *failed)
{
    SKIP_BLOCK_IF_FAILED(failed);
    typedef row_group<WARP> G;
    __shared__ float part_v[32];
    __shared__ int part_i[32];
    unsigned lane = G::lane(), width = G::width();
    for (uint64_t r = G::first(); r < rows; r += G::stride()) {
        const T *xr = x + r * cols;
        float bv = -INFINITY;
        int bi = INT32_MAX; /* "none yet": loses every tie with a real index */
        for (unsigned j = lane; j < cols; j += width) {
            float v = ld(xr[j]);
            if (argmax_better(v, (int) j, bv, bi))
                bv = v, bi = (int) j;
        }
        for (int off = 16; off > 0; off >>= 1) {
            float ov = __shfl_xor_sync(FULL_MASK, bv, off);
            int oi = __shfl_xor_sync(FULL_MASK, bi, off);
            if (argmax_better(ov, oi, bv, bi))
                bv = ov, bi = oi;
        }
        if constexpr (!WARP) {
            __syncthreads(); /* the previous row's readers are done */
            if ((threadIdx.x & 31) == 0)
                part_v[threadIdx.x >> 5] = bv, part_i[threadIdx.x >> 5] = bi;
            __syncthreads();
            if (threadIdx.x == 0)
                for (unsigned w = 1; w < (blockDim.x >> 5); w++)
                    if (argmax_better(part_v[w], part_i[w], bv, bi))
                        bv = part_v[w], bi = part_i[w];
        }
        if (lane == 0)
            out[r] = bi;
    }
}

template <bool WARP>
static void launch_rows(sl_cuda_exec *x, const sl_op_call *c, uint64_t rows, unsigned cols,
                        double *loss_part, unsigned grid)
{
    const float *in = f32(&c->in[0]);
    switch (c->op) {
    case SL_OP_SOFTMAX:
        k_softmax<WARP><<<grid, BLOCK, 0, x->stream>>>(in, f32(&c->out[0]), rows, cols, NULL, NULL,
                                                       x->flag_dev);
        break;
    case SL_OP_SOFTMAX_XENT:
        k_softmax<WARP><<<grid, BLOCK, 0, x->stream>>>(in, f32(&c->out[1]), rows, cols,
                                                       i32(&c->in[1]), loss_part, x->flag_dev);
        break;
    default: /* SL_OP_ARGMAX: launch_argmax */
        break;
    }
}

template <class T>
static void launch_argmax(sl_cuda_exec *x, const sl_op_call *c, uint64_t rows, unsigned cols,
                          bool warp, unsigned grid)
{
    const T *in = (const T *) c->in[0].data;
    if (warp)
        k_argmax<T, true>
            <<<grid, BLOCK, 0, x->stream>>>(in, i32(&c->out[0]), rows, cols, x->flag_dev);
    else
        k_argmax<T, false>
            <<<grid, BLOCK, 0, x->stream>>>(in, i32(&c->out[0]), rows, cols, x->flag_dev);
}

extern "C" int sl_cuda_run_softmax(sl_cuda_exec *x, const sl_op_call *c)
{
    const int64_t *d = c->in[0].shape.dims;
    uint64_t rows = (uint64_t) d[0], n = rows * (uint64_t) d[1];
    unsigned cols = (unsigned) d[1]; /* sl_cuda_check: cols <= INT_MAX */
    bool warp = cols <= WARP_ROW_MAX;
    unsigned grid = row_blocks(rows, warp);

    switch (c->op) {
    case SL_OP_ARGMAX:
        SL_FLOAT_DISPATCH(c->in[0].shape.dtype, launch_argmax, x, c, rows, cols, warp, grid);
        return LAUNCHED("cuda.softmax");
    case SL_OP_SOFTMAX:
    case SL_OP_SOFTMAX_XENT: {
        double *loss_part = NULL;
        if (c->op == SL_OP_SOFTMAX_XENT) {
            void *ws;
            int rc = sl_cuda_workspace(x, grid * sizeof(double), &ws);
            if (rc != SL_OK)
                return rc;
            loss_part = (double *) ws;
        }
        if (warp)
            launch_rows<true>(x, c, rows, cols, loss_part, grid);
        else
            launch_rows<false>(x, c, rows, cols, loss_part, grid);
        if (loss_part)
            k_mean_finish<<<1, BLOCK, 0, x->stream>>>(loss_part, grid, (double) rows,
                                                      f32(&c->out[0]), x->flag_dev);
        return LAUNCHED("cuda.softmax");
    }
    case SL_OP_SOFTMAX_XENT_GRAD: {
        float inv_rows = (float) (1.0 / (double) rows);
        if (use_32bit(n))
            k_xent_grad<uint32_t><<<blocks_for(n), BLOCK, 0, x->stream>>>(
                f32(&c->out[0]), f32(&c->in[0]), i32(&c->in[1]), (uint32_t) n, (uint32_t) cols,
                inv_rows, x->flag_dev);
        else
            k_xent_grad<uint64_t><<<blocks_for(n), BLOCK, 0, x->stream>>>(
                f32(&c->out[0]), f32(&c->in[0]), i32(&c->in[1]), n, (uint64_t) cols, inv_rows,
                x->flag_dev);
        return LAUNCHED("cuda.softmax");
    }
    default:
        return SL_EUNSUPPORTED;
    }
}
