/* In-place execution: which ops graph registration lets write
 * their output over a dying input (sl_graph_build on a hand-made session),
 * and, on an embedded server over inproc:// on the cpu device, that fetches
 * of overwritten values and whole training runs give exactly the results
 * they give with in-place execution turned off (cfg.no_inplace). */
#include "graph_msg.h"
#include "served.h"
#include "server.h"
#include "sl_alloc.h"
#include "sl_log.h"
#include "sl_test.h"

#include <salus/salus.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- registration: a session holding two params ---- */

enum { P_MAT = 1, P_VEC = 2 }; /* tensor ids: [4,4] and [4] */

typedef struct fixture {
    sl_session session;
    sl_tensor tensors[2];
} fixture;

static int fixture_setup(void **state)
{
    fixture *f = sl_calloc(1, sizeof *f);
    if (!f)
        return -1;
    f->session.id = 1;
    f->tensors[0] = (sl_tensor){.id = P_MAT, .shape = {.dtype = SL_F32, .ndim = 2, .dims = {4, 4}}};
    f->tensors[1] = (sl_tensor){.id = P_VEC, .shape = {.dtype = SL_F32, .ndim = 1, .dims = {4}}};
    for (int i = 0; i < 2; i++) {
        f->tensors[i].bytes = 256;
        f->tensors[i].addr = (uint64_t) i * 256;
        if (sl_map_put(&f->session.tensors, f->tensors[i].id, &f->tensors[i]) != SL_OK)
            return -1;
    }
    *state = f;
    return 0;
}

static int fixture_teardown(void **state)
{
    fixture *f = *state;
    assert_int_equal(f->tensors[0].graph_refs, 0);
    assert_int_equal(f->tensors[1].graph_refs, 0);
    sl_map_fini(&f->session.tensors);
    sl_free(f);
    return 0;
}

/* Adds a one-output op with n_iattrs int attributes; returns its output
 * value. */
static uint32_t gb_op(sl_test_gb *b, const char *type, int n_in, const uint32_t *in, int n_iattrs,
                      const int64_t *iattrs)
{
    Salus__Op *o = sl_test_gb_op(b, type, n_in, in);
    o->n_iattrs = (size_t) n_iattrs;
    if (n_iattrs)
        memcpy(o->iattrs, iattrs, (size_t) n_iattrs * sizeof *iattrs);
    return b->n_values - 1;
}

static sl_graph *build(fixture *f, sl_test_gb *b, bool inplace)
{
    sl_graph *g = NULL;
    char err[256] = "";
    int rc = sl_graph_build(&f->session.tensors, &b->g, inplace, &g, err, sizeof err);
    if (rc != SL_OK)
        fail_msg("sl_graph_build: %s: %s", sl_errname(rc), err);
    return g;
}

static const int64_t v4x8[] = {4, 8}, v32[] = {32}, v4x4[] = {4, 4}, v4[] = {4};

static void relu_chain_shares_one_buffer(void **state)
{
    sl_test_gb b;
    sl_test_gb_init(&b);
    uint32_t x = sl_test_gb_input(&b, SL_F32, 2, v4x8);
    uint32_t a = gb_op(&b, "relu", 1, &x, 0, NULL);
    uint32_t c = gb_op(&b, "sigmoid", 1, &a, 0, NULL);
    uint32_t d = gb_op(&b, "tanh", 1, &c, 0, NULL);
    sl_graph *g = build(*state, &b, true);
    for (uint32_t k = 0; k < 3; k++)
        assert_int_equal(g->ops[k].inplace_in, 0);
    assert_int_equal(g->values[a].root, x);
    assert_int_equal(g->values[c].root, x);
    assert_int_equal(g->values[d].root, x);
    assert_int_equal(g->values[d].addr, g->values[x].addr);
    assert_int_equal(g->plan.peak, 256);      /* 128 bytes, one aligned buffer */
    assert_int_equal(g->plan.naive, 4 * 256); /* still four tensors */
    sl_graph_free(g);

    /* turned off: every value has its own memory, two live at a time */
    g = build(*state, &b, false);
    for (uint32_t k = 0; k < 3; k++)
        assert_int_equal(g->ops[k].inplace_in, -1);
    assert_int_equal(g->values[d].root, d);
    assert_int_equal(g->plan.peak, 2 * 256);
    assert_int_equal(g->plan.naive, 4 * 256);
    sl_graph_free(g);
}

