/* Restarts: a client of a salusd that goes away fails
 * fast with ECONN, reconnects by itself to a new salusd on the same ipc://
 * path, gets SESSION_LOST for its old session and can open a new one. */
#include "client_internal.h"
#include "salusd_ctl.h"
#include "sl_test.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Calls read until it stops failing with ECONN (the client reconnected) or
 * 10 s pass; returns the last code. */
static int read_until_connected(salus_session *s, uint64_t t, void *buf, size_t len)
{
    int rc = SALUS_ECONN;
    for (int i = 0; i < 200 && rc == SALUS_ECONN; i++) {
        rc = salus_tensor_read(s, t, buf, len);
        if (rc == SALUS_ECONN)
            sl_ts_sleep_ms(50);
    }
    return rc;
}

static void restart_gives_session_lost_then_a_new_session(void **state)
{
    (void) state;
    sl_test_server srv;
    sl_ctl_launch(&srv, NULL);
    salus_client *c = sl_test_connect(&srv);
    salus_session *s;
    assert_sl_ok(salus_session_open(c, NULL, &s));
    const float init[4] = {1, 2, 3, 4};
    float back[4];
    const int64_t dims[] = {4};
    uint64_t t;
    assert_sl_ok(salus_tensor_create(s, SALUS_F32, 1, dims, init, &t));

    assert_int_equal(sl_ctl_stop(&srv), 0);
    /* nobody listens: a call fails at once, it does not wait for a server */
    double t0 = sl_ts_now_s();
    assert_sl_err(salus_tensor_read(s, t, back, sizeof back), SALUS_ECONN);
    assert_true(sl_ts_now_s() - t0 < 1);
    assert_non_null(strstr(salus_last_error(c), "not connected"));

    sl_ctl_start(&srv, NULL); /* a new salusd on the same path */
    assert_sl_err(read_until_connected(s, t, back, sizeof back), SALUS_ESESSIONLOST);
    assert_non_null(strstr(salus_last_error(c), "restarted"));
    assert_sl_err(salus_session_close(s), SALUS_ESESSIONLOST); /* frees the handle */

    assert_sl_ok(salus_session_open(c, NULL, &s));
    assert_sl_ok(salus_tensor_create(s, SALUS_F32, 1, dims, init, &t));
    assert_sl_ok(salus_tensor_read(s, t, back, sizeof back));
    assert_memory_equal(back, init, sizeof init);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
    sl_ctl_finish(&srv);
}

typedef struct runner {
    salus_session *s;
    salus_graph *g;
    int rc;
    double done_at;
} runner;

static void *run_thread(void *arg)
{
    runner *r = arg;
    r->rc = salus_run(r->s, r->g, NULL, 0, NULL, NULL);
    r->done_at = sl_ts_now_s();
    return NULL;
}

/* A salusd killed mid-iteration (no drain): the blocked call returns ECONN at
 * once, and a new salusd on the same path (over the stale socket file) takes
 * the client back. */
static void killed_server_fails_the_call_in_flight(void **state)
{
    (void) state;
    sl_test_server srv;
    sl_ctl_prepare(&srv);
    const char *sim[] = {"--device", "sim:v100", "--memory-limit", "4G", NULL};
    sl_ctl_start(&srv, sim);
    salus_client *c = sl_test_connect(&srv);
    salus_session *s;
    assert_sl_ok(salus_session_open(c, NULL, &s));
    const int64_t dims[] = {8192, 8192};
    uint64_t a, p;
    assert_sl_ok(salus_tensor_create(s, SALUS_F32, 2, dims, NULL, &a));
    assert_sl_ok(salus_tensor_create(s, SALUS_F32, 2, dims, NULL, &p));
    salus_graph *g = salus_graph_new();
    salus_value y = salus_graph_param(g, a, SALUS_F32, 2, dims);
    salus_value pv = salus_graph_param(g, p, SALUS_F32, 2, dims);
    for (int k = 0; k < 40; k++) /* ~4 s on the modeled V100 */
        y = salus_graph_op(g, "matmul", 2, (salus_value[]){y, pv}, 0, NULL, 0, NULL);
    assert_sl_ok(salus_graph_register(s, g, NULL));

    runner r = {.s = s, .g = g, .rc = -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, run_thread, &r), 0);
    sl_ts_sleep_ms(300);
    double killed_at = sl_ts_now_s();
    kill(srv.pid, SIGKILL);
    assert_int_equal(sl_ctl_wait(&srv, 5), -1);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_sl_err(r.rc, SALUS_ECONN);
    assert_true(r.done_at - killed_at < 1);
    salus_graph_free(g);

    sl_ctl_start(&srv, sim);
    float back[4];
    assert_sl_err(read_until_connected(s, a, back, sizeof back), SALUS_ESESSIONLOST);
    (void) salus_session_close(s);
    assert_sl_ok(salus_session_open(c, NULL, &s));
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
    sl_ctl_finish(&srv);
}

