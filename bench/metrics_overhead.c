/* metrics_overhead: what observing salusd costs its tenants. Two salusd run
 * side by side: "off" as shipped, "on" with --metrics-listen scraped every
 * 200 ms by a thread here (as a Prometheus would, but 75 times as often as
 * its default) and a trace recording the whole time (salusctl trace; the
 * ring wraps). Rounds alternate off, on, off, on ...; in each, two client
 * threads train an MLP through one server for --seconds and count
 * iterations; all clients set up before any iterates and stop before any
 * tears down, so only iterating is timed. The scraper runs during the "on"
 * rounds only, so the off side never pays for rendering metrics it does not
 * serve. Reported: the
 * ratio of median throughputs (on / off; the goal is >= 0.98), the median
 * of the paired per-round ratios, each side's p50/p99 iteration round trip,
 * and each side's CPU time per iteration (the server's, from /proc, plus
 * this process's: clients and scraper), with salusd's part apart: what
 * observing costs in work rather than in time. On a quiet machine it is
 * the steadier figure; on a loaded one both drift with the other load
 * (the clients' part most), so read them paired, round by round.
 *
 *   metrics_overhead --salusd PATH [--rounds 10] [--seconds 3] [--json FILE]
 *                    [--no-trace]    (metrics alone: what the trace costs apart)
 *                    [--no-metrics]  (the trace alone)
 *                    [--control]     (neither: both sides as shipped, the
 *                                     bench's own noise and bias)
 *                    [--one-server]  (both sides on one salusd, --metrics-listen
 *                                     when metrics are on; its off rounds are
 *                                     neither scraped nor traced, a trace runs
 *                                     through each on round: the cost of
 *                                     observing apart from any difference
 *                                     between two processes) */
#include "bench_util.h"
#include "salus/salus.h"

#include <arpa/inet.h>
#include <getopt.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>

#define CLIENTS 2
#define MAX_ROUNDS 32
#define MAX_LAT (1 << 20)

typedef struct server {
    sl_ts_salusd srv;
    char port[16];
    salus_client *c;
} server;

static int server_start(server *s, const char *salusd, int observed)
{
    const char *args[8] = {"--memory-limit", "1G", "--log-level", "warn"};
    int n = 4;
    if (observed) {
        snprintf(s->port, sizeof s->port, "%d", sl_ts_free_port());
        args[n++] = "--metrics-listen";
        args[n++] = s->port;
    }
    args[n] = NULL;
    bench_salusd_start(&s->srv, salusd, "mo", args);
    s->c = NULL;
    return salus_connect(s->srv.url, &s->c) == SALUS_OK ? 0 : -1;
}

static void server_stop(server *s)
{
    if (s->c)
        salus_disconnect(s->c);
    bench_salusd_stop(&s->srv);
}

/* ---- the scraper ---- */

/* The scraper thread runs while scraping and scrapes while scrape_now (the
 * "on" rounds); between those it sleeps on the condition, costing the off
 * rounds nothing. */
static pthread_mutex_t scrape_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t scrape_cv = PTHREAD_COND_INITIALIZER;
static bool scraping, scrape_now;

static void scrape_set(bool *flag, bool value)
{
    pthread_mutex_lock(&scrape_lock);
    *flag = value;
    pthread_cond_broadcast(&scrape_cv);
    pthread_mutex_unlock(&scrape_lock);
}

/* Waits until the thread should scrape (true) or stop (false). */
static bool scrape_wait(void)
{
    pthread_mutex_lock(&scrape_lock);
    while (scraping && !scrape_now)
        pthread_cond_wait(&scrape_cv, &scrape_lock);
    bool go = scraping;
    pthread_mutex_unlock(&scrape_lock);
    return go;
}
static atomic_ulong scrapes, scrape_bytes, scrape_failures;

