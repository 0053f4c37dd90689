/* Element-wise ops, bias adds and optimiser updates: grid-stride loops over
 * the per-element math of elementwise.h (shared with the cpu backend); cast
 * between the float dtypes; the zero-padding copies that dnn_conv.c uses for
 * asymmetric pads; the collection of the stream's device error flag.
 *
 * The element-wise ops and bias adds run in f32, bf16 and f16 (kernels over
 * the storage type T, computing in f32: kernels.cuh); the optimiser updates
 * and mse_grad in f32 only, as the registry declares. */
#include "kernels.cuh"

#include "elementwise.h"

#include <type_traits>

/* ---- per-element functors ---- */

struct f_scale {
    float alpha;
    __device__ float operator()(float x) const
    {
        return sl_ew_scale(x, alpha);
    }
};
struct f_add_scalar {
    float v;
    __device__ float operator()(float x) const
    {
        return sl_ew_add(x, v);
    }
};
struct f_relu {
    __device__ float operator()(float x) const
    {
        return sl_ew_relu(x);
    }
};
struct f_sigmoid {
    __device__ float operator()(float x) const
    {
        return sl_ew_sigmoid(x);
    }
};
struct f_tanh {
    __device__ float operator()(float x) const
    {
        return tanhf(x);
    }
};
struct f_add {
    __device__ float operator()(float a, float b) const
    {
        return sl_ew_add(a, b);
    }
};
struct f_mul {
    __device__ float operator()(float a, float b) const
    {
        return sl_ew_mul(a, b);
    }
};
struct f_axpy {
    float alpha;
    __device__ float operator()(float x, float y) const
    {
        return sl_ew_axpy(x, y, alpha);
    }
};
struct f_relu_grad {
    __device__ float operator()(float dy, float x) const
    {
        return sl_ew_relu_grad(dy, x);
    }
};
struct f_sigmoid_grad {
    __device__ float operator()(float dy, float y) const
    {
        return sl_ew_sigmoid_grad(dy, y);
    }
};
struct f_tanh_grad {
    __device__ float operator()(float dy, float y) const
    {
        return sl_ew_tanh_grad(dy, y);
    }
};
struct f_mse_grad {
    float two_over_n;
    __device__ float operator()(float p, float t) const
    {
        return sl_ew_mse_grad(p, t, two_over_n);
    }
};
/* The learning rate: the attribute, times the _lr variants' rate tensor
 * (NULL for the plain ops). */
__device__ inline float lr_of(float lr, const float *rate)
{
    return rate ? lr * *rate : lr;
}

struct f_sgd {
    float lr;
    const float *rate;
    __device__ float operator()(float w, float g) const
    {
        return sl_ew_sgd(w, g, lr_of(lr, rate));
    }
};

/* ---- kernels ---- */

/* Moves a raised device flag into the mapped host word (keeping a value
 * the host has not read yet) and clears it. One thread. */
__global__ void k_collect_flag(int *flag, int *host)
{
    int f = *flag;
    if (f != 0) {
        volatile int *h = host;
        if (*h == 0)
            *h = f;
        __threadfence_system();
        *flag = 0;
    }
}

template <class T> __global__ void k_fill(T *y, uint64_t n, float v, const int *failed)
{
    SKIP_IF_FAILED(failed);
    T t = st<T>(v);
    GRID_STRIDE(uint64_t, i, n)
    y[i] = t;
}

/* y may alias x (in-place updates and in-place execution, ops.h). */
template <class T, class F>
__global__ void k_map1(T *y, const T *x, uint64_t n, F f, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    y[i] = st<T>(f(ld(x[i])));
}

/* mul_scalar: the factor is read on the device (set between launches). y
 * may alias x. */
template <class T>
__global__ void k_mul_scalar(T *y, const T *x, const T *s, uint64_t n, const int *failed)
{
    SKIP_IF_FAILED(failed);
    float v = ld(*s);
    GRID_STRIDE(uint64_t, i, n)
    y[i] = st<T>(ld(x[i]) * v);
}

