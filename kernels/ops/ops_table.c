/* The op registry's table: every op defined once, with its documentation.
 * An op's arity and attribute counts are the lengths of its documented
 * input, output and attribute lists (the macros below count them), so what
 * the reference (docs/ops.md, generated from this table by docs/ops_md.c)
 * says an op takes is what validation accepts, and which attributes are
 * required is what sl_op_check_attrs enforces.
 *
 * Text is Markdown. Inputs are in0, in1, ... and outputs out0, ... in the
 * order listed; attributes are iattrs[i] / fattrs[i] in the order listed.
 * Float tensors are f32, or any dtype of the op's `dtypes` (HALF: f32, bf16
 * or f16; docs/ops.md's "Computes in"); i32 ones are documented as such. */
#include "ops_axes.h"
#include "ops_impl.h"

#define N_OF(type, ...) (sizeof((const type[]){__VA_ARGS__}) / sizeof(type))
#define INS(...) .ins = (const sl_op_arg[]){__VA_ARGS__}, .n_in = N_OF(sl_op_arg, __VA_ARGS__)
#define OUTS(...) .outs = (const sl_op_arg[]){__VA_ARGS__}, .n_out = N_OF(sl_op_arg, __VA_ARGS__)
#define IATTRS(...)                                                                                \
    .iattrs = (const sl_op_attr[]){__VA_ARGS__}, .n_iattrs = N_OF(sl_op_attr, __VA_ARGS__)
#define FATTRS(...)                                                                                \
    .fattrs = (const sl_op_attr[]){__VA_ARGS__}, .n_fattrs = N_OF(sl_op_attr, __VA_ARGS__)
#define IATTRS_OF(list) .iattrs = list, .n_iattrs = sizeof list / sizeof list[0]
#define REQ(name, doc)                                                                             \
    {                                                                                              \
        name, doc, true, NULL                                                                      \
    }
#define OPT(name, doc, dflt)                                                                       \
    {                                                                                              \
        name, doc, false, dflt                                                                     \
    }
#define FNS(infer_name, cost_name)                                                                 \
    .infer = sl_ops_infer_##infer_name, .cost = sl_ops_cost_##cost_name
#define NN(name) FNS(name, name)
/* Computes in f32, bf16 or f16; halves accumulate in f32 and round once. */
#define HALF .dtypes = SL_DTS_FLOAT, .accum = SL_F32

static const sl_op_group_def groups[SL_OP_GROUP_COUNT] = {
    [SL_OP_GROUP_DENSE] = {"Element-wise and dense",
                           "Element-wise ops take inputs of one shape (any rank) and produce that "
                           "shape. On cpu, bf16 matmuls (and convolutions) run on oneDNN's bf16 "
                           "kernels where the processor has AVX512-BF16 or AMX; every other "
                           "half-precision op, f16 always, converts its inputs to f32, runs the "
                           "f32 kernel and rounds its outputs once."},
    [SL_OP_GROUP_CONV] =
        {"Convolution and pooling",
         "Tensors are NCHW. Pads are in ONNX order: `h_begin, w_begin, h_end, w_end`. An output "
         "extent is `floor((in + pad_begin + pad_end - dilation * (kernel - 1) - 1) / stride) + "
         "1` and must be at least 1."},
    [SL_OP_GROUP_NORM] = {"Normalisation", "`x` is `[N,C]` or `[N,C,H,W]`; statistics are per "
                                           "channel `C`, over every other dimension."},
    [SL_OP_GROUP_LOSS] = {"Losses and reductions", "A loss or a full reduction is a scalar "
                                                   "(shape `[]`)."},
    [SL_OP_GROUP_OPTIM] = {"Optimisers", "Optimisers update their parameter and state tensors "
                                         "in place and have no outputs."},
    [SL_OP_GROUP_AXES] =
        {"Broadcasting, layout and axes",
         "Ops on tensors of any rank (up to 6) for graphs imported from ONNX. Broadcasting is "
         "numpy's (ONNX multidirectional): shapes are aligned at the right, and each dim pair is "
         "equal or one of them is 1. Axes are non-negative (the importer resolves ONNX's "
         "negative ones). Of these, ew_unary, gather along axis 0 and batch_matmul have gradient "
         "rules."},
    [SL_OP_GROUP_TRAIN] =
        {"Transformer training",
         "Normalisation, activations' gradients, softmax along any axis, embeddings, masks and "
         "dropout, in the forms PyTorch's aten graphs use. Masks are i32 tensors (nonzero: "
         "true): they travel and are stored as every other i32 tensor, and a mask of 0s and 1s "
         "needs no conversion between ops. Axes are non-negative."},
    [SL_OP_GROUP_SHAPE] = {"Views", "A view gives a value a new shape over the same memory; "
                                    "salusd never launches it."},
};

/* The attributes of conv2d and both its gradients. */
static const sl_op_attr conv_attrs[] = {
    OPT("stride_h", "vertical stride", "1"),
    OPT("stride_w", "horizontal stride", "1"),
    OPT("pad_h_begin", "rows of zeros above", "0"),
    OPT("pad_w_begin", "columns of zeros on the left", "0"),
    OPT("pad_h_end", "rows of zeros below", "0"),
    OPT("pad_w_end", "columns of zeros on the right", "0"),
    OPT("dilation_h", "vertical dilation of the filter", "1"),
    OPT("dilation_w", "horizontal dilation of the filter", "1"),
    OPT("group", "groups; `C` and `K` must both be divisible by it", "1"),
};

/* The attributes of maxpool and maxpool_grad. */
#define POOL_ATTRS                                                                                 \
    REQ("kernel_h", "window height, >= 1"), REQ("kernel_w", "window width, >= 1"),                 \
        OPT("stride_h", "vertical stride", "1"), OPT("stride_w", "horizontal stride", "1"),        \
        OPT("pad_h_begin", "rows of padding above, < kernel_h", "0"),                              \
        OPT("pad_w_begin", "columns of padding on the left, < kernel_w", "0"),                     \
        OPT("pad_h_end", "rows of padding below, < kernel_h", "0"),                                \
        OPT("pad_w_end", "columns of padding on the right, < kernel_w", "0")
static const sl_op_attr maxpool_attrs[] = {POOL_ATTRS};
static const sl_op_attr avgpool_attrs[] = {
    POOL_ATTRS,
    OPT("count_include_pad", "1: padding counts in the divisor (as zeros); 0: only real elements",
        "0"),
};
#undef POOL_ATTRS

