/* Small helpers shared by the benchmarks: clocks, percentiles, CPU pinning,
 * child processes. Header-only; benchmarks are separate programs. */
#ifndef SL_BENCH_UTIL_H
#define SL_BENCH_UTIL_H

#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

/* p-th percentile (0..100) of v[0..n); sorts a copy. */
static inline double bench_percentile(const double *v, size_t n, double p)
{
    double *c = malloc(n * sizeof *c);
    if (!c || !n) {
        free(c);
        return 0;
    }
    memcpy(c, v, n * sizeof *c);
    qsort(c, n, sizeof *c, bench_cmp_double);
    size_t i = (size_t) (p / 100.0 * (double) (n - 1) + 0.5);
    double r = c[i < n ? i : n - 1];
    free(c);
    return r;
}

static inline double bench_median(const double *v, size_t n)
{
    return bench_percentile(v, n, 50);
}

/* Writes ,"name":[v0,v1,...] into a JSON object, each value with fmt. */
static inline void bench_json_array(FILE *f, const char *name, const double *v, int n,
                                    const char *fmt)
{
    fprintf(f, ",\"%s\":[", name);
    for (int i = 0; i < n; i++) {
        if (i)
            fputc(',', f);
        fprintf(f, fmt, v[i]);
    }
    fputc(']', f);
}

/* Pins the calling process (and the children it forks later) to CPU 0. */
static inline void bench_pin_cpu0(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        perror("sched_setaffinity");
}

/* fork + exec argv (NULL-terminated); exits on failure. A salusd is given
 * --allow-root when run as root, and --device $SALUS_BENCH_DEVICE when that
 * is set (every benchmark that starts salusd then runs on that device, e.g.
 * SALUS_BENCH_DEVICE=cuda). */
static inline pid_t bench_spawn(const char *const *argv)
{
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        const char *more[64];
        size_t n = 0, len = strlen(argv[0]);
        if (len >= 6 && strcmp(argv[0] + len - 6, "salusd") == 0) {
            const char *device = getenv("SALUS_BENCH_DEVICE");
            for (; argv[n] && n < 60; n++)
                more[n] = argv[n];
            if (geteuid() == 0) /* salusd refuses to run as root unless told it may */
                more[n++] = "--allow-root";
            if (device && *device) {
                more[n++] = "--device";
                more[n++] = device;
            }
            more[n] = NULL;
            argv = more;
        }
        execv(argv[0], (char *const *) argv);
        perror(argv[0]);
        _exit(127);
    }
    return pid;
}

/* SIGTERM and reap. */
static inline void bench_stop(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    (void) waitpid(pid, NULL, 0);
}

#endif
