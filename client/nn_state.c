/* nn models' tensors by name (as PyTorch's state_dict and optimizer state
 * name them), read and written one by one or through checkpoint files, and
 * the learning rate set per step. */
#include "nn_internal.h"
#include "train_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Appends one named tensor (names fit: layer indexes are < MAX_LAYERS). */
static void add_named(salus_model *m, uint64_t tensor, int ndim, const int64_t *dims, int kind,
                      const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void add_named(salus_model *m, uint64_t tensor, int ndim, const int64_t *dims, int kind,
                      const char *fmt, ...)
{
    sl_named *n = &m->named[m->n_named++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->name, sizeof n->name, fmt, ap);
    va_end(ap);
    n->tensor = tensor;
    n->kind = kind;
    n->shape = (sl_shape){.dtype = SL_F32, .ndim = (uint8_t) ndim};
    for (int d = 0; d < ndim; d++)
        n->shape.dims[d] = dims[d];
}

/* Names every tensor as PyTorch's state_dict and optimizer state would:
 * "<layer>.weight", "<layer>.bias", "<layer>.running_mean",
 * "<layer>.running_var", then the optimizer's "<param>.momentum_buffer" or
 * "<param>.exp_avg" / "<param>.exp_avg_sq", "optimizer.step" and
 * "optimizer.lr". */
int sl_nn_name_tensors(salus_model *m)
{
    static const char *const state_names[3][2] = {
        {NULL, NULL}, {"momentum_buffer", NULL}, {"exp_avg", "exp_avg_sq"}};
    m->named = sl_calloc((size_t) m->n_params * 3 + 2 * (size_t) m->n_layers + 2, sizeof *m->named);
    if (!m->named)
        return snprintf(m->error, sizeof m->error, "out of memory"), SL_EINVAL;
    int64_t one = 1;
    for (int i = 0; i < m->n_layers; i++) {
        const layer *l = &m->layers[i];
        for (int k = 0; k < 2; k++)
            if (l->param[k] >= 0) {
                const param *p = &m->params[l->param[k]];
                add_named(m, p->tensor, p->ndim, p->dims, SALUS_TENSOR_PARAM, "%d.%s", i,
                          k ? "bias" : "weight");
            }
        if (l->kind == L_BN) {
            const param *p = &m->params[l->param[0]];
            add_named(m, l->running_mean, 1, p->dims, SALUS_TENSOR_BUFFER, "%d.running_mean", i);
            add_named(m, l->running_var, 1, p->dims, SALUS_TENSOR_BUFFER, "%d.running_var", i);
        }
    }
    unsigned n_params = m->n_named;
    for (unsigned j = 0; j < n_params; j++) {
        if (m->named[j].kind != SALUS_TENSOR_PARAM)
            continue;
        const param *p = NULL;
        for (int q = 0; q < m->n_params && !p; q++)
            if (m->params[q].tensor == m->named[j].tensor)
                p = &m->params[q];
        for (int k = 0; k < 2; k++)
            if (state_names[m->opt.kind][k] && p->state[k])
                add_named(m, p->state[k], p->ndim, p->dims, SALUS_TENSOR_OPTIMIZER, "%s.%s",
                          m->named[j].name, state_names[m->opt.kind][k]);
    }
    if (m->step_tensor)
        add_named(m, m->step_tensor, 1, &one, SALUS_TENSOR_OPTIMIZER, "optimizer.step");
    if (m->lr_tensor)
        add_named(m, m->lr_tensor, 1, &one, SALUS_TENSOR_OPTIMIZER, "optimizer.lr");
    return SL_OK;
}

/* ---- named tensors, checkpoints, the learning rate ---- */

/* A call on a compiled model whose failure is reported through the client
 * (salus_last_error), without poisoning the model. */
int sl_nn_refuse(salus_model *m, int rc, const char *fmt, ...)
{
    if (m->session && m->session->client) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->session->client->last_error, sizeof m->session->client->last_error, fmt, ap);
        va_end(ap);
    }
    return rc;
}

int salus_model_tensor_count(const salus_model *m)
{
    return (int) m->n_named;
}

