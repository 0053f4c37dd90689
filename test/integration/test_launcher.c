/* The executor's launchers against a real salusd: long iterations are
 * submitted without the server lock (server/exec.h, "Launching").
 *
 * On cpu, where ops compute: several sessions run long iterations at once,
 * each bumping a counter of its own in place and fetching it through a
 * chain of ops, so every fetch shows whether its session's iterations ran
 * one at a time and in order.
 *
 * On sim with host-launch (a launch holds the submitting thread, as in a
 * GPU driver) and an injected slowdown, an iteration of 8192 ops takes
 * about 0.4 s to submit. While it launches: another session's small run
 * finishes at once (the lock is free), a lost device stops the launch and
 * fails the iteration through its completion, the device is reset after
 * it, a drain lets it finish, and its session can be closed. The same
 * holds for a low-priority iteration beside a high-priority session,
 * submitted as one segment of its ops by a launcher (sched/steps.h). */
#include "salusd_ctl.h"
#include "sl_test.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* salusd's graph limit, and more than LAUNCH_INLINE_MAX (executor.c) */
#define LONG_OPS 8192
#define N 4

static const int64_t dims[] = {N};

static void sleep_ms(long ms)
{
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
}

/* A session with counter c (zeros) and the graph
 *     c += 1; y = x + c; y = 1 * y, n_ops - 2 times; fetch y
 * so its k-th run (from 1) fetches x + k. */
typedef struct job {
    salus_session *s;
    salus_graph *g;
    uint64_t c;
    salus_value y;
} job;

static void job_open(salus_client *cl, job *j, int n_ops, const char *name)
{
    salus_session_opts o = {.name = name};
    assert_sl_ok(salus_session_open(cl, &o, &j->s));
    assert_sl_ok(salus_tensor_create(j->s, SALUS_F32, 1, dims, NULL, &j->c));
    j->g = salus_graph_new();
    salus_value x = salus_graph_input(j->g, SALUS_F32, 1, dims);
    salus_value c = salus_graph_param(j->g, j->c, SALUS_F32, 1, dims);
    const float one = 1.0f;
    (void) salus_graph_op(j->g, "add_scalar", 1, &c, 0, NULL, 1, &one);
    salus_value y = salus_graph_op(j->g, "add", 2, (salus_value[]){x, c}, 0, NULL, 0, NULL);
    for (int k = 2; k < n_ops; k++)
        y = salus_graph_op(j->g, "scale", 1, &y, 0, NULL, 1, &one);
    j->y = y;
    assert_null(salus_graph_error(j->g));
    assert_sl_ok(salus_graph_register(j->s, j->g, NULL));
}

static int job_run(job *j, float *out)
{
    const float x[N] = {10, 20, 30, 40};
    float y[N];
    int rc = salus_run(j->s, j->g, (const void *[]){x}, 1, &j->y, (void *[]){out ? out : y});
    return rc;
}

static void job_close(job *j)
{
    salus_graph_free(j->g);
    assert_sl_ok(salus_session_close(j->s));
}

/* ---- cpu: order and results under concurrency ----------------------- */

#define CPU_SESSIONS 4
#define CPU_RUNS 12

typedef struct order_thread {
    const sl_test_server *srv;
    int index;
    int wrong; /* fetches that were not x + k */
    int failed;
    pthread_t th;
} order_thread;

static void *order_main(void *arg)
{
    order_thread *o = arg;
    salus_client *cl = sl_test_connect(o->srv);
    job j;
    char name[16];
    snprintf(name, sizeof name, "order-%d", o->index);
    job_open(cl, &j, 300 + 50 * o->index, name);
    for (int k = 1; k <= CPU_RUNS; k++) {
        float y[N];
        if (job_run(&j, y) != SALUS_OK) {
            o->failed++;
            continue;
        }
        for (int i = 0; i < N; i++)
            o->wrong += y[i] != 10.0f * (float) (i + 1) + (float) k;
    }
    job_close(&j);
    salus_disconnect(cl);
    return NULL;
}

