/* Mixed-precision training (salus_optimizer.precision) through a real
 * salusd on the cpu device: the graphs the nn helpers and salus_graph_train
 * build follow autocast's rules (read back op by op), bf16 training tracks
 * f32 training from the same weights, and f16's loss scaling skips an
 * overflowing step and grows its scale after 2000 clean ones. */
#include "client_internal.h"
#include "harness.h"
#include "ops.h"
#include "sl_test.h"

#include <salus/salus.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sl_test_server server;

static void rand_fill(float *x, size_t n, uint32_t *seed, float scale)
{
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        x[i] = scale * ((float) (*seed >> 8) / (float) (1u << 24));
    }
}

static unsigned dtype_of(const salus_graph *g, salus_value v)
{
    sl_graph_value info;
    assert_int_equal(sl_graph_value_info(g, v, &info), SL_OK);
    return info.shape.dtype;
}

static bool is(unsigned id, const char *name)
{
    return strcmp(sl_op_get(id)->name, name) == 0;
}

/* Checks a training graph against autocast's rules: matmuls and
 * convolutions (forward and backward) read bf16, losses, batch norm and
 * optimizer updates read f32, and every cast lies between the two. Returns
 * the number of casts. */
static int check_autocast(const salus_graph *g)
{
    int casts = 0, half_ops = 0;
    for (size_t j = 0; j < sl_graph_n_ops(g); j++) {
        sl_graph_op o;
        sl_graph_op_info(g, j, &o);
        const sl_op_def *d = sl_op_get(o.id);
        bool half = is(o.id, "matmul") || is(o.id, "conv2d") || is(o.id, "conv2d_grad_input") ||
                    is(o.id, "conv2d_grad_filter");
        bool f32 = !d->dtypes || d->group == SL_OP_GROUP_OPTIM;
        casts += is(o.id, "cast");
        for (unsigned i = 0; i < o.n_in; i++) {
            unsigned dt = dtype_of(g, o.in[i]);
            if (dt == SL_I32)
                continue;
            if (half) {
                half_ops++;
                assert_int_equal(dt, SL_BF16);
            }
            if (f32 && dt != SL_F32) {
                fprintf(stderr, "op %zu (%s) reads %s\n", j, d->name, sl_dtype_name(dt));
                fail();
            }
        }
    }
    assert_true(half_ops > 0);
    return casts;
}

static salus_model *small_cnn(void)
{
    salus_model *m = salus_model_new(3, (int64_t[]){1, 8, 8});
    assert_non_null(m);
    salus_model_conv2d(m, 4, 3, 1, 1);
    salus_model_relu(m);
    salus_model_maxpool(m, 2, 2);
    salus_model_batchnorm(m);
    salus_model_flatten(m);
    salus_model_dense(m, 16);
    salus_model_relu(m);
    salus_model_dense(m, 3);
    assert_null(salus_model_error(m));
    return m;
}

#define BATCH 16
#define PIXELS 64

/* Images whose class is where their brightest quarter lies. */
static void batch_of(uint32_t *seed, float *x, int32_t *y)
{
    rand_fill(x, BATCH * PIXELS, seed, 0.3f);
    for (int b = 0; b < BATCH; b++) {
        y[b] = (int32_t) (*seed >> 3) % 3;
        *seed = *seed * 1664525u + 1013904223u;
        for (int p = 0; p < PIXELS / 4; p++)
            x[b * PIXELS + y[b] * (PIXELS / 4) + p] += 0.7f;
    }
}

/* The nn helpers in bf16: the training graph follows autocast, its
 * parameters stay f32 tensors, and 30 steps from the same weights and
 * batches give losses within bf16's rounding of f32's, falling. */
