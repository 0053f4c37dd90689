/* bench/priority: a high-priority job with small iterations (an inference
 * service: 2 dense layers, batch 32, a request every period) beside two
 * low-priority training jobs (the Fashion-MNIST MLP shapes, batch 128), as
 * an ablation of the priority policy's mechanisms. Five salusd run side by
 * side, all with --policy priority and --spread-limit 0 (memory is short:
 * sessions share lanes unless a mechanism gives them their own):
 *   none       --no-exclusive-lanes --no-stepwise --no-stream-classes
 *              (strict priority at iteration boundaries only)
 *   (these first four also with --partitions off)
 *   placement  low-priority lanes on below-normal streams alone
 *              (--no-exclusive-lanes --no-stepwise)
 *   exclusive  high-priority sessions' own lanes alone
 *              (--no-stepwise --no-stream-classes)
 *   gap_fill   low-priority iterations op by op into high-priority gaps,
 *              alone (--no-exclusive-lanes --no-stream-classes)
 *   all        every mechanism (salusd --policy priority as shipped; on cpu
 *              that includes compute partitions on demand: while a
 *              high-priority job is joined, one core is its lanes' own
 *              and the others lend theirs to it)
 *   no_part    every mechanism but compute partitions (--partitions off)
 *   part       compute partitions alone: one core for the high-priority
 *              lane, the rest for the others, low-priority iterations
 *              whole (--partitions 1 --no-stepwise)
 *   part_gap   partitions with every mechanism (--partitions 1): low-
 *              priority steps on their own cores wait only while
 *              high-priority work is pending, and borrow the idle
 *              high-priority core; the low-priority core is lent to
 *              high-priority work (its below-normal threads yield it at
 *              once: device.h partition_lend)
 *   part_strict part_gap without the loan (--strict-partitions): the
 *              high-priority lane on its one core only
 * For each high-priority period and round, interleaved: hp alone and the
 * two lp jobs alone (on `all`), then hp + 2 lp on each configuration
 * (those --phases names; all of them by default).
 * Inflation = hp latency with lp / hp alone (medians over rounds of each
 * round's p50 and p99); lp retained = lp iterations/s with hp / lp alone.
 * Nothing is tuned on these runs: the gap filler's constants (host margin,
 * part length) come from a different workload (one low-priority job at a
 * 2 ms period), so the figures here test them. Prints one line per period
 * and configuration,
 *   BENCH priority_ablation period_us=P phase=NAME p99_inflation=...
 *         p50_inflation=... lp_retained=...
 * and last the shipped configuration at the first period (2 ms by default:
 * the period the priority goal is stated at):
 *   BENCH priority p99_inflation=... p50_inflation=... lp_retained=...
 *         lp_sessions=2 period_us=P
 * and partitions with gap filling (part_gap) against every other mechanism
 * without them (no_part) at that period:
 *   BENCH spatial_cpu p99_inflation=... lp_retained=... gap_p99_inflation=...
 *         gap_lp_retained=... part_p99_inflation=... part_lp_retained=...
 *         strict_p99_inflation=... strict_lp_retained=... rounds_won=W/N
 * (a phase left out by --phases prints 0 there; rounds_won: the rounds, of
 * every period, in which part_gap had both the lower hp p99 and the higher
 * lp throughput than no_part side by side).
 *   priority --salusd PATH [--rounds 5] [--seconds 2]
 *            [--periods-us 2000,1000,5000] [--lp-jobs 2] [--spread-limit 0]
 *            [--phases all,part_gap,...] [--json FILE] */
#include "bench_util.h"

#include <salus/salus.h>

#include <getopt.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

typedef struct hp_job {
    salus_session *s;
    salus_graph *g;
} hp_job;

typedef struct lp_job {
    salus_client *c;
    salus_session *s;
    salus_model *m;
    atomic_int stop;
    long iters;
} lp_job;

static float hp_x[32 * 256], lp_x[128 * 784];
static int32_t lp_y[128];

