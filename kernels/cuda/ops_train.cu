/* The transformer training ops (ops_train.c's) on cuda: layer_norm and its
 * gradient, ew_unary_grad, softmax_axis and its gradient, embedding_grad,
 * dropout and its gradient. The math per element is the cpu backend's
 * (kernels/cpu/train.c, elementwise.h): the same Philox draws give the
 * same dropout masks on both.
 *
 * layer_norm runs one warp per row (shuffle sums in f32 of per-lane
 * double partials), softmax_axis one thread per lane along its axis, and
 * layer_norm_grad's dweight and dbias one thread per column. embedding_grad
 * adds with atomics, so its sums' order varies from run to run.
 * ew_unary_grad, dropout and dropout_grad run in f32, bf16 and f16 (T);
 * the rest in f32, as the registry (and the cuda dtypes of exec.c) say. */
#include "elementwise.h"
#include "kernels.cuh"

#include "ops_axes.h"

#define WARP 32

__device__ static inline double warp_sum(double v)
{
    for (int o = WARP / 2; o > 0; o /= 2)
        v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

/* One warp per row of d elements. */
__global__ void k_layer_norm(float *y, float *mean, float *rstd, const float *x, const float *w,
                             const float *b, uint64_t rows, uint64_t d, float eps,
                             const int *failed)
{
    if (*failed != 0)
        return;
    uint64_t warps = (uint64_t) gridDim.x * (blockDim.x / WARP);
    unsigned lane = threadIdx.x % WARP;
    for (uint64_t r = (uint64_t) blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP; r < rows;
         r += warps) {
        const float *xr = x + r * d;
        double s = 0;
        for (uint64_t j = lane; j < d; j += WARP)
            s += xr[j];
        double m = warp_sum(s) / (double) d, ss = 0;
        for (uint64_t j = lane; j < d; j += WARP)
            ss += (xr[j] - m) * (xr[j] - m);
        float rs = (float) (1.0 / sqrt(warp_sum(ss) / (double) d + eps)), mf = (float) m;
        for (uint64_t j = lane; j < d; j += WARP)
            y[r * d + j] = (xr[j] - mf) * rs * w[j] + b[j];
        if (lane == 0) {
            mean[r] = mf;
            rstd[r] = rs;
        }
    }
}

__global__ void k_layer_norm_dx(float *dx, const float *dy, const float *x, const float *w,
                                const float *mean, const float *rstd, uint64_t rows, uint64_t d,
                                const int *failed)
{
    if (*failed != 0)
        return;
    uint64_t warps = (uint64_t) gridDim.x * (blockDim.x / WARP);
    unsigned lane = threadIdx.x % WARP;
    for (uint64_t r = (uint64_t) blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP; r < rows;
         r += warps) {
        float m = mean[r], rs = rstd[r];
        double sg = 0, sgx = 0;
        for (uint64_t j = lane; j < d; j += WARP) {
            double g = (double) dy[r * d + j] * w[j];
            sg += g;
            sgx += g * ((x[r * d + j] - m) * rs);
        }
        float mg = (float) (warp_sum(sg) / (double) d), mgx = (float) (warp_sum(sgx) / (double) d);
        for (uint64_t j = lane; j < d; j += WARP) {
            float xhat = (x[r * d + j] - m) * rs;
            dx[r * d + j] = rs * (dy[r * d + j] * w[j] - mg - xhat * mgx);
        }
    }
}

__global__ void k_layer_norm_dw(float *dw, float *db, const float *dy, const float *x,
                                const float *mean, const float *rstd, uint64_t rows, uint64_t d,
                                const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, j, d)
    {
        double sw = 0, sb = 0;
        for (uint64_t r = 0; r < rows; r++) {
            float g = dy[r * d + j];
            sw += (double) g * ((x[r * d + j] - mean[r]) * rstd[r]);
            sb += g;
        }
        dw[j] = (float) sw;
        db[j] = (float) sb;
    }
}