/* relu_mask: one thread per 32-element word, bit k of word w for element
 * 32 w + k (sl_ew_relu_mask_word's layout). */
template <class T>
__global__ void k_relu_mask(T *y, uint32_t *bits, const T *x, uint64_t n, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, w, (n + 31) / 32)
    {
        if constexpr (std::is_same<T, float>::value) {
            bits[w] = sl_ew_relu_mask_word(y, x, n, w);
        } else {
            uint64_t begin = w * 32, end = n - begin < 32 ? n : begin + 32;
            uint32_t word = 0;
            for (uint64_t i = begin; i < end; i++) {
                float v = ld(x[i]);
                word |= (uint32_t) (v > 0.0f) << (i - begin);
                y[i] = st<T>(sl_ew_relu(v));
            }
            bits[w] = word;
        }
    }
}

template <class T>
__global__ void k_relu_grad_mask(T *dx, const T *dy, const uint32_t *bits, uint64_t n,
                                 const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    dx[i] = st<T>(sl_ew_relu_grad_bit(ld(dy[i]), bits[i / 32] >> (i % 32)));
}

/* y may alias a or b (in-place updates and in-place execution, ops.h): each
 * thread reads a[i] and b[i] before it writes y[i]. */
template <class T, class F>
__global__ void k_map2(T *y, const T *a, const T *b, uint64_t n, F f, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    y[i] = st<T>(f(ld(a[i]), ld(b[i])));
}

/* y[i] = x[i] + bias[(i / inner) % channels] (y may alias x): bias_add is inner = 1,
 * channels = columns; channel_bias_add is inner = H*W, channels = C. */
template <class T, class I>
__global__ void k_bias_add(T *y, const T *x, const T *bias, I n, I inner, I channels,
                           const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(I, i, n)
    y[i] = st<T>(sl_ew_add(ld(x[i]), ld(bias[(i / inner) % channels])));
}

/* cast: one rounding from f32, which holds every value of S exactly. y
 * never aliases x when the sizes differ (the registry gives a cast a new
 * output). */
template <class S, class D> __global__ void k_cast(D *y, const S *x, uint64_t n, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(uint64_t, i, n)
    y[i] = st<D>(ld(x[i]));
}

__global__ void k_momentum(float *p, const float *g, float *v, uint64_t n, float lr,
                           const float *rate, float momentum, float weight_decay, const int *failed)
{
    SKIP_IF_FAILED(failed);
    lr = lr_of(lr, rate);
    GRID_STRIDE(uint64_t, i, n)
    {
        float vi = v[i];
        p[i] = sl_ew_momentum(p[i], g[i], &vi, lr, momentum, weight_decay);
        v[i] = vi;
    }
}

/* f16 loss scaling, in the arithmetic of kernels/cpu/amp.c (PyTorch's
 * GradScaler): the gradient times the scale's reciprocal, in f32. Every
 * thread that meets an inf or NaN stores the same 1 into found. */
__global__ void k_amp_unscale(float *g, const float *scale, float *found, uint64_t n,
                              const int *failed)
{
    SKIP_IF_FAILED(failed);
    const float inv = 1.0f / *scale;
    bool bad = false;
    GRID_STRIDE(uint64_t, i, n)
    {
        bad |= !isfinite(g[i]);
        g[i] *= inv;
    }
    if (bad)
        *found = 1.0f;
}

/* dst = src unless the step found an inf or NaN (then dst stays). */
__global__ void k_amp_commit(float *dst, const float *src, const float *found, uint64_t n,
                             const int *failed)
{
    SKIP_IF_FAILED(failed);
    if (*found != 0.0f)
        return;
    GRID_STRIDE(uint64_t, i, n)
    dst[i] = src[i];
}

/* The scale's update: halve (backoff) on a skipped step, grow after
 * `interval` clean steps in a row. One thread. */
