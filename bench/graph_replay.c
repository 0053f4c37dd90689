/* bench/graph_replay: what an iteration recorded once and replayed in one
 * launch (server/replay.h) saves against launching its ops one by one.
 * Two salusds on the same device, one with --no-graphs; each runs graphs
 * of 60 and of 240 tiny ops (launch-bound: [256] floats), timed per run as
 * a client sees it. The phases alternate A B B A ... over the rounds; each
 * figure is a median over the rounds of each phase's median.
 *   With t(ops) = fixed + ops * per_op (one by one) and
 *   t(ops) = fixed + replay + ops * per_node (replayed):
 *     per_op_us   = (t1(240) - t1(60)) / 180
 *     per_node_us = (tg(240) - tg(60)) / 180
 *     replay_us   = tg(60) - 60 per_node - (t1(60) - 60 per_op)
 *   ratio        = 60 per_op / (replay + 60 per_node): launching a 60-op
 *                  iteration one by one over replaying it (goal >= 3 on a
 *                  GPU);
 *   client_ratio = t1(60) / tg(60), round trip and copies included.
 * On the sim device these are the profile's model (5 us a launch with
 * host-launch; 5 us a replay plus 1 us a node: kernels/sim/profiles.c);
 * on cuda they are measured.
 *   graph_replay --salusd PATH [--device SPEC] [--rounds 5] [--requests 200]
 *                [--json FILE]
 * Last line: BENCH graph_replay ops=60 ratio=... client_ratio=... per_op_us=...
 *            replay_us=... per_node_us=... device=... noisy=0|1 */
#include "bench_util.h"
#include "chain_graph.h"

#include <salus/salus.h>

#include <getopt.h>
#include <stdbool.h>

#define N 256
#define ROUNDS_MAX 64
#define REQUESTS_MAX 100000

static const int sizes[2] = {60, 240};

typedef bench_chain job;

static int job_run(job *j)
{
    static float x[N], y[N];
    return bench_chain_run(j, x, y);
}

/* The median of n timed runs, microseconds; exits on a failed run. */
static double phase(job *j, int n, double *us)
{
    for (int i = 0; i < n; i++) {
        uint64_t t0 = sl_ts_now_ns();
        if (job_run(j) != SALUS_OK) {
            fprintf(stderr, "run failed: %s\n", salus_last_error(NULL));
            exit(1);
        }
        us[i] = (double) (sl_ts_now_ns() - t0) / 1e3;
    }
    return sl_ts_median(us, (size_t) n);
}

/* The first count keyed key in c's status JSON (0 when absent). */
static long long status_num(salus_client *c, const char *key)
{
    char *json = NULL, pat[64];
    if (salus_status_json(c, &json) != SALUS_OK)
        return -1;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    long long v = 0;
    for (const char *p = json; (p = strstr(p, pat)); p += strlen(pat))
        v += strtoll(p + strlen(pat), NULL, 10);
    salus_free(json);
    return v;
}

