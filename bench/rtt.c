/* bench/rtt: iteration round trips through salusd against a bare NNG
 * REQ/REP echo that carries the same bytes, side by side in one run.
 *
 *   rtt --salusd PATH [--rounds 10] [--calls 2000] [--sessions 256]
 *       [--window-ms 400] [--json FILE]
 *
 * Everything (this client and its threads, every salusd, every echo
 * server) is pinned to CPU 0, so no side gets a second core the other
 * lacks. Message sizes are measured, not assumed: a probe client first
 * talks to each salusd through a relay in this process that records the
 * size of every request and reply body; the echo servers are then told to
 * answer each request with a reply of the measured RunReply size, and the
 * echo clients send requests of the measured Run request size. (The
 * sequence number and timing fields are varints, so a live request may
 * differ from the probe's by a byte or two.)
 *
 * Round trips, one request in flight (the client times each call):
 *   rtt     salus_run of an empty registered graph (salusd's fast path)
 *           against an echo of its request and reply sizes;
 *   rtt_op  a one-op graph: a 64-float feed, relu, the 64-float result
 *           fetched (inline in the messages: below the shared-memory
 *           threshold), against an echo of its sizes.
 * Each round runs rtt salus, rtt echo, rtt_op salus, rtt_op echo in turn.
 * ratio = salus median / echo median over every call of every round.
 *
 * Growth: does salusd's cost per request grow with the number of sessions?
 * A second salusd holds `sessions` sessions, each opened by its own client
 * (its own NNG socket and connection) with its own registered one-op graph;
 * a second echo server holds as many connections. Closed loop: every
 * active session has exactly one request in flight and sends the next as
 * soon as its reply arrives (one thread per session). A phase runs for
 * --window-ms; the first eighth is warm-up, and over the rest
 *   time per request = window / requests completed in it
 * (the inverse of throughput; with one active session it is the mean
 * latency). Phases, interleaved in every round:
 *   S_n  all `sessions` sessions active       E_n  all echo connections active
 *   S_1  the rtt salusd, 1 session active     E_1  the rtt_op echo, 1 connection
 *   S_i  `sessions`-1 idle + 1 active         E_i  the same on the echo
 * growth = (S_n / S_1) / (E_n / E_1), each the median over rounds of the
 * phase's time per request: how much more salusd's cost per request grows
 * from 1 to n sessions than a bare transport's does on the same core under
 * the same load (the transport's own growth, e.g. more sockets to poll,
 * cancels). idle = S_i latency median / S_1 latency median (with E_i / E_1
 * beside it): whether open but idle sessions slow the one that works.
 *
 * Last lines:
 *   BENCH rtt server_us=... echo_us=... ratio=... server_p99_us=... echo_p99_us=...
 *   BENCH rtt_op ratio=... server_us=... echo_us=... server_p99_us=... echo_p99_us=...
 *   BENCH growth_idle sessions=... ratio=... server_us=... one_us=... echo_ratio=...
 *   BENCH growth sessions=... ratio=... salus_n_us=... salus_1_us=... echo_n_us=...
 *         echo_1_us=... salus_n_p99_us=... echo_n_p99_us=... */
#include "bench_util.h"

#include <salus/salus.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The one-op graph's feed and fetch: 64 floats each way, well under the
 * 16 KiB from which a local client moves data through shared memory. */
#define OP_ELEMS 64
/* salusd's default number of contexts (requests in flight); the echo
 * server gets as many, so neither side queues where the other does not. */
#define SERVER_CONTEXTS 256

/* ---- the echo server: REP contexts that answer every request with a
 * reply of a fixed size (the received message, resized) ---- */

typedef struct echo_ctx {
    nng_ctx ctx;
    nng_aio *aio;
    int sending;
    size_t reply_bytes;
} echo_ctx;

static void echo_cb(void *arg)
{
    echo_ctx *e = arg;
    if (nng_aio_result(e->aio) != 0) {
        if (e->sending)
            nng_msg_free(nng_aio_get_msg(e->aio));
        if (nng_aio_result(e->aio) == NNG_ECLOSED)
            return;
        e->sending = 0;
        nng_ctx_recv(e->ctx, e->aio);
        return;
    }
    if (!e->sending) {
        nng_msg *m = nng_aio_get_msg(e->aio);
        /* a reply of the size salusd's would have; on failure the request
         * goes back as it came, which the client counts as an error */
        (void) nng_msg_realloc(m, e->reply_bytes);
        e->sending = 1;
        nng_ctx_send(e->ctx, e->aio);
    } else {
        e->sending = 0;
        nng_ctx_recv(e->ctx, e->aio);
    }
}

