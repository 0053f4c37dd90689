/* The op registry: every op is defined once here, by name, arity, in-place
 * (mutated) inputs, attributes, shape inference + validation, and cost.
 * Backends implement the math; the registry guarantees the shapes they see
 * are consistent, so a client can never make a kernel read or write out of
 * bounds. Where ONNX defines the op, semantics follow ONNX (NCHW layouts,
 * attribute meaning); attributes are positional. An attribute written "0 =
 * default" takes its ONNX default when 0. Unused attributes must be 0.
 * dtypes are f32 unless said otherwise.
 *
 * Element-wise and dense
 *   fill         out = f[0] everywhere; in0 only gives the shape (not read)
 *   copy         out = in0
 *   add          out = in0 + in1                      (same shapes)
 *   mul          out = in0 * in1                      (same shapes)
 *   scale        out = f[0] * in0
 *   axpy         out = f[0] * in0 + in1               (same shapes)
 *   add_scalar   in0 (mutated) += f[0]; no outputs    (e.g. Adam's step count)
 *   matmul       out = op(in0) @ op(in1)  i[0] = transA, i[1] = transB (0/1)
 *                in0 [M,K] (or [K,M] if transA), in1 [K,N] (or [N,K] if transB)
 *   matmul_acc   in2 acc[M,N] (mutated) = f[1](beta) * acc + f[0](alpha) *
 *                op(in0) @ op(in1); no outputs. in0, in1 and i[0..1] as
 *                matmul; acc must have the product's shape. alpha and beta
 *                finite; beta = 0 does not read acc (BLAS: NaN or inf there
 *                do not propagate). acc sharing memory with in0 or in1 gives
 *                unspecified values (never an out-of-bounds access). A fused
 *                optimiser's gradient: matmul_acc(x, dy, velocity; 1,
 *                momentum) then sgd_update(W, velocity; lr) is
 *                momentum_update without a dW tensor.
 *   bias_add     out[M,N] = in0[M,N] + in1[N]
 *   bias_grad    out[N] = sum over rows of in0[M,N]  (gradient of bias_add)
 *   relu         out = max(in0, 0)
 *   relu_grad    out = in0(dy) * (in1(x) > 0)
 *   relu_mask    out0 = relu(in0), out1 = i32[ceil(n/32)] bits: bit i of
 *                word i/32 set iff in0[i] > 0 (n = elements of in0). The
 *                bits are all its gradient needs: 1/32 of keeping x or y.
 *   relu_grad_mask  out = in0(dy) where in1's bit is set, else 0; in1 as
 *                relu_mask's out1 for dy's element count
 *   sigmoid      out = 1 / (1 + exp(-in0))
 *   sigmoid_grad out = in0(dy) * in1(y) * (1 - in1(y))   (y: sigmoid's output)
 *   tanh         out = tanh(in0)
 *   tanh_grad    out = in0(dy) * (1 - in1(y)^2)          (y: tanh's output)
 *
 *   reshape      out = in0 with dims i[0..ndim) (ndim = count of leading
 *                nonzero attrs; one may be -1 = inferred); same element count.
 *                A view: salusd aliases out to in0's memory and never
 *                launches it, so backends need no kernel for it.
 *
 * Convolution and pooling (NCHW; pads in ONNX order h_begin, w_begin,
 * h_end, w_end; out = floor((in + pad_b + pad_e - dil*(k-1) - 1) / stride) + 1)
 *   conv2d        in0 x[N,C,H,W], in1 w[K,C/group,R,S] -> out y[N,K,OH,OW]
 *                 i[0..1] strides (0 = 1), i[2..5] pads, i[6..7] dilations
 *                 (0 = 1), i[8] group (0 = 1; C and K divisible by it)
 *   conv2d_grad_input   in0 dy[N,K,OH,OW], in1 w, in2 x (shape only, not
 *                 read) -> out dx (shape of x); attrs as conv2d
 *   conv2d_grad_filter  in0 dy, in1 x, in2 w (shape only) -> out dw; attrs
 *                 as conv2d
 *   channel_bias_add   out[N,C,H,W] = in0 + in1[C]
 *   channel_bias_grad  out[C] = sum over N, H, W of in0[N,C,H,W]
 *   maxpool       in0 x[N,C,H,W] -> out y; i[0..1] kernel, i[2..3] strides
 *                 (0 = 1), i[4..7] pads (padding never wins the max; each
 *                 pad < the kernel, so every window holds a real element)
 *   maxpool_grad  in0 dy, in1 x, in2 y (maxpool's output) -> out dx; attrs
 *                 as maxpool. Ties: the gradient goes to the first max.
 *   avgpool       as maxpool, i[8] count_include_pad (0/1)
 *   avgpool_grad  in0 dy, in1 x (shape only) -> out dx; attrs as avgpool
 *
 * Normalisation (x is [N,C] or [N,C,H,W]; statistics per channel C)
 *   batchnorm     training: in0 x, in1 scale[C], in2 bias[C], in3 running
 *                 mean[C] (mutated), in4 running var[C] (mutated) -> out0 y,
 *                 out1 saved mean[C], out2 saved inverse std[C]; f[0]
 *                 epsilon (> 0), f[1] momentum (ONNX: running = running *
 *                 momentum + batch * (1 - momentum); running var is the
 *                 unbiased batch variance, so N*H*W >= 2)
 *   batchnorm_infer  in0 x, in1 scale, in2 bias, in3 mean, in4 var -> y;
 *                 f[0] epsilon
 *   batchnorm_grad   in0 dy, in1 x, in2 scale, in3 saved mean, in4 saved
 *                 inverse std -> out0 dx, out1 dscale[C], out2 dbias[C]
 *
 * Losses and reductions
 *   mse_loss     out[] (scalar) = mean((in0 - in1)^2)      in0 = pred, in1 = target
 *   mse_grad     out = 2 * (in0 - in1) / elems(in0)
 *   softmax      out[N,C] = softmax of each row of in0[N,C]
 *   softmax_xent in0 logits[N,C], in1 labels[N] (i32) -> out0 loss[] (mean
 *                cross-entropy), out1 probs[N,C]. A label outside [0, C)
 *                fails the op at run time (SL_EINVAL), it is never used as
 *                an index.
 *   softmax_xent_grad  in0 probs[N,C], in1 labels[N] (i32) -> out
 *                dlogits = (probs - onehot(labels)) / N
 *   reduce_sum   out[] = sum of all elements of in0
 *   reduce_mean  out[] = mean of all elements of in0
 *   argmax       in0[N,C] -> out[N] (i32): index of each row's max (first on ties)
 *
 * Optimisers (update parameters in place; no outputs)
 *   sgd_update      in0 param (mutated) -= f[0](lr) * in1(grad)
 *   momentum_update in0 param (mutated), in1 grad, in2 velocity (mutated):
 *                   v = f[1](momentum) * v + g + f[2](weight decay) * p;
 *                   p -= f[0](lr) * v   (PyTorch's SGD with momentum)
 *   adam_update     in0 param (mutated), in1 grad, in2 m (mutated), in3 v
 *                   (mutated), in4 t[1] (step count, 1 after the first
 *                   add_scalar; read only; [] also accepted): f[0] lr, f[1]
 *                   beta1, f[2] beta2 (both in [0, 1)),
 *                   f[3] epsilon; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *                   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
 */
