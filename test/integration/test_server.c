/* Integration tests against a real salusd process on ipc://. */
#include "client_internal.h"
#include "harness.h"
#include "hello_pack.h"
#include "status_call.h"
#include "sl_test.h"

#include <nng/protocol/reqrep0/req.h>
#include <dirent.h>
#include <sched.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static sl_test_server server;

/* Reads the server's status: number of sessions and persistent bytes used. */
static void server_usage(salus_client *c, size_t *sessions, uint64_t *persistent)
{
    Salus__Reply *rep = sl_test_status(c);
    *sessions = rep->status->n_sessions;
    *persistent = rep->status->memory->persistent_used;
    salus__reply__free_unpacked(rep, NULL);
}

/* Polls until the server holds no session and no persistent memory. */
static void wait_for_empty(salus_client *c)
{
    size_t n = 1;
    uint64_t used = 1;
    struct timespec nap = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 500 && (n || used); i++) {
        server_usage(c, &n, &used);
        if (n || used)
            nanosleep(&nap, NULL);
    }
    assert_int_equal(n, 0);
    assert_int_equal(used, 0);
}

static void two_clients_train_and_match_reference(void **state)
{
    (void) state;
    pid_t pa, pb;
    sl_test_spawn_mlp_pair(&server, "150", &pa, &pb);
    assert_int_equal(sl_test_wait(pa, 60), 0);
    assert_int_equal(sl_test_wait(pb, 60), 0);
    salus_client *c = sl_test_connect(&server);
    wait_for_empty(c);
    salus_disconnect(c);
}

static void tensors_round_trip_and_busy_free(void **state)
{
    (void) state;
    salus_client *c;
    salus_session *s = sl_test_session(&server, &c);
    float init[6] = {1, 2, 3, 4, 5, 6}, back[6] = {0}, zeros[6] = {0};
    const int64_t dims[] = {2, 3};
    uint64_t t, z;
    assert_sl_ok(salus_tensor_create(s, SALUS_F32, 2, dims, init, &t));
    assert_sl_ok(salus_tensor_create(s, SALUS_F32, 2, dims, NULL, &z));
    assert_sl_ok(salus_tensor_read(s, t, back, sizeof back));
    assert_memory_equal(back, init, sizeof init);
    assert_sl_ok(salus_tensor_read(s, z, back, sizeof back));
    assert_memory_equal(back, zeros, sizeof zeros);
    float next[6] = {-1, -2, -3, -4, -5, -6};
    assert_sl_ok(salus_tensor_write(s, t, next, sizeof next));
    assert_sl_ok(salus_tensor_read(s, t, back, sizeof back));
    assert_memory_equal(back, next, sizeof next);
    assert_sl_err(salus_tensor_write(s, t, next, 5), SALUS_EINVAL);
    assert_sl_err(salus_tensor_read(s, t, back, 8), SALUS_EINVAL);

    /* a graph that scales the param in place through sgd: t -= 0.5 * t */
    salus_graph *g = salus_graph_new();
    salus_value p = salus_graph_param(g, t, SALUS_F32, 2, dims);
    const float lr[] = {0.5f};
    salus_graph_op(g, "sgd_update", 2, (salus_value[]){p, p}, 0, NULL, 1, lr);
    assert_null(salus_graph_error(g));
    assert_sl_ok(salus_graph_register(s, g, NULL));
    void *out[] = {back};
    assert_sl_ok(salus_run(s, g, NULL, 1, &p, out));
    for (int i = 0; i < 6; i++)
        assert_float_equal(back[i], next[i] * 0.5f, 1e-6);
    assert_sl_err(salus_tensor_free(s, t), SALUS_EBUSY);
    salus_graph_free(g);
    assert_sl_ok(salus_tensor_free(s, t));
    assert_sl_err(salus_tensor_free(s, t), SALUS_ENOTFOUND);
    assert_sl_ok(salus_session_close(s));
    wait_for_empty(c);
    salus_disconnect(c);
}

