/* bench/priority: a high-priority job with small iterations (an inference
 * service: 2 dense layers, batch 32, a request every --period-us) against a
 * low-priority training job (the Fashion-MNIST MLP shapes, batch 128), in
 * four phases per round, interleaved over rounds:
 *   A  hp alone                          -> hp latency
 *   B  hp + lp, policy priority (op-level gap filling: hp has its own lane,
 *      lp runs op by op and parks while hp work is pending)
 *   C  hp + lp, policy fair (Salus's baseline: one lane, whole iterations)
 *   D  lp alone                          -> lp throughput
 * Prints medians over rounds of hp p50/p99 latency per phase and
 *   BENCH priority p99_inflation=B/A p50_inflation=... lp_retained=B/D
 *         fair_p99_inflation=C/A
 *   priority --salusd PATH [--rounds 5] [--seconds 2] [--period-us 2000] [--json FILE] */
#include "bench_util.h"

#include <salus/salus.h>

#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

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
    uint64_t end = bench_now_ns() + (uint64_t) (seconds * 1e9), next = bench_now_ns();
    const void *feeds[] = {hp_x};
    while (bench_now_ns() < end && n < max) {
        uint64_t t0 = bench_now_ns();
        if (salus_run(j->s, j->g, feeds, 0, NULL, NULL) != SALUS_OK)
            return n;
        if (++served > HP_WARMUP) /* a new session's first runs touch cold memory */
            lat[n++] = (double) (bench_now_ns() - t0) / 1e3;
        next += (uint64_t) period_us * 1000;
        uint64_t now = bench_now_ns();
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

/* One phase: optional hp service and optional lp training under policy. */
static int run_phase(salus_client *c, const char *url, const char *policy, bool hp, bool lp,
                     double seconds, int period_us, phase *out)
{
    static double lat[200000];
    hp_job h = {0};
    lp_job l = {0};
    pthread_t th;
    if (salus_set_policy(c, policy, 0))
        return -1;
    if ((hp && hp_open(c, &h)) || (lp && lp_open(url, &l)))
        return -1;
    uint64_t t0 = bench_now_ns();
    if (lp)
        pthread_create(&th, NULL, lp_train, &l);
    size_t n = 0;
    if (hp)
        n = hp_serve(&h, seconds, period_us, lat, sizeof lat / sizeof *lat);
    else
        usleep((useconds_t) (seconds * 1e6));
    if (lp) {
        atomic_store(&l.stop, 1);
        pthread_join(th, NULL);
    }
    double dt = (double) (bench_now_ns() - t0) / 1e9;
    out->p50 = n ? bench_median(lat, n) : 0;
    out->p99 = n ? bench_percentile(lat, n, 99) : 0;
    out->lp_ips = lp ? (double) l.iters / dt : 0;
    if (hp)
        hp_close(&h);
    if (lp)
        lp_close(&l);
    return 0;
}

int main(int argc, char **argv)
{
    const char *salusd = NULL, *json = NULL;
    int rounds = 5, period_us = 2000;
    double seconds = 2;
    static const struct option lo[] = {{"salusd", 1, NULL, 's'},  {"rounds", 1, NULL, 'r'},
                                       {"seconds", 1, NULL, 't'}, {"period-us", 1, NULL, 'p'},
                                       {"json", 1, NULL, 'j'},    {0}};
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        if (c == 's')
            salusd = optarg;
        else if (c == 'r')
            rounds = atoi(optarg);
        else if (c == 't')
            seconds = atof(optarg);
        else if (c == 'p')
            period_us = atoi(optarg);
        else if (c == 'j')
            json = optarg;
        else
            return 2;
    }
    if (!salusd || rounds < 1 || rounds > 32 || seconds <= 0 || period_us < 100) {
        fprintf(stderr,
                "usage: priority --salusd PATH [--rounds N] [--seconds S] [--period-us N]\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof lp_x / sizeof *lp_x; i++)
        lp_x[i] = (float) (i % 97) / 97.0f;
    for (size_t i = 0; i < 128; i++)
        lp_y[i] = (int32_t) (i % 10);
    char dir[] = "/tmp/salus-prio-XXXXXX", url[128];
    if (!mkdtemp(dir))
        return 1;
    snprintf(url, sizeof url, "ipc://%s/salus.sock", dir);
    pid_t pid = bench_spawn((const char *[]){salusd, "--listen", url, "--memory-limit", "1G",
                                             "--log-level", "warn", NULL});
    salus_client *c = NULL;
    for (int i = 0; i < 500 && salus_connect(url, &c) != SALUS_OK; i++)
        usleep(10000);
    if (!c)
        return 1;
    phase a[32], b[32], cf[32], d[32];
    double a99[32], b99[32], c99[32], a50[32], b50[32], bl[32], dl[32];
    for (int r = 0; r < rounds; r++) {
        if (run_phase(c, url, "priority", true, false, seconds, period_us, &a[r]) ||
            run_phase(c, url, "priority", true, true, seconds, period_us, &b[r]) ||
            run_phase(c, url, "fair", true, true, seconds, period_us, &cf[r]) ||
            run_phase(c, url, "priority", false, true, seconds, period_us, &d[r])) {
            fprintf(stderr, "priority: phase failed: %s\n", salus_last_error(c));
            bench_stop(pid);
            return 1;
        }
        a99[r] = a[r].p99, b99[r] = b[r].p99, c99[r] = cf[r].p99;
        a50[r] = a[r].p50, b50[r] = b[r].p50, bl[r] = b[r].lp_ips, dl[r] = d[r].lp_ips;
        printf("round %d: hp alone p50 %.0f p99 %.0f us | with lp, priority p50 %.0f p99 %.0f us "
               "(lp %.0f it/s) | with lp, fair p50 %.0f p99 %.0f us | lp alone %.0f it/s\n",
               r, a[r].p50, a[r].p99, b[r].p50, b[r].p99, b[r].lp_ips, cf[r].p50, cf[r].p99,
               d[r].lp_ips);
        fflush(stdout);
    }
    salus_disconnect(c);
    bench_stop(pid);
    char path[256];
    snprintf(path, sizeof path, "%s/salus.sock", dir);
    unlink(path);
    rmdir(dir);
    size_t n = (size_t) rounds;
    double p99_inf = bench_median(b99, n) / bench_median(a99, n);
    double p50_inf = bench_median(b50, n) / bench_median(a50, n);
    double fair_inf = bench_median(c99, n) / bench_median(a99, n);
    double retained = bench_median(bl, n) / bench_median(dl, n);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"bench\":\"priority\",\"p99_inflation\":%.3f,\"p50_inflation\":%.3f,"
                    "\"lp_retained\":%.3f,\"fair_p99_inflation\":%.3f}\n",
                    p99_inf, p50_inf, retained, fair_inf);
            fclose(f);
        }
    }
    printf("BENCH priority p99_inflation=%.3f p50_inflation=%.3f lp_retained=%.3f "
           "fair_p99_inflation=%.3f\n",
           p99_inf, p50_inf, retained, fair_inf);
    return 0;
}