__global__ void k_amp_scale_update(float *scale, float *growth, float *skipped, const float *found,
                                   float growth_factor, float backoff, float interval,
                                   const int *failed)
{
    SKIP_IF_FAILED(failed);
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    if (*found != 0.0f) {
        *scale *= backoff;
        *growth = 0.0f;
        *skipped += 1.0f;
    } else if ((*growth += 1.0f) >= interval) {
        *scale *= growth_factor;
        *growth = 0.0f;
    }
}

/* The step count t is a device scalar (advanced on the device by
 * add_scalar), read here so that no host round trip is needed per step.
 * Before the first step (t < 1) the bias corrections would divide by zero:
 * a run-time error. Thread 0 of each block computes the corrections (in
 * double, as the cpu backend does) for the block. */
__global__ void k_adam(float *p, const float *g, float *m, float *v, const float *t, uint64_t n,
                       float lr, const float *rate, float beta1, float beta2, float eps, float wd,
                       int *flag)
{
    __shared__ float bc[2];
    __shared__ bool skip;
    if (threadIdx.x == 0) {
        float step = *t;
        skip = *flag != 0;
        if (!skip && (!(step >= 1.0f) || !isfinite(step))) {
            raise_flag(flag, SL_CUDA_FLAG_BAD_STEP);
            skip = true;
        }
        bc[0] = (float) (1.0 - pow((double) beta1, (double) step));
        bc[1] = (float) (1.0 - pow((double) beta2, (double) step));
    }
    __syncthreads();
    if (skip)
        return;
    float bc1 = bc[0], bc2 = bc[1];
    lr = lr_of(lr, rate);
    float decay = 1.0f - lr * wd;
    GRID_STRIDE(uint64_t, i, n)
    {
        float mi = m[i], vi = v[i];
        p[i] = sl_ew_adam(p[i], g[i], &mi, &vi, lr, beta1, beta2, eps, bc1, bc2, decay);
        m[i] = mi;
        v[i] = vi;
    }
}

/* One thread per destination element: every element is written (zero in
 * the border), so the destination needs no separate memset. W is an
 * unsigned word of the element's size: the copies move bits, and zero is
 * all-zero bits in every float dtype. */
template <class W, class I>
__global__ void k_pad_planes(W *dst, const W *src, I n, I h, I w, I dst_h, I dst_w, I pad_h,
                             I pad_w, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(I, i, n)
    {
        I col = i % dst_w, t = i / dst_w;
        I row = t % dst_h, plane = t / dst_h;
        bool inside = row >= pad_h && row - pad_h < h && col >= pad_w && col - pad_w < w;
        dst[i] = inside ? src[(plane * h + (row - pad_h)) * w + (col - pad_w)] : (W) 0;
    }
}

template <class W, class I>
__global__ void k_crop_planes(W *dst, const W *src, I n, I h, I w, I src_h, I src_w, I pad_h,
                              I pad_w, const int *failed)
{
    SKIP_IF_FAILED(failed);
    GRID_STRIDE(I, i, n)
    {
        I col = i % w, t = i / w;
        I row = t % h, plane = t / h;
        dst[i] = src[(plane * src_h + row + pad_h) * src_w + col + pad_w];
    }
}

/* ---- launchers ---- */

template <class T, class I>
static void launch_bias_add(const sl_cuda_exec *x, T *y, const T *in, const T *bias, uint64_t n,
                            uint64_t inner, uint64_t channels)
{
    k_bias_add<T, I><<<blocks_for(n), BLOCK, 0, x->stream>>>(y, in, bias, (I) n, (I) inner,
                                                             (I) channels, x->flag_dev);
}

extern "C" int sl_cuda_exec_collect_flag_into(sl_cuda_exec *x, int *mapped)
{
    (void) cudaGetLastError(); /* see sl_cuda_run */
    k_collect_flag<<<1, 1, 0, x->stream>>>(x->flag_dev, mapped);
    return LAUNCHED("cuda.flag");
}

extern "C" int sl_cuda_exec_collect_flag(sl_cuda_exec *x)
{
    return sl_cuda_exec_collect_flag_into(x, x->flag_host_mapped);
}

