/* What only the benchmarks share (the rest is sl_testsupport.h: clocks,
 * percentiles, salusd): JSON arrays, CPU pinning, and the device their
 * salusd runs on. Header-only; benchmarks are separate programs. */
#ifndef SL_BENCH_UTIL_H
#define SL_BENCH_UTIL_H

#include "sl_testsupport.h"

#include "sl_error.h"

#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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
/* OpenBLAS's kernels for whoever loads it from here on (salusd with
 * SALUS_CPU_GEMM=openblas, PyTorch peers): unless OPENBLAS_CORETYPE is set,
 * chosen from /proc/cpuinfo's flags, as bench/openblas_core.py does for
 * Python peers. OpenBLAS picks by the processor's model, and a VM that
 * hides it gets Prescott's SSE3 kernels, about 3x slower on an MLP's GEMMs
 * than the AVX-512 ones. Returns the core type in force ("" for OpenBLAS's
 * own choice). */
static inline const char *bench_openblas_coretype(void)
{
    const char *set = getenv("OPENBLAS_CORETYPE");
    if (set)
        return set;
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192];
    bool avx512 = false, avx2 = false;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0) {
            avx512 = strstr(line, " avx512f") && strstr(line, " avx512cd") &&
                     strstr(line, " avx512bw") && strstr(line, " avx512dq") &&
                     strstr(line, " avx512vl");
            avx2 = strstr(line, " avx2") && strstr(line, " fma");
            break;
        }
    if (f)
        fclose(f);
    if (avx512 || avx2)
        setenv("OPENBLAS_CORETYPE", avx512 ? "SkylakeX" : "Haswell", 1);
    return avx512 ? "SkylakeX" : avx2 ? "Haswell" : "";
}

static inline void bench_pin_cpu0(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        perror("sched_setaffinity");
}

/* A peer process spoken to over pipes (the PyTorch side of a comparison):
 * its stdin is in, its stdout out. */
typedef struct bench_peer {
    pid_t pid;
    FILE *in, *out;
} bench_peer;

/* Starts argv (NULL-terminated; argv[0] searched in PATH) as a peer. 0, or
 * -1 when the pipes or the process cannot be made. */
static inline int bench_peer_start(bench_peer *p, const char *const *argv)
{
    int to[2], from[2];
    if (pipe(to))
        return -1;
    if (pipe(from)) {
        close(to[0]), close(to[1]);
        return -1;
    }
    if ((p->pid = fork()) < 0)
        return -1;
    if (p->pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        close(to[0]), close(to[1]), close(from[0]), close(from[1]);
        execvp(argv[0], (char *const *) argv);
        perror(argv[0]);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    p->in = fdopen(to[1], "w");
    p->out = fdopen(from[0], "r");
    return p->in && p->out ? 0 : -1;
}

/* Asks the peer to quit, closes its pipes and reaps it. */
static inline void bench_peer_stop(bench_peer *p)
{
    if (p->in) {
        fprintf(p->in, "quit\n");
        fclose(p->in);
    }
    if (p->out)
        fclose(p->out);
    if (p->pid > 0)
        (void) waitpid(p->pid, NULL, 0);
    memset(p, 0, sizeof *p);
}

/* The device every salusd a benchmark starts runs on: --device
 * $SALUS_BENCH_DEVICE when that is set (e.g. SALUS_BENCH_DEVICE=cuda), the
 * salusd default otherwise; and --memory-limit $SALUS_BENCH_MEMORY when
 * that is set (salusd takes its whole limit from the device at start,
 * by default nearly all of it: a PyTorch beside it on the same GPU needs
 * the rest). Writes the arguments into more (4 slots) and returns how
 * many. */
static inline int bench_device_args(const char **more)
{
    const char *device = getenv("SALUS_BENCH_DEVICE"), *memory = getenv("SALUS_BENCH_MEMORY");
    int n = 0;
    if (device && *device) {
        more[n++] = "--device";
        more[n++] = device;
    }
    if (memory && *memory) {
        more[n++] = "--memory-limit";
        more[n++] = memory;
    }
    return n;
}

/* fork + exec argv (NULL-terminated, up to 58); exits on failure. A salusd
 * gets the bench device (bench_device_args) and --allow-root as root. */
static inline pid_t bench_spawn(const char *const *argv)
{
    size_t len = strlen(argv[0]);
    pid_t pid;
    int rc;
    if (len >= 6 && strcmp(argv[0] + len - 6, "salusd") == 0) {
        const char *args[64];
        size_t n = 0;
        for (; argv[n + 1] && n < 58; n++)
            args[n] = argv[n + 1];
        n += (size_t) bench_device_args(args + n);
        args[n] = NULL;
        sl_ts_salusd s = {0};
        rc = sl_ts_salusd_spawn(&s, argv[0], args, false);
        pid = s.pid;
    } else {
        rc = sl_ts_spawn(argv, NULL, &pid);
    }
    if (rc != SL_OK) {
        fprintf(stderr, "cannot start %s\n", argv[0]);
        exit(1);
    }
    return pid;
}

/* Starts salusd (path) in a private folder ("salus-<tag>-XXXXXX"),
 * listening on s->url, with args (NULL-terminated) and the bench device, and
 * returns at once: a program that forks more children does so before its
 * first NNG call, then waits with bench_salusd_ready. Exits on failure. */
static inline void bench_salusd_spawn(sl_ts_salusd *s, const char *path, const char *tag,
                                      const char *const *args)
{
    const char *all[64] = {"--listen"};
    size_t n = 2;
    for (; args && args[n - 2] && n < 58; n++)
        all[n] = args[n - 2];
    n += (size_t) bench_device_args(all + n);
    all[n] = NULL;
    if (sl_ts_salusd_prepare(s, tag) != SL_OK) {
        fprintf(stderr, "cannot make a folder for salusd\n");
        exit(1);
    }
    all[1] = s->url;
    if (sl_ts_salusd_spawn(s, path, all, false) != SL_OK) {
        fprintf(stderr, "cannot start %s\n", path);
        exit(1);
    }
}

/* Waits up to 10 s for a salusd from bench_salusd_spawn to answer; on
 * failure stops it, removes its folder and exits. */
static inline void bench_salusd_ready(sl_ts_salusd *s)
{
    if (sl_ts_salusd_wait_ready(s, s->url, 10) != SL_OK) {
        fprintf(stderr, "salusd did not answer on %s within 10 s\n", s->url);
        sl_ts_salusd_cleanup(s);
        exit(1);
    }
}

/* bench_salusd_spawn, then bench_salusd_ready. */
static inline void bench_salusd_start(sl_ts_salusd *s, const char *path, const char *tag,
                                      const char *const *args)
{
    bench_salusd_spawn(s, path, tag, args);
    bench_salusd_ready(s);
}

/* Stops a salusd from bench_salusd_start (SIGTERM, reaped) and removes its
 * folder. */
static inline void bench_salusd_stop(sl_ts_salusd *s)
{
    (void) sl_ts_salusd_stop(s, -1);
    sl_ts_tempdir_remove(s->dir);
}

/* SIGTERM and reap. */
static inline void bench_stop(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    (void) sl_ts_wait(pid, -1);
}

#endif
