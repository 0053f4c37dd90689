/* Training graphs by automatic differentiation: a loss appended to a
 * forward graph, its gradients (autodiff.c) and an optimiser's updates, in
 * one graph that runs one iteration per salus_run. The nn helpers build
 * their training graphs here too (sl_train_emit).
 *
 * Optimiser semantics are PyTorch's (torch.optim.SGD with and without
 * momentum, Adam, AdamW), see salus.h. Each update follows its parameter's
 * gradient as soon as that is complete, so gradients die early. */
#include "client_internal.h"
#include "train_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

__attribute__((format(printf, 3, 4))) static int seterr(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return SL_EINVAL;
}

int sl_train_resolve(const salus_optimizer *in, salus_optimizer *out, char *err, size_t len)
{
    if (!in)
        return seterr(err, len, "no optimizer");
    *out = *in;
    if (in->kind < SALUS_SGD || in->kind > SALUS_ADAM)
        return seterr(err, len, "optimizer kind %d is not SALUS_SGD, SALUS_MOMENTUM or SALUS_ADAM",
                      in->kind);
    if (!(in->lr > 0) || !isfinite(in->lr))
        return seterr(err, len, "optimizer lr %g must be finite and > 0", (double) in->lr);
    if (!(in->weight_decay >= 0) || !isfinite(in->weight_decay))
        return seterr(err, len, "optimizer weight_decay %g must be finite and >= 0",
                      (double) in->weight_decay);
    if (in->flags & ~(unsigned) (SALUS_OPT_EXACT | SALUS_OPT_DECOUPLED_WD | SALUS_OPT_LR_PER_STEP))
        return seterr(err, len, "optimizer flags 0x%x: unknown bits", in->flags);
    if ((in->flags & SALUS_OPT_DECOUPLED_WD) && in->kind != SALUS_ADAM)
        return seterr(err, len,
                      "SALUS_OPT_DECOUPLED_WD (AdamW) needs SALUS_ADAM; SGD's "
                      "weight_decay is PyTorch's (L2, added to the gradient)");
    if (in->precision != SALUS_F32 && in->precision != SALUS_BF16 && in->precision != SALUS_F16)
        return seterr(err, len,
                      "optimizer precision %d is not SALUS_F32 (0), SALUS_BF16 or SALUS_F16",
                      in->precision);
    if (in->kind == SALUS_MOMENTUM && (!(in->momentum >= 0) || !isfinite(in->momentum)))
        return seterr(err, len, "optimizer momentum %g must be finite and >= 0",
                      (double) in->momentum);
    if (in->kind == SALUS_ADAM) {
        bool exact = in->flags & SALUS_OPT_EXACT;
        if (!exact) {
            out->beta1 = in->beta1 > 0 ? in->beta1 : 0.9f;
            out->beta2 = in->beta2 > 0 ? in->beta2 : 0.999f;
            out->eps = in->eps > 0 ? in->eps : 1e-8f;
        }
        if (!(out->beta1 >= 0 && out->beta1 < 1) || !(out->beta2 >= 0 && out->beta2 < 1))
            return seterr(err, len, "Adam betas (%g, %g) must be in [0, 1)", (double) out->beta1,
                          (double) out->beta2);
        if (!(out->eps >= 0) || !isfinite(out->eps))
            return seterr(err, len, "Adam eps %g must be finite and >= 0", (double) out->eps);
    }
    return SL_OK;
}

int sl_train_state_count(const salus_optimizer *o)
{
    return o->kind == SALUS_ADAM ? 2 : o->kind == SALUS_MOMENTUM ? 1 : 0;
}

typedef struct emit_ctx {
    sl_train *t;
    salus_value step; /* Adam's step count */
    salus_value lr;   /* SALUS_OPT_LR_PER_STEP: the learning rate's tensor */
    /* The parameter being updated and its state: the tensors' own values,
     * or with loss scaling copies that the step commits only when its
     * gradients are finite (SALUS_NO_VALUE: the state tensor itself). */
    salus_value w, st[2];
    /* loss scaling: the gradients, held until every one has been checked */
    salus_value *grads;
    char *err;
    size_t len;
} emit_ctx;

