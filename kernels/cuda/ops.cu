/* cuda kernels for every op but copy and matmul: grid-stride loops over the
 * per-element math of elementwise.h, and two simple reductions. */
#include "cuda.h"

#include "elementwise.h"

#define BLOCK 256
#define MAX_BLOCKS 4096   /* grid-stride loops cover the rest */
#define REDUCE_BLOCK 1024 /* mse_loss: one block, a power of two */

static unsigned blocks_for(uint64_t n)
{
    uint64_t b = (n + BLOCK - 1) / BLOCK;
    return b < MAX_BLOCKS ? (unsigned) b : MAX_BLOCKS;
}

#define GRID_STRIDE(i, n)                                                                          \
    for (uint64_t i = blockIdx.x * (uint64_t) blockDim.x + threadIdx.x; i < (n);                   \
         i += (uint64_t) gridDim.x * blockDim.x)

struct f_scale {
    float alpha;
    __device__ float operator()(float x) const
    {
        return sl_ew_scale(x, alpha);
    }
};
struct f_relu {
    __device__ float operator()(float x) const
    {
        return sl_ew_relu(x);
    }
};
struct f_add {
    __device__ float operator()(float a, float b) const
    {
        return sl_ew_add(a, b);
    }
};
struct f_relu_grad {
    __device__ float operator()(float dy, float x) const
    {
        return sl_ew_relu_grad(dy, x);
    }
};
struct f_mse_grad {
    float two_over_n;
    __device__ float operator()(float p, float t) const
    {
        return sl_ew_mse_grad(p, t, two_over_n);
    }
};
struct f_sgd {
    float lr;
    __device__ float operator()(float w, float g) const
    {
        return sl_ew_sgd(w, g, lr);
    }
};

__global__ void k_fill(float *y, uint64_t n, float v)
{
    GRID_STRIDE(i, n)
    y[i] = v;
}

template <class F> __global__ void k_map1(float *y, const float *x, uint64_t n, F f)
{
    GRID_STRIDE(i, n)
    y[i] = f(x[i]);
}

template <class F> __global__ void k_map2(float *y, const float *a, const float *b, uint64_t n, F f)
{
    GRID_STRIDE(i, n)
    y[i] = f(a[i], b[i]);
}

__global__ void k_bias_add(float *y, const float *x, const float *bias, uint64_t rows,
                           uint64_t cols)
{
    GRID_STRIDE(i, rows * cols)
    y[i] = sl_ew_add(x[i], bias[i % cols]);
}

/* One thread per column: neighbouring threads read neighbouring columns, so
 * every row is read coalesced. */
__global__ void k_bias_grad(float *db, const float *dy, uint64_t rows, uint64_t cols)
{
    GRID_STRIDE(j, cols)
    {
        double acc = 0.0;
        for (uint64_t r = 0; r < rows; r++)
            acc += dy[r * cols + j];
        db[j] = (float) acc;
    }
}

/* One block: deterministic, and fast enough for loss-sized inputs. */
__global__ void k_mse_loss(float *out, const float *p, const float *t, uint64_t n)
{
    __shared__ double part[REDUCE_BLOCK];
    double acc = 0.0;
    for (uint64_t i = threadIdx.x; i < n; i += REDUCE_BLOCK)
        acc += sl_ew_sq_err(p[i], t[i]);
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned w = REDUCE_BLOCK / 2; w > 0; w /= 2) {
        if (threadIdx.x < w)
            part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        *out = (float) (part[0] / (double) n);
}

extern "C" bool sl_cuda_has_kernel(unsigned op)
{
    switch (op) {
    case SL_OP_FILL:
    case SL_OP_ADD:
    case SL_OP_SCALE:
    case SL_OP_BIAS_ADD:
    case SL_OP_BIAS_GRAD:
    case SL_OP_RELU:
    case SL_OP_RELU_GRAD:
    case SL_OP_MSE_LOSS:
    case SL_OP_MSE_GRAD:
    case SL_OP_SGD_UPDATE:
        return true;
    default:
        return false;
    }
}

static float *f32(const sl_tensor_ref *t)
{
    return (float *) t->data;
}

extern "C" cudaError_t sl_cuda_launch_kernel(const sl_op_call *c, cudaStream_t st)
{
    const sl_shape *s0 = &c->in[0].shape;
    uint64_t n = sl_shape_elems(s0);
    unsigned grid = blocks_for(n);
    float *x = f32(&c->in[0]), *y = c->n_out ? f32(&c->out[0]) : NULL;
    float fa = c->attrs.f[0];

    switch (c->op) {
    case SL_OP_FILL:
        k_fill<<<grid, BLOCK, 0, st>>>(y, n, fa);
        break;
    case SL_OP_SCALE:
        k_map1<<<grid, BLOCK, 0, st>>>(y, x, n, f_scale{fa});
        break;
    case SL_OP_RELU:
        k_map1<<<grid, BLOCK, 0, st>>>(y, x, n, f_relu{});
        break;
    case SL_OP_ADD:
        k_map2<<<grid, BLOCK, 0, st>>>(y, x, f32(&c->in[1]), n, f_add{});
        break;
    case SL_OP_RELU_GRAD:
        k_map2<<<grid, BLOCK, 0, st>>>(y, x, f32(&c->in[1]), n, f_relu_grad{});
        break;
    case SL_OP_MSE_GRAD:
        k_map2<<<grid, BLOCK, 0, st>>>(y, x, f32(&c->in[1]), n,
                                       f_mse_grad{(float) (2.0 / (double) n)});
        break;
    case SL_OP_SGD_UPDATE: /* in place: in0 is both the parameter and the result */
        k_map2<<<grid, BLOCK, 0, st>>>(x, x, f32(&c->in[1]), n, f_sgd{fa});
        break;
    case SL_OP_BIAS_ADD:
        k_bias_add<<<grid, BLOCK, 0, st>>>(y, x, f32(&c->in[1]), (uint64_t) s0->dims[0],
                                           (uint64_t) s0->dims[1]);
        break;
    case SL_OP_BIAS_GRAD:
        k_bias_grad<<<blocks_for((uint64_t) s0->dims[1]), BLOCK, 0, st>>>(
            y, x, (uint64_t) s0->dims[0], (uint64_t) s0->dims[1]);
        break;
    case SL_OP_MSE_LOSS:
        k_mse_loss<<<1, REDUCE_BLOCK, 0, st>>>(y, x, f32(&c->in[1]), n);
        break;
    default:
        return cudaErrorNotSupported;
    }
    return cudaGetLastError();
}