template <class W>
static void launch_pad(sl_cuda_exec *x, void *dst, const void *src, uint64_t planes, int64_t h,
                       int64_t w, int64_t dst_h, int64_t dst_w, int64_t pad_h, int64_t pad_w)
{
    uint64_t n = planes * (uint64_t) dst_h * (uint64_t) dst_w;
    W *d = (W *) dst;
    const W *s = (const W *) src;
    if (use_32bit(n))
        k_pad_planes<W, uint32_t><<<blocks_for(n), BLOCK, 0, x->stream>>>(
            d, s, (uint32_t) n, (uint32_t) h, (uint32_t) w, (uint32_t) dst_h, (uint32_t) dst_w,
            (uint32_t) pad_h, (uint32_t) pad_w, x->flag_dev);
    else
        k_pad_planes<W, uint64_t><<<blocks_for(n), BLOCK, 0, x->stream>>>(
            d, s, n, (uint64_t) h, (uint64_t) w, (uint64_t) dst_h, (uint64_t) dst_w,
            (uint64_t) pad_h, (uint64_t) pad_w, x->flag_dev);
}

template <class W>
static void launch_crop(sl_cuda_exec *x, void *dst, const void *src, uint64_t planes, int64_t h,
                        int64_t w, int64_t src_h, int64_t src_w, int64_t pad_h, int64_t pad_w)
{
    uint64_t n = planes * (uint64_t) src_h * (uint64_t) src_w; /* the larger of the two */
    uint64_t out = planes * (uint64_t) h * (uint64_t) w;
    W *d = (W *) dst;
    const W *s = (const W *) src;
    if (use_32bit(n))
        k_crop_planes<W, uint32_t><<<blocks_for(out), BLOCK, 0, x->stream>>>(
            d, s, (uint32_t) out, (uint32_t) h, (uint32_t) w, (uint32_t) src_h, (uint32_t) src_w,
            (uint32_t) pad_h, (uint32_t) pad_w, x->flag_dev);
    else
        k_crop_planes<W, uint64_t><<<blocks_for(out), BLOCK, 0, x->stream>>>(
            d, s, out, (uint64_t) h, (uint64_t) w, (uint64_t) src_h, (uint64_t) src_w,
            (uint64_t) pad_h, (uint64_t) pad_w, x->flag_dev);
}

extern "C" int sl_cuda_pad_planes(sl_cuda_exec *x, size_t elem, void *dst, const void *src,
                                  uint64_t planes, int64_t h, int64_t w, int64_t dst_h,
                                  int64_t dst_w, int64_t pad_h, int64_t pad_w)
{
    if (elem == 2)
        launch_pad<uint16_t>(x, dst, src, planes, h, w, dst_h, dst_w, pad_h, pad_w);
    else
        launch_pad<uint32_t>(x, dst, src, planes, h, w, dst_h, dst_w, pad_h, pad_w);
    return LAUNCHED("cuda.pad");
}

extern "C" int sl_cuda_crop_planes(sl_cuda_exec *x, size_t elem, void *dst, const void *src,
                                   uint64_t planes, int64_t h, int64_t w, int64_t src_h,
                                   int64_t src_w, int64_t pad_h, int64_t pad_w)
{
    if (elem == 2)
        launch_crop<uint16_t>(x, dst, src, planes, h, w, src_h, src_w, pad_h, pad_w);
    else
        launch_crop<uint32_t>(x, dst, src, planes, h, w, src_h, src_w, pad_h, pad_w);
    return LAUNCHED("cuda.crop");
}