static void nn_bf16_follows_autocast_and_tracks_f32(void **state)
{
    (void) state;
    sl_test_env e;
    sl_test_env_open(&server, &e);
    salus_model *m[2];
    for (int k = 0; k < 2; k++) {
        salus_optimizer o = {.kind = SALUS_MOMENTUM,
                             .lr = 0.05f,
                             .momentum = 0.9f,
                             .precision = k ? SALUS_BF16 : SALUS_F32};
        m[k] = small_cnn();
        assert_int_equal(salus_model_compile(m[k], e.s, &o, BATCH, BATCH, 7), SALUS_OK);
    }
    int casts = check_autocast(salus_model_training_graph(m[1]));
    assert_true(casts >= 6); /* input, 2 weights, 2 biases down; logits up; ... */
    const salus_graph *f32g = salus_model_training_graph(m[0]);
    for (size_t j = 0; j < sl_graph_n_ops(f32g); j++) {
        sl_graph_op o;
        sl_graph_op_info(f32g, j, &o);
        assert_false(is(o.id, "cast"));
    }
    /* master weights, batch-norm statistics and optimizer state: f32 */
    const salus_graph *g = salus_model_training_graph(m[1]);
    sl_graph_value info;
    int params = 0;
    for (salus_value v = 0; sl_graph_value_info(g, v, &info) == SL_OK; v++)
        if (info.kind == SL_GRAPH_PARAM) {
            params++;
            assert_int_equal(info.shape.dtype, SL_F32);
        }
    assert_true(params >= 8);
    uint32_t seed = 11;
    float x[BATCH * PIXELS], loss[2], first = 0, last = 0;
    int32_t y[BATCH];
    for (int s = 0; s < 30; s++) {
        batch_of(&seed, x, y);
        for (int k = 0; k < 2; k++)
            assert_int_equal(salus_model_train_step(m[k], x, y, &loss[k]), SALUS_OK);
        /* the first steps agree to bf16's rounding; later the two runs
         * part as any two orders of summation do in training, and both
         * learn */
        if (s < 4)
            assert_true(fabsf(loss[1] - loss[0]) <= 0.03f * loss[0] + 0.01f);
        if (s == 0)
            first = loss[1];
        last = loss[1];
    }
    assert_true(last < 0.1f * first);
    int32_t pred[BATCH];
    assert_int_equal(salus_model_predict(m[1], x, pred), SALUS_OK);
    int right = 0;
    for (int b = 0; b < BATCH; b++)
        right += pred[b] == y[b];
    assert_true(right >= BATCH * 3 / 4);
    assert_int_equal(salus_model_amp_state(m[1], NULL, NULL), SALUS_EINVAL);
    for (int k = 0; k < 2; k++)
        salus_model_free(m[k]);
    sl_test_env_close(&e);
}

/* A builder's graph through salus_graph_train in bf16, Adam: the same
 * rules, and the first loss equals f32's within bf16's rounding. */
static void trainer_bf16_adam(void **state)
{
    (void) state;
    sl_test_env e;
    sl_test_env_open(&server, &e);
    float w0[PIXELS * 3];
    uint32_t seed = 5;
    rand_fill(w0, PIXELS * 3, &seed, 0.1f);
    float loss[2][20];
    for (int k = 0; k < 2; k++) {
        uint64_t w;
        assert_int_equal(salus_tensor_create(e.s, SALUS_F32, 2, (int64_t[]){PIXELS, 3}, w0, &w),
                         SALUS_OK);
        salus_graph *g = salus_graph_new();
        salus_value x = salus_graph_input(g, SALUS_F32, 2, (int64_t[]){BATCH, PIXELS});
        salus_value p = salus_graph_param(g, w, SALUS_F32, 2, (int64_t[]){PIXELS, 3});
        salus_value logits =
            salus_graph_op(g, "matmul", 2, (salus_value[]){x, p}, 0, NULL, 0, NULL);
        salus_optimizer o = {
            .kind = SALUS_ADAM, .lr = 0.01f, .precision = k ? SALUS_BF16 : SALUS_F32};
        salus_trainer *t;
        assert_int_equal(salus_graph_train(e.s, g, SALUS_LOSS_SOFTMAX_XENT, logits, &o, &t),
                         SALUS_OK);
        if (k)
            assert_true(check_autocast(salus_trainer_graph(t)) >= 3);
        uint32_t ds = 3;
        float xb[BATCH * PIXELS];
        int32_t yb[BATCH];
        for (int s = 0; s < 20; s++) {
            batch_of(&ds, xb, yb);
            assert_int_equal(salus_trainer_step(t, (const void *[]){xb, yb}, &loss[k][s]),
                             SALUS_OK);
        }
        salus_trainer_free(t);
        salus_graph_free(g);
    }
    for (int s = 0; s < 20; s++)
        assert_true(fabsf(loss[1][s] - loss[0][s]) <= 0.02f * loss[0][s] + 0.005f);
    assert_true(loss[1][19] < loss[1][0]);
    sl_test_env_close(&e);
}