/* Sends raw bytes on a fresh REQ socket; returns the decoded reply. */
static Salus__Reply *raw_request(const void *bytes, size_t len)
{
    nng_socket sock;
    assert_int_equal(nng_req0_open(&sock), 0);
    assert_int_equal(nng_dial(sock, server.url, NULL, 0), 0);
    assert_int_equal(nng_send(sock, (void *) bytes, len, 0), 0);
    char *buf;
    size_t n;
    assert_int_equal(nng_recv(sock, &buf, &n, NNG_FLAG_ALLOC), 0);
    Salus__Reply *rep = salus__reply__unpack(NULL, n, (uint8_t *) buf);
    nng_free(buf, n);
    nng_close(sock);
    assert_non_null(rep);
    return rep;
}

static void garbage_gets_an_error_and_server_keeps_serving(void **state)
{
    (void) state;
    /* nngcat, the NNG project's own command-line peer, sends junk */
    char cmd[600];
    snprintf(cmd, sizeof cmd,
             "nngcat --req --dial '%s' --data 'this is not protobuf' --format ascii "
             "--recv-timeout 5",
             server.url);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[512] = {0};
    size_t n = fread(out, 1, sizeof out - 1, p);
    int st = pclose(p);
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_true(n > 0);
    assert_non_null(strstr(out, "undecodable request"));

    /* truncated and random bytes, sent directly */
    static const uint8_t truncated[] = {0x08, 0x01, 0x52, 0x10, 0x0a};
    Salus__Reply *rep = raw_request(truncated, sizeof truncated);
    assert_int_equal(rep->code, SALUS__CODE__PROTOCOL_ERROR);
    salus__reply__free_unpacked(rep, NULL);
    uint8_t noise[256];
    srand(7);
    for (size_t i = 0; i < sizeof noise; i++)
        noise[i] = (uint8_t) rand();
    rep = raw_request(noise, sizeof noise);
    assert_int_not_equal(rep->code, SALUS__CODE__OK);
    salus__reply__free_unpacked(rep, NULL);
    /* an empty envelope */
    rep = raw_request("", 0);
    assert_int_equal(rep->code, SALUS__CODE__INVALID_ARGUMENT);
    salus__reply__free_unpacked(rep, NULL);

    salus_client *c = sl_test_connect(&server);
    char *text;
    assert_sl_ok(salus_status_text(c, &text));
    assert_non_null(strstr(text, "salusd"));
    salus_free(text);
    salus_disconnect(c);
}

static void unknown_session_wrong_token_unknown_graph(void **state)
{
    (void) state;
    salus_client *c;
    salus_session *s = sl_test_session(&server, &c);

    struct salus_session ghost = {.client = c, .id = 999999, .token = 1};
    uint64_t id;
    const int64_t dims[] = {4};
    assert_sl_err(salus_tensor_create(&ghost, SALUS_F32, 1, dims, NULL, &id), SALUS_ESESSIONLOST);
    assert_non_null(strstr(salus_last_error(c), "999999"));

    struct salus_session thief = *s;
    thief.token ^= 0x5a5a;
    assert_sl_err(salus_tensor_create(&thief, SALUS_F32, 1, dims, NULL, &id), SALUS_ESESSIONLOST);

    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__Run run = SALUS__RUN__INIT;
    run.graph_id = 4242;
    req.body_case = SALUS__REQUEST__BODY_RUN;
    req.run = &run;
    Salus__Reply *rep;
    assert_sl_err(sl_client_session_call(s, &req, &rep), SALUS_ENOTFOUND);

    /* a real graph, run with a feed of the wrong size and a bad fetch */
    salus_graph *g = salus_graph_new();
    salus_value x = salus_graph_input(g, SALUS_F32, 1, dims);
    salus_value y = salus_graph_op(g, "relu", 1, &x, 0, NULL, 0, NULL);
    assert_sl_ok(salus_graph_register(s, g, NULL));
    float in[4] = {-1, 2, -3, 4}, out4[4];
    const void *feeds[] = {in};
    void *outs[] = {out4};
    assert_sl_ok(salus_run(s, g, feeds, 1, &y, outs));
    assert_float_equal(out4[0], 0, 0);
    assert_float_equal(out4[1], 2, 0);
    ProtobufCBinaryData feed = {.len = 3, .data = (uint8_t *) "abc"};
    uint32_t fetch = 1;
    run.graph_id = salus_graph_id(g);
    run.n_feeds = 1;
    run.feeds = &feed;
    run.n_fetches = 1;
    run.fetches = &fetch;
    assert_sl_err(sl_client_session_call(s, &req, &rep), SALUS_EINVAL);
    assert_non_null(strstr(salus_last_error(c), "feed 0 has 3 bytes"));
    feed.len = 16;
    feed.data = (uint8_t *) in;
    fetch = 99;
    assert_sl_err(sl_client_session_call(s, &req, &rep), SALUS_EINVAL);

    /* invalid graphs are refused at registration, with the reason */
    salus_graph *bad = salus_graph_new();
    const int64_t d23[] = {2, 3};
    salus_value a = salus_graph_input(bad, SALUS_F32, 2, d23);
    salus_graph_op(bad, "matmul", 2, (salus_value[]){a, a}, 0, NULL, 0, NULL);
    assert_non_null(salus_graph_error(bad));
    assert_sl_err(salus_graph_register(s, bad, NULL), SALUS_EINVAL);
    salus_graph_free(bad);

    salus_graph_free(g);
    assert_sl_ok(salus_session_close(s));
    wait_for_empty(c);
    salus_disconnect(c);
}