const char *salus_model_tensor_name(const salus_model *m, int i)
{
    return i >= 0 && (unsigned) i < m->n_named ? m->named[i].name : NULL;
}

int salus_model_tensor_find(const salus_model *m, const char *name)
{
    for (unsigned i = 0; name && i < m->n_named; i++)
        if (strcmp(m->named[i].name, name) == 0)
            return (int) i;
    return -1;
}

int salus_model_tensor_info(const salus_model *m, int i, int *kind, int *ndim, int64_t *dims,
                            uint64_t *tensor_id)
{
    if (i < 0 || (unsigned) i >= m->n_named)
        return SL_EINVAL;
    const sl_named *n = &m->named[i];
    if (kind)
        *kind = n->kind;
    if (ndim)
        *ndim = n->shape.ndim;
    if (dims)
        for (unsigned d = 0; d < n->shape.ndim; d++)
            dims[d] = n->shape.dims[d];
    if (tensor_id)
        *tensor_id = n->tensor;
    return SL_OK;
}

static int named_io(salus_model *m, int i, void *buf, size_t bytes, bool write)
{
    if (i < 0 || (unsigned) i >= m->n_named)
        return sl_nn_refuse(m, SL_EINVAL, "model tensor %d: no such tensor (the model has %u)", i,
                            m->n_named);
    const sl_named *n = &m->named[i];
    size_t want = sl_shape_bytes(&n->shape);
    if (bytes != want)
        return sl_nn_refuse(m, SL_EINVAL, "model tensor %s: %zu bytes given, it has %zu", n->name,
                            bytes, want);
    return write ? salus_tensor_write(m->session, n->tensor, buf, bytes)
                 : salus_tensor_read(m->session, n->tensor, buf, bytes);
}

/* A rate set for the next step is written first: reads see it, and a
 * write of the rate's tensor (or a checkpoint's load) overrides it. */
int salus_model_tensor_read(salus_model *m, int i, float *buf, size_t bytes)
{
    int rc = sl_nn_lr_flush(m);
    return rc ? rc : named_io(m, i, buf, bytes, false);
}

int salus_model_tensor_write(salus_model *m, int i, const float *buf, size_t bytes)
{
    int rc = sl_nn_lr_flush(m);
    return rc ? rc : named_io(m, i, (void *) buf, bytes, true);
}

int salus_model_save(salus_model *m, const char *path)
{
    if (!m->train || !path)
        return sl_nn_refuse(m, SL_EINVAL, "save: the model is not compiled, or no path");
    char err[512];
    int rc = sl_nn_lr_flush(m);
    if (rc)
        return rc;
    rc = sl_ckpt_save(m->session, m->named, m->n_named, path, err, sizeof err);
    return rc ? sl_nn_refuse(m, rc, "save: %s", err) : SL_OK;
}

int salus_model_load(salus_model *m, const char *path)
{
    if (!m->train || !path)
        return sl_nn_refuse(m, SL_EINVAL, "load: the model is not compiled, or no path");
    char err[512];
    int rc = sl_nn_lr_flush(m);
    if (rc)
        return rc;
    rc = sl_ckpt_load(m->session, m->named, m->n_named, path, err, sizeof err);
    return rc ? sl_nn_refuse(m, rc, "load: %s", err) : SL_OK;
}

/* m's rate as sl_train sees it, and back. */
static sl_train lr_of(const salus_model *m)
{
    return (sl_train){.session = m->session,
                      .lr_tensor = m->lr_tensor,
                      .opt = m->opt,
                      .lr_pending = m->lr_pending,
                      .lr_next = m->lr_next};
}

int salus_model_set_lr(salus_model *m, float lr)
{
    if (!m->train)
        return sl_nn_refuse(m, SL_EINVAL, "set_lr: the model is not compiled");
    sl_train t = lr_of(m);
    int rc = sl_train_set_lr(&t, lr);
    if (rc == SL_OK) {
        m->opt.lr = lr;
        m->lr_pending = true;
        m->lr_next = lr;
    }
    return rc;
}

int sl_nn_lr_flush(salus_model *m)
{
    sl_train t = lr_of(m);
    int rc = sl_train_lr_flush(&t);
    m->lr_pending = t.lr_pending;
    return rc;
}
