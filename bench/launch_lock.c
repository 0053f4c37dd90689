/* bench/launch_lock: what a long iteration's launch costs another tenant.
 * salusd runs on the sim device with launches that take host time
 * ("sim:h200,host-launch": about 5 us of the submitting thread each, as
 * through a GPU driver). Tenant A runs iterations of 8192 ops (salusd's
 * graph limit: ~40 ms of launching each) back to back; tenant B, in its own
 * session and lane, runs a 3-op graph in a loop and times each request.
 * Rounds alternate B alone and B beside A; the figure is B's p99 beside A
 * over B's p99 alone, medians over the rounds. salusd runs with
 * --no-graphs: the figure is about launching op by op, the path whose lock
 * hold grows with the op count; a replayed iteration is one launch, and B
 * beside it waits for the device A then keeps busy, not for the lock
 * (--graphs measures that). Goal: <= 1.2 (an iteration
 * launched under the server lock makes B wait for the rest of its launch).
 *   launch_lock --salusd PATH [--rounds 5] [--requests 2000] [--device SPEC] [--graphs]
 *               [--json FILE]
 * Last line: BENCH launch_lock ratio_p99=... p99_alone_ms=... p99_beside_ms=...
 *            p50_alone_ms=... p50_beside_ms=... ops=8192 rounds=... */
#include "bench_util.h"
#include "chain_graph.h"

#include <salus/salus.h>

#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#define N 4
#define LONG_OPS 8192
#define ROUNDS_MAX 64

typedef bench_chain tenant;

static int tenant_run(tenant *t)
{
    const float x[N] = {1, 2, 3, 4};
    float y[N];
    return bench_chain_run(t, x, y);
}

/* Tenant A's loop: iterations back to back while on. */
typedef struct background {
    tenant *t;
    atomic_bool on, stop;
    atomic_uint iterations;
    int failed;
} background;

static void *background_main(void *arg)
{
    background *b = arg;
    while (!atomic_load(&b->stop)) {
        if (!atomic_load(&b->on)) {
            usleep(1000);
            continue;
        }
        if (tenant_run(b->t) != SALUS_OK)
            b->failed++;
        atomic_fetch_add(&b->iterations, 1);
    }
    return NULL;
}

/* B's requests, each timed (ms); false on a failed run. */
static bool measure(tenant *t, double *ms, int n)
{
    for (int i = 0; i < n; i++) {
        uint64_t t0 = sl_ts_now_ns();
        if (tenant_run(t) != SALUS_OK)
            return false;
        ms[i] = (double) (sl_ts_now_ns() - t0) / 1e6;
    }
    return true;
}