#ifndef SL_OPS_H
#define SL_OPS_H

#include "tensor.h"

#include <stdint.h>

#define SL_OP_MAX_IN 6
#define SL_OP_MAX_OUT 4
#define SL_OP_MAX_IATTRS 12
#define SL_OP_MAX_FATTRS 4

enum sl_op_id {
    SL_OP_FILL,
    SL_OP_COPY,
    SL_OP_ADD,
    SL_OP_SCALE,
    SL_OP_MATMUL,
    SL_OP_BIAS_ADD,
    SL_OP_BIAS_GRAD,
    SL_OP_RELU,
    SL_OP_RELU_GRAD,
    SL_OP_MSE_LOSS,
    SL_OP_MSE_GRAD,
    SL_OP_SGD_UPDATE,
    SL_OP_MUL,
    SL_OP_AXPY,
    SL_OP_ADD_SCALAR,
    SL_OP_SIGMOID,
    SL_OP_SIGMOID_GRAD,
    SL_OP_TANH,
    SL_OP_TANH_GRAD,
    SL_OP_CONV2D,
    SL_OP_CONV2D_GRAD_INPUT,
    SL_OP_CONV2D_GRAD_FILTER,
    SL_OP_CHANNEL_BIAS_ADD,
    SL_OP_CHANNEL_BIAS_GRAD,
    SL_OP_MAXPOOL,
    SL_OP_MAXPOOL_GRAD,
    SL_OP_AVGPOOL,
    SL_OP_AVGPOOL_GRAD,
    SL_OP_BATCHNORM,
    SL_OP_BATCHNORM_INFER,
    SL_OP_BATCHNORM_GRAD,
    SL_OP_SOFTMAX,
    SL_OP_SOFTMAX_XENT,
    SL_OP_SOFTMAX_XENT_GRAD,
    SL_OP_REDUCE_SUM,
    SL_OP_REDUCE_MEAN,
    SL_OP_ARGMAX,
    SL_OP_MOMENTUM_UPDATE,
    SL_OP_ADAM_UPDATE,
    SL_OP_RESHAPE,
    SL_OP_MATMUL_ACC,
    SL_OP_RELU_MASK,
    SL_OP_RELU_GRAD_MASK,
    SL_OP_COUNT
};