static salus_value state_value(sl_train *t, const sl_trainable *p, int k)
{
    return salus_graph_param(t->g, p->state[k], SALUS_F32, p->shape.ndim, p->shape.dims);
}

static salus_value state_of(emit_ctx *e, const sl_trainable *p, int k)
{
    return e->st[k] != SALUS_NO_VALUE ? e->st[k] : state_value(e->t, p, k);
}

#define OPF(g, type, fattrs, ...)                                                                  \
    salus_graph_op((g), (type), sizeof((salus_value[]){__VA_ARGS__}) / sizeof(salus_value),        \
                   (salus_value[]){__VA_ARGS__}, 0, NULL, sizeof(fattrs) / sizeof(float),          \
                   (fattrs))

#define OP2(g, type, a, b)                                                                         \
    salus_graph_op((g), (type), 2, (salus_value[]){(a), (b)}, 0, NULL, 0, NULL)

/* Momentum's velocity takes a dense layer's weight gradient straight from
 * matmul_acc: no gradient tensor in the iteration's memory. */
static bool accumulate(void *ctx, unsigned i, salus_value *acc, float *beta)
{
    emit_ctx *e = ctx;
    if (e->t->opt.kind != SALUS_MOMENTUM || e->grads)
        return false;
    *acc = state_value(e->t, &e->t->params[i], 0);
    *beta = e->t->opt.momentum;
    return true;
}

/* param -= lr * d, where lr is `scale` times the learning rate: the
 * optimizer's own, or under a schedule the rate tensor's, read when the op
 * runs (sgd_update_lr), so a schedule costs no extra pass. */
static void descend(emit_ctx *e, salus_value param, salus_value d, float scale)
{
    if (e->lr == SALUS_NO_VALUE) {
        const float f[] = {scale * e->t->opt.lr};
        OPF(e->t->g, "sgd_update", f, param, d);
    } else {
        const float f[] = {scale};
        OPF(e->t->g, "sgd_update_lr", f, param, d, e->lr);
    }
}

/* The update of parameter i (e->w, e->st) from its gradient g. Under a
 * schedule every op that applies the rate is its _lr form, with the
 * optimizer's rate 1 as the attribute's scale. */
static int update(emit_ctx *e, unsigned i, salus_value g, bool accumulated)
{
    sl_train *t = e->t;
    const salus_optimizer *o = &t->opt;
    sl_trainable *p = &t->params[i];
    salus_graph *G = t->g;
    salus_value w = e->w;
    bool sched = e->lr != SALUS_NO_VALUE;
    float lr = sched ? 1.0f : o->lr;
    if (o->kind == SALUS_SGD) {
        if (o->weight_decay != 0) {
            const float wd[] = {o->weight_decay};
            g = OPF(G, "axpy", wd, w, g);
        }
        descend(e, w, g, 1.0f);
    } else if (o->kind == SALUS_MOMENTUM && accumulated) {
        /* v = momentum * v + g is done: v += weight decay * p, then
         * p -= lr * v, which is momentum_update's math */
        salus_value v = state_of(e, p, 0);
        if (o->weight_decay != 0) {
            const float wd[] = {-o->weight_decay};
            OPF(G, "sgd_update", wd, v, w);
        }
        descend(e, w, v, 1.0f);
    } else if (o->kind == SALUS_MOMENTUM) {
        const float f[] = {lr, o->momentum, o->weight_decay};
        if (sched)
            OPF(G, "momentum_update_lr", f, w, g, state_of(e, p, 0), e->lr);
        else
            OPF(G, "momentum_update", f, w, g, state_of(e, p, 0));
    } else {
        if (o->weight_decay != 0 && (o->flags & SALUS_OPT_DECOUPLED_WD)) {
            /* AdamW: p -= lr * weight_decay * p, before the Adam step */
            salus_value copy = salus_graph_op(G, "copy", 1, &w, 0, NULL, 0, NULL);
            descend(e, w, copy, o->weight_decay);
        } else if (o->weight_decay != 0) {
            const float wd[] = {o->weight_decay}; /* Adam's L2: g += wd * p */
            g = OPF(G, "axpy", wd, w, g);
        }
        const float f[] = {lr, o->beta1, o->beta2, o->eps};
        if (sched)
            OPF(G, "adam_update_lr", f, w, g, state_of(e, p, 0), state_of(e, p, 1), e->step, e->lr);
        else
            OPF(G, "adam_update", f, w, g, state_of(e, p, 0), state_of(e, p, 1), e->step);
    }
    if (salus_graph_error(G))
        return seterr(e->err, e->len, "update of parameter %u: %s", i, salus_graph_error(G));
    return SL_OK;
}

