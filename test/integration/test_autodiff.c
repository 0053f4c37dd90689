/* Automatic differentiation and the training API through a real salusd:
 * gradients of a graph against finite differences, graphs built with the
 * C builder and trained by salus_graph_train against the nn models (same
 * weights, same data: the same losses bit for bit) and against a backward
 * pass written by hand, the optimisers' weight decay, beta1 = 0 and
 * per-step learning rates against their formulas, checkpoints, and errors
 * that name their cause. */
#include "harness.h"
#include "sl_test.h"

#include <salus/salus.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static sl_test_server server;

static void rand_fill(float *x, size_t n, uint32_t *seed, float scale)
{
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        x[i] = scale * ((float) (*seed >> 8) / (float) (1u << 24) - 0.5f);
    }
}

#define OP(g, type, ...)                                                                           \
    salus_graph_op((g), (type), sizeof((salus_value[]){__VA_ARGS__}) / sizeof(salus_value),        \
                   (salus_value[]){__VA_ARGS__}, 0, NULL, 0, NULL)

/* A persistent tensor holding the values of the model's tensor `name`. */
static salus_value copy_param(sl_test_env *e, salus_graph *g, salus_model *m, const char *name,
                              uint64_t *id_out)
{
    int i = salus_model_tensor_find(m, name), ndim;
    assert_true(i >= 0);
    int64_t dims[SALUS_MAX_DIMS];
    assert_int_equal(salus_model_tensor_info(m, i, NULL, &ndim, dims, NULL), SALUS_OK);
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (size_t) dims[d];
    float *v = malloc(n * sizeof *v);
    assert_int_equal(salus_model_tensor_read(m, i, v, n * sizeof *v), SALUS_OK);
    uint64_t id;
    assert_int_equal(salus_tensor_create(e->s, SALUS_F32, ndim, dims, v, &id), SALUS_OK);
    free(v);
    if (id_out)
        *id_out = id;
    return salus_graph_param(g, id, SALUS_F32, ndim, dims);
}

/* Trains the nn model and the builder's trainer on the same batches; their
 * losses must agree bit for bit. */
static void train_both(salus_model *m, salus_trainer *t, int batch, int pixels, int classes,
                       int steps)
{
    uint32_t seed = 7;
    float *x = malloc(sizeof(float) * (size_t) (batch * pixels));
    int32_t *labels = malloc(sizeof(int32_t) * (size_t) batch);
    for (int step = 0; step < steps; step++) {
        rand_fill(x, (size_t) (batch * pixels), &seed, 2.0f);
        for (int i = 0; i < batch; i++)
            labels[i] = (int32_t) ((seed >> (i % 20)) % (uint32_t) classes);
        float l_nn, l_ad;
        assert_int_equal(salus_model_train_step(m, x, labels, &l_nn), SALUS_OK);
        const void *feeds[] = {x, labels};
        assert_int_equal(salus_trainer_step(t, feeds, &l_ad), SALUS_OK);
        if (memcmp(&l_nn, &l_ad, sizeof l_nn) != 0)
            fail_msg("step %d: nn loss %.9g, salus_graph_train loss %.9g", step, (double) l_nn,
                     (double) l_ad);
    }
    free(x);
    free(labels);
}

static void mlp_by_the_builder_trains_as_nn(void **state)
{
    (void) state;
    enum { B = 16, IN = 20, H = 12, K = 5 };
    sl_test_env e;
    sl_test_env_open(&server, &e);
    const salus_optimizer opts[] = {
        {.kind = SALUS_MOMENTUM, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f},
        {.kind = SALUS_ADAM, .lr = 0.01f, .weight_decay = 1e-3f},
        {.kind = SALUS_SGD, .lr = 0.1f, .weight_decay = 1e-2f},
    };
    for (size_t o = 0; o < sizeof opts / sizeof opts[0]; o++) {
        salus_model *m = salus_model_new(1, (int64_t[]){IN});
        salus_model_dense(m, H);
        salus_model_relu(m);
        salus_model_dense(m, H);
        salus_model_tanh(m);
        salus_model_dense(m, K);
        if (salus_model_compile(m, e.s, &opts[o], B, B, 3))
            fail_msg("compile: %s", salus_model_error(m));
        salus_graph *g = salus_graph_new();
        salus_value x = salus_graph_input(g, SALUS_F32, 2, (int64_t[]){B, IN});
        /* relu_mask, as nn uses in training: the same graph, so the same
         * plan (peak and in-place reuse) is expected too */
        salus_value h =
            OP(g, "relu_mask",
               OP(g, "bias_add", OP(g, "matmul", x, copy_param(&e, g, m, "0.weight", NULL)),
                  copy_param(&e, g, m, "0.bias", NULL)));
        h = OP(g, "tanh",
               OP(g, "bias_add", OP(g, "matmul", h, copy_param(&e, g, m, "2.weight", NULL)),
                  copy_param(&e, g, m, "2.bias", NULL)));
        salus_value logits =
            OP(g, "bias_add", OP(g, "matmul", h, copy_param(&e, g, m, "4.weight", NULL)),
               copy_param(&e, g, m, "4.bias", NULL));
        salus_trainer *t;
        if (salus_graph_train(e.s, g, SALUS_LOSS_SOFTMAX_XENT, logits, &opts[o], &t))
            fail_msg("salus_graph_train: %s", salus_last_error(e.c));
        assert_int_equal(salus_trainer_param_count(t), 6);
        uint64_t peak[2], naive[2];
        assert_int_equal(salus_graph_memory(salus_model_training_graph(m), &peak[0], &naive[0]),
                         SALUS_OK);
        assert_int_equal(salus_graph_memory(salus_trainer_graph(t), &peak[1], &naive[1]), SALUS_OK);
        assert_int_equal(peak[0], peak[1]);
        assert_int_equal(naive[0], naive[1]);
        assert_true(peak[1] < naive[1]); /* ephemeral memory is reused */
        train_both(m, t, B, IN, K, 5);
        salus_trainer_free(t);
        salus_graph_free(g);
        salus_model_free(m);
    }
    sl_test_env_close(&e);
}