int main(int argc, char **argv)
{
    const char *salusd = NULL, *json = NULL, *device = "sim:h200,host-launch";
    int rounds = 5, requests = 200;
    bool help = false;
    static const struct option lo[] = {{"salusd", 1, NULL, 's'},
                                       {"device", 1, NULL, 'd'},
                                       {"rounds", 1, NULL, 'r'},
                                       {"requests", 1, NULL, 'n'},
                                       {"json", 1, NULL, 'j'},
                                       {"help", 0, NULL, 'h'},
                                       {0}};
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        if (c == 's')
            salusd = optarg;
        else if (c == 'd')
            device = optarg;
        else if (c == 'r')
            rounds = atoi(optarg);
        else if (c == 'n')
            requests = atoi(optarg);
        else if (c == 'j')
            json = optarg;
        else if (c == 'h')
            help = true;
        else
            return 2;
    }
    if (help || !salusd || rounds < 5 || rounds > ROUNDS_MAX || requests < 10 ||
        requests > REQUESTS_MAX) {
        fprintf(stderr,
                "usage: graph_replay --salusd PATH [--device SPEC] [--rounds 5..%d]\n"
                "                    [--requests N] [--json FILE]\n"
                "An iteration of 60 ops launched one by one over replayed as one recorded\n"
                "graph (--device default sim:h200,host-launch; cuda on a GPU).\n",
                ROUNDS_MAX);
        return help ? 0 : 2;
    }
    unsetenv("SALUS_BENCH_DEVICE"); /* the device is --device */
    sl_ts_salusd srv[2];
    salus_client *cl[2] = {NULL, NULL};
    job jobs[2][2]; /* [graphs off, on][60, 240 ops] */
    for (int g = 0; g < 2; g++) {
        bench_salusd_start(&srv[g], salusd, g ? "replay-on" : "replay-off",
                           (const char *[]){"--device", device, "--memory-limit", "2G",
                                            "--log-level", "warn", g ? NULL : "--no-graphs", NULL});
        if (salus_connect(srv[g].url, &cl[g]) != SALUS_OK) {
            fprintf(stderr, "cannot connect to salusd\n");
            return 1;
        }
        for (int s = 0; s < 2; s++) {
            bench_chain_open(cl[g], &jobs[g][s], N, sizes[s], sizes[s] == 60 ? "short" : "long");
            for (int w = 0; w < 5; w++) /* lanes placed; the second run records */
                (void) job_run(&jobs[g][s]);
        }
    }
    double *us = calloc((size_t) requests, sizeof *us);
    double med[2][2][ROUNDS_MAX];
    for (int r = 0; r < rounds; r++) {
        for (int s = 0; s < 2; s++)
            for (int i = 0; i < 2; i++) {
                int g = (r + s + i) % 2; /* A B, B A, ...: neither side always first */
                med[g][s][r] = phase(&jobs[g][s], requests, us);
            }
        printf("round %d: 60 ops %.1f -> %.1f us, 240 ops %.1f -> %.1f us\n", r + 1, med[0][0][r],
               med[1][0][r], med[0][1][r], med[1][1][r]);
    }
    double t[2][2], p99[2][2];
    for (int g = 0; g < 2; g++)
        for (int s = 0; s < 2; s++) {
            t[g][s] = sl_ts_median(med[g][s], (size_t) rounds);
            p99[g][s] = sl_ts_percentile(med[g][s], (size_t) rounds, 99);
        }
    long long replays = status_num(cl[1], "graph_replays"),
              off_replays = status_num(cl[0], "graph_replays");
    for (int g = 0; g < 2; g++) {
        for (int s = 0; s < 2; s++) {
            bench_chain_close(&jobs[g][s]);
        }
        salus_disconnect(cl[g]);
        bench_salusd_stop(&srv[g]);
    }
    free(us);
    if (replays <= 0 || off_replays != 0) {
        fprintf(stderr, "graph_replay: replays %lld with graphs, %lld without: not comparable\n",
                replays, off_replays);
        return 1;
    }
    double span = sizes[1] - sizes[0];
    double per_op = (t[0][1] - t[0][0]) / span, per_node = (t[1][1] - t[1][0]) / span;
    double replay = t[1][0] - sizes[0] * per_node - (t[0][0] - sizes[0] * per_op);
    /* replay is a difference between the two salusds' fixed costs; below
     * zero, their fixed costs differed by more than a replay costs (a
     * noisy host), and the ratio would flatter replays: it takes 0 then,
     * and the line says noisy=1 */
    bool noisy = replay < 0;
    if (noisy) {
        fprintf(stderr,
                "graph_replay: the replay's own cost came out at %.2f us (noise between "
                "the two salusds' round trips): the ratio counts it as 0; rerun with more "
                "--rounds or --requests on a quieter host\n",
                replay);
        replay = 0;
    }
    double ratio = sizes[0] * per_op / (replay + sizes[0] * per_node);
    printf("60 ops: one by one %.1f us (p99 over rounds %.1f), replayed %.1f us (%.1f); "
           "replays seen %lld\n",
           t[0][0], p99[0][0], t[1][0], p99[1][0], replays);
    printf("BENCH graph_replay ops=%d ratio=%.2f client_ratio=%.2f per_op_us=%.2f "
           "replay_us=%.2f per_node_us=%.2f device=%s rounds=%d requests=%d noisy=%d\n",
           sizes[0], ratio, t[0][0] / t[1][0], per_op, replay, per_node, device, rounds, requests,
           noisy);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"bench\": \"graph_replay\", \"ops\": %d, \"ratio\": %.4f, "
                    "\"client_ratio\": %.4f, \"per_op_us\": %.4f, \"replay_us\": %.4f, "
                    "\"per_node_us\": %.4f, \"device\": \"%s\"}\n",
                    sizes[0], ratio, t[0][0] / t[1][0], per_op, replay, per_node, device);
            fclose(f);
        }
    }
    return 0;
}