int main(int argc, char **argv)
{
    const char *salusd = NULL, *json = NULL, *device = "sim:h200,host-launch";
    int rounds = 5, requests = 2000;
    bool help = false, graphs = false;
    static const struct option lo[] = {{"salusd", 1, NULL, 's'},   {"rounds", 1, NULL, 'r'},
                                       {"requests", 1, NULL, 'n'}, {"device", 1, NULL, 'd'},
                                       {"json", 1, NULL, 'j'},     {"graphs", 0, NULL, 'g'},
                                       {"help", 0, NULL, 'h'},     {0}};
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        if (c == 's')
            salusd = optarg;
        else if (c == 'r')
            rounds = atoi(optarg);
        else if (c == 'n')
            requests = atoi(optarg);
        else if (c == 'd')
            device = optarg;
        else if (c == 'j')
            json = optarg;
        else if (c == 'g')
            graphs = true;
        else if (c == 'h')
            help = true;
        else
            return 2;
    }
    if (help || !salusd || rounds < 1 || rounds > ROUNDS_MAX || requests < 20 ||
        requests > 100000) {
        fprintf(stderr,
                "usage: launch_lock --salusd PATH [--rounds N] [--requests N] [--device SPEC]\n"
                "                   [--graphs] [--json FILE]\n"
                "A small request's p99 latency beside iterations of %d ops, over alone\n"
                "(--device default sim:h200,host-launch; rounds 5, requests 2000 a phase).\n",
                LONG_OPS);
        return help ? 0 : 2;
    }
    /* the device is the point of the figure: SALUS_BENCH_DEVICE does not
     * apply (bench_util.h) */
    unsetenv("SALUS_BENCH_DEVICE");
    sl_ts_salusd srv;
    bench_salusd_start(&srv, salusd, "launch-lock",
                       (const char *[]){"--device", device, "--memory-limit", "4G", "--log-level",
                                        "warn", graphs ? NULL : "--no-graphs", NULL});
    salus_client *ca = NULL, *cb = NULL;
    if (salus_connect(srv.url, &ca) != SALUS_OK || salus_connect(srv.url, &cb) != SALUS_OK) {
        bench_salusd_stop(&srv);
        return 1;
    }
    tenant a, b;
    bench_chain_open(ca, &a, N, LONG_OPS, "long");
    bench_chain_open(cb, &b, N, 3, "small");
    /* warm both up: first runs place lanes and streams */
    uint64_t t0 = sl_ts_now_ns();
    if (tenant_run(&a) != SALUS_OK || tenant_run(&b) != SALUS_OK) {
        fprintf(stderr, "warm-up failed\n");
        bench_salusd_stop(&srv);
        return 1;
    }
    double long_ms = (double) (sl_ts_now_ns() - t0) / 1e6;

    background bg = {.t = &a};
    pthread_t th;
    if (pthread_create(&th, NULL, background_main, &bg) != 0)
        return 1;
    double *ms = calloc((size_t) requests, sizeof *ms);
    double p99_alone[ROUNDS_MAX], p99_beside[ROUNDS_MAX], p50_alone[ROUNDS_MAX],
        p50_beside[ROUNDS_MAX];
    bool ok = ms != NULL;
    for (int r = 0; r < rounds && ok; r++) {
        ok = measure(&b, ms, requests);
        p99_alone[r] = sl_ts_percentile(ms, (size_t) requests, 99);
        p50_alone[r] = sl_ts_median(ms, (size_t) requests);
        atomic_store(&bg.on, true);
        unsigned before = atomic_load(&bg.iterations);
        while (ok && atomic_load(&bg.iterations) == before) /* one under way at least */
            usleep(1000);
        ok = ok && measure(&b, ms, requests);
        atomic_store(&bg.on, false);
        p99_beside[r] = sl_ts_percentile(ms, (size_t) requests, 99);
        p50_beside[r] = sl_ts_median(ms, (size_t) requests);
        printf("round %d: p50 %.3f -> %.3f ms, p99 %.3f -> %.3f ms\n", r + 1, p50_alone[r],
               p50_beside[r], p99_alone[r], p99_beside[r]);
        usleep(100 * 1000); /* A's last iteration ends before B runs alone */
    }
    atomic_store(&bg.stop, true);
    pthread_join(th, NULL);
    free(ms);
    unsigned iterations = atomic_load(&bg.iterations);
    bench_chain_close(&a);
    bench_chain_close(&b);
    salus_disconnect(ca);
    salus_disconnect(cb);
    bench_salusd_stop(&srv);
    if (!ok || bg.failed) {
        fprintf(stderr, "a run failed\n");
        return 1;
    }
    double alone = sl_ts_median(p99_alone, (size_t) rounds);
    double beside = sl_ts_median(p99_beside, (size_t) rounds);
    double alone50 = sl_ts_median(p50_alone, (size_t) rounds);
    double beside50 = sl_ts_median(p50_beside, (size_t) rounds);
    double ratio = beside / alone;
    printf("%s: an iteration of %d ops takes %.1f ms alone; %u ran beside B\n", device, LONG_OPS,
           long_ms, iterations);
    printf("B's p99 %.3f ms alone, %.3f ms beside (median of %d rounds of %d requests)\n", alone,
           beside, rounds, requests);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"bench\":\"launch_lock\",\"device\":\"%s\",\"ops\":%d,\"rounds\":%d,"
                    "\"requests\":%d,\"ratio_p99\":%.3f,\"p99_alone_ms\":%.4f,"
                    "\"p99_beside_ms\":%.4f,\"p50_alone_ms\":%.4f,\"p50_beside_ms\":%.4f,"
                    "\"long_iteration_ms\":%.2f",
                    device, LONG_OPS, rounds, requests, ratio, alone, beside, alone50, beside50,
                    long_ms);
            bench_json_array(f, "p99_alone_rounds_ms", p99_alone, rounds, "%.4f");
            bench_json_array(f, "p99_beside_rounds_ms", p99_beside, rounds, "%.4f");
            fprintf(f, "}\n");
            fclose(f);
        }
    }
    printf("BENCH launch_lock ratio_p99=%.3f p99_alone_ms=%.3f p99_beside_ms=%.3f "
           "p50_alone_ms=%.3f p50_beside_ms=%.3f ops=%d rounds=%d\n",
           ratio, alone, beside, alone50, beside50, LONG_OPS, rounds);
    return 0;
}