static void cnn_by_the_builder_trains_as_nn(void **state)
{
    (void) state;
    enum { B = 8, C = 2, HW = 8, F = 4, K = 5 };
    sl_test_env e;
    sl_test_env_open(&server, &e);
    const salus_optimizer opts[] = {{.kind = SALUS_MOMENTUM, .lr = 0.05f, .momentum = 0.9f},
                                    {.kind = SALUS_ADAM, .lr = 0.01f}};
    for (size_t o = 0; o < 2; o++) {
        salus_model *m = salus_model_new(3, (int64_t[]){C, HW, HW});
        salus_model_conv2d(m, F, 3, 1, 1);
        salus_model_batchnorm(m);
        salus_model_relu(m);
        salus_model_maxpool(m, 2, 2);
        salus_model_flatten(m);
        salus_model_dense(m, K);
        if (salus_model_compile(m, e.s, &opts[o], B, B, 5))
            fail_msg("compile: %s", salus_model_error(m));
        salus_graph *g = salus_graph_new();
        salus_value x = salus_graph_input(g, SALUS_F32, 4, (int64_t[]){B, C, HW, HW});
        const int64_t conv[] = {1, 1, 1, 1, 1, 1};
        salus_value y = salus_graph_op(g, "conv2d", 2,
                                       (salus_value[]){x, copy_param(&e, g, m, "0.weight", NULL)},
                                       6, conv, 0, NULL);
        y = OP(g, "channel_bias_add", y, copy_param(&e, g, m, "0.bias", NULL));
        const float bn[] = {1e-5f, 0.9f};
        salus_value bnw = copy_param(&e, g, m, "1.weight", NULL),
                    bnb = copy_param(&e, g, m, "1.bias", NULL),
                    rm = copy_param(&e, g, m, "1.running_mean", NULL),
                    rv = copy_param(&e, g, m, "1.running_var", NULL);
        y = salus_graph_op(g, "batchnorm", 5, (salus_value[]){y, bnw, bnb, rm, rv}, 0, NULL, 2, bn);
        const int64_t pool[] = {2, 2, 2, 2};
        y = salus_graph_op(g, "maxpool", 1, &y, 4, pool, 0, NULL);
        y = OP(g, "relu", y); /* after the pool, as nn places it */
        const int64_t flat[] = {B, F * (HW / 2) * (HW / 2)};
        y = salus_graph_op(g, "reshape", 1, &y, 2, flat, 0, NULL);
        salus_value logits =
            OP(g, "bias_add", OP(g, "matmul", y, copy_param(&e, g, m, "5.weight", NULL)),
               copy_param(&e, g, m, "5.bias", NULL));
        salus_trainer *t;
        if (salus_graph_train(e.s, g, SALUS_LOSS_SOFTMAX_XENT, logits, &opts[o], &t))
            fail_msg("salus_graph_train: %s", salus_last_error(e.c));
        /* running statistics are written in place: state, not parameters */
        assert_int_equal(salus_trainer_param_count(t), 6);
        train_both(m, t, B, C * HW * HW, K, 4);
        salus_trainer_free(t);
        salus_graph_free(g);
        salus_model_free(m);
    }
    sl_test_env_close(&e);
}

/* A one-hidden-layer MLP under SGD with its backward pass written by hand
 * (as the nn helpers did before automatic differentiation) against the
 * same model trained by salus_graph_train. */