/* Parameter i's gradient is complete: its update follows at once, or with
 * loss scaling the gradient waits for the check of all of them. */
static int ready(void *ctx, unsigned i, salus_value g, bool accumulated)
{
    emit_ctx *e = ctx;
    sl_trainable *p = &e->t->params[i];
    if (g == SALUS_NO_VALUE && !accumulated) {
        p->unused = true; /* PyTorch too skips a parameter without a gradient */
        return SL_OK;
    }
    if (e->grads) {
        e->grads[i] = g;
        return SL_OK;
    }
    e->w = p->value;
    e->st[0] = e->st[1] = SALUS_NO_VALUE;
    return update(e, i, g, accumulated);
}

static int new_scalar(sl_train *t, float v, uint64_t *id, const char *what, char *err, size_t len)
{
    if (*id)
        return SL_OK;
    int rc = salus_tensor_create(t->session, SALUS_F32, 1, (int64_t[]){1}, &v, id);
    if (rc)
        seterr(err, len, "creating %s: %s", what, salus_last_error(t->session->client));
    return rc;
}

static salus_value scalar_value(sl_train *t, uint64_t id)
{
    return salus_graph_param(t->g, id, SALUS_F32, 1, (int64_t[]){1});
}

/* PyTorch's GradScaler defaults. */
#define AMP_INIT_SCALE 65536.0f
#define AMP_GROWTH 2.0f
#define AMP_BACKOFF 0.5f
#define AMP_INTERVAL 2000.0f

/* After the backward pass of a loss-scaled graph: every gradient divided
 * by the scale and checked for inf and NaN (found), then each update
 * computed on copies of its parameter and state, committed only when
 * found stayed 0 (a skipped step changes nothing but the scale), then the
 * scale's update. The copies cost a pass over each parameter and state
 * tensor: the price of deciding after every gradient is known, as
 * GradScaler.step does. */
static int scaled_updates(emit_ctx *e, salus_value scale)
{
    sl_train *t = e->t;
    salus_graph *G = t->g;
    const float zero[] = {0.0f}, one[] = {1.0f};
    salus_value found = salus_graph_op(G, "fill", 1, &scale, 0, NULL, 1, zero);
    for (unsigned i = 0; i < t->n_params; i++) {
        bool seen = e->grads[i] == SALUS_NO_VALUE;
        for (unsigned j = 0; j < i && !seen; j++)
            seen = e->grads[j] == e->grads[i]; /* one gradient value for two parameters */
        if (!seen)
            salus_graph_op(G, "amp_unscale", 3, (salus_value[]){e->grads[i], scale, found}, 0, NULL,
                           0, NULL);
    }
    salus_value step = e->step;
    if (t->opt.kind == SALUS_ADAM) {
        e->step = salus_graph_op(G, "copy", 1, &step, 0, NULL, 0, NULL);
        OPF(G, "add_scalar", one, e->step);
    }
    int n_state = sl_train_state_count(&t->opt);
    for (unsigned i = 0; i < t->n_params; i++) {
        sl_trainable *p = &t->params[i];
        if (e->grads[i] == SALUS_NO_VALUE)
            continue;
        salus_value orig[2];
        e->w = salus_graph_op(G, "copy", 1, &p->value, 0, NULL, 0, NULL);
        e->st[0] = e->st[1] = SALUS_NO_VALUE;
        for (int k = 0; k < n_state; k++) {
            orig[k] = state_value(t, p, k);
            e->st[k] = salus_graph_op(G, "copy", 1, &orig[k], 0, NULL, 0, NULL);
        }
        int rc = update(e, i, e->grads[i], false);
        if (rc)
            return rc;
        salus_graph_op(G, "amp_commit", 3, (salus_value[]){p->value, e->w, found}, 0, NULL, 0,
                       NULL);
        for (int k = 0; k < n_state; k++)
            salus_graph_op(G, "amp_commit", 3, (salus_value[]){orig[k], e->st[k], found}, 0, NULL,
                           0, NULL);
    }
    if (t->opt.kind == SALUS_ADAM)
        salus_graph_op(G, "amp_commit", 3, (salus_value[]){step, e->step, found}, 0, NULL, 0, NULL);
    const float f[] = {AMP_GROWTH, AMP_BACKOFF, AMP_INTERVAL};
    salus_graph_op(G, "amp_scale_update", 4,
                   (salus_value[]){scale, scalar_value(t, t->growth_tensor),
                                   scalar_value(t, t->skipped_tensor), found},
                   0, NULL, 3, f);
    if (salus_graph_error(G))
        return seterr(e->err, e->len, "loss scaling: %s", salus_graph_error(G));
    return SL_OK;
}

