/* bench/switch: what switching between jobs costs, as a client sees it,
 * with salusd's resident state against a checkpoint-style switch.
 *
 *   switch --salusd PATH [--rounds 7] [--iters 200] [--weights-mib 4]
 *          [--model-mib 196] [--model-iters 4] [--json FILE]
 *
 * One salusd (--spread-limit 0: the jobs share one lane and take turns, the
 * case where switching happens at all). Two jobs, each its own client
 * (connection) and session, each with the same iteration graph (a
 * [128,256] feed times a [256,256] weight, relu; about 17 MFLOP) and a
 * persistent state tensor (weights + optimizer state: --weights-mib, and a
 * model-sized pair of jobs with --model-mib, by default ResNet-50's 25.6 M
 * parameters with SGD momentum, 2 x 4 B each). One client thread issues
 * every iteration, one at a time, and times each salus_run from call to
 * reply: the only difference between the cases is what happened before it.
 *
 *   same   job A, then A again: no switch;
 *   alt    A, B, A, B...: every iteration follows the other job's (salus:
 *          the state of both stays resident, nothing moves);
 *   ckpt   A, B, A, B... where before each iteration the outgoing job's
 *          state is downloaded (tensor read) and the incoming job's is
 *          uploaded (tensor write), what a server without resident state
 *          must do; timed from the start of the download to the reply;
 *   the same alt and ckpt for the model-sized jobs.
 * Every round runs each case in turn (same, alt, ckpt, alt_model,
 * ckpt_model), medians over all rounds.
 *
 *   switch cost = median(case) - median(same)
 *   ratio       = median(ckpt) / median(alt): a switching iteration's
 *                 latency, checkpoint-style against salus.
 * The checkpoint here goes through salusd's tensor calls (protobuf-c over
 * NNG ipc, inline bytes: about two extra copies each way), slower than a
 * well-built checkpoint could be. So the bench also measures a floor on
 * this machine: one memcpy of the state out and one back in, in this
 * process; floor_ratio = (median(same) + floor) / median(alt) is the ratio
 * against a checkpoint that costs nothing but moving its bytes once each
 * way at host memory speed (on a GPU: PCIe, slower still).
 *
 * Internal (not client-observed): salusd's own measure of the lane's idle
 * gap before an iteration of the same / the other session (status),
 * over the alt and same cases.
 *
 * Last lines:
 *   BENCH switch_internal same_gap_us=... other_gap_us=...   (inside salusd)
 *   BENCH switch_model ... (model-sized state)
 *   BENCH switch ratio=... salus_us=... checkpoint_us=... same_us=...
 *         salus_switch_us=... checkpoint_switch_us=... floor_ratio=... (p99s) */
#include "bench_util.h"

#include <salus/salus.h>

#include <getopt.h>
#include <stdbool.h>

#define FEED_ROWS 128
#define FEED_COLS 256

typedef struct job {
    salus_client *c;
    salus_session *s;
    salus_graph *g;
    uint64_t state;     /* the checkpointed tensor */
    size_t state_bytes; /* its size */
} job;

static float feed[FEED_ROWS * FEED_COLS];

static int job_make(const char *url, job *j, size_t state_bytes)
{
    const int64_t d[] = {FEED_ROWS, FEED_COLS}, w[] = {FEED_COLS, FEED_COLS};
    uint64_t t;
    /* declaring the ephemeral need puts both jobs on one lane from the start */
    salus_session_opts o = {.ephemeral_bytes = 1 << 20};
    j->state_bytes = state_bytes;
    if (salus_connect(url, &j->c) || salus_session_open(j->c, &o, &j->s) ||
        salus_tensor_create(j->s, SALUS_F32, 2, w, NULL, &t) ||
        salus_tensor_create(j->s, SALUS_F32, 1, (int64_t[]){(int64_t) (state_bytes / 4)}, NULL,
                            &j->state))
        return -1;
    j->g = salus_graph_new();
    salus_value x = salus_graph_input(j->g, SALUS_F32, 2, d);
    salus_value p = salus_graph_param(j->g, t, SALUS_F32, 2, w);
    salus_value y = salus_graph_op(j->g, "matmul", 2, (salus_value[]){x, p}, 0, NULL, 0, NULL);
    (void) salus_graph_op(j->g, "relu", 1, &y, 0, NULL, 0, NULL);
    return salus_graph_register(j->s, j->g, NULL);
}

static void job_free(job *j)
{
    salus_graph_free(j->g);
    (void) salus_session_close(j->s);
    salus_disconnect(j->c);
}

static int run(job *j)
{
    const void *feeds[] = {feed};
    return salus_run(j->s, j->g, feeds, 0, NULL, NULL) != SALUS_OK;
}

/* Parses salusd's lane gap percentiles (us) from the status text. */
static int gaps(salus_client *c, double *same50, double *other50)
{
    char *text;
    double s99, o99;
    if (salus_status_text(c, &text))
        return -1;
    const char *p = strstr(text, "same session p50");
    int n = p ? sscanf(p, "same session p50 %lf us p99 %lf us, other session p50 %lf us p99 %lf us",
                       same50, &s99, other50, &o99)
              : 0;
    salus_free(text);
    return n == 4 ? 0 : -1;
}