static void hand_written_backward_agrees(void **state)
{
    (void) state;
    enum { B = 8, IN = 10, H = 6, K = 4, STEPS = 5 };
    sl_test_env e;
    sl_test_env_open(&server, &e);
    uint32_t seed = 3;
    float w1[IN * H], b1[H] = {0}, w2[H * K], b2[K] = {0};
    rand_fill(w1, IN * H, &seed, 1.0f);
    rand_fill(w2, H * K, &seed, 1.0f);
    uint64_t ids[2][4];
    salus_graph *g[2];
    salus_value loss[2] = {0};
    salus_trainer *t = NULL;
    for (int k = 0; k < 2; k++) {
        assert_int_equal(salus_tensor_create(e.s, SALUS_F32, 2, (int64_t[]){IN, H}, w1, &ids[k][0]),
                         0);
        assert_int_equal(salus_tensor_create(e.s, SALUS_F32, 1, (int64_t[]){H}, b1, &ids[k][1]), 0);
        assert_int_equal(salus_tensor_create(e.s, SALUS_F32, 2, (int64_t[]){H, K}, w2, &ids[k][2]),
                         0);
        assert_int_equal(salus_tensor_create(e.s, SALUS_F32, 1, (int64_t[]){K}, b2, &ids[k][3]), 0);
        g[k] = salus_graph_new();
        salus_value x = salus_graph_input(g[k], SALUS_F32, 2, (int64_t[]){B, IN});
        salus_value p[4] = {salus_graph_param(g[k], ids[k][0], SALUS_F32, 2, (int64_t[]){IN, H}),
                            salus_graph_param(g[k], ids[k][1], SALUS_F32, 1, (int64_t[]){H}),
                            salus_graph_param(g[k], ids[k][2], SALUS_F32, 2, (int64_t[]){H, K}),
                            salus_graph_param(g[k], ids[k][3], SALUS_F32, 1, (int64_t[]){K})};
        salus_value z = OP(g[k], "bias_add", OP(g[k], "matmul", x, p[0]), p[1]);
        salus_value h = OP(g[k], "sigmoid", z);
        salus_value logits = OP(g[k], "bias_add", OP(g[k], "matmul", h, p[2]), p[3]);
        const salus_optimizer sgd = {.kind = SALUS_SGD, .lr = 0.5f};
        if (k == 1) {
            if (salus_graph_train(e.s, g[k], SALUS_LOSS_SOFTMAX_XENT, logits, &sgd, &t))
                fail_msg("%s", salus_last_error(e.c));
            continue;
        }
        salus_value labels = salus_graph_input(g[k], SALUS_I32, 1, (int64_t[]){B});
        loss[k] = OP(g[k], "softmax_xent", logits, labels);
        salus_value dl = OP(g[k], "softmax_xent_grad", loss[k] + 1, labels);
        const int64_t ta[] = {1, 0}, tb[] = {0, 1};
        salus_value dw2 = salus_graph_op(g[k], "matmul", 2, (salus_value[]){h, dl}, 2, ta, 0, NULL);
        salus_value db2 = OP(g[k], "bias_grad", dl);
        salus_value dh =
            salus_graph_op(g[k], "matmul", 2, (salus_value[]){dl, p[2]}, 2, tb, 0, NULL);
        salus_value dz = OP(g[k], "sigmoid_grad", dh, h);
        salus_value dw1 = salus_graph_op(g[k], "matmul", 2, (salus_value[]){x, dz}, 2, ta, 0, NULL);
        salus_value db1 = OP(g[k], "bias_grad", dz);
        const float lr[] = {0.5f};
        salus_value grads[4] = {dw1, db1, dw2, db2};
        for (int i = 0; i < 4; i++)
            salus_graph_op(g[k], "sgd_update", 2, (salus_value[]){p[i], grads[i]}, 0, NULL, 1, lr);
        assert_int_equal(salus_graph_register(e.s, g[k], NULL), SALUS_OK);
    }
    float x[B * IN];
    int32_t labels[B];
    for (int step = 0; step < STEPS; step++) {
        rand_fill(x, B * IN, &seed, 2.0f);
        for (int i = 0; i < B; i++)
            labels[i] = (int32_t) ((seed >> i) % K);
        float l[2];
        const void *feeds[] = {x, labels};
        void *out[] = {&l[0]};
        assert_int_equal(salus_run(e.s, g[0], feeds, 1, &loss[0], out), SALUS_OK);
        assert_int_equal(salus_trainer_step(t, feeds, &l[1]), SALUS_OK);
        assert_memory_equal(&l[0], &l[1], sizeof l[0]);
    }
    for (int i = 0; i < 4; i++) {
        float a[IN * H], b[IN * H];
        size_t bytes = (i == 0 ? IN * H : i == 1 ? H : i == 2 ? H * K : K) * sizeof(float);
        assert_int_equal(salus_tensor_read(e.s, ids[0][i], a, bytes), SALUS_OK);
        assert_int_equal(salus_tensor_read(e.s, ids[1][i], b, bytes), SALUS_OK);
        assert_memory_equal(a, b, bytes);
    }
    salus_trainer_free(t);
    salus_graph_free(g[0]);
    salus_graph_free(g[1]);
    sl_test_env_close(&e);
}

/* salus_graph_gradients of a graph with a value read twice (the gradients
 * of both paths are summed) against central differences of the same
 * graph's loss, each run through salusd. */