static int hp_open(salus_client *c, hp_job *j)
{
    salus_session_opts o = {.name = "hp", .priority = 10, .ephemeral_bytes = 1 << 20};
    uint64_t w1, w2;
    const int64_t dw[] = {256, 256}, dx[] = {32, 256};
    if (salus_session_open(c, &o, &j->s) ||
        salus_tensor_create(j->s, SALUS_F32, 2, dw, NULL, &w1) ||
        salus_tensor_create(j->s, SALUS_F32, 2, dw, NULL, &w2))
        return -1;
    j->g = salus_graph_new();
    salus_value x = salus_graph_input(j->g, SALUS_F32, 2, dx);
    salus_value a = salus_graph_param(j->g, w1, SALUS_F32, 2, dw);
    salus_value b = salus_graph_param(j->g, w2, SALUS_F32, 2, dw);
    salus_value h = salus_graph_op(j->g, "matmul", 2, (salus_value[]){x, a}, 0, NULL, 0, NULL);
    h = salus_graph_op(j->g, "relu", 1, &h, 0, NULL, 0, NULL);
    h = salus_graph_op(j->g, "matmul", 2, (salus_value[]){h, b}, 0, NULL, 0, NULL);
    (void) salus_graph_op(j->g, "relu", 1, &h, 0, NULL, 0, NULL);
    return salus_graph_register(j->s, j->g, NULL);
}

static void hp_close(hp_job *j)
{
    salus_graph_free(j->g);
    (void) salus_session_close(j->s);
}

/* Requests of each phase left out of its latencies. */
#define HP_WARMUP 20

/* Runs the hp service for `seconds`: one request every period_us; returns
 * the number of latencies (us) written to lat (all but the first
 * HP_WARMUP). */
static size_t hp_serve(hp_job *j, double seconds, int period_us, double *lat, size_t max)
{
    size_t n = 0, served = 0;
    uint64_t end = sl_ts_now_ns() + (uint64_t) (seconds * 1e9), next = sl_ts_now_ns();
    const void *feeds[] = {hp_x};
    while (sl_ts_now_ns() < end && n < max) {
        uint64_t t0 = sl_ts_now_ns();
        if (salus_run(j->s, j->g, feeds, 0, NULL, NULL) != SALUS_OK)
            return n;
        if (++served > HP_WARMUP) /* a new session's first runs touch cold memory */
            lat[n++] = (double) (sl_ts_now_ns() - t0) / 1e3;
        next += (uint64_t) period_us * 1000;
        uint64_t now = sl_ts_now_ns();
        if (next > now)
            usleep((useconds_t) ((next - now) / 1000));
        else
            next = now;
    }
    return n;
}

static int lp_open(const char *url, lp_job *j)
{
    salus_optimizer opt = {.kind = SALUS_MOMENTUM, .lr = 0.01f, .momentum = 0.9f};
    salus_session_opts o = {.name = "lp", .priority = 0, .ephemeral_bytes = 8 << 20};
    j->m = salus_model_new(1, (int64_t[]){784});
    salus_model_dense(j->m, 256);
    salus_model_relu(j->m);
    salus_model_dense(j->m, 128);
    salus_model_relu(j->m);
    salus_model_dense(j->m, 10);
    if (salus_connect(url, &j->c) || salus_session_open(j->c, &o, &j->s))
        return -1;
    return salus_model_compile(j->m, j->s, &opt, 128, 128, 1);
}

static void lp_close(lp_job *j)
{
    salus_model_free(j->m);
    (void) salus_session_close(j->s);
    salus_disconnect(j->c);
}

static void *lp_train(void *arg)
{
    lp_job *j = arg;
    while (!atomic_load(&j->stop)) {
        if (salus_model_train_step(j->m, lp_x, lp_y, NULL) != SALUS_OK)
            break;
        j->iters++;
    }
    return NULL;
}

typedef struct phase {
    double p50, p99, lp_ips;
} phase;

#define MAX_LP 4
static int n_lp_jobs = 2;