static long scrape(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t) port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *) &a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    static const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    long total = 0;
    if (write(fd, req, sizeof req - 1) == (ssize_t) sizeof req - 1) {
        char buf[65536];
        ssize_t got;
        while ((got = read(fd, buf, sizeof buf)) > 0)
            total += got;
    }
    close(fd);
    return total;
}

static void *scraper(void *arg)
{
    int port = *(int *) arg;
    while (scrape_wait()) {
        long n = scrape(port);
        if (n > 0) {
            atomic_fetch_add(&scrapes, 1);
            atomic_fetch_add(&scrape_bytes, (unsigned long) n);
        } else {
            atomic_fetch_add(&scrape_failures, 1);
        }
        usleep(200 * 1000);
    }
    return NULL;
}

/* ---- CPU time ---- */

/* CPU time pid has used, in ns (user + system, its threads that exited
 * included), from /proc/PID/stat; 0 if unreadable. */
static uint64_t proc_cpu_ns(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long ut = 0, st = 0;
    /* after ")": state ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime stime */
    if (!p ||
        sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0;
    long hz = sysconf(_SC_CLK_TCK);
    return (ut + st) * (1000000000ull / (uint64_t) (hz > 0 ? hz : 100));
}

/* ---- the clients ---- */

/* What the clients of one round share: they all set up (connect, open a
 * session, compile) before any iterates, and all stop iterating before any
 * tears down, so a round times iterations alone and both sides the same
 * way. The window's CPU time is read at its two ends. */
typedef struct round_sync {
    pthread_barrier_t ready, stopped;
    pid_t server;
    uint64_t t0, t1, cpu0, cpu1, srv0, srv1; /* cpu: server + this process; srv: server */
} round_sync;

typedef struct job {
    const char *url;
    double seconds;
    round_sync *rs;
    long iterations;
    double *lat; /* us */
    size_t n_lat;
    int rc;
} job;

/* Every client calls this once before iterating (ok or not, so none waits
 * for a client that failed) and once after; the last to arrive reads the
 * clocks. */
static void round_mark(round_sync *rs, bool start)
{
    pthread_barrier_t *b = start ? &rs->ready : &rs->stopped;
    if (pthread_barrier_wait(b) == PTHREAD_BARRIER_SERIAL_THREAD) {
        uint64_t srv = proc_cpu_ns(rs->server);
        *(start ? &rs->srv0 : &rs->srv1) = srv;
        *(start ? &rs->cpu0 : &rs->cpu1) = srv + sl_ts_cpu_ns();
        *(start ? &rs->t0 : &rs->t1) = sl_ts_now_ns();
    }
    (void) pthread_barrier_wait(b); /* the clocks are read before anyone goes on */
}

static void *train(void *arg)
{
    job *j = arg;
    enum { B = 32, D = 64, C = 10, W = 256 };
    salus_client *c;
    salus_session *s;
    if ((j->rc = salus_connect(j->url, &c))) {
        round_mark(j->rs, true);
        round_mark(j->rs, false);
        return NULL;
    }
    salus_session_opts so = {.name = "bench"};
    int64_t dims[1] = {D};
    salus_model *m = salus_model_new(1, dims);
    salus_optimizer opt = {.kind = SALUS_SGD, .lr = 0.01f};
    if ((j->rc = salus_session_open(c, &so, &s)) || !m || salus_model_dense(m, W) ||
        salus_model_relu(m) || salus_model_dense(m, W) || salus_model_relu(m) ||
        salus_model_dense(m, C) || (j->rc = salus_model_compile(m, s, &opt, B, B, 7))) {
        j->rc = j->rc ? j->rc : SALUS_EINVAL;
        round_mark(j->rs, true);
        round_mark(j->rs, false);
        salus_disconnect(c);
        return NULL;
    }
    float x[B * D]; /* per thread: the two clients must share nothing */
    int32_t y[B];
    for (int i = 0; i < B * D; i++)
        x[i] = (float) (i % 17) / 17.0f - 0.5f;
    for (int i = 0; i < B; i++)
        y[i] = i % C;
    round_mark(j->rs, true);
    uint64_t end = j->rs->t0 + (uint64_t) (j->seconds * 1e9);
    while (sl_ts_now_ns() < end) {
        uint64_t t0 = sl_ts_now_ns();
        if ((j->rc = salus_model_train_step(m, x, y, NULL)))
            break;
        if (j->n_lat < MAX_LAT)
            j->lat[j->n_lat++] = (double) (sl_ts_now_ns() - t0) / 1e3;
        j->iterations++;
    }
    round_mark(j->rs, false);
    salus_model_free(m);
    salus_session_close(s);
    salus_disconnect(c);
    return NULL;
}

typedef struct side {
    double its[MAX_ROUNDS];    /* iterations/s per round */
    double cpu_us[MAX_ROUNDS]; /* CPU time per iteration, server + clients + scraper */
    double srv_us[MAX_ROUNDS]; /* the server's part */
    double *lat;
    size_t n_lat;
} side;

static int round_on(const server *s, double seconds, side *out, int r, bool scrape_it)
{
    round_sync rs = {.server = s->srv.pid};
    pthread_barrier_init(&rs.ready, NULL, CLIENTS);
    pthread_barrier_init(&rs.stopped, NULL, CLIENTS);
    scrape_set(&scrape_now, scrape_it);
    job jobs[CLIENTS];
    pthread_t th[CLIENTS];
    for (int k = 0; k < CLIENTS; k++) {
        jobs[k] = (job){.url = s->srv.url,
                        .seconds = seconds,
                        .rs = &rs,
                        .lat = malloc(MAX_LAT * sizeof(double))};
        if (!jobs[k].lat)
            exit(1);
    }
    for (int k = 0; k < CLIENTS; k++)
        pthread_create(&th[k], NULL, train, &jobs[k]);
    long total = 0;
    int rc = 0;
    for (int k = 0; k < CLIENTS; k++) {
        pthread_join(th[k], NULL);
        total += jobs[k].iterations;
        rc |= jobs[k].rc;
        for (size_t i = 0; i < jobs[k].n_lat && out->n_lat < (size_t) MAX_ROUNDS * MAX_LAT / 8; i++)
            out->lat[out->n_lat++] = jobs[k].lat[i];
        free(jobs[k].lat);
    }
    scrape_set(&scrape_now, false);
    pthread_barrier_destroy(&rs.ready);
    pthread_barrier_destroy(&rs.stopped);
    out->its[r] = rs.t1 > rs.t0 ? (double) total / ((double) (rs.t1 - rs.t0) / 1e9) : 0;
    out->cpu_us[r] = total > 0 ? (double) (rs.cpu1 - rs.cpu0) / 1e3 / (double) total : 0;
    out->srv_us[r] = total > 0 ? (double) (rs.srv1 - rs.srv0) / 1e3 / (double) total : 0;
    return rc ? -1 : 0;
}

int main(int argc, char **argv)
{
    const char *salusd = NULL, *json = NULL;
    int rounds = 10, trace_on = 1, metrics_on = 1, one_server = 0;
    double seconds = 3;
    static const struct option lo[] = {
        {"salusd", 1, NULL, 's'},  {"rounds", 1, NULL, 'r'},     {"seconds", 1, NULL, 't'},
        {"json", 1, NULL, 'j'},    {"no-trace", 0, NULL, 'n'},   {"no-metrics", 0, NULL, 'm'},
        {"control", 0, NULL, 'c'}, {"one-server", 0, NULL, 'o'}, {0}};
    int o;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (o == 's')
            salusd = optarg;
        else if (o == 'r')
            rounds = atoi(optarg);
        else if (o == 't')
            seconds = atof(optarg);
        else if (o == 'j')
            json = optarg;
        else if (o == 'n')
            trace_on = 0;
        else if (o == 'm')
            metrics_on = 0;
        else if (o == 'c')
            trace_on = metrics_on = 0;
        else if (o == 'o')
            one_server = 1;
        else
            return 2;
    }
    if (!salusd || rounds < 5 || rounds > MAX_ROUNDS || !(seconds > 0)) {
        fprintf(stderr, "usage: metrics_overhead --salusd PATH [--rounds 5..32] [--seconds S] "
                        "[--json FILE] [--no-trace] [--no-metrics] [--control] [--one-server]\n");
        return 2;
    }
    server off_s = {0}, on = {0};
    server *off = one_server ? &on : &off_s;
    if ((!one_server && server_start(off, salusd, 0)) || server_start(&on, salusd, metrics_on)) {
        fprintf(stderr, "metrics_overhead: cannot start salusd\n");
        server_stop(&off_s);
        server_stop(&on);
        return 1;
    }
    int port = atoi(on.port), rc = 0;
    if (!one_server && trace_on && salus_trace_start(on.c) != SALUS_OK) {
        fprintf(stderr, "metrics_overhead: cannot start the trace: %s\n", salus_last_error(on.c));
        rc = 1;
    }
    scrape_set(&scraping, true);
    pthread_t sc;
    if (metrics_on)
        pthread_create(&sc, NULL, scraper, &port);
    size_t events = 0; /* in the last trace */
    static side a, b;  /* off, on */
    a.lat = malloc((size_t) MAX_ROUNDS * MAX_LAT / 8 * sizeof(double));
    b.lat = malloc((size_t) MAX_ROUNDS * MAX_LAT / 8 * sizeof(double));
    for (int r = 0; r < rounds && !rc && a.lat && b.lat; r++) {
        rc |= round_on(off, seconds, &a, r, false);
        if (one_server && trace_on && salus_trace_start(on.c) != SALUS_OK)
            rc = 1;
        rc |= round_on(&on, seconds, &b, r, metrics_on);
        if (one_server && trace_on && !rc) {
            char *t = NULL;
            rc |= salus_trace_stop_json(on.c, &t, &events) != SALUS_OK;
            salus_free(t);
        }
        fprintf(stderr, "round %d/%d: off %.0f it/s %.1f us CPU/it, on %.0f it/s %.1f us CPU/it\n",
                r + 1, rounds, a.its[r], a.cpu_us[r], b.its[r], b.cpu_us[r]);
        fprintf(stderr, "          server CPU/it: off %.1f us, on %.1f us\n", a.srv_us[r],
                b.srv_us[r]);
    }
    scrape_set(&scraping, false);
    if (metrics_on)
        pthread_join(sc, NULL);
    char *trace = NULL;
    if (!rc && !one_server && trace_on && salus_trace_stop_json(on.c, &trace, &events) != SALUS_OK)
        rc = 1;
    salus_free(trace);
    server_stop(&off_s);
    server_stop(&on);
    if (rc || !a.lat || !b.lat || (metrics_on && !atomic_load(&scrapes)) || (trace_on && !events)) {
        fprintf(stderr,
                "metrics_overhead: a round failed (scrapes %lu, failures %lu, trace events %zu)\n",
                atomic_load(&scrapes), atomic_load(&scrape_failures), events);
        return 1;
    }
    double ratios[MAX_ROUNDS], cpu_ratios[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        ratios[r] = b.its[r] / a.its[r];
        cpu_ratios[r] = a.cpu_us[r] > 0 ? b.cpu_us[r] / a.cpu_us[r] : 0;
    }
    double cpu_med = sl_ts_median(cpu_ratios, (size_t) rounds);
    double srv_ratios[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
        srv_ratios[r] = a.srv_us[r] > 0 ? b.srv_us[r] / a.srv_us[r] : 0;
    double srv_med = sl_ts_median(srv_ratios, (size_t) rounds);
    double ma = sl_ts_median(a.its, (size_t) rounds), mb = sl_ts_median(b.its, (size_t) rounds);
    double ratio = mb / ma;
    double a50 = sl_ts_median(a.lat, a.n_lat), a99 = sl_ts_percentile(a.lat, a.n_lat, 99);
    double b50 = sl_ts_median(b.lat, b.n_lat), b99 = sl_ts_percentile(b.lat, b.n_lat, 99);
    double ca = sl_ts_median(a.cpu_us, (size_t) rounds),
           cb = sl_ts_median(b.cpu_us, (size_t) rounds);
    double ratio_med = sl_ts_median(ratios, (size_t) rounds);
    unsigned long n_scrapes = atomic_load(&scrapes);
    printf("off: median %.0f it/s, iteration p50 %.1f us p99 %.1f us, %.1f us CPU/it\n", ma, a50,
           a99, ca);
    printf("on:  median %.0f it/s, iteration p50 %.1f us p99 %.1f us, %.1f us CPU/it; %lu scrapes "
           "of %lu bytes on average, %zu trace events at the end\n",
           mb, b50, b99, cb, n_scrapes, n_scrapes ? atomic_load(&scrape_bytes) / n_scrapes : 0,
           events);
    printf("per-round ratios: min %.3f median %.3f max %.3f; CPU per iteration on/off %.3f "
           "(paired per round: median %.3f; salusd's alone: median %.3f)\n",
           sl_ts_percentile(ratios, (size_t) rounds, 0), ratio_med,
           sl_ts_percentile(ratios, (size_t) rounds, 100), ca > 0 ? cb / ca : 0, cpu_med, srv_med);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"bench\":\"metrics_overhead\",\"rounds\":%d,\"seconds\":%g,\"clients\":%d,"
                    "\"ratio\":%.4f,\"off_its\":%.1f,\"on_its\":%.1f,\"off_p50_us\":%.1f,"
                    "\"off_p99_us\":%.1f,\"on_p50_us\":%.1f,\"on_p99_us\":%.1f,\"scrapes\":%lu,"
                    "\"ratio_paired_median\":%.4f,\"off_cpu_us_per_it\":%.2f,"
                    "\"on_cpu_us_per_it\":%.2f,\"metrics\":%s,\"trace\":%s",
                    rounds, seconds, CLIENTS, ratio, ma, mb, a50, a99, b50, b99, n_scrapes,
                    ratio_med, ca, cb, metrics_on ? "true" : "false", trace_on ? "true" : "false");
            bench_json_array(f, "ratios", ratios, rounds, "%.4f");
            bench_json_array(f, "off_its_rounds", a.its, rounds, "%.1f");
            bench_json_array(f, "on_its_rounds", b.its, rounds, "%.1f");
            bench_json_array(f, "off_cpu_us_rounds", a.cpu_us, rounds, "%.2f");
            bench_json_array(f, "on_cpu_us_rounds", b.cpu_us, rounds, "%.2f");
            bench_json_array(f, "off_server_cpu_us_rounds", a.srv_us, rounds, "%.2f");
            bench_json_array(f, "on_server_cpu_us_rounds", b.srv_us, rounds, "%.2f");
            fprintf(f, "}\n");
            fclose(f);
        }
    }
    printf("BENCH metrics_overhead ratio=%.3f off_its=%.0f on_its=%.0f off_p99_us=%.1f "
           "on_p99_us=%.1f ratio_paired_median=%.3f cpu_ratio=%.3f cpu_ratio_paired_median=%.3f "
           "salusd_cpu_ratio_paired_median=%.3f rounds=%d scrapes=%lu metrics=%s trace=%s%s\n",
           ratio, ma, mb, a99, b99, ratio_med, ca > 0 ? cb / ca : 0, cpu_med, srv_med, rounds,
           n_scrapes, metrics_on ? "on" : "off", trace_on ? "on" : "off",
           one_server ? " one_server=1" : "");
    free(a.lat);
    free(b.lat);
    return 0;
}
