/* Training tests on a Fashion-MNIST subset through a real salusd: the nn
 * helpers, every training op on the cpu backend and the server together
 * must learn. Thresholds are for the subset and a few epochs, well above
 * chance (0.10) and below what the full runs reach (docs/benchmarks.md). */
#include "harness.h"
#include "sl_test.h"

#include <salus/salus.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static sl_test_server server;

static int start(void **state)
{
    (void) state;
    struct stat st;
    if (stat("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", &st) != 0) {
        fprintf(stderr, "dataset-fashion-mnist is not installed\n");
        return -1;
    }
    sl_test_server_start(&server, (const char *const[]){"--memory-limit", "1G", NULL});
    return 0;
}

/* Runs fashion_train with args and returns the accuracy of its RESULT line. */
static double train(const char *args)
{
    const char *bin = getenv("FASHION_TRAIN");
    assert_non_null(bin);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s --url '%s' --quiet %s", bin, server.url, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[256];
    double acc = -1, sps = 0;
    while (fgets(line, sizeof line, p)) {
        const char *r = strstr(line, "RESULT ");
        if (r)
            assert_int_equal(sscanf(strstr(r, "test_accuracy="),
                                    "test_accuracy=%lf samples_per_s=%lf", &acc, &sps),
                             2);
    }
    assert_int_equal(pclose(p), 0);
    fprintf(stderr, "%s: test accuracy %.4f, %.0f samples/s\n", args, acc, sps);
    return acc;
}

static void mlp_learns_on_a_subset(void **state)
{
    (void) state;
    assert_true(train("--model mlp --epochs 3 --train-limit 12000 --test-limit 2000") >= 0.80);
}

static void cnn_learns_on_a_subset(void **state)
{
    (void) state;
    assert_true(train("--model cnn --epochs 2 --train-limit 6000 --test-limit 1000") >= 0.75);
}

static void adam_and_sgd_learn_too(void **state)
{
    (void) state;
    assert_true(
        train("--model mlp --epochs 2 --train-limit 6000 --test-limit 1000 --optimizer adam") >=
        0.78);
    assert_true(
        train("--model mlp --epochs 2 --train-limit 6000 --test-limit 1000 --optimizer sgd") >=
        0.70);
}

/* The nn helpers run a ReLU that a max pool follows after the pool (on a
 * quarter of the data). A 1x1 pool between them keeps the ReLU where it
 * was written, before the 2x2 pool, and computes the same function: with
 * the same parameters, both orders must train bit for bit alike, under
 * momentum and Adam. */
static void relu_after_the_pool_trains_the_same(void **state)
{
    (void) state;
    enum { BATCH = 8, STEPS = 4, PIXELS = 2 * 10 * 10 };
    const salus_optimizer opts[2] = {{.kind = SALUS_MOMENTUM, .lr = 0.05f, .momentum = 0.9f},
                                     {.kind = SALUS_ADAM, .lr = 0.01f}};
    salus_client *c;
    salus_session *s;
    assert_int_equal(salus_connect(server.url, &c), SALUS_OK);
    assert_int_equal(salus_session_open(c, NULL, &s), SALUS_OK);
    for (int o = 0; o < 2; o++) {
        salus_model *m[2];
        for (int k = 0; k < 2; k++) {
            m[k] = salus_model_new(3, (int64_t[]){2, 10, 10});
            assert_non_null(m[k]);
            salus_model_conv2d(m[k], 4, 3, 1, 1);
            salus_model_relu(m[k]);
            if (k == 1)
                salus_model_maxpool(m[k], 1, 1);
            salus_model_maxpool(m[k], 2, 2);
            salus_model_conv2d(m[k], 3, 3, 1, 1);
            salus_model_relu(m[k]);
            salus_model_maxpool(m[k], 2, 2);
            salus_model_flatten(m[k]);
            salus_model_dense(m[k], 5);
            if (salus_model_compile(m[k], s, &opts[o], BATCH, BATCH, 11))
                fail_msg("compile: %s", salus_model_error(m[k]));
        }
        uint32_t seed = 99;
        float x[BATCH * PIXELS];
        int32_t labels[BATCH], classes[2][BATCH];
        for (int step = 0; step < STEPS; step++) {
            for (int i = 0; i < BATCH * PIXELS; i++) {
                seed = seed * 1664525u + 1013904223u;
                x[i] = (float) (seed >> 8) / (float) (1u << 24) - 0.5f;
            }
            for (int i = 0; i < BATCH; i++)
                labels[i] = (int32_t) ((seed >> (i % 24)) % 5);
            float loss[2];
            for (int k = 0; k < 2; k++)
                assert_int_equal(salus_model_train_step(m[k], x, labels, &loss[k]), SALUS_OK);
            assert_memory_equal(&loss[0], &loss[1], sizeof loss[0]);
        }
        for (int k = 0; k < 2; k++) {
            assert_int_equal(salus_model_predict(m[k], x, classes[k]), SALUS_OK);
            salus_model_free(m[k]);
        }
        assert_memory_equal(classes[0], classes[1], sizeof classes[0]);
    }
    assert_int_equal(salus_session_close(s), SALUS_OK);
    salus_disconnect(c);
}

SL_TEST_SERVER_MAIN(server, "train", start, cmocka_unit_test(mlp_learns_on_a_subset),
                    cmocka_unit_test(cnn_learns_on_a_subset),
                    cmocka_unit_test(adam_and_sgd_learn_too),
                    cmocka_unit_test(relu_after_the_pool_trains_the_same))
