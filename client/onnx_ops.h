/* Private to the node mappers of the ONNX importer (onnx_ops.c: helpers,
 * element-wise nodes and the dispatch by op type; onnx_ops_nn.c: dense,
 * convolutional and normalisation nodes; onnx_ops_layout.c: reshaping,
 * moving and reducing nodes; onnx_ops_mask.c: bool masks). Every mapper returns SL_OK with the
 * node's outputs defined, or the error recorded in m (sl_onnx_fail). */
#ifndef SL_CLIENT_ONNX_OPS_H
#define SL_CLIENT_ONNX_OPS_H

#include "onnx_internal.h"

#include <stdbool.h>

/* Refuses the current node: SL_EUNSUPPORTED with a reason (needs m). */
#define UNSUP(...) sl_onnx_fail(m, SL_EUNSUPPORTED, __VA_ARGS__)

/* An empty list of known attributes (sl_onnx_known_attrs). */
extern const char *const sl_onnx_no_attrs[];

/* Input i of n: its entry, or NULL (absent or empty name). */
struct ent *sl_onnx_input(sl_onnx_imp *m, const Onnx__NodeProto *n, size_t i);
/* e's graph value as f32: an integer constant is uploaded as floats (a
 * copy; the entry keeps its type). e NULL: refused as a missing input. */
salus_value sl_onnx_fvalue(sl_onnx_imp *m, struct ent *e);
/* A scalar f32 constant uploaded for this graph. */
salus_value sl_onnx_scalar(sl_onnx_imp *m, double v);
/* The shape of a graph value (zeroed when v is SALUS_NO_VALUE). */
void sl_onnx_shape_of(sl_onnx_imp *m, salus_value v, sl_shape *s);
/* Names n's first `produced` outputs v[...] (empty names skipped); any
 * later output with a name is refused. Returns m's error, if any. */
int sl_onnx_set_out(sl_onnx_imp *m, const Onnx__NodeProto *n, size_t produced,
                    const salus_value *v);
/* x as a view of shape dims (x itself when it has it). */
salus_value sl_onnx_reshape(sl_onnx_imp *m, salus_value x, unsigned nd, const int64_t *dims);
/* a op b (ew_binary's kinds), add and mul without broadcasting when the
 * shapes agree; f(x) (ew_unary's kinds). */
salus_value sl_onnx_binary(sl_onnx_imp *m, int kind, salus_value a, salus_value b);
salus_value sl_onnx_unary(sl_onnx_imp *m, int kind, salus_value x, float p, float q);

/* onnx_fold.c: the new shape of a Reshape, Flatten, Squeeze or Unsqueeze
 * of a value of shape (xnd, xdims) whose shape or axes operand is the
 * constant arg (NULL: from the attributes); Slice's bounds clamped for one
 * axis, and whether the slice has elements. */
int sl_onnx_reshaped(sl_onnx_imp *m, const Onnx__NodeProto *n, unsigned xnd, const int64_t *xdims,
                     const struct ent *arg, unsigned *nd, int64_t *dims);
bool sl_onnx_slice_range(int64_t dim, int64_t *start, int64_t *end, int64_t step);

/* The reductions ONNX defines over a sum: a function before (abs, square,
 * exp) and after (sqrt, log), or none. */
enum { RED_PLAIN, RED_L1, RED_L2, RED_SUM_SQUARE, RED_LOG_SUM, RED_LOG_SUM_EXP };

/* onnx_ops_nn.c */
int sl_onnx_map_softmax(sl_onnx_imp *m, const Onnx__NodeProto *n, bool log);
int sl_onnx_map_matmul(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_gemm(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_conv(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_conv_transpose(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_pool(sl_onnx_imp *m, const Onnx__NodeProto *n, bool avg, bool global);
int sl_onnx_map_batchnorm(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_layernorm(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_instancenorm(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_argmax(sl_onnx_imp *m, const Onnx__NodeProto *n, bool min);

/* onnx_ops_rnn.c */
int sl_onnx_map_rnn(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_gru(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_lstm(sl_onnx_imp *m, const Onnx__NodeProto *n);

/* onnx_ops_resize.c */
int sl_onnx_map_resize(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_upsample(sl_onnx_imp *m, const Onnx__NodeProto *n);

/* onnx_ops_mask.c: comparisons, logic and Where on masks (bools carried
 * as i32 0/1), and a Cast from or to a bool or an integer of entry x */
int sl_onnx_map_compare(sl_onnx_imp *m, const Onnx__NodeProto *n, int kind);
int sl_onnx_map_not(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_where(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_cast_int(sl_onnx_imp *m, const Onnx__NodeProto *n, struct ent *x, int64_t to_type);

/* onnx_ops_layout.c */
int sl_onnx_map_reduce(sl_onnx_imp *m, const Onnx__NodeProto *n, int kind);
int sl_onnx_map_reduce_ex(sl_onnx_imp *m, const Onnx__NodeProto *n, int kind, int form);
int sl_onnx_map_reshape(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_transpose(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_concat(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_slice(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_split(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_gather(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_pad(sl_onnx_imp *m, const Onnx__NodeProto *n);
int sl_onnx_map_depth_space(sl_onnx_imp *m, const Onnx__NodeProto *n, bool to_space);
int sl_onnx_map_tile(sl_onnx_imp *m, const Onnx__NodeProto *n);

#endif
