/* Device faults against a real salusd on the sim
 * device, injected with --fault-inject and SIGUSR1: a failed allocation fails
 * one request; a sticky device error fails what runs with DEVICE_RESET, the
 * device is reset, every session is told once and new sessions work; a slow
 * device keeps the server answering. */
#include "client_internal.h"
#include "salusd_ctl.h"
#include "sl_test.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static sl_test_server server;

static int start(void **state)
{
    (void) state;
    char fault[400];
    sl_ctl_prepare(&server);
    sl_ctl_path(&server, "fault", fault, sizeof fault);
    const char *args[] = {"--device", "sim:v100", "--memory-limit", "8G", "--fault-inject",
                          fault,      NULL};
    sl_ctl_start(&server, args);
    return 0;
}

static int stop(void **state)
{
    (void) state;
    int st = sl_ctl_stop(&server);
    if (st != 0 || getenv("SL_KEEP_LOGS"))
        fprintf(stderr, "salusd exited with %d (log kept in %s)\n", st, server.dir);
    else
        sl_ctl_cleanup(&server);
    return st == 0 ? 0 : -1;
}

/* A session's work: params a, p of [n, n] and a graph y = a p p ... p
 * (depth matmuls), which the sim runs for depth * 2n^3 / (peak FLOP/s). */
typedef struct job {
    salus_session *s;
    salus_graph *g;
    uint64_t a, p;
    int64_t n;
} job;

static void job_open(salus_client *c, job *j, int64_t n, int depth, const char *name)
{
    salus_session_opts o = {.name = name};
    assert_sl_ok(salus_session_open(c, &o, &j->s));
    const int64_t dims[] = {n, n};
    j->n = n;
    assert_sl_ok(salus_tensor_create(j->s, SALUS_F32, 2, dims, NULL, &j->a));
    assert_sl_ok(salus_tensor_create(j->s, SALUS_F32, 2, dims, NULL, &j->p));
    j->g = salus_graph_new();
    salus_value y = salus_graph_param(j->g, j->a, SALUS_F32, 2, dims);
    salus_value p = salus_graph_param(j->g, j->p, SALUS_F32, 2, dims);
    for (int k = 0; k < depth; k++)
        y = salus_graph_op(j->g, "matmul", 2, (salus_value[]){y, p}, 0, NULL, 0, NULL);
    assert_null(salus_graph_error(j->g));
    assert_sl_ok(salus_graph_register(j->s, j->g, NULL));
}

static int job_run(job *j)
{
    return salus_run(j->s, j->g, NULL, 0, NULL, NULL);
}

static void job_close(job *j)
{
    salus_graph_free(j->g);
    assert_sl_ok(salus_session_close(j->s));
}

/* Reads tensor id of n x n floats. */
static int read_tensor(job *j, uint64_t id)
{
    size_t bytes = (size_t) (j->n * j->n) * sizeof(float);
    void *buf = malloc(bytes);
    assert_non_null(buf);
    int rc = salus_tensor_read(j->s, id, buf, bytes);
    free(buf);
    return rc;
}

typedef struct runner {
    job *j;
    int rc;
    double seconds;
    pthread_t th;
} runner;

static void *run_thread(void *arg)
{
    runner *r = arg;
    double t0 = sl_ts_now_s();
    r->rc = job_run(r->j);
    r->seconds = sl_ts_now_s() - t0;
    return NULL;
}

static void run_in_background(runner *r, job *j)
{
    r->j = j;
    r->rc = -1;
    assert_int_equal(pthread_create(&r->th, NULL, run_thread, r), 0);
}

static void allocation_failure_fails_one_request(void **state)
{
    (void) state;
    salus_client *c = sl_test_connect(&server);
    job a, b;
    job_open(c, &a, 256, 2, "alloc-a");
    job_open(c, &b, 256, 2, "alloc-b");
    assert_sl_ok(job_run(&a));
    sl_ctl_fault(&server, "alloc");
    assert_sl_err(job_run(&a), SALUS_EEXHAUSTED);
    assert_non_null(strstr(salus_last_error(c), "iteration failed on the device"));
    /* nothing else changed: the same session, another one, its tensors */
    assert_sl_ok(job_run(&a));
    assert_sl_ok(job_run(&b));
    assert_sl_ok(read_tensor(&a, a.p));
    assert_false(sl_ctl_log_has(&server, "device reset"));
    job_close(&a);
    job_close(&b);
    salus_disconnect(c);
}

