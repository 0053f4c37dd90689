/* Training tests on a Fashion-MNIST subset through a real salusd: the nn
 * helpers, every training op on the cpu backend and the server together
 * must learn. Thresholds are for the subset and a few epochs, well above
 * chance (0.10) and below what the full runs reach (see the README). */
#include "harness.h"
#include "sl_test.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mlp_learns_on_a_subset),
        cmocka_unit_test(cnn_learns_on_a_subset),
        cmocka_unit_test(adam_and_sgd_learn_too),
    };
    sl_test_group = &server;
    return cmocka_run_group_tests_name("train", tests, start, sl_test_group_stop);
}
