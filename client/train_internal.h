/* The training-graph builder shared by salus_graph_train and the nn
 * helpers (train.c). Not thread-safe, like the graph builder. */
#ifndef SL_TRAIN_INTERNAL_H
#define SL_TRAIN_INTERNAL_H

#include "client_internal.h"

/* A parameter trained: its tensor, its value in the training graph, and
 * the optimizer's state tensors (0: created by sl_train_emit). */
typedef struct sl_trainable {
    uint64_t tensor;
    salus_value value;
    sl_shape shape;
    uint64_t state[2]; /* momentum: velocity; Adam: m, v */
    bool unused;       /* the loss does not depend on it: never updated */
} sl_trainable;

typedef struct sl_train {
    salus_session *session;
    salus_graph *g; /* the forward graph with its loss; backward appended */
    salus_value loss;
    salus_optimizer opt; /* resolved (sl_train_resolve) */
    sl_trainable *params;
    unsigned n_params;
    uint64_t step_tensor; /* Adam's step count (0: created by sl_train_emit) */
    /* SALUS_OPT_LR_PER_STEP: the learning rate's [1] tensor (created by
     * sl_train_emit, holding opt.lr) */
    uint64_t lr_tensor;
    /* a rate set since the last step: written into lr_tensor by the next
     * step's own request (Run.writes), so a schedule costs no round trip */
    bool lr_pending;
    float lr_next;
    /* opt.precision SALUS_F16: the loss scale, the clean steps since it
     * last changed and the steps skipped, persistent [1] f32 tensors
     * (created by sl_train_emit) */
    uint64_t scale_tensor, growth_tensor, skipped_tensor;
} sl_train;

/* Checks an optimizer and fills in Adam's defaults (unless
 * SALUS_OPT_EXACT). SL_EINVAL with the reason in err. */
int sl_train_resolve(const salus_optimizer *in, salus_optimizer *out, char *err, size_t len);
/* State tensors per parameter: 0 (SGD), 1 (momentum), 2 (Adam). */
int sl_train_state_count(const salus_optimizer *o);
/* Creates the missing state tensors in t->session, then appends to t->g
 * the step count (Adam), the gradients of t->loss with respect to every
 * t->params[i].value and their updates. Errors: as sl_autodiff, and the
 * session's when a tensor cannot be created; the reason is in err. */
int sl_train_emit(sl_train *t, char *err, size_t len);
/* Sets the rate of t's next steps (SALUS_OPT_LR_PER_STEP): it travels with
 * the next step's run (sl_train_lr_write). SL_EINVAL (message in the
 * client's last error) when the rate is fixed or lr is not finite and >= 0. */
int sl_train_set_lr(sl_train *t, float lr);
/* The run write a pending rate needs (0 or 1 of them into *w); the caller
 * clears lr_pending once the run succeeded. */
unsigned sl_train_lr_write(const sl_train *t, salus_run_write *w);
/* Writes a pending rate now, for reads and writes of the model's tensors
 * that must see it. */
int sl_train_lr_flush(sl_train *t);

/* Reads the loss scale and the skipped steps of an f16 training graph
 * (either out-pointer may be NULL). SL_EINVAL without loss scaling. */
int sl_train_amp_state(sl_train *t, float *scale, int64_t *skipped);

/* Mixed precision (autocast.c): a copy of forward graph `in` with casts
 * placed by PyTorch autocast's rules for `half` (SL_BF16 or SL_F16):
 * matmul, batch_matmul and conv2d take every float input in the half type;
 * bias_add and channel_bias_add take the bias in the activation's dtype;
 * ops the registry runs in f32 only (losses, softmax, batch norm,
 * reductions, optimisers) take f32; the rest take their inputs as they
 * come, the widest dtype when they differ. An input written in place is
 * never cast. The copy has the same inputs (in order, so the feeds are the
 * same) and parameters, and the ops in the same order; *map (n_values of
 * `in` entries) gives each value of `in` its value in the copy, whose
 * dtype is the half type where the op making it ran in it. On success *out and *map are the
 * caller's (salus_graph_free, sl_free); on failure nothing is allocated and err says why
 * (SL_EINVAL, SL_ENOMEM). */
int sl_autocast(const salus_graph *in, int half, salus_graph **out, salus_value **map, char *err,
                size_t len);
/* v as dtype: v itself when it has that dtype or is not a float value,
 * else a cast appended to g (SALUS_NO_VALUE on a builder error). */
salus_value sl_autocast_to(salus_graph *g, salus_value v, int dtype);

#endif
