/* bench/fair_share: the two examples/fashion_train jobs, the CNN and the
 * MLP, training side by side on one lane of one salusd under --policy fair
 * (--spread-limit 0 and a tiny --lane-size: the second session shares the
 * first one's lane), and the share of device time each attains over a
 * window. Their iterations differ tenfold and both clients think between
 * iterations: without anticipation the MLP's client is still sending its
 * next step when the lane frees, and the CNN wins every race. The share is
 * of the device time the two attain over S seconds, from 2 s after both
 * opened. Each round
 * runs salusd as shipped and with --anticipate-us 0, alternating which goes
 * first; prints the median, min and max over rounds of the MLP's share:
 *   BENCH fair_share policy=fair seconds=S rounds=N mlp_share=... ...
 * and the same figures as JSON.
 *   fair_share --salusd PATH --fashion-train PATH [--rounds 5] [--seconds 10]
 *              [--json FILE] */
#include "bench_util.h"

#include <salus/salus.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The field `key` (a number) of the session named name in a status reply
 * as JSON; -1 when there is none. */
static double session_field(const char *json, const char *name, const char *key)
{
    char want[64], k[64];
    snprintf(want, sizeof want, "\"name\":\"%s\"", name);
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *s = strstr(json, want);
    if (!s)
        return -1;
    const char *next = strstr(s + 1, "{\"id\":");
    const char *f = strstr(s, k);
    if (!f || (next && f > next))
        return -1;
    return strtod(f + strlen(k), NULL);
}

typedef struct sample {
    double cnn_ns, mlp_ns, cnn_lane, mlp_lane;
} sample;

static int take(salus_client *c, sample *out)
{
    char *json = NULL;
    int rc = salus_status_json(c, &json);
    if (rc)
        return rc;
    out->cnn_ns = session_field(json, "cnn", "attained_ns");
    out->mlp_ns = session_field(json, "mlp", "attained_ns");
    out->cnn_lane = session_field(json, "cnn", "lane");
    out->mlp_lane = session_field(json, "mlp", "lane");
    salus_free(json);
    return out->cnn_ns < 0 || out->mlp_ns < 0 ? SALUS_ENOTFOUND : 0;
}

/* One run: the MLP's share over the window, or -1 when it could not be
 * measured (the sessions did not share a lane: *split set). */
