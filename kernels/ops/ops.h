/* The op registry: every op is defined once, in the table in ops_table.c,
 * by name, inputs, outputs, attributes (with their documentation), in-place
 * (mutated) inputs, shape inference + validation, and cost. Backends
 * implement the math; the registry guarantees the shapes they see are
 * consistent, so a client can never make a kernel read or write out of
 * bounds. Where ONNX defines the op, semantics follow ONNX (NCHW layouts,
 * attribute meaning); attributes are positional.
 *
 * What each op computes, its inputs, outputs and attributes are documented
 * in the table only: docs/ops.md is generated from it (docs/ops_md.c, and
 * the ops-reference test fails when the committed file is stale). */
#ifndef SL_OPS_H
#define SL_OPS_H

#include "tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_OP_MAX_IN 6
#define SL_OP_MAX_OUT 4
#define SL_OP_MAX_IATTRS 12
#define SL_OP_MAX_FATTRS 5

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
    SL_OP_MUL_SCALAR,
    /* ops along axes of any rank (ops_axes.c), for imported ONNX graphs */
    SL_OP_EW_BINARY,
    SL_OP_EW_UNARY,
    SL_OP_TRANSPOSE,
    SL_OP_SLICE,
    SL_OP_CONCAT,
    SL_OP_GATHER,
    SL_OP_REDUCE_AXES,
    SL_OP_LOG_SOFTMAX,
    SL_OP_BATCH_MATMUL,
    /* conversions between the float dtypes (f32, bf16, f16) */
    SL_OP_CAST,
    /* dynamic loss scaling of f16 mixed-precision training (ops_amp.c) */
    SL_OP_AMP_UNSCALE,
    SL_OP_AMP_COMMIT,
    SL_OP_AMP_SCALE_UPDATE,
    /* what transformer training graphs need (ops_train.c, ops_axes.c) */
    SL_OP_LAYER_NORM,
    SL_OP_LAYER_NORM_GRAD,
    SL_OP_EW_UNARY_GRAD,
    SL_OP_SOFTMAX_AXIS,
    SL_OP_SOFTMAX_AXIS_GRAD,
    SL_OP_EMBEDDING_GRAD,
    SL_OP_WHERE,
    SL_OP_MASKED_FILL,
    SL_OP_DROPOUT,
    SL_OP_DROPOUT_GRAD,
    /* comparisons and logic producing i32 masks (ops_axes.c) */
    SL_OP_COMPARE,
    /* the optimiser updates with a run-time rate (a learning-rate schedule) */
    SL_OP_SGD_UPDATE_LR,
    SL_OP_MOMENTUM_UPDATE_LR,
    SL_OP_ADAM_UPDATE_LR,
    /* rows written in place at run-time positions (ops_axes.c) */
    SL_OP_INDEX_WRITE,
    SL_OP_COUNT
};

typedef struct sl_op_attrs {
    int64_t i[SL_OP_MAX_IATTRS];
    float f[SL_OP_MAX_FATTRS];
} sl_op_attrs;

/* How f32 matmuls and convolutions may round their products, per session
 * (bits of sl_op_call.math). Without a bit the op is exact f32; with it a
 * backend that has TF32 tensor cores (cuda on Ampere and later) may use
 * them (10-bit mantissa products, f32 sums). Backends without TF32 (cpu)
 * stay exact. SL_MATH_DEFAULT is PyTorch's: matmul exact, convolution
 * TF32. */
enum sl_math {
    SL_MATH_MATMUL_TF32 = 1,
    SL_MATH_CONV_TF32 = 2,
    SL_MATH_DEFAULT = SL_MATH_CONV_TF32,
};

/* One launch of an op: what a backend kernel receives. */
typedef struct sl_op_call {
    uint16_t op; /* enum sl_op_id */
    uint8_t n_in, n_out;
    uint8_t math; /* enum sl_math bits: the session's choice for f32 */
    sl_op_attrs attrs;
    sl_tensor_ref in[SL_OP_MAX_IN];
    sl_tensor_ref out[SL_OP_MAX_OUT];
    /* in_version[i], when nonzero, promises that in[i]'s contents are the
     * same in every call carrying the same (in[i].data, in_version[i]): a
     * backend may keep copies derived from them (weights reordered into a
     * blocked layout) across calls. 0 promises nothing (ephemeral values, a
     * caller that does not track writes). */
    uint64_t in_version[SL_OP_MAX_IN];
} sl_op_call;

