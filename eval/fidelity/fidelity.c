/* eval/fidelity: the simulator against the real thing. One scaled-down
 * training trace is replayed twice per policy:
 *   real: a real salusd --device sim:p100 (the sim backend in real time: its
 *         streams sleep for the modeled durations), one real client process
 *         per job (libsalusclient over ipc://), each started at the job's
 *         arrival time on the wall clock;
 *   sim:  the discrete-event simulator (eval/lib/evsim.h) on the same jobs.
 * The figure compared is the ratio of average JCTs between policies
 * (first policy / each other policy): a simulator that is to predict which
 * policy wins, and by how much, must get that ratio right even where its
 * absolute times are off by a constant overhead.
 *
 *   fidelity [--salusd PATH] [--jobs N] [--seed S] [--scale-s X]
 *            [--interarrival-min X] [--policies fifo,srtf] [--variant paper|salus]
 *            [--gpu PROFILE] [--sim-only] [--json FILE] [--tiny] [--max-error X]
 *            [--verbose]
 *
 * The trace: N jobs, each of the Salus mix's lengths (1, 5 or 10 minutes,
 * uniformly drawn, as eval/salus51's trace) scaled to --scale-s seconds per
 * minute (default 0.5: a 10-minute job runs 5 s), Poisson arrivals every
 * --interarrival-min scaled minutes on average (default 2, salus51's 120 s).
 *
 * The work of one iteration is the same on both sides: one matmul of a
 * persistent [M,4096] by a persistent [4096,4096] tensor, M drawn per job
 * from 4096, 6144, 8192 (three "models"). The real client registers exactly
 * that graph; salusd's sim device sleeps launch + work of the op as
 * sl_sim_op_timing models it on the profile; the simulator charges that
 * same modeled time (sl_sim_op_time_ns, same call, same profile) as the
 * job's solo iteration time. The jobs declare the same persistent bytes
 * (both tensors), ephemeral bytes (the product) and iteration count (the
 * session hint srtf ranks by) on both sides.
 *
 * Variant paper (default): salusd --strict --spread-limit 0: sessions share
 * a lane whenever their ephemeral peak fits it (here one lane per product
 * size that does not fit the first), so jobs take turns and the policy
 * decides the order (as eval/salus51's headline). Variant salus: salusd's
 * defaults (every session its own lane while half the memory is free: all
 * jobs share the device at once).
 *
 * --tiny: 10 jobs at 0.1 s per minute (about 15 s of wall time in all), for
 * the test suite; --max-error X makes an error over X a failure (exit 1).
 * Last line:
 *   BENCH eval_fidelity ratio_sim=... ratio_real=... error=...
 * with error = |ratio_real / ratio_sim - 1|, the largest over the policies
 * compared with the first. */
#include "cli.h"
#include "evsim.h"
#include "sim/profiles.h"
#include "sim/sim.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_testsupport.h"
#include "workload.h"

#include <salus/salus.h>

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SL_SALUSD
#define SL_SALUSD "salusd"
#endif

#define MAX_POLICIES 4
#define MAX_JOBS 64
/* The shared dimensions of every job's matmul: K = N = 4096, and the rows
 * M of its first operand differ per job (three iteration times). */
#define DIM_KN 4096
static const int64_t model_rows[] = {4096, 6144, 8192};
static const int class_minutes[] = {1, 5, 10}; /* the Salus mix (paper section 5.1) */

typedef struct fjob {
    uint64_t arrival_ns; /* from the start of the run */
    int minutes;         /* length class, unscaled */
    int64_t rows;        /* M */
    uint64_t iterations;
    uint64_t iteration_ns;                /* modeled, solo */
    uint64_t persistent_bytes, ephemeral; /* declared */
} fjob;

/* What a client process reports through the pipe (one write, < PIPE_BUF,
 * so reports of concurrent clients never interleave). Monotonic clock. */
typedef struct report {
    uint32_t job;
    int32_t rc; /* SALUS_OK or the failing call's code */
    uint64_t open_ns, admitted_ns, first_ns, finish_ns;
    uint64_t min_run_ns; /* fastest iteration as the client saw it */
} report;

