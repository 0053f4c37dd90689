/* Geometry of the windowed ops (conv2d and its gradients, maxpool, avgpool):
 * their positional attributes decoded once, with ONNX defaults applied, so
 * the registry and every backend read them the same way. Contracts of the
 * attributes are in ops_table.c (docs/ops.md). */
#ifndef SL_OPS_GEOM_H
#define SL_OPS_GEOM_H

#include "ops.h"

#include <stdbool.h>
#include <stdint.h>

/* Largest stride, pad, dilation, group and pool kernel extent the registry
 * accepts. Far beyond any real network, and small enough that every window
 * computation below stays far from int64 overflow for shapes of at most
 * SL_MAX_ELEMS elements. */
#define SL_WINDOW_ATTR_MAX (1 << 20)

/* A 2-D window over an NCHW tensor; index 0 is H, 1 is W. */
typedef struct sl_window2d {
    int64_t kernel[2];
    int64_t stride[2];
    int64_t pad_begin[2], pad_end[2];
    int64_t dilation[2];
    int64_t group;          /* conv only; 1 for pools */
    bool count_include_pad; /* avgpool only */
} sl_window2d;

static inline int64_t sl_attr_or_one(int64_t v)
{
    return v == 0 ? 1 : v;
}

/* conv2d attributes (i[0..1] strides, i[2..5] pads, i[6..7] dilations, i[8]
 * group) with the kernel extent taken from w[K, C/group, R, S]. Does not
 * validate: the registry does. */
static inline sl_window2d sl_conv_window(const sl_op_attrs *a, const sl_shape *w)
{
    sl_window2d g = {
        .kernel = {w->dims[2], w->dims[3]},
        .stride = {sl_attr_or_one(a->i[0]), sl_attr_or_one(a->i[1])},
        .pad_begin = {a->i[2], a->i[3]},
        .pad_end = {a->i[4], a->i[5]},
        .dilation = {sl_attr_or_one(a->i[6]), sl_attr_or_one(a->i[7])},
        .group = sl_attr_or_one(a->i[8]),
        .count_include_pad = false,
    };
    return g;
}

/* maxpool / avgpool attributes (i[0..1] kernel, i[2..3] strides, i[4..7]
 * pads, i[8] count_include_pad for avgpool). Does not validate. */
static inline sl_window2d sl_pool_window(const sl_op_attrs *a)
{
    sl_window2d g = {
        .kernel = {a->i[0], a->i[1]},
        .stride = {sl_attr_or_one(a->i[2]), sl_attr_or_one(a->i[3])},
        .pad_begin = {a->i[4], a->i[5]},
        .pad_end = {a->i[6], a->i[7]},
        .dilation = {1, 1},
        .group = 1,
        .count_include_pad = a->i[8] != 0,
    };
    return g;
}

/* Output extent along axis for an input extent `in`: floor((in + pad_b +
 * pad_e - dil*(k-1) - 1) / stride) + 1. May be < 1 for an input smaller
 * than the window (the registry rejects that). Valid for attributes within
 * SL_WINDOW_ATTR_MAX and extents within SL_MAX_ELEMS. */
static inline int64_t sl_window_out(const sl_window2d *g, int axis, int64_t in)
{
    int64_t span =
        in + g->pad_begin[axis] + g->pad_end[axis] - g->dilation[axis] * (g->kernel[axis] - 1) - 1;
    return span < 0 ? 0 : span / g->stride[axis] + 1;
}

#endif