/* One thread per lane: len elements `inner` apart. */
__global__ void k_softmax_axis(float *y, const float *x, uint64_t lanes, uint64_t len,
                               uint64_t inner, int lg, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, k, lanes)
    {
        uint64_t base = k / inner * len * inner + k % inner;
        const float *xl = x + base;
        float *yl = y + base;
        float mx = xl[0];
        for (uint64_t j = 1; j < len; j++)
            mx = xl[j * inner] > mx || isnan(xl[j * inner]) ? xl[j * inner] : mx;
        double s = 0;
        for (uint64_t j = 0; j < len; j++)
            s += exp((double) xl[j * inner] - mx);
        double lse = mx + log(s);
        for (uint64_t j = 0; j < len; j++)
            yl[j * inner] = lg ? (float) ((double) xl[j * inner] - lse)
                               : (float) (exp((double) xl[j * inner] - mx) / s);
    }
}

__global__ void k_softmax_axis_grad(float *dx, const float *dy, const float *y, uint64_t lanes,
                                    uint64_t len, uint64_t inner, int lg, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, k, lanes)
    {
        uint64_t base = k / inner * len * inner + k % inner;
        double s = 0;
        for (uint64_t j = 0; j < len; j++) {
            uint64_t o = base + j * inner;
            s += lg ? (double) dy[o] : (double) dy[o] * y[o];
        }
        float sf = (float) s;
        for (uint64_t j = 0; j < len; j++) {
            uint64_t o = base + j * inner;
            dx[o] = lg ? dy[o] - expf(y[o]) * sf : y[o] * (dy[o] - sf);
        }
    }
}

template <class T>
__global__ void k_unary_grad(T *dx, const T *dy, const T *x, uint64_t n, int kind, float p, float q,
                             const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    dx[i] = st<T>(ld(dy[i]) * sl_ew_unary_deriv(kind, ld(x[i]), p, q));
}

/* One thread per block of 4 elements: one Philox call each. */
template <class T>
__global__ void k_dropout(T *y, int32_t *mask, const T *x, const int32_t *seed, uint64_t n,
                          uint32_t offset, uint64_t threshold, float scale, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, blk, (n + 3) / 4)
    {
        uint32_t words[4];
        sl_dropout_block(blk, (uint32_t) seed[0], (uint32_t) seed[1], offset, words);
        for (uint64_t i = blk * 4; i < blk * 4 + 4 && i < n; i++) {
            int keep = words[i & 3] >= threshold;
            mask[i] = keep;
            y[i] = st<T>(keep ? ld(x[i]) * scale : 0.0f);
        }
    }
}

template <class T>
__global__ void k_dropout_grad(T *dx, const T *dy, const int32_t *mask, uint64_t n, float scale,
                               const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    dx[i] = st<T>(mask[i] ? ld(dy[i]) * scale : 0.0f);
}

__global__ void k_embedding_grad(float *dw, const float *dy, const int32_t *ids, uint64_t n_ids,
                                 uint64_t d, int64_t v, int64_t pad, int *flag)
{
    SKIP_IF_FAILED(flag);
    GRID_STRIDE(uint64_t, i, n_ids * d)
    {
        int64_t k = ids[i / d];
        if (k < -v || k >= v) {
            raise_flag(flag, SL_CUDA_FLAG_BAD_INDEX);
            return;
        }
        k = k < 0 ? k + v : k;
        if (k != pad)
            atomicAdd(&dw[(uint64_t) k * d + i % d], dy[i]);
    }
}

static uint64_t tail_elems(const sl_shape *s, unsigned axis)
{
    uint64_t n = 1;
    for (unsigned d = axis; d < s->ndim; d++)
        n *= (uint64_t) s->dims[d];
    return n;
}

/* Blocks for one warp per row. */
static unsigned row_blocks(uint64_t rows)
{
    return blocks_for(rows * WARP);
}

template <class T> static void launch_elementwise(sl_cuda_exec *x, const sl_op_call *c)
{
    uint64_t n = sl_shape_elems(&c->in[0].shape);
    cudaStream_t st = x->stream;
    const float *f = c->attrs.f;
    switch (c->op) {
    case SL_OP_EW_UNARY_GRAD:
        k_unary_grad<<<blocks_for(n), BLOCK, 0, st>>>(
            (T *) c->out[0].data, (const T *) c->in[0].data, (const T *) c->in[1].data, n,
            (int) c->attrs.i[0], f[0], f[1], x->flag_dev);
        break;
    case SL_OP_DROPOUT:
        k_dropout<<<blocks_for((n + 3) / 4), BLOCK, 0, st>>>(
            (T *) c->out[0].data, i32(&c->out[1]), (const T *) c->in[0].data, i32(&c->in[1]), n,
            (uint32_t) c->attrs.i[0], sl_dropout_threshold(f[0]), 1.0f / (1.0f - f[0]),
            x->flag_dev);
        break;
    default: /* SL_OP_DROPOUT_GRAD */
        k_dropout_grad<<<blocks_for(n), BLOCK, 0, st>>>(
            (T *) c->out[0].data, (const T *) c->in[0].data, i32(&c->in[1]), n, f[0], x->flag_dev);
        break;
    }
}