static void sleep_until(uint64_t t)
{
    for (uint64_t n; (n = sl_ts_now_ns()) < t;) {
        struct timespec d = {(time_t) ((t - n) / 1000000000ull), (long) ((t - n) % 1000000000ull)};
        nanosleep(&d, NULL);
    }
}

/* ---- the client process ---- */

/* Runs one job against salusd at url: open (waiting for admission), the two
 * persistent tensors, the one-matmul graph, `iterations` runs back to back,
 * close. Fills r. */
static void client_job(const char *url, const fjob *j, report *r)
{
    salus_client *c = NULL;
    salus_session *s = NULL;
    salus_graph *g = NULL;
    r->open_ns = sl_ts_now_ns();
    r->min_run_ns = UINT64_MAX;
    salus_session_opts o = {.name = "fidelity",
                            .persistent_bytes = j->persistent_bytes,
                            .ephemeral_bytes = j->ephemeral,
                            .expected_iterations = j->iterations,
                            .expected_total_s =
                                (double) j->iterations * (double) j->iteration_ns / 1e9,
                            .wait_for_admission = 1};
    const int64_t da[] = {j->rows, DIM_KN}, db[] = {DIM_KN, DIM_KN};
    uint64_t ta, tb;
    int rc = salus_connect(url, &c);
    if (!rc)
        rc = salus_session_open(c, &o, &s);
    r->admitted_ns = sl_ts_now_ns();
    if (!rc)
        rc = salus_tensor_create(s, SALUS_F32, 2, da, NULL, &ta);
    if (!rc)
        rc = salus_tensor_create(s, SALUS_F32, 2, db, NULL, &tb);
    if (!rc) {
        g = salus_graph_new();
        salus_value in[2] = {salus_graph_param(g, ta, SALUS_F32, 2, da),
                             salus_graph_param(g, tb, SALUS_F32, 2, db)};
        salus_graph_op(g, "matmul", 2, in, 0, NULL, 0, NULL);
        rc = salus_graph_register(s, g, NULL);
    }
    r->first_ns = sl_ts_now_ns();
    for (uint64_t i = 0; !rc && i < j->iterations; i++) {
        uint64_t t = sl_ts_now_ns();
        rc = salus_run(s, g, NULL, 0, NULL, NULL);
        t = sl_ts_now_ns() - t;
        r->min_run_ns = t < r->min_run_ns ? t : r->min_run_ns;
    }
    r->finish_ns = sl_ts_now_ns();
    r->rc = rc;
    salus_graph_free(g);
    if (s)
        (void) salus_session_close(s);
    if (c)
        salus_disconnect(c);
}

/* ---- the trace ---- */

static int make_trace(const sl_sim_profile *p, size_t n, uint64_t seed, double scale_s,
                      double interarrival_min, fjob *jobs)
{
    unsigned mm;
    if (sl_op_lookup("matmul", &mm) != SL_OK)
        return SL_EINTERNAL;
    sl_eval_rng rng;
    sl_eval_rng_seed(&rng, seed);
    double t = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            t += sl_eval_rng_exp(&rng, interarrival_min * scale_s);
        fjob *j = &jobs[i];
        j->arrival_ns = (uint64_t) (t * 1e9);
        j->minutes = class_minutes[sl_eval_rng_next(&rng) % 3];
        j->rows = model_rows[sl_eval_rng_next(&rng) % 3];
        sl_shape in[2] = {{.dtype = SL_F32, .ndim = 2, .dims = {j->rows, DIM_KN}},
                          {.dtype = SL_F32, .ndim = 2, .dims = {DIM_KN, DIM_KN}}};
        sl_shape out[SL_OP_MAX_OUT];
        sl_op_attrs a = {0};
        char err[128];
        int rc = sl_op_infer(mm, &a, in, 2, out, err, sizeof err);
        if (rc == SL_OK)
            rc = sl_sim_op_time_ns(p, mm, &a, in, out, &j->iteration_ns);
        if (rc != SL_OK)
            return rc;
        double len_ns = j->minutes * scale_s * 1e9;
        j->iterations = (uint64_t) llround(len_ns / (double) j->iteration_ns);
        if (j->iterations == 0)
            j->iterations = 1;
        j->persistent_bytes = (uint64_t) (j->rows + DIM_KN) * DIM_KN * 4;
        j->ephemeral = (uint64_t) j->rows * DIM_KN * 4;
    }
    return SL_OK;
}