int sl_train_emit(sl_train *t, char *err, size_t len)
{
    int n_state = sl_train_state_count(&t->opt);
    for (unsigned i = 0; i < t->n_params; i++)
        for (int k = 0; k < n_state; k++)
            if (!t->params[i].state[k]) {
                int rc = salus_tensor_create(t->session, SALUS_F32, t->params[i].shape.ndim,
                                             t->params[i].shape.dims, NULL, &t->params[i].state[k]);
                if (rc) {
                    seterr(err, len, "creating optimizer state: %s",
                           salus_last_error(t->session->client));
                    return rc;
                }
            }
    emit_ctx e = {.t = t,
                  .step = SALUS_NO_VALUE,
                  .lr = SALUS_NO_VALUE,
                  .w = SALUS_NO_VALUE,
                  .st = {SALUS_NO_VALUE, SALUS_NO_VALUE},
                  .err = err,
                  .len = len};
    bool scaled = t->opt.precision == SALUS_F16;
    if (t->opt.flags & SALUS_OPT_LR_PER_STEP) {
        if (!t->lr_tensor) {
            int rc = salus_tensor_create(t->session, SALUS_F32, 1, (int64_t[]){1}, &t->opt.lr,
                                         &t->lr_tensor);
            if (rc) {
                seterr(err, len, "creating the learning rate: %s",
                       salus_last_error(t->session->client));
                return rc;
            }
        }
        e.lr = salus_graph_param(t->g, t->lr_tensor, SALUS_F32, 1, (int64_t[]){1});
    }
    if (t->opt.kind == SALUS_ADAM) {
        if (!t->step_tensor) {
            int rc = salus_tensor_create(t->session, SALUS_F32, 1, (int64_t[]){1}, NULL,
                                         &t->step_tensor);
            if (rc) {
                seterr(err, len, "creating the step count: %s",
                       salus_last_error(t->session->client));
                return rc;
            }
        }
        /* the step count advances once, before any update reads it (with
         * loss scaling, on a copy committed with the updates) */
        e.step = salus_graph_param(t->g, t->step_tensor, SALUS_F32, 1, (int64_t[]){1});
        const float one[] = {1.0f};
        if (!scaled)
            OPF(t->g, "add_scalar", one, e.step);
    }
    salus_value scale = SALUS_NO_VALUE;
    if (scaled) {
        int rc = new_scalar(t, AMP_INIT_SCALE, &t->scale_tensor, "the loss scale", err, len);
        if (rc == SL_OK)
            rc = new_scalar(t, 0, &t->growth_tensor, "the loss scale's growth count", err, len);
        if (rc == SL_OK)
            rc = new_scalar(t, 0, &t->skipped_tensor, "the skipped-step count", err, len);
        if (rc)
            return rc;
        scale = scalar_value(t, t->scale_tensor);
    }
    salus_value *wrt = sl_calloc(t->n_params ? t->n_params : 1, sizeof *wrt);
    if (scaled && wrt)
        e.grads = sl_calloc(t->n_params ? t->n_params : 1, sizeof *e.grads);
    if (!wrt || (scaled && !e.grads)) {
        sl_free(wrt);
        return seterr(err, len, "out of memory"), SL_ENOMEM;
    }
    for (unsigned i = 0; i < t->n_params; i++) {
        wrt[i] = t->params[i].value;
        if (e.grads)
            e.grads[i] = SALUS_NO_VALUE;
    }
    const sl_autodiff_hooks h = {.ctx = &e,
                                 .accumulate = accumulate,
                                 .ready = ready,
                                 .scale_seed = scaled,
                                 .seed_scale = scale};
    int rc = sl_autodiff(t->g, t->loss, t->n_params, wrt, &h, err, len);
    if (rc == SL_OK && scaled)
        rc = scaled_updates(&e, scale);
    sl_free(wrt);
    sl_free(e.grads);
    return rc;
}