/* f16: GradScaler's rules in the graph. An overflowing batch changes no
 * weight and no optimizer state and halves the scale; 2000 clean steps
 * double it. */
static void f16_loss_scaling(void **state)
{
    (void) state;
    sl_test_env e;
    sl_test_env_open(&server, &e);
    float w0[4 * 2] = {0.1f, -0.2f, 0.3f, 0.05f, -0.1f, 0.2f, 0.0f, 0.1f};
    uint64_t w;
    assert_int_equal(salus_tensor_create(e.s, SALUS_F32, 2, (int64_t[]){4, 2}, w0, &w), SALUS_OK);
    salus_graph *g = salus_graph_new();
    salus_value x = salus_graph_input(g, SALUS_F32, 2, (int64_t[]){2, 4});
    salus_value p = salus_graph_param(g, w, SALUS_F32, 2, (int64_t[]){4, 2});
    salus_value logits = salus_graph_op(g, "matmul", 2, (salus_value[]){x, p}, 0, NULL, 0, NULL);
    salus_optimizer o = {.kind = SALUS_ADAM, .lr = 1e-4f, .precision = SALUS_F16};
    salus_trainer *t;
    assert_int_equal(salus_graph_train(e.s, g, SALUS_LOSS_SOFTMAX_XENT, logits, &o, &t), SALUS_OK);
    float scale;
    int64_t skipped;
    assert_int_equal(salus_trainer_amp_state(t, &scale, &skipped), SALUS_OK);
    assert_true(scale == 65536.0f && skipped == 0);

    float good[8] = {1, 0, 0, 1, 0, 1, 1, 0}, bad[8], before[8], after[8], loss;
    for (int i = 0; i < 8; i++)
        bad[i] = 1e5f; /* beyond f16's largest finite value, 65504 */
    int32_t y[2] = {0, 1};
    assert_int_equal(salus_trainer_step(t, (const void *[]){good, y}, &loss), SALUS_OK);
    assert_true(isfinite(loss));
    assert_int_equal(salus_tensor_read(e.s, w, before, sizeof before), SALUS_OK);
    assert_int_equal(salus_trainer_step(t, (const void *[]){bad, y}, &loss), SALUS_OK);
    assert_int_equal(salus_tensor_read(e.s, w, after, sizeof after), SALUS_OK);
    assert_memory_equal(before, after, sizeof before);
    assert_int_equal(salus_trainer_amp_state(t, &scale, &skipped), SALUS_OK);
    assert_true(scale == 32768.0f && skipped == 1);
    /* salusd counted the skipped step for status and metrics */
    char *json = NULL;
    assert_int_equal(salus_status_json(e.c, &json), SALUS_OK);
    assert_non_null(strstr(json, "\"skipped_steps\":1"));
    salus_free(json);
    /* Adam's moments and step were left alone too: the next clean step is
     * the second Adam step, whose size is lr (bias-corrected) per element */
    assert_int_equal(salus_trainer_step(t, (const void *[]){good, y}, &loss), SALUS_OK);
    assert_int_equal(salus_tensor_read(e.s, w, after, sizeof after), SALUS_OK);
    for (int i = 0; i < 8; i++)
        assert_true(fabsf(after[i] - before[i]) <= 1.5e-4f);
    for (int s = 0; s < 1999; s++)
        assert_int_equal(salus_trainer_step(t, (const void *[]){good, y}, NULL), SALUS_OK);
    assert_int_equal(salus_trainer_amp_state(t, &scale, &skipped), SALUS_OK);
    assert_true(scale == 65536.0f && skipped == 1);
    salus_trainer_free(t);
    salus_graph_free(g);
    sl_test_env_close(&e);
}

SL_TEST_SERVER_MAIN(server, "mixed", sl_test_group_start,
                    cmocka_unit_test(nn_bf16_follows_autocast_and_tracks_f32),
                    cmocka_unit_test(trainer_bf16_adam), cmocka_unit_test(f16_loss_scaling))