/* ---- the simulated side ---- */

static int run_sim(const sl_sim_profile *p, const char *policy, bool paper, const fjob *jobs,
                   size_t n, double *jct_s, double *makespan_s, unsigned *lanes)
{
    sl_eval_job_spec spec[MAX_JOBS];
    sl_eval_job_result res[MAX_JOBS];
    for (size_t i = 0; i < n; i++)
        spec[i] = (sl_eval_job_spec){.id = i + 1,
                                     .arrival_ns = jobs[i].arrival_ns,
                                     .iterations = jobs[i].iterations,
                                     .iteration_ns = jobs[i].iteration_ns,
                                     .persistent_bytes = jobs[i].persistent_bytes,
                                     .ephemeral_bytes = jobs[i].ephemeral,
                                     .declare_length = true,
                                     .workload = (int) i};
    sl_eval_config cfg = sl_eval_config_default(policy, paper, 1, p->capacity);
    cfg.spread_set = paper; /* --spread-limit 0 */
    sl_eval_summary sum;
    int rc = sl_eval_run(&cfg, spec, n, res, &sum);
    if (rc != SL_OK)
        return rc;
    if (sum.completed != n)
        return SL_EINTERNAL;
    for (size_t i = 0; i < n; i++)
        jct_s[i] = (double) (res[i].finish_ns - res[i].arrival_ns) / 1e9;
    *makespan_s = (double) sum.makespan_ns / 1e9;
    *lanes = sum.max_lanes;
    return SL_OK;
}

/* ---- the real side ---- */

typedef sl_ts_salusd server;

static void print_log_tail(const server *sv)
{
    FILE *f = fopen(sv->log, "r");
    if (!f)
        return;
    char line[512];
    fprintf(stderr, "fidelity: salusd's log (%s):\n", sv->log);
    while (fgets(line, sizeof line, f))
        fprintf(stderr, "  %s", line);
    fclose(f);
}

static int server_start(server *sv, const char *salusd, const char *gpu, const char *policy,
                        bool paper)
{
    char dev[64];
    snprintf(dev, sizeof dev, "sim:%s", gpu);
    const char *args[12] = {"--device", dev, "--policy", policy, "--log-level", "warn"};
    if (paper) {
        args[6] = "--strict";
        args[7] = "--spread-limit";
        args[8] = "0";
    }
    if (sl_ts_salusd_start(sv, salusd, "fidelity", args, true) == SL_OK)
        return 0;
    print_log_tail(sv);
    sl_ts_salusd_cleanup(sv);
    return -1;
}

/* SIGTERM (salusd drains) and reap; the folder goes. Returns salusd's exit
 * status (-1: killed after 15 s or by a signal). */
static int server_stop(server *sv)
{
    int st = sl_ts_salusd_stop(sv, 15);
    if (st != 0)
        print_log_tail(sv);
    sl_ts_tempdir_remove(sv->dir);
    return st;
}

/* Replays the trace against a fresh salusd: each job's client process is
 * started at its arrival time (fork + exec of this program with --client).
 * Writes each job's JCT (last reply minus arrival), the fastest iteration
 * its client saw and its set-up time (session admitted to first request). */