static void cpu_iterations_run_in_order_with_their_results(void **state)
{
    (void) state;
    sl_test_server srv;
    /* two lanes' worth of memory for four sessions: lanes are shared too */
    sl_ctl_launch(&srv, (const char *[]){"--device", "cpu", "--memory-limit", "256M", NULL});
    order_thread t[CPU_SESSIONS];
    for (int i = 0; i < CPU_SESSIONS; i++) {
        t[i] = (order_thread){.srv = &srv, .index = i};
        assert_int_equal(pthread_create(&t[i].th, NULL, order_main, &t[i]), 0);
    }
    for (int i = 0; i < CPU_SESSIONS; i++) {
        assert_int_equal(pthread_join(t[i].th, NULL), 0);
        assert_int_equal(t[i].failed, 0);
        assert_int_equal(t[i].wrong, 0);
    }
    sl_ctl_finish(&srv);
}

/* ---- sim: what reaches a launcher mid-launch ----------------------- */

/* salusd on the H200 profile with launches that take host time, slowed
 * down so that one iteration of LONG_OPS ops takes ~0.4 s to submit. */
static void sim_start(sl_test_server *srv)
{
    char fault[400];
    sl_ctl_prepare(srv);
    sl_ctl_path(srv, "fault", fault, sizeof fault);
    sl_ctl_start(srv, (const char *[]){"--device", "sim:h200,host-launch", "--memory-limit", "8G",
                                       "--fault-inject", fault, NULL});
    sl_ctl_fault(srv, "slow 10");
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
    r->rc = job_run(r->j, NULL);
    r->seconds = sl_ts_now_s() - t0;
    return NULL;
}

/* Starts j's run in the background and returns once its lane is busy. */
static void run_long(const sl_test_server *srv, runner *r, job *j)
{
    r->j = j;
    r->rc = -1;
    assert_int_equal(pthread_create(&r->th, NULL, run_thread, r), 0);
    salus_client *watch = sl_test_connect(srv);
    sl_ctl_wait_running(watch, salus_session_id(j->s));
    salus_disconnect(watch);
}

static int run_join(runner *r)
{
    assert_int_equal(pthread_join(r->th, NULL), 0);
    return r->rc;
}

/* While a long iteration launches, another session's small runs need
 * the lock only briefly: they finish long before the launch does. */
static void sim_small_runs_pass_a_launching_iteration(void **state)
{
    (void) state;
    sl_test_server srv;
    sim_start(&srv);
    salus_client *cl = sl_test_connect(&srv);
    job big, small;
    job_open(cl, &big, LONG_OPS, "big");
    salus_client *cl2 = sl_test_connect(&srv);
    job_open(cl2, &small, 3, "small");
    /* started by time, not by status: status waits for the lock, so it
     * would only answer once a launch under the lock had ended */
    runner r = {.j = &big, .rc = -1};
    assert_int_equal(pthread_create(&r.th, NULL, run_thread, &r), 0);
    sleep_ms(100);
    double worst = 0;
    int done = 0;
    for (; done < 5; done++) {
        double t0 = sl_ts_now_s();
        assert_sl_ok(job_run(&small, NULL));
        double dt = sl_ts_now_s() - t0;
        worst = dt > worst ? dt : worst;
    }
    assert_sl_ok(run_join(&r));
    printf("long iteration %.3f s; the other session's worst run %.1f ms\n", r.seconds,
           worst * 1e3);
    /* under the lock the small runs would each wait for the rest of the
     * launch (~0.4 s); beside it they take a few launches */
    assert_true(r.seconds > 0.2);
    assert_true(worst < r.seconds / 4);
    job_close(&big);
    job_close(&small);
    salus_disconnect(cl2);
    salus_disconnect(cl);
    sl_ctl_finish(&srv);
}

/* A device lost mid-launch, as another session's iteration finds out,
 * stops the launcher: the launching iteration fails with DEVICE_RESET
 * through its completion, well before its launch would have ended, and
 * the reset that follows waits for it. */
