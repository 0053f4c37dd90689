/* eval/salus51: Salus section 5.1 ("long-running training") in the
 * simulator: a 100-job training trace on one GPU under fifo, srtf, pack and
 * fair, in the paper's variant and in salusd's defaults.
 *
 *   salus51 [--csv FILE] [--jobs N] [--seed S] [--interarrival-s X]
 *           [--gpu PROFILE] [--timing measured|graph] [--profiles FILE] [--json FILE]
 *           [--jobs-csv FILE] [--util graph] [--lengths csv|lognormal[:SIGMA]]
 *
 * --timing measured (default): the Salus artifact's P100 iteration times;
 * --gpu then changes only the memory. --timing graph: the rows whose model
 * eval/lib/graphs.c builds, timed op by op on --gpu (workload.h), each with its
 * op list's solo utilisation (evsim.h). --profiles FILE: the rows that
 * eval/profiles built with the nn helpers (its --out), with their device
 * time per iteration, parameters and planned ephemeral peak. --util graph: the measured timings
 * with the op lists' utilisation where the model is built (54 rows; the
 * others fill the device). Default with measured timings: utilisation 1
 * (the CSV measures none). --lengths lognormal[:SIGMA]: the same jobs and
 * arrivals, each job's length redrawn log-normal with the CSV mix's mean
 * (workload.h sl_eval_trace_lognormal_lengths; SIGMA 1.5 by default, the
 * spread eval/drivers/philly.c assumes for the Philly study's run times): the
 * same offered work with a heavier tail, to show what the paper's 3.19x
 * needs of a trace.
 *
 * Paper variant: salusd --strict --spread-limit 0 (fifo and srtf idle the
 * lane for the chosen job; every session shares a lane when its peak fits,
 * so jobs take turns rather than run side by side). Defaults: salusd with no
 * flags (work-conserving; lanes of their own while half the memory is
 * free). Per policy: makespan, mean queueing (arrival to first iteration),
 * mean and p95 JCT. Last line:
 *   BENCH eval_jct fifo_avg_min=... srtf_avg_min=... ratio=... (paper variant)
 * and the same for the defaults. The paper reports srtf 3.19x better mean
 * JCT than fifo. */
#include "cli.h"
#include "evsim.h"
#include "sim/profiles.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const policies[] = {"fifo", "srtf", "pack", "fair"};
#define N_POLICIES 4

/* What the trace allows, for scale: the mean JCT of the jobs run whole, one
 * at a time, on one server that never idles while work waits, in arrival
 * order (fcfs) and by shortest remaining time with instant preemption
 * (srpt, which minimises the mean). A reference computed from the trace
 * alone: no memory, no lanes, no client gaps; not a policy of the
 * simulator. */
static double bound_fcfs_min(const sl_eval_job_spec *jobs, size_t n)
{
    double now = 0, total = 0;
    for (size_t i = 0; i < n; i++) { /* the trace is in arrival order */
        double a = (double) jobs[i].arrival_ns;
        now = (now > a ? now : a) + (double) (jobs[i].iterations * jobs[i].iteration_ns);
        total += now - a;
    }
    return total / (double) n / 6e10;
}

static double bound_srpt_min(const sl_eval_job_spec *jobs, size_t n)
{
    double *left = sl_calloc(n, sizeof *left), now = 0, total = 0;
    if (!left)
        return 0;
    size_t arrived = 0, done = 0;
    while (done < n) {
        size_t best = n;
        for (size_t i = 0; i < arrived; i++)
            if (left[i] > 0 && (best == n || left[i] < left[best]))
                best = i;
        if (best == n) { /* idle until the next arrival */
            now = (double) jobs[arrived].arrival_ns;
            left[arrived] = (double) (jobs[arrived].iterations * jobs[arrived].iteration_ns);
            arrived++;
            continue;
        }
        double next = arrived < n ? (double) jobs[arrived].arrival_ns : 1e300;
        if (now + left[best] <= next) {
            now += left[best];
            left[best] = 0;
            total += now - (double) jobs[best].arrival_ns;
            done++;
        } else {
            left[best] -= next - now;
            now = next;
            left[arrived] = (double) (jobs[arrived].iterations * jobs[arrived].iteration_ns);
            arrived++;
        }
    }
    sl_free(left);
    return total / (double) n / 6e10;
}