int sl_train_amp_state(sl_train *t, float *scale, int64_t *skipped)
{
    if (!t->scale_tensor) {
        if (t->session->client)
            snprintf(t->session->client->last_error, sizeof t->session->client->last_error,
                     "no loss scaling: the graph was not built with precision SALUS_F16");
        return SL_EINVAL;
    }
    float v;
    int rc = SL_OK;
    if (scale && (rc = salus_tensor_read(t->session, t->scale_tensor, &v, sizeof v)) == SL_OK)
        *scale = v;
    if (rc == SL_OK && skipped &&
        (rc = salus_tensor_read(t->session, t->skipped_tensor, &v, sizeof v)) == SL_OK)
        *skipped = (int64_t) v;
    return rc;
}

/* ---- salus.h: gradients and training graphs of a builder's graph ---- */

typedef struct grads_ctx {
    salus_value *grads;
} grads_ctx;

static int store_grad(void *ctx, unsigned i, salus_value g, bool accumulated)
{
    (void) accumulated; /* no accumulator is offered */
    ((grads_ctx *) ctx)->grads[i] = g;
    return SL_OK;
}

int salus_graph_gradients(salus_graph *g, salus_value loss, unsigned n, const salus_value *wrt,
                          salus_value *grads)
{
    if (!g || (n && (!wrt || !grads)))
        return SL_EINVAL;
    salus_value *tmp = sl_calloc(n ? n : 1, sizeof *tmp);
    if (!tmp)
        return SL_ENOMEM;
    for (unsigned i = 0; i < n; i++)
        tmp[i] = SALUS_NO_VALUE;
    grads_ctx c = {.grads = tmp};
    const sl_autodiff_hooks h = {.ctx = &c, .ready = store_grad};
    char err[400];
    int rc = sl_autodiff(g, loss, n, wrt, &h, err, sizeof err);
    /* a value the loss does not depend on has a gradient of zeros */
    for (unsigned i = 0; i < n && rc == SL_OK; i++)
        if (tmp[i] == SALUS_NO_VALUE) {
            const float zero[] = {0.0f};
            tmp[i] = salus_graph_op(g, "fill", 1, &wrt[i], 0, NULL, 1, zero);
            if (tmp[i] == SALUS_NO_VALUE)
                rc = SL_EINVAL;
        }
    if (rc == SL_OK)
        memcpy(grads, tmp, n * sizeof *grads);
    else
        sl_graph_set_error(g, "gradients: %s", err[0] ? err : sl_strerror(rc));
    sl_free(tmp);
    return rc;
}

struct salus_trainer {
    sl_train t;
    unsigned n_feeds;
};

static void trainer_error(salus_session *s, const char *msg)
{
    if (s->client)
        snprintf(s->client->last_error, sizeof s->client->last_error, "%s", msg);
}

/* The graph's trainable parameters: f32 params that no op writes in place
 * (those are state, like batchnorm's running statistics). */
