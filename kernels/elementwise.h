/* Per-element math shared by the cpu loops and the cuda kernels, so that both
 * backends compute bit-for-bit the same expression per element (up to the
 * compiler's FMA contraction). Each function is the body of one op for one
 * element; the loops and the reductions live in the backends. */
#ifndef SL_ELEMENTWISE_H
#define SL_ELEMENTWISE_H

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

#endif
