/* Per-element math shared by the cpu loops and the cuda kernels, so that both
 * backends compute bit-for-bit the same expression per element (up to the
 * compiler's FMA contraction). Each function is the body of one op for one
 * element; the loops and the reductions live in the backends. */
#ifndef SL_ELEMENTWISE_H
#define SL_ELEMENTWISE_H

#include <math.h>
#include <stdint.h>

#include "ops_axes.h"

#ifdef __CUDACC__
#define SL_HD __host__ __device__
#else
#define SL_HD
#endif

/* add: a + b. */
SL_HD static inline float sl_ew_add(float a, float b)
{
    return a + b;
}

/* scale: alpha * x. */
SL_HD static inline float sl_ew_scale(float x, float alpha)
{
    return alpha * x;
}

/* relu: max(x, 0). NaN propagates (as in PyTorch), so divergence stays visible. */
SL_HD static inline float sl_ew_relu(float x)
{
    return x < 0.0f ? 0.0f : x;
}

/* relu_grad: dy where the forward input x was positive, else 0. */
SL_HD static inline float sl_ew_relu_grad(float dy, float x)
{
    return x > 0.0f ? dy : 0.0f;
}

/* relu_mask, word w of n elements: y = relu(x) over its (up to) 32
 * elements, and the word of bits where x > 0. y may be x: each element is
 * read before it is written. */
SL_HD static inline uint32_t sl_ew_relu_mask_word(float *y, const float *x, uint64_t n, uint64_t w)
{
    uint64_t begin = w * 32, end = n - begin < 32 ? n : begin + 32;
    uint32_t word = 0;
    for (uint64_t i = begin; i < end; i++) {
        word |= (uint32_t) (x[i] > 0.0f) << (i - begin);
        y[i] = sl_ew_relu(x[i]);
    }
    return word;
}

/* relu_grad_mask: dy where the low bit of bit (relu_mask's, shifted) is set. */
SL_HD static inline float sl_ew_relu_grad_bit(float dy, unsigned bit)
{
    return (bit & 1u) ? dy : 0.0f;
}

/* One term of mse_loss before the mean: (pred - target)^2. */
SL_HD static inline float sl_ew_sq_err(float pred, float target)
{
    float d = pred - target;
    return d * d;
}

/* mse_grad: d mean((pred - target)^2) / d pred; two_over_n = 2 / elems. */
SL_HD static inline float sl_ew_mse_grad(float pred, float target, float two_over_n)
{
    return (pred - target) * two_over_n;
}

/* sgd_update: the new value of param after one plain SGD step. */
SL_HD static inline float sl_ew_sgd(float param, float grad, float lr)
{
    return param - lr * grad;
}

/* mul: a * b. */
SL_HD static inline float sl_ew_mul(float a, float b)
{
    return a * b;
}

/* axpy: alpha * x + y. */
SL_HD static inline float sl_ew_axpy(float x, float y, float alpha)
{
    return alpha * x + y;
}