/* Number of iterations the server has run in total. */
static uint64_t server_iterations(salus_client *c)
{
    Salus__Reply *rep = sl_test_status(c);
    uint64_t n = rep->status->iterations_total;
    salus__reply__free_unpacked(rep, NULL);
    return n;
}

static void killed_client_memory_returns(void **state)
{
    (void) state;
    salus_client *c = sl_test_connect(&server);
    uint64_t before = server_iterations(c);
    const char *args[] = {"--url",   server.url, "--name", "victim", "--steps",
                          "1000000", "--hidden", "512",    NULL};
    pid_t pid = sl_test_spawn("MLP_REGRESSION", args);
    struct timespec nap = {0, 5 * 1000 * 1000};
    for (int i = 0; i < 2000 && server_iterations(c) < before + 20; i++)
        nanosleep(&nap, NULL);
    assert_true(server_iterations(c) >= before + 20);
    kill(pid, SIGKILL); /* mid-training: no close, maybe mid-iteration */
    assert_int_equal(sl_test_wait(pid, 10), -1);
    wait_for_empty(c);
    salus_disconnect(c);
}

/* Session handles outlive their client: closing one after the client is
 * gone only frees it (the server closes the session when the connection
 * drops). */
static void session_handles_outlive_their_client(void **state)
{
    (void) state;
    salus_client *c = sl_test_connect(&server);
    salus_session *a, *b;
    assert_sl_ok(salus_session_open(c, NULL, &a));
    assert_sl_ok(salus_session_open(c, NULL, &b));
    assert_sl_ok(salus_session_close(a));
    salus_disconnect(c);
    uint64_t id;
    assert_sl_err(salus_tensor_create(b, SALUS_F32, 1, (int64_t[]){4}, NULL, &id), SALUS_ECONN);
    assert_sl_err(salus_session_close(b), SALUS_ECONN);
    salus_client *c2 = sl_test_connect(&server);
    wait_for_empty(c2);
    salus_disconnect(c2);
}

static void protocol_version_mismatch_is_refused(void **state)
{
    (void) state;
    uint8_t buf[64];
    size_t len = sl_test_pack_hello(77, buf, sizeof buf);
    Salus__Reply *rep = raw_request(buf, len);
    assert_int_equal(rep->code, SALUS__CODE__PROTOCOL_ERROR);
    assert_non_null(strstr(rep->message, "77"));
    salus__reply__free_unpacked(rep, NULL);
}

/* An iteration may queue or run for minutes: the client's request context
 * must never re-send it (NNG's REQ default is every 60 s). */
static void requests_are_never_resent(void **state)
{
    (void) state;
    salus_client *c;
    assert_int_equal(salus_connect(server.url, &c), SALUS_OK);
    nng_duration resend = 0;
    assert_int_equal(nng_ctx_get_ms(c->ctx, NNG_OPT_REQ_RESENDTIME, &resend), 0);
    assert_int_equal(resend, NNG_DURATION_INFINITE);
    salus_disconnect(c);
}

