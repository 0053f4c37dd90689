/* Compute partitions through a real salusd on the cpu backend: started with
 * --partitions, shown in status, changed at run time (also while clients
 * train: cpu partitions change live), malformed and impossible changes
 * refused, and training results exact throughout. Needs 2 cores (a
 * partition each); SKIP otherwise. */
#include "harness.h"
#include "sl_test.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static sl_test_server server;

static void status_has(salus_client *c, const char *what)
{
    char *text;
    assert_sl_ok(salus_status_text(c, &text));
    if (!strstr(text, what))
        fail_msg("status lacks \"%s\":\n%s", what, text);
    salus_free(text);
}

static void start_and_status(void **state)
{
    (void) state;
    salus_client *c = sl_test_connect(&server);
    status_has(c, "partitions: online 1 core (fixed, need 1), offline 1 core");
    status_has(c, "core sets");
    salus_disconnect(c);
}

static void change_while_training(void **state)
{
    (void) state;
    const char *a[] = {"--url", server.url, "--name", "a",       "--seed",
                       "1",     "--steps",  "200",    "--check", NULL};
    const char *b[] = {"--url",   server.url, "--name",   "b",  "--seed",  "2",
                       "--steps", "200",      "--hidden", "32", "--check", NULL};
    pid_t pa = sl_test_spawn("MLP_REGRESSION", a);
    pid_t pb = sl_test_spawn("MLP_REGRESSION", b);
    salus_client *c = sl_test_connect(&server);
    const char *modes[] = {"off", "auto", "1", "auto:1", "off", "1"};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        assert_sl_ok(salus_set_partitions(c, modes[i]));
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    status_has(c, "partitions: online 1 core (fixed");
    assert_int_equal(sl_test_wait(pa, 90), 0);
    assert_int_equal(sl_test_wait(pb, 90), 0);
    salus_disconnect(c);
}

static void refused(void **state)
{
    (void) state;
    salus_client *c = sl_test_connect(&server);
    assert_int_equal(salus_set_partitions(c, "bogus"), SALUS_EINVAL);
    assert_int_equal(salus_set_partitions(c, "0"), SALUS_EINVAL);
    assert_int_equal(salus_set_partitions(c, "-1"), SALUS_EINVAL);
    assert_int_equal(salus_set_partitions(c, "2"), SALUS_EINVAL); /* nothing left */
    assert_int_equal(salus_set_partitions(c, ""), SALUS_EINVAL);
    status_has(c, "partitions: online 1 core"); /* unchanged */
    assert_sl_ok(salus_set_partitions(c, "off"));
    status_has(c, "partitions: off; device: core sets");
    salus_disconnect(c);
}

int main(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) < 2) {
        printf("SKIP: compute partitions on cpu need 2 cores, this process has %d\n",
               CPU_COUNT(&set));
        return 77;
    }
    const char *args[] = {"--policy", "priority", "--partitions", "1", NULL};
    sl_test_server_start(&server, args);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(start_and_status),
        cmocka_unit_test(change_while_training),
        cmocka_unit_test(refused),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    int status = sl_test_server_stop(&server);
    if (status != 0) {
        fprintf(stderr, "salusd exited %d\n", status);
        return 1;
    }
    return failed ? 1 : 0;
}