static int find_trainables(sl_train *t, char *err, size_t len)
{
    size_t nv = sl_graph_n_values(t->g), nops = sl_graph_n_ops(t->g);
    uint8_t *written = sl_calloc(nv ? nv : 1, 1);
    t->params = sl_calloc(nv ? nv : 1, sizeof *t->params);
    if (!written || !t->params) {
        sl_free(written);
        return seterr(err, len, "out of memory"), SL_ENOMEM;
    }
    for (size_t j = 0; j < nops; j++) {
        sl_graph_op o;
        sl_graph_op_info(t->g, j, &o);
        for (unsigned i = 0; i < o.n_in; i++)
            if ((sl_op_get(o.id)->mutates >> i) & 1)
                written[o.in[i]] = 1;
    }
    int rc = SL_OK;
    for (salus_value v = 0; v < nv && rc == SL_OK; v++) {
        sl_graph_value info;
        sl_graph_value_info(t->g, v, &info);
        if (info.kind != SL_GRAPH_PARAM || info.shape.dtype != SL_F32 || written[v])
            continue;
        for (unsigned k = 0; k < t->n_params; k++)
            if (t->params[k].tensor == info.tensor_id)
                rc = seterr(err, len,
                            "tensor %llu is a parameter of the graph twice (values %u and %u); "
                            "use one salus_graph_param per tensor",
                            (unsigned long long) info.tensor_id, t->params[k].value, v);
        t->params[t->n_params++] =
            (sl_trainable){.tensor = info.tensor_id, .value = v, .shape = info.shape};
    }
    sl_free(written);
    return rc;
}

int salus_graph_train(salus_session *s, const salus_graph *forward, int loss_kind,
                      salus_value output, const salus_optimizer *opt, salus_trainer **out)
{
    char err[512] = "";
    if (!s || !forward || !out)
        return SL_EINVAL;
    salus_trainer *tr = sl_calloc(1, sizeof *tr);
    if (!tr)
        return SL_ENOMEM;
    sl_train *t = &tr->t;
    t->session = s;
    int rc = sl_train_resolve(opt, &t->opt, err, sizeof err);
    sl_graph_value ov;
    if (rc == SL_OK && (salus_graph_error(forward) || !(t->g = sl_graph_clone(forward))))
        rc = seterr(err, sizeof err, "%s",
                    salus_graph_error(forward) ? salus_graph_error(forward) : "out of memory");
    if (rc == SL_OK &&
        (sl_graph_value_info(forward, output, &ov) != SL_OK || ov.shape.dtype != SL_F32))
        rc = seterr(err, sizeof err, "output %u is not an f32 value of the graph", output);
    if (rc == SL_OK && t->opt.precision != SALUS_F32) {
        salus_graph *mixed;
        salus_value *map;
        rc = sl_autocast(forward, t->opt.precision, &mixed, &map, err, sizeof err);
        if (rc == SL_OK) {
            salus_graph_free(t->g);
            t->g = mixed;
            /* the loss takes the output in f32, as autocast's losses do */
            output = sl_autocast_to(t->g, map[output], SL_F32);
            sl_free(map);
        }
    }
    if (rc == SL_OK) {
        sl_graph_value in;
        for (salus_value v = 0; sl_graph_value_info(forward, v, &in) == SL_OK; v++)
            tr->n_feeds += in.kind == SL_GRAPH_INPUT;
        int64_t dims[SL_MAX_DIMS];
        for (unsigned d = 0; d < ov.shape.ndim; d++)
            dims[d] = ov.shape.dims[d];
        if (loss_kind == SALUS_LOSS_SOFTMAX_XENT) {
            if (ov.shape.ndim != 2)
                rc = seterr(err, sizeof err, "softmax cross-entropy needs [N, classes] logits");
            salus_value labels = salus_graph_input(t->g, SALUS_I32, 1, dims);
            t->loss = salus_graph_op(t->g, "softmax_xent", 2, (salus_value[]){output, labels}, 0,
                                     NULL, 0, NULL);
            tr->n_feeds++;
        } else if (loss_kind == SALUS_LOSS_MSE) {
            salus_value target = salus_graph_input(t->g, SALUS_F32, ov.shape.ndim, dims);
            t->loss = salus_graph_op(t->g, "mse_loss", 2, (salus_value[]){output, target}, 0, NULL,
                                     0, NULL);
            tr->n_feeds++;
        } else if (loss_kind == SALUS_LOSS_SCALAR) {
            t->loss = output;
        } else {
            rc = seterr(err, sizeof err, "loss kind %d is not a SALUS_LOSS_*", loss_kind);
        }
        if (rc == SL_OK && salus_graph_error(t->g))
            rc = seterr(err, sizeof err, "%s", salus_graph_error(t->g));
    }
    if (rc == SL_OK)
        rc = find_trainables(t, err, sizeof err);
    if (rc == SL_OK)
        rc = sl_train_emit(t, err, sizeof err);
    if (rc == SL_OK && (rc = salus_graph_register(s, t->g, NULL)) != SL_OK)
        snprintf(err, sizeof err, "registering the training graph: %s",
                 s->client ? salus_last_error(s->client) : sl_strerror(rc));
    if (rc) {
        trainer_error(s, err);
        salus_trainer_free(tr);
        return rc;
    }
    *out = tr;
    return SL_OK;
}

