/* eval/speed: how fast the simulator runs a cluster-sized trace.
 *
 *   speed [--csv FILE] [--jobs N] [--gpus G] [--interarrival-s X]
 *         [--policy NAME] [--seed S]
 *
 * Defaults: 10,000 jobs of the Salus mix on 512 P100s under srtf (salusd's
 * defaults), least-jobs placement, a Poisson arrival every 0.5 s (enough to
 * keep the cluster loaded). Last line:
 *   BENCH eval_speed jobs=... gpus=... wall_s=... events=... iterations=... */
#include "cli.h"
#include "evsim.h"
#include "sim/profiles.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_time.h"
#include "workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const char usage[] =
    "usage: %s [--csv FILE] [--jobs N] [--gpus G] [--interarrival-s X] [--policy NAME] "
    "[--seed S] [--json FILE]\n"
    "  simulates N jobs of the Salus mix (eval/data) on G P100s under salusd's defaults\n"
    "  for the policy, least-jobs placement, Poisson arrivals X s apart, and reports\n"
    "  the wall time of the run (one thread)\n"
    "defaults: 10000 jobs, 512 GPUs, interarrival 0.5 s, srtf, seed 1\n";

int main(int argc, char **argv)
{
    sl_cli_common c = sl_cli_common_default(SL_CLI_WANT_SEED | SL_CLI_WANT_JSON | SL_CLI_WANT_CSV);
    const char *policy = "srtf";
    size_t n_jobs = 10000;
    unsigned n_gpus = 512;
    double interarrival_s = 0.5;
    const sl_cli_opt opts[] = {
        {"jobs", SL_CLI_SIZE, &n_jobs, 1, 10000000, NULL},
        {"gpus", SL_CLI_UINT, &n_gpus, 1, 100000, NULL},
        {"interarrival-s", SL_CLI_DOUBLE, &interarrival_s, 0, 1e7, NULL},
        {"policy", SL_CLI_STR, &policy, 0, 0, NULL},
    };
    int st = sl_cli_parse(argc, argv, usage, &c, opts, sizeof opts / sizeof opts[0]);
    if (st != SL_CLI_RUN)
        return st;
    sl_eval_workload *w;
    size_t n_w;
    if (!sl_cli_workloads(&c, &w, &n_w))
        return 1;
    sl_eval_job_spec *jobs = sl_calloc(n_jobs, sizeof *jobs);
    if (!jobs || sl_eval_trace_salus(w, n_w, n_jobs, interarrival_s, c.seed, jobs) != SL_OK)
        return 1;
    sl_eval_config cfg = sl_eval_config_default(policy, false, n_gpus, c.gpu->capacity);
    sl_eval_summary sum;
    /* progress: the run is one call (a hook per iteration would be timed too) */
    fprintf(stderr, "speed: %zu jobs on %u GPUs (%s) ...\n", n_jobs, n_gpus, policy);
    double t0 = sl_now_s();
    int rc = sl_eval_run(&cfg, jobs, n_jobs, NULL, &sum);
    double wall = sl_now_s() - t0;
    if (rc != SL_OK)
        return sl_cli_fail(rc, "%s", policy);
    fprintf(stderr, "speed: done in %.1f s\n", wall);
    printf("%zu jobs on %u GPUs (%s): %zu completed, makespan %.1f h, mean JCT %.1f min; "
           "%llu events, %llu iterations, %.0f ns per event\n",
           n_jobs, n_gpus, policy, sum.completed, (double) sum.makespan_ns / 3.6e12,
           sum.avg_jct_ns / 6e10, (unsigned long long) sum.events,
           (unsigned long long) sum.iterations,
           wall * 1e9 / (double) (sum.events ? sum.events : 1));
    FILE *jf;
    if (!sl_cli_create(c.json, &jf))
        return 1;
    if (jf)
        fprintf(jf,
                "{\"bench\": \"eval_speed\", \"jobs\": %zu, \"gpus\": %u, \"policy\": \"%s\", "
                "\"wall_s\": %.3f, \"events\": %llu, \"iterations\": %llu, \"completed\": %zu}\n",
                n_jobs, n_gpus, policy, wall, (unsigned long long) sum.events,
                (unsigned long long) sum.iterations, sum.completed);
    if (!sl_cli_close(jf, c.json))
        return 1;
    printf("BENCH eval_speed jobs=%zu gpus=%u wall_s=%.2f events=%llu iterations=%llu\n", n_jobs,
           n_gpus, wall, (unsigned long long) sum.events, (unsigned long long) sum.iterations);
    sl_free(jobs);
    sl_free(w);
    return 0;
}