static int run_real(const char *self, const char *salusd, const char *gpu, const char *policy,
                    bool paper, bool verbose, const fjob *jobs, size_t n, double *jct_s,
                    double *min_run_s, double *setup_s, double *makespan_s)
{
    server sv = {0};
    if (server_start(&sv, salusd, gpu, policy, paper) != 0) {
        fprintf(stderr, "fidelity: salusd (%s) did not start\n", salusd);
        return -1;
    }
    int fds[2];
    if (pipe(fds) != 0) {
        server_stop(&sv);
        return -1;
    }
    pid_t pids[MAX_JOBS] = {0};
    fflush(NULL); /* children must not repeat our buffered output */
    uint64_t t0 = sl_ts_now_ns() + 100 * 1000 * 1000ull, total_solo = 0;
    int failed = 0;
    for (size_t i = 0; i < n && !failed; i++) {
        sleep_until(t0 + jobs[i].arrival_ns);
        char a[9][32];
        snprintf(a[0], 32, "%d", fds[1]);
        snprintf(a[1], 32, "%zu", i);
        snprintf(a[2], 32, "%lld", (long long) jobs[i].rows);
        snprintf(a[3], 32, "%llu", (unsigned long long) jobs[i].iterations);
        snprintf(a[4], 32, "%llu", (unsigned long long) jobs[i].persistent_bytes);
        snprintf(a[5], 32, "%llu", (unsigned long long) jobs[i].ephemeral);
        const char *argv[] = {self, "--client", sv.url, a[0], a[1], a[2], a[3], a[4], a[5], NULL};
        pids[i] = fork();
        if (pids[i] < 0) {
            failed = 1;
            break;
        }
        if (pids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            close(fds[0]);
            execv(self, (char *const *) argv);
            _exit(127);
        }
        uint64_t solo = jobs[i].iterations * jobs[i].iteration_ns;
        total_solo += solo;
    }
    close(fds[1]);
    /* Deadline: every job's work one after the other after the last
     * arrival, three times over, plus a minute of slack for a loaded host. */
    uint64_t deadline = t0 + jobs[n - 1].arrival_ns + 3 * total_solo + 60 * 1000000000ull;
    size_t got = 0;
    uint64_t first_arrival = t0 + jobs[0].arrival_ns, last_finish = 0;
    for (size_t i = 0; i < n; i++)
        jct_s[i] = -1;
    while (!failed && got < n) {
        uint64_t t = sl_ts_now_ns();
        if (t >= deadline) {
            fprintf(stderr, "fidelity: %s: %zu of %zu jobs done at the deadline\n", policy, got, n);
            failed = 1;
            break;
        }
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        int pr = poll(&pfd, 1, (int) ((deadline - t) / 1000000 + 1));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0) {
            perror("fidelity: poll");
            failed = 1;
            break;
        }
        if (pr == 0)
            continue; /* the deadline check above ends it */
        report r;
        ssize_t k = read(fds[0], &r, sizeof r);
        if (k == 0) {
            fprintf(stderr, "fidelity: %s: clients exited with %zu of %zu reports\n", policy, got,
                    n);
            failed = 1;
            break;
        }
        if (k != (ssize_t) sizeof r || r.job >= n) {
            failed = 1;
            break;
        }
        if (r.rc != SALUS_OK) {
            fprintf(stderr, "fidelity: %s: job %u failed: %s\n", policy, r.job,
                    salus_strerror(r.rc));
            failed = 1;
            break;
        }
        jct_s[r.job] = (double) (r.finish_ns - (t0 + jobs[r.job].arrival_ns)) / 1e9;
        min_run_s[r.job] = (double) r.min_run_ns / 1e9;
        setup_s[r.job] = (double) (r.first_ns - r.admitted_ns) / 1e9;
        last_finish = r.finish_ns > last_finish ? r.finish_ns : last_finish;
        got++;
        if (verbose)
            fprintf(stderr,
                    "job %u: %llu iterations of %.2f ms modeled, fastest %.2f ms, jct %.3f s\n",
                    r.job, (unsigned long long) jobs[r.job].iterations,
                    jobs[r.job].iteration_ns / 1e6, r.min_run_ns / 1e6, jct_s[r.job]);
        fprintf(stderr, "\rfidelity: real %s: %zu/%zu jobs done", policy, got, n);
    }
    fprintf(stderr, "\n");
    close(fds[0]);
    for (size_t i = 0; i < n; i++) {
        if (pids[i] <= 0)
            continue;
        if (failed)
            kill(pids[i], SIGKILL);
        int st;
        (void) waitpid(pids[i], &st, 0);
        if (!failed && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
            failed = 1;
    }
    int st = server_stop(&sv);
    if (st != 0) {
        fprintf(stderr, "fidelity: salusd exited with %d\n", st);
        failed = 1;
    }
    *makespan_s = (double) (last_finish - first_arrival) / 1e9;
    return failed ? -1 : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

static double mean(const double *v, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += v[i];
    return s / (double) n;
}

/* A number in JSON, which has no NaN: the real side of a sim-only run is
 * null. */
static void jnum(FILE *f, const char *key, double x, const char *after)
{
    if (isnan(x))
        fprintf(f, "\"%s\": null%s", key, after);
    else
        fprintf(f, "\"%s\": %.4f%s", key, x, after);
}

typedef struct json_in {
    size_t n_jobs;
    uint64_t seed;
    double scale_s, interarrival_min;
    const char *variant, *gpu;
    bool sim_only;
    double ratio_sim, ratio_real, err, overhead_ms;
    char **policies;
    size_t n_pol;
    const fjob *jobs;
    const double *sim_avg, *real_avg, *sim_mk, *real_mk;
    const double (*sim_jct)[MAX_JOBS], (*real_jct)[MAX_JOBS];
} json_in;

/* The figures as JSON: the compared ratios, one object per policy, one per
 * (policy, job) for per-job plots. */
static int write_json(const char *path, const json_in *in)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f,
            "{\n  \"bench\": \"eval_fidelity\", \"jobs\": %zu, \"seed\": %llu, "
            "\"scale_s_per_min\": %.4f, \"interarrival_s\": %.4f, \"variant\": \"%s\", "
            "\"gpu\": \"%s\", \"sim_only\": %s,\n  ",
            in->n_jobs, (unsigned long long) in->seed, in->scale_s,
            in->interarrival_min * in->scale_s, in->variant, in->gpu,
            in->sim_only ? "true" : "false");
    jnum(f, "ratio_sim", in->ratio_sim, ", ");
    jnum(f, "ratio_real", in->ratio_real, ", ");
    jnum(f, "error", in->err, ", ");
    jnum(f, "overhead_ms", in->overhead_ms, ",\n  \"policies\": [\n");
    for (size_t p = 0; p < in->n_pol; p++) {
        fprintf(f, "    {\"policy\": \"%s\", ", in->policies[p]);
        jnum(f, "sim_avg_jct_s", in->sim_avg[p], ", ");
        jnum(f, "real_avg_jct_s", in->real_avg[p], ", ");
        jnum(f, "sim_makespan_s", in->sim_mk[p], ", ");
        jnum(f, "real_makespan_s", in->real_mk[p], ", ");
        jnum(f, "ratio_sim", in->sim_avg[0] / in->sim_avg[p], ", ");
        jnum(f, "ratio_real", in->real_avg[0] / in->real_avg[p],
             p + 1 < in->n_pol ? "},\n" : "}\n");
    }
    fprintf(f, "  ],\n  \"job_runs\": [\n");
    for (size_t p = 0; p < in->n_pol; p++)
        for (size_t i = 0; i < in->n_jobs; i++) {
            const fjob *j = &in->jobs[i];
            fprintf(f,
                    "    {\"policy\": \"%s\", \"job\": %zu, \"minutes\": %d, \"rows\": %lld, "
                    "\"iterations\": %llu, \"iteration_ms\": %.3f, \"arrival_s\": %.3f, ",
                    in->policies[p], i + 1, j->minutes, (long long) j->rows,
                    (unsigned long long) j->iterations, (double) j->iteration_ns / 1e6,
                    (double) j->arrival_ns / 1e9);
            jnum(f, "sim_jct_s", in->sim_jct[p][i], ", ");
            jnum(f, "real_jct_s", in->real_jct[p][i],
                 p + 1 < in->n_pol || i + 1 < in->n_jobs ? "},\n" : "}\n");
        }
    fprintf(f, "  ]\n}\n");
    return fclose(f) == 0 ? 0 : -1;
}