typedef struct sl_op_attrs {
    int64_t i[SL_OP_MAX_IATTRS];
    float f[SL_OP_MAX_FATTRS];
} sl_op_attrs;

/* One launch of an op: what a backend kernel receives. */
typedef struct sl_op_call {
    uint16_t op; /* enum sl_op_id */
    uint8_t n_in, n_out;
    sl_op_attrs attrs;
    sl_tensor_ref in[SL_OP_MAX_IN];
    sl_tensor_ref out[SL_OP_MAX_OUT];
} sl_op_call;

typedef struct sl_op_cost {
    uint64_t flops; /* floating-point operations */
    uint64_t bytes; /* bytes read + written */
} sl_op_cost;

typedef struct sl_op_def {
    const char *name;
    uint8_t n_in, n_out;
    uint8_t mutates;            /* bit i set: input i is written in place */
    uint8_t n_iattrs, n_fattrs; /* attributes the op reads (others must be 0) */
    /* Validates the inputs' shapes and attrs and writes the output shapes.
     * Returns SL_OK or SL_EINVAL; on error writes a reason into err. */
    int (*infer)(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err, size_t errlen);
    /* Cost of one launch with validated shapes. */
    void (*cost)(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out, sl_op_cost *c);
    /* bit i set: out0 may be written over input i's memory when that input
     * has the same size (in-place execution). Only element-wise ops set it:
     * out0[j] depends on in_i at index j alone, read before out0[j] is
     * written. Every backend's kernel must then be correct with
     * out[0].data == in[i].data (no restrict, no copy that assumes disjoint
     * buffers); salusd decides the aliasing at graph registration. */
    uint8_t inplace;
} sl_op_def;

/* The definition of op id, or NULL if id >= SL_OP_COUNT. */
const sl_op_def *sl_op_get(unsigned id);

/* Finds an op by name; SL_ENOTFOUND if there is none. */
int sl_op_lookup(const char *name, unsigned *id);

/* Full validation of one op instance: arity (n_in must equal the def's),
 * every input shape valid, attributes, then the def's infer. On success
 * writes def->n_out output shapes. Errors: SL_EINVAL with a reason in err. */
int sl_op_infer(unsigned id, const sl_op_attrs *a, const sl_shape *in, unsigned n_in, sl_shape *out,
                char *err, size_t errlen);

/* Splitting one op into parts that run one after another on the same
 * stream and together compute the whole op, so that a scheduler can fit a
 * long op into short idle gaps (server/executor.c). matmul and matmul_acc
 * split along M when A is not transposed (rows of A and of the output:
 * each part computes its rows exactly as the whole op does), else along K
 * when B is not transposed (rows of A and B: part 0 is the op on the first
 * rows, later parts add theirs with matmul_acc, beta 1; the sum's order
 * changes with the parts). Nothing else splits. */

/* How many parts c may be split into at most (its rows along the split
 * dimension); 1 when it does not split. c must have passed sl_op_infer. */
uint64_t sl_op_split_max(const sl_op_call *c);
/* Part `part` of c split into `parts` (rows divided as evenly as they go).
 * Errors: SL_EUNSUPPORTED (c does not split), SL_EINVAL (parts 0 or more
 * than sl_op_split_max, part >= parts). */
int sl_op_split(const sl_op_call *c, uint32_t parts, uint32_t part, sl_op_call *out);

#endif
