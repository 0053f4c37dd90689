/* bench/idle: salusd with 10 idle sessions (each with tensors and a
 * registered graph) for 10 s; its CPU use from /proc (user + system time)
 * against the wall time. Goal: < 1 % of one core (no busy waiting).
 *   idle --salusd PATH [--seconds 10] [--sessions 10] [--json FILE]
 * Last line: BENCH idle cpu_pct=... seconds=... sessions=... */
#include "bench_util.h"

#include <salus/salus.h>

#include <getopt.h>
#include <stdbool.h>

/* utime + stime of pid in clock ticks. */
static long long cpu_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the name may contain spaces */
    long long utime, stime;
    if (!p ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &utime, &stime) != 2)
        return -1;
    return utime + stime;
}

int main(int argc, char **argv)
{
    const char *salusd = NULL, *json = NULL;
    int seconds = 10, n_sessions = 10;
    bool help = false;
    static const struct option lo[] = {{"salusd", 1, NULL, 's'},   {"seconds", 1, NULL, 't'},
                                       {"sessions", 1, NULL, 'n'}, {"json", 1, NULL, 'j'},
                                       {"help", 0, NULL, 'h'},     {0}};
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        if (c == 's')
            salusd = optarg;
        else if (c == 't')
            seconds = atoi(optarg);
        else if (c == 'n')
            n_sessions = atoi(optarg);
        else if (c == 'j')
            json = optarg;
        else if (c == 'h')
            help = true;
        else
            return 2;
    }
    if (help || !salusd || seconds < 1 || n_sessions < 1 || n_sessions > 64) {
        fprintf(stderr, "usage: idle --salusd PATH [--seconds N] [--sessions N] [--json FILE]\n"
                        "The CPU time a salusd holding --sessions idle sessions (default 10)\n"
                        "spends over --seconds (default 10).\n");
        return help ? 0 : 2;
    }
    sl_ts_salusd srv;
    bench_salusd_start(&srv, salusd, "idle",
                       (const char *[]){"--memory-limit", "512M", "--log-level", "warn", NULL});
    pid_t pid = srv.pid;
    salus_client *c = NULL;
    if (salus_connect(srv.url, &c) != SALUS_OK) {
        bench_salusd_stop(&srv);
        return 1;
    }
    salus_session *s[64];
    salus_graph *g[64];
    for (int i = 0; i < n_sessions; i++) {
        uint64_t t;
        const int64_t d[] = {256, 256};
        g[i] = salus_graph_new();
        if (salus_session_open(c, NULL, &s[i]) ||
            salus_tensor_create(s[i], SALUS_F32, 2, d, NULL, &t))
            return 1;
        salus_value x = salus_graph_input(g[i], SALUS_F32, 2, d);
        salus_value w = salus_graph_param(g[i], t, SALUS_F32, 2, d);
        salus_value y = salus_graph_op(g[i], "matmul", 2, (salus_value[]){x, w}, 0, NULL, 0, NULL);
        (void) y;
        if (salus_graph_register(s[i], g[i], NULL))
            return 1;
    }
    sleep(1); /* let start-up work settle */
    long long t0 = cpu_ticks(pid);
    uint64_t w0 = sl_ts_now_ns();
    sleep((unsigned) seconds);
    long long t1 = cpu_ticks(pid);
    double wall = (double) (sl_ts_now_ns() - w0) / 1e9;
    double cpu = (double) (t1 - t0) / (double) sysconf(_SC_CLK_TCK);
    double pct = 100.0 * cpu / wall;
    for (int i = 0; i < n_sessions; i++) {
        salus_graph_free(g[i]);
        (void) salus_session_close(s[i]);
    }
    salus_disconnect(c);
    bench_salusd_stop(&srv);
    printf("salusd with %d idle sessions: %.3f s of CPU over %.1f s\n", n_sessions, cpu, wall);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f, "{\"bench\":\"idle\",\"cpu_pct\":%.3f,\"seconds\":%.1f,\"sessions\":%d}\n",
                    pct, wall, n_sessions);
            fclose(f);
        }
    }
    printf("BENCH idle cpu_pct=%.3f seconds=%.1f sessions=%d\n", pct, wall, n_sessions);
    return 0;
}