static void sim_lost_device_stops_a_launch_and_resets(void **state)
{
    (void) state;
    sl_test_server srv;
    sim_start(&srv);
    salus_client *cl = sl_test_connect(&srv);
    job big, small;
    job_open(cl, &big, LONG_OPS, "lost");
    salus_client *cl2 = sl_test_connect(&srv);
    job_open(cl2, &small, 3, "finder");
    runner r;
    run_long(&srv, &r, &big);
    assert_sl_ok(run_join(&r));
    double healthy = r.seconds;
    run_long(&srv, &r, &big);
    sl_ctl_fault(&srv, "sticky");
    assert_sl_err(job_run(&small, NULL), SALUS_EDEVICERESET);
    assert_sl_err(run_join(&r), SALUS_EDEVICERESET);
    printf("healthy iteration %.3f s; failed after %.3f s\n", healthy, r.seconds);
    assert_true(r.seconds < healthy / 2);
    for (int i = 0; i < 500 && !sl_ctl_log_has(&srv, "device reset #1"); i++)
        sleep_ms(10);
    assert_true(sl_ctl_log_has(&srv, "device reset #1"));
    /* the session re-uploads (zeros) and runs again, launch and all */
    const float zeros[N] = {0};
    assert_sl_ok(salus_tensor_write(big.s, big.c, zeros, sizeof zeros));
    sl_ctl_fault(&srv, "slow 1");
    assert_sl_ok(job_run(&big, NULL));
    job_close(&big);
    job_close(&small);
    salus_disconnect(cl2);
    salus_disconnect(cl);
    sl_ctl_finish(&srv);
}

/* SIGTERM mid-launch: the launching iteration finishes (drain), then
 * salusd exits 0. */
static void sim_drain_finishes_a_launching_iteration(void **state)
{
    (void) state;
    sl_test_server srv;
    sim_start(&srv);
    salus_client *cl = sl_test_connect(&srv);
    job big;
    job_open(cl, &big, LONG_OPS, "drained");
    runner r;
    run_long(&srv, &r, &big);
    kill(srv.pid, SIGTERM);
    assert_sl_ok(run_join(&r));
    assert_int_equal(sl_ctl_wait(&srv, 15), 0);
    assert_true(sl_ctl_log_has(&srv, "drained after 1 iterations"));
    salus_graph_free(big.g);
    (void) salus_session_close(big.s);
    salus_disconnect(cl);
    sl_ctl_cleanup(&srv);
}

/* A session closed while its iteration launches goes once the iteration
 * has ended (its launcher pinned it); the server carries on. */
static void sim_session_closed_mid_launch(void **state)
{
    (void) state;
    sl_test_server srv;
    sim_start(&srv);
    salus_client *cl = sl_test_connect(&srv);
    job big;
    job_open(cl, &big, LONG_OPS, "closed");
    uint64_t id = salus_session_id(big.s);
    runner r;
    run_long(&srv, &r, &big);
    salus_client *killer = sl_test_connect(&srv);
    assert_sl_ok(salus_kill_session(killer, id));
    int rc = run_join(&r);
    /* the iteration ran to its end or its session's loss answered it */
    assert_true(rc == SALUS_OK || rc == SALUS_ESESSIONLOST);
    for (int i = 0; i < 500 && !sl_ctl_log_has(&srv, "(closed) closed"); i++)
        sleep_ms(10);
    assert_true(sl_ctl_log_has(&srv, "(closed) closed"));
    assert_int_equal(sl_ctl_queued(killer, id), -1);
    job other;
    job_open(killer, &other, LONG_OPS, "after");
    sl_ctl_fault(&srv, "slow 1");
    assert_sl_ok(job_run(&other, NULL));
    job_close(&other);
    salus_graph_free(big.g);
    (void) salus_session_close(big.s);
    salus_disconnect(killer);
    salus_disconnect(cl);
    sl_ctl_finish(&srv);
}

/* ---- sim: a low-priority segment mid-launch ------------------------ */

/* salusd as sim_start, under the priority policy with segments as long as
 * the flag allows: beside an idle high-priority session, a low-priority
 * iteration whose ops were measured goes as one segment of them, through
 * a launcher. Its first iteration (op by op, measuring) runs at full
 * speed; then launches slow down as in sim_start. */
static void sim_segment_start(sl_test_server *srv, salus_client **cl, salus_session **hp, job *lp)
{
    char fault[400];
    sl_ctl_prepare(srv);
    sl_ctl_path(srv, "fault", fault, sizeof fault);
    sl_ctl_start(srv, (const char *[]){"--device", "sim:h200,host-launch", "--memory-limit", "8G",
                                       "--fault-inject", fault, "--policy", "priority",
                                       "--lp-segment-us", "10000000", NULL});
    *cl = sl_test_connect(srv);
    salus_session_opts o = {.name = "hp", .priority = 10};
    assert_sl_ok(salus_session_open(*cl, &o, hp));
    job_open(*cl, lp, LONG_OPS, "lp");
    assert_sl_ok(job_run(lp, NULL)); /* measures its ops */
    sl_ctl_fault(srv, "slow 10");
}