static void gradients_match_finite_differences(void **state)
{
    (void) state;
    enum { B = 4, IN = 5, H = 4, NW1 = IN * H, NW2 = H * H };
    sl_test_env e;
    sl_test_env_open(&server, &e);
    uint32_t seed = 11;
    float w1[NW1], w2[NW2], x[B * IN], target[B * H];
    rand_fill(w1, NW1, &seed, 1.0f);
    rand_fill(w2, NW2, &seed, 1.0f);
    rand_fill(x, B * IN, &seed, 2.0f);
    rand_fill(target, B * H, &seed, 1.0f);
    uint64_t id1, id2;
    assert_int_equal(salus_tensor_create(e.s, SALUS_F32, 2, (int64_t[]){IN, H}, w1, &id1), 0);
    assert_int_equal(salus_tensor_create(e.s, SALUS_F32, 2, (int64_t[]){H, H}, w2, &id2), 0);
    salus_graph *g = salus_graph_new();
    salus_value xv = salus_graph_input(g, SALUS_F32, 2, (int64_t[]){B, IN});
    salus_value tv = salus_graph_input(g, SALUS_F32, 2, (int64_t[]){B, H});
    salus_value p1 = salus_graph_param(g, id1, SALUS_F32, 2, (int64_t[]){IN, H});
    salus_value p2 = salus_graph_param(g, id2, SALUS_F32, 2, (int64_t[]){H, H});
    salus_value h = OP(g, "tanh", OP(g, "matmul", xv, p1));
    /* h feeds both the product and the sum: two paths back to w1 */
    salus_value y = OP(g, "add", OP(g, "sigmoid", OP(g, "matmul", h, p2)), h);
    salus_value loss = OP(g, "mse_loss", y, tv);
    salus_value grads[3];
    if (salus_graph_gradients(g, loss, 3, (salus_value[]){p1, p2, xv}, grads))
        fail_msg("gradients: %s", salus_graph_error(g));
    assert_int_equal(salus_graph_register(e.s, g, NULL), SALUS_OK);
    float d1[NW1], d2[NW2], dx[B * IN], l;
    const void *feeds[] = {x, target};
    void *out[] = {d1, d2, dx, &l};
    assert_int_equal(
        salus_run(e.s, g, feeds, 4, (salus_value[]){grads[0], grads[1], grads[2], loss}, out),
        SALUS_OK);
    /* differences: the loss of the same graph with one value moved */
    const float h_step = 1e-2f;
    float *vals[3] = {w1, w2, x}, *got[3] = {d1, d2, dx};
    int n[3] = {NW1, NW2, B * IN};
    uint64_t ids[2] = {id1, id2};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < n[k]; i++) {
            float keep = vals[k][i], lp[2];
            for (int s = 0; s < 2; s++) {
                vals[k][i] = keep + (s ? -h_step : h_step);
                if (k < 2)
                    assert_int_equal(
                        salus_tensor_write(e.s, ids[k], vals[k], (size_t) n[k] * sizeof(float)),
                        SALUS_OK);
                void *o[] = {&lp[s]};
                assert_int_equal(salus_run(e.s, g, feeds, 1, &loss, o), SALUS_OK);
            }
            vals[k][i] = keep;
            if (k < 2)
                assert_int_equal(
                    salus_tensor_write(e.s, ids[k], vals[k], (size_t) n[k] * sizeof(float)),
                    SALUS_OK);
            double fd = ((double) lp[0] - lp[1]) / (2.0 * h_step);
            if (fabs(fd - got[k][i]) > 2e-3 + 1e-2 * fabs(fd))
                fail_msg("d loss / d %s[%d]: autodiff %.6g, finite differences %.6g",
                         k == 0   ? "w1"
                         : k == 1 ? "w2"
                                  : "x",
                         i, (double) got[k][i], fd);
        }
    salus_graph_free(g);
    sl_test_env_close(&e);
}

/* One step of a linear model, loss mean((x w - t)^2), under each optimiser
 * against its formula computed here in double (PyTorch's semantics). */
typedef struct one_step {
    float w[6], x[2 * 3], t[2 * 2];
} one_step;

static void step_once(sl_test_env *e, const salus_optimizer *o, const one_step *d, float *w_after,
                      float lr2)
{
    uint64_t id;
    assert_int_equal(salus_tensor_create(e->s, SALUS_F32, 2, (int64_t[]){3, 2}, d->w, &id), 0);
    salus_graph *g = salus_graph_new();
    salus_value x = salus_graph_input(g, SALUS_F32, 2, (int64_t[]){2, 3});
    salus_value w = salus_graph_param(g, id, SALUS_F32, 2, (int64_t[]){3, 2});
    salus_trainer *t;
    if (salus_graph_train(e->s, g, SALUS_LOSS_MSE, OP(g, "matmul", x, w), o, &t))
        fail_msg("salus_graph_train: %s", salus_last_error(e->c));
    const void *feeds[] = {d->x, d->t};
    for (int step = 0; step < 2; step++) {
        if (step == 1 && lr2 > 0)
            assert_int_equal(salus_trainer_set_lr(t, lr2), SALUS_OK);
        assert_int_equal(salus_trainer_step(t, feeds, NULL), SALUS_OK);
    }
    assert_int_equal(salus_tensor_read(e->s, id, w_after, sizeof d->w), SALUS_OK);
    salus_trainer_free(t);
    salus_graph_free(g);
}

/* The same two steps in double: kind, lr per step, momentum, wd, betas,
 * eps, decoupled. */
static void reference(const salus_optimizer *o, const one_step *d, double *w, float lr2)
{
    double m[6] = {0}, v[6] = {0}, buf[6] = {0};
    for (int i = 0; i < 6; i++)
        w[i] = d->w[i];
    for (int step = 1; step <= 2; step++) {
        double lr = step == 2 && lr2 > 0 ? lr2 : o->lr, g[6] = {0};
        for (int r = 0; r < 2; r++)
            for (int j = 0; j < 2; j++) {
                double y = 0;
                for (int k = 0; k < 3; k++)
                    y += d->x[r * 3 + k] * w[k * 2 + j];
                double dy = 2 * (y - d->t[r * 2 + j]) / 4;
                for (int k = 0; k < 3; k++)
                    g[k * 2 + j] += d->x[r * 3 + k] * dy;
            }
        for (int i = 0; i < 6; i++) {
            if (o->kind == SALUS_ADAM && (o->flags & SALUS_OPT_DECOUPLED_WD))
                w[i] -= lr * o->weight_decay * w[i];
            else
                g[i] += o->weight_decay * w[i];
            if (o->kind == SALUS_SGD) {
                w[i] -= lr * g[i];
            } else if (o->kind == SALUS_MOMENTUM) {
                buf[i] = o->momentum * buf[i] + g[i];
                w[i] -= lr * buf[i];
            } else {
                m[i] = o->beta1 * m[i] + (1 - o->beta1) * g[i];
                v[i] = o->beta2 * v[i] + (1 - o->beta2) * g[i] * g[i];
                double mh = m[i] / (1 - pow(o->beta1, step)), vh = v[i] / (1 - pow(o->beta2, step));
                w[i] -= lr * mh / (sqrt(vh) + o->eps);
            }
        }
    }
}