static const char usage[] =
    "usage: %s [--salusd PATH] [--jobs N] [--seed S] [--scale-s X] "
    "[--interarrival-min X]\n"
    "          [--policies fifo,srtf] [--variant paper|salus] [--gpu PROFILE] "
    "[--sim-only]\n"
    "          [--json FILE] [--tiny] [--max-error X] [--verbose]\n"
    "Replays a scaled-down training trace through a real salusd --device sim:GPU with\n"
    "one client process per job, and through the simulator; compares the average-JCT\n"
    "ratio between the first policy and each other one. Defaults: 12 jobs, seed 1,\n"
    "0.5 s per paper minute, an arrival every 2 scaled minutes on average, fifo,srtf,\n"
    "the paper variant (--strict --spread-limit 0), p100. --tiny: 10 jobs, 0.1 s per\n"
    "minute. --sim-only skips the real run. --max-error X: exit 1 when the error is\n"
    "over X (tests). --verbose: every real job's figures on stderr.\n";

typedef struct options {
    sl_cli_common c;
    const char *salusd, *policy_list, *variant;
    size_t n_jobs;
    double scale_s, interarrival_min;
    bool sim_only, verbose, paper;
    double max_error; /* < 0: no limit */
    char plist[128];
    char *policies[MAX_POLICIES];
    size_t n_pol;
} options;

