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
#include "workload.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef SL_EVAL_CSV
#define SL_EVAL_CSV "eval/data/salus-workloads.csv"
#endif

static void usage(FILE *to, const char *argv0)
{
    fprintf(to,
            "usage: %s [--csv FILE] [--jobs N] [--gpus G] [--interarrival-s X] [--policy NAME] "
            "[--seed S] [--json FILE]\n"
            "  simulates N jobs of the Salus mix (eval/data) on G P100s under salusd's defaults\n"
            "  for the policy, least-jobs placement, Poisson arrivals X s apart, and reports\n"
            "  the wall time of the run (one thread)\n"
            "defaults: 10000 jobs, 512 GPUs, interarrival 0.5 s, srtf, seed 1\n",
            argv0);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    sl_cli_init(argv[0]);
    const char *csv = SL_EVAL_CSV, *policy = "srtf", *json_path = NULL;
    size_t n_jobs = 10000;
    unsigned n_gpus = 512;
    uint64_t seed = 1;
    double interarrival_s = 0.5;
    static const struct option longopts[] = {{"csv", required_argument, NULL, 'c'},
                                             {"jobs", required_argument, NULL, 'n'},
                                             {"gpus", required_argument, NULL, 'g'},
                                             {"interarrival-s", required_argument, NULL, 'i'},
                                             {"policy", required_argument, NULL, 'p'},
                                             {"seed", required_argument, NULL, 's'},
                                             {"json", required_argument, NULL, 'j'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    for (int ch; (ch = getopt_long(argc, argv, "c:n:g:i:p:s:j:h", longopts, NULL)) != -1;) {
        switch (ch) {
        case 'c':
            csv = optarg;
            break;
        case 'n':
            if (!sl_cli_size("--jobs", optarg, 1, 10000000, &n_jobs))
                return 2;
            break;
        case 'g':
            if (!sl_cli_uint("--gpus", optarg, 1, 100000, &n_gpus))
                return 2;
            break;
        case 'i':
            if (!sl_cli_double("--interarrival-s", optarg, 0, 1e7, &interarrival_s))
                return 2;
            break;
        case 'p':
            policy = optarg;
            break;
        case 's':
            if (!sl_cli_seed("--seed", optarg, &seed))
                return 2;
            break;
        case 'j':
            json_path = optarg;
            break;
        case 'h':
            usage(stdout, argv[0]);
            return 0;
        default:
            usage(stderr, argv[0]);
            return 2;
        }
    }
    if (!sl_cli_no_operands(argc, argv, optind))
        return 2;
    const sl_sim_profile *gpu;
    sl_eval_workload *w;
    size_t n_w;
    if (sl_sim_profile_find("p100", &gpu) != SL_OK || sl_eval_workloads_load(csv, &w, &n_w)) {
        fprintf(stderr, "speed: cannot load %s\n", csv);
        return 1;
    }
    sl_eval_job_spec *jobs = sl_calloc(n_jobs ? n_jobs : 1, sizeof *jobs);
    if (!jobs || sl_eval_trace_salus(w, n_w, n_jobs, interarrival_s, seed, jobs) != SL_OK)
        return 1;
    sl_eval_config cfg = sl_eval_config_default(policy, false, n_gpus, gpu->capacity);
    sl_eval_summary sum;
    /* progress: the run is one call (a hook per iteration would be timed too) */
    fprintf(stderr, "speed: %zu jobs on %u GPUs (%s) ...\n", n_jobs, n_gpus, policy);
    double t0 = now_s();
    int rc = sl_eval_run(&cfg, jobs, n_jobs, NULL, &sum);
    double wall = now_s() - t0;
    if (rc != SL_OK) {
        fprintf(stderr, "speed: %s\n", sl_strerror(rc));
        return 1;
    }
    fprintf(stderr, "speed: done in %.1f s\n", wall);
    printf("%zu jobs on %u GPUs (%s): %zu completed, makespan %.1f h, mean JCT %.1f min; "
           "%llu events, %llu iterations, %.0f ns per event\n",
           n_jobs, n_gpus, policy, sum.completed, (double) sum.makespan_ns / 3.6e12,
           sum.avg_jct_ns / 6e10, (unsigned long long) sum.events,
           (unsigned long long) sum.iterations,
           wall * 1e9 / (double) (sum.events ? sum.events : 1));
    FILE *jf = json_path ? fopen(json_path, "w") : NULL;
    if (jf) {
        fprintf(jf,
                "{\"bench\": \"eval_speed\", \"jobs\": %zu, \"gpus\": %u, \"policy\": \"%s\", "
                "\"wall_s\": %.3f, \"events\": %llu, \"iterations\": %llu, \"completed\": %zu}\n",
                n_jobs, n_gpus, policy, wall, (unsigned long long) sum.events,
                (unsigned long long) sum.iterations, sum.completed);
        fclose(jf);
    }
    printf("BENCH eval_speed jobs=%zu gpus=%u wall_s=%.2f events=%llu iterations=%llu\n", n_jobs,
           n_gpus, wall, (unsigned long long) sum.events, (unsigned long long) sum.iterations);
    sl_free(jobs);
    sl_free(w);
    return 0;
}