/* The f32-only ops: optimiser updates and mse_grad. */
static int run_f32_only(sl_cuda_exec *x, const sl_op_call *c)
{
    cudaStream_t st = x->stream;
    uint64_t n = sl_shape_elems(&c->in[0].shape);
    unsigned grid = blocks_for(n);
    float *a = f32(&c->in[0]), *b = f32(&c->in[1]);
    const float *fa = c->attrs.f;
    const int *failed = x->flag_dev;

    switch (c->op) {
    case SL_OP_MSE_GRAD:
        k_map2<<<grid, BLOCK, 0, st>>>(f32(&c->out[0]), a, b, n,
                                       f_mse_grad{(float) (2.0 / (double) n)}, failed);
        break;
    case SL_OP_SGD_UPDATE: /* in place: in0 is both the parameter and the result */
    case SL_OP_SGD_UPDATE_LR:
        k_map2<<<grid, BLOCK, 0, st>>>(a, a, b, n, f_sgd{fa[0], rate_of(c, 2)}, failed);
        break;
    case SL_OP_MOMENTUM_UPDATE:
    case SL_OP_MOMENTUM_UPDATE_LR:
        k_momentum<<<grid, BLOCK, 0, st>>>(a, b, f32(&c->in[2]), n, fa[0], rate_of(c, 3), fa[1],
                                           fa[2], failed);
        break;
    case SL_OP_ADAM_UPDATE:
    case SL_OP_ADAM_UPDATE_LR:
        k_adam<<<grid, BLOCK, 0, st>>>(a, b, f32(&c->in[2]), f32(&c->in[3]), f32(&c->in[4]), n,
                                       fa[0], rate_of(c, 5), fa[1], fa[2], fa[3], fa[4],
                                       x->flag_dev);
        break;
    case SL_OP_AMP_UNSCALE:
        k_amp_unscale<<<grid, BLOCK, 0, st>>>(a, b, f32(&c->in[2]), n, failed);
        break;
    case SL_OP_AMP_COMMIT:
        k_amp_commit<<<grid, BLOCK, 0, st>>>(a, b, f32(&c->in[2]), n, failed);
        break;
    case SL_OP_AMP_SCALE_UPDATE:
        k_amp_scale_update<<<1, 1, 0, st>>>(a, b, f32(&c->in[2]), f32(&c->in[3]), fa[0], fa[1],
                                            fa[2], failed);
        break;
    default:
        return SL_EUNSUPPORTED;
    }
    return LAUNCHED("cuda.kernel");
}