static int echo_server(const char *url, size_t reply_bytes)
{
    nng_socket sock;
    echo_ctx *ctxs = calloc(SERVER_CONTEXTS, sizeof *ctxs);
    if (!ctxs || nng_rep0_open(&sock) || nng_listen(sock, url, NULL, 0)) {
        fprintf(stderr, "echo: cannot listen on %s\n", url);
        return 1;
    }
    for (int i = 0; i < SERVER_CONTEXTS; i++) {
        ctxs[i].reply_bytes = reply_bytes;
        if (nng_ctx_open(&ctxs[i].ctx, sock) || nng_aio_alloc(&ctxs[i].aio, echo_cb, &ctxs[i]))
            return 1;
        nng_ctx_recv(ctxs[i].ctx, ctxs[i].aio);
    }
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    int sig;
    sigwait(&sigs, &sig);
    nng_close(sock);
    return 0;
}

/* ---- the relay that measures message sizes ---- */

typedef struct relay {
    nng_socket front, back;
    pthread_t thread;
    _Atomic size_t last_req, last_rep;
} relay;

static void *relay_main(void *arg)
{
    relay *r = arg;
    for (;;) {
        nng_msg *m;
        if (nng_recvmsg(r->front, &m, 0) != 0)
            return NULL;
        r->last_req = nng_msg_len(m);
        if (nng_sendmsg(r->back, m, 0) != 0) {
            nng_msg_free(m);
            return NULL;
        }
        if (nng_recvmsg(r->back, &m, 0) != 0)
            return NULL;
        r->last_rep = nng_msg_len(m);
        if (nng_sendmsg(r->front, m, 0) != 0) {
            nng_msg_free(m);
            return NULL;
        }
    }
}

static int relay_start(relay *r, const char *listen_url, const char *server_url)
{
    if (nng_rep0_open(&r->front) || nng_listen(r->front, listen_url, NULL, 0))
        return -1;
    if (nng_req0_open(&r->back) ||
        nng_socket_set_ms(r->back, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE) ||
        nng_dial(r->back, server_url, NULL, 0))
        return -1;
    return pthread_create(&r->thread, NULL, relay_main, r) ? -1 : 0;
}

static void relay_stop(relay *r)
{
    nng_close(r->front);
    nng_close(r->back);
    pthread_join(r->thread, NULL);
}

/* ---- salus and echo clients ---- */

typedef struct op_job {
    salus_client *c;
    salus_session *s;
    salus_graph *g;
    salus_value y;
    float x[OP_ELEMS], out[OP_ELEMS];
} op_job;

/* Every session declares the tiny ephemeral need it has, so that all of
 * them are admitted (an undeclared need is assumed large, salusd --help). */
static int session_open(salus_client *c, salus_session **s)
{
    salus_session_opts o = {.ephemeral_bytes = 4096};
    return salus_session_open(c, &o, s);
}

/* Registers the one-op graph y = relu(x), x of 64 floats, with session s
 * (NULL: a new session on c). */
static int op_job_make(op_job *j, salus_client *c, salus_session *s)
{
    j->c = c;
    j->s = s;
    for (int i = 0; i < OP_ELEMS; i++)
        j->x[i] = (float) (i - OP_ELEMS / 2);
    if ((!s && session_open(c, &j->s)) || !(j->g = salus_graph_new()))
        return -1;
    salus_value x = salus_graph_input(j->g, SALUS_F32, 1, (int64_t[]){OP_ELEMS});
    j->y = salus_graph_op(j->g, "relu", 1, &x, 0, NULL, 0, NULL);
    return j->y == SALUS_NO_VALUE || salus_graph_register(j->s, j->g, NULL) ? -1 : 0;
}

static int op_job_run(op_job *j)
{
    const void *feeds[] = {j->x};
    void *outs[] = {j->out};
    int rc = salus_run(j->s, j->g, feeds, 1, &j->y, outs);
    return rc || j->out[0] != 0 || j->out[OP_ELEMS - 1] != (float) (OP_ELEMS / 2 - 1);
}

static void op_job_free(op_job *j, bool close)
{
    salus_graph_free(j->g);
    if (close)
        (void) salus_session_close(j->s);
}