static double run(const char *salusd, const char *train, bool anticipate, double window_s,
                  bool *split)
{
    sl_ts_salusd srv;
    /* as shipped (without the last two), or with anticipation off */
    const char *args[] = {"--policy",    "fair", "--spread-limit",  "0", "--lane-size", "64K",
                          "--log-level", "warn", "--anticipate-us", "0", NULL};
    if (anticipate)
        args[8] = NULL;
    bench_salusd_spawn(&srv, salusd, "fair-share", args);
    bench_salusd_ready(&srv);
    const char *cnn[] = {train,  "--url",         srv.url, "--model",      "cnn", "--epochs",
                         "1000", "--train-limit", "12800", "--test-limit", "100", "--quiet",
                         NULL};
    const char *mlp[] = {train,  "--url",         srv.url, "--model",      "mlp", "--epochs",
                         "1000", "--train-limit", "12800", "--test-limit", "100", "--quiet",
                         NULL};
    pid_t pc = bench_spawn(cnn);
    sl_ts_sleep_ms(300); /* the CNN's lane first: the MLP joins it */
    pid_t pm = bench_spawn(mlp);
    double share = -1;
    salus_client *c = NULL;
    sample a, b;
    *split = false;
    if (salus_connect(srv.url, &c) != SALUS_OK) {
        fprintf(stderr, "cannot connect to salusd\n");
        goto out;
    }
    /* both opened (data loaded, graphs registered), 2 s of warm-up */
    for (int i = 0; i < 300 && take(c, &a) != 0; i++)
        sl_ts_sleep_ms(100);
    sl_ts_sleep_ms(2000);
    if (take(c, &a) != 0) {
        fprintf(stderr, "the two sessions are not in the status\n");
        goto out;
    }
    sl_ts_sleep_ms((long) (window_s * 1000));
    if (take(c, &b) != 0) {
        fprintf(stderr, "the two sessions are not in the status\n");
        goto out;
    }
    if (a.cnn_lane != a.mlp_lane || b.cnn_lane != b.mlp_lane) {
        *split = true;
        goto out;
    }
    double dc = b.cnn_ns - a.cnn_ns, dm = b.mlp_ns - a.mlp_ns;
    if (dc + dm > 0)
        share = dm / (dc + dm);
out:
    salus_disconnect(c);
    bench_stop(pc);
    bench_stop(pm);
    bench_salusd_stop(&srv);
    return share;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *salusd = NULL, *train = NULL, *json = NULL;
    int rounds = 5;
    double seconds = 10;
    static const struct option lo[] = {{"salusd", 1, NULL, 's'}, {"fashion-train", 1, NULL, 't'},
                                       {"rounds", 1, NULL, 'r'}, {"seconds", 1, NULL, 'S'},
                                       {"json", 1, NULL, 'j'},   {0}};
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        if (c == 's')
            salusd = optarg;
        else if (c == 't')
            train = optarg;
        else if (c == 'r')
            rounds = atoi(optarg);
        else if (c == 'S')
            seconds = atof(optarg);
        else if (c == 'j')
            json = optarg;
        else
            return 2;
    }
    if (!salusd || !train || rounds < 1 || rounds > 50 || seconds <= 0) {
        fprintf(stderr, "usage: fair_share --salusd PATH --fashion-train PATH [--rounds N] "
                        "[--seconds S] [--json FILE]\n");
        return 2;
    }
    double on[50], off[50];
    int n_on = 0, n_off = 0, splits = 0;
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            bool anticipate = (k == 0) == (r % 2 == 0); /* alternate which goes first */
            double share = -1;
            for (int attempt = 0; attempt < 3 && share < 0; attempt++) {
                bool split = false;
                share = run(salusd, train, anticipate, seconds, &split);
                if (split)
                    splits++;
                else if (share < 0)
                    return 1;
            }
            if (share < 0) {
                fprintf(stderr, "the sessions never shared a lane\n");
                return 1;
            }
            printf("round %d %s: mlp_share=%.3f\n", r + 1, anticipate ? "fair" : "no_anticipation",
                   share);
            fflush(stdout);
            if (anticipate)
                on[n_on++] = share;
            else
                off[n_off++] = share;
        }
    }
    double so[50], sf[50];
    memcpy(so, on, sizeof(double) * (size_t) n_on);
    memcpy(sf, off, sizeof(double) * (size_t) n_off);
    qsort(so, (size_t) n_on, sizeof so[0], cmp_double);
    qsort(sf, (size_t) n_off, sizeof sf[0], cmp_double);
    double med = sl_ts_median(on, (size_t) n_on), med_off = sl_ts_median(off, (size_t) n_off);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"bench\":\"fair_share\",\"policy\":\"fair\",\"seconds\":%.1f,"
                    "\"rounds\":%d,\"mlp_share\":%.4f,\"no_anticipation_mlp_share\":%.4f",
                    seconds, rounds, med, med_off);
            bench_json_array(f, "mlp_shares", on, n_on, "%.4f");
            bench_json_array(f, "no_anticipation_mlp_shares", off, n_off, "%.4f");
            fprintf(f, ",\"lane_splits_retried\":%d}\n", splits);
            fclose(f);
        }
    }
    printf("BENCH fair_share policy=fair seconds=%.0f rounds=%d mlp_share=%.3f mlp_share_min=%.3f "
           "mlp_share_max=%.3f no_anticipation_mlp_share=%.3f no_anticipation_min=%.3f "
           "no_anticipation_max=%.3f\n",
           seconds, rounds, med, so[0], so[n_on - 1], med_off, sf[0], sf[n_off - 1]);
    return 0;
}