/* 0 ends the shape: the dims after it must be 0 too. */
#define RESHAPE_DIM(d, doc) OPT("dim" #d, doc, "the shape ends before dimension " #d)
static const sl_op_attr reshape_attrs[SL_MAX_DIMS] = {
    RESHAPE_DIM(0, "extent of dimension 0, >= 1, or -1: inferred from the element count"),
    RESHAPE_DIM(1, "extent of dimension 1 (>= 1 or -1, as every one; at most one -1)"),
    RESHAPE_DIM(2, "extent of dimension 2"),
    RESHAPE_DIM(3, "extent of dimension 3"),
    RESHAPE_DIM(4, "extent of dimension 4"),
    RESHAPE_DIM(5, "extent of dimension 5"),
};
#undef RESHAPE_DIM

#define LN_AXIS                                                                                    \
    REQ("axis", "the first normalised dim, in `[0, rank)`: dims `axis..rank-1` are normalised")

#define BN_EPSILON REQ("epsilon", "added to the variance; finite and > 0")

const sl_op_def sl_ops_table[SL_OP_COUNT] = {
    /* ---- element-wise and dense ---- */
    [SL_OP_FILL] = {"fill", HALF, .group = SL_OP_GROUP_DENSE, .inplace = 0x1, FNS(like_in0, fill),
                    .doc = "Every element of the output is `value`.",
                    INS({"like", "any shape; gives the output's shape only (not read)"}),
                    OUTS({"y", "`like`'s shape"}),
                    FATTRS(REQ("value", "the value; any float, infinities and NaN included"))},
    [SL_OP_COPY] = {"copy", HALF, .group = SL_OP_GROUP_DENSE, FNS(like_in0, copy),
                    .doc = "`y = x`.", INS({"x", "any shape"}), OUTS({"y", "`x`'s shape"})},
    [SL_OP_ADD] = {"add", HALF, .group = SL_OP_GROUP_DENSE, .inplace = 0x3, FNS(same2, binary),
                   .doc = "`y = a + b`.", INS({"a", "any shape"}, {"b", "`a`'s shape"}),
                   OUTS({"y", "`a`'s shape"})},
    [SL_OP_MUL] = {"mul", HALF, .group = SL_OP_GROUP_DENSE, .inplace = 0x3, FNS(same2, binary),
                   .doc = "`y = a * b`, element by element.",
                   INS({"a", "any shape"}, {"b", "`a`'s shape"}), OUTS({"y", "`a`'s shape"})},
    [SL_OP_SCALE] = {"scale", HALF, .group = SL_OP_GROUP_DENSE, .inplace = 0x1, FNS(scale, unary),
                     .doc = "`y = alpha * x`.", INS({"x", "any shape"}), OUTS({"y", "`x`'s shape"}),
                     FATTRS(REQ("alpha", "the factor; finite"))},
    [SL_OP_AXPY] = {"axpy", HALF, .group = SL_OP_GROUP_DENSE, .inplace = 0x3, FNS(axpy, axpy),
                    .doc = "`out = alpha * x + y`.", INS({"x", "any shape"}, {"y", "`x`'s shape"}),
                    OUTS({"out", "`x`'s shape"}), FATTRS(REQ("alpha", "the factor; finite"))},
    [SL_OP_ADD_SCALAR] = {"add_scalar", HALF, .group = SL_OP_GROUP_DENSE, .mutates = 0x1,
                          FNS(add_scalar, add_scalar),
                          .doc = "`x += value` in place, e.g. to count an optimiser's steps. No "
                                 "outputs.",
                          INS({"x", "any shape"}), FATTRS(REQ("value", "the addend; finite"))},
    [SL_OP_MATMUL] = {"matmul", HALF, .group = SL_OP_GROUP_DENSE, FNS(matmul, matmul),
                      .doc = "`y = op(a) @ op(b)`, where `op` transposes when the attribute "
                             "says so.",
                      INS({"a", "`[M,K]`, or `[K,M]` when `transA`"},
                          {"b", "`[K,N]`, or `[N,K]` when `transB`"}),
                      OUTS({"y", "`[M,N]`"}),
                      IATTRS(OPT("transA", "1: use `a` transposed; 0 or 1", "0"),
                             OPT("transB", "1: use `b` transposed; 0 or 1", "0"))},
    [SL_OP_MATMUL_ACC] =
        {"matmul_acc", HALF, .group = SL_OP_GROUP_DENSE, .mutates = 0x4,
         FNS(matmul_acc, matmul_acc),
         .doc = "`acc = beta * acc + alpha * op(a) @ op(b)` in place; no outputs. With `beta = "
                "0`, `acc` is not read (NaN or infinity there do not propagate). `acc` sharing "
                "memory with `a` or `b` gives unspecified values (never an out-of-bounds "
                "access). A fused optimiser's gradient: `matmul_acc(x, dy, velocity; 1, "
                "momentum)` then `sgd_update(W, velocity; lr)` is `momentum_update` without a "
                "`dW` tensor.",
         INS({"a", "as matmul's `a`"}, {"b", "as matmul's `b`"},
             {"acc", "`[M,N]`, the product's shape"}),
         IATTRS(OPT("transA", "1: use `a` transposed; 0 or 1", "0"),
                OPT("transB", "1: use `b` transposed; 0 or 1", "0")),
         FATTRS(REQ("alpha", "factor of the product; finite"),
                REQ("beta", "factor of the old `acc`; finite"))},
    [SL_OP_BIAS_ADD] = {"bias_add", HALF, .group = SL_OP_GROUP_DENSE, .inplace = 0x1,
                        FNS(bias_add, bias_add), .doc = "`y[m,n] = x[m,n] + b[n]`.",
                        INS({"x", "`[M,N]`"}, {"b", "`[N]`"}), OUTS({"y", "`[M,N]`"})},
    [SL_OP_BIAS_GRAD] = {"bias_grad", HALF, .group = SL_OP_GROUP_DENSE, FNS(bias_grad, bias_grad),
                         .doc = "The gradient of bias_add's bias: `db[n] = sum over m of "
                                "dy[m,n]`.",
                         INS({"dy", "`[M,N]`"}), OUTS({"db", "`[N]`"})},
    [SL_OP_RELU] = {"relu", HALF, .group = SL_OP_GROUP_DENSE, .inplace = 0x1, FNS(like_in0, unary),
                    .doc = "`y = max(x, 0)`.", INS({"x", "any shape"}), OUTS({"y", "`x`'s shape"})},
    [SL_OP_RELU_GRAD] = {"relu_grad", HALF, .group = SL_OP_GROUP_DENSE, .inplace = 0x3,
                         FNS(same2, binary), .doc = "`dx = dy * (x > 0)`.",
                         INS({"dy", "any shape"}, {"x", "relu's input, `dy`'s shape"}),
                         OUTS({"dx", "`dy`'s shape"})},
    [SL_OP_RELU_MASK] = {"relu_mask", HALF, .group = SL_OP_GROUP_DENSE, .inplace = 0x1,
                         FNS(relu_mask, relu_bits),
                         .doc = "relu, and the bits its gradient needs: one bit per element "
                                "instead of keeping `x` or `y` for the backward pass.",
                         INS({"x", "any shape, n elements"}),
                         OUTS({"y", "`max(x, 0)`, `x`'s shape"},
                              {"bits", "i32 `[ceil(n/32)]`: bit `i % 32` of word `i / 32` is set "
                                       "iff `x[i] > 0`"})},
    [SL_OP_RELU_GRAD_MASK] = {"relu_grad_mask", HALF, .group = SL_OP_GROUP_DENSE, .inplace = 0x1,
                              FNS(relu_grad_mask, relu_bits),
                              .doc = "`dx = dy` where relu_mask's bit is set, else 0.",
                              INS({"dy", "any shape, n elements"},
                                  {"bits", "relu_mask's `bits` for n elements"}),
                              OUTS({"dx", "`dy`'s shape"})},
    [SL_OP_SIGMOID] = {"sigmoid", HALF, .group = SL_OP_GROUP_DENSE, .inplace = 0x1,
                       FNS(like_in0, transcendental), .doc = "`y = 1 / (1 + exp(-x))`.",
                       INS({"x", "any shape"}), OUTS({"y", "`x`'s shape"})},
    [SL_OP_SIGMOID_GRAD] = {"sigmoid_grad", HALF, .group = SL_OP_GROUP_DENSE, .inplace = 0x3,
                            FNS(same2, act_grad), .doc = "`dx = dy * y * (1 - y)`.",
                            INS({"dy", "any shape"}, {"y", "sigmoid's output, `dy`'s shape"}),
                            OUTS({"dx", "`dy`'s shape"})},
    [SL_OP_TANH] = {"tanh", HALF, .group = SL_OP_GROUP_DENSE, .inplace = 0x1,
                    FNS(like_in0, transcendental), .doc = "`y = tanh(x)`.", INS({"x", "any shape"}),
                    OUTS({"y", "`x`'s shape"})},
    [SL_OP_TANH_GRAD] = {"tanh_grad", HALF, .group = SL_OP_GROUP_DENSE, .inplace = 0x3,
                         FNS(same2, act_grad), .doc = "`dx = dy * (1 - y^2)`.",
                         INS({"dy", "any shape"}, {"y", "tanh's output, `dy`'s shape"}),
                         OUTS({"dx", "`dy`'s shape"})},

    /* ---- convolution and pooling ---- */
    [SL_OP_CONV2D] = {"conv2d", HALF, .group = SL_OP_GROUP_CONV, NN(conv2d),
                      .doc = "2-D convolution (cross-correlation, as ONNX Conv), no bias.",
                      INS({"x", "`[N,C,H,W]`"}, {"w", "`[K,C/group,R,S]`"}),
                      OUTS({"y", "`[N,K,OH,OW]`"}), IATTRS_OF(conv_attrs)},
    [SL_OP_CONV2D_GRAD_INPUT] = {"conv2d_grad_input", HALF, .group = SL_OP_GROUP_CONV,
                                 NN(conv2d_grad_input),
                                 .doc = "conv2d's gradient with respect to its input.",
                                 INS({"dy", "conv2d's output shape for `x` and `w`"},
                                     {"w", "the filter"}, {"x", "gives the shape only (not read)"}),
                                 OUTS({"dx", "`x`'s shape"}), IATTRS_OF(conv_attrs)},
    [SL_OP_CONV2D_GRAD_FILTER] = {"conv2d_grad_filter", HALF, .group = SL_OP_GROUP_CONV,
                                  NN(conv2d_grad_filter),
                                  .doc = "conv2d's gradient with respect to its filter.",
                                  INS({"dy", "conv2d's output shape for `x` and `w`"},
                                      {"x", "the input"}, {"w", "gives the shape only (not read)"}),
                                  OUTS({"dw", "`w`'s shape"}), IATTRS_OF(conv_attrs)},
    [SL_OP_CHANNEL_BIAS_ADD] = {"channel_bias_add", HALF, .group = SL_OP_GROUP_CONV, .inplace = 0x1,
                                NN(channel_bias_add), .doc = "`y[n,c,h,w] = x[n,c,h,w] + b[c]`.",
                                INS({"x", "`[N,C,H,W]`"}, {"b", "`[C]`"}),
                                OUTS({"y", "`[N,C,H,W]`"})},
    [SL_OP_CHANNEL_BIAS_GRAD] = {"channel_bias_grad", HALF, .group = SL_OP_GROUP_CONV,
                                 NN(channel_bias_grad),
                                 .doc = "`db[c] = sum over n, h, w of dy[n,c,h,w]`.",
                                 INS({"dy", "`[N,C,H,W]`"}), OUTS({"db", "`[C]`"})},
    [SL_OP_MAXPOOL] = {"maxpool", HALF, .group = SL_OP_GROUP_CONV, NN(maxpool),
                       .doc = "Maximum over each window. Padding never wins: each pad is "
                              "smaller than the kernel, so every window holds a real element.",
                       INS({"x", "`[N,C,H,W]`"}), OUTS({"y", "`[N,C,OH,OW]`"}),
                       IATTRS_OF(maxpool_attrs)},
    [SL_OP_MAXPOOL_GRAD] = {"maxpool_grad", HALF, .group = SL_OP_GROUP_CONV, NN(maxpool_grad),
                            .doc = "maxpool's gradient: each window's `dy` goes to the position "
                                   "of its maximum (the first one on ties).",
                            INS({"dy", "maxpool's output shape"}, {"x", "maxpool's input"},
                                {"y", "maxpool's output"}),
                            OUTS({"dx", "`x`'s shape"}), IATTRS_OF(maxpool_attrs)},
    [SL_OP_AVGPOOL] = {"avgpool", HALF, .group = SL_OP_GROUP_CONV, NN(avgpool),
                       .doc = "Mean over each window.", INS({"x", "`[N,C,H,W]`"}),
                       OUTS({"y", "`[N,C,OH,OW]`"}), IATTRS_OF(avgpool_attrs)},
    [SL_OP_AVGPOOL_GRAD] = {"avgpool_grad", HALF, .group = SL_OP_GROUP_CONV, NN(avgpool_grad),
                            .doc = "avgpool's gradient.",
                            INS({"dy", "avgpool's output shape"},
                                {"x", "avgpool's input; gives the shape only (not read)"}),
                            OUTS({"dx", "`x`'s shape"}), IATTRS_OF(avgpool_attrs)},

    /* ---- normalisation ---- */
    [SL_OP_BATCHNORM] = {"batchnorm", .group = SL_OP_GROUP_NORM, .mutates = 0x18, NN(batchnorm),
                         .doc = "Batch normalisation, training: normalises with the batch's "
                                "statistics and updates the running ones (ONNX: `running = "
                                "running * momentum + batch * (1 - momentum)`; the running "
                                "variance takes the unbiased batch variance, so `N*H*W >= 2`).",
                         INS({"x", "`[N,C]` or `[N,C,H,W]`"}, {"scale", "`[C]`"}, {"bias", "`[C]`"},
                             {"running_mean", "`[C]`"}, {"running_var", "`[C]`"}),
                         OUTS({"y", "`x`'s shape"}, {"saved_mean", "`[C]`, the batch mean"},
                              {"saved_invstd", "`[C]`, the batch's `1 / sqrt(var + epsilon)`"}),
                         FATTRS(BN_EPSILON, REQ("momentum", "weight of the old running "
                                                            "statistics; in [0, 1]"))},
    [SL_OP_BATCHNORM_INFER] = {"batchnorm_infer", .group = SL_OP_GROUP_NORM, NN(batchnorm_infer),
                               .doc = "Batch normalisation, inference: `y = scale * (x - mean) / "
                                      "sqrt(var + epsilon) + bias`.",
                               INS({"x", "`[N,C]` or `[N,C,H,W]`"}, {"scale", "`[C]`"},
                                   {"bias", "`[C]`"}, {"mean", "`[C]`"}, {"var", "`[C]`"}),
                               OUTS({"y", "`x`'s shape"}), FATTRS(BN_EPSILON)},
    [SL_OP_BATCHNORM_GRAD] = {"batchnorm_grad", .group = SL_OP_GROUP_NORM, NN(batchnorm_grad),
                              .doc = "batchnorm's gradients (training mode).",
                              INS({"dy", "`x`'s shape"}, {"x", "batchnorm's input"},
                                  {"scale", "`[C]`"}, {"saved_mean", "batchnorm's `saved_mean`"},
                                  {"saved_invstd", "batchnorm's `saved_invstd`"}),
                              OUTS({"dx", "`x`'s shape"}, {"dscale", "`[C]`"}, {"dbias", "`[C]`"})},

    /* ---- losses and reductions ---- */
    [SL_OP_MSE_LOSS] = {"mse_loss", .group = SL_OP_GROUP_LOSS, FNS(mse_loss, mse_loss),
                        .doc = "`loss = mean((pred - target)^2)`.",
                        INS({"pred", "any shape"}, {"target", "`pred`'s shape"}),
                        OUTS({"loss", "`[]`"})},
    [SL_OP_MSE_GRAD] = {"mse_grad", .group = SL_OP_GROUP_LOSS, .inplace = 0x3, FNS(same2, mse_grad),
                        .doc = "mse_loss's gradient: `dpred = 2 * (pred - target) / n`, n "
                               "the elements of `pred`.",
                        INS({"pred", "any shape"}, {"target", "`pred`'s shape"}),
                        OUTS({"dpred", "`pred`'s shape"})},
    [SL_OP_SOFTMAX] = {"softmax", .group = SL_OP_GROUP_LOSS, FNS(softmax, softmax),
                       .doc = "Softmax of each row.", INS({"x", "`[N,C]`"}),
                       OUTS({"y", "`[N,C]`"})},
    [SL_OP_SOFTMAX_XENT] = {"softmax_xent", .group = SL_OP_GROUP_LOSS,
                            FNS(softmax_xent, softmax_xent),
                            .doc = "Softmax cross-entropy, averaged over the rows. A label "
                                   "outside `[0, C)` fails the run (`INVALID_ARGUMENT`); it is "
                                   "never used as an index.",
                            INS({"logits", "`[N,C]`"}, {"labels", "i32 `[N]`, one class per row"}),
                            OUTS({"loss", "`[]`"}, {"probs", "`[N,C]`, the softmax"})},
    [SL_OP_SOFTMAX_XENT_GRAD] = {"softmax_xent_grad", .group = SL_OP_GROUP_LOSS,
                                 FNS(softmax_xent_grad, softmax_xent_grad),
                                 .doc = "softmax_xent's gradient: `dlogits = (probs - "
                                        "onehot(labels)) / N`.",
                                 INS({"probs", "softmax_xent's `probs`, `[N,C]`"},
                                     {"labels", "i32 `[N]`"}),
                                 OUTS({"dlogits", "`[N,C]`"})},
    [SL_OP_REDUCE_SUM] = {"reduce_sum", .group = SL_OP_GROUP_LOSS, FNS(reduce, reduce_sum),
                          .doc = "The sum of all elements.", INS({"x", "any shape"}),
                          OUTS({"sum", "`[]`"})},
    [SL_OP_REDUCE_MEAN] = {"reduce_mean", .group = SL_OP_GROUP_LOSS, FNS(reduce, reduce_mean),
                           .doc = "The mean of all elements.", INS({"x", "any shape"}),
                           OUTS({"mean", "`[]`"})},
    [SL_OP_ARGMAX] = {"argmax", HALF, .group = SL_OP_GROUP_LOSS, FNS(argmax, argmax),
                      .doc = "The index of each row's maximum (the first one on ties).",
                      INS({"x", "`[N,C]`"}), OUTS({"index", "i32 `[N]`"})},

    /* ---- optimisers ---- */
    [SL_OP_SGD_UPDATE] = {"sgd_update", .group = SL_OP_GROUP_OPTIM, .mutates = 0x1, FNS(sgd, sgd),
                          .doc = "`param -= lr * grad`.",
                          INS({"param", "any shape"}, {"grad", "`param`'s shape"}),
                          FATTRS(REQ("lr", "learning rate; finite"))},
    [SL_OP_MOMENTUM_UPDATE] =
        {"momentum_update", .group = SL_OP_GROUP_OPTIM, .mutates = 0x5, FNS(momentum, momentum),
         .doc = "SGD with momentum, as PyTorch's: `v = momentum * v + grad "
                "+ weight_decay * param; param -= lr * v`.",
         INS({"param", "any shape"}, {"grad", "`param`'s shape"}, {"velocity", "`param`'s shape"}),
         FATTRS(REQ("lr", "learning rate; finite"), REQ("momentum", "finite, >= 0"),
                OPT("weight_decay", "finite, >= 0", "0"))},
    [SL_OP_ADAM_UPDATE] = {"adam_update", .group = SL_OP_GROUP_OPTIM, .mutates = 0xd,
                           FNS(adam, adam),
                           .doc = "Adam: `m = beta1 * m + (1 - beta1) * grad; v = beta2 * v + (1 "
                                  "- beta2) * grad^2; param -= lr * (m / (1 - beta1^t)) / "
                                  "(sqrt(v / (1 - beta2^t)) + epsilon)`. With `weight_decay`, "
                                  "AdamW: `param *= 1 - lr * weight_decay` first.",
                           INS({"param", "any shape"}, {"grad", "`param`'s shape"},
                               {"m", "`param`'s shape"}, {"v", "`param`'s shape"},
                               {"t", "`[1]` (or `[]`): the step count, 1 at the first step (count "
                                     "it with add_scalar before the updates); read only"}),
                           FATTRS(REQ("lr", "learning rate; finite"), REQ("beta1", "in [0, 1)"),
                                  REQ("beta2", "in [0, 1)"), REQ("epsilon", "finite, >= 0"),
                                  OPT("weight_decay", "decoupled (AdamW); finite, >= 0", "0"))},

    /* ---- views ---- */
    [SL_OP_RESHAPE] = {"reshape", HALF, .group = SL_OP_GROUP_SHAPE, FNS(reshape, reshape),
                       .doc = "`y` is `x` with the dimensions given by the leading nonzero "
                              "attributes (none: a scalar), one of which may be -1 (inferred); "
                              "the element count is unchanged. Any dtype. A view: `y` aliases "
                              "`x`'s memory.",
                       INS({"x", "any shape"}), OUTS({"y", "the new shape, `x`'s dtype"}),
                       IATTRS_OF(reshape_attrs)},

    /* ---- appended: element-wise ---- */
    [SL_OP_MUL_SCALAR] = {"mul_scalar", HALF, .group = SL_OP_GROUP_DENSE, .inplace = 0x1,
                          FNS(mul_scalar, unary),
                          .doc = "`y = x * s[0]`: a factor read at run time, e.g. a learning "
                                 "rate kept in a persistent tensor and set before each step.",
                          INS({"x", "any shape"}, {"s", "one element (`[1]` or `[]`)"}),
                          OUTS({"y", "`x`'s shape"})},
    /* ---- broadcasting, layout and axes (ops_axes.c; kinds in ops_axes.h) ---- */
    [SL_OP_EW_BINARY] =
        {"ew_binary", HALF, .group = SL_OP_GROUP_AXES, .inplace = 0x3, NN(ew_binary),
         .doc = "`y = a op b` element-wise with broadcasting; `op` by kind: 0 add, 1 sub, 2 mul, "
                "3 div, 4 pow (`powf`), 5 max, 6 min (NaN propagates through max and min), 7 "
                "prelu (`a >= 0 ? a : a * b`).",
         INS({"a", "any shape"}, {"b", "a shape that broadcasts with `a`'s"}),
         OUTS({"y", "the broadcast shape"}), IATTRS(REQ("kind", "the operation, 0 to 7"))},
    [SL_OP_EW_UNARY] =
        {"ew_unary", HALF, .group = SL_OP_GROUP_AXES, .inplace = 0x1, NN(ew_unary),
         .doc =
             "`y = f(x)` element-wise; `f` by kind: 0 sqrt, 1 erf, 2 exp, 3 log, 4 neg, 5 abs, "
             "6 reciprocal, 7 clip `min(max(x, alpha), beta)`, 8 leaky relu (`x >= 0 ? x : "
             "alpha * x`), 9 floor, 10 ceil, 11 hard sigmoid `max(0, min(1, alpha * x + "
             "beta))`, 12 elu (`x >= 0 ? x : alpha * (exp(x) - 1)`), 13 selu (`beta * (x > 0 "
             "? x : alpha * (exp(x) - 1))`), 14 softplus `log(1 + exp(x))`, 15 softsign `x / "
             "(1 + |x|)`, 16 sin, 17 cos, 18 sign, "
             "19 tan, 20 sinh, 21 cosh, 22 asin, 23 acos, 24 atan, 25 asinh, 26 acosh, 27 atanh, "
             "28 round half to even, 29 thresholded relu `x > alpha ? x : 0`, 30 hard swish `x * "
             "max(0, min(1, x / 6 + 0.5))`, 31 celu `max(0, x) + min(0, alpha * (exp(x / alpha) - "
             "1))`, 32 shrink `x < -alpha ? x + beta : x > alpha ? x - beta : 0`, 33 gelu `x * (1 "
             "+ erf(x / sqrt(2))) / 2`, 34 gelu with the tanh approximation `x * (1 + tanh(sqrt(2 "
             "/ pi) * (x + 0.044715 x^3))) / 2`, 35 silu `x / (1 + exp(-x))`.",
         INS({"x", "any shape"}), OUTS({"y", "`x`'s shape"}),
         IATTRS(REQ("kind", "the function, 0 to 35")),
         FATTRS(OPT("alpha", "first parameter (clip: the minimum, may be -inf); not NaN", "0"),
                OPT("beta",
                    "second parameter (clip: the maximum, at least alpha, may be inf); "
                    "not NaN",
                    "0"))},
    [SL_OP_TRANSPOSE] =
        {"transpose", HALF, .group = SL_OP_GROUP_AXES, FNS(transpose, layout),
         .doc = "`y` is `x` with its axes permuted: `y.dims[d] = x.dims[perm[d]]`. Any dtype.",
         INS({"x", "any shape, rank r"}), OUTS({"y", "the permuted shape, `x`'s dtype"}),
         IATTRS(OPT("perm0", "`perm[0]`; `perm[0..r)` is a permutation of `0..r-1`", "0"),
                OPT("perm1", "`perm[1]`", "0"), OPT("perm2", "`perm[2]`", "0"),
                OPT("perm3", "`perm[3]`", "0"), OPT("perm4", "`perm[4]`", "0"),
                OPT("perm5", "`perm[5]`", "0"))},
    [SL_OP_SLICE] =
        {"slice", HALF, .group = SL_OP_GROUP_AXES, FNS(slice, layout),
         .doc = "Elements `start, start + step, ...` up to (excluding) `end` along one axis. "
                "Any dtype. Bounds are not clamped: a positive step needs `0 <= start < end <= "
                "dim`, a negative one `-1 <= end < start < dim`.",
         INS({"x", "any shape"}), OUTS({"y", "`x`'s shape with the axis shortened"}),
         IATTRS(REQ("axis", "in `[0, rank)`"), REQ("start", "first index"),
                REQ("end", "one past the last index (in step's direction)"),
                OPT("step", "nonzero", "1"))},
    [SL_OP_CONCAT] = {"concat", HALF, .group = SL_OP_GROUP_AXES, FNS(concat, layout),
                      .doc = "`a` and `b` joined along one axis. Any dtype (the same for both).",
                      INS({"a", "any shape"},
                          {"b", "`a`'s dtype, rank and dims except along the axis"}),
                      OUTS({"y", "the joined shape"}), IATTRS(REQ("axis", "in `[0, rank)`"))},
    [SL_OP_GATHER] =
        {"gather", HALF, .group = SL_OP_GROUP_AXES, NN(gather),
         .doc = "ONNX Gather: `y[i..., j..., k...] = x[i..., indices[j...], k...]` along one "
                "axis. Any dtype. A negative index counts from the end; an index outside `[-dim, "
                "dim)` fails the run (`INVALID_ARGUMENT`) and is never used as an address.",
         INS({"x", "any shape"}, {"indices", "i32, any shape"}),
         OUTS({"y", "`x.dims[:axis] + indices.dims + x.dims[axis+1:]` (rank at most 6)"}),
         IATTRS(REQ("axis", "in `[0, rank)`"))},
    [SL_OP_REDUCE_AXES] =
        {"reduce_axes", .group = SL_OP_GROUP_AXES, NN(reduce_axes),
         .doc = "A reduction over the axes of a bit mask, keeping them as dims of 1; by kind: 0 "
                "sum, 1 mean, 2 max, 3 min. Sums accumulate in double on cpu.",
         INS({"x", "any shape"}), OUTS({"y", "`x`'s shape with the reduced dims 1"}),
         IATTRS(REQ("kind", "0 to 3"), REQ("axes", "bit d set: reduce axis d; nonzero"))},
    [SL_OP_LOG_SOFTMAX] = {"log_softmax", .group = SL_OP_GROUP_AXES, FNS(softmax, softmax),
                           .doc = "The logarithm of the softmax of each row.",
                           INS({"x", "`[N,C]`"}), OUTS({"y", "`[N,C]`"})},
    [SL_OP_BATCH_MATMUL] = {"batch_matmul", HALF, .group = SL_OP_GROUP_AXES, NN(batch_matmul),
                            .doc =
                                "`y[b] = a[b] b[b]` for each batch `b`; a batch of 1 broadcasts.",
                            INS({"a", "`[B,M,K]` (B may be 1)"}, {"b", "`[B,K,N]` (B may be 1)"}),
                            OUTS({"y", "`[B,M,N]`"})},

    /* ---- appended: precision ---- */
    [SL_OP_CAST] = {"cast", .group = SL_OP_GROUP_DENSE, FNS(cast, cast), .converts = true, HALF,
                    .doc = "`y = x` converted to another float dtype: narrowing rounds to "
                           "nearest, ties to even; a value beyond the target's range becomes "
                           "infinity, NaN stays NaN.",
                    INS({"x", "any shape; f32, bf16 or f16"}),
                    OUTS({"y", "`x`'s shape in dtype `to`"}),
                    IATTRS(REQ("to", "the dtype: 0 f32, 2 bf16, 3 f16"))},

    /* ---- appended: loss scaling (ops_amp.c) ---- */
    [SL_OP_AMP_UNSCALE] =
        {"amp_unscale", .group = SL_OP_GROUP_OPTIM, .mutates = 0x5, NN(amp_unscale),
         .doc = "Loss scaling's check of one gradient, as PyTorch's GradScaler: `grad *= 1 / "
                "scale` in place, and `found = 1` when an element of `grad` is infinite or NaN "
                "(else `found` is left as it is). No outputs.",
         INS({"grad", "any shape"}, {"scale", "`[1]`: the loss scale, finite and nonzero"},
             {"found", "`[1]`: 0 or 1, or-ed over the gradients of one step"})},
    [SL_OP_AMP_COMMIT] = {"amp_commit", .group = SL_OP_GROUP_OPTIM, .mutates = 0x1, NN(amp_commit),
                          .doc = "`dst = src` unless `found` is nonzero: a step whose gradients "
                                 "overflowed leaves a parameter or optimiser state as it was. No "
                                 "outputs.",
                          INS({"dst", "any shape"}, {"src", "`dst`'s shape"},
                              {"found", "`[1]`, from `amp_unscale`"})},
    [SL_OP_AMP_SCALE_UPDATE] =
        {"amp_scale_update", .group = SL_OP_GROUP_OPTIM, .mutates = 0x7, NN(amp_scale_update),
         .doc = "The loss scale after one step, as PyTorch's GradScaler.update: when `found` is "
                "nonzero `scale *= backoff`, `growth = 0` and `skipped += 1`; else `growth += 1` "
                "and when it reaches `interval`, `scale *= growth_factor` and `growth = 0`. No "
                "outputs.",
         INS({"scale", "`[1]`"}, {"growth", "`[1]`: clean steps since the scale last changed"},
             {"skipped", "`[1]`: steps skipped so far"}, {"found", "`[1]`, from `amp_unscale`"}),
         FATTRS(REQ("growth_factor", "finite, > 1 (PyTorch: 2)"),
                REQ("backoff", "finite, in (0, 1) (PyTorch: 0.5)"),
                REQ("interval", "clean steps before the scale grows, >= 1 (PyTorch: 2000)"))},

    /* ---- appended: transformer training (ops_train.c; where and masked_fill in ops_axes.c) ----
     */
    [SL_OP_LAYER_NORM] =
        {"layer_norm", .group = SL_OP_GROUP_TRAIN, NN(layer_norm),
         .doc = "Layer normalisation over the trailing dims from `axis` on, as PyTorch's "
                "native_layer_norm: per row `mean` and `rstd = 1 / sqrt(var + epsilon)` (biased "
                "variance), `y = (x - mean) * rstd * weight + bias`. Statistics accumulate in "
                "double on cpu.",
         INS({"x", "any shape, rank >= 1"}, {"weight", "`x.dims[axis:]`"},
             {"bias", "`x.dims[axis:]`"}),
         OUTS({"y", "`x`'s shape"}, {"mean", "`x`'s shape with dims `axis..` 1"},
              {"rstd", "`mean`'s shape"}),
         IATTRS(LN_AXIS), FATTRS(REQ("epsilon", "added to the variance; finite and > 0"))},
    [SL_OP_LAYER_NORM_GRAD] =
        {"layer_norm_grad", .group = SL_OP_GROUP_TRAIN, NN(layer_norm_grad),
         .doc = "layer_norm's gradients, as PyTorch's native_layer_norm_backward: with `xhat = (x "
                "- mean) * rstd` and `g = dy * weight`, `dx = rstd * (g - mean(g) - xhat * "
                "mean(g * xhat))` (means over a row), `dweight = sum(dy * xhat)` and `dbias = "
                "sum(dy)` over the rows.",
         INS({"dy", "`x`'s shape"}, {"x", "layer_norm's input"}, {"weight", "`x.dims[axis:]`"},
             {"mean", "layer_norm's `mean`"}, {"rstd", "layer_norm's `rstd`"}),
         OUTS({"dx", "`x`'s shape"}, {"dweight", "`weight`'s shape"},
              {"dbias", "`weight`'s shape"}),
         IATTRS(LN_AXIS)},
    [SL_OP_EW_UNARY_GRAD] =
        {"ew_unary_grad", HALF, .group = SL_OP_GROUP_TRAIN, .inplace = 0x3, NN(ew_unary_grad),
         .doc = "ew_unary's gradient: `dx = dy * f'(x)` for the same kind and parameters. At a "
                "kink the derivative is PyTorch's (relu-like kinds take the left side at 0, clip "
                "is 1 on its closed range); floor, ceil, sign and round have 0.",
         INS({"dy", "any shape"}, {"x", "ew_unary's input, `dy`'s shape"}),
         OUTS({"dx", "`dy`'s shape"}), IATTRS(REQ("kind", "ew_unary's kind, 0 to 35")),
         FATTRS(OPT("alpha", "ew_unary's alpha", "0"), OPT("beta", "ew_unary's beta", "0"))},
    [SL_OP_SOFTMAX_AXIS] =
        {"softmax_axis", .group = SL_OP_GROUP_TRAIN, NN(softmax_axis),
         .doc = "Softmax (or log-softmax) along one axis: `y = exp(x - max) / sum(exp(x - max))`, "
                "or `x - max - log(sum(exp(x - max)))`, sums along the axis. PyTorch's _softmax "
                "and _log_softmax.",
         INS({"x", "any shape, rank >= 1"}), OUTS({"y", "`x`'s shape"}),
         IATTRS(REQ("axis", "in `[0, rank)`"), OPT("log", "1: log-softmax; 0 or 1", "0"))},
    [SL_OP_SOFTMAX_AXIS_GRAD] =
        {"softmax_axis_grad", .group = SL_OP_GROUP_TRAIN, NN(softmax_axis_grad),
         .doc = "softmax_axis's gradient from its output, as PyTorch's _softmax_backward_data "
                "and _log_softmax_backward_data: `dx = y * (dy - sum(dy * y))`, or with `log`, "
                "`dx = dy - exp(y) * sum(dy)`, sums along the axis.",
         INS({"dy", "`y`'s shape"}, {"y", "softmax_axis's output"}), OUTS({"dx", "`y`'s shape"}),
         IATTRS(REQ("axis", "softmax_axis's axis"), OPT("log", "softmax_axis's log", "0"))},
    [SL_OP_EMBEDDING_GRAD] =
        {"embedding_grad", HALF, .group = SL_OP_GROUP_TRAIN, NN(embedding_grad),
         .doc = "The gradient of an embedding lookup (gather along axis 0 of a table `[V, "
                "D...]`), as PyTorch's embedding_dense_backward: `dw` is 0, then `dw[ids[j]] += "
                "dy[j]` for every id. A negative id counts from the end (as gather's); an id "
                "outside `[-V, V)` fails the run (`INVALID_ARGUMENT`) and is never used as an "
                "address. The order of the sums is unspecified on cuda.",
         INS({"dy", "`ids.dims + D...`"}, {"ids", "i32, any shape"}),
         OUTS({"dw", "`[num_weights, D...]` (rank at most 6)"}),
         IATTRS(REQ("num_weights", "V, the table's rows, >= 1"),
                REQ("padding_idx", "rows with this id get no gradient; outside `[0, V)` (-1): "
                                   "none"))},
    [SL_OP_WHERE] = {"where", HALF, .group = SL_OP_GROUP_TRAIN, NN(where),
                     .doc = "`y = cond ? a : b` element-wise with broadcasting of all three.",
                     INS({"cond", "i32 mask"}, {"a", "any shape"}, {"b", "`a`'s dtype"}),
                     OUTS({"y", "the broadcast shape of `cond`, `a` and `b`"})},
    [SL_OP_MASKED_FILL] =
        {"masked_fill", HALF, .group = SL_OP_GROUP_TRAIN, .inplace = 0x1, NN(masked_fill),
         .doc = "`y = mask ? value : x`, `mask` broadcast to `x`'s shape (an attention mask).",
         INS({"x", "any shape"}, {"mask", "i32, a shape that broadcasts to `x`'s"}),
         OUTS({"y", "`x`'s shape"}),
         FATTRS(REQ("value", "the fill; any float but NaN (-inf for attention masks)"))},
    [SL_OP_DROPOUT] =
        {"dropout", HALF, .group = SL_OP_GROUP_TRAIN, NN(dropout),
         .doc = "Dropout with a counter-based generator (Philox4x32-10) keyed by the `seed` "
                "tensor: element i is kept when word `i % 4` of Philox((i / 4, 0, offset, 0), "
                "seed) is at least `p * 2^32`; `mask` is 1 where kept, `y = mask ? x / (1 - p) : "
                "0`. Every backend draws the same mask for one (seed, offset). The client "
                "changes `seed` between steps and gives each dropout of a graph its own "
                "`offset`.",
         INS({"x", "any shape"}, {"seed", "i32 `[2]`: the generator's key"}),
         OUTS({"y", "`x`'s shape"}, {"mask", "i32, `x`'s dims: 1 kept, 0 dropped"}),
         IATTRS(OPT("offset", "in `[0, 2^32)`: which stream of the seed", "0")),
         FATTRS(REQ("p", "the drop probability, in `[0, 1)`"))},
    [SL_OP_DROPOUT_GRAD] =
        {"dropout_grad", HALF, .group = SL_OP_GROUP_TRAIN, .inplace = 0x1, NN(dropout_grad),
         .doc = "dropout's gradient, as PyTorch's native_dropout_backward: `dx = mask ? dy * "
                "scale : 0`.",
         INS({"dy", "any shape"}, {"mask", "dropout's `mask`, `dy`'s dims"}),
         OUTS({"dx", "`dy`'s shape"}),
         FATTRS(REQ("scale", "finite; `1 / (1 - p)` for dropout's gradient"))},

    /* ---- appended: masks from comparisons (ops_axes.c) ---- */
    [SL_OP_COMPARE] =
        {"compare", HALF, .group = SL_OP_GROUP_AXES, NN(compare),
         .doc = "An i32 mask from two tensors, element-wise with broadcasting: `y = 1` where `a "
                "kind b` holds, else 0. Kinds 0 to 5 compare values (`==`, `!=`, `<`, `<=`, "
                "`>`, `>=`; NaN compares unequal to everything, so only `!=` holds for it); "
                "kinds 6 to 8 are logical and, or and xor of the operands' truth (nonzero: "
                "true), as ONNX's And, Or and Xor on bool tensors. i32 operands compare as "
                "integers, float ones in their dtype (exactly: halves widen to f32). ONNX's "
                "Equal, Less, Greater, their OrEqual forms and Not (`eq` with 0) map here.",
         INS({"a", "float or i32, any shape"}, {"b", "`a`'s dtype, a shape that broadcasts "
                                                     "with `a`'s"}),
         OUTS({"y", "i32, the broadcast shape of `a` and `b`: 0 or 1"}),
         IATTRS(REQ("kind", "0 eq, 1 ne, 2 lt, 3 le, 4 gt, 5 ge, 6 and, 7 or, 8 xor"))},

    /* ---- optimisers with a run-time rate ---- */
    [SL_OP_SGD_UPDATE_LR] =
        {"sgd_update_lr", .group = SL_OP_GROUP_OPTIM, .mutates = 0x1, FNS(sgd_lr, sgd),
         .doc = "`sgd_update` with the learning rate `lr * rate`, `rate` read when the op runs: "
                "a schedule writes it before each step (a Run's writes) and the update still "
                "makes one pass over the parameter.",
         INS({"param", "any shape"}, {"grad", "`param`'s shape"},
             {"rate", "f32, one element; read only"}),
         FATTRS(REQ("lr", "learning rate's scale; finite"))},
    [SL_OP_MOMENTUM_UPDATE_LR] =
        {"momentum_update_lr", .group = SL_OP_GROUP_OPTIM, .mutates = 0x5,
         FNS(momentum_lr, momentum),
         .doc = "`momentum_update` with the learning rate `lr * rate`, `rate` read when the op "
                "runs.",
         INS({"param", "any shape"}, {"grad", "`param`'s shape"}, {"velocity", "`param`'s shape"},
             {"rate", "f32, one element; read only"}),
         FATTRS(REQ("lr", "learning rate's scale; finite"), REQ("momentum", "finite, >= 0"),
                OPT("weight_decay", "finite, >= 0", "0"))},
    [SL_OP_ADAM_UPDATE_LR] =
        {"adam_update_lr", .group = SL_OP_GROUP_OPTIM, .mutates = 0xd, FNS(adam_lr, adam),
         .doc = "`adam_update` with the learning rate `lr * rate`, `rate` read when the op runs.",
         INS({"param", "any shape"}, {"grad", "`param`'s shape"}, {"m", "`param`'s shape"},
             {"v", "`param`'s shape"}, {"t", "`[1]` (or `[]`): the step count; read only"},
             {"rate", "f32, one element; read only"}),
         FATTRS(REQ("lr", "learning rate's scale; finite"), REQ("beta1", "in [0, 1)"),
                REQ("beta2", "in [0, 1)"), REQ("epsilon", "finite, >= 0"),
                OPT("weight_decay", "decoupled (AdamW); finite, >= 0", "0"))},
    /* ---- appended: writes at run-time positions (ops_axes.c) ---- */
    [SL_OP_INDEX_WRITE] =
        {"index_write", HALF, .group = SL_OP_GROUP_AXES, .mutates = 0x1, NN(index_write),
         .doc = "`dst[i..., index[j], k...] = src[i..., j, k...]` along one axis, in place: rows "
                "written at positions known only when the graph runs, such as a KV cache's "
                "newest keys and values, without copying the rest of `dst`. Any dtype, `src`'s "
                "being `dst`'s. A negative index counts from the end; an index outside `[-dim, "
                "dim)` fails the run (`INVALID_ARGUMENT`) and is never used as an address (cpu "
                "then writes nothing; cuda may have written the rows of the valid ones). Of two "
                "equal indices, either row may land. No outputs.",
         INS({"dst", "any shape"}, {"index", "i32 `[n]`"},
             {"src", "`dst`'s shape with `n` at `axis`"}),
         IATTRS(REQ("axis", "in `[0, rank)`"))},
};

const sl_op_def *sl_op_get(unsigned id)
{
    return id < SL_OP_COUNT ? &sl_ops_table[id] : NULL;
}

const sl_op_group_def *sl_op_group_get(unsigned g)
{
    return g < SL_OP_GROUP_COUNT ? &groups[g] : NULL;
}