const salus_graph *salus_trainer_graph(const salus_trainer *tr)
{
    return tr->t.g;
}

salus_value salus_trainer_loss(const salus_trainer *tr)
{
    return tr->t.loss;
}

unsigned salus_trainer_param_count(const salus_trainer *tr)
{
    return tr->t.n_params;
}

uint64_t salus_trainer_param_tensor(const salus_trainer *tr, unsigned i)
{
    return i < tr->t.n_params ? tr->t.params[i].tensor : 0;
}

int salus_trainer_step(salus_trainer *tr, const void *const *feeds, float *loss)
{
    float l;
    void *outs[] = {&l};
    salus_run_write w = {0};
    unsigned n_w = sl_train_lr_write(&tr->t, &w);
    int rc = salus_run_ex(tr->t.session, tr->t.g, feeds, 1, &tr->t.loss, outs, n_w, &w);
    if (rc == SL_OK && n_w)
        tr->t.lr_pending = false;
    if (rc == SL_OK && loss)
        *loss = l;
    return rc;
}

int salus_trainer_amp_state(salus_trainer *tr, float *scale, int64_t *skipped)
{
    return sl_train_amp_state(&tr->t, scale, skipped);
}

void salus_trainer_free(salus_trainer *tr)
{
    if (!tr)
        return;
    salus_graph_free(tr->t.g);
    sl_free(tr->t.params);
    sl_free(tr);
}

int sl_train_set_lr(sl_train *t, float lr)
{
    char *msg = t->session->client ? t->session->client->last_error : NULL;
    size_t len = msg ? sizeof t->session->client->last_error : 0;
    if (!t->lr_tensor) {
        if (msg)
            snprintf(msg, len, "the learning rate is fixed: build with SALUS_OPT_LR_PER_STEP");
        return SL_EINVAL;
    }
    if (!(lr >= 0) || !isfinite(lr)) {
        if (msg)
            snprintf(msg, len, "learning rate %g must be finite and >= 0", (double) lr);
        return SL_EINVAL;
    }
    t->lr_next = lr;
    t->lr_pending = true;
    t->opt.lr = lr;
    return SL_OK;
}

unsigned sl_train_lr_write(const sl_train *t, salus_run_write *w)
{
    if (!t->lr_pending)
        return 0;
    *w = (salus_run_write){.tensor = t->lr_tensor, .data = &t->lr_next, .bytes = sizeof t->lr_next};
    return 1;
}

int sl_train_lr_flush(sl_train *t)
{
    if (!t->lr_pending)
        return SL_OK;
    int rc = salus_tensor_write(t->session, t->lr_tensor, &t->lr_next, sizeof t->lr_next);
    if (rc == SL_OK)
        t->lr_pending = false;
    return rc;
}

int salus_trainer_set_lr(salus_trainer *tr, float lr)
{
    return sl_train_set_lr(&tr->t, lr);
}