typedef struct sl_op_cost {
    uint64_t flops; /* floating-point operations */
    uint64_t bytes; /* bytes read + written */
} sl_op_cost;

/* Where the reference lists an op. */
enum sl_op_group {
    SL_OP_GROUP_DENSE,
    SL_OP_GROUP_CONV,
    SL_OP_GROUP_NORM,
    SL_OP_GROUP_LOSS,
    SL_OP_GROUP_OPTIM,
    SL_OP_GROUP_SHAPE,
    SL_OP_GROUP_AXES,
    SL_OP_GROUP_TRAIN,
    SL_OP_GROUP_COUNT
};

/* A group's title and introduction (rules shared by its ops). */
typedef struct sl_op_group_def {
    const char *title;
    const char *doc;
} sl_op_group_def;

/* One input or output of an op. Text is Markdown, one line. */
typedef struct sl_op_arg {
    const char *name; /* short name: "x", "dy", "labels" */
    const char *doc;  /* meaning, shape, dtype when not f32 */
} sl_op_arg;

/* One positional attribute of an op. */
typedef struct sl_op_attr {
    const char *name; /* "alpha", "stride_h" */
    const char *doc;  /* meaning and valid values */
    /* true: a graph whose op does not send it (too short an iattrs or
     * fattrs list) is refused (sl_op_check_attrs); an explicit 0 is taken
     * as 0. false: an absent attribute reads as 0, which means dflt. */
    bool required;
    const char *dflt; /* what absent or 0 means; NULL when required */
} sl_op_attr;

typedef struct sl_op_def {
    const char *name;
    uint8_t n_in, n_out;
    uint8_t mutates;            /* bit i set: input i is written in place */
    uint8_t n_iattrs, n_fattrs; /* attributes the op reads (others must be 0) */
    uint8_t group;              /* enum sl_op_group */
    const char *doc;            /* what it computes: Markdown, one paragraph */
    const sl_op_arg *ins;       /* n_in entries */
    const sl_op_arg *outs;      /* n_out entries (NULL when none) */
    const sl_op_attr *iattrs;   /* n_iattrs entries: iattrs[i] documents i[i] */
    const sl_op_attr *fattrs;   /* n_fattrs entries: fattrs[i] documents f[i] */
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
    /* The float dtypes the op computes in (SL_DTS bits; 0 means f32 only):
     * its float inputs share one of these, and its float outputs have it.
     * i32 inputs (labels, indices) are what the op's docs say.
     * sl_op_infer refuses any other float dtype, naming the op's input. */
    uint8_t dtypes;
    /* What a backend accumulates sums and products in when the inputs are
     * bf16 or f16 (enum sl_dtype): SL_F32 for every op that sums (matmul,
     * convolution, reductions), so a half-precision op rounds once, at its
     * output. */
    uint8_t accum;
    /* true for cast, whose output dtype is an attribute: infer sees the
     * real dtypes. For every other op, infer sees float inputs as f32 and
     * sl_op_infer gives its f32 outputs the inputs' float dtype. */
    bool converts;
} sl_op_def;

/* The definition of op id, or NULL if id >= SL_OP_COUNT. */
const sl_op_def *sl_op_get(unsigned id);

/* Finds an op by name; SL_ENOTFOUND if there is none. */
int sl_op_lookup(const char *name, unsigned *id);

/* The title and introduction of group g (enum sl_op_group), or NULL if g >=
 * SL_OP_GROUP_COUNT. */
const sl_op_group_def *sl_op_group_get(unsigned g);

/* Writes the names of every op, in registry order and separated by ", ",
 * into buf (always terminated when len > 0): as many whole names as fit,
 * then "and N more" when not all do. For error messages that must say what
 * a client could have asked for. Returns the length written. */
size_t sl_op_names(char *buf, size_t len);

/* Checks the attribute counts a client actually sent for op id (the
 * lengths of its iattrs and fattrs lists): every required attribute
 * (sl_op_attr.required) must lie within them, since a missing one would
 * otherwise read as 0 (a scale by 0, an SGD step of 0) without a word.
 * Returns SL_OK, or SL_EINVAL with a reason in err, e.g. "missing required
 * attribute fattrs[0] (alpha)"; also SL_EINVAL for an unknown id or more
 * attributes than SL_OP_MAX_IATTRS / SL_OP_MAX_FATTRS. Attribute values
 * are checked by sl_op_infer. */
int sl_op_check_attrs(unsigned id, size_t n_iattrs, size_t n_fattrs, char *err, size_t errlen);

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