/* The ops that run in every float dtype, in T. */
template <class T> static int run_typed(sl_cuda_exec *x, const sl_op_call *c)
{
    cudaStream_t st = x->stream;
    const sl_shape *s0 = &c->in[0].shape;
    uint64_t n = sl_shape_elems(s0);
    unsigned grid = blocks_for(n);
    T *a = (T *) c->in[0].data, *b = c->n_in > 1 ? (T *) c->in[1].data : NULL;
    T *y = c->n_out ? (T *) c->out[0].data : NULL;
    const float *fa = c->attrs.f;
    const int *failed = x->flag_dev; /* kernels skip while it is set */

    switch (c->op) {
    case SL_OP_FILL:
        k_fill<<<grid, BLOCK, 0, st>>>(y, n, fa[0], failed);
        break;
    case SL_OP_SCALE:
        k_map1<<<grid, BLOCK, 0, st>>>(y, a, n, f_scale{fa[0]}, failed);
        break;
    case SL_OP_MUL_SCALAR:
        k_mul_scalar<<<grid, BLOCK, 0, st>>>(y, a, b, n, failed);
        break;
    case SL_OP_ADD_SCALAR: /* in place: in0 is both the operand and the result */
        k_map1<<<grid, BLOCK, 0, st>>>(a, a, n, f_add_scalar{fa[0]}, failed);
        break;
    case SL_OP_RELU:
        k_map1<<<grid, BLOCK, 0, st>>>(y, a, n, f_relu{}, failed);
        break;
    case SL_OP_SIGMOID:
        k_map1<<<grid, BLOCK, 0, st>>>(y, a, n, f_sigmoid{}, failed);
        break;
    case SL_OP_TANH:
        k_map1<<<grid, BLOCK, 0, st>>>(y, a, n, f_tanh{}, failed);
        break;
    case SL_OP_ADD:
        k_map2<<<grid, BLOCK, 0, st>>>(y, a, b, n, f_add{}, failed);
        break;
    case SL_OP_MUL:
        k_map2<<<grid, BLOCK, 0, st>>>(y, a, b, n, f_mul{}, failed);
        break;
    case SL_OP_AXPY:
        k_map2<<<grid, BLOCK, 0, st>>>(y, a, b, n, f_axpy{fa[0]}, failed);
        break;
    case SL_OP_RELU_GRAD:
        k_map2<<<grid, BLOCK, 0, st>>>(y, a, b, n, f_relu_grad{}, failed);
        break;
    case SL_OP_RELU_MASK:
        k_relu_mask<<<blocks_for((n + 31) / 32), BLOCK, 0, st>>>(y, (uint32_t *) c->out[1].data, a,
                                                                 n, failed);
        break;
    case SL_OP_RELU_GRAD_MASK:
        k_relu_grad_mask<<<grid, BLOCK, 0, st>>>(y, a, (const uint32_t *) c->in[1].data, n, failed);
        break;
    case SL_OP_SIGMOID_GRAD:
        k_map2<<<grid, BLOCK, 0, st>>>(y, a, b, n, f_sigmoid_grad{}, failed);
        break;
    case SL_OP_TANH_GRAD:
        k_map2<<<grid, BLOCK, 0, st>>>(y, a, b, n, f_tanh_grad{}, failed);
        break;
    case SL_OP_BIAS_ADD:
    case SL_OP_CHANNEL_BIAS_ADD: {
        bool per_channel = c->op == SL_OP_CHANNEL_BIAS_ADD;
        uint64_t channels = (uint64_t) s0->dims[1];
        uint64_t inner = per_channel ? (uint64_t) (s0->dims[2] * s0->dims[3]) : 1;
        if (use_32bit(n))
            launch_bias_add<T, uint32_t>(x, y, a, b, n, inner, channels);
        else
            launch_bias_add<T, uint64_t>(x, y, a, b, n, inner, channels);
        break;
    }
    default:
        if constexpr (std::is_same<T, float>::value)
            return run_f32_only(x, c);
        return SL_EUNSUPPORTED;
    }
    return LAUNCHED("cuda.kernel");
}

extern "C" int sl_cuda_run_elementwise(sl_cuda_exec *x, const sl_op_call *c)
{
    return SL_FLOAT_DISPATCH(c->in[0].shape.dtype, run_typed, x, c);
}

template <class S, class D> static void launch_cast_to(sl_cuda_exec *x, const sl_op_call *c)
{
    uint64_t n = sl_shape_elems(&c->in[0].shape);
    k_cast<S, D><<<blocks_for(n), BLOCK, 0, x->stream>>>((D *) c->out[0].data,
                                                         (const S *) c->in[0].data, n, x->flag_dev);
}

template <class S> static void launch_cast(sl_cuda_exec *x, const sl_op_call *c)
{
    switch (c->out[0].shape.dtype) {
    case SL_BF16:
        launch_cast_to<S, bf16>(x, c);
        break;
    case SL_F16:
        launch_cast_to<S, f16>(x, c);
        break;
    default:
        launch_cast_to<S, float>(x, c);
        break;
    }
}

/* A cast to the same dtype is a copy, bit for bit (NaN payloads kept), as
 * on the cpu backend. */
extern "C" int sl_cuda_run_cast(sl_cuda_exec *x, const sl_op_call *c)
{
    if (c->in[0].shape.dtype == c->out[0].shape.dtype) {
        if (c->out[0].data == c->in[0].data)
            return SL_OK;
        return SL_CUDA_RT("cuda.cast", cudaMemcpyAsync(c->out[0].data, c->in[0].data,
                                                       sl_shape_bytes(&c->in[0].shape),
                                                       cudaMemcpyDeviceToDevice, x->stream));
    }
    SL_FLOAT_DISPATCH(c->in[0].shape.dtype, launch_cast, x, c);
    return LAUNCHED("cuda.cast");
}