static int connect_retry(const char *url, salus_client **c)
{
    for (int i = 0; i < 500; i++) {
        if (salus_connect(url, c) == SALUS_OK)
            return 0;
        usleep(10000);
    }
    return -1;
}

static int echo_dial(const char *url, nng_socket *s)
{
    if (nng_req0_open(s))
        return -1;
    (void) nng_socket_set_ms(*s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    for (int i = 0; i < 500; i++) {
        if (nng_dial(*s, url, NULL, 0) == 0)
            return 0;
        usleep(10000);
    }
    return -1;
}

/* One echo round trip: a request of req_bytes; the reply must have
 * rep_bytes. Returns nonzero on failure. */
static int echo_call(nng_socket s, const void *payload, size_t req_bytes, size_t rep_bytes)
{
    char *buf;
    size_t len;
    if (nng_send(s, (void *) payload, req_bytes, 0) != 0 ||
        nng_recv(s, &buf, &len, NNG_FLAG_ALLOC) != 0)
        return 1;
    nng_free(buf, len);
    return len != rep_bytes;
}

/* ---- closed-loop load: one thread per session or echo connection ---- */

/* What a phase's workers call: the big salusd or echo server (every
 * worker), or the one-session ones (worker 0 only). */
enum target { T_SALUS_N, T_ECHO_N, T_SALUS_1, T_ECHO_1, T_QUIT };

typedef struct worker {
    pthread_t thread;
    struct load *load;
    int index;
    op_job *big, *one;             /* its session on the big / the one-session salusd */
    nng_socket echo_big, echo_one; /* its connection to the big / the one-connection echo */
    /* this phase's calls: latency and completion time (ns) */
    double *lat;
    uint64_t *end;
    size_t n, cap;
    int failures;
} worker;

typedef struct load {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t generation; /* bumped per phase */
    enum target target;
    int active;                  /* workers 0..active-1 run this phase */
    atomic_bool stop;            /* ends the phase */
    int running;                 /* active workers not yet done */
    const uint8_t *payload;      /* the echo request */
    size_t req_bytes, rep_bytes; /* echo sizes */
} load;

static void *worker_main(void *arg)
{
    worker *w = arg;
    load *ld = w->load;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&ld->lock);
        while (ld->generation == seen || (ld->target != T_QUIT && w->index >= ld->active)) {
            seen = ld->generation;
            pthread_cond_wait(&ld->cond, &ld->lock);
        }
        seen = ld->generation;
        enum target t = ld->target;
        pthread_mutex_unlock(&ld->lock);
        if (t == T_QUIT)
            return NULL;
        w->n = 0;
        while (!atomic_load_explicit(&ld->stop, memory_order_relaxed)) {
            uint64_t t0 = sl_ts_now_ns();
            int bad;
            if (t == T_SALUS_N || t == T_SALUS_1)
                bad = op_job_run(t == T_SALUS_N ? w->big : w->one);
            else
                bad = echo_call(t == T_ECHO_N ? w->echo_big : w->echo_one, ld->payload,
                                ld->req_bytes, ld->rep_bytes);
            uint64_t t1 = sl_ts_now_ns();
            w->failures += bad;
            if (w->n == w->cap) {
                size_t cap = w->cap ? w->cap * 2 : 1024;
                double *lat = realloc(w->lat, cap * sizeof *lat);
                if (lat)
                    w->lat = lat;
                uint64_t *end = lat ? realloc(w->end, cap * sizeof *end) : NULL;
                if (!lat || !end) {
                    w->failures++;
                    break;
                }
                w->end = end;
                w->cap = cap;
            }
            w->lat[w->n] = (double) (t1 - t0) / 1e3;
            w->end[w->n++] = t1;
        }
        pthread_mutex_lock(&ld->lock);
        if (--ld->running == 0)
            pthread_cond_broadcast(&ld->cond);
        pthread_mutex_unlock(&ld->lock);
    }
}

typedef struct phase_result {
    double per_req_us; /* window / requests completed in it */
    double *lat;       /* latencies of those requests (us) */
    size_t n;
} phase_result;

/* Runs workers[0..active) against target for window_ms; the first eighth
 * is warm-up. Workers that are not active wait for the next phase. */
