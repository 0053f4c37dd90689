/* eval/switchcost: the Salus section 5.1 trace (salus51) re-run under srtf
 * with a cost on every switch: when a lane starts an iteration of a job
 * other than the one it ran last, the iteration waits for the switch
 * (evsim.h switch_cost_ns, switch_ns_per_byte). Cases:
 *   none        salusd's model: persistent state stays resident, free;
 *   salus       26 us: the magnitude of salus's measured switch cost
 *               (README, bench/switch: -26 us, within noise of the same
 *               job continuing), charged as a cost to be conservative;
 *   pipeswitch  5 ms and 35 ms: the range of PipeSwitch's reported
 *               switching overheads (Bai et al., OSDI 2020), fixed;
 *   checkpoint  save the outgoing job's persistent bytes and restore the
 *               incoming job's at the profile's PCIe bandwidth, one after
 *               the other (kernels/sim pcie_bw: 12 GB/s on P100).
 * Each under the paper variant (--strict --spread-limit 0: one lane, 76
 * switches on seed 1) and salusd's defaults (work-conserving: the lane is
 * lent during every client gap, ~300k switches), with strict fifo's
 * average JCT (no switches to speak of) for the ratio.
 *
 *   switchcost [--jobs N] [--seed S] [--interarrival-s X] [--gpu PROFILE]
 *              [--csv FILE] [--json FILE] [--tiny] [--sweep]
 * --sweep: also the paper variant's srtf and fifo average JCT under fixed
 * costs from 0 to 50 ms, to tell a trend from the noise of one trace.
 * Last line: BENCH eval_switch none_avg_min=... salus_avg_min=...
 *   pipeswitch5_avg_min=... pipeswitch35_avg_min=... checkpoint_avg_min=...
 *   (srtf, paper variant) */
#include "cli.h"
#include "evsim.h"
#include "sim/profiles.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: %s [--jobs N (100)] [--seed S] [--interarrival-s X (120)] "
    "[--gpu PROFILE (p100)] [--csv FILE] [--json FILE] [--tiny] [--sweep]\n";