/* What beats the paper's 3.19x: the trace of seeds seed .. seed + n - 1
 * (same arrivals and workloads as the headline's trace of that seed) with
 * log-normal lengths of sigma TAIL_SIGMA and the CSV mix's mean, under
 * fifo and srtf in both variants. Per seed: srtf's gain in the paper's
 * variant, in salusd's defaults, and the trace's bound. */
#define TAIL_SIGMA 1.5 /* eval/drivers/philly.c's spread of the Philly study's run times */
#define TAIL_MAX_SEEDS 16

static double median_of(double *v, size_t n)
{
    for (size_t i = 1; i < n; i++) /* insertion sort: a few values */
        for (size_t k = i; k > 0 && v[k - 1] > v[k]; k--) {
            double t = v[k];
            v[k] = v[k - 1];
            v[k - 1] = t;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int tail_runs(const sl_eval_workload *w, size_t n_w, size_t n_jobs, double interarrival_s,
                     uint64_t seed, size_t n_seeds, const sl_sim_profile *gpu, double med[3])
{
    sl_eval_job_spec *jobs = sl_calloc(n_jobs, sizeof *jobs);
    sl_eval_job_result *res = sl_calloc(n_jobs, sizeof *res);
    double r[3][TAIL_MAX_SEEDS];
    int rc = jobs && res ? SL_OK : SL_ENOMEM;
    printf("what beats the paper's 3.19x: the same arrivals and workloads, lengths log-normal "
           "(sigma %.1f) with the CSV mix's mean\n",
           TAIL_SIGMA);
    printf("%-6s %12s %12s %8s %14s %8s\n", "seed", "fifo_avg_min", "srtf_avg_min", "ratio",
           "default_ratio", "bound");
    for (size_t k = 0; k < n_seeds && rc == SL_OK; k++) {
        uint64_t s = seed + k;
        rc = sl_eval_trace_salus(w, n_w, n_jobs, interarrival_s, s, jobs);
        if (rc == SL_OK)
            rc = sl_eval_trace_lognormal_lengths(w, n_w, TAIL_SIGMA, s, jobs, n_jobs);
        double avg[2][2] = {{0}};
        bool all = true;
        for (int v = 0; v < 2 && rc == SL_OK; v++)
            for (int p = 0; p < 2 && rc == SL_OK; p++) {
                sl_eval_config cfg = sl_eval_config_default(policies[p], v == 0, 1, gpu->capacity);
                cfg.spread_set = v == 0;
                sl_eval_summary sum;
                if ((rc = sl_eval_run(&cfg, jobs, n_jobs, res, &sum)) != SL_OK)
                    break;
                all &= sum.completed == n_jobs;
                avg[v][p] = sum.avg_jct_ns / 6e10;
            }
        if (rc != SL_OK)
            break;
        r[0][k] = avg[0][0] / avg[0][1];
        r[1][k] = avg[1][0] / avg[1][1];
        r[2][k] = bound_fcfs_min(jobs, n_jobs) / bound_srpt_min(jobs, n_jobs);
        printf("%-6llu %12.1f %12.1f %8.2f %14.2f %8.2f%s\n", (unsigned long long) s, avg[0][0],
               avg[0][1], r[0][k], r[1][k], r[2][k], all ? "" : " (not all completed)");
    }
    if (rc == SL_OK)
        for (int i = 0; i < 3; i++)
            med[i] = median_of(r[i], n_seeds);
    if (rc == SL_OK)
        printf("median %34.2f %14.2f %8.2f\n", med[0], med[1], med[2]);
    sl_free(jobs);
    sl_free(res);
    return rc;
}

static const char usage[] =
    "usage: %s [--csv FILE] [--jobs N] [--seed S] [--interarrival-s X] [--gpu PROFILE] "
    "[--timing measured|graph] [--profiles FILE] [--util graph] [--json FILE] "
    "[--jobs-csv FILE] [--lengths csv|lognormal[:SIGMA]] [--tail-seeds N]\n"
    "  Salus 5.1: N training jobs (uniform rows of the CSV, Poisson arrivals X s apart)\n"
    "  on one GPU under fifo, srtf, pack and fair, in the paper's variant (--strict\n"
    "  --spread-limit 0) and in salusd's defaults\n"
    "  --timing graph   iteration times and utilisations computed from the op lists\n"
    "  --profiles FILE  iteration times and memory from the nn helpers' profiles\n"
    "                   (eval/profiles --out FILE): the rows it has\n"
    "  --util graph     measured timings with the op lists' utilisations\n"
    "  --jobs-csv FILE  every job of every run (for CDFs)\n"
    "  --lengths lognormal[:SIGMA]  job lengths log-normal (sigma 1.5) with the\n"
    "                   CSV mix's mean instead of the rows' 1/5/10 minutes\n"
    "  --tail-seeds N   after the runs, fifo and srtf on N seeds' traces with\n"
    "                   log-normal lengths (what beats 3.19x; 5, 0 = none)\n"
    "defaults: 100 jobs, interarrival 120 s, p100, measured timings, seed 1\n";

typedef struct options {
    sl_cli_common c;
    const char *timing, *jobs_csv, *profiles;
    size_t n_jobs, tail_seeds;
    double interarrival_s;
    bool util_graph;
    double sigma; /* < 0: the rows' own lengths */
} options;

static bool set_util(void *dst, const char *arg)
{
    ((options *) dst)->util_graph = strcmp(arg, "graph") == 0;
    return true;
}

static bool set_lengths(void *dst, const char *arg)
{
    double *sigma = &((options *) dst)->sigma;
    if (strcmp(arg, "csv") == 0)
        *sigma = -1;
    else if (strcmp(arg, "lognormal") == 0)
        *sigma = 1.5;
    else if (strncmp(arg, "lognormal:", 10) == 0)
        return sl_cli_double("--lengths lognormal:", arg + 10, 0, 5, sigma);
    else {
        fprintf(stderr, "salus51: --lengths is csv or lognormal[:SIGMA], not \"%s\"\n", arg);
        return false;
    }
    return true;
}

/* The workloads with the timings --timing, --profiles and --util ask for;
 * the exit status on error (after a line on stderr), else -1. */
static int load(const options *o, sl_eval_workload **w, size_t *n_w)
{
    const sl_sim_profile *gpu = o->c.gpu;
    if (!sl_cli_workloads(&o->c, w, n_w))
        return 1;
    bool graph = strcmp(o->timing, "graph") == 0;
    int rc;
    if (o->util_graph && (rc = sl_eval_workloads_utilisation(*w, *n_w, gpu)) != SL_OK)
        return sl_cli_fail(rc, "cannot compute utilisations on %s", gpu->name);
    if (!graph && strcmp(o->timing, "measured") != 0) {
        fprintf(stderr, "salus51: --timing is measured or graph\n");
        return 2;
    }
    if (graph && o->profiles) {
        fprintf(stderr, "salus51: --timing graph and --profiles both set the timings\n");
        return 2;
    }
    if (graph && (rc = sl_eval_workloads_compute(*w, n_w, gpu)) != SL_OK)
        return sl_cli_fail(rc, "cannot compute profiles on %s", gpu->name);
    if (o->profiles && (rc = sl_eval_workloads_profiles(*w, n_w, o->profiles)) != SL_OK)
        return sl_cli_fail(rc, "cannot use the profiles in %s", o->profiles);
    return -1;
}

static void print_trace(const options *o, const sl_eval_job_spec *jobs, size_t n_w)
{
    double solo = 0;
    for (size_t i = 0; i < o->n_jobs; i++)
        solo += (double) (jobs[i].iterations * jobs[i].iteration_ns);
    char lengths[64] = "the rows' own";
    if (o->sigma >= 0)
        snprintf(lengths, sizeof lengths, "log-normal, sigma %.2f, the rows' mean", o->sigma);
    printf("trace: %zu jobs from %zu Salus workloads, Poisson arrivals every %.0f s on average, "
           "seed %llu; lengths %s; %.1f GPU-hours of work running alone; one %s (%.1f GiB); "
           "iteration times %s\n",
           o->n_jobs, n_w, o->interarrival_s, (unsigned long long) o->c.seed, lengths,
           solo / 3.6e12, o->c.gpu->name, (double) o->c.gpu->capacity / (1u << 30),
           strcmp(o->timing, "graph") == 0 ? "computed from the op lists on this GPU"
           : o->profiles ? "and memory from the nn helpers' profiles (eval/profiles)"
                         : "measured on P100 (Salus artifact)");
    printf("%-5s %-8s %12s %14s %12s %12s %9s %8s %5s\n", "policy", "variant", "makespan_min",
           "avg_queue_min", "avg_jct_min", "p95_jct_min", "switches", "admitted", "lanes");
}

static void print_jobs(FILE *cf, const char *policy, const char *variant, const sl_eval_workload *w,
                       const sl_eval_job_result *res, size_t n)
{
    for (size_t i = 0; cf && i < n; i++)
        fprintf(cf, "%s,%s,%llu,%s,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", policy, variant,
                (unsigned long long) res[i].id, w[res[i].workload].name,
                (double) res[i].arrival_ns / 1e9, (double) res[i].admitted_ns / 1e9,
                (double) res[i].start_ns / 1e9, (double) res[i].finish_ns / 1e9,
                (double) (res[i].finish_ns - res[i].arrival_ns) / 1e9,
                (double) res[i].solo_ns / 1e9);
}

/* Every policy in both variants: the table, the JSON's runs and the jobs'
 * CSV; avg[variant][policy] the mean JCTs in minutes. */
static int run_policies(const options *o, const sl_eval_workload *w, const sl_eval_job_spec *jobs,
                        FILE *jf, FILE *cf, double avg[2][N_POLICIES])
{
    sl_eval_job_result *res = sl_calloc(o->n_jobs, sizeof *res);
    if (!res)
        return SL_ENOMEM;
    int rc = SL_OK;
    for (int variant = 0; variant < 2 && rc == SL_OK; variant++) {
        for (int p = 0; p < N_POLICIES && rc == SL_OK; p++) {
            sl_eval_config cfg =
                sl_eval_config_default(policies[p], variant == 0, 1, o->c.gpu->capacity);
            if (variant == 0)
                cfg.spread_set = true; /* --spread-limit 0 */
            sl_eval_summary sum;
            if ((rc = sl_eval_run(&cfg, jobs, o->n_jobs, res, &sum)) != SL_OK) {
                (void) sl_cli_fail(rc, "%s", policies[p]);
                break;
            }
            const char *vname = variant == 0 ? "paper" : "salus";
            fprintf(stderr, "salus51: %s %s done\n", policies[p], vname);
            avg[variant][p] = sum.avg_jct_ns / 6e10;
            print_jobs(cf, policies[p], vname, w, res, o->n_jobs);
            printf("%-6s %-8s %12.1f %14.1f %12.1f %12.1f %9llu %8u %5u%s\n", policies[p], vname,
                   (double) sum.makespan_ns / 6e10, sum.avg_queue_ns / 6e10, avg[variant][p],
                   (double) sum.p95_jct_ns / 6e10, (unsigned long long) sum.lane_switches,
                   sum.max_admitted, sum.max_lanes,
                   sum.completed == o->n_jobs ? "" : " (not all completed)");
            if (jf)
                fprintf(jf,
                        "    {\"policy\": \"%s\", \"variant\": \"%s\", \"makespan_min\": %.3f, "
                        "\"avg_queue_min\": %.3f, \"avg_jct_min\": %.3f, \"p95_jct_min\": %.3f, "
                        "\"completed\": %zu, \"refused\": %zu}%s\n",
                        policies[p], vname, (double) sum.makespan_ns / 6e10,
                        sum.avg_queue_ns / 6e10, avg[variant][p], (double) sum.p95_jct_ns / 6e10,
                        sum.completed, sum.refused, variant == 1 && p == N_POLICIES - 1 ? "" : ",");
        }
    }
    sl_free(res);
    return rc;
}

/* The JSON's head, the runs and its tail; the table and the jobs' CSV
 * with them, the trace's bound ratio and the log-normal traces' medians.
 * The exit status on error, else -1. */
static int report_runs(const options *o, const sl_eval_workload *w, size_t n_w,
                       const sl_eval_job_spec *jobs, double avg[2][N_POLICIES], double tail[3],
                       double *bound)
{
    FILE *jf, *cf;
    if (!sl_cli_create(o->c.json, &jf))
        return 1;
    if (!sl_cli_create(o->jobs_csv, &cf))
        return 1;
    if (jf)
        fprintf(jf,
                "{\n  \"bench\": \"eval_jct\", \"jobs\": %zu, \"seed\": %llu, "
                "\"interarrival_s\": %.3f, \"gpu\": \"%s\", \"lengths\": \"%s\", "
                "\"lengths_sigma\": %.3f,\n  \"runs\": [\n",
                o->n_jobs, (unsigned long long) o->c.seed, o->interarrival_s, o->c.gpu->name,
                o->sigma < 0 ? "csv" : "lognormal", o->sigma < 0 ? 0.0 : o->sigma);
    if (cf)
        fprintf(cf, "policy,variant,job,workload,arrival_s,admitted_s,start_s,finish_s,jct_s,"
                    "solo_s\n");
    int rc = run_policies(o, w, jobs, jf, cf, avg);
    bool ok = sl_cli_close(cf, o->jobs_csv) && rc == SL_OK;
    if (ok) {
        double bf = bound_fcfs_min(jobs, o->n_jobs), bs = bound_srpt_min(jobs, o->n_jobs);
        printf("reference (one server, whole jobs, no memory limit): fcfs avg_jct_min %.1f, srpt "
               "avg_jct_min %.1f, ratio %.2f\n",
               bf, bs, bf / bs);
        *bound = bf / bs;
    }
    bool tail_ran = ok && o->sigma < 0 && o->tail_seeds > 0;
    if (tail_ran && (rc = tail_runs(w, n_w, o->n_jobs, o->interarrival_s, o->c.seed, o->tail_seeds,
                                    o->c.gpu, tail)) != SL_OK) {
        (void) sl_cli_fail(rc, "the log-normal traces");
        ok = false;
    }
    if (jf) {
        fprintf(jf, "  ]");
        if (tail_ran && rc == SL_OK)
            fprintf(jf,
                    ",\n  \"tail\": {\"sigma\": %.3f, \"seeds\": %zu, \"ratio_median\": %.4f, "
                    "\"default_ratio_median\": %.4f, \"bound_median\": %.4f}",
                    TAIL_SIGMA, o->tail_seeds, tail[0], tail[1], tail[2]);
        fprintf(jf, "\n}\n");
    }
    ok &= sl_cli_close(jf, o->c.json);
    return ok ? -1 : 1;
}

int main(int argc, char **argv)
{
    options o = {.c = sl_cli_common_default(SL_CLI_WANT_SEED | SL_CLI_WANT_JSON | SL_CLI_WANT_GPU |
                                            SL_CLI_WANT_CSV),
                 .timing = "measured",
                 .n_jobs = 100,
                 .tail_seeds = 5,
                 .interarrival_s = 120,
                 .sigma = -1};
    const sl_cli_opt opts[] = {
        {"jobs", SL_CLI_SIZE, &o.n_jobs, 1, 1000000, NULL},
        {"interarrival-s", SL_CLI_DOUBLE, &o.interarrival_s, 0, 1e7, NULL},
        {"timing", SL_CLI_STR, &o.timing, 0, 0, NULL},
        {"jobs-csv", SL_CLI_STR, &o.jobs_csv, 0, 0, NULL},
        {"util", SL_CLI_CALL_ARG, &o, 0, 0, set_util},
        {"profiles", SL_CLI_STR, &o.profiles, 0, 0, NULL},
        {"lengths", SL_CLI_CALL_ARG, &o, 0, 0, set_lengths},
        {"tail-seeds", SL_CLI_SIZE, &o.tail_seeds, 0, TAIL_MAX_SEEDS, NULL},
    };
    int st = sl_cli_parse(argc, argv, usage, &o.c, opts, sizeof opts / sizeof opts[0]);
    if (st != SL_CLI_RUN)
        return st;
    sl_eval_workload *w;
    size_t n_w;
    if ((st = load(&o, &w, &n_w)) >= 0)
        return st;
    sl_eval_job_spec *jobs = sl_calloc(o.n_jobs, sizeof *jobs);
    if (!jobs || sl_eval_trace_salus(w, n_w, o.n_jobs, o.interarrival_s, o.c.seed, jobs) != SL_OK ||
        (o.sigma >= 0 &&
         sl_eval_trace_lognormal_lengths(w, n_w, o.sigma, o.c.seed, jobs, o.n_jobs) != SL_OK)) {
        fprintf(stderr, "salus51: cannot build the trace\n");
        return 1;
    }
    print_trace(&o, jobs, n_w);
    double avg[2][N_POLICIES], tail[3] = {0}, bound = 0;
    if ((st = report_runs(&o, w, n_w, jobs, avg, tail, &bound)) >= 0)
        return st;
    printf(
        "BENCH eval_jct fifo_avg_min=%.2f srtf_avg_min=%.2f ratio=%.2f "
        "default_fifo_avg_min=%.2f default_srtf_avg_min=%.2f default_ratio=%.2f bound_ratio=%.2f",
        avg[0][0], avg[0][1], avg[0][0] / avg[0][1], avg[1][0], avg[1][1], avg[1][0] / avg[1][1],
        bound);
    if (o.sigma < 0 && o.tail_seeds > 0)
        printf(" tail_ratio=%.2f tail_default_ratio=%.2f tail_bound=%.2f", tail[0], tail[1],
               tail[2]);
    printf("\n");
    sl_free(jobs);
    sl_free(w);
    return 0;
}