/* One phase: optional hp service and n_lp low-priority trainers. */
static int run_phase(salus_client *c, const char *url, bool hp, int n_lp, double seconds,
                     int period_us, phase *out)
{
    static double lat[200000];
    hp_job h = {0};
    lp_job l[MAX_LP] = {0};
    pthread_t th[MAX_LP];
    if (hp && hp_open(c, &h))
        return -1;
    for (int k = 0; k < n_lp; k++)
        if (lp_open(url, &l[k]))
            return -1;
    uint64_t t0 = sl_ts_now_ns();
    for (int k = 0; k < n_lp; k++)
        pthread_create(&th[k], NULL, lp_train, &l[k]);
    size_t n = 0;
    if (hp)
        n = hp_serve(&h, seconds, period_us, lat, sizeof lat / sizeof *lat);
    else
        usleep((useconds_t) (seconds * 1e6));
    long iters = 0;
    for (int k = 0; k < n_lp; k++) {
        atomic_store(&l[k].stop, 1);
        pthread_join(th[k], NULL);
        iters += l[k].iters;
    }
    double dt = (double) (sl_ts_now_ns() - t0) / 1e9;
    out->p50 = n ? sl_ts_median(lat, n) : 0;
    out->p99 = n ? sl_ts_percentile(lat, n, 99) : 0;
    out->lp_ips = (double) iters / dt;
    if (hp)
        hp_close(&h);
    for (int k = 0; k < n_lp; k++)
        lp_close(&l[k]);
    return 0;
}

enum {
    CONF_NONE,
    CONF_PLACEMENT,
    CONF_EXCLUSIVE,
    CONF_GAP_FILL,
    CONF_ALL,
    CONF_NO_PART,
    CONF_PART,
    CONF_PART_GAP,
    CONF_PART_STRICT,
    N_CONF
};
static const char *const conf_name[N_CONF] = {"none",     "placement", "exclusive",
                                              "gap_fill", "all",       "no_part",
                                              "part",     "part_gap",  "part_strict"};
static const char *const conf_flags[N_CONF][6] = {
    {"--no-exclusive-lanes", "--no-stepwise", "--no-stream-classes", "--partitions", "off", NULL},
    {"--no-exclusive-lanes", "--no-stepwise", "--partitions", "off", NULL},
    {"--no-stepwise", "--no-stream-classes", "--partitions", "off", NULL},
    {"--no-exclusive-lanes", "--no-stream-classes", "--partitions", "off", NULL},
    {NULL},
    {"--partitions", "off", NULL},
    {"--partitions", "1", "--no-stepwise", NULL},
    {"--partitions", "1", NULL},
    {"--partitions", "1", "--strict-partitions", NULL},
};
static bool conf_on[N_CONF];

typedef struct server {
    sl_ts_salusd srv;
    salus_client *c;
} server;

static const char *spread_limit = "0";

static int server_start(server *s, const char *salusd, int conf)
{
    const char *args[20] = {"--memory-limit", "1G",       "--spread-limit", spread_limit,
                            "--policy",       "priority", "--log-level",    "warn"};
    int n = 8;
    for (int k = 0; conf_flags[conf][k]; k++)
        args[n++] = conf_flags[conf][k];
    args[n] = NULL;
    bench_salusd_start(&s->srv, salusd, "prio", args);
    s->c = NULL;
    return salus_connect(s->srv.url, &s->c) == SALUS_OK ? 0 : -1;
}

static void server_stop(server *s)
{
    if (s->srv.pid <= 0)
        return;
    if (s->c)
        salus_disconnect(s->c);
    bench_salusd_stop(&s->srv);
}

#define MAX_ROUNDS 32
#define MAX_PERIODS 8