/* Something at salusd's path that takes connections and hangs up before the
 * SP handshake: what a client redialling a salusd that drains and exits may
 * meet. The client's header write then fails with EPIPE, which NNG 1.5 takes
 * for "closed" and stops redialling (a dialer never driven again). With a
 * greeting it first completes the handshake as a peer of another protocol,
 * which the client drops. */
typedef struct hangup {
    int fd;
    const uint8_t *greeting; /* an SP header to answer with first, or NULL */
    atomic_int stop, accepted;
} hangup;

static void *hangup_thread(void *arg)
{
    hangup *h = arg;
    while (!atomic_load(&h->stop)) {
        int fd = accept(h->fd, NULL, NULL);
        if (fd < 0)
            continue;
        if (h->greeting) {
            uint8_t theirs[8];
            struct timeval tv = {1, 0};
            (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            (void) !write(fd, h->greeting, 8);
            /* their header, then the wait for them to drop us */
            while (read(fd, theirs, sizeof theirs) > 0)
                ;
        }
        close(fd);
        atomic_fetch_add(&h->accepted, 1);
    }
    return NULL;
}

static void hangup_stop(hangup *h, pthread_t th)
{
    atomic_store(&h->stop, 1);
    shutdown(h->fd, SHUT_RDWR); /* wakes the accept */
    assert_int_equal(pthread_join(th, NULL), 0);
    close(h->fd);
}

static int hangup_listen(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    assert_true(fd >= 0 && strlen(path) < sizeof a.sun_path);
    memcpy(a.sun_path, path, strlen(path) + 1);
    unlink(path);
    assert_int_equal(bind(fd, (struct sockaddr *) &a, sizeof a), 0);
    assert_int_equal(listen(fd, 64), 0);
    return fd;
}

/* A client with a session and a tensor on a salusd that then stopped. */
typedef struct orphan {
    sl_test_server srv;
    salus_client *c;
    salus_session *s;
    uint64_t t;
} orphan;

static void orphan_start(orphan *o)
{
    sl_ctl_launch(&o->srv, NULL);
    o->c = sl_test_connect(&o->srv);
    assert_sl_ok(salus_session_open(o->c, NULL, &o->s));
    const int64_t dims[] = {4};
    assert_sl_ok(salus_tensor_create(o->s, SALUS_F32, 1, dims, NULL, &o->t));
    assert_int_equal(sl_ctl_stop(&o->srv), 0);
}

static int orphan_read(orphan *o)
{
    float back[4];
    return salus_tensor_read(o->s, o->t, back, sizeof back);
}

/* A new salusd on the path: the client reconnects by itself (its session
 * is lost) and opens a new session there. */
static void orphan_adopted(orphan *o)
{
    sl_ctl_start(&o->srv, NULL);
    float back[4];
    assert_sl_err(read_until_connected(o->s, o->t, back, sizeof back), SALUS_ESESSIONLOST);
    (void) salus_session_close(o->s);
    assert_sl_ok(salus_session_open(o->c, NULL, &o->s));
    assert_sl_ok(salus_session_close(o->s));
    salus_disconnect(o->c);
    sl_ctl_finish(&o->srv);
}

/* Serves h on o's socket while calling as a resilient client would (each
 * call refused), every 0.1 s up to tries times or until enough connections
 * came; then stops serving and checks that at least one came. */
static void call_through_hangups(orphan *o, hangup *h, int tries, int enough)
{
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, hangup_thread, h), 0);
    for (int i = 0; i < tries && atomic_load(&h->accepted) < enough; i++) {
        assert_sl_err(orphan_read(o), SALUS_ECONN);
        sl_ts_sleep_ms(100);
    }
    hangup_stop(h, th);
    assert_true(atomic_load(&h->accepted) >= 1);
}

/* Whatever the failed handshakes, a client reconnects to the salusd that
 * finally answers on its path. */
static void hangups_before_the_handshake_do_not_stop_reconnecting(void **state)
{
    (void) state;
    orphan o;
    orphan_start(&o);
    hangup h = {.fd = hangup_listen(o.srv.url + strlen("ipc://"))};
    /* the client redials every 0.1-1 s: give it many hang-ups */
    call_through_hangups(&o, &h, 60, 8);
    orphan_adopted(&o);
}

/* A peer that completes the handshake but speaks another protocol: the
 * client drops it, and takes the real salusd that follows. */
static void a_peer_of_another_protocol_does_not_hide_the_next_server(void **state)
{
    (void) state;
    orphan o;
    orphan_start(&o);
    static const uint8_t pair0[8] = {0, 'S', 'P', 0, 0, 0x10, 0, 0}; /* NNG's pair v0 */
    hangup h = {.fd = hangup_listen(o.srv.url + strlen("ipc://")), .greeting = pair0};
    call_through_hangups(&o, &h, 30, 2);
    orphan_adopted(&o);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(restart_gives_session_lost_then_a_new_session),
        cmocka_unit_test(killed_server_fails_the_call_in_flight),
        cmocka_unit_test(hangups_before_the_handshake_do_not_stop_reconnecting),
        cmocka_unit_test(a_peer_of_another_protocol_does_not_hide_the_next_server),
    };
    return cmocka_run_group_tests_name("restart", tests, NULL, NULL);
}