static const struct {
    const char *name;
    uint64_t fixed_ns;
    bool per_byte;
} cases[] = {
    {"none", 0, false},
    {"salus", 26000, false},
    {"pipeswitch5", 5000000, false},
    {"pipeswitch35", 35000000, false},
    {"checkpoint", 0, true},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

typedef struct options {
    sl_cli_common c;
    size_t n_jobs;
    double interarrival_s;
    bool tiny, sweep;
} options;

/* The trace; with --tiny 12 jobs, 1/100 of the iterations at 100x the
 * rate (the test's shortening). NULL after a line on stderr. */
static sl_eval_job_spec *trace(options *o)
{
    sl_eval_workload *w;
    size_t n_w;
    if (!sl_cli_workloads(&o->c, &w, &n_w))
        return NULL;
    if (o->tiny)
        o->n_jobs = 12;
    sl_eval_job_spec *jobs = sl_calloc(o->n_jobs, sizeof *jobs);
    if (!jobs ||
        sl_eval_trace_salus(w, n_w, o->n_jobs, o->interarrival_s, o->c.seed, jobs) != SL_OK) {
        fprintf(stderr, "switchcost: cannot build the trace\n");
        sl_free(jobs);
        jobs = NULL;
    }
    for (size_t i = 0; jobs && o->tiny && i < o->n_jobs; i++) {
        jobs[i].iterations = jobs[i].iterations / 100 > 2 ? jobs[i].iterations / 100 : 2;
        jobs[i].arrival_ns /= 100;
    }
    sl_free(w);
    return jobs;
}

/* Every case in both variants (table and JSON rows): avg[case][variant]. */
static int run_cases(const options *o, const sl_eval_job_spec *jobs, FILE *jf,
                     double avg[N_CASES][2])
{
    const sl_sim_profile *gpu = o->c.gpu;
    double ns_per_byte = 1e9 / gpu->pcie_bw;
    printf("Salus 5.1 trace: %zu jobs, seed %llu, one %s; srtf with a cost per switch "
           "(checkpoint: %.4f ns per byte saved or restored, PCIe %.1f GB/s)\n",
           o->n_jobs, (unsigned long long) o->c.seed, gpu->name, ns_per_byte, gpu->pcie_bw / 1e9);
    printf("%-13s %-6s %12s %12s %12s %10s %14s\n", "switch", "variant", "avg_jct_min",
           "p95_jct_min", "makespan_min", "switches", "switch_time_min");
    for (int v = 0; v < 2; v++) {
        for (int c = 0; c < N_CASES; c++) {
            sl_eval_config cfg = sl_eval_config_default("srtf", v == 0, 1, gpu->capacity);
            cfg.spread_set = v == 0;
            cfg.switch_cost_ns = cases[c].fixed_ns;
            cfg.switch_ns_per_byte = cases[c].per_byte ? ns_per_byte : 0;
            sl_eval_summary sum;
            int rc = sl_eval_run(&cfg, jobs, o->n_jobs, NULL, &sum);
            if (rc != SL_OK || sum.completed != o->n_jobs)
                return sl_cli_fail(rc, "%s", cases[c].name);
            avg[c][v] = sum.avg_jct_ns / 6e10;
            const char *vname = v == 0 ? "paper" : "salus";
            printf("%-13s %-6s %12.1f %12.1f %12.1f %10llu %14.2f\n", cases[c].name, vname,
                   avg[c][v], (double) sum.p95_jct_ns / 6e10, (double) sum.makespan_ns / 6e10,
                   (unsigned long long) sum.lane_switches, (double) sum.switch_ns / 6e10);
            if (jf)
                fprintf(jf,
                        "  {\"switch\": \"%s\", \"variant\": \"%s\", \"avg_jct_min\": %.3f, "
                        "\"p95_jct_min\": %.3f, \"makespan_min\": %.3f, \"switches\": %llu, "
                        "\"switch_min\": %.3f},\n",
                        cases[c].name, vname, avg[c][v], (double) sum.p95_jct_ns / 6e10,
                        (double) sum.makespan_ns / 6e10, (unsigned long long) sum.lane_switches,
                        (double) sum.switch_ns / 6e10);
            fprintf(stderr, "switchcost: %s %s done\n", cases[c].name, vname);
        }
    }
    return -1;
}

/* The mean JCT in minutes of policy in the paper variant with a fixed
 * cost per switch; < 0 on error. */
static double paper_avg_min(const options *o, const sl_eval_job_spec *jobs, const char *policy,
                            double switch_ms)
{
    sl_eval_config cfg = sl_eval_config_default(policy, true, 1, o->c.gpu->capacity);
    cfg.spread_set = true;
    cfg.switch_cost_ns = (uint64_t) (switch_ms * 1e6);
    sl_eval_summary sum;
    return sl_eval_run(&cfg, jobs, o->n_jobs, NULL, &sum) == SL_OK ? sum.avg_jct_ns / 6e10 : -1;
}

static bool tiny(void *dst, const char *arg)
{
    (void) arg;
    ((options *) dst)->tiny = true;
    return true;
}

int main(int argc, char **argv)
{
    options o = {.c = sl_cli_common_default(SL_CLI_WANT_SEED | SL_CLI_WANT_JSON | SL_CLI_WANT_GPU |
                                            SL_CLI_WANT_CSV),
                 .n_jobs = 100,
                 .interarrival_s = 120};
    const sl_cli_opt opts[] = {
        {"jobs", SL_CLI_SIZE, &o.n_jobs, 1, 1000000, NULL},
        {"interarrival-s", SL_CLI_DOUBLE, &o.interarrival_s, 0, 1e7, NULL},
        {"tiny", SL_CLI_CALL, &o, 0, 0, tiny},
        {"sweep", SL_CLI_SET, &o.sweep, 0, 0, NULL},
    };
    int st = sl_cli_parse(argc, argv, usage, &o.c, opts, sizeof opts / sizeof opts[0]);
    if (st != SL_CLI_RUN)
        return st;
    sl_eval_job_spec *jobs = trace(&o);
    FILE *jf;
    if (!jobs || !sl_cli_create(o.c.json, &jf))
        return 1;
    if (jf)
        fprintf(jf, "{\"bench\": \"eval_switch\", \"jobs\": %zu, \"seed\": %llu, \"runs\": [\n",
                o.n_jobs, (unsigned long long) o.c.seed);
    double avg[N_CASES][2], fifo_avg;
    if ((st = run_cases(&o, jobs, jf, avg)) >= 0 ||
        (fifo_avg = paper_avg_min(&o, jobs, "fifo", 0)) < 0)
        return 1;
    printf("strict fifo (paper variant, no switch cost): avg_jct_min %.1f; srtf/fifo ratio per "
           "case (paper variant):",
           fifo_avg);
    for (int c = 0; c < N_CASES; c++)
        printf(" %s %.2f", cases[c].name, fifo_avg / avg[c][0]);
    printf("\n");
    if (jf)
        fprintf(jf,
                "  {\"switch\": \"fifo-reference\", \"variant\": \"paper\", "
                "\"avg_jct_min\": %.3f}\n]}\n",
                fifo_avg);
    if (!sl_cli_close(jf, o.c.json))
        return 1;
    static const double sweep_ms[] = {0, 0.1, 1, 2, 5, 10, 20, 35, 50};
    for (size_t k = 0; o.sweep && k < sizeof sweep_ms / sizeof sweep_ms[0]; k++) {
        double srtf = paper_avg_min(&o, jobs, "srtf", sweep_ms[k]);
        double fifo = paper_avg_min(&o, jobs, "fifo", sweep_ms[k]);
        if (srtf < 0 || fifo < 0)
            return 1;
        printf("sweep: %5.1f ms per switch: srtf avg_jct_min %.2f, fifo %.2f, ratio %.3f\n",
               sweep_ms[k], srtf, fifo, fifo / srtf);
    }
    printf("BENCH eval_switch");
    for (int c = 0; c < N_CASES; c++)
        printf(" %s_avg_min=%.2f", cases[c].name, avg[c][0]);
    for (int c = 0; c < N_CASES; c++)
        printf(" default_%s_avg_min=%.2f", cases[c].name, avg[c][1]);
    printf("\n");
    sl_free(jobs);
    return 0;
}