int main(int argc, char **argv)
{
    const char *salusd = NULL, *json = NULL, *periods_arg = "2000,1000,5000";
    int rounds = 5;
    double seconds = 2;
    static const struct option lo[] = {
        {"salusd", 1, NULL, 's'},     {"rounds", 1, NULL, 'r'}, {"seconds", 1, NULL, 't'},
        {"periods-us", 1, NULL, 'p'}, {"json", 1, NULL, 'j'},   {"spread-limit", 1, NULL, 'l'},
        {"lp-jobs", 1, NULL, 'n'},    {"phases", 1, NULL, 'P'}, {0}};
    const char *phases = NULL; /* every configuration */
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        if (c == 's')
            salusd = optarg;
        else if (c == 'r')
            rounds = atoi(optarg);
        else if (c == 't')
            seconds = atof(optarg);
        else if (c == 'p')
            periods_arg = optarg;
        else if (c == 'j')
            json = optarg;
        else if (c == 'l')
            spread_limit = optarg;
        else if (c == 'n')
            n_lp_jobs = atoi(optarg);
        else if (c == 'P')
            phases = optarg;
        else
            return 2;
    }
    int periods[MAX_PERIODS], n_periods = 0;
    for (const char *p = periods_arg; *p && n_periods < MAX_PERIODS;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 100 || v > 1000000)
            break;
        periods[n_periods++] = (int) v;
        p = *end == ',' ? end + 1 : end;
    }
    if (!salusd || rounds < 1 || rounds > MAX_ROUNDS || seconds <= 0 || n_periods == 0 ||
        n_lp_jobs < 1 || n_lp_jobs > MAX_LP) {
        fprintf(stderr, "usage: priority --salusd PATH [--rounds N] [--seconds S] "
                        "[--periods-us P1,P2,...] [--lp-jobs N] [--phases NAME,...] "
                        "[--json FILE]\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof lp_x / sizeof *lp_x; i++)
        lp_x[i] = (float) (i % 97) / 97.0f;
    for (size_t i = 0; i < 128; i++)
        lp_y[i] = (int32_t) (i % 10);
    for (int k = 0; k < N_CONF; k++) {
        size_t len = strlen(conf_name[k]);
        conf_on[k] = !phases;
        for (const char *q = phases; q && (q = strstr(q, conf_name[k])); q += len)
            if ((q == phases || q[-1] == ',') && (q[len] == ',' || q[len] == 0))
                conf_on[k] = true;
    }
    conf_on[CONF_ALL] = true;
    static server srv[N_CONF];
    for (int k = 0; k < N_CONF; k++) {
        if (!conf_on[k])
            continue;
        if (server_start(&srv[k], salusd, k)) {
            fprintf(stderr, "priority: cannot start salusd (%s)\n", conf_name[k]);
            for (int j = 0; j <= k; j++)
                server_stop(&srv[j]);
            return 1;
        }
    }
    /* per period and round: hp alone, lp alone, then each configuration */
    static phase alone[MAX_PERIODS][MAX_ROUNDS], lp_alone[MAX_PERIODS][MAX_ROUNDS],
        mixed[MAX_PERIODS][N_CONF][MAX_ROUNDS];
    server *all = &srv[CONF_ALL];
    for (int r = 0; r < rounds; r++) {
        for (int p = 0; p < n_periods; p++) {
            int rc = run_phase(all->c, all->srv.url, true, 0, seconds, periods[p], &alone[p][r]) ||
                     run_phase(all->c, all->srv.url, false, n_lp_jobs, seconds, periods[p],
                               &lp_alone[p][r]);
            for (int k = 0; k < N_CONF && !rc; k++)
                rc = !conf_on[k] ? 0
                                 : run_phase(srv[k].c, srv[k].srv.url, true, n_lp_jobs, seconds,
                                             periods[p], &mixed[p][k][r]);
            if (rc) {
                fprintf(stderr, "priority: a phase failed: %s\n", salus_last_error(all->c));
                for (int k = 0; k < N_CONF; k++)
                    server_stop(&srv[k]);
                return 1;
            }
            printf("round %d period %d us: hp alone p50 %.0f p99 %.0f us, lp alone %.0f it/s |", r,
                   periods[p], alone[p][r].p50, alone[p][r].p99, lp_alone[p][r].lp_ips);
            for (int k = 0; k < N_CONF; k++)
                if (conf_on[k])
                    printf(" %s p99 %.0f lp %.0f |", conf_name[k], mixed[p][k][r].p99,
                           mixed[p][k][r].lp_ips);
            printf("\n");
            fflush(stdout);
        }
    }
    for (int k = 0; k < N_CONF; k++)
        server_stop(&srv[k]);

    FILE *f = json ? fopen(json, "w") : NULL;
    if (f)
        fprintf(f, "{\"bench\":\"priority\",\"lp_sessions\":%d,\"phases\":[", n_lp_jobs);
    double head[3] = {0}, spatial[4][2] = {{0}};
    bool first = true;
    size_t n = (size_t) rounds;
    for (int p = 0; p < n_periods; p++) {
        double a50[MAX_ROUNDS], a99[MAX_ROUNDS], lpa[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++)
            a50[r] = alone[p][r].p50, a99[r] = alone[p][r].p99, lpa[r] = lp_alone[p][r].lp_ips;
        for (int k = 0; k < N_CONF; k++) {
            if (!conf_on[k])
                continue;
            double m50[MAX_ROUNDS], m99[MAX_ROUNDS], lpm[MAX_ROUNDS];
            for (int r = 0; r < rounds; r++)
                m50[r] = mixed[p][k][r].p50, m99[r] = mixed[p][k][r].p99,
                lpm[r] = mixed[p][k][r].lp_ips;
            double p99_inf = sl_ts_median(m99, n) / sl_ts_median(a99, n);
            double p50_inf = sl_ts_median(m50, n) / sl_ts_median(a50, n);
            double retained = sl_ts_median(lpm, n) / sl_ts_median(lpa, n);
            printf("BENCH priority_ablation period_us=%d phase=%s p99_inflation=%.3f "
                   "p50_inflation=%.3f lp_retained=%.3f\n",
                   periods[p], conf_name[k], p99_inf, p50_inf, retained);
            if (f)
                fprintf(f,
                        "%s{\"period_us\":%d,\"phase\":\"%s\",\"p99_inflation\":%.3f,"
                        "\"p50_inflation\":%.3f,\"lp_retained\":%.3f}",
                        first ? "" : ",", periods[p], conf_name[k], p99_inf, p50_inf, retained);
            first = false;
            if (p == 0 && k == CONF_ALL)
                head[0] = p99_inf, head[1] = p50_inf, head[2] = retained;
            int sk = k == CONF_PART_GAP      ? 0
                     : k == CONF_NO_PART     ? 1
                     : k == CONF_PART        ? 2
                     : k == CONF_PART_STRICT ? 3
                                             : -1;
            if (p == 0 && sk >= 0)
                spatial[sk][0] = p99_inf, spatial[sk][1] = retained;
        }
    }
    if (f) {
        fprintf(f, "]}\n");
        fclose(f);
    }
    printf("BENCH priority p99_inflation=%.3f p50_inflation=%.3f lp_retained=%.3f lp_sessions=%d "
           "period_us=%d\n",
           head[0], head[1], head[2], n_lp_jobs, periods[0]);
    /* how often partitions with gap filling beat gap filling alone side by
     * side (same period, same round: the same load on the machine), on p99
     * and on lp throughput both, over every period */
    int wins = 0, pairs = 0;
    for (int p = 0; p < n_periods && conf_on[CONF_PART_GAP] && conf_on[CONF_NO_PART]; p++)
        for (int r = 0; r < rounds; r++, pairs++)
            wins += mixed[p][CONF_PART_GAP][r].p99 <= mixed[p][CONF_NO_PART][r].p99 &&
                    mixed[p][CONF_PART_GAP][r].lp_ips >= mixed[p][CONF_NO_PART][r].lp_ips;
    printf("BENCH spatial_cpu p99_inflation=%.3f lp_retained=%.3f gap_p99_inflation=%.3f "
           "gap_lp_retained=%.3f part_p99_inflation=%.3f part_lp_retained=%.3f "
           "strict_p99_inflation=%.3f strict_lp_retained=%.3f rounds_won=%d/%d lp_sessions=%d "
           "period_us=%d\n",
           spatial[0][0], spatial[0][1], spatial[1][0], spatial[1][1], spatial[2][0], spatial[2][1],
           spatial[3][0], spatial[3][1], wins, pairs, n_lp_jobs, periods[0]);
    return 0;
}