static phase_result run_phase(load *ld, worker *workers, int active, enum target t, int window_ms)
{
    pthread_mutex_lock(&ld->lock);
    atomic_store(&ld->stop, false);
    ld->target = t;
    ld->active = active;
    ld->running = active;
    ld->generation++;
    pthread_mutex_unlock(&ld->lock);
    uint64_t t0 = sl_ts_now_ns();
    uint64_t from = t0 + (uint64_t) window_ms * 1000000ull / 8;
    pthread_cond_broadcast(&ld->cond);
    usleep((useconds_t) window_ms * 1000);
    uint64_t to = sl_ts_now_ns();
    atomic_store(&ld->stop, true);
    pthread_mutex_lock(&ld->lock);
    while (ld->running > 0)
        pthread_cond_wait(&ld->cond, &ld->lock);
    pthread_mutex_unlock(&ld->lock);

    phase_result r = {0};
    size_t total = 0;
    for (int i = 0; i < active; i++)
        total += workers[i].n;
    r.lat = malloc((total ? total : 1) * sizeof *r.lat);
    for (int i = 0; i < active && r.lat; i++)
        for (size_t k = 0; k < workers[i].n; k++)
            if (workers[i].end[k] >= from && workers[i].end[k] <= to)
                r.lat[r.n++] = workers[i].lat[k];
    r.per_req_us = r.n ? (double) (to - from) / 1e3 / (double) r.n : 0;
    return r;
}

/* ---- result helpers ---- */

typedef struct series {
    double *v; /* every latency (us) */
    size_t n, cap;
    double per_round[64]; /* per-round figure: time per request or median */
} series;

static void series_add(series *s, const double *v, size_t n)
{
    if (s->n + n > s->cap) {
        size_t cap = (s->n + n) * 2;
        double *p = realloc(s->v, cap * sizeof *p);
        if (!p) {
            fprintf(stderr, "rtt: out of memory\n");
            exit(1);
        }
        s->v = p;
        s->cap = cap;
    }
    memcpy(s->v + s->n, v, n * sizeof *v);
    s->n += n;
}

static double med(const double *v, size_t n)
{
    return sl_ts_median(v, n);
}

static double p99(const series *s)
{
    return sl_ts_percentile(s->v, s->n, 99);
}

static void usage(void)
{
    fprintf(stderr, "usage: rtt --salusd PATH [--rounds N] [--calls N] [--sessions N] "
                    "[--window-ms N] [--json FILE]\n");
}

