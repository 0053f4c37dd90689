/* Reductions: reduce_sum, reduce_mean, mse_loss (to a scalar) and
 * bias_grad, channel_bias_grad (per channel).
 *
 * Every reduction accumulates in double (as the cpu backend does) and is
 * deterministic: two passes with a fixed grid for a given shape, partial
 * results in the stream's workspace, no atomics. Full reductions: up to
 * SUM_MAX_PARTS blocks each reduce a grid-stride slice, one block sums the
 * partials. Per-channel reductions of x[outer][channels][inner]: blocks own
 * a channel (or, when inner == 1, a tile of 32 neighbouring columns, read
 * coalesced) and, when that gives too few blocks to fill the device, a slice
 * of `outer`; a second kernel then sums the slices.
 *
 * The per-channel reductions run in f32, bf16 and f16 (T: elements read
 * into f32, the double sum rounded once into T); the full reductions in f32
 * only, as the registry declares. */
#include "kernels.cuh"

#include "elementwise.h"

#define SUM_MAX_PARTS 1024
#define SUM_PER_THREAD 8 /* elements per thread before another block is worth it */
#define COL_TILE 32      /* columns per block (one warp wide) */
#define COL_ROWS 8       /* row lanes per block: blocks are COL_TILE x COL_ROWS */
#define MAX_SPLITS 1024  /* slices of `outer` per channel */
#define MAX_CHAN_BLOCKS 65535u

/* ---- full reductions ---- */

struct t_elem {
    const float *x;
    __device__ double operator()(uint64_t i) const
    {
        return (double) x[i];
    }
};

struct t_sq_err {
    const float *pred, *target;
    __device__ double operator()(uint64_t i) const
    {
        return (double) sl_ew_sq_err(pred[i], target[i]);
    }
};

template <class F> __global__ void k_sum_part(uint64_t n, F term, double *part, const int *failed)
{
    SKIP_BLOCK_IF_FAILED(failed);
    double acc = 0.0;
    GRID_STRIDE(uint64_t, i, n)
    acc += term(i);
    acc = block_allreduce(acc, op_sum{}, 0.0);
    if (threadIdx.x == 0)
        part[blockIdx.x] = acc;
}

__global__ void k_sum_finish(const double *part, unsigned parts, double divisor, float *out,
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

/* *out = (sum of term(i) for i < n) / divisor. */
template <class F>
static int full_sum(sl_cuda_exec *x, uint64_t n, F term, double divisor, float *out)
{
    uint64_t want = (n + BLOCK * SUM_PER_THREAD - 1) / (BLOCK * SUM_PER_THREAD);
    unsigned parts = want < 1 ? 1 : want > SUM_MAX_PARTS ? SUM_MAX_PARTS : (unsigned) want;
    void *ws;
    int rc = sl_cuda_workspace(x, parts * sizeof(double), &ws);
    if (rc != SL_OK)
        return rc;
    k_sum_part<<<parts, BLOCK, 0, x->stream>>>(n, term, (double *) ws, x->flag_dev);
    k_sum_finish<<<1, BLOCK, 0, x->stream>>>((const double *) ws, parts, divisor, out, x->flag_dev);
    return LAUNCHED("cuda.reduce");
}

/* ---- per-channel reductions ---- */

/* inner == 1: x is [rows, cols]; block (bx, by) sums columns [32 bx, 32 bx +
 * 32) over the rows of slice by. Writes out[col] directly when there is one
 * slice, else part[slice][col]. */
template <class T, class I>
__global__ void k_cols_part(const T *x, I rows, I cols, I rows_per_split, double *part, T *out,
                            const int *failed)
{
    __shared__ double tile[COL_ROWS][COL_TILE + 1];
    SKIP_BLOCK_IF_FAILED(failed);
    I col = (I) blockIdx.x * COL_TILE + threadIdx.x;
    I r0 = (I) blockIdx.y * rows_per_split;
    I r1 = rows - r0 < rows_per_split ? rows : r0 + rows_per_split;
    double acc = 0.0;
    if (col < cols)
        for (I r = r0 + threadIdx.y; r < r1; r += COL_ROWS)
            acc += ld(x[r * cols + col]);
    tile[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        double s = 0.0;
        for (int k = 0; k < COL_ROWS; k++)
            s += tile[k][threadIdx.x];
        if (out)
            out[col] = st<T>((float) s);
        else
            part[(uint64_t) blockIdx.y * cols + col] = s;
    }
}

/* inner > 1: block (bx, by) sums channel c (bx, bx + gridDim.x, ...) over
 * x[o][c][0..inner) for the o of slice by. Each thread walks the flattened
 * (o, i) positions of the slice blockDim.x apart without dividing. */
template <class T, class I>
__global__ void k_chan_part(const T *x, I outer, I channels, I inner, I outer_per_split,
                            double *part, T *out, const int *failed)
{
    SKIP_BLOCK_IF_FAILED(failed);
    I o0 = (I) blockIdx.y * outer_per_split;
    I o1 = outer - o0 < outer_per_split ? outer : o0 + outer_per_split;
    I step_o = blockDim.x / inner, step_i = blockDim.x % inner;
    for (I c = blockIdx.x; c < channels; c += gridDim.x) { /* uniform per block */
        double acc = 0.0;
        I o = o0 + threadIdx.x / inner, i = threadIdx.x % inner;
        while (o < o1) {
            acc += ld(x[(o * channels + c) * inner + i]);
            o += step_o;
            i += step_i;
            if (i >= inner) {
                i -= inner;
                o++;
            }
        }
        acc = block_allreduce(acc, op_sum{}, 0.0);
        if (threadIdx.x == 0) {
            if (out)
                out[c] = st<T>((float) acc);
            else
                part[(uint64_t) blockIdx.y * channels + c] = acc;
        }
    }
}

/* out[c] = sum over the slices of part[slice][c]. */
template <class T>
__global__ void k_chan_finish(const double *part, unsigned splits, uint64_t channels, T *out,
                              const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, c, channels)
    {
        double s = 0.0;
        for (unsigned k = 0; k < splits; k++)
            s += part[k * channels + c];
        out[c] = st<T>((float) s);
    }
}