static void input_read_later_is_not_overwritten(void **state)
{
    sl_test_gb b;
    sl_test_gb_init(&b);
    uint32_t x = sl_test_gb_input(&b, SL_F32, 2, v4x8);
    uint32_t a = gb_op(&b, "relu", 1, &x, 0, NULL);
    uint32_t s = gb_op(&b, "add", 2, (uint32_t[]){a, x}, 0, NULL);
    /* mul's first input lives on (read by the next op): its second is taken */
    uint32_t m = gb_op(&b, "mul", 2, (uint32_t[]){a, s}, 0, NULL);
    uint32_t t = gb_op(&b, "add", 2, (uint32_t[]){a, m}, 0, NULL);
    sl_graph *g = build(*state, &b, true);
    assert_int_equal(g->ops[0].inplace_in, -1); /* x is read by the add after it */
    assert_int_equal(g->values[a].root, a);
    assert_int_equal(g->ops[1].inplace_in, 1); /* a lives on; x dies here */
    assert_int_equal(g->values[s].root, x);
    assert_int_equal(g->ops[2].inplace_in, 1);
    assert_int_equal(g->values[m].root, x);
    assert_int_equal(g->ops[3].inplace_in, 0); /* both die: the first is taken */
    assert_int_equal(g->values[t].root, a);
    sl_graph_free(g);
}

static void params_and_non_elementwise_ops_never_share(void **state)
{
    sl_test_gb b;
    sl_test_gb_init(&b);
    uint32_t x = sl_test_gb_input(&b, SL_F32, 2, v4x4);
    uint32_t bias = sl_test_gb_input(&b, SL_F32, 1, v4);
    uint32_t w = sl_test_gb_param(&b, P_MAT);
    uint32_t pv = sl_test_gb_param(&b, P_VEC);
    uint32_t r = gb_op(&b, "relu", 1, &w, 0, NULL);                                 /* param: no */
    uint32_t mm = gb_op(&b, "matmul", 2, (uint32_t[]){x, r}, 2, (int64_t[]){0, 0}); /* no */
    uint32_t sm = gb_op(&b, "softmax", 1, &mm, 0, NULL);                            /* no */
    uint32_t ba = gb_op(&b, "bias_add", 2, (uint32_t[]){sm, bias}, 0, NULL);        /* over in0 */
    uint32_t bb = gb_op(&b, "bias_add", 2, (uint32_t[]){ba, pv}, 0, NULL);          /* over in0 */
    /* the bias is not element-wise with the output: never over in1 */
    uint32_t v = gb_op(&b, "relu", 1, &pv, 0, NULL);
    sl_graph *g = build(*state, &b, true);
    assert_int_equal(g->ops[0].inplace_in, -1);
    assert_int_equal(g->values[r].root, r);
    assert_int_equal(g->ops[1].inplace_in, -1);
    assert_int_equal(g->ops[2].inplace_in, -1);
    assert_int_equal(g->values[sm].root, sm);
    assert_int_equal(g->ops[3].inplace_in, 0);
    assert_int_equal(g->values[ba].root, sm);
    assert_int_equal(g->ops[4].inplace_in, 0);
    assert_int_equal(g->values[bb].root, sm);
    assert_int_equal(g->ops[5].inplace_in, -1);
    assert_int_equal(g->values[v].root, v);
    assert_int_equal(g->values[w].root, w);
    assert_int_equal(g->values[pv].kind, SL_VALUE_PARAM);
    (void) mm;
    sl_graph_free(g);
}

static void a_view_keeps_its_memory_alive(void **state)
{
    sl_test_gb b;
    sl_test_gb_init(&b);
    uint32_t x = sl_test_gb_input(&b, SL_F32, 2, v4x8);
    uint32_t v = gb_op(&b, "reshape", 1, &x, 1, v32);
    uint32_t a = gb_op(&b, "relu", 1, &x, 0, NULL);    /* x's memory is read later via v */
    uint32_t c = gb_op(&b, "sigmoid", 1, &v, 0, NULL); /* the last reader: over it */
    uint32_t cv = gb_op(&b, "reshape", 1, &c, 2, v4x8);
    uint32_t d = gb_op(&b, "add", 2, (uint32_t[]){cv, a}, 0, NULL);
    sl_graph *g = build(*state, &b, true);
    assert_int_equal(g->ops[1].inplace_in, -1);
    assert_int_equal(g->values[a].root, a);
    assert_int_equal(g->ops[2].inplace_in, 0);
    assert_int_equal(g->values[c].root, x);
    assert_int_equal(g->values[cv].root, x); /* a view of an in-place output */
    assert_int_equal(g->ops[4].inplace_in, 0);
    assert_int_equal(g->values[d].root, x);
    assert_int_equal(g->values[d].addr, g->values[x].addr);
    assert_int_not_equal(g->values[a].addr, g->values[x].addr); /* live together */
    sl_graph_free(g);
}

/* ---- on a server ---- */

typedef struct served {
    sl_served base;
    salus_session *session;
} served;

