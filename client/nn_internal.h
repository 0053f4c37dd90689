/* The nn model's internals, shared by nn.c (layers, compile, runs) and
 * nn_state.c (named tensors, checkpoints, the learning rate). */
#ifndef SL_NN_INTERNAL_H
#define SL_NN_INTERNAL_H

#include "checkpoint.h"
#include "client_internal.h"

#define MAX_LAYERS 1024 /* a ResNet-152 in residual blocks is ~570 layers */
#define MAX_PARAMS (MAX_LAYERS * 2)
#define BN_EPSILON 1e-5f
#define BN_MOMENTUM 0.9f

enum layer_kind {
    L_DENSE,
    L_CONV,
    L_MAXPOOL,
    L_AVGPOOL,
    L_BN,
    L_RELU,
    L_SIGMOID,
    L_TANH,
    L_FLATTEN,
    /* a residual block (salus.h): its start (the shortcut's source), where
     * its shortcut path starts, and its end (main path + shortcut) */
    L_RES_BEGIN,
    L_RES_SHORTCUT,
    L_RES_END
};

#define MAX_RES_DEPTH 8 /* residual blocks open at once */

typedef struct layer {
    enum layer_kind kind;
    int64_t size, kernel, stride, pad; /* units / filters and window */
    int in_ndim, out_ndim;
    int64_t in[3], out[3];              /* per-sample shapes */
    int param[2];                       /* indexes into m->params, -1 if none */
    int no_bias;                        /* conv: without a bias (param[1] stays -1) */
    uint64_t running_mean, running_var; /* batchnorm state tensors */
    /* relu: runs after the max pool that follows it (see the top); the
     * pool layer then emits both, and this layer passes values through */
    int after_pool;
    /* residual begin: its shortcut marker's index (0: none); shortcut and
     * end: their begin's index */
    int block;
} layer;

typedef struct param {
    uint64_t tensor, state[2];
    int ndim;
    int64_t dims[4];
    salus_value value; /* in the training graph */
} param;

struct salus_model {
    layer layers[MAX_LAYERS];
    int n_layers;
    param params[MAX_PARAMS];
    int n_params;
    int sample_ndim;
    int64_t sample[3];
    salus_session *session;
    salus_graph *train, *infer;
    salus_value train_loss, infer_classes;
    uint64_t step_tensor, lr_tensor;
    bool lr_pending; /* lr_next goes with the next step (sl_train's lr_pending) */
    float lr_next;
    uint64_t scale_tensor, growth_tensor, skipped_tensor; /* f16 loss scaling */
    salus_optimizer opt;                                  /* resolved */
    int64_t batch, infer_batch;
    /* salus_model_predict in parts of part_batch samples (NULL: whole) */
    salus_graph *part;
    salus_value part_classes;
    int64_t part_batch;
    int open[MAX_RES_DEPTH]; /* residual blocks open while layers are added */
    int n_open;
    sl_named *named; /* every tensor of the model, by name (after compile) */
    unsigned n_named;
    char error[256];
};

/* Names every tensor of a compiled model (m->named); SL_EINVAL with the
 * reason in m->error when out of memory. */
int sl_nn_name_tensors(salus_model *m);
/* Reports a failed call on a compiled model through the client
 * (salus_last_error) without marking the model failed; returns rc. */
/* Writes a learning rate set for the next step now (nn_state.c). */
int sl_nn_lr_flush(salus_model *m);
__attribute__((format(printf, 3, 4))) int sl_nn_refuse(salus_model *m, int rc, const char *fmt,
                                                       ...);

#endif
