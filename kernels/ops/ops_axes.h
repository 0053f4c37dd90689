/* The kinds and attribute decoding of the ops that work along axes of any
 * rank (ew_binary, ew_unary, slice, reduce_axes; ops_table.c documents
 * them), shared by the registry, every backend and the ONNX importer. */
#ifndef SL_OPS_AXES_H
#define SL_OPS_AXES_H

#include "ops.h"

#include <stdint.h>

/* ew_binary's i[0]. */
enum sl_ew_binary_kind {
    SL_EW_ADD,
    SL_EW_SUB,
    SL_EW_MUL,
    SL_EW_DIV,
    SL_EW_POW,
    SL_EW_MAX,
    SL_EW_MIN,
    SL_EW_PRELU, /* a >= 0 ? a : a * b (b: the slope) */
    SL_EW_BINARY_COUNT
};

/* ew_unary's i[0]; f[0] and f[1] are the parameters named below. */
enum sl_ew_unary_kind {
    SL_EW_SQRT,
    SL_EW_ERF,
    SL_EW_EXP,
    SL_EW_LOG,
    SL_EW_NEG,
    SL_EW_ABS,
    SL_EW_RECIPROCAL,
    SL_EW_CLIP,       /* min(max(x, f[0]), f[1]) */
    SL_EW_LEAKY_RELU, /* x >= 0 ? x : f[0] * x */
    SL_EW_FLOOR,
    SL_EW_CEIL,
    SL_EW_HARD_SIGMOID, /* max(0, min(1, f[0] * x + f[1])) */
    SL_EW_ELU,          /* x >= 0 ? x : f[0] * (exp(x) - 1) */
    SL_EW_SELU,         /* f[1] * (x > 0 ? x : f[0] * (exp(x) - 1)) */
    SL_EW_SOFTPLUS,     /* log(1 + exp(x)) */
    SL_EW_SOFTSIGN,     /* x / (1 + |x|) */
    SL_EW_SIN,
    SL_EW_COS,
    SL_EW_SIGN,
    SL_EW_TAN,
    SL_EW_SINH,
    SL_EW_COSH,
    SL_EW_ASIN,
    SL_EW_ACOS,
    SL_EW_ATAN,
    SL_EW_ASINH,
    SL_EW_ACOSH,
    SL_EW_ATANH,
    SL_EW_ROUND,
    SL_EW_THRESHOLDED_RELU,
    SL_EW_HARD_SWISH,
    SL_EW_CELU,
    SL_EW_SHRINK,
    SL_EW_GELU,      /* x * (1 + erf(x / sqrt(2))) / 2 */
    SL_EW_GELU_TANH, /* x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) / 2 */
    SL_EW_SILU,      /* x * sigmoid(x) */
    SL_EW_UNARY_COUNT
};

/* reduce_axes' i[0]. */
enum sl_reduce_kind {
    SL_REDUCE_SUM,
    SL_REDUCE_MEAN,
    SL_REDUCE_MAX,
    SL_REDUCE_MIN,
    SL_REDUCE_COUNT
};

/* compare's i[0]: a relation (1 where it holds) or a logical op on the
 * truth of a and b (nonzero: true). */
enum sl_cmp_kind {
    SL_CMP_EQ,
    SL_CMP_NE,
    SL_CMP_LT,
    SL_CMP_LE,
    SL_CMP_GT,
    SL_CMP_GE,
    SL_CMP_AND,
    SL_CMP_OR,
    SL_CMP_XOR,
    SL_CMP_COUNT
};

/* slice's step: i[3], where 0 (absent) means 1. */
static inline int64_t sl_slice_step(const sl_op_attrs *a)
{
    return a->i[3] == 0 ? 1 : a->i[3];
}

#endif