static void serve(served *sv, const char *url, bool inplace)
{
    sl_served_init(&sv->base, url);
    sv->base.srv.cfg.no_inplace = !inplace;
    sl_served_run(&sv->base, NULL);
    assert_sl_ok(salus_session_open(sv->base.client, NULL, &sv->session));
}

static void unserve(served *sv)
{
    assert_sl_ok(salus_session_close(sv->session));
    sl_served_stop(&sv->base);
}

static salus_value op1(salus_graph *g, const char *type, salus_value x, float f)
{
    return salus_graph_op(g, type, 1, &x, 0, NULL, f != 0.0f, (float[]){f});
}

/* Every value of a chain of in-place ops, views among them, fetched in one
 * run: each is copied out before the op that writes over it. */
static void fetches_of_overwritten_values_are_exact(void **state)
{
    (void) state;
    served sv;
    serve(&sv, "inproc://salus-test-inplace-fetch", true);
    enum { N = 64 };
    salus_graph *g = salus_graph_new();
    salus_value x = salus_graph_input(g, SALUS_F32, 1, (int64_t[]){N});
    salus_value a = op1(g, "scale", x, -2.0f);
    salus_value v = salus_graph_op(g, "reshape", 1, &a, 2, (int64_t[]){8, 8}, 0, NULL);
    salus_value r = op1(g, "relu", v, 0);
    salus_value s = salus_graph_op(g, "add", 2, (salus_value[]){r, r}, 0, NULL, 0, NULL);
    uint64_t peak;
    assert_sl_ok(salus_graph_register(sv.session, g, &peak));
    assert_int_equal(peak, 256); /* one buffer for all of them */
    float in[N], out[5][N];
    for (int i = 0; i < N; i++)
        in[i] = (float) (i - N / 2) * 0.25f;
    const salus_value fetch[] = {x, a, v, r, s};
    void *const outs[] = {out[0], out[1], out[2], out[3], out[4]};
    assert_sl_ok(salus_run(sv.session, g, (const void *const[]){in}, 5, fetch, outs));
    for (int i = 0; i < N; i++) {
        float want_a = -2.0f * in[i], want_r = want_a > 0 ? want_a : 0.0f;
        assert_true(out[0][i] == in[i]);
        assert_true(out[1][i] == want_a);
        assert_true(out[2][i] == want_a);
        assert_true(out[3][i] == want_r);
        assert_true(out[4][i] == want_r + want_r);
    }
    salus_graph_free(g);
    unserve(&sv);
}

static void fill(float *p, size_t n, uint32_t *seed)
{
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        p[i] = (float) (*seed >> 8) / (float) (1u << 24) - 0.5f;
    }
}

enum { BATCH = 16, STEPS = 4 }; /* the training tests' batch and steps */

/* STEPS steps of both models on the same random batches (x: the last
 * one's inputs); their losses must be equal to the bit. */
static void train_both_alike(salus_model *m[2], float *x, uint32_t *seed)
{
    int32_t labels[BATCH];
    for (int step = 0; step < STEPS; step++) {
        fill(x, BATCH * 64, seed);
        for (int i = 0; i < BATCH; i++)
            labels[i] = (int32_t) ((*seed >> (i % 24)) % 10);
        float loss[2];
        for (int k = 0; k < 2; k++)
            assert_sl_ok(salus_model_train_step(m[k], x, labels, &loss[k]));
        assert_true(isfinite(loss[0]));
        assert_memory_equal(&loss[0], &loss[1], sizeof loss[0]);
    }
}

/* Trains the same model on two servers, one with in-place execution and one
 * without: every loss and every prediction must be bit-identical. */
