/* Launch geometry and block-level reductions shared by the .cu files of the
 * cuda backend. nvcc only.
 *
 * Index types: kernels that decompose flat indices (div/mod) are templates
 * over the index type I and run with 32-bit indices whenever every index of
 * the launch fits in int32 (see use_32bit), 64-bit otherwise. Grid-stride
 * loops never wrap: the grid is at most MAX_BLOCKS * BLOCK threads, far below
 * 2^32 - 2^31. */
#ifndef SL_CUDA_KERNELS_CUH
#define SL_CUDA_KERNELS_CUH

#include "cuda.h"

#include "sl_error.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdint.h>

#define BLOCK 256
#define MAX_BLOCKS 4096 /* grid-stride loops cover the rest */
#define FULL_MASK 0xffffffffu

static inline unsigned blocks_for(uint64_t n)
{
    uint64_t b = (n + BLOCK - 1) / BLOCK;
    return b == 0 ? 1 : b < MAX_BLOCKS ? (unsigned) b : MAX_BLOCKS;
}

/* True when flat indices below n fit the 32-bit kernels. */
static inline bool use_32bit(uint64_t n)
{
    return n <= (uint64_t) INT32_MAX;
}

#define GRID_STRIDE(I, i, n)                                                                       \
    for (I i = (I) blockIdx.x * (I) blockDim.x + (I) threadIdx.x; i < (I) (n);                     \
         i += (I) gridDim.x * (I) blockDim.x)

static inline float *f32(const sl_tensor_ref *t)
{
    return (float *) t->data;
}

/* The _lr optimiser updates' rate tensor, their last input after the plain
 * op's `base` inputs; NULL for the plain ops. */
static inline const float *rate_of(const sl_op_call *c, unsigned base)
{
    return c->n_in > base ? f32(&c->in[base]) : NULL;
}

static inline int32_t *i32(const sl_tensor_ref *t)
{
    return (int32_t *) t->data;
}

/* ---- element types ----
 *
 * Kernels of the ops that run in bf16 and f16 are templates over the
 * storage type T (float, bf16, f16): they load an element as f32 (ld),
 * compute in f32 registers and round the result once into T (st). For T =
 * float both are the identity, so the f32 kernels are what they were. The
 * conversions round as kernels/ops/half.h does, bit for bit (NaN included:
 * the hardware instructions make every NaN the canonical one, half.h keeps
 * its sign and payload), so a cast gives the same bits on every backend. */
typedef __nv_bfloat16 bf16;
typedef __half f16;

__device__ static inline float ld(float v)
{
    return v;
}

__device__ static inline float ld(bf16 v)
{
    return __uint_as_float((uint32_t) __bfloat16_as_ushort(v) << 16); /* exact */
}

__device__ static inline float ld(f16 v)
{
    uint32_t h = __half_as_ushort(v);
    if ((h & 0x7fffu) > 0x7c00u) /* NaN: sign and payload move up */
        return __uint_as_float(((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13));
    return __half2float(v); /* exact, subnormals included */
}

template <class T> __device__ static inline T st(float v);

template <> __device__ inline float st<float>(float v)
{
    return v;
}

template <> __device__ inline bf16 st<bf16>(float v)
{
    uint32_t u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep the sign, make it quiet */
        return __ushort_as_bfloat16((unsigned short) ((u >> 16) | 0x40u));
    return __float2bfloat16_rn(v);
}

template <> __device__ inline f16 st<f16>(float v)
{
    uint32_t u = __float_as_uint(v), a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: keep the sign and the payload's top bits, quiet */
        return __ushort_as_half(
            (unsigned short) (((u >> 16) & 0x8000u) | 0x7e00u | ((a >> 13) & 0x3ffu)));
    return __float2half_rn(v);
}

/* Calls FN<T>(args...) with T the storage type of the float dtype dt
 * (anything but bf16 and f16 is f32). */
#define SL_FLOAT_DISPATCH(dt, FN, ...)                                                             \
    ((dt) == SL_BF16  ? FN<bf16>(__VA_ARGS__)                                                      \
     : (dt) == SL_F16 ? FN<f16>(__VA_ARGS__)                                                       \
                      : FN<float>(__VA_ARGS__))

/* Device-raised errors (see sl_cuda_exec.flag_dev). Every kernel takes the
 * stream's flag word and does nothing while an earlier op of the stream has
 * failed. SKIP_IF_FAILED is for kernels whose threads never cooperate;
 * kernels with barriers or shuffles use SKIP_BLOCK_IF_FAILED, where the
 * block decides together (the flag may be raised while the block starts). */
#define SKIP_IF_FAILED(flag)                                                                       \
    if (*(flag) != 0)                                                                              \
    return
#define SKIP_BLOCK_IF_FAILED(flag)                                                                 \
    if (__syncthreads_or(*(flag) != 0))                                                            \
    return

/* Raises a device error; the first one raised stays. */
__device__ static inline void raise_flag(int *flag, int value)
{
    atomicCAS(flag, 0, value);
}

/* Translates the status of the kernel launches just made (they were
 * configured on the host: an error here is a bad configuration or a fault of
 * earlier work). */
#define LAUNCHED(id) SL_CUDA_RT(id, cudaGetLastError())

struct op_sum {
    template <class T> __device__ T operator()(T a, T b) const
    {
        return a + b;
    }
};

/* fmaxf ignores NaN: a row's maximum is that of its numbers (a NaN still
 * propagates through the exponentials that follow). */
struct op_max {
    __device__ float operator()(float a, float b) const
    {
        return fmaxf(a, b);
    }
};

/* Every lane of the (full) warp gets op over the 32 values. The butterfly
 * pairs the same two partial results in every lane, so all lanes hold
 * bit-identical results. */
template <class T, class Op> __device__ T warp_allreduce(T v, Op op)
{
    for (int off = 16; off > 0; off >>= 1)
        v = op(v, __shfl_xor_sync(FULL_MASK, v, off));
    return v;
}

/* Every thread of the block gets op over the block's values. blockDim.x must
 * be a multiple of 32 and at most 1024; every thread of the block must call
 * it (it synchronises). Deterministic for a given blockDim. */
template <class T, class Op> __device__ T block_allreduce(T v, Op op, T identity)
{
    __shared__ T part[32];
    __syncthreads(); /* an earlier call's readers are done with part */
    v = warp_allreduce(v, op);
    unsigned lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    if (lane == 0)
        part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = lane < warps ? part[lane] : identity;
    return warp_allreduce(v, op);
}

#endif