static void policy_and_weights_change_at_run_time(void **state)
{
    (void) state;
    salus_client *c;
    salus_session *s = sl_test_session(&server, &c);
    assert_sl_ok(salus_set_policy(c, "fifo", 1));
    char *text;
    assert_sl_ok(salus_status_text(c, &text));
    assert_non_null(strstr(text, "policy: fifo"));
    salus_free(text);
    assert_sl_err(salus_set_policy(c, "lottery", 0), SALUS_EINVAL);
    assert_non_null(strstr(salus_last_error(c), "lottery"));
    assert_sl_ok(salus_set_session(c, salus_session_id(s), 1, 5, 1, 2.5));
    assert_sl_err(salus_set_session(c, salus_session_id(s), 0, 0, 1, -1), SALUS_EINVAL);
    assert_sl_err(salus_set_session(c, 987654, 1, 1, 0, 0), SALUS_ENOTFOUND);
    assert_sl_ok(salus_status_text(c, &text));
    assert_non_null(strstr(text, "2.50"));
    salus_free(text);
    assert_sl_ok(salus_set_policy(c, "fair", 0));
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
}

/* Threads of process pid named `name` whose scheduling policy is `policy`. */
static int count_threads(pid_t pid, const char *name, int policy)
{
    char path[320], comm[32], stat[1024];
    snprintf(path, sizeof path, "/proc/%d/task", (int) pid);
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/%d/task/%s/comm", (int) pid, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue; /* the thread ended */
        bool named = fgets(comm, sizeof comm, f) && strncmp(comm, name, strlen(name)) == 0 &&
                     comm[strlen(name)] == '\n';
        fclose(f);
        snprintf(path, sizeof path, "/proc/%d/task/%s/stat", (int) pid, e->d_name);
        if (!named || !(f = fopen(path, "r")))
            continue;
        /* field 41 is the policy; the name (field 2) ends at the last ')' */
        const char *p = fgets(stat, sizeof stat, f) ? strrchr(stat, ')') : NULL;
        fclose(f);
        int field = 2;
        for (; p && *p && field < 41; p++)
            field += *p == ' ';
        n += p && field == 41 && atoi(p) == policy;
    }
    closedir(d);
    return n;
}

/* Under the priority policy, while a high-priority session is open, other
 * sessions' lanes run on below-normal streams: SCHED_IDLE threads on cpu.
 * Both sessions' iterations keep working, also after the class changes. */
static void low_priority_lanes_run_on_idle_threads(void **state)
{
    (void) state;
    salus_client *c = sl_test_connect(&server);
    assert_sl_ok(salus_set_policy(c, "priority", 0));
    salus_session_opts hp_opts = {.name = "hp", .priority = 10};
    salus_session *hp, *lp;
    assert_sl_ok(salus_session_open(c, &hp_opts, &hp));
    assert_sl_ok(salus_session_open(c, NULL, &lp));
    salus_graph *hg = salus_graph_new(), *lg = salus_graph_new();
    assert_sl_ok(salus_graph_register(hp, hg, NULL));
    assert_sl_ok(salus_graph_register(lp, lg, NULL));
    int before = count_threads(server.pid, "sl-cpu0-bg", SCHED_IDLE);
    assert_sl_ok(salus_run(hp, hg, NULL, 0, NULL, NULL));
    assert_sl_ok(salus_run(lp, lg, NULL, 0, NULL, NULL));
    assert_true(count_threads(server.pid, "sl-cpu0-bg", SCHED_IDLE) >= 1);
    assert_true(count_threads(server.pid, "sl-cpu0-bg", SCHED_IDLE) >= before);
    assert_int_equal(count_threads(server.pid, "sl-cpu0-bg", SCHED_OTHER), 0);
    /* the high-priority session goes: the low one's lane is normal again */
    salus_graph_free(hg);
    assert_sl_ok(salus_session_close(hp));
    for (int i = 0; i < 3; i++)
        assert_sl_ok(salus_run(lp, lg, NULL, 0, NULL, NULL));
    salus_graph_free(lg);
    assert_sl_ok(salus_session_close(lp));
    assert_sl_ok(salus_set_policy(c, "fair", 0));
    salus_disconnect(c);
}

typedef struct waiter {
    const char *url;
    double expected_total_s; /* declared length, 0 = none */
    atomic_int *admissions;  /* counts admissions across waiters (NULL: none) */
    int rc;
    atomic_int done;
    int order; /* its place among the waiters' admissions */
    uint64_t id;
} waiter;

