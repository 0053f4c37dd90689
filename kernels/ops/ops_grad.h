/* Gradient rules of the op registry: for each differentiable op, how the
 * gradients of its inputs are computed from the gradients of its outputs,
 * written as salus ops. Reverse-mode automatic differentiation (the client's
 * autodiff.c) walks a graph backwards and calls these rules; the rules only
 * emit ops through an emitter, so they do not depend on any graph builder.
 *
 * Value handles are the emitter's (uint32_t); an op's outputs are
 * consecutive handles after its first, as the graph builder numbers them.
 *
 * Errors: a rule returns SL_OK, SL_EUNSUPPORTED (the op, or this use of it,
 * has no gradient: the reason is written into err) or the emitter's error.
 * Threads: the rules are pure functions of their arguments. */
#ifndef SL_OPS_GRAD_H
#define SL_OPS_GRAD_H

#include "ops.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_GV_NONE UINT32_MAX /* no value: a zero gradient, or not wanted */
/* The seed of a scalar loss: d loss / d loss = 1, never a tensor. Loss ops
 * take it as their output's gradient; any other rule refuses it. */
#define SL_GV_ONE (UINT32_MAX - 1)

/* Where a rule's ops go. ctx is the emitter's own. */
typedef struct sl_grad_emitter {
    void *ctx;
    /* Adds op `op` with the given inputs and attributes (n_iattrs / n_fattrs
     * are the counts sent, as salus_graph_op's) and returns its first
     * output, or the handle of its first input for an op without outputs,
     * or SL_GV_NONE on failure (the emitter keeps the reason). */
    uint32_t (*emit)(void *ctx, unsigned op, unsigned n_in, const uint32_t *in, unsigned n_iattrs,
                     const int64_t *iattrs, unsigned n_fattrs, const float *fattrs);
    /* The shape of a value; SL_EINVAL for no such value. */
    int (*shape)(void *ctx, uint32_t v, sl_shape *out);
    /* When value v is read by exactly one op of the forward graph: that op's
     * id and its first output, returning true; else false. Rules use it to
     * read a cheaper equivalent of a value (see maxpool's). */
    bool (*sole_reader)(void *ctx, uint32_t v, unsigned *op, uint32_t *first_out);
} sl_grad_emitter;

/* One call of a rule: the forward op and the gradients flowing into it. */
typedef struct sl_grad_args {
    unsigned op; /* enum sl_op_id */
    const sl_op_attrs *attrs;
    unsigned n_iattrs, n_fattrs; /* the counts the forward op sent */
    unsigned n_in, n_out;
    uint32_t in[SL_OP_MAX_IN];    /* forward inputs */
    uint32_t out[SL_OP_MAX_OUT];  /* forward outputs */
    uint32_t dout[SL_OP_MAX_OUT]; /* their gradients; SL_GV_NONE: zero */
    bool want[SL_OP_MAX_IN];      /* which input gradients the caller needs */
    /* Input i's gradient may be accumulated straight into acc[i] (an
     * optimiser's state, e.g. momentum's velocity) as
     * `acc = acc_beta[i] * acc + gradient`, instead of being a tensor: a
     * rule that does so sets accumulated[i] and leaves din[i] SL_GV_NONE.
     * acc[i] is SL_GV_NONE where the caller does not offer it. */
    uint32_t acc[SL_OP_MAX_IN];
    float acc_beta[SL_OP_MAX_IN];
    /* written by the rule */
    uint32_t din[SL_OP_MAX_IN]; /* gradient of each wanted input; SL_GV_NONE: zero */
    bool accumulated[SL_OP_MAX_IN];
} sl_grad_args;

typedef int (*sl_op_grad_fn)(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t errlen);

/* The gradient rule of op id, or NULL when the op is not differentiable
 * (gradient ops, optimisers, argmax, ...). */
sl_op_grad_fn sl_op_grad(unsigned id);

/* Whether input i of op id can carry a gradient at all: false for inputs
 * that are i32, that give a shape only, or that the op writes in place
 * (batchnorm's running statistics). */
bool sl_op_grad_input(unsigned id, unsigned i);

#endif