static void sticky_error_resets_the_device(void **state)
{
    (void) state;
    salus_client *c = sl_test_connect(&server);
    job a, b, d;
    /* a: six 8192^3 matmuls, ~0.1 s each on the modeled V100 */
    job_open(c, &a, 8192, 6, "sticky-a");
    job_open(c, &b, 64, 1, "sticky-b");
    runner r;
    run_in_background(&r, &a);
    salus_client *watch = sl_test_connect(&server);
    sl_ctl_wait_running(watch, salus_session_id(a.s));
    salus_disconnect(watch);
    nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL); /* mid-iteration */
    sl_ctl_fault(&server, "sticky");
    assert_int_equal(pthread_join(r.th, NULL), 0);
    assert_sl_err(r.rc, SALUS_EDEVICERESET);
    assert_non_null(strstr(salus_last_error(c), "re-upload"));

    /* b was idle: told once, at its next request that uses device data */
    assert_sl_err(read_tensor(&b, b.a), SALUS_EDEVICERESET);
    assert_non_null(strstr(salus_last_error(c), "re-upload"));
    assert_sl_ok(read_tensor(&b, b.a)); /* same id and shape */
    assert_sl_ok(job_run(&b));
    /* a was told by its failed run: it re-uploads and goes on */
    const int64_t n = a.n;
    float *zeros = calloc((size_t) (n * n), sizeof *zeros);
    assert_non_null(zeros);
    assert_sl_ok(salus_tensor_write(a.s, a.a, zeros, (size_t) (n * n) * sizeof *zeros));
    assert_sl_ok(salus_tensor_write(a.s, a.p, zeros, (size_t) (n * n) * sizeof *zeros));
    free(zeros);
    /* new sessions work */
    job_open(c, &d, 64, 2, "sticky-new");
    assert_sl_ok(job_run(&d));
    assert_true(sl_ctl_log_has(&server, "device reset #1 "));

    /* a second fault resets again */
    sl_ctl_fault(&server, "sticky");
    assert_sl_err(job_run(&d), SALUS_EDEVICERESET);
    for (int i = 0; i < 200 && !sl_ctl_log_has(&server, "device reset #2"); i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    assert_true(sl_ctl_log_has(&server, "device reset #2"));
    assert_sl_ok(job_run(&d));
    assert_sl_err(job_run(&b), SALUS_EDEVICERESET); /* b's notice of the second reset */
    assert_sl_ok(job_run(&b));
    job_close(&a);
    job_close(&b);
    job_close(&d);
    salus_disconnect(c);
}

/* While the device is lost and a reset waits for running work to fail, a
 * session's request is held, then answered after the reset (with its
 * DEVICE_RESET notice), not failed with a transient error. */
static void requests_during_a_reset_wait_for_it(void **state)
{
    (void) state;
    salus_client *c = sl_test_connect(&server);
    job a, b, d;
    job_open(c, &a, 8192, 3, "held-a");
    job_open(c, &b, 64, 1, "held-b");
    job_open(c, &d, 64, 1, "held-d");
    sl_ctl_fault(&server, "slow 20"); /* a's ops now take ~2 s each */
    runner r;
    run_in_background(&r, &a);
    salus_client *c2 = sl_test_connect(&server);    /* d's and b's requests do not wait for a's */
    sl_ctl_wait_running(c2, salus_session_id(a.s)); /* in its first op */
    sl_ctl_fault(&server, "sticky");
    d.s->client = c2;
    b.s->client = c2;
    assert_sl_err(job_run(&d), SALUS_EDEVICERESET); /* its op is the one that fails */
    double t0 = sl_ts_now_s();
    assert_sl_err(read_tensor(&b, b.a), SALUS_EDEVICERESET); /* held until the reset */
    double held = sl_ts_now_s() - t0;
    assert_non_null(strstr(salus_last_error(c2), "re-upload"));
    assert_int_equal(pthread_join(r.th, NULL), 0);
    assert_sl_err(r.rc, SALUS_EDEVICERESET);
    printf("request answered after %.3f s\n", held);
    char line[1024];
    assert_true(sl_ctl_log_last(&server, "device reset #", line, sizeof line));
    /* whether b's request reached the server before or during the reset is
     * timing (slower under sanitizers): both end in one DEVICE_RESET notice,
     * checked above; the count is only logged */
    printf("%s\n", line);
    sl_ctl_fault(&server, "slow 1");
    assert_sl_ok(read_tensor(&b, b.a));
    assert_sl_ok(job_run(&d));
    d.s->client = c;
    b.s->client = c;
    job_close(&a);
    job_close(&b);
    job_close(&d);
    salus_disconnect(c2);
    salus_disconnect(c);
}