/* Slices of `outer` so that base_blocks * slices fills the device (four
 * blocks per multiprocessor), each slice keeping at least min_outer rows. */
static unsigned pick_splits(const sl_cuda_exec *x, uint64_t base_blocks, uint64_t outer,
                            uint64_t min_outer)
{
    uint64_t target = 4 * (uint64_t) x->sm_count;
    if (base_blocks >= target)
        return 1;
    uint64_t s = (target + base_blocks - 1) / base_blocks;
    uint64_t most = (outer + min_outer - 1) / min_outer;
    if (s > most)
        s = most;
    if (s > MAX_SPLITS)
        s = MAX_SPLITS;
    return s < 1 ? 1 : (unsigned) s;
}

template <class T, class I>
static void launch_chan(const sl_cuda_exec *x, const T *in, uint64_t outer, uint64_t channels,
                        uint64_t inner, uint64_t per_split, unsigned splits, double *part, T *out)
{
    if (inner == 1) {
        dim3 grid((unsigned) ((channels + COL_TILE - 1) / COL_TILE), splits);
        k_cols_part<T, I><<<grid, dim3(COL_TILE, COL_ROWS), 0, x->stream>>>(
            in, (I) outer, (I) channels, (I) per_split, part, out, x->flag_dev);
    } else {
        unsigned bx = channels < MAX_CHAN_BLOCKS ? (unsigned) channels : MAX_CHAN_BLOCKS;
        k_chan_part<T, I><<<dim3(bx, splits), BLOCK, 0, x->stream>>>(
            in, (I) outer, (I) channels, (I) inner, (I) per_split, part, out, x->flag_dev);
    }
}

/* out[c] = sum over o, i of in[o][c][i], for c's in and out (bias_grad:
 * inner 1; channel_bias_grad: inner H*W). */
template <class T> static int channel_sum(sl_cuda_exec *x, const sl_op_call *c)
{
    const int64_t *d = c->in[0].shape.dims;
    uint64_t outer = (uint64_t) d[0], channels = (uint64_t) d[1];
    uint64_t inner = c->op == SL_OP_CHANNEL_BIAS_GRAD ? (uint64_t) (d[2] * d[3]) : 1;
    const T *in = (const T *) c->in[0].data;
    T *out = (T *) c->out[0].data;
    unsigned splits;
    if (inner == 1)
        splits = pick_splits(x, (channels + COL_TILE - 1) / COL_TILE, outer, 8 * COL_ROWS);
    else
        splits = pick_splits(x, channels, outer, (BLOCK * SUM_PER_THREAD + inner - 1) / inner);
    uint64_t per_split = (outer + splits - 1) / splits;
    splits = (unsigned) ((outer + per_split - 1) / per_split); /* no empty slice */

    double *part = NULL;
    if (splits > 1) {
        void *ws;
        int rc = sl_cuda_workspace(x, (size_t) splits * channels * sizeof(double), &ws);
        if (rc != SL_OK)
            return rc;
        part = (double *) ws;
    }
    T *direct = splits > 1 ? NULL : out;
    if (use_32bit(outer * channels * inner))
        launch_chan<T, uint32_t>(x, in, outer, channels, inner, per_split, splits, part, direct);
    else
        launch_chan<T, uint64_t>(x, in, outer, channels, inner, per_split, splits, part, direct);
    if (splits > 1)
        k_chan_finish<<<blocks_for(channels), BLOCK, 0, x->stream>>>(part, splits, channels, out,
                                                                     x->flag_dev);
    return LAUNCHED("cuda.reduce");
}

extern "C" int sl_cuda_run_reduce(sl_cuda_exec *x, const sl_op_call *c)
{
    const sl_shape *s0 = &c->in[0].shape;
    uint64_t n = sl_shape_elems(s0);
    const float *a = f32(&c->in[0]);
    float *y = f32(&c->out[0]);

    switch (c->op) {
    case SL_OP_REDUCE_SUM:
        return full_sum(x, n, t_elem{a}, 1.0, y);
    case SL_OP_REDUCE_MEAN:
        return full_sum(x, n, t_elem{a}, (double) n, y);
    case SL_OP_MSE_LOSS:
        return full_sum(x, n, t_sq_err{a, f32(&c->in[1])}, (double) n, y);
    case SL_OP_BIAS_GRAD:
    case SL_OP_CHANNEL_BIAS_GRAD:
        return SL_FLOAT_DISPATCH(s0->dtype, channel_sum, x, c);
    default:
        return SL_EUNSUPPORTED;
    }
}