int main(int argc, char **argv)
{
    const char *salusd = NULL, *json = NULL, *echo_url = NULL;
    int rounds = 10, calls = 2000, n_sessions = 256, window_ms = 400;
    long reply_bytes = -1;
    static const struct option opts[] = {
        {"salusd", required_argument, NULL, 's'},
        {"rounds", required_argument, NULL, 'r'},
        {"calls", required_argument, NULL, 'c'},
        {"json", required_argument, NULL, 'j'},
        {"echo", required_argument, NULL, 'e'},
        {"reply-bytes", required_argument, NULL, 'b'},
        {"sessions", required_argument, NULL, 'n'},
        {"window-ms", required_argument, NULL, 'w'},
        {0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 's':
            salusd = optarg;
            break;
        case 'r':
            rounds = atoi(optarg);
            break;
        case 'c':
            calls = atoi(optarg);
            break;
        case 'j':
            json = optarg;
            break;
        case 'e':
            echo_url = optarg;
            break;
        case 'b':
            reply_bytes = atol(optarg);
            break;
        case 'n':
            n_sessions = atoi(optarg);
            break;
        case 'w':
            window_ms = atoi(optarg);
            break;
        default:
            usage();
            return 2;
        }
    }
    if (echo_url) {
        sigset_t sigs;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &sigs, NULL);
        return echo_server(echo_url, reply_bytes < 0 ? 0 : (size_t) reply_bytes);
    }
    if (!salusd || rounds < 5 || rounds > 64 || calls < 10 || n_sessions < 2 || n_sessions > 4096 ||
        window_ms < 50) {
        usage();
        return 2;
    }
    bench_pin_cpu0();

    char dir[96]; /* and a socket name: within sun_path's 108 bytes */
    if (sl_ts_tempdir("rtt", dir, sizeof dir) != SL_OK)
        return 1;
    char url_one[128], url_big[128], url_relay[128], url_e0[128], url_e1[128], url_en[128];
    snprintf(url_one, sizeof url_one, "ipc://%s/salus1.sock", dir);
    snprintf(url_big, sizeof url_big, "ipc://%s/salusn.sock", dir);
    snprintf(url_relay, sizeof url_relay, "ipc://%s/relay.sock", dir);
    snprintf(url_e0, sizeof url_e0, "ipc://%s/echo0.sock", dir);
    snprintf(url_e1, sizeof url_e1, "ipc://%s/echo1.sock", dir);
    snprintf(url_en, sizeof url_en, "ipc://%s/echon.sock", dir);
    char max_sessions[32];
    snprintf(max_sessions, sizeof max_sessions, "%d", n_sessions + 8);
    /* Children first: this process starts NNG only after its last fork.
     * Both salusd get the same flags: memory enough that every session gets
     * a lane of its own (salusd's default while memory is plentiful: lanes
     * stay private below --spread-limit, half the memory), so the growth
     * phases meet as many lanes as sessions, the most lanes salusd makes. */
    const char *const flags[] = {"--memory-limit",
                                 "8G",
                                 "--framework-per-lane",
                                 "8M",
                                 "--max-sessions",
                                 max_sessions,
                                 "--log-level",
                                 "warn",
                                 NULL};
    const char *argv_one[12] = {salusd, "--listen", url_one},
               *argv_big[12] = {salusd, "--listen", url_big};
    memcpy(argv_one + 3, flags, sizeof flags);
    memcpy(argv_big + 3, flags, sizeof flags);
    pid_t s_one = bench_spawn(argv_one), s_big = bench_spawn(argv_big);

    /* The probe: a child that runs both graphs through the relay and
     * reports the body sizes of the last Run request and RunReply. */
    size_t sizes[4] = {0}; /* empty request, empty reply, op request, op reply */
    int pfd[2];
    if (pipe(pfd))
        return 1;
    pid_t probe = fork();
    if (probe == 0) {
        close(pfd[0]);
        relay r;
        salus_client *c = NULL;
        salus_session *ps = NULL;
        op_job j;
        int ok = 0;
        for (int i = 0; i < 500 && !ok; i++) {
            ok = relay_start(&r, url_relay, url_one) == 0;
            if (!ok) {
                nng_close(r.front);
                nng_close(r.back);
                usleep(10000);
            }
        }
        salus_graph *ge = salus_graph_new();
        if (!ok || connect_retry(url_relay, &c) || session_open(c, &ps) || !ge ||
            salus_graph_register(ps, ge, NULL) || op_job_make(&j, c, ps))
            _exit(1);
        for (int i = 0; i < 3; i++)
            if (salus_run(ps, ge, NULL, 0, NULL, NULL))
                _exit(1);
        sizes[0] = r.last_req;
        sizes[1] = r.last_rep;
        for (int i = 0; i < 3; i++)
            if (op_job_run(&j))
                _exit(1);
        sizes[2] = r.last_req;
        sizes[3] = r.last_rep;
        op_job_free(&j, false);
        salus_graph_free(ge);
        (void) salus_session_close(ps);
        salus_disconnect(c);
        relay_stop(&r);
        _exit(write(pfd[1], sizes, sizeof sizes) == (ssize_t) sizeof sizes ? 0 : 1);
    }
    close(pfd[1]);
    int probe_status = 1;
    ssize_t got = read(pfd[0], sizes, sizeof sizes);
    close(pfd[0]);
    (void) waitpid(probe, &probe_status, 0);
    if (probe < 0 || got != (ssize_t) sizeof sizes || probe_status != 0) {
        fprintf(stderr, "rtt: measuring the message sizes failed\n");
        bench_stop(s_one);
        bench_stop(s_big);
        return 1;
    }
    printf("measured bodies: empty run %zu B request, %zu B reply; one-op run %zu B request, "
           "%zu B reply\n",
           sizes[0], sizes[1], sizes[2], sizes[3]);
    char rep0[32], rep1[32];
    snprintf(rep0, sizeof rep0, "%zu", sizes[1]);
    snprintf(rep1, sizeof rep1, "%zu", sizes[3]);
    pid_t e0 = bench_spawn(
        (const char *[]){"/proc/self/exe", "--echo", url_e0, "--reply-bytes", rep0, NULL});
    pid_t e1 = bench_spawn(
        (const char *[]){"/proc/self/exe", "--echo", url_e1, "--reply-bytes", rep1, NULL});
    pid_t en = bench_spawn(
        (const char *[]){"/proc/self/exe", "--echo", url_en, "--reply-bytes", rep1, NULL});

    /* the one-session salusd: one session with the empty and the one-op graph */
    salus_client *c = NULL;
    salus_session *s = NULL;
    salus_graph *ge = salus_graph_new();
    op_job one = {0};
    nng_socket es0 = NNG_SOCKET_INITIALIZER, es1 = NNG_SOCKET_INITIALIZER;
    int failures = 0, started = 0, ok = 0;
    uint8_t *payload = calloc(1, sizes[0] > sizes[2] ? sizes[0] : sizes[2]);
    worker *workers = calloc((size_t) n_sessions, sizeof *workers);
    op_job *big = calloc((size_t) n_sessions, sizeof *big);
    load ld = {.payload = payload, .req_bytes = sizes[2], .rep_bytes = sizes[3]};
    pthread_mutex_init(&ld.lock, NULL);
    pthread_cond_init(&ld.cond, NULL);
    if (!payload || !workers || !big || connect_retry(url_one, &c) || session_open(c, &s) || !ge ||
        salus_graph_register(s, ge, NULL) || op_job_make(&one, c, s) || echo_dial(url_e0, &es0) ||
        echo_dial(url_e1, &es1)) {
        fprintf(stderr, "rtt: set-up failed: %s\n", c ? salus_last_error(c) : "no server");
        goto out_servers;
    }
    /* the big salusd: n_sessions clients, each with its session and graph */
    for (int i = 0; i < n_sessions; i++) {
        salus_client *ci = NULL;
        if (connect_retry(url_big, &ci) || op_job_make(&big[i], ci, NULL) ||
            echo_dial(url_en, &workers[i].echo_big)) {
            fprintf(stderr, "rtt: session %d on the big salusd failed: %s\n", i,
                    ci ? salus_last_error(ci) : "cannot connect");
            big[i].c = ci;
            goto out_servers;
        }
        workers[i] = (worker){.load = &ld,
                              .index = i,
                              .big = &big[i],
                              .one = &one,
                              .echo_big = workers[i].echo_big,
                              .echo_one = es1};
    }
    for (; started < n_sessions; started++)
        if (pthread_create(&workers[started].thread, NULL, worker_main, &workers[started]))
            break;
    if (started < n_sessions) {
        fprintf(stderr, "rtt: cannot start %d client threads\n", n_sessions);
        goto out_threads;
    }
    {
        char *text = NULL;
        if (salus_status_text(big[0].c, &text) == SALUS_OK) {
            const char *p = strstr(text, "lanes");
            const char *e = p ? strchr(p, '\n') : NULL;
            if (p)
                printf("big salusd: %d sessions; %.*s\n", n_sessions,
                       (int) (e ? e - p : (ptrdiff_t) strlen(p)), p);
            salus_free(text);
        }
    }

    /* warm-up: every session's graph has run (its first iteration is
     * measured on the lane's own thread), every connection has carried
     * traffic */
    for (int i = 0; i < calls / 4; i++) {
        failures += salus_run(s, ge, NULL, 0, NULL, NULL) != SALUS_OK;
        failures += op_job_run(&one);
        failures += echo_call(es0, payload, sizes[0], sizes[1]);
        failures += echo_call(es1, payload, sizes[2], sizes[3]);
    }
    const enum target warm[] = {T_SALUS_N, T_ECHO_N};
    for (int k = 0; k < 2; k++) {
        phase_result pr = run_phase(&ld, workers, n_sessions, warm[k], window_ms);
        free(pr.lat);
    }

    size_t n = (size_t) rounds * calls;
    double *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
    double *oa = calloc(n, sizeof *oa), *ob = calloc(n, sizeof *ob);
    series ph[6] = {0}; /* S_n, E_n, S_1, E_1, S_i, E_i */
    static const char *const ph_name[6] = {"salus n", "echo n",  "salus 1",
                                           "echo 1",  "salus i", "echo i"};
    const enum target ph_target[6] = {T_SALUS_N, T_ECHO_N,  T_SALUS_1,
                                      T_ECHO_1,  T_SALUS_N, T_ECHO_N};
    const int ph_active[6] = {n_sessions, n_sessions, 1, 1, 1, 1};
    if (!a || !b || !oa || !ob) {
        free(a);
        free(b);
        free(oa);
        free(ob);
        goto out_threads;
    }
    for (int r = 0; r < rounds; r++) {
        size_t base = (size_t) r * calls;
        for (int i = 0; i < calls; i++) {
            uint64_t t0 = sl_ts_now_ns();
            failures += salus_run(s, ge, NULL, 0, NULL, NULL) != SALUS_OK;
            a[base + i] = (double) (sl_ts_now_ns() - t0) / 1e3;
        }
        for (int i = 0; i < calls; i++) {
            uint64_t t0 = sl_ts_now_ns();
            failures += echo_call(es0, payload, sizes[0], sizes[1]);
            b[base + i] = (double) (sl_ts_now_ns() - t0) / 1e3;
        }
        for (int i = 0; i < calls; i++) {
            uint64_t t0 = sl_ts_now_ns();
            failures += op_job_run(&one);
            oa[base + i] = (double) (sl_ts_now_ns() - t0) / 1e3;
        }
        for (int i = 0; i < calls; i++) {
            uint64_t t0 = sl_ts_now_ns();
            failures += echo_call(es1, payload, sizes[2], sizes[3]);
            ob[base + i] = (double) (sl_ts_now_ns() - t0) / 1e3;
        }
        for (int k = 0; k < 6; k++) {
            phase_result pr = run_phase(&ld, workers, ph_active[k], ph_target[k], window_ms);
            if (!pr.lat || !pr.n) {
                fprintf(stderr, "rtt: phase %s completed nothing\n", ph_name[k]);
                failures++;
            } else {
                series_add(&ph[k], pr.lat, pr.n);
            }
            /* time per request for the loaded phases, latency median for
             * the one-active ones */
            ph[k].per_round[r] = ph_active[k] > 1 ? pr.per_req_us : med(pr.lat, pr.n);
            free(pr.lat);
        }
        printf("round %2d: rtt %.1f/%.1f us, rtt_op %.1f/%.1f us (salus/echo medians); "
               "per request: salus n %.1f 1 %.1f, echo n %.1f 1 %.1f us; one active next to "
               "%d idle: salus %.1f echo %.1f us\n",
               r, med(a + base, (size_t) calls), med(b + base, (size_t) calls),
               med(oa + base, (size_t) calls), med(ob + base, (size_t) calls), ph[0].per_round[r],
               ph[2].per_round[r], ph[1].per_round[r], ph[3].per_round[r], n_sessions - 1,
               ph[4].per_round[r], ph[5].per_round[r]);
        fflush(stdout);
    }

    /* ---- figures ---- */
    double am = med(a, n), bm = med(b, n), ap = sl_ts_percentile(a, n, 99),
           bp = sl_ts_percentile(b, n, 99);
    double oam = med(oa, n), obm = med(ob, n), oap = sl_ts_percentile(oa, n, 99),
           obp = sl_ts_percentile(ob, n, 99);
    size_t nr = (size_t) rounds;
    double sn = med(ph[0].per_round, nr), en_ = med(ph[1].per_round, nr);
    double s1 = med(ph[2].per_round, nr), e1_ = med(ph[3].per_round, nr);
    double si = med(ph[4].per_round, nr), ei = med(ph[5].per_round, nr);
    double growth = (sn / s1) / (en_ / e1_);
    double idle = si / s1, idle_echo = ei / e1_;
    printf("%d rounds; rtt: %d calls per case and round, all pinned to CPU 0\n", rounds, calls);
    printf("salusd empty-graph run: median %.1f us, p99 %.1f us\n", am, ap);
    printf("echo of its sizes:      median %.1f us, p99 %.1f us\n", bm, bp);
    printf("salusd one-op run:      median %.1f us, p99 %.1f us\n", oam, oap);
    printf("echo of its sizes:      median %.1f us, p99 %.1f us\n", obm, obp);
    printf("growth, %d ms windows: time per request (median over rounds), latency p99\n",
           window_ms);
    for (int k = 0; k < 6; k++)
        printf("  %-8s %4d active: %s %.2f us, p99 %.1f us (%zu requests)\n", ph_name[k],
               ph_active[k], ph_active[k] > 1 ? "per request" : "median latency",
               med(ph[k].per_round, nr), p99(&ph[k]), ph[k].n);
    printf("salus %d/1: %.2f, echo %d/1: %.2f\n", n_sessions, sn / s1, n_sessions, en_ / e1_);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"bench\":\"rtt\",\"server_us\":%.2f,\"echo_us\":%.2f,\"ratio\":%.3f,"
                    "\"server_p99_us\":%.2f,\"echo_p99_us\":%.2f,\"rounds\":%d,\"calls\":%d,"
                    "\"request_bytes\":%zu,\"reply_bytes\":%zu,"
                    "\"rtt_op\":{\"server_us\":%.2f,\"echo_us\":%.2f,\"ratio\":%.3f,"
                    "\"server_p99_us\":%.2f,\"echo_p99_us\":%.2f,\"request_bytes\":%zu,"
                    "\"reply_bytes\":%zu},"
                    "\"growth\":{\"sessions\":%d,\"ratio\":%.3f,\"salus_n_us\":%.2f,"
                    "\"salus_1_us\":%.2f,\"echo_n_us\":%.2f,\"echo_1_us\":%.2f,"
                    "\"salus_n_p99_us\":%.1f,\"echo_n_p99_us\":%.1f,\"window_ms\":%d},"
                    "\"growth_idle\":{\"sessions\":%d,\"ratio\":%.3f,\"server_us\":%.2f,"
                    "\"one_us\":%.2f,\"server_p99_us\":%.1f,\"one_p99_us\":%.1f,"
                    "\"echo_ratio\":%.3f}}\n",
                    am, bm, am / bm, ap, bp, rounds, calls, sizes[0], sizes[1], oam, obm, oam / obm,
                    oap, obp, sizes[2], sizes[3], n_sessions, growth, sn, s1, en_, e1_, p99(&ph[0]),
                    p99(&ph[1]), window_ms, n_sessions, idle, si, s1, p99(&ph[4]), p99(&ph[2]),
                    idle_echo);
            fclose(f);
        }
    }
    printf("BENCH rtt server_us=%.1f echo_us=%.1f ratio=%.3f server_p99_us=%.1f echo_p99_us=%.1f\n",
           am, bm, am / bm, ap, bp);
    printf("BENCH rtt_op ratio=%.3f server_us=%.1f echo_us=%.1f server_p99_us=%.1f "
           "echo_p99_us=%.1f\n",
           oam / obm, oam, obm, oap, obp);
    printf("BENCH growth_idle sessions=%d ratio=%.3f server_us=%.1f one_us=%.1f "
           "server_p99_us=%.1f one_p99_us=%.1f echo_ratio=%.3f\n",
           n_sessions, idle, si, s1, p99(&ph[4]), p99(&ph[2]), idle_echo);
    printf("BENCH growth sessions=%d ratio=%.3f salus_n_us=%.2f salus_1_us=%.2f echo_n_us=%.2f "
           "echo_1_us=%.2f salus_n_p99_us=%.1f echo_n_p99_us=%.1f\n",
           n_sessions, growth, sn, s1, en_, e1_, p99(&ph[0]), p99(&ph[1]));
    ok = 1;
    free(a);
    free(b);
    free(oa);
    free(ob);
    for (int k = 0; k < 6; k++)
        free(ph[k].v);

