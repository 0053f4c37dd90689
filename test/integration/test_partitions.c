/* Compute partitions through a real salusd on the cpu backend: started with
 * --partitions or on demand (the default), shown in status, changed at run time (also while clients
 * train: cpu partitions change live), malformed and impossible changes
 * refused, and training results exact throughout; and on the sim device,
 * a declared need and one searched for on demand. Needs 2 cores (a
 * partition each); SKIP otherwise. */
#include "harness.h"
#include "sl_test.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
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
    /* the low-priority lanes' streams run below normal: their core is
     * lent to high-priority work */
    status_has(c,
               "partitions: online 1 core (fixed, need 1), offline 1 core (lent to online work)");
    status_has(c, "core sets");
    salus_disconnect(c);
}

/* --strict-partitions, and stream classes off: no loan. */
static void strict_when_asked(void **state)
{
    (void) state;
    const char *flags[][6] = {
        {"--policy", "priority", "--partitions", "1", "--strict-partitions", NULL},
        {"--policy", "priority", "--partitions", "1", "--no-stream-classes", NULL},
    };
    for (size_t i = 0; i < 2; i++) {
        sl_test_server other;
        sl_test_server_start(&other, flags[i]);
        salus_client *c = sl_test_connect(&other);
        char *text;
        assert_sl_ok(salus_status_text(c, &text));
        assert_non_null(strstr(text, "partitions: online 1 core (fixed, need 1), offline 1 core"));
        if (strstr(text, "lent"))
            fail_msg("%s: a loan in status:\n%s", flags[i][4], text);
        salus_free(text);
        salus_disconnect(c);
        assert_int_equal(sl_test_server_stop(&other), 0);
    }
}