/* sigmoid: 1 / (1 + e^-x), written to avoid overflow for large |x|. */
SL_HD static inline float sl_ew_sigmoid(float x)
{
    if (x >= 0.0f)
        return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

/* sigmoid_grad from the forward output y. */
SL_HD static inline float sl_ew_sigmoid_grad(float dy, float y)
{
    return dy * y * (1.0f - y);
}

/* tanh_grad from the forward output y. */
SL_HD static inline float sl_ew_tanh_grad(float dy, float y)
{
    return dy * (1.0f - y * y);
}

/* momentum_update, one element: updates *v and returns the new param. */
SL_HD static inline float sl_ew_momentum(float param, float grad, float *v, float lr,
                                         float momentum, float weight_decay)
{
    float g = grad + weight_decay * param;
    *v = momentum * *v + g;
    return param - lr * *v;
}

/* adam_update, one element: updates *m and *v and returns the new param.
 * bc1 = 1 - beta1^t, bc2 = 1 - beta2^t (computed once per launch); decay
 * = 1 - lr * weight_decay, AdamW's decoupled decay (1: Adam). */
SL_HD static inline float sl_ew_adam(float param, float grad, float *m, float *v, float lr,
                                     float beta1, float beta2, float eps, float bc1, float bc2,
                                     float decay)
{
    *m = beta1 * *m + (1.0f - beta1) * grad;
    *v = beta2 * *v + (1.0f - beta2) * grad * grad;
    return param * decay - lr * (*m / bc1) / (sqrtf(*v / bc2) + eps);
}

/* The element-wise ops along axes (ew_binary, ew_unary; kinds in
 * ops/ops_axes.h): one kind's expression for one element. */
SL_HD static inline float sl_ew_binary(int kind, float a, float b)
{
    switch (kind) {
    case SL_EW_ADD:
        return a + b;
    case SL_EW_SUB:
        return a - b;
    case SL_EW_MUL:
        return a * b;
    case SL_EW_DIV:
        return a / b;
    case SL_EW_POW:
        return powf(a, b);
    case SL_EW_MAX:
        return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    case SL_EW_MIN:
        return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
    default: /* prelu */
        return a >= 0.0f ? a : a * b;
    }
}

/* compare's kinds (ops/ops_axes.h) for one element pair: 1 where the
 * relation holds, else 0. One body for floats and i32, so that each
 * compares in its own type (an i32 above 2^24 is not rounded to a float). */
#define SL_CMP_FN(name, T)                                                                         \
    SL_HD static inline int32_t name(int kind, T a, T b)                                           \
    {                                                                                              \
        switch (kind) {                                                                            \
        case SL_CMP_EQ:                                                                            \
            return a == b;                                                                         \
        case SL_CMP_NE:                                                                            \
            return a != b;                                                                         \
        case SL_CMP_LT:                                                                            \
            return a < b;                                                                          \
        case SL_CMP_LE:                                                                            \
            return a <= b;                                                                         \
        case SL_CMP_GT:                                                                            \
            return a > b;                                                                          \
        case SL_CMP_GE:                                                                            \
            return a >= b;                                                                         \
        case SL_CMP_AND:                                                                           \
            return a != 0 && b != 0;                                                               \
        case SL_CMP_OR:                                                                            \
            return a != 0 || b != 0;                                                               \
        default: /* xor */                                                                         \
            return (a != 0) != (b != 0);                                                           \
        }                                                                                          \
    }
SL_CMP_FN(sl_cmp_f32, float)
SL_CMP_FN(sl_cmp_i32, int32_t)
#undef SL_CMP_FN

SL_HD static inline float sl_ew_unary(int kind, float x, float p, float q)
{
    switch (kind) {
    case SL_EW_SQRT:
        return sqrtf(x);
    case SL_EW_ERF:
        return erff(x);
    case SL_EW_EXP:
        return expf(x);
    case SL_EW_LOG:
        return logf(x);
    case SL_EW_NEG:
        return -x;
    case SL_EW_ABS:
        return fabsf(x);
    case SL_EW_RECIPROCAL:
        return 1.0f / x;
    case SL_EW_CLIP:
        return x < p ? p : x > q ? q : x;
    case SL_EW_LEAKY_RELU:
        return x >= 0.0f ? x : p * x;
    case SL_EW_FLOOR:
        return floorf(x);
    case SL_EW_CEIL:
        return ceilf(x);
    case SL_EW_HARD_SIGMOID: {
        float v = p * x + q;
        return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
    }
    case SL_EW_ELU:
        return x >= 0.0f ? x : p * expm1f(x);
    case SL_EW_SELU:
        return q * (x > 0.0f ? x : p * expm1f(x));
    case SL_EW_SOFTPLUS:
        return x > 20.0f ? x : log1pf(expf(x));
    case SL_EW_SOFTSIGN:
        return x / (1.0f + fabsf(x));
    case SL_EW_SIN:
        return sinf(x);
    case SL_EW_COS:
        return cosf(x);
    case SL_EW_SIGN:
        return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x;
    case SL_EW_TAN:
        return tanf(x);
    case SL_EW_SINH:
        return sinhf(x);
    case SL_EW_COSH:
        return coshf(x);
    case SL_EW_ASIN:
        return asinf(x);
    case SL_EW_ACOS:
        return acosf(x);
    case SL_EW_ATAN:
        return atanf(x);
    case SL_EW_ASINH:
        return asinhf(x);
    case SL_EW_ACOSH:
        return acoshf(x);
    case SL_EW_ATANH:
        return atanhf(x);
    case SL_EW_ROUND:
        return rintf(x);
    case SL_EW_THRESHOLDED_RELU:
        return x > p ? x : 0.0f;
    case SL_EW_HARD_SWISH: { /* compares, not fminf/fmaxf: those are libm calls in a loop */
        float v = x / 6.0f + 0.5f;
        return x * (v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v);
    }
    case SL_EW_CELU:
        return fmaxf(0.0f, x) + fminf(0.0f, p * expm1f(x / p));
    case SL_EW_SHRINK:
        return x < -p ? x + q : x > p ? x - q : 0.0f;
    case SL_EW_GELU:
        return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case SL_EW_GELU_TANH: {
        float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
        return 0.5f * x * (1.0f + tanhf(u));
    }
    default: /* silu */
        return x * sl_ew_sigmoid(x);
    }
}

/* ew_unary_grad: the derivative f'(x) of ew_unary's kind at x, where the
 * kind is differentiable there; at a kink the side PyTorch takes (relu-like
 * kinds: 0 at 0 from the left; clip: 1 on its closed range). Piecewise
 * constant kinds (floor, ceil, round, sign) have 0. */
SL_HD static inline float sl_ew_unary_deriv(int kind, float x, float p, float q)
{
    switch (kind) {
    case SL_EW_SQRT:
        return 0.5f / sqrtf(x);
    case SL_EW_ERF:
        return 1.12837916709551257f * expf(-x * x);
    case SL_EW_EXP:
        return expf(x);
    case SL_EW_LOG:
        return 1.0f / x;
    case SL_EW_NEG:
        return -1.0f;
    case SL_EW_ABS:
        return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : 0.0f;
    case SL_EW_RECIPROCAL:
        return -1.0f / (x * x);
    case SL_EW_CLIP:
        return x >= p && x <= q ? 1.0f : 0.0f;
    case SL_EW_LEAKY_RELU:
        return x > 0.0f ? 1.0f : p;
    case SL_EW_HARD_SIGMOID: {
        float v = p * x + q;
        return v > 0.0f && v < 1.0f ? p : 0.0f;
    }
    case SL_EW_ELU:
        return x > 0.0f ? 1.0f : p * expf(x);
    case SL_EW_SELU:
        return q * (x > 0.0f ? 1.0f : p * expf(x));
    case SL_EW_SOFTPLUS:
        return sl_ew_sigmoid(x);
    case SL_EW_SOFTSIGN: {
        float d = 1.0f + fabsf(x);
        return 1.0f / (d * d);
    }
    case SL_EW_SIN:
        return cosf(x);
    case SL_EW_COS:
        return -sinf(x);
    case SL_EW_TAN: {
        float t = tanf(x);
        return 1.0f + t * t;
    }
    case SL_EW_SINH:
        return coshf(x);
    case SL_EW_COSH:
        return sinhf(x);
    case SL_EW_ASIN:
        return 1.0f / sqrtf(1.0f - x * x);
    case SL_EW_ACOS:
        return -1.0f / sqrtf(1.0f - x * x);
    case SL_EW_ATAN:
        return 1.0f / (1.0f + x * x);
    case SL_EW_ASINH:
        return 1.0f / sqrtf(x * x + 1.0f);
    case SL_EW_ACOSH:
        return 1.0f / sqrtf(x * x - 1.0f);
    case SL_EW_ATANH:
        return 1.0f / (1.0f - x * x);
    case SL_EW_THRESHOLDED_RELU:
        return x > p ? 1.0f : 0.0f;
    case SL_EW_HARD_SWISH:
        return x < -3.0f ? 0.0f : x <= 3.0f ? x / 3.0f + 0.5f : 1.0f;
    case SL_EW_CELU:
        return x > 0.0f ? 1.0f : expf(x / p);
    case SL_EW_SHRINK:
        return x < -p || x > p ? 1.0f : 0.0f;
    case SL_EW_GELU: {
        float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
        return cdf + x * 0.39894228040143268f * expf(-0.5f * x * x);
    }
    case SL_EW_GELU_TANH: {
        const float k = 0.79788456080286536f;
        float x2 = x * x, t = tanhf(k * (x + 0.044715f * x2 * x));
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x2);
    }
    case SL_EW_SILU: {
        float s = sl_ew_sigmoid(x);
        return s * (1.0f + x * (1.0f - s));
    }
    default: /* floor, ceil, sign, round: flat almost everywhere */
        return 0.0f;
    }
}