static void train_both(bool cnn, const salus_optimizer *opt)
{
    served on, off;
    serve(&on, "inproc://salus-test-inplace-on", true);
    serve(&off, "inproc://salus-test-inplace-off", false);
    const int64_t mlp_in[] = {64}, cnn_in[] = {1, 8, 8};
    salus_model *m[2];
    served *sv[2] = {&on, &off};
    uint64_t peak[2], naive[2];
    for (int k = 0; k < 2; k++) {
        m[k] = cnn ? salus_model_new(3, cnn_in) : salus_model_new(1, mlp_in);
        assert_non_null(m[k]);
        if (cnn) {
            salus_model_conv2d(m[k], 4, 3, 1, 1);
            salus_model_relu(m[k]);
            salus_model_maxpool(m[k], 2, 2);
            salus_model_flatten(m[k]);
            salus_model_dense(m[k], 10);
        } else {
            salus_model_dense(m[k], 32);
            salus_model_relu(m[k]);
            salus_model_dense(m[k], 16);
            salus_model_sigmoid(m[k]);
            salus_model_dense(m[k], 16);
            salus_model_tanh(m[k]);
            salus_model_dense(m[k], 10);
        }
        if (salus_model_compile(m[k], sv[k]->session, opt, BATCH, BATCH, 7))
            fail_msg("compile: %s", salus_model_error(m[k]));
        assert_sl_ok(salus_graph_memory(salus_model_training_graph(m[k]), &peak[k], &naive[k]));
    }
    /* the plan never grows (registration keeps the separate plan when the
     * greedy planner would place the aliased one worse); whether it shrinks
     * depends on what the peak step holds */
    assert_true(peak[0] <= peak[1]);
    assert_int_equal(naive[0], naive[1]);
    uint32_t seed = 12345;
    float x[BATCH * 64];
    int32_t classes[2][BATCH];
    train_both_alike(m, x, &seed);
    for (int k = 0; k < 2; k++)
        assert_sl_ok(salus_model_predict(m[k], x, classes[k]));
    assert_memory_equal(classes[0], classes[1], sizeof classes[0]);
    for (int k = 0; k < 2; k++)
        salus_model_free(m[k]);
    unserve(&on);
    unserve(&off);
}

static void mlp_training_is_identical_in_place(void **state)
{
    (void) state;
    salus_optimizer momentum = {.kind = SALUS_MOMENTUM, .lr = 0.05f, .momentum = 0.9f};
    salus_optimizer adam = {.kind = SALUS_ADAM, .lr = 0.01f};
    train_both(false, &momentum);
    train_both(false, &adam);
}

static void cnn_training_is_identical_in_place(void **state)
{
    (void) state;
    salus_optimizer sgd = {.kind = SALUS_SGD, .lr = 0.05f};
    train_both(true, &sgd);
}

/* Under momentum, dense layers accumulate their weight gradient into the
 * velocity (client/nn.c, matmul_acc): with momentum 0 that is plain SGD,
 * bit for bit (the same GEMM, then p -= lr * v), and no dW tensor is left
 * in the iteration's memory. */
static void momentum_zero_trains_like_sgd(void **state)
{
    (void) state;
    served sv;
    serve(&sv, "inproc://salus-test-inplace-fused", true);
    const salus_optimizer opts[2] = {{.kind = SALUS_SGD, .lr = 0.1f},
                                     {.kind = SALUS_MOMENTUM, .lr = 0.1f, .momentum = 0.0f}};
    salus_model *m[2];
    uint64_t peak[2], naive[2];
    for (int k = 0; k < 2; k++) {
        m[k] = salus_model_new(1, (int64_t[]){64});
        assert_non_null(m[k]);
        salus_model_dense(m[k], 32);
        salus_model_relu(m[k]);
        salus_model_dense(m[k], 10);
        if (salus_model_compile(m[k], sv.session, &opts[k], BATCH, BATCH, 3))
            fail_msg("compile: %s", salus_model_error(m[k]));
        assert_sl_ok(salus_graph_memory(salus_model_training_graph(m[k]), &peak[k], &naive[k]));
    }
    /* dW1 [64,32] and dW2 [32,10] are gone (256-byte aligned) */
    assert_int_equal(naive[0] - naive[1], 64 * 32 * 4 + 1280);
    assert_true(peak[1] <= peak[0]);
    uint32_t seed = 777;
    float x[BATCH * 64];
    train_both_alike(m, x, &seed);
    for (int k = 0; k < 2; k++)
        salus_model_free(m[k]);
    unserve(&sv);
}

/* Each registration test with a session of its own. */
#define WITH_FIXTURE(t) cmocka_unit_test_setup_teardown(t, fixture_setup, fixture_teardown)

static SL_TEST_GROUP(
    registration_tests, "inplace_registration", NULL, NULL,
    WITH_FIXTURE(relu_chain_shares_one_buffer), WITH_FIXTURE(input_read_later_is_not_overwritten),
    WITH_FIXTURE(params_and_non_elementwise_ops_never_share),
    WITH_FIXTURE(
        a_view_keeps_its_memory_alive)) static SL_TEST_GROUP(server_tests, "inplace_on_a_server",
                                                             NULL, NULL,
                                                             cmocka_unit_test(
                                                                 fetches_of_overwritten_values_are_exact),
                                                             cmocka_unit_test(
                                                                 mlp_training_is_identical_in_place),
                                                             cmocka_unit_test(
                                                                 cnn_training_is_identical_in_place),
                                                             cmocka_unit_test(
                                                                 momentum_zero_trains_like_sgd))

    int main(void)
{
    sl_log_set_level("warn");
    int failed = registration_tests();
    failed += server_tests();
    return failed ? 1 : 0;
}