out_threads:
    pthread_mutex_lock(&ld.lock);
    ld.target = T_QUIT;
    ld.generation++;
    pthread_cond_broadcast(&ld.cond);
    pthread_mutex_unlock(&ld.lock);
    for (int i = 0; i < started; i++) {
        pthread_join(workers[i].thread, NULL);
        failures += workers[i].failures;
        free(workers[i].lat);
        free(workers[i].end);
    }
out_servers:
    /* clients go first: a client whose server has gone keeps redialling,
     * which makes closing it slow */
    for (int i = 0; big && i < n_sessions; i++) {
        op_job_free(&big[i], false);
        salus_disconnect(big[i].c);
        if (workers && nng_socket_id(workers[i].echo_big) > 0)
            nng_close(workers[i].echo_big);
    }
    free(big);
    free(workers);
    free(payload);
    op_job_free(&one, false);
    salus_graph_free(ge);
    (void) salus_session_close(s);
    salus_disconnect(c);
    if (nng_socket_id(es0) > 0)
        nng_close(es0);
    if (nng_socket_id(es1) > 0)
        nng_close(es1);
    bench_stop(s_one);
    bench_stop(s_big);
    bench_stop(e0);
    bench_stop(e1);
    bench_stop(en);
    sl_ts_tempdir_remove(dir);
    return failures || !ok ? 1 : 0;
}