static void optimisers_follow_their_formulas(void **state)
{
    (void) state;
    sl_test_env e;
    sl_test_env_open(&server, &e);
    one_step d;
    uint32_t seed = 21;
    rand_fill(d.w, 6, &seed, 2.0f);
    rand_fill(d.x, 6, &seed, 2.0f);
    rand_fill(d.t, 4, &seed, 2.0f);
    const unsigned exact = SALUS_OPT_EXACT;
    const salus_optimizer opts[] = {
        {.kind = SALUS_SGD, .lr = 0.1f, .weight_decay = 0.05f},
        {.kind = SALUS_MOMENTUM, .lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.05f},
        {.kind = SALUS_ADAM,
         .lr = 0.01f,
         .beta1 = 0.9f,
         .beta2 = 0.999f,
         .eps = 1e-8f,
         .weight_decay = 0.1f,
         .flags = exact},
        {.kind = SALUS_ADAM,
         .lr = 0.01f,
         .beta1 = 0.0f,
         .beta2 = 0.99f,
         .eps = 1e-8f,
         .flags = exact}, /* beta1 = 0: RMSprop-like Adam */
        {.kind = SALUS_ADAM,
         .lr = 0.01f,
         .beta1 = 0.9f,
         .beta2 = 0.999f,
         .eps = 1e-8f,
         .weight_decay = 0.1f,
         .flags = exact | SALUS_OPT_DECOUPLED_WD}, /* AdamW */
    };
    for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++)
        for (int per_step = 0; per_step < 2; per_step++) {
            salus_optimizer o = opts[k];
            float lr2 = 0;
            if (per_step) {
                o.flags |= SALUS_OPT_LR_PER_STEP;
                lr2 = o.lr * 0.5f; /* the second step at half the rate */
            }
            float got[6];
            double want[6];
            step_once(&e, &o, &d, got, lr2);
            reference(&o, &d, want, lr2);
            for (int i = 0; i < 6; i++)
                if (fabs(got[i] - want[i]) > 1e-5 * (1 + fabs(want[i])))
                    fail_msg("optimizer %zu%s: w[%d] = %.8g, formula %.8g", k,
                             per_step ? " (lr per step)" : "", i, (double) got[i], want[i]);
        }
    sl_test_env_close(&e);
}

static salus_model *small_cnn(sl_test_env *e, const salus_optimizer *o, int filters)
{
    salus_model *m = salus_model_new(3, (int64_t[]){1, 6, 6});
    salus_model_conv2d(m, filters, 3, 1, 1);
    salus_model_batchnorm(m);
    salus_model_relu(m);
    salus_model_flatten(m);
    salus_model_dense(m, 3);
    if (salus_model_compile(m, e->s, o, 4, 4, 9))
        fail_msg("compile: %s", salus_model_error(m));
    return m;
}

static void run_steps(salus_model *m, int steps, uint32_t seed, float *losses)
{
    float x[4 * 36];
    int32_t labels[4];
    for (int s = 0; s < steps; s++) {
        rand_fill(x, 4 * 36, &seed, 2.0f);
        for (int i = 0; i < 4; i++)
            labels[i] = (int32_t) ((seed >> i) % 3);
        assert_int_equal(salus_model_train_step(m, x, labels, &losses[s]), SALUS_OK);
    }
}

