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
/* Writes lr into t's learning-rate tensor (SALUS_OPT_LR_PER_STEP); the next
 * step uses it. SL_EINVAL (message in the client's last error) when the
 * rate is fixed or lr is not finite and >= 0. */
int sl_train_set_lr(sl_train *t, float lr);

#endif