static void slow_device_keeps_the_server_answering(void **state)
{
    (void) state;
    salus_client *c = sl_test_connect(&server);
    job a;
    job_open(c, &a, 2048, 4, "slow-a");
    double t0 = sl_ts_now_s();
    assert_sl_ok(job_run(&a));
    double fast = sl_ts_now_s() - t0;

    sl_ctl_fault(&server, "slow 300");
    runner r;
    run_in_background(&r, &a);
    /* while it crawls: status answers at once, other sessions get in */
    salus_client *c2 = sl_test_connect(&server);
    double worst = 0;
    for (int i = 0; i < 20; i++) {
        double s0 = sl_ts_now_s();
        char *text;
        assert_sl_ok(salus_status_text(c2, &text));
        salus_free(text);
        double dt = sl_ts_now_s() - s0;
        if (dt > worst)
            worst = dt;
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    salus_session *other;
    assert_sl_ok(salus_session_open(c2, NULL, &other));
    assert_sl_ok(salus_session_close(other));
    assert_int_equal(pthread_join(r.th, NULL), 0);
    assert_sl_ok(r.rc);
    printf("slow device: iteration %.3f s (normal %.3f s), worst status %.1f ms\n", r.seconds, fast,
           worst * 1e3);
    /* four 2048^3 matmuls are ~6 ms on the modeled V100: the sim sleeps at
     * least 300 times that. Status waited for nothing (a blocked status
     * would take the iteration's ~1.7 s). */
    assert_true(r.seconds > 1.0);
    assert_true(worst < 0.5);

    sl_ctl_fault(&server, "slow 1");
    t0 = sl_ts_now_s();
    assert_sl_ok(job_run(&a));
    assert_true(sl_ts_now_s() - t0 < r.seconds / 3);
    job_close(&a);
    salus_disconnect(c2);
    salus_disconnect(c);
}

static void bad_fault_command_is_ignored(void **state)
{
    (void) state;
    sl_ctl_fault(&server, "explode now");
    assert_true(sl_ctl_log_has(&server, "bad command 'explode'"));
    salus_client *c = sl_test_connect(&server);
    job a;
    job_open(c, &a, 64, 1, "after-bad");
    assert_sl_ok(job_run(&a));
    job_close(&a);
    salus_disconnect(c);
}

/* A device that does not come back after a reset (CUDA's sticky errors,
 * per its documentation): salusd drains and exits 3 for a supervisor to
 * restart it; its clients see ECONN and can reconnect to the new one. */
static void unrecoverable_device_makes_salusd_exit_3(void **state)
{
    (void) state;
    sl_test_server own;
    char fault[400];
    sl_ctl_prepare(&own);
    sl_ctl_path(&own, "fault", fault, sizeof fault);
    sl_ctl_start(&own, (const char *[]){"--device", "sim:v100", "--fault-inject", fault, NULL});
    salus_client *c = sl_test_connect(&own);
    job a;
    job_open(c, &a, 64, 1, "fatal");
    assert_sl_ok(job_run(&a));
    sl_ctl_fault(&own, "fatal");
    assert_sl_err(job_run(&a), SALUS_EDEVICERESET);
    assert_int_equal(sl_ctl_wait(&own, 15), 3);
    assert_true(sl_ctl_log_has(&own, "cannot be recovered"));
    assert_sl_err(job_run(&a), SALUS_ECONN);
    salus_graph_free(a.g);
    (void) salus_session_close(a.s);
    salus_disconnect(c);
    sl_ctl_cleanup(&own);
}

/* --fault-inject is for the sim device (and cuda's graph faults), and
 * refused on others. */
static void fault_injection_needs_the_sim_device(void **state)
{
    (void) state;
    sl_test_server own;
    sl_ctl_prepare(&own);
    const char *args[] = {"--listen", own.url, "--fault-inject", "/tmp/x", NULL};
    sl_ctl_spawn(&own, args);
    assert_int_equal(sl_ctl_wait(&own, 10), 2);
    assert_true(sl_ctl_log_has(&own, "needs a sim device"));
    sl_ctl_cleanup(&own);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(allocation_failure_fails_one_request),
        cmocka_unit_test(sticky_error_resets_the_device),
        cmocka_unit_test(requests_during_a_reset_wait_for_it),
        cmocka_unit_test(slow_device_keeps_the_server_answering),
        cmocka_unit_test(bad_fault_command_is_ignored),
        cmocka_unit_test(unrecoverable_device_makes_salusd_exit_3),
        cmocka_unit_test(fault_injection_needs_the_sim_device),
    };
    return cmocka_run_group_tests_name("faults", tests, start, stop);
}
