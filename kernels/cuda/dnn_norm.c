/* batchnorm_infer and batchnorm_grad through cuDNN's spatial batch
 * normalisation (statistics per channel over N, H, W); batchnorm's training
 * forward is our own kernel (ops_norm.cu), which subtracts the mean before
 * scaling.
 *
 * Conventions mapped onto cuDNN's:
 *   - x [N,C] is described as [N,C,1,1]; [N,C,H,W] as itself.
 *   - cuDNN's "saved inverse variance" is 1 / sqrt(var + eps): batchnorm's
 *     saved inverse std (ops_norm.cu writes it so), consumed as such by
 *     batchnorm_grad.
 *   - batchnorm_grad has no epsilon attribute: with the saved mean and
 *     inverse std given, cuDNN does not use its epsilon argument, which only
 *     has to be valid (>= CUDNN_BN_MIN_EPSILON). */
#include "cuda.h"

#include "sl_error.h"

/* Passed to cudnnBatchNormalizationBackward, which ignores it when the saved
 * statistics are given. */
#define GRAD_EPSILON 1e-5

/* Describes x (and y, dy, dx: same shape) and the per-channel tensors. */
static int describe(sl_cuda_exec *x, const sl_shape *s)
{
    /* sl_cuda_check: at most INT_MAX elements */
    int n = (int) s->dims[0], c = (int) s->dims[1];
    int h = s->ndim == 4 ? (int) s->dims[2] : 1, w = s->ndim == 4 ? (int) s->dims[3] : 1;
    int rc = SL_CUDNN("cuda.bn", cudnnSetTensor4dDescriptor(x->bn_x, CUDNN_TENSOR_NCHW,
                                                            CUDNN_DATA_FLOAT, n, c, h, w));
    if (rc == SL_OK)
        rc = SL_CUDNN("cuda.bn",
                      cudnnDeriveBNTensorDescriptor(x->bn_param, x->bn_x, CUDNN_BATCHNORM_SPATIAL));
    return rc;
}

int sl_cuda_run_norm(sl_cuda_exec *x, const sl_op_call *c)
{
    static const float one = 1.0f, zero = 0.0f;
    const sl_tensor_ref *in = c->in, *out = c->out;
    int rc;
    switch (c->op) {
    case SL_OP_BATCHNORM: /* the mean subtracted first, as on the cpu: ops_norm.cu */
        return sl_cuda_run_bn_train(x, c);
    case SL_OP_BATCHNORM_INFER: /* in0 x, in1 scale, in2 bias, in3 mean, in4 var */
        if ((rc = describe(x, &in[0].shape)) != SL_OK)
            return rc;
        return SL_CUDNN("cuda.bn", cudnnBatchNormalizationForwardInference(
                                       x->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x->bn_x,
                                       in[0].data, x->bn_x, out[0].data, x->bn_param, in[1].data,
                                       in[2].data, in[3].data, in[4].data, (double) c->attrs.f[0]));
    case SL_OP_BATCHNORM_GRAD: /* in0 dy, in1 x, in2 scale, in3 saved mean, in4 saved inv std */
        if ((rc = describe(x, &in[1].shape)) != SL_OK)
            return rc;
        return SL_CUDNN("cuda.bn", cudnnBatchNormalizationBackward(
                                       x->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero,
                                       x->bn_x, in[1].data, x->bn_x, in[0].data, x->bn_x,
                                       out[0].data, x->bn_param, in[2].data, out[1].data,
                                       out[2].data, GRAD_EPSILON, in[3].data, in[4].data));
    default:
        return SL_EUNSUPPORTED;
    }
}
