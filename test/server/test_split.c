/* Low-priority iterations run in steps beside a high-priority session
 * (policy priority): their long matmuls in parts (kernels/ops/ops.h
 * sl_op_split, server/stepwise.c), their ops in segments (sched/steps.h),
 * long ones submitted by a launcher. Training that way gives the losses
 * and predictions of training whole, on an embedded server over inproc://
 * on the cpu device. */
#include "served.h"
#include "sl_test.h"

#include <salus/salus.h>

#include <math.h>
#include <string.h>
#include <time.h>

static void fill(float *p, size_t n, uint32_t *seed)
{
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        p[i] = (float) (*seed >> 8) / (float) (1u << 24) - 0.5f;
    }
}

/* Trains one MLP on a fair server (whole iterations) and one beside an idle
 * high-priority session on a priority server whose parts are 1 us long
 * (every matmul splits as far as it goes, up to 16 parts). */
static void split_training_matches_whole(void **state)
{
    (void) state;
    sl_served whole, split;
    sl_served_start(&whole, "inproc://salus-test-split-whole", "fair", 0, NULL);
    sl_served_start(&split, "inproc://salus-test-split-parts", "priority", 1000, NULL);
    salus_session_opts hp_opts = {.name = "hp", .priority = 10};
    salus_session *hp, *s[2];
    assert_sl_ok(salus_session_open(split.client, &hp_opts, &hp));
    assert_sl_ok(salus_session_open(whole.client, NULL, &s[0]));
    assert_sl_ok(salus_session_open(split.client, NULL, &s[1]));

    enum { BATCH = 32, IN = 48, STEPS = 6 };
    const salus_optimizer momentum = {.kind = SALUS_MOMENTUM, .lr = 0.05f, .momentum = 0.9f};
    salus_model *m[2];
    for (int k = 0; k < 2; k++) {
        m[k] = salus_model_new(1, (int64_t[]){IN});
        assert_non_null(m[k]);
        salus_model_dense(m[k], 40);
        salus_model_relu(m[k]);
        salus_model_dense(m[k], 24);
        salus_model_tanh(m[k]);
        salus_model_dense(m[k], 10);
        if (salus_model_compile(m[k], s[k], &momentum, BATCH, BATCH, 3))
            fail_msg("compile: %s", salus_model_error(m[k]));
    }
    uint32_t seed = 777;
    float x[BATCH * IN], loss[2];
    int32_t labels[BATCH], classes[2][BATCH];
    for (int step = 0; step < STEPS; step++) {
        fill(x, BATCH * IN, &seed);
        for (int i = 0; i < BATCH; i++)
            labels[i] = (int32_t) ((seed >> (i % 24)) % 10);
        for (int k = 0; k < 2; k++)
            assert_sl_ok(salus_model_train_step(m[k], x, labels, &loss[k]));
        assert_true(isfinite(loss[0]));
        /* parts along M are exact; along K the sum's order changes */
        assert_float_equal(loss[0], loss[1], 1e-5f * fabsf(loss[0]) + 1e-6f);
    }
    for (int k = 0; k < 2; k++)
        assert_sl_ok(salus_model_predict(m[k], x, classes[k]));
    assert_memory_equal(classes[0], classes[1], sizeof classes[0]);

    /* the split server really ran op by op, in parts; the other never did */
    sl_server_counters split_c, whole_c;
    sl_server_get_counters(&split.srv, &split_c);
    sl_server_get_counters(&whole.srv, &whole_c);
    assert_true(split_c.exec.ops_split >= STEPS);
    assert_int_equal(whole_c.exec.ops_split, 0);

    for (int k = 0; k < 2; k++) {
        salus_model_free(m[k]);
        assert_sl_ok(salus_session_close(s[k]));
    }
    assert_sl_ok(salus_session_close(hp));
    sl_served_stop(&whole);
    sl_served_stop(&split);
}

enum { BATCH = 64, IN = 96, LAYERS = 12 };

/* The deep MLP of segment_training_matches_whole, compiled on s. */
static salus_model *deep_mlp(salus_session *s, const salus_optimizer *o)
{
    salus_model *m = salus_model_new(1, (int64_t[]){IN});
    assert_non_null(m);
    for (int l = 0; l < LAYERS; l++) {
        salus_model_dense(m, IN);
        salus_model_relu(m);
    }
    salus_model_dense(m, 10);
    if (salus_model_compile(m, s, o, BATCH, BATCH, 5))
        fail_msg("compile: %s", salus_model_error(m));
    return m;
}