/* Both sides' figures per policy (NaN on the real side when sim-only). */
typedef struct figures {
    double sim_jct[MAX_POLICIES][MAX_JOBS], real_jct[MAX_POLICIES][MAX_JOBS],
        min_run[MAX_POLICIES][MAX_JOBS], setup[MAX_POLICIES][MAX_JOBS];
    double sim_avg[MAX_POLICIES], real_avg[MAX_POLICIES], sim_mk[MAX_POLICIES],
        real_mk[MAX_POLICIES];
    unsigned lanes[MAX_POLICIES];
    double err, ratio_sim, ratio_real, over_ms;
} figures;

static bool tiny(void *dst, const char *arg)
{
    (void) arg;
    options *o = dst;
    o->n_jobs = 10;
    o->scale_s = 0.1;
    return true;
}

/* The variant and the policy list; 2 (after a line) when they are not
 * valid, else -1. */
static int check_options(options *o)
{
    o->paper = strcmp(o->variant, "paper") == 0;
    if (!o->paper && strcmp(o->variant, "salus")) {
        fprintf(stderr, "fidelity: unknown variant %s (paper or salus)\n", o->variant);
        return 2;
    }
    char *save = NULL;
    snprintf(o->plist, sizeof o->plist, "%s", o->policy_list);
    for (char *tok = strtok_r(o->plist, ",", &save); tok && o->n_pol < MAX_POLICIES;
         tok = strtok_r(NULL, ",", &save))
        o->policies[o->n_pol++] = tok;
    if (o->n_pol < 2) {
        fprintf(stderr, "fidelity: --policies needs two or more, comma-separated\n");
        return 2;
    }
    return -1;
}

static void print_trace(const options *o, const fjob *jobs)
{
    const sl_sim_profile *gpu = o->c.gpu;
    double solo = 0;
    for (size_t i = 0; i < o->n_jobs; i++)
        solo += (double) (jobs[i].iterations * jobs[i].iteration_ns) / 1e9;
    printf("trace: %zu jobs (1/5/10-minute mix at %.3g s per minute), Poisson arrivals every %.3g "
           "s on average, seed %llu; %.1f s of work running alone; %s variant on one %s\n",
           o->n_jobs, o->scale_s, o->interarrival_min * o->scale_s, (unsigned long long) o->c.seed,
           solo, o->paper ? "paper (--strict --spread-limit 0)" : "salus (defaults)", gpu->name);
    printf("iteration: one matmul [M,%d]x[%d,%d], modeled on %s (sl_sim_op_time_ns):", DIM_KN,
           DIM_KN, DIM_KN, gpu->name);
    for (size_t m = 0; m < 3; m++)
        for (size_t i = 0; i < o->n_jobs; i++)
            if (jobs[i].rows == model_rows[m]) {
                printf(" M=%lld %.2f ms", (long long) model_rows[m], jobs[i].iteration_ns / 1e6);
                break;
            }
    printf("\n");
}