static void *open_and_wait(void *arg)
{
    waiter *w = arg;
    salus_client *c;
    salus_session *s;
    salus_session_opts o = {.name = "waiter",
                            .persistent_bytes = 160u << 20,
                            .ephemeral_bytes = 8u << 20,
                            .expected_total_s = w->expected_total_s,
                            .wait_for_admission = 1};
    if ((w->rc = salus_connect(w->url, &c)) == SALUS_OK) {
        if ((w->rc = salus_session_open(c, &o, &s)) == SALUS_OK) {
            w->id = salus_session_id(s);
            if (w->admissions)
                w->order = atomic_fetch_add(w->admissions, 1);
            (void) salus_session_close(s);
        }
        salus_disconnect(c);
    }
    atomic_store(&w->done, 1);
    return NULL;
}

/* Admission with reasons on a 256 MiB server, while another job trains: it
 * must finish with exactly the reference results. */
static void admission_quota_and_capacity_leave_a_trainer_undisturbed(void **state)
{
    (void) state;
    const char *args[] = {"--url", server.url, "--name", "bystander", "--seed",
                          "3",     "--steps",  "300",    "--check",   NULL};
    pid_t trainer = sl_test_spawn("MLP_REGRESSION", args);
    salus_client *c = sl_test_connect(&server);
    salus_session *big, *s;
    salus_session_opts o = {
        .name = "big", .persistent_bytes = 160u << 20, .ephemeral_bytes = 8u << 20};
    assert_sl_ok(salus_session_open(c, &o, &big));
    /* a second one of the same size does not fit now: capacity */
    assert_sl_err(salus_session_open(c, &o, &s), SALUS_EEXHAUSTED);
    assert_non_null(strstr(salus_last_error(c), "capacity"));
    /* more than the whole device can never fit: quota */
    o.persistent_bytes = 300u << 20;
    assert_sl_err(salus_session_open(c, &o, &s), SALUS_EEXHAUSTED);
    assert_non_null(strstr(salus_last_error(c), "quota"));
    /* within a session: its declared persistent memory is its quota */
    uint64_t t;
    const int64_t mb100[] = {25 << 20}; /* 100 MiB of f32 */
    const int64_t mb100x2[] = {50 << 20};
    assert_sl_ok(salus_tensor_create(big, SALUS_F32, 1, mb100, NULL, &t));
    assert_sl_err(salus_tensor_create(big, SALUS_F32, 1, mb100x2, NULL, &t), SALUS_EEXHAUSTED);
    assert_non_null(strstr(salus_last_error(c), "quota"));

    /* one that waits is admitted when the big one leaves, and the status
     * shows it queued with its reason meanwhile */
    waiter w = {.url = server.url, .rc = -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, open_and_wait, &w), 0);
    char *text = NULL;
    for (int i = 0; i < 200; i++) {
        salus_free(text);
        assert_sl_ok(salus_status_text(c, &text));
        if (strstr(text, "admission queue"))
            break;
        struct timespec nap = {0, 10 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    assert_non_null(strstr(text, "admission queue: 1 waiting"));
    assert_non_null(strstr(text, "capacity"));
    salus_free(text);
    assert_int_equal(atomic_load(&w.done), 0); /* still waiting */
    assert_sl_ok(salus_session_close(big));
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_sl_ok(w.rc);
    assert_true(w.id > 0);

    assert_int_equal(sl_test_wait(trainer, 60), 0); /* its --check compares every result */
    wait_for_empty(c);
    salus_disconnect(c);
}

/* Waits until the status shows n sessions in the admission queue. */
static void wait_queued(salus_client *c, int n)
{
    char want[64], *text = NULL;
    snprintf(want, sizeof want, "admission queue: %d waiting", n);
    for (int i = 0; i < 500; i++) {
        salus_free(text);
        assert_sl_ok(salus_status_text(c, &text));
        if (strstr(text, want))
            break;
        struct timespec nap = {0, 10 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    assert_non_null(strstr(text, want));
    salus_free(text);
}

/* Under srtf, sessions waiting for memory go in shortest declared job
 * first, whatever their arrival order (each of these fits only alone). */
static void srtf_admits_the_shortest_waiting_job_first(void **state)
{
    (void) state;
    salus_client *c = sl_test_connect(&server);
    assert_sl_ok(salus_set_policy(c, "srtf", 0));
    salus_session *big;
    salus_session_opts o = {
        .name = "big", .persistent_bytes = 160u << 20, .ephemeral_bytes = 8u << 20};
    assert_sl_ok(salus_session_open(c, &o, &big));
    atomic_int admissions = 0;
    waiter lng = {.url = server.url, .expected_total_s = 100, .admissions = &admissions, .rc = -1};
    waiter shrt = {.url = server.url, .expected_total_s = 1, .admissions = &admissions, .rc = -1};
    pthread_t tl, ts;
    assert_int_equal(pthread_create(&tl, NULL, open_and_wait, &lng), 0);
    wait_queued(c, 1); /* the long one arrived first */
    assert_int_equal(pthread_create(&ts, NULL, open_and_wait, &shrt), 0);
    wait_queued(c, 2);
    assert_sl_ok(salus_session_close(big));
    assert_int_equal(pthread_join(ts, NULL), 0);
    assert_int_equal(pthread_join(tl, NULL), 0);
    assert_sl_ok(shrt.rc);
    assert_sl_ok(lng.rc);
    assert_int_equal(shrt.order, 0);
    assert_int_equal(lng.order, 1);
    assert_sl_ok(salus_set_policy(c, "fair", 0));
    wait_for_empty(c);
    salus_disconnect(c);
}

/* Iterations of one session waiting in the scheduler (-1: no such
 * session); *busy: whether its lane runs something. */
static int session_queued(salus_client *c, uint64_t id, bool *busy)
{
    Salus__Reply *rep = sl_test_status(c);
    const Salus__StatusReply *sr = rep->status;
    int queued = -1;
    *busy = false;
    for (size_t i = 0; i < sr->n_sessions; i++) {
        if (sr->sessions[i]->id != id)
            continue;
        queued = (int) sr->sessions[i]->queued;
        for (size_t l = 0; l < sr->n_lanes; l++)
            if (sr->lanes[l]->id == sr->sessions[i]->lane)
                *busy = sr->lanes[l]->busy;
    }
    salus__reply__free_unpacked(rep, NULL);
    return queued;
}

typedef struct drain_job {
    salus_client *c;
    salus_session *s;
    salus_graph *g;
    int rc;
    char error[256];
} drain_job;

/* A session on the sim device running `depth` n x n matmuls of its own
 * params per iteration; ephemeral declared so both jobs share one lane. */
static void drain_job_open(drain_job *j, const char *url, int64_t n, int depth, uint64_t ephemeral)
{
    assert_sl_ok(salus_connect(url, &j->c));
    salus_session_opts o = {.name = "drain", .ephemeral_bytes = ephemeral};
    assert_sl_ok(salus_session_open(j->c, &o, &j->s));
    const int64_t dims[] = {n, n};
    uint64_t a, p;
    assert_sl_ok(salus_tensor_create(j->s, SALUS_F32, 2, dims, NULL, &a));
    assert_sl_ok(salus_tensor_create(j->s, SALUS_F32, 2, dims, NULL, &p));
    j->g = salus_graph_new();
    salus_value y = salus_graph_param(j->g, a, SALUS_F32, 2, dims);
    salus_value pv = salus_graph_param(j->g, p, SALUS_F32, 2, dims);
    for (int k = 0; k < depth; k++)
        y = salus_graph_op(j->g, "matmul", 2, (salus_value[]){y, pv}, 0, NULL, 0, NULL);
    assert_sl_ok(salus_graph_register(j->s, j->g, NULL));
}

static void *drain_job_run(void *arg)
{
    drain_job *j = arg;
    j->rc = salus_run(j->s, j->g, NULL, 0, NULL, NULL);
    snprintf(j->error, sizeof j->error, "%s", salus_last_error(j->c));
    return NULL;
}

/* Two sessions sharing one lane on the sim device: SIGTERM while the first
 * one's iteration runs and the second one's waits for the lane. The running
 * one completes; the queued one gets SHUTTING_DOWN; salusd exits 0. */
static void drain_fails_the_queued_iteration_only(void)
{
    sl_test_server own;
    /* 2 GiB: once the first job holds 1.5 GiB, the second one shares its lane
     * (the manager gives lanes of their own only while memory is plentiful) */
    sl_test_server_start(&own,
                         (const char *[]){"--device", "sim:v100", "--memory-limit", "2G", NULL});
    drain_job running = {.rc = -1}, queued = {.rc = -1};
    drain_job_open(&running, own.url, 8192, 12, 1ull << 30); /* ~1.2 s modeled */
    drain_job_open(&queued, own.url, 64, 1, 1ull << 20);     /* joins running's lane */
    pthread_t tr, tq;
    salus_client *c = sl_test_connect(&own);
    struct timespec nap = {0, 5 * 1000 * 1000};
    bool busy = false;
    assert_int_equal(pthread_create(&tr, NULL, drain_job_run, &running), 0);
    for (int i = 0; i < 1000 && !busy; i++) {
        (void) session_queued(c, salus_session_id(running.s), &busy);
        nanosleep(&nap, NULL);
    }
    assert_int_equal(pthread_create(&tq, NULL, drain_job_run, &queued), 0);
    int q = 0;
    for (int i = 0; i < 1000 && (q = session_queued(c, salus_session_id(queued.s), &busy)) != 1;
         i++)
        nanosleep(&nap, NULL);
    if (q != 1) { /* show why, and leave no server behind */
        char *text;
        if (salus_status_text(c, &text) == SALUS_OK) {
            printf("%s\n", text);
            salus_free(text);
        }
        kill(own.pid, SIGKILL);
    }
    assert_int_equal(q, 1);
    salus_disconnect(c);
    assert_int_equal(sl_test_server_stop(&own), 0);
    assert_int_equal(pthread_join(tr, NULL), 0);
    assert_int_equal(pthread_join(tq, NULL), 0);
    assert_sl_ok(running.rc);
    assert_sl_err(queued.rc, SALUS_ESHUTDOWN);
    assert_non_null(strstr(queued.error, "not started"));
    drain_job *jobs[] = {&running, &queued};
    for (int i = 0; i < 2; i++) {
        salus_graph_free(jobs[i]->g);
        (void) salus_session_close(jobs[i]->s); /* the server is gone: just frees */
        salus_disconnect(jobs[i]->c);
    }
}

/* SIGTERM while jobs train: salusd finishes what runs, fails what is queued,
 * exits 0; the clients see an error, never a hang. Uses its own server. */
static void sigterm_drains_and_exits_zero(void **state)
{
    (void) state;
    sl_test_server own;
    sl_test_server_start(&own, NULL);
    const char *a[] = {"--url",   own.url,    "--name", "a", "--steps",
                       "1000000", "--hidden", "256",    NULL};
    const char *b[] = {"--url",   own.url,    "--name", "b", "--steps",
                       "1000000", "--hidden", "256",    NULL};
    pid_t pa = sl_test_spawn("MLP_REGRESSION", a);
    pid_t pb = sl_test_spawn("MLP_REGRESSION", b);
    salus_client *c = sl_test_connect(&own);
    struct timespec nap = {0, 5 * 1000 * 1000};
    for (int i = 0; i < 2000 && server_iterations(c) < 50; i++)
        nanosleep(&nap, NULL);
    assert_true(server_iterations(c) >= 50);
    salus_disconnect(c);
    assert_int_equal(sl_test_server_stop(&own), 0);
    /* both jobs stop with an error (SHUTTING_DOWN or a lost connection) */
    assert_int_equal(sl_test_wait(pa, 10), 1);
    assert_int_equal(sl_test_wait(pb, 10), 1);
    drain_fails_the_queued_iteration_only();
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(two_clients_train_and_match_reference),
        cmocka_unit_test(tensors_round_trip_and_busy_free),
        cmocka_unit_test(garbage_gets_an_error_and_server_keeps_serving),
        cmocka_unit_test(unknown_session_wrong_token_unknown_graph),
        cmocka_unit_test(killed_client_memory_returns),
        cmocka_unit_test(protocol_version_mismatch_is_refused),
        cmocka_unit_test(requests_are_never_resent),
        cmocka_unit_test(session_handles_outlive_their_client),
        cmocka_unit_test(policy_and_weights_change_at_run_time),
        cmocka_unit_test(low_priority_lanes_run_on_idle_threads),
        cmocka_unit_test(admission_quota_and_capacity_leave_a_trainer_undisturbed),
        cmocka_unit_test(srtf_admits_the_shortest_waiting_job_first),
        cmocka_unit_test(sigterm_drains_and_exits_zero),
    };
    sl_test_group = &server;
    return cmocka_run_group_tests_name("integration", tests, sl_test_group_start,
                                       sl_test_group_stop);
}