typedef struct cases {
    double *v[5]; /* same, alt, ckpt, alt_model, ckpt_model */
    size_t n[5];
} cases;

/* Times `iters` iterations; alternate: A and B take turns; ckpt: the state
 * moves out and in before each. */
static int measure(job *a, job *b, int iters, bool alternate, bool ckpt, void *buf, double *out)
{
    int failures = 0;
    for (int i = 0; i < iters; i++) {
        job *in = alternate && i % 2 ? b : a, *out_job = in == a ? b : a;
        uint64_t t0 = sl_ts_now_ns();
        if (ckpt) {
            failures += salus_tensor_read(out_job->s, out_job->state, buf, out_job->state_bytes) !=
                        SALUS_OK;
            failures += salus_tensor_write(in->s, in->state, buf, in->state_bytes) != SALUS_OK;
        }
        failures += run(in);
        out[i] = (double) (sl_ts_now_ns() - t0) / 1e3;
    }
    return failures;
}

/* Median time (us) of one memcpy of `bytes` out and one back in. */
static double copy_floor(size_t bytes, int reps)
{
    char *dev = malloc(bytes), *host = malloc(bytes);
    double *t = malloc((size_t) reps * sizeof *t);
    if (!dev || !host || !t) {
        free(dev);
        free(host);
        free(t);
        return -1;
    }
    memset(dev, 1, bytes);
    memset(host, 2, bytes);
    for (int i = 0; i < reps; i++) {
        uint64_t t0 = sl_ts_now_ns();
        memcpy(host, dev, bytes);
        memcpy(dev, host, bytes);
        t[i] = (double) (sl_ts_now_ns() - t0) / 1e3;
    }
    /* keep the copies observable */
    volatile char sink = dev[bytes / 2];
    (void) sink;
    double m = sl_ts_median(t, (size_t) reps);
    free(dev);
    free(host);
    free(t);
    return m;
}