/* Every policy in the simulator and, unless sim-only, on the real salusd. */
static int run_policies(const options *o, const char *self, const fjob *jobs, figures *f)
{
    const sl_sim_profile *gpu = o->c.gpu;
    size_t n = o->n_jobs;
    for (size_t p = 0; p < o->n_pol; p++) {
        const char *pol = o->policies[p];
        int rc = run_sim(gpu, pol, o->paper, jobs, n, f->sim_jct[p], &f->sim_mk[p], &f->lanes[p]);
        if (rc != SL_OK)
            return sl_cli_fail(rc, "simulator, %s", pol);
        f->sim_avg[p] = mean(f->sim_jct[p], n);
        if (o->sim_only) {
            f->real_avg[p] = f->real_mk[p] = NAN;
            for (size_t i = 0; i < n; i++)
                f->real_jct[p][i] = f->min_run[p][i] = f->setup[p][i] = NAN;
            continue;
        }
        fprintf(stderr, "fidelity: real %s: salusd %s, %zu client processes\n", pol, o->salusd, n);
        if (run_real(self, o->salusd, gpu->name, pol, o->paper, o->verbose, jobs, n, f->real_jct[p],
                     f->min_run[p], f->setup[p], &f->real_mk[p]) != 0)
            return 1;
        f->real_avg[p] = mean(f->real_jct[p], n);
    }
    return -1;
}

/* The table, and the ratios of the worst pair into f. */
static void compare(const options *o, figures *f)
{
    printf("%-6s %12s %12s %12s %12s %10s %10s %9s\n", "policy", "sim_avg_s", "real_avg_s",
           "sim_mksp_s", "real_mksp_s", "ratio_sim", "ratio_real", "sim_lanes");
    for (size_t p = 0; p < o->n_pol; p++) {
        double rs = f->sim_avg[0] / f->sim_avg[p], rr = f->real_avg[0] / f->real_avg[p];
        printf("%-6s %12.3f %12.3f %12.3f %12.3f %10.3f %10.3f %9u\n", o->policies[p],
               f->sim_avg[p], f->real_avg[p], f->sim_mk[p], f->real_mk[p], rs, rr, f->lanes[p]);
        double e = fabs(rr / rs - 1);
        if (p == 1 || e > f->err || isnan(e)) { /* the worst pair; NaN when sim-only */
            f->err = e;
            f->ratio_sim = rs;
            f->ratio_real = rr;
        }
    }
}

/* What the simulator does not model: the client-observed iteration
 * against the modeled one (RPC, executor, stream wake-up), measured on the
 * iterations that ran alone (the fastest of a job, when under 1.5x the
 * modeled time: a job sharing the device with another lane for all its
 * iterations never ran alone); and the client's set-up: a real client
 * creates its tensors and registers its graph between the session's
 * admission (when the scheduler learns of the job) and its first request,
 * where the simulated client sends its first request client_gap_ns after
 * admission (a strict policy that picks a newly admitted job holds the
 * lane idle for that long). */
static void print_unmodeled(const options *o, const fjob *jobs, figures *f)
{
    static double over[MAX_POLICIES * MAX_JOBS], su[MAX_POLICIES * MAX_JOBS];
    size_t n_over = 0, n_su = 0;
    for (size_t p = 0; p < o->n_pol && !o->sim_only; p++)
        for (size_t i = 0; i < o->n_jobs; i++) {
            if (f->min_run[p][i] < 1.5 * (double) jobs[i].iteration_ns / 1e9)
                over[n_over++] = f->min_run[p][i] - (double) jobs[i].iteration_ns / 1e9;
            su[n_su++] = f->setup[p][i];
        }
    f->over_ms = NAN;
    if (n_over) {
        qsort(over, n_over, sizeof *over, cmp_double);
        f->over_ms = over[n_over / 2] * 1e3;
        printf("real per-iteration overhead (fastest client-observed iteration - modeled, jobs "
               "that ran alone): median %.3f ms over %zu job runs, min %.3f ms, max %.3f ms\n",
               f->over_ms, n_over, over[0] * 1e3, over[n_over - 1] * 1e3);
    }
    if (n_su) {
        qsort(su, n_su, sizeof *su, cmp_double);
        printf("real client set-up (session admitted to first request): median %.2f ms, max %.2f "
               "ms\n",
               su[n_su / 2] * 1e3, su[n_su - 1] * 1e3);
    }
}

