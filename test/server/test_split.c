/* Low-priority iterations run op by op beside a high-priority session
 * (policy priority), and their long matmuls run in parts (kernels/ops/ops.h
 * sl_op_split, server/executor.c): training that way gives the losses and
 * predictions of training whole, on an embedded server over inproc:// on
 * the cpu device. */
#include "served.h"
#include "sl_test.h"

#include <salus/salus.h>

#include <math.h>
#include <string.h>

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

SL_TEST_MAIN("server split", NULL, NULL, cmocka_unit_test(split_training_matches_whole))