int main(int argc, char **argv)
{
    const char *salusd = NULL, *json = NULL;
    int rounds = 7, iters = 200, weights_mib = 4, model_mib = 196, model_iters = 4;
    static const struct option lo[] = {
        {"salusd", 1, NULL, 's'},    {"rounds", 1, NULL, 'r'},
        {"iters", 1, NULL, 'i'},     {"weights-mib", 1, NULL, 'w'},
        {"model-mib", 1, NULL, 'm'}, {"model-iters", 1, NULL, 'n'},
        {"json", 1, NULL, 'j'},      {0},
    };
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        if (c == 's')
            salusd = optarg;
        else if (c == 'r')
            rounds = atoi(optarg);
        else if (c == 'i')
            iters = atoi(optarg);
        else if (c == 'w')
            weights_mib = atoi(optarg);
        else if (c == 'm')
            model_mib = atoi(optarg);
        else if (c == 'n')
            model_iters = atoi(optarg);
        else if (c == 'j')
            json = optarg;
        else
            return 2;
    }
    if (!salusd || rounds < 5 || rounds > 64 || iters < 10 || weights_mib < 1 || model_mib < 1 ||
        model_mib > 1024 || model_iters < 2) {
        fprintf(stderr, "usage: switch --salusd PATH [--rounds N>=5] [--iters N] [--weights-mib N] "
                        "[--model-mib N] [--model-iters N] [--json FILE]\n");
        return 2;
    }
    char mem[32];
    snprintf(mem, sizeof mem, "%dM", 2 * (weights_mib + model_mib) + 512);
    /* --spread-limit 0: the jobs share one lane and take turns */
    sl_ts_salusd srv;
    bench_salusd_start(&srv, salusd, "switch",
                       (const char *[]){"--memory-limit", mem, "--spread-limit", "0", "--log-level",
                                        "warn", NULL});
    const char *url = srv.url;
    salus_client *probe = NULL;
    (void) salus_connect(url, &probe);
    size_t small = (size_t) weights_mib << 20, large = (size_t) model_mib << 20;
    job a = {0}, b = {0}, ma = {0}, mb = {0};
    void *buf = malloc(large > small ? large : small);
    if (!probe || !buf || job_make(url, &a, small) || job_make(url, &b, small) ||
        job_make(url, &ma, large) || job_make(url, &mb, large)) {
        fprintf(stderr, "switch: set-up failed: %s\n",
                probe ? salus_last_error(probe) : "no server");
        bench_salusd_stop(&srv);
        return 1;
    }
    for (int i = 0; i < FEED_ROWS * FEED_COLS; i++)
        feed[i] = (float) (i % 7) - 3.0f;

    static const char *const name[5] = {"same", "alt", "ckpt", "alt_model", "ckpt_model"};
    cases cs = {0};
    int per[5] = {iters, iters, iters, model_iters, model_iters};
    for (int k = 0; k < 5; k++)
        if (!(cs.v[k] = calloc((size_t) rounds * (size_t) per[k], sizeof(double))))
            return 1;
    int failures = 0;
    double warm[64];
    failures += measure(&a, &b, 32, true, false, buf, warm); /* warm-up */
    failures += measure(&ma, &mb, 2, true, true, buf, warm);
    double gap_same = 0, gap_other = 0;
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 5; k++) {
            bool model = k >= 3;
            double *out = cs.v[k] + cs.n[k];
            failures += measure(model ? &ma : &a, model ? &mb : &b, per[k], k != 0,
                                k == 2 || k == 4, buf, out);
            cs.n[k] += (size_t) per[k];
        }
        printf("round %d: medians same %.0f, alt %.0f, ckpt %d MiB %.0f, alt (model jobs) %.0f, "
               "ckpt %d MiB %.0f us\n",
               r, sl_ts_median(cs.v[0] + cs.n[0] - iters, (size_t) iters),
               sl_ts_median(cs.v[1] + cs.n[1] - iters, (size_t) iters), weights_mib,
               sl_ts_median(cs.v[2] + cs.n[2] - iters, (size_t) iters),
               sl_ts_median(cs.v[3] + cs.n[3] - model_iters, (size_t) model_iters), model_mib,
               sl_ts_median(cs.v[4] + cs.n[4] - model_iters, (size_t) model_iters));
        fflush(stdout);
    }
    if (gaps(probe, &gap_same, &gap_other))
        failures++;
    double floor_small = copy_floor(small, 50), floor_large = copy_floor(large, 5);

    job_free(&a);
    job_free(&b);
    job_free(&ma);
    job_free(&mb);
    salus_disconnect(probe);
    bench_salusd_stop(&srv);
    free(buf);

    double m[5], p[5];
    for (int k = 0; k < 5; k++) {
        m[k] = sl_ts_median(cs.v[k], cs.n[k]);
        p[k] = sl_ts_percentile(cs.v[k], cs.n[k], 99);
    }
    printf("%d rounds; one client thread, one iteration in flight; %d failures\n", rounds,
           failures);
    for (int k = 0; k < 5; k++)
        printf("  %-10s median %9.1f us  p99 %9.1f us  (%zu iterations)\n", name[k], m[k], p[k],
               cs.n[k]);
    printf("memcpy out + in on this host: %d MiB %.0f us, %d MiB %.0f us\n", weights_mib,
           floor_small, model_mib, floor_large);
    double ratio = m[2] / m[1], floor_ratio = (m[0] + floor_small) / m[1];
    double mratio = m[4] / m[3], mfloor_ratio = (m[0] + floor_large) / m[3];
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"bench\":\"switch\",\"same_us\":%.2f,\"salus_us\":%.2f,"
                    "\"checkpoint_us\":%.2f,\"ratio\":%.3f,\"salus_switch_us\":%.2f,"
                    "\"checkpoint_switch_us\":%.2f,\"floor_us\":%.2f,\"floor_ratio\":%.3f,"
                    "\"same_p99_us\":%.2f,\"salus_p99_us\":%.2f,\"checkpoint_p99_us\":%.2f,"
                    "\"state_mib\":%d,"
                    "\"model\":{\"state_mib\":%d,\"salus_us\":%.2f,\"checkpoint_us\":%.2f,"
                    "\"ratio\":%.3f,\"floor_us\":%.2f,\"floor_ratio\":%.3f,"
                    "\"salus_p99_us\":%.2f,\"checkpoint_p99_us\":%.2f},"
                    "\"internal\":{\"same_gap_us\":%.2f,\"other_gap_us\":%.2f}}\n",
                    m[0], m[1], m[2], ratio, m[1] - m[0], m[2] - m[0], floor_small, floor_ratio,
                    p[0], p[1], p[2], weights_mib, model_mib, m[3], m[4], mratio, floor_large,
                    mfloor_ratio, p[3], p[4], gap_same, gap_other);
            fclose(f);
        }
    }
    printf("BENCH switch_internal same_gap_us=%.2f other_gap_us=%.2f\n", gap_same, gap_other);
    printf("BENCH switch_model state_mib=%d ratio=%.2f salus_us=%.0f checkpoint_us=%.0f "
           "salus_switch_us=%.0f checkpoint_switch_us=%.0f floor_ratio=%.2f salus_p99_us=%.0f "
           "checkpoint_p99_us=%.0f\n",
           model_mib, mratio, m[3], m[4], m[3] - m[0], m[4] - m[0], mfloor_ratio, p[3], p[4]);
    printf("BENCH switch state_mib=%d ratio=%.2f salus_us=%.0f checkpoint_us=%.0f same_us=%.0f "
           "salus_switch_us=%.1f checkpoint_switch_us=%.0f floor_ratio=%.2f same_p99_us=%.0f "
           "salus_p99_us=%.0f checkpoint_p99_us=%.0f\n",
           weights_mib, ratio, m[1], m[2], m[0], m[1] - m[0], m[2] - m[0], floor_ratio, p[0], p[1],
           p[2]);
    for (int k = 0; k < 5; k++)
        free(cs.v[k]);
    return failures ? 1 : 0;
}
