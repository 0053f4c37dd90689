/* bench/rtt: a no-op iteration round trip through salusd against a bare NNG
 * REQ/REP echo over the same transport, side by side in one run.
 *
 *   rtt --salusd PATH [--rounds 10] [--calls 2000] [--json FILE]
 *
 * Both servers are child processes; everything (this client, salusd, the
 * echo server) is pinned to CPU 0, so neither side gets a second core the
 * other lacks. Rounds alternate A (salus_run of an empty registered graph)
 * and B (echo of a message of the same size as that run request). Prints
 * medians and p99 of every call, and last a line
 *   BENCH rtt server_us=... echo_us=... ratio=...
 * (ratio = server median / echo median). */
#include "bench_util.h"

#include "salus.pb-c.h"
#include <salus/salus.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the echo server: REP contexts that send back what they receive ---- */

typedef struct echo_ctx {
    nng_ctx ctx;
    nng_aio *aio;
    int sending;
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
        e->sending = 1;
        nng_ctx_send(e->ctx, e->aio); /* the received message goes straight back */
    } else {
        e->sending = 0;
        nng_ctx_recv(e->ctx, e->aio);
    }
}

static int echo_server(const char *url)
{
    nng_socket sock;
    echo_ctx ctxs[4];
    if (nng_rep0_open(&sock) || nng_listen(sock, url, NULL, 0)) {
        fprintf(stderr, "echo: cannot listen on %s\n", url);
        return 1;
    }
    for (int i = 0; i < 4; i++) {
        ctxs[i].sending = 0;
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

int main(int argc, char **argv)
{
    const char *salusd = NULL, *json = NULL, *echo_url = NULL;
    int rounds = 10, calls = 2000;
    static const struct option opts[] = {
        {"salusd", required_argument, NULL, 's'}, {"rounds", required_argument, NULL, 'r'},
        {"calls", required_argument, NULL, 'c'},  {"json", required_argument, NULL, 'j'},
        {"echo", required_argument, NULL, 'e'},   {0},
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
        default:
            fprintf(stderr, "usage: rtt --salusd PATH [--rounds N] [--calls N] [--json FILE]\n");
            return 2;
        }
    }
    if (echo_url) {
        sigset_t sigs;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &sigs, NULL);
        return echo_server(echo_url);
    }
    if (!salusd || rounds < 5 || calls < 10) {
        fprintf(stderr, "rtt: need --salusd PATH, >= 5 rounds and >= 10 calls\n");
        return 2;
    }
    bench_pin_cpu0();

    char dir[] = "/tmp/salus-rtt-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char server_url[128], echo[128];
    snprintf(server_url, sizeof server_url, "ipc://%s/salus.sock", dir);
    snprintf(echo, sizeof echo, "ipc://%s/echo.sock", dir);
    /* children first: NNG must not be initialised in a process that forks */
    pid_t spid = bench_spawn((const char *[]){salusd, "--listen", server_url, "--memory-limit",
                                              "64M", "--log-level", "warn", NULL});
    pid_t epid = bench_spawn((const char *[]){"/proc/self/exe", "--echo", echo, NULL});

    salus_client *c = NULL;
    for (int i = 0; i < 500 && salus_connect(server_url, &c) != SALUS_OK; i++)
        usleep(10000);
    nng_socket es;
    int connected = c && nng_req0_open(&es) == 0;
    if (connected) {
        (void) nng_socket_set_ms(es, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
        connected = 0;
        for (int i = 0; i < 500 && !connected; i++) {
            connected = nng_dial(es, echo, NULL, 0) == 0;
            if (!connected)
                usleep(10000);
        }
    }
    salus_session *s = NULL;
    salus_graph *g = salus_graph_new();
    if (!connected || salus_session_open(c, NULL, &s) || !g || salus_graph_register(s, g, NULL)) {
        fprintf(stderr, "rtt: set-up failed: %s\n", c ? salus_last_error(c) : "no server");
        bench_stop(spid);
        bench_stop(epid);
        return 1;
    }
    /* the echo carries as many bytes as a run request does: envelope with
     * seq, session id, token and a Run naming the graph */
    Salus__Run run = SALUS__RUN__INIT;
    run.graph_id = salus_graph_id(g);
    Salus__Request req = SALUS__REQUEST__INIT;
    req.seq = 1000000;
    req.session_id = salus_session_id(s);
    req.token = UINT64_MAX;
    req.body_case = SALUS__REQUEST__BODY_RUN;
    req.run = &run;
    uint8_t payload[64];
    size_t payload_len = salus__request__pack(&req, payload);

    size_t n = (size_t) rounds * calls;
    double *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
    if (!a || !b)
        return 1;
    /* warm-up */
    for (int i = 0; i < calls / 4; i++)
        (void) salus_run(s, g, NULL, 0, NULL, NULL);
    int failures = 0;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < calls; i++) {
            uint64_t t0 = bench_now_ns();
            failures += salus_run(s, g, NULL, 0, NULL, NULL) != SALUS_OK;
            a[(size_t) r * calls + i] = (double) (bench_now_ns() - t0) / 1e3;
        }
        for (int i = 0; i < calls; i++) {
            uint64_t t0 = bench_now_ns();
            char *buf;
            size_t len;
            failures += nng_send(es, payload, payload_len, 0) != 0;
            failures += nng_recv(es, &buf, &len, NNG_FLAG_ALLOC) != 0;
            nng_free(buf, len);
            b[(size_t) r * calls + i] = (double) (bench_now_ns() - t0) / 1e3;
        }
        printf("round %2d: server median %.1f us, echo median %.1f us\n", r,
               bench_median(a + (size_t) r * calls, (size_t) calls),
               bench_median(b + (size_t) r * calls, (size_t) calls));
        fflush(stdout);
    }
    salus_graph_free(g);
    (void) salus_session_close(s);
    salus_disconnect(c);
    nng_close(es);
    bench_stop(spid);
    bench_stop(epid);
    char path[256];
    snprintf(path, sizeof path, "%s/salus.sock", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/echo.sock", dir);
    unlink(path);
    rmdir(dir);

    double am = bench_median(a, n), bm = bench_median(b, n);
    double ap = bench_percentile(a, n, 99), bp = bench_percentile(b, n, 99);
    printf("%d rounds x %d calls, all pinned to CPU 0, %d failures\n", rounds, calls, failures);
    printf("salusd no-op run: median %.1f us, p99 %.1f us\n", am, ap);
    printf("bare NNG echo:    median %.1f us, p99 %.1f us\n", bm, bp);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"bench\":\"rtt\",\"server_us\":%.2f,\"echo_us\":%.2f,\"ratio\":%.3f,"
                    "\"server_p99_us\":%.2f,\"echo_p99_us\":%.2f,\"rounds\":%d,\"calls\":%d}\n",
                    am, bm, am / bm, ap, bp, rounds, calls);
            fclose(f);
        }
    }
    printf("BENCH rtt server_us=%.1f echo_us=%.1f ratio=%.3f server_p99_us=%.1f echo_p99_us=%.1f\n",
           am, bm, am / bm, ap, bp);
    free(a);
    free(b);
    return failures ? 1 : 0;
}