/* The child: one job's client, its report written to FD. */
static int client_main(char **argv)
{
    /* fidelity --client URL FD JOB ROWS ITERATIONS P E */
    fjob j = {.rows = atoll(argv[5]),
              .iterations = strtoull(argv[6], NULL, 10),
              .persistent_bytes = strtoull(argv[7], NULL, 10),
              .ephemeral = strtoull(argv[8], NULL, 10)};
    report r = {.job = (uint32_t) atoi(argv[4])};
    client_job(argv[2], &j, &r);
    int fd = atoi(argv[3]);
    return write(fd, &r, sizeof r) == (ssize_t) sizeof r && r.rc == SALUS_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 9 && strcmp(argv[1], "--client") == 0)
        return client_main(argv);
    options o = {.c = sl_cli_common_default(SL_CLI_WANT_SEED | SL_CLI_WANT_JSON | SL_CLI_WANT_GPU),
                 .salusd = getenv("SALUSD") ? getenv("SALUSD") : SL_SALUSD,
                 .policy_list = "fifo,srtf",
                 .variant = "paper",
                 .n_jobs = 12,
                 .scale_s = 0.5,
                 .interarrival_min = 2,
                 .max_error = -1};
    const sl_cli_opt opts[] = {
        {"salusd", SL_CLI_STR, &o.salusd, 0, 0, NULL},
        {"jobs", SL_CLI_SIZE, &o.n_jobs, 2, MAX_JOBS, NULL},
        {"scale-s", SL_CLI_ABOVE, &o.scale_s, 0, 60, NULL},
        {"interarrival-min", SL_CLI_DOUBLE, &o.interarrival_min, 0, 1e4, NULL},
        {"policies", SL_CLI_STR, &o.policy_list, 0, 0, NULL},
        {"variant", SL_CLI_STR, &o.variant, 0, 0, NULL},
        {"sim-only", SL_CLI_SET, &o.sim_only, 0, 0, NULL},
        {"tiny", SL_CLI_CALL, &o, 0, 0, tiny},
        {"max-error", SL_CLI_DOUBLE, &o.max_error, 0, 100, NULL},
        {"verbose", SL_CLI_SET, &o.verbose, 0, 0, NULL},
    };
    int st = sl_cli_parse(argc, argv, usage, &o.c, opts, sizeof opts / sizeof opts[0]);
    if (st != SL_CLI_RUN || (st = check_options(&o)) >= 0)
        return st;
    fjob jobs[MAX_JOBS];
    int rc = make_trace(o.c.gpu, o.n_jobs, o.c.seed, o.scale_s, o.interarrival_min, jobs);
    if (rc != SL_OK)
        return sl_cli_fail(rc, "cannot build the trace");
    char self[512];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        perror("readlink /proc/self/exe");
        return 1;
    }
    self[sl] = 0;
    print_trace(&o, jobs);
    static figures f;
    if ((st = run_policies(&o, self, jobs, &f)) >= 0)
        return st;
    compare(&o, &f);
    print_unmodeled(&o, jobs, &f);
    if (o.c.json &&
        write_json(o.c.json, &(json_in){o.n_jobs,     o.c.seed,      o.scale_s,  o.interarrival_min,
                                        o.variant,    o.c.gpu->name, o.sim_only, f.ratio_sim,
                                        f.ratio_real, f.err,         f.over_ms,  o.policies,
                                        o.n_pol,      jobs,          f.sim_avg,  f.real_avg,
                                        f.sim_mk,     f.real_mk,     f.sim_jct,  f.real_jct}) !=
            0) {
        perror(o.c.json);
        return 1;
    }
    printf("BENCH eval_fidelity ratio_sim=%.3f ratio_real=%.3f error=%.3f policies=%s jobs=%zu "
           "scale_s=%.3g overhead_ms=%.3f\n",
           f.ratio_sim, f.ratio_real, f.err, o.policy_list, o.n_jobs, o.scale_s, f.over_ms);
    if (o.max_error >= 0 && !o.sim_only && !(f.err <= o.max_error)) {
        fprintf(stderr, "fidelity: error %.3f over --max-error %.3f\n", f.err, o.max_error);
        return 1;
    }
    return 0;
}
