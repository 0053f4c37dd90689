/* metrics_overhead: what observing salusd costs its tenants. Two salusd run
 * side by side: "off" as shipped, "on" with --metrics-listen scraped every
 * 200 ms by a thread here (as a Prometheus would, but 75 times as often as
 * its default) and a trace recording the whole time (salusctl trace; the
 * ring wraps). Rounds alternate off, on, off, on ...; in each, two client
 * threads train an MLP through one server for --seconds and count
 * iterations. Reported: the ratio of median throughputs (on / off; the
 * goal is >= 0.98) and each side's p50/p99 iteration round trip.
 *
 *   metrics_overhead --salusd PATH [--rounds 6] [--seconds 3] [--json FILE]
 *                    [--no-trace]   (metrics alone: what the trace costs apart) */
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
    char dir[64], url[128], port[16];
    pid_t pid;
    salus_client *c;
} server;

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *) &a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *) &a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static int server_start(server *s, const char *salusd, int observed)
{
    snprintf(s->dir, sizeof s->dir, "/tmp/salus-mo-XXXXXX");
    if (!mkdtemp(s->dir))
        return -1;
    snprintf(s->url, sizeof s->url, "ipc://%.63s/salus.sock", s->dir);
    const char *argv[16] = {salusd, "--listen",    s->url, "--memory-limit",
                            "1G",   "--log-level", "warn"};
    int n = 7;
    if (observed) {
        snprintf(s->port, sizeof s->port, "%d", free_port());
        argv[n++] = "--metrics-listen";
        argv[n++] = s->port;
    }
    argv[n] = NULL;
    s->pid = bench_spawn(argv);
    for (int i = 0; i < 500 && salus_connect(s->url, &s->c) != SALUS_OK; i++)
        usleep(10000);
    return s->c ? 0 : -1;
}

static void server_stop(server *s)
{
    if (s->c)
        salus_disconnect(s->c);
    bench_stop(s->pid);
    char path[256];
    snprintf(path, sizeof path, "%.63s/salus.sock", s->dir);
    unlink(path);
    snprintf(path, sizeof path, "%.63s/salus.sock.fd", s->dir);
    unlink(path);
    rmdir(s->dir);
}

/* ---- the scraper ---- */