/* A device lost mid-segment stops its launcher: the iteration fails with
 * DEVICE_RESET through its completion, and the device is reset after it;
 * the session then runs again. SIGTERM mid-segment: the segment and the
 * iteration finish (drain), then salusd exits 0. */
static void sim_segment_lost_device_then_drain(void **state)
{
    (void) state;
    sl_test_server srv;
    salus_client *cl;
    salus_session *hp;
    job lp, small;
    sim_segment_start(&srv, &cl, &hp, &lp);
    salus_client *cl2 = sl_test_connect(&srv);
    job_open(cl2, &small, 3, "finder");
    runner r;
    run_long(&srv, &r, &lp);
    assert_sl_ok(run_join(&r));
    double healthy = r.seconds;
    run_long(&srv, &r, &lp);
    sl_ctl_fault(&srv, "sticky");
    assert_sl_err(job_run(&small, NULL), SALUS_EDEVICERESET);
    assert_sl_err(run_join(&r), SALUS_EDEVICERESET);
    printf("healthy segmented iteration %.3f s; failed after %.3f s\n", healthy, r.seconds);
    assert_true(r.seconds < healthy / 2);
    for (int i = 0; i < 500 && !sl_ctl_log_has(&srv, "device reset #1"); i++)
        sleep_ms(10);
    assert_true(sl_ctl_log_has(&srv, "device reset #1"));
    const float zeros[N] = {0};
    assert_sl_ok(salus_tensor_write(lp.s, lp.c, zeros, sizeof zeros));
    float y[N];
    assert_sl_ok(job_run(&lp, y));
    run_long(&srv, &r, &lp);
    kill(srv.pid, SIGTERM);
    assert_sl_ok(run_join(&r));
    assert_int_equal(sl_ctl_wait(&srv, 30), 0);
    salus_graph_free(lp.g);
    salus_graph_free(small.g);
    salus_disconnect(cl2);
    salus_disconnect(cl);
    /* salusd is gone: closing only frees the handles */
    (void) salus_session_close(lp.s);
    (void) salus_session_close(small.s);
    (void) salus_session_close(hp);
    sl_ctl_cleanup(&srv);
}

/* A low-priority session closed mid-segment goes once its iteration has
 * ended; the server carries on. */
static void sim_segment_session_closed(void **state)
{
    (void) state;
    sl_test_server srv;
    salus_client *cl;
    salus_session *hp;
    job lp;
    sim_segment_start(&srv, &cl, &hp, &lp);
    uint64_t id = salus_session_id(lp.s);
    runner r;
    run_long(&srv, &r, &lp);
    salus_client *killer = sl_test_connect(&srv);
    assert_sl_ok(salus_kill_session(killer, id));
    int rc = run_join(&r);
    assert_true(rc == SALUS_OK || rc == SALUS_ESESSIONLOST);
    for (int i = 0; i < 500 && !sl_ctl_log_has(&srv, "(lp) closed"); i++)
        sleep_ms(10);
    assert_true(sl_ctl_log_has(&srv, "(lp) closed"));
    assert_int_equal(sl_ctl_queued(killer, id), -1);
    assert_sl_ok(salus_session_close(hp));
    salus_graph_free(lp.g);
    (void) salus_session_close(lp.s);
    salus_disconnect(killer);
    salus_disconnect(cl);
    sl_ctl_finish(&srv);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cpu_iterations_run_in_order_with_their_results),
        cmocka_unit_test(sim_small_runs_pass_a_launching_iteration),
        cmocka_unit_test(sim_lost_device_stops_a_launch_and_resets),
        cmocka_unit_test(sim_drain_finishes_a_launching_iteration),
        cmocka_unit_test(sim_session_closed_mid_launch),
        cmocka_unit_test(sim_segment_lost_device_then_drain),
        cmocka_unit_test(sim_segment_session_closed),
    };
    return cmocka_run_group_tests_name("launcher", tests, NULL, NULL);
}
