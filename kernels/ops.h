/* The op registry: every op is defined once here, by name, arity, in-place
 * (mutated) inputs, attributes, shape inference + validation, and cost.
 * Backends implement the math; the registry guarantees the shapes they see
 * are consistent, so a client can never make a kernel read or write out of
 * bounds.
 *
 * Attribute conventions (ONNX names where ONNX has the op):
 *   fill         i: -            f[0] = value                       out = in0 shape
 *   copy         out = in0
 *   add          out = in0 + in1                    (same shapes)
 *   scale        out = f[0] * in0
 *   matmul       out = op(in0) @ op(in1)  i[0] = transA, i[1] = transB (0/1)
 *                in0 [M,K] (or [K,M] if transA), in1 [K,N] (or [N,K] if transB)
 *   bias_add     out[M,N] = in0[M,N] + in1[N]
 *   bias_grad    out[N] = sum over rows of in0[M,N]  (gradient of bias_add)
 *   relu         out = max(in0, 0)
 *   relu_grad    out = in0(dy) * (in1(x) > 0)
 *   mse_loss     out[] (scalar) = mean((in0 - in1)^2)      in0 = pred, in1 = target
 *   mse_grad     out = 2 * (in0 - in1) / elems(in0)
 *   sgd_update   in0 (param, mutated) -= f[0](lr) * in1(grad); no outputs
 *
 * The op `fill` has one input only to give its output a shape: it reads no
 * data from it. */
#ifndef SL_OPS_H
#define SL_OPS_H

#include "tensor.h"

#include <stdint.h>

#define SL_OP_MAX_IN 6
#define SL_OP_MAX_OUT 4
#define SL_OP_MAX_IATTRS 8
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

#endif