static atomic_bool scraping;
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
    while (atomic_load(&scraping)) {
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

/* ---- the clients ---- */

typedef struct job {
    const char *url;
    double seconds;
    long iterations;
    double *lat; /* us */
    size_t n_lat;
    int rc;
} job;

static void *train(void *arg)
{
    job *j = arg;
    enum { B = 32, D = 64, C = 10, W = 256 };
    salus_client *c;
    salus_session *s;
    if ((j->rc = salus_connect(j->url, &c)))
        return NULL;
    salus_session_opts so = {.name = "bench"};
    int64_t dims[1] = {D};
    salus_model *m = salus_model_new(1, dims);
    salus_optimizer opt = {.kind = SALUS_SGD, .lr = 0.01f};
    if ((j->rc = salus_session_open(c, &so, &s)) || !m || salus_model_dense(m, W) ||
        salus_model_relu(m) || salus_model_dense(m, W) || salus_model_relu(m) ||
        salus_model_dense(m, C) || (j->rc = salus_model_compile(m, s, &opt, B, B, 7))) {
        j->rc = j->rc ? j->rc : SALUS_EINVAL;
        salus_disconnect(c);
        return NULL;
    }
    float x[B * D]; /* per thread: the two clients must share nothing */
    int32_t y[B];
    for (int i = 0; i < B * D; i++)
        x[i] = (float) (i % 17) / 17.0f - 0.5f;
    for (int i = 0; i < B; i++)
        y[i] = i % C;
    uint64_t end = bench_now_ns() + (uint64_t) (j->seconds * 1e9);
    while (bench_now_ns() < end) {
        uint64_t t0 = bench_now_ns();
        if ((j->rc = salus_model_train_step(m, x, y, NULL)))
            break;
        if (j->n_lat < MAX_LAT)
            j->lat[j->n_lat++] = (double) (bench_now_ns() - t0) / 1e3;
        j->iterations++;
    }
    salus_model_free(m);
    salus_session_close(s);
    salus_disconnect(c);
    return NULL;
}

typedef struct side {
    double its[MAX_ROUNDS]; /* iterations/s per round */
    double *lat;
    size_t n_lat;
} side;

static int round_on(const server *s, double seconds, side *out, int r)
{
    job jobs[CLIENTS];
    pthread_t th[CLIENTS];
    for (int k = 0; k < CLIENTS; k++) {
        jobs[k] = (job){.url = s->url, .seconds = seconds, .lat = malloc(MAX_LAT * sizeof(double))};
        if (!jobs[k].lat)
            return -1;
    }
    uint64_t t0 = bench_now_ns();
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
    out->its[r] = (double) total / ((double) (bench_now_ns() - t0) / 1e9);
    return rc ? -1 : 0;
}

int main(int argc, char **argv)
{
    const char *salusd = NULL, *json = NULL;
    int rounds = 6, trace_on = 1;
    double seconds = 3;
    static const struct option lo[] = {{"salusd", 1, NULL, 's'},   {"rounds", 1, NULL, 'r'},
                                       {"seconds", 1, NULL, 't'},  {"json", 1, NULL, 'j'},
                                       {"no-trace", 0, NULL, 'n'}, {0}};
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
        else
            return 2;
    }
    if (!salusd || rounds < 5 || rounds > MAX_ROUNDS || !(seconds > 0)) {
        fprintf(stderr, "usage: metrics_overhead --salusd PATH [--rounds 5..32] [--seconds S] "
                        "[--json FILE]\n");
        return 2;
    }
    server off = {0}, on = {0};
    if (server_start(&off, salusd, 0) || server_start(&on, salusd, 1)) {
        fprintf(stderr, "metrics_overhead: cannot start salusd\n");
        server_stop(&off);
        server_stop(&on);
        return 1;
    }
    int port = atoi(on.port), rc = 0;
    if (trace_on && salus_trace_start(on.c) != SALUS_OK) {
        fprintf(stderr, "metrics_overhead: cannot start the trace: %s\n", salus_last_error(on.c));
        rc = 1;
    }
    atomic_store(&scraping, true);
    pthread_t sc;
    pthread_create(&sc, NULL, scraper, &port);
    static side a, b; /* off, on */
    a.lat = malloc((size_t) MAX_ROUNDS * MAX_LAT / 8 * sizeof(double));
    b.lat = malloc((size_t) MAX_ROUNDS * MAX_LAT / 8 * sizeof(double));
    for (int r = 0; r < rounds && !rc && a.lat && b.lat; r++) {
        rc |= round_on(&off, seconds, &a, r);
        rc |= round_on(&on, seconds, &b, r);
        fprintf(stderr, "round %d/%d: off %.0f it/s, on %.0f it/s\n", r + 1, rounds, a.its[r],
                b.its[r]);
    }
    atomic_store(&scraping, false);
    pthread_join(sc, NULL);
    char *trace = NULL;
    size_t events = 0;
    if (!rc && trace_on && salus_trace_stop_json(on.c, &trace, &events) != SALUS_OK)
        rc = 1;
    salus_free(trace);
    server_stop(&off);
    server_stop(&on);
    if (rc || !a.lat || !b.lat || !atomic_load(&scrapes)) {
        fprintf(stderr, "metrics_overhead: a round failed (scrapes %lu, failures %lu)\n",
                atomic_load(&scrapes), atomic_load(&scrape_failures));
        return 1;
    }
    double ratios[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
        ratios[r] = b.its[r] / a.its[r];
    double ma = bench_median(a.its, (size_t) rounds), mb = bench_median(b.its, (size_t) rounds);
    double ratio = mb / ma;
    double a50 = bench_median(a.lat, a.n_lat), a99 = bench_percentile(a.lat, a.n_lat, 99);
    double b50 = bench_median(b.lat, b.n_lat), b99 = bench_percentile(b.lat, b.n_lat, 99);
    printf("off: median %.0f it/s, iteration p50 %.1f us p99 %.1f us\n", ma, a50, a99);
    printf("on:  median %.0f it/s, iteration p50 %.1f us p99 %.1f us; %lu scrapes of %lu bytes "
           "on average, %zu trace events at the end\n",
           mb, b50, b99, atomic_load(&scrapes), atomic_load(&scrape_bytes) / atomic_load(&scrapes),
           events);
    printf("per-round ratios: min %.3f median %.3f max %.3f\n",
           bench_percentile(ratios, (size_t) rounds, 0), bench_median(ratios, (size_t) rounds),
           bench_percentile(ratios, (size_t) rounds, 100));
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"bench\":\"metrics_overhead\",\"rounds\":%d,\"seconds\":%g,\"clients\":%d,"
                    "\"ratio\":%.4f,\"off_its\":%.1f,\"on_its\":%.1f,\"off_p50_us\":%.1f,"
                    "\"off_p99_us\":%.1f,\"on_p50_us\":%.1f,\"on_p99_us\":%.1f,\"scrapes\":%lu,"
                    "\"ratios\":[",
                    rounds, seconds, CLIENTS, ratio, ma, mb, a50, a99, b50, b99,
                    atomic_load(&scrapes));
            for (int r = 0; r < rounds; r++)
                fprintf(f, "%s%.4f", r ? "," : "", ratios[r]);
            fprintf(f, "]}\n");
            fclose(f);
        }
    }
    printf("BENCH metrics_overhead ratio=%.3f off_its=%.0f on_its=%.0f off_p99_us=%.1f "
           "on_p99_us=%.1f rounds=%d scrapes=%lu trace=%s\n",
           ratio, ma, mb, a99, b99, rounds, atomic_load(&scrapes), trace_on ? "on" : "off");
    free(a.lat);
    free(b.lat);
    return 0;
}