static void checkpoints_resume_training(void **state)
{
    (void) state;
    sl_test_env e;
    sl_test_env_open(&server, &e);
    const salus_optimizer adam = {.kind = SALUS_ADAM, .lr = 0.01f, .flags = SALUS_OPT_LR_PER_STEP};
    salus_model *m = small_cnn(&e, &adam, 2);
    const char *want[] = {"0.weight",       "0.bias",      "1.weight",         "1.running_mean",
                          "1.running_var",  "4.weight",    "0.weight.exp_avg", "4.bias.exp_avg_sq",
                          "optimizer.step", "optimizer.lr"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (salus_model_tensor_find(m, want[i]) < 0)
            fail_msg("no tensor named %s", want[i]);
    int kind, ndim;
    int64_t dims[SALUS_MAX_DIMS];
    assert_int_equal(salus_model_tensor_info(m, salus_model_tensor_find(m, "4.weight"), &kind,
                                             &ndim, dims, NULL),
                     SALUS_OK);
    assert_int_equal(kind, SALUS_TENSOR_PARAM);
    assert_int_equal(ndim, 2);
    assert_int_equal(dims[0], 2 * 36); /* dense weights are [in, out] */
    assert_int_equal(dims[1], 3);

    char path[320];
    snprintf(path, sizeof path, "%s/ckpt.bin", server.dir);
    float first[3], again[3], warm[2];
    run_steps(m, 2, 1, warm);
    assert_int_equal(salus_model_set_lr(m, 0.005f), SALUS_OK);
    assert_int_equal(salus_model_save(m, path), SALUS_OK);
    run_steps(m, 3, 2, first);
    assert_int_equal(salus_model_load(m, path), SALUS_OK);
    run_steps(m, 3, 2, again);
    assert_memory_equal(first, again, sizeof first); /* the lr came back too */

    /* a written parameter is what the next step uses, and reads back */
    int i = salus_model_tensor_find(m, "0.bias");
    float b[2] = {0.25f, -0.5f}, r[2];
    assert_int_equal(salus_model_tensor_write(m, i, b, sizeof b), SALUS_OK);
    assert_int_equal(salus_model_tensor_read(m, i, r, sizeof r), SALUS_OK);
    assert_memory_equal(b, r, sizeof b);
    assert_int_equal(salus_model_tensor_read(m, i, r, 4), SALUS_EINVAL);
    assert_non_null(strstr(salus_last_error(e.c), "0.bias"));

    /* another architecture's checkpoint is refused, naming the tensor */
    salus_model *other = small_cnn(&e, &adam, 3);
    assert_int_equal(salus_model_load(other, path), SALUS_EINVAL);
    assert_non_null(strstr(salus_last_error(e.c), "0.weight"));
    /* and a damaged file, without writing anything */
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    assert_int_equal(truncate(path, size - 3), 0);
    assert_int_equal(salus_model_load(m, path), SALUS_EINVAL);
    assert_non_null(strstr(salus_last_error(e.c), "truncated"));
    assert_int_equal(salus_model_tensor_read(m, i, r, sizeof r), SALUS_OK);
    assert_memory_equal(b, r, sizeof b);
    salus_model_free(other);
    salus_model_free(m);
    sl_test_env_close(&e);
}

static void errors_name_their_cause(void **state)
{
    (void) state;
    sl_test_env e;
    sl_test_env_open(&server, &e);
    salus_graph *g = salus_graph_new();
    uint64_t id;
    assert_int_equal(salus_tensor_create(e.s, SALUS_F32, 2, (int64_t[]){3, 4}, NULL, &id), 0);
    salus_value x = salus_graph_input(g, SALUS_F32, 2, (int64_t[]){2, 3});
    salus_value w = salus_graph_param(g, id, SALUS_F32, 2, (int64_t[]){3, 4});
    salus_value p = OP(g, "softmax", OP(g, "matmul", x, w));
    salus_trainer *t;
    const salus_optimizer sgd = {.kind = SALUS_SGD, .lr = 0.1f};
    assert_int_equal(salus_graph_train(e.s, g, SALUS_LOSS_MSE, p, &sgd, &t), SALUS_EUNSUPPORTED);
    assert_non_null(strstr(salus_last_error(e.c), "softmax"));

    const struct {
        salus_optimizer o;
        const char *says;
    } bad[] = {
        {{.kind = SALUS_ADAM, .lr = 0.1f, .beta1 = 1.0f, .beta2 = 0.9f, .flags = SALUS_OPT_EXACT},
         "betas"},
        {{.kind = SALUS_SGD, .lr = 0.1f, .flags = SALUS_OPT_DECOUPLED_WD}, "AdamW"},
        {{.kind = SALUS_SGD, .lr = 0.1f, .weight_decay = -1}, "weight_decay"},
        {{.kind = SALUS_SGD, .lr = 0}, "lr"},
        {{.kind = 7, .lr = 0.1f}, "kind"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        assert_int_equal(salus_graph_train(e.s, g, SALUS_LOSS_SOFTMAX_XENT, x, &bad[k].o, &t),
                         SALUS_EINVAL);
        if (!strstr(salus_last_error(e.c), bad[k].says))
            fail_msg("bad optimizer %zu: \"%s\" does not say %s", k, salus_last_error(e.c),
                     bad[k].says);
    }
    salus_graph_free(g);
    /* a fixed learning rate cannot be set */
    salus_model *m = small_cnn(&e, &sgd, 2);
    assert_int_equal(salus_model_set_lr(m, 0.01f), SALUS_EINVAL);
    assert_non_null(strstr(salus_last_error(e.c), "SALUS_OPT_LR_PER_STEP"));
    salus_model_free(m);
    sl_test_env_close(&e);
}

static salus_model *fashion_cnn(salus_session *s, int64_t infer_batch)
{
    salus_model *m = salus_model_new(3, (int64_t[]){1, 28, 28});
    salus_model_conv2d(m, 16, 3, 1, 1);
    salus_model_relu(m);
    salus_model_maxpool(m, 2, 2);
    salus_model_conv2d(m, 32, 3, 1, 1);
    salus_model_relu(m);
    salus_model_maxpool(m, 2, 2);
    salus_model_flatten(m);
    salus_model_dense(m, 128);
    salus_model_relu(m);
    salus_model_dense(m, 10);
    const salus_optimizer o = {.kind = SALUS_MOMENTUM, .lr = 0.05f, .momentum = 0.9f};
    if (salus_model_compile(m, s, &o, 16, infer_batch, 1))
        fail_msg("compile: %s", salus_model_error(m));
    return m;
}

/* The Fashion-MNIST CNN at inference batch 1000: its first convolution's
 * oneDNN scratch (about 50 MB) exceeds the lane's 32 MB workspace. The
 * prediction runs in parts and agrees with the same weights run 250 at a
 * time; where not even one sample fits, the error names the op, its bytes
 * and the workspace. */
static void predict_fits_the_lane_workspace(void **state)
{
    (void) state;
    enum { N = 1000, PART = 250 };
    sl_test_env e;
    sl_test_env_open(&server, &e);
    salus_model *big = fashion_cnn(e.s, N), *small = fashion_cnn(e.s, PART);
    float *x = malloc(sizeof(float) * N * 784);
    int32_t *a = malloc(sizeof(int32_t) * N), *b = malloc(sizeof(int32_t) * N);
    uint32_t seed = 5;
    rand_fill(x, (size_t) N * 784, &seed, 2.0f);
    if (salus_model_predict(big, x, a))
        fail_msg("predict at %d: %s", N, salus_last_error(e.c));
    for (int k = 0; k < N / PART; k++)
        assert_int_equal(salus_model_predict(small, x + (size_t) k * PART * 784, b + k * PART),
                         SALUS_OK);
    assert_memory_equal(a, b, sizeof(int32_t) * N);
    salus_model_free(big);
    salus_model_free(small);
    sl_test_env_close(&e);

    sl_test_server tiny;
    sl_test_server_start(&tiny, (const char *const[]){"--framework-per-lane", "4K", NULL});
    salus_client *c = sl_test_connect(&tiny);
    salus_session *s;
    assert_int_equal(salus_session_open(c, NULL, &s), SALUS_OK);
    salus_model *m = fashion_cnn(s, 4);
    assert_int_equal(salus_model_predict(m, x, a), SALUS_EEXHAUSTED);
    const char *why = salus_last_error(c);
    if (!strstr(why, "conv2d needs") || !strstr(why, "lane's workspace has 4096"))
        fail_msg("the error does not name its cause: %s", why);
    salus_model_free(m);
    assert_int_equal(salus_session_close(s), SALUS_OK);
    salus_disconnect(c);
    assert_int_equal(sl_test_server_stop(&tiny), 0);
    free(x);
    free(a);
    free(b);
}

/* Residual blocks refuse what they cannot build, naming the cause: an end
 * without a begin, a shortcut outside a block or twice in one, shapes
 * that differ (both named), blocks nested too deep, a block left open at
 * compile. */
static void residual_blocks_name_their_errors(void **state)
{
    (void) state;
    sl_test_env e;
    sl_test_env_open(&server, &e);
    const salus_optimizer o = {.kind = SALUS_SGD, .lr = 0.1f};
    const int64_t sample[3] = {2, 8, 8};
    static const struct {
        int steps; /* what to do, one digit each from the right: 1 begin, 2 shortcut, 3 end, 4
                      conv(3 filters), 5 flatten+dense(2), 6 compile, 7 a conv with a bad flag */
        const char *says;
    } cases[] = {
        {3, "without a begin"},
        {2, "outside a block"},
        {3221, "has its shortcut already"},
        {341, "[3,8,8] on its main path and [2,8,8]"},
        {6541, "has no end"},
        {111111111, "more than 8 residual blocks"},
        {7, "only SALUS_CONV_NO_BIAS"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        salus_model *m = salus_model_new(3, sample);
        int rc = SALUS_OK;
        for (int steps = cases[k].steps; steps && rc == SALUS_OK; steps /= 10) {
            switch (steps % 10) {
            case 1:
                rc = salus_model_residual_begin(m);
                break;
            case 2:
                rc = salus_model_residual_shortcut(m);
                break;
            case 3:
                rc = salus_model_residual_end(m);
                break;
            case 4:
                rc = salus_model_conv2d(m, 3, 3, 1, 1);
                break;
            case 5:
                if ((rc = salus_model_flatten(m)) == SALUS_OK)
                    rc = salus_model_dense(m, 2);
                break;
            case 6:
                rc = salus_model_compile(m, e.s, &o, 2, 2, 1);
                break;
            case 7:
                rc = salus_model_conv2d_ex(m, 3, 3, 1, 1, 1u << 5);
                break;
            }
        }
        assert_int_equal(rc, SALUS_EINVAL);
        if (!salus_model_error(m) || !strstr(salus_model_error(m), cases[k].says))
            fail_msg("case %zu: %s", k, salus_model_error(m) ? salus_model_error(m) : "(none)");
        salus_model_free(m);
    }
    sl_test_env_close(&e);
}

/* A trained model exported to ONNX, residual blocks included (an identity
 * and a projection shortcut, blocks nested in a main path and in a
 * shortcut) and a convolution without a bias: the file passes the onnx package's checker,
 * and an independent float64 evaluation of it (onnx_eval.py) classifies as
 * salus_model_predict does. */
static void onnx_export_agrees(void **state)
{
    (void) state;
    enum { N = 64 };
    sl_test_env e;
    sl_test_env_open(&server, &e);
    const salus_optimizer o = {.kind = SALUS_ADAM, .lr = 0.01f};
    salus_model *m = salus_model_new(3, (int64_t[]){2, 8, 8});
    salus_model_conv2d(m, 4, 3, 1, 1);
    salus_model_batchnorm(m);
    salus_model_relu(m);
    salus_model_residual_begin(m); /* an identity shortcut */
    salus_model_conv2d(m, 4, 3, 1, 1);
    salus_model_batchnorm(m);
    salus_model_relu(m);
    salus_model_conv2d(m, 4, 3, 1, 1);
    salus_model_residual_end(m);
    salus_model_relu(m);
    salus_model_maxpool(m, 2, 2);
    salus_model_residual_begin(m); /* a projection: 4x4x4 -> 6x2x2 both ways */
    salus_model_conv2d(m, 6, 3, 2, 1);
    salus_model_residual_begin(m); /* nested in the main path */
    salus_model_conv2d(m, 6, 3, 1, 1);
    salus_model_residual_end(m);
    salus_model_residual_shortcut(m);
    salus_model_residual_begin(m); /* nested in the shortcut, a ReLU and pool at its start */
    salus_model_relu(m);
    salus_model_maxpool(m, 1, 1);
    salus_model_residual_end(m);
    salus_model_conv2d_ex(m, 6, 1, 2, 0, SALUS_CONV_NO_BIAS); /* a batchnorm follows */
    salus_model_batchnorm(m);
    salus_model_residual_end(m);
    salus_model_avgpool(m, 2, 1);
    salus_model_flatten(m);
    salus_model_dense(m, 12);
    salus_model_tanh(m);
    salus_model_batchnorm(m);
    salus_model_dense(m, 5);
    if (salus_model_compile(m, e.s, &o, N, N, 4))
        fail_msg("compile: %s", salus_model_error(m));
    float x[N * 128];
    int32_t labels[N], classes[N];
    uint32_t seed = 17;
    for (int step = 0; step < 3; step++) { /* moves weights and statistics */
        rand_fill(x, N * 128, &seed, 2.0f);
        for (int i = 0; i < N; i++)
            labels[i] = (int32_t) ((seed >> (i % 20)) % 5);
        assert_int_equal(salus_model_train_step(m, x, labels, NULL), SALUS_OK);
    }
    rand_fill(x, N * 128, &seed, 2.0f);
    assert_int_equal(salus_model_predict(m, x, classes), SALUS_OK);
    char model[320], xin[320], cls[320], cmd[1400];
    snprintf(model, sizeof model, "%s/model.onnx", server.dir);
    snprintf(xin, sizeof xin, "%s/x.f32", server.dir);
    snprintf(cls, sizeof cls, "%s/classes.i32", server.dir);
    if (salus_model_export_onnx(m, model))
        fail_msg("export: %s", salus_last_error(e.c));
    FILE *f = fopen(xin, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(x, sizeof x, 1, f), 1);
    fclose(f);
    f = fopen(cls, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(classes, sizeof classes, 1, f), 1);
    fclose(f);
    salus_model_free(m);
    sl_test_env_close(&e);
    const char *script = getenv("ONNX_EVAL");
    assert_non_null(script);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' '%s' '%s'", script, model, xin, cls);
    int rc = system(cmd);
    assert_true(rc != -1 && WIFEXITED(rc));
    if (WEXITSTATUS(rc) == 77) {
        fprintf(stderr, "onnx_export_agrees: SKIP: python3-onnx or python3-numpy missing\n");
        skip();
    }
    assert_int_equal(WEXITSTATUS(rc), 0);
}

/* Run.writes: a per-step scalar written by the run itself lands before
 * the first op and stays; a write of the wrong size, of a tensor the
 * session lacks, or too many of them, refuses the run before it starts. */
static void run_writes_scalars_before_the_ops(void **state)
{
    (void) state;
    sl_test_env e;
    sl_test_env_open(&server, &e);
    float one = 1.0f, x[4] = {1, 2, 3, 4}, y[4];
    uint64_t s_id;
    assert_int_equal(salus_tensor_create(e.s, SALUS_F32, 1, (int64_t[]){1}, &one, &s_id), 0);
    salus_graph *g = salus_graph_new();
    salus_value xv = salus_graph_input(g, SALUS_F32, 1, (int64_t[]){4});
    salus_value sv = salus_graph_param(g, s_id, SALUS_F32, 1, (int64_t[]){1});
    salus_value yv = OP(g, "mul_scalar", xv, sv);
    assert_int_equal(salus_graph_register(e.s, g, NULL), SALUS_OK);
    const void *feeds[] = {x};
    void *out[] = {y};
    float three = 3.0f;
    salus_run_write w = {.tensor = s_id, .data = &three, .bytes = sizeof three};
    assert_int_equal(salus_run_ex(e.s, g, feeds, 1, &yv, out, 1, &w), SALUS_OK);
    for (int i = 0; i < 4; i++)
        assert_true(y[i] == 3.0f * x[i]);
    assert_int_equal(salus_run(e.s, g, feeds, 1, &yv, out), SALUS_OK); /* it stays */
    assert_true(y[3] == 12.0f);

    double wide = 2.0;
    w = (salus_run_write){.tensor = s_id, .data = &wide, .bytes = sizeof wide};
    assert_int_equal(salus_run_ex(e.s, g, feeds, 1, &yv, out, 1, &w), SALUS_EINVAL);
    assert_non_null(strstr(salus_last_error(e.c), "whole"));
    w = (salus_run_write){.tensor = s_id + 1000, .data = &three, .bytes = sizeof three};
    assert_int_equal(salus_run_ex(e.s, g, feeds, 1, &yv, out, 1, &w), SALUS_ENOTFOUND);
    salus_run_write many[17];
    for (int i = 0; i < 17; i++)
        many[i] = (salus_run_write){.tensor = s_id, .data = &three, .bytes = sizeof three};
    assert_int_equal(salus_run_ex(e.s, g, feeds, 1, &yv, out, 17, many), SALUS_EINVAL);
    assert_int_equal(salus_run(e.s, g, feeds, 1, &yv, out), SALUS_OK); /* nothing written */
    assert_true(y[3] == 12.0f);
    salus_graph_free(g);
    sl_test_env_close(&e);
}

SL_TEST_SERVER_MAIN(server, "autodiff", sl_test_group_start,
                    cmocka_unit_test(run_writes_scalars_before_the_ops),
                    cmocka_unit_test(mlp_by_the_builder_trains_as_nn),
                    cmocka_unit_test(cnn_by_the_builder_trains_as_nn),
                    cmocka_unit_test(hand_written_backward_agrees),
                    cmocka_unit_test(gradients_match_finite_differences),
                    cmocka_unit_test(optimisers_follow_their_formulas),
                    cmocka_unit_test(checkpoints_resume_training),
                    cmocka_unit_test(errors_name_their_cause),
                    cmocka_unit_test(predict_fits_the_lane_workspace),
                    cmocka_unit_test(residual_blocks_name_their_errors),
                    cmocka_unit_test(onnx_export_agrees))