static void change_while_training(void **state)
{
    (void) state;
    pid_t pa, pb;
    sl_test_spawn_mlp_pair(&server, "200", &pa, &pb);
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

/* A high-priority service (two small matmuls per request) beside two
 * low-priority trainers checked against their reference: the trainers
 * go op by op, and some of their steps borrow the idle online core (the
 * spill stream); their results stay exact. */
static void spill_beside_hp(void **state)
{
    (void) state;
    salus_client *c = sl_test_connect(&server);
    assert_sl_ok(salus_set_partitions(c, "1"));
    salus_session_opts o = {.name = "hp", .priority = 10, .ephemeral_bytes = 1 << 20};
    salus_session *s;
    assert_sl_ok(salus_session_open(c, &o, &s));
    uint64_t w;
    const int64_t dw[] = {64, 64}, dx[] = {8, 64};
    assert_sl_ok(salus_tensor_create(s, SALUS_F32, 2, dw, NULL, &w));
    salus_value x, y;
    salus_graph *g = sl_test_relu_graph(s, "matmul", 2, dx, w, 2, dw, &x, &y);
    const char *a1[] = {"--url", server.url, "--name", "lp1",     "--seed",
                        "3",     "--steps",  "150",    "--check", NULL};
    const char *a2[] = {"--url", server.url, "--name", "lp2",     "--seed",
                        "4",     "--steps",  "150",    "--check", NULL};
    pid_t p1 = sl_test_spawn("MLP_REGRESSION", a1);
    pid_t p2 = sl_test_spawn("MLP_REGRESSION", a2);
    static float in[8 * 64];
    const void *feeds[] = {in};
    for (int i = 0; i < 400; i++) {
        assert_sl_ok(salus_run(s, g, feeds, 0, NULL, NULL));
        struct timespec nap = {0, 2 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    assert_int_equal(sl_test_wait(p1, 120), 0);
    assert_int_equal(sl_test_wait(p2, 120), 0);
    char *text;
    assert_sl_ok(salus_status_text(c, &text));
    const char *at = strstr(text, "resizes, ");
    assert_non_null(at);
    unsigned long spills = strtoul(at + strlen("resizes, "), NULL, 10);
    printf("spilled steps: %lu\n", spills);
    /* hundreds in practice: the trainers' steps meet an idle online core
     * almost always (the first step of an iteration never spills) */
    assert_true(spills > 0);
    salus_free(text);
    salus_graph_free(g);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
}

/* --partitions auto on the sim device (H100: 8 SMs in steps of 8): with
 * no need declared the online partition starts at its largest to search
 * for one; a high-priority session declaring 40 SMs ends the search with
 * 40 + 10 % headroom, rounded to 48, once its first iteration has run. */
static void declared_need(void **state)
{
    (void) state;
    sl_test_server sim;
    const char *args[] = {"--device",     "sim:h100", "--policy", "priority",
                          "--partitions", "auto",     NULL};
    sl_test_server_start(&sim, args);
    salus_client *c = sl_test_connect(&sim);
    status_has(c, "partitions: online 120 SMs (auto, searching at +20 %), offline 8 SMs");
    salus_session_opts o = {.name = "hp", .priority = 10, .compute_units = 40};
    salus_session *s;
    assert_sl_ok(salus_session_open(c, &o, &s));
    uint64_t w;
    const int64_t dw[] = {64, 64}, dx[] = {8, 64};
    assert_sl_ok(salus_tensor_create(s, SALUS_F32, 2, dw, NULL, &w));
    salus_graph *g = salus_graph_new();
    salus_value x = salus_graph_input(g, SALUS_F32, 2, dx);
    salus_value a = salus_graph_param(g, w, SALUS_F32, 2, dw);
    (void) salus_graph_op(g, "matmul", 2, (salus_value[]){x, a}, 0, NULL, 0, NULL);
    assert_sl_ok(salus_graph_register(s, g, NULL));
    static float in[8 * 64];
    const void *feeds[] = {in};
    for (int i = 0; i < 3; i++)
        assert_sl_ok(salus_run(s, g, feeds, 0, NULL, NULL));
    status_has(c, "partitions: online 48 SMs (auto, need 48), offline 80 SMs, 1 resizes");
    salus_graph_free(g);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
    assert_int_equal(sl_test_server_stop(&sim), 0);
}

/* A low-priority session running eight 4096-square matmuls of its own
 * params per iteration (about 20 ms on a modelled H100), back to back
 * until stop. */
typedef struct lp_loop {
    salus_session *s;
    atomic_bool stop;
    int rc;
    atomic_int iterations;
} lp_loop;

static void *lp_main(void *arg)
{
    lp_loop *l = arg;
    const int64_t d[] = {4096, 4096};
    uint64_t a;
    salus_graph *g = NULL;
    if ((l->rc = salus_tensor_create(l->s, SALUS_F32, 2, d, NULL, &a)) != SALUS_OK)
        return NULL;
    g = salus_graph_new();
    salus_value x = salus_graph_param(g, a, SALUS_F32, 2, d), y = x;
    for (int i = 0; i < 8; i++)
        y = salus_graph_op(g, "matmul", 2, (salus_value[]){y, x}, 0, NULL, 0, NULL);
    if ((l->rc = salus_graph_register(l->s, g, NULL)) == SALUS_OK)
        while (!atomic_load(&l->stop) &&
               (l->rc = salus_run(l->s, g, NULL, 0, NULL, NULL)) == SALUS_OK)
            l->iterations++;
    salus_graph_free(g);
    return NULL;
}

/* A salusd on the sim device with its default partitions (on demand), a
 * high-priority session with a small matmul graph, and a low-priority
 * session running lp_main beside it. */
typedef struct demand_sim {
    sl_test_server srv;
    salus_client *c;
    salus_session *hp, *lp;
    lp_loop lpl;
    pthread_t lpt;
    salus_graph *g;
    struct timespec t0, now;
} demand_sim;

static float demand_in[64 * 256];

static void demand_sim_run(demand_sim *d)
{
    const void *feeds[] = {demand_in};
    assert_sl_ok(salus_run(d->hp, d->g, feeds, 0, NULL, NULL));
}

/* Starts it: off with the high-priority session alone, and still off
 * once the low-priority one joins and runs, until a high-priority
 * iteration has run; then on at the largest online partition
 * (searching). The low-priority session runs iterations of tens of ms
 * back to back, so its lane is busy at almost every high-priority
 * boundary; sim changes partitions only while nothing runs, which is then
 * the end of one of its iterations (sl_exec_parts_settle). */
static void demand_sim_start(demand_sim *d)
{
    const char *args[] = {"--device",       "sim:h100", "--policy", "priority",
                          "--memory-limit", "2G",       NULL};
    sl_test_server_start(&d->srv, args);
    d->c = sl_test_connect(&d->srv);
    salus_session_opts ho = {.name = "hp", .priority = 10},
                       lo = {.name = "lp", .ephemeral_bytes = 256ull << 20};
    const char *off = "partitions: on demand: off until a high-priority job runs beside a "
                      "low-priority one";
    assert_sl_ok(salus_session_open(d->c, &ho, &d->hp));
    status_has(d->c, off);
    assert_sl_ok(salus_session_open(d->c, &lo, &d->lp));
    d->lpl = (lp_loop){.s = d->lp};
    assert_int_equal(pthread_create(&d->lpt, NULL, lp_main, &d->lpl), 0);
    struct timespec ms = {0, 1000 * 1000};
    for (int i = 0; i < 10000 && atomic_load(&d->lpl.iterations) == 0; i++)
        nanosleep(&ms, NULL);
    assert_true(atomic_load(&d->lpl.iterations) > 0); /* it runs, on the whole device */
    status_has(d->c, off);
    uint64_t w;
    const int64_t dw[] = {256, 256}, dx[] = {64, 256};
    assert_sl_ok(salus_tensor_create(d->hp, SALUS_F32, 2, dw, NULL, &w));
    d->g = salus_graph_new();
    salus_value x = salus_graph_input(d->g, SALUS_F32, 2, dx);
    salus_value a = salus_graph_param(d->g, w, SALUS_F32, 2, dw);
    (void) salus_graph_op(d->g, "matmul", 2, (salus_value[]){x, a}, 0, NULL, 0, NULL);
    assert_sl_ok(salus_graph_register(d->hp, d->g, NULL));
    /* on once one has run, at the first idle moment (the low-priority
     * lane's iterations end) */
    const char *on = "partitions: on demand: online 120 SMs (auto, searching at +20 %), offline 8";
    char *text = NULL;
    for (int i = 0; i < 1000 && (!text || !strstr(text, on)); i++) {
        demand_sim_run(d);
        salus_free(text);
        assert_sl_ok(salus_status_text(d->c, &text));
    }
    if (!strstr(text, on))
        fail_msg("status lacks \"%s\":\n%s", on, text);
    salus_free(text);
}

/* Runs high-priority iterations in batches of `batch`, 2 ms apart, until
 * `salusctl partitions` says what, or limit_s passed; then stops the
 * low-priority loop. *text (NULL on entry) is the last text (salus_free). */
static void demand_sim_until(demand_sim *d, int batch, const char *what, long limit_s, char **text)
{
    struct timespec nap = {0, 2 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &d->t0);
    do {
        for (int i = 0; i < batch; i++) {
            demand_sim_run(d);
            nanosleep(&nap, NULL);
        }
        salus_free(*text);
        assert_sl_ok(salus_partitions_text(d->c, text));
        clock_gettime(CLOCK_MONOTONIC, &d->now);
    } while (!strstr(*text, what) && d->now.tv_sec - d->t0.tv_sec < limit_s);
    atomic_store(&d->lpl.stop, true);
    assert_int_equal(pthread_join(d->lpt, NULL), 0);
    assert_sl_ok(d->lpl.rc);
}

/* Off again when the low-priority session leaves; everything closed. */
static void demand_sim_stop(demand_sim *d)
{
    salus_graph_free(d->g);
    assert_sl_ok(salus_session_close(d->lp));
    status_has(d->c, "partitions: on demand: off");
    assert_sl_ok(salus_session_close(d->hp));
    salus_disconnect(d->c);
    assert_int_equal(sl_test_server_stop(&d->srv), 0);
}

/* salusd's default on the sim device, --partitions demand, where nothing
 * is lent: on only while a high-priority and a low-priority job are both
 * joined, and then with no need declared the online partition starts at
 * its largest (120 of 128 SMs) and searches for the need from the
 * high-priority iterations' times; the search ends at a size of the
 * granularity. */
static void searched_on_demand_sim(void **state)
{
    (void) state;
    demand_sim d;
    demand_sim_start(&d);
    /* the reference (5 iterations), then at most log2(15) + 1 probes of 5,
     * each size once the low-priority iteration running ends */
    char *text = NULL;
    demand_sim_until(&d, 10, "need searched", 30, &text);
    assert_true(d.lpl.iterations > 0);
    unsigned online = 0, need = 0;
    const char *on = strstr(text, "online    "), *sizing = strstr(text, "need searched at +20 %");
    if (!on || sscanf(on, "online    %u SMs (high-priority lanes; need %u)", &online, &need) != 2 ||
        !sizing)
        fail_msg("no searched need:\n%s", text);
    salus_free(text);
    print_message("need searched: %u SMs (online now %u), low-priority iterations %d in %ld s\n",
                  need, online, d.lpl.iterations, (long) (d.now.tv_sec - d.t0.tv_sec));
    assert_true(need >= 16 && need <= 120 && need % 8 == 0 && online >= need);
    demand_sim_stop(&d);
}

/* The same default on the sim device, with the guard. Beside a busy
 * low-priority session the need is searched, a window of high-priority
 * requests runs on it, and then the device is shared to try; whichever
 * way the trial goes (the matmuls' blocks may hold the high-priority
 * requests back, or not), status agrees with it: shared without
 * partitions, or partitions back at the need and what the next trial
 * waits for. */
static void guard_on_demand_sim(void **state)
{
    (void) state;
    demand_sim d;
    demand_sim_start(&d);
    char *text = NULL;
    demand_sim_until(&d, 20, "guard     sharing tried", 60, &text);
    unsigned long long tried = 0, ended = 0;
    const char *at = strstr(text, "guard     sharing tried");
    if (!at || sscanf(at, "guard     sharing tried %llu times, ended %llu", &tried, &ended) != 2)
        fail_msg("no sharing trial:\n%s", text);
    print_message("sharing tried %llu times, ended %llu\n", tried, ended);
    assert_true(tried >= 1 && ended <= tried);
    if (ended == tried && !strstr(text, "mode      demand (on now)"))
        fail_msg("the trial ended but the partitions are not back:\n%s", text);
    if (ended == tried && !strstr(text, "retry     after "))
        fail_msg("the trial ended but status does not say what the next waits for:\n%s", text);
    if (ended < tried &&
        (!strstr(text, "sizing    shared") || !strstr(text, "mode      demand (off now)")))
        fail_msg("sharing, but the partitions are not gone or status does not say so:\n%s", text);
    salus_free(text);
    /* the high-priority session still runs, wherever it is bound now */
    demand_sim_run(&d);
    demand_sim_stop(&d);
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

/* salusd's default on cpu: partitions on demand. Off while only normal
 * jobs run; on (one core for the high-priority lanes, the other lent to
 * them) from the moment a high-priority session joins under the priority
 * policy; off again when it leaves or the policy no longer gives such jobs
 * lanes of their own; and `--partitions off` (or a mode set at run time)
 * ends the following. */
static void on_demand_by_default(void **state)
{
    (void) state;
    sl_test_server other;
    const char *args[] = {"--policy", "priority", NULL};
    sl_test_server_start(&other, args);
    salus_client *c = sl_test_connect(&other);
    status_has(c, "partitions: on demand: off until a high-priority job joins");
    salus_session *normal, *hp;
    salus_session_opts no = {.name = "normal"}, ho = {.name = "hp", .priority = 10};
    assert_sl_ok(salus_session_open(c, &no, &normal));
    status_has(c, "partitions: on demand: off");
    assert_sl_ok(salus_session_open(c, &ho, &hp));
    status_has(c, "partitions: on demand: online 1 core (auto, need 1), offline 1 core (lent");
    assert_sl_ok(salus_set_policy(c, "fifo", 0));
    status_has(c, "partitions: on demand: off");
    assert_sl_ok(salus_set_policy(c, "priority", 0));
    status_has(c, "partitions: on demand: online 1 core");
    assert_sl_ok(salus_session_close(hp));
    status_has(c, "partitions: on demand: off");
    /* a mode chosen at run time is kept whatever joins */
    assert_sl_ok(salus_set_partitions(c, "off"));
    assert_sl_ok(salus_session_open(c, &ho, &hp));
    status_has(c, "partitions: off; device");
    assert_sl_ok(salus_set_partitions(c, "demand"));
    status_has(c, "partitions: on demand: online 1 core");
    assert_sl_ok(salus_session_close(hp));
    assert_sl_ok(salus_session_close(normal));
    salus_disconnect(c);
    assert_int_equal(sl_test_server_stop(&other), 0);

    /* asked for off, or strict partitions (no loan): never on */
    const char *flags[][5] = {{"--policy", "priority", "--partitions", "off", NULL},
                              {"--policy", "priority", "--strict-partitions", NULL}};
    for (size_t i = 0; i < 2; i++) {
        sl_test_server_start(&other, flags[i]);
        c = sl_test_connect(&other);
        assert_sl_ok(salus_session_open(c, &ho, &hp));
        char *text;
        assert_sl_ok(salus_status_text(c, &text));
        if (strstr(text, "online 1 core"))
            fail_msg("%s %s: partitions on:\n%s", flags[i][2], flags[i][3] ? flags[i][3] : "",
                     text);
        salus_free(text);
        assert_sl_ok(salus_session_close(hp));
        salus_disconnect(c);
        assert_int_equal(sl_test_server_stop(&other), 0);
    }
}

int main(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) < 2) {
        printf("SKIP: compute partitions on cpu need 2 cores, this process has %d\n",
               CPU_COUNT(&set));
        return 77;
    }
    /* one op per low-priority segment: the trainers go op by op, so every
     * middle op of their iterations may spill (spill_beside_hp) */
    const char *args[] = {"--policy", "priority", "--partitions", "1", "--lp-segment-us",
                          "1",        NULL};
    sl_test_server_start(&server, args);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(start_and_status),
        cmocka_unit_test(change_while_training),
        cmocka_unit_test(spill_beside_hp),
        cmocka_unit_test(declared_need),
        cmocka_unit_test(searched_on_demand_sim),
        cmocka_unit_test(guard_on_demand_sim),
        cmocka_unit_test(refused),
        cmocka_unit_test(strict_when_asked),
        cmocka_unit_test(on_demand_by_default),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    int status = sl_test_server_stop(&server);
    if (status != 0) {
        fprintf(stderr, "salusd exited %d\n", status);
        return 1;
    }
    return failed ? 1 : 0;
}