/* Wall time of one of its training steps on s, ns (the second of two). */
static uint64_t step_ns(salus_session *s, const salus_optimizer *o)
{
    salus_model *m = deep_mlp(s, o);
    static float x[BATCH * IN];
    static int32_t labels[BATCH];
    float loss;
    struct timespec a, b;
    assert_sl_ok(salus_model_train_step(m, x, labels, &loss));
    clock_gettime(CLOCK_MONOTONIC, &a);
    assert_sl_ok(salus_model_train_step(m, x, labels, &loss));
    clock_gettime(CLOCK_MONOTONIC, &b);
    salus_model_free(m);
    return (uint64_t) ((b.tv_sec - a.tv_sec) * 1000000000ll + (b.tv_nsec - a.tv_nsec));
}

/* A deep MLP (its iteration well over the ops a segment submits under the
 * lock) trained whole on a fair server and in segments beside an idle
 * high-priority session: segments of at most an eighth of its step's
 * time on the fair server (a few ops, however fast the host: a
 * sanitizer or valgrind slows every op alike), and of at most 10 s (the
 * whole rest of an iteration once its ops are measured, through a
 * launcher). No op splits. The losses and predictions are the same
 * bits. */
static void segment_training_matches_whole(void **state)
{
    (void) state;
    enum { N = 3, STEPS = 5 };
    uint64_t bounds[N] = {0, 0, 10ull * 1000 * 1000 * 1000};
    static const char *const urls[N] = {"inproc://salus-test-seg-whole",
                                        "inproc://salus-test-seg-short",
                                        "inproc://salus-test-seg-long"};
    sl_served sv[N];
    salus_session *hp[N], *s[N];
    salus_model *m[N];
    const salus_session_opts hp_opts = {.name = "hp", .priority = 10};
    const salus_optimizer sgd = {.kind = SALUS_SGD, .lr = 0.01f};
    for (int k = 0; k < N; k++) {
        sl_served_init(&sv[k], urls[k]);
        sv[k].srv.cfg.policy = k ? "priority" : "fair";
        sv[k].srv.cfg.op_part_ns = 10ull * 1000 * 1000 * 1000; /* no parts */
        sv[k].srv.cfg.lp_segment_ns = bounds[k];
        sl_served_run(&sv[k], NULL);
        assert_sl_ok(salus_session_open(sv[k].client, &hp_opts, &hp[k]));
        assert_sl_ok(salus_session_open(sv[k].client, NULL, &s[k]));
        m[k] = deep_mlp(s[k], &sgd);
        if (k == 0) {
            uint64_t t = step_ns(s[0], &sgd);
            bounds[1] = t / 8 > 1000 ? t / 8 : 1000;
        }
    }
    uint32_t seed = 4242;
    float x[BATCH * IN], loss[N];
    int32_t labels[BATCH], classes[N][BATCH];
    for (int step = 0; step < STEPS; step++) {
        fill(x, BATCH * IN, &seed);
        for (int i = 0; i < BATCH; i++)
            labels[i] = (int32_t) ((seed >> (i % 24)) % 10);
        for (int k = 0; k < N; k++)
            assert_sl_ok(salus_model_train_step(m[k], x, labels, &loss[k]));
        assert_true(isfinite(loss[0]));
        for (int k = 1; k < N; k++)
            assert_memory_equal(&loss[0], &loss[k], sizeof loss[0]);
    }
    for (int k = 0; k < N; k++)
        assert_sl_ok(salus_model_predict(m[k], x, classes[k]));
    for (int k = 1; k < N; k++)
        assert_memory_equal(classes[0], classes[k], sizeof classes[0]);
    /* the priority servers ran segments of several ops; the fair one ran
     * whole iterations */
    sl_server_counters c[N];
    for (int k = 0; k < N; k++)
        sl_server_get_counters(&sv[k].srv, &c[k]);
    print_message("segments: %llu at %llu us, %llu\n", (unsigned long long) c[1].exec.lp_segments,
                  (unsigned long long) bounds[1] / 1000,
                  (unsigned long long) c[2].exec.lp_segments);
    assert_int_equal(c[0].exec.lp_segments, 0);
    /* the first iteration in steps measures its ops one by one; each
     * later one is one segment at 10 s, several at an eighth of it */
    assert_true(c[2].exec.lp_segments >= STEPS - 1);
    assert_true(c[1].exec.lp_segments > c[2].exec.lp_segments);
    for (int k = 0; k < N; k++) {
        salus_model_free(m[k]);
        assert_sl_ok(salus_session_close(s[k]));
        assert_sl_ok(salus_session_close(hp[k]));
        sl_served_stop(&sv[k]);
    }
}

SL_TEST_MAIN("server split", NULL, NULL, cmocka_unit_test(split_training_matches_whole),
             cmocka_unit_test(segment_training_matches_whole))
