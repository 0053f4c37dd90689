/* Private to the op registry (ops.c, ops_nn.c, ops_table.c): validation
 * helpers, every op's infer and cost function, and the table. */
#ifndef SL_OPS_IMPL_H
#define SL_OPS_IMPL_H

#include "ops.h"

#include <stddef.h>

/* Room for one shape in an error message. */
#define SL_SHAPE_STR_LEN 96

/* Formats a reason into err (if any) and returns SL_EINVAL. */
__attribute__((format(printf, 3, 4))) int sl_ops_fail(char *err, size_t errlen, const char *fmt,
                                                      ...);
/* SL_OK when in[0..n_in) are all f32, else SL_EINVAL naming the first that is not. */
int sl_ops_need_f32(const sl_shape *in, unsigned n_in, char *err, size_t errlen);
/* SL_OK when in[i] has rank `rank`. */
int sl_ops_need_rank(const sl_shape *in, unsigned i, unsigned rank, char *err, size_t errlen);
/* SL_OK when in[j] has exactly the shape `want` (what names what want is). */
int sl_ops_need_shape(const sl_shape *in, unsigned j, const sl_shape *want, const char *what,
                      char *err, size_t errlen);
/* Numpy broadcasting of a and b (right-aligned, each dim equal or 1) into
 * out, with a's dtype; SL_EINVAL naming both shapes when they do not. */
int sl_ops_broadcast(const sl_shape *a, const sl_shape *b, sl_shape *out, char *err, size_t errlen);
/* SL_OK when v is finite. */
int sl_ops_need_finite(float v, const char *what, char *err, size_t errlen);

/* The infer and cost functions of every op (contracts: sl_op_def.infer and
 * sl_op_def.cost in ops.h), named by the table in ops_table.c. ops.c
 * defines those of the element-wise, dense, loss, reduction, optimiser and
 * shape ops, ops_nn.c those of convolution, pooling and normalisation. Some
 * serve several ops (like_in0: out0 has in0's shape). */
#define SL_OPS_INFER(name)                                                                         \
    int sl_ops_infer_##name(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,    \
                            size_t errlen);
#define SL_OPS_COST(name)                                                                          \
    void sl_ops_cost_##name(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,         \
                            sl_op_cost *c);
#define SL_OPS_FNS(name) SL_OPS_INFER(name) SL_OPS_COST(name)
SL_OPS_INFER(like_in0)
SL_OPS_FNS(cast)
/* ops_amp.c: */
SL_OPS_FNS(amp_unscale)
SL_OPS_FNS(amp_commit)
SL_OPS_FNS(amp_scale_update)
SL_OPS_INFER(relu_mask)
SL_OPS_INFER(relu_grad_mask)
SL_OPS_INFER(scale)
SL_OPS_INFER(same2)
SL_OPS_INFER(axpy)
SL_OPS_INFER(add_scalar)
SL_OPS_INFER(mse_loss)
SL_OPS_INFER(reduce)
SL_OPS_INFER(softmax)
SL_OPS_INFER(softmax_xent)
SL_OPS_INFER(softmax_xent_grad)
SL_OPS_INFER(argmax)
SL_OPS_INFER(sgd)
SL_OPS_INFER(sgd_lr)
SL_OPS_INFER(momentum_lr)
SL_OPS_INFER(adam_lr)
SL_OPS_INFER(momentum)
SL_OPS_INFER(adam)
SL_OPS_INFER(reshape)
SL_OPS_INFER(matmul)
SL_OPS_INFER(matmul_acc)
SL_OPS_INFER(bias_add)
SL_OPS_INFER(bias_grad)
SL_OPS_COST(fill)
SL_OPS_COST(copy)
SL_OPS_COST(unary)
SL_OPS_COST(binary)
SL_OPS_COST(axpy)
SL_OPS_COST(relu_bits)
SL_OPS_COST(add_scalar)
SL_OPS_COST(transcendental)
SL_OPS_COST(act_grad)
SL_OPS_COST(mse_grad)
SL_OPS_COST(softmax)
SL_OPS_COST(sgd)
SL_OPS_COST(momentum)
SL_OPS_COST(reshape)
SL_OPS_COST(mse_loss)
SL_OPS_COST(reduce_sum)
SL_OPS_COST(reduce_mean)
SL_OPS_COST(softmax_xent)
SL_OPS_COST(softmax_xent_grad)
SL_OPS_COST(argmax)
SL_OPS_COST(adam)
SL_OPS_COST(matmul)
SL_OPS_COST(matmul_acc)
SL_OPS_COST(bias_add)
SL_OPS_COST(bias_grad)
SL_OPS_FNS(conv2d)
SL_OPS_FNS(conv2d_grad_input)
SL_OPS_FNS(conv2d_grad_filter)
SL_OPS_FNS(channel_bias_add)
SL_OPS_FNS(channel_bias_grad)
SL_OPS_FNS(maxpool)
SL_OPS_FNS(maxpool_grad)
SL_OPS_FNS(avgpool)
SL_OPS_FNS(avgpool_grad)
SL_OPS_FNS(batchnorm)
SL_OPS_FNS(batchnorm_infer)
SL_OPS_FNS(batchnorm_grad)
SL_OPS_INFER(mul_scalar)
/* ops_axes.c */
SL_OPS_FNS(ew_binary)
SL_OPS_FNS(ew_unary)
SL_OPS_INFER(transpose)
SL_OPS_INFER(slice)
SL_OPS_INFER(concat)
SL_OPS_COST(layout)
SL_OPS_FNS(gather)
SL_OPS_FNS(index_write)
SL_OPS_FNS(reduce_axes)
SL_OPS_FNS(batch_matmul)
SL_OPS_FNS(where)
SL_OPS_FNS(masked_fill)
SL_OPS_FNS(compare)
/* ops_train.c */
SL_OPS_FNS(layer_norm)
SL_OPS_FNS(layer_norm_grad)
SL_OPS_FNS(ew_unary_grad)
SL_OPS_FNS(softmax_axis)
SL_OPS_FNS(softmax_axis_grad)
SL_OPS_FNS(embedding_grad)
SL_OPS_FNS(dropout)
SL_OPS_FNS(dropout_grad)
#undef SL_OPS_FNS
#undef SL_OPS_COST
#undef SL_OPS_INFER

/* The registry's table, indexed by enum sl_op_id (ops_table.c). */
extern const sl_op_def sl_ops_table[SL_OP_COUNT];

#endif