/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3"): four 32-bit words, a pure function of a 128-bit counter (ctr, in)
 * and a 64-bit key (out: the words), so every backend draws the same
 * numbers for one (key, counter) whatever its threads. */
SL_HD static inline void sl_philox4x32(uint32_t ctr[4], uint32_t k0, uint32_t k1)
{
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t) 0xD2511F53u * ctr[0], p1 = (uint64_t) 0xCD9E8D57u * ctr[2];
        uint32_t c0 = (uint32_t) (p1 >> 32) ^ ctr[1] ^ k0, c2 = (uint32_t) (p0 >> 32) ^ ctr[3] ^ k1;
        ctr[1] = (uint32_t) p1;
        ctr[3] = (uint32_t) p0;
        ctr[0] = c0;
        ctr[2] = c2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

/* dropout's threshold for drop probability p in [0, 1): a word u keeps its
 * element when u >= the threshold, so it keeps with probability 1 - p (to
 * 2^-32). */
SL_HD static inline uint64_t sl_dropout_threshold(float p)
{
    return (uint64_t) ((double) p * 4294967296.0);
}

/* dropout's draws for elements 4 * blk .. 4 * blk + 3: the key is the seed
 * tensor's two words, the counter (blk, its high half, the op's offset, 0);
 * element i keeps when words[i % 4] >= sl_dropout_threshold(p). */
SL_HD static inline void sl_dropout_block(uint64_t blk, uint32_t seed0, uint32_t seed1,
                                          uint32_t offset, uint32_t words[4])
{
    words[0] = (uint32_t) blk;
    words[1] = (uint32_t) (blk >> 32);
    words[2] = offset;
    words[3] = 0;
    sl_philox4x32(words, seed0, seed1);
}

#endif