extern "C" int sl_cuda_run_train(sl_cuda_exec *x, const sl_op_call *c)
{
    cudaStream_t st = x->stream;
    const int64_t *ia = c->attrs.i;
    switch (c->op) {
    case SL_OP_LAYER_NORM: {
        uint64_t n = sl_shape_elems(&c->in[0].shape),
                 d = tail_elems(&c->in[0].shape, (unsigned) ia[0]);
        k_layer_norm<<<row_blocks(n / d), BLOCK, 0, st>>>(
            f32(&c->out[0]), f32(&c->out[1]), f32(&c->out[2]), f32(&c->in[0]), f32(&c->in[1]),
            f32(&c->in[2]), n / d, d, c->attrs.f[0], x->flag_dev);
        break;
    }
    case SL_OP_LAYER_NORM_GRAD: {
        uint64_t n = sl_shape_elems(&c->in[1].shape),
                 d = tail_elems(&c->in[1].shape, (unsigned) ia[0]);
        k_layer_norm_dx<<<row_blocks(n / d), BLOCK, 0, st>>>(
            f32(&c->out[0]), f32(&c->in[0]), f32(&c->in[1]), f32(&c->in[2]), f32(&c->in[3]),
            f32(&c->in[4]), n / d, d, x->flag_dev);
        k_layer_norm_dw<<<blocks_for(d), BLOCK, 0, st>>>(
            f32(&c->out[1]), f32(&c->out[2]), f32(&c->in[0]), f32(&c->in[1]), f32(&c->in[3]),
            f32(&c->in[4]), n / d, d, x->flag_dev);
        break;
    }
    case SL_OP_SOFTMAX_AXIS:
    case SL_OP_SOFTMAX_AXIS_GRAD: {
        const sl_shape *s = &c->in[c->op == SL_OP_SOFTMAX_AXIS ? 0 : 1].shape;
        uint64_t len = (uint64_t) s->dims[ia[0]], inner = tail_elems(s, (unsigned) ia[0] + 1);
        uint64_t lanes = sl_shape_elems(s) / len;
        if (c->op == SL_OP_SOFTMAX_AXIS)
            k_softmax_axis<<<blocks_for(lanes), BLOCK, 0, st>>>(
                f32(&c->out[0]), f32(&c->in[0]), lanes, len, inner, (int) ia[1], x->flag_dev);
        else
            k_softmax_axis_grad<<<blocks_for(lanes), BLOCK, 0, st>>>(
                f32(&c->out[0]), f32(&c->in[0]), f32(&c->in[1]), lanes, len, inner, (int) ia[1],
                x->flag_dev);
        break;
    }
    case SL_OP_EMBEDDING_GRAD: {
        const sl_shape *ws = &c->out[0].shape;
        uint64_t d = tail_elems(ws, 1), n_ids = sl_shape_elems(&c->in[1].shape);
        int rc = SL_CUDA_RT("cuda.embedding_grad",
                            cudaMemsetAsync(c->out[0].data, 0, sl_shape_bytes(ws), st));
        if (rc)
            return rc;
        k_embedding_grad<<<blocks_for(n_ids * d), BLOCK, 0, st>>>(f32(&c->out[0]), f32(&c->in[0]),
                                                                  i32(&c->in[1]), n_ids, d,
                                                                  ws->dims[0], ia[1], x->flag_dev);
        break;
    }
    case SL_OP_EW_UNARY_GRAD:
    case SL_OP_DROPOUT:
    case SL_OP_DROPOUT_GRAD:
        SL_FLOAT_DISPATCH(c->in[0].shape.dtype, launch_elementwise, x, c);
        break;
    default:
        return SL_EUNSUPPORTED;
    }
    return LAUNCHED("cuda.train");
}
