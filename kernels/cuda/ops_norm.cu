/* batchnorm's training forward, by our own kernel rather than cuDNN's, so
 * that its arithmetic is the cpu backend's (kernels/cpu/norm.c): per
 * channel, the mean in double, then the variance from the squared
 * deviations from it in double (two passes: never E[x^2] - E[x]^2), and
 * y = ((x - mean_hi) - mean_lo) * (scale * istd) + bias with the mean
 * subtracted before scaling. Folding the mean into the bias instead
 * (x * a + (bias - mean * a)) loses the digits of x - mean when the mean is
 * far above the deviation.
 *
 * One block per channel (grid-stride over channels beyond the grid); each
 * block reads its channel three times. Deterministic: fixed block size,
 * block_allreduce, no atomics. */
#include "kernels.cuh"

#define MAX_NORM_BLOCKS 65535u

__global__ void k_bn_train(const float *x, const float *scale, const float *bias, float *run_mean,
                           float *run_var, float *y, float *saved_mean, float *saved_istd,
                           uint64_t n, uint64_t channels, uint64_t spatial, double eps,
                           double momentum, const int *failed)
{
    SKIP_BLOCK_IF_FAILED(failed);
    uint64_t count = n * spatial;
    for (uint64_t c = blockIdx.x; c < channels; c += gridDim.x) {
        double acc = 0.0;
        for (uint64_t i = threadIdx.x; i < count; i += blockDim.x)
            acc += (double) x[((i / spatial) * channels + c) * spatial + i % spatial];
        double mean = block_allreduce(acc, op_sum{}, 0.0) / (double) count;
        acc = 0.0;
        for (uint64_t i = threadIdx.x; i < count; i += blockDim.x) {
            double d = (double) x[((i / spatial) * channels + c) * spatial + i % spatial] - mean;
            acc += d * d;
        }
        double var = block_allreduce(acc, op_sum{}, 0.0) / (double) count;
        double istd = 1.0 / sqrt(var + eps);
        float hi = (float) mean, lo = (float) (mean - (double) hi);
        float a = (float) ((double) scale[c] * istd), b = bias[c];
        if (threadIdx.x == 0) {
            saved_mean[c] = (float) mean;
            saved_istd[c] = (float) istd;
            run_mean[c] = (float) ((double) run_mean[c] * momentum + mean * (1.0 - momentum));
            /* the running variance takes the unbiased batch variance */
            run_var[c] = (float) ((double) run_var[c] * momentum +
                                  var * (double) count / (double) (count - 1) * (1.0 - momentum));
        }
        for (uint64_t i = threadIdx.x; i < count; i += blockDim.x) {
            uint64_t at = ((i / spatial) * channels + c) * spatial + i % spatial;
            y[at] = ((x[at] - hi) - lo) * a + b;
        }
    }
}

extern "C" int sl_cuda_run_bn_train(sl_cuda_exec *x, const sl_op_call *c)
{
    const sl_shape *s = &c->in[0].shape;
    uint64_t n = (uint64_t) s->dims[0], channels = (uint64_t) s->dims[1], spatial = 1;
    for (unsigned d = 2; d < s->ndim; d++)
        spatial *= (uint64_t) s->dims[d];
    unsigned grid = channels < MAX_NORM_BLOCKS ? (unsigned) channels : MAX_NORM_BLOCKS;
    k_bn_train<<<grid ? grid : 1, BLOCK, 0, x->stream>>>(
        f32(&c->in[0]), f32(&c->in[1]), f32(&c->in[2]), f32(&c->in[3]), f32(&c->in[4]),
        f32(&c->out[0]), f32(&c->out[1]), f32(&c->out[2]), n, channels, spatial,
        (double) c->attrs.f[0], (double) c->attrs.f[1], x->flag_dev);
    return LAUNCHED("cuda.bn");
}
