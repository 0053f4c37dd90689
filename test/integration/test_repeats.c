/* A request re-sent by NNG's REQ socket runs once. Clients of other
 * languages keep NNG's default resend time (60 s in nngcat, pynng, mangos),
 * so a long iteration or a waiting OpenSession reaches salusd again and
 * again; salusd must answer the copies with the first one's reply and never
 * run them. Here the client's resend time is cut to 100 ms, and the server's
 * own counters show what ran. */
#include "client_internal.h"
#include "harness.h"
#include "status_call.h"
#include "sl_test.h"

#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

static sl_test_server server;

#define N 1024
#define CHAIN 24 /* matmuls of N x N: long enough for several resends */

typedef struct counts {
    uint64_t iterations, repeats, sessions;
} counts;

static counts server_counts(void)
{
    salus_client *c = sl_test_connect(&server);
    Salus__Reply *rep = sl_test_status(c);
    counts k = {rep->status->iterations_total, rep->status->repeats_total,
                rep->status->n_sessions + rep->status->n_queue};
    salus__reply__free_unpacked(rep, NULL);
    salus_disconnect(c);
    return k;
}

/* A client whose REQ context re-sends every 100 ms, as a careless client
 * of another language would (only sooner). */
static salus_client *impatient_client(void)
{
    salus_client *c = sl_test_connect(&server);
    assert_int_equal(nng_ctx_set_ms(c->ctx, NNG_OPT_REQ_RESENDTIME, 100), 0);
    return c;
}

static void a_long_run_resent_by_req_runs_once(void **state)
{
    (void) state;
    salus_client *c = impatient_client();
    salus_session *s;
    assert_sl_ok(salus_session_open(c, NULL, &s));
    const int64_t dims[] = {N, N};
    uint64_t w;
    assert_sl_ok(salus_tensor_create(s, SALUS_F32, 2, dims, NULL, &w));
    salus_graph *g = salus_graph_new();
    salus_value x = salus_graph_param(g, w, SALUS_F32, 2, dims), y = x;
    for (int i = 0; i < CHAIN; i++)
        y = salus_graph_op(g, "matmul", 2, (salus_value[]){y, x}, 0, NULL, 0, NULL);
    salus_value sum = salus_graph_op(g, "reduce_sum", 1, &y, 0, NULL, 0, NULL);
    assert_sl_ok(salus_graph_register(s, g, NULL));

    counts before = server_counts();
    float out = -1;
    void *const outs[] = {&out};
    double t0 = sl_ts_now_s();
    assert_sl_ok(salus_run(s, g, NULL, 1, &sum, outs));
    double ms = (sl_ts_now_s() - t0) * 1e3;
    /* a session runs its requests in order: copies of the first run that
     * salusd queued would all have run before this second one returns */
    assert_sl_ok(salus_run(s, g, NULL, 1, &sum, outs));
    counts after = server_counts();
    print_message("one run of %d matmuls took %.0f ms; salusd saw %llu repeats\n", CHAIN, ms,
                  (unsigned long long) (after.repeats - before.repeats));
    assert_float_equal(out, 0, 0);
    /* two runs asked, two ran; and (when the first outlasted the resend
     * time) its copies did reach salusd */
    assert_int_equal(after.iterations - before.iterations, 2);
    if (ms > 300)
        assert_true(after.repeats > before.repeats);
    salus_graph_free(g);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
}

struct waiter {
    salus_client *c;
    salus_session *s;
    int rc;
};

static void *open_waiting(void *arg)
{
    struct waiter *w = arg;
    salus_session_opts o = {
        .name = "waiter", .persistent_bytes = 96u << 20, .wait_for_admission = 1};
    w->rc = salus_session_open(w->c, &o, &w->s);
    return NULL;
}

static void a_waiting_open_resent_by_req_opens_one_session(void **state)
{
    (void) state;
    salus_client *hog_c = sl_test_connect(&server);
    salus_session *hog;
    salus_session_opts big = {.name = "hog", .persistent_bytes = 160u << 20};
    assert_sl_ok(salus_session_open(hog_c, &big, &hog));

    struct waiter w = {.c = impatient_client()};
    counts before = server_counts();
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, open_waiting, &w), 0);
    struct timespec nap = {0, 800 * 1000 * 1000}; /* several resends while it waits */
    nanosleep(&nap, NULL);
    counts waiting = server_counts();
    assert_int_equal(waiting.sessions, before.sessions + 1); /* one waiting, not one per copy */
    assert_true(waiting.repeats > before.repeats);
    assert_sl_ok(salus_session_close(hog));
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_sl_ok(w.rc);
    assert_int_equal(server_counts().sessions, before.sessions); /* the waiter replaced the hog */
    assert_sl_ok(salus_session_close(w.s));
    salus_disconnect(w.c);
    salus_disconnect(hog_c);
}

int main(void)
{
    static const char *const args[] = {"--memory-limit", "256M", "--lane-size", "16M", NULL};
    sl_test_server_start(&server, args);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_long_run_resent_by_req_runs_once),
        cmocka_unit_test(a_waiting_open_resent_by_req_opens_one_session),
    };
    int failed = cmocka_run_group_tests_name("repeats", tests, NULL, NULL);
    int status = sl_test_server_stop(&server);
    if (status != 0)
        print_error("salusd exited with status %d\n", status);
    return failed || status != 0;
}
