/* Private to the op registry (ops.c, ops_nn.c): validation helpers and the
 * infer / cost functions that ops_nn.c contributes to the table in ops.c. */
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
/* SL_OK when v is finite. */
int sl_ops_need_finite(float v, const char *what, char *err, size_t errlen);

/* Defined in ops_nn.c: conv2d, conv2d_grad_input, conv2d_grad_filter,
 * channel_bias_add, channel_bias_grad, maxpool, maxpool_grad, avgpool,
 * avgpool_grad, batchnorm, batchnorm_infer, batchnorm_grad. */
#define SL_OPS_NN_FNS(name)                                                                        \
    int sl_ops_infer_##name(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,    \
                            size_t errlen);                                                        \
    void sl_ops_cost_##name(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,         \
                            sl_op_cost *c);
SL_OPS_NN_FNS(conv2d)
SL_OPS_NN_FNS(conv2d_grad_input)
SL_OPS_NN_FNS(conv2d_grad_filter)
SL_OPS_NN_FNS(channel_bias_add)
SL_OPS_NN_FNS(channel_bias_grad)
SL_OPS_NN_FNS(maxpool)
SL_OPS_NN_FNS(maxpool_grad)
SL_OPS_NN_FNS(avgpool)
SL_OPS_NN_FNS(avgpool_grad)
SL_OPS_NN_FNS(batchnorm)
SL_OPS_NN_FNS(batchnorm_infer)
SL_OPS_NN_FNS(batchnorm_grad)
#undef SL_OPS_NN_FNS

#endif
