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

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SL_EVAL_CSV
#define SL_EVAL_CSV "eval/data/salus-workloads.csv"
#endif

int main(int argc, char **argv)
{
    sl_cli_init(argv[0]);
    const char *csv = SL_EVAL_CSV, *gpu_name = "p100", *json_path = NULL;
    size_t n_jobs = 100;
    uint64_t seed = 1;
    double interarrival_s = 120;
    bool tiny = false, sweep = false;
    static const struct option longopts[] = {{"jobs", required_argument, NULL, 'n'},
                                             {"seed", required_argument, NULL, 's'},
                                             {"interarrival-s", required_argument, NULL, 'i'},
                                             {"gpu", required_argument, NULL, 'g'},
                                             {"csv", required_argument, NULL, 'c'},
                                             {"json", required_argument, NULL, 'j'},
                                             {"tiny", no_argument, NULL, 't'},
                                             {"help", no_argument, NULL, 'h'},
                                             {"sweep", no_argument, NULL, 'w'},
                                             {NULL, 0, NULL, 0}};
    for (int ch; (ch = getopt_long(argc, argv, "n:s:i:g:c:j:thw", longopts, NULL)) != -1;) {
        switch (ch) {
        case 'n':
            if (!sl_cli_size("--jobs", optarg, 1, 1000000, &n_jobs))
                return 2;
            break;
        case 's':
            if (!sl_cli_seed("--seed", optarg, &seed))
                return 2;
            break;
        case 'i':
            if (!sl_cli_double("--interarrival-s", optarg, 0, 1e7, &interarrival_s))
                return 2;
            break;
        case 'g':
            gpu_name = optarg;
            break;
        case 'c':
            csv = optarg;
            break;
        case 'j':
            json_path = optarg;
            break;
        case 't':
            tiny = true;
            break;
        case 'w':
            sweep = true;
            break;
        default:
            fprintf(stderr,
                    "usage: %s [--jobs N (100)] [--seed S] [--interarrival-s X (120)] "
                    "[--gpu PROFILE (p100)] [--csv FILE] [--json FILE] [--tiny] [--sweep]\n",
                    argv[0]);
            return ch == 'h' ? 0 : 2;
        }
    }
    if (!sl_cli_no_operands(argc, argv, optind))
        return 2;
    const sl_sim_profile *gpu;
    if (!sl_cli_gpu(gpu_name, &gpu))
        return 2;
    sl_eval_workload *w;
    size_t n_w;
    int rc = sl_eval_workloads_load(csv, &w, &n_w);
    if (rc != SL_OK) {
        fprintf(stderr, "switchcost: cannot load %s: %s\n", csv, sl_strerror(rc));
        return 1;
    }
    if (tiny)
        n_jobs = 12;
    sl_eval_job_spec *jobs = sl_calloc(n_jobs, sizeof *jobs);
    if (!jobs || sl_eval_trace_salus(w, n_w, n_jobs, interarrival_s, seed, jobs) != SL_OK)
        return 1;
    if (tiny) /* the test's shortening: 1/100 of the iterations, 100x the rate */
        for (size_t i = 0; i < n_jobs; i++) {
            jobs[i].iterations = jobs[i].iterations / 100 > 2 ? jobs[i].iterations / 100 : 2;
            jobs[i].arrival_ns /= 100;
        }
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
    double ns_per_byte = 1e9 / gpu->pcie_bw;
    printf("Salus 5.1 trace: %zu jobs, seed %llu, one %s; srtf with a cost per switch "
           "(checkpoint: %.4f ns per byte saved or restored, PCIe %.1f GB/s)\n",
           n_jobs, (unsigned long long) seed, gpu->name, ns_per_byte, gpu->pcie_bw / 1e9);
    printf("%-13s %-6s %12s %12s %12s %10s %14s\n", "switch", "variant", "avg_jct_min",
           "p95_jct_min", "makespan_min", "switches", "switch_time_min");
    FILE *jf = json_path ? fopen(json_path, "w") : NULL;
    if (jf)
        fprintf(jf, "{\"bench\": \"eval_switch\", \"jobs\": %zu, \"seed\": %llu, \"runs\": [\n",
                n_jobs, (unsigned long long) seed);
    double avg[N_CASES][2], fifo_avg = 0;
    for (int v = 0; v < 2; v++) {
        for (int c = 0; c < N_CASES; c++) {
            sl_eval_config cfg = sl_eval_config_default("srtf", v == 0, 1, gpu->capacity);
            cfg.spread_set = v == 0;
            cfg.switch_cost_ns = cases[c].fixed_ns;
            cfg.switch_ns_per_byte = cases[c].per_byte ? ns_per_byte : 0;
            sl_eval_summary sum;
            if ((rc = sl_eval_run(&cfg, jobs, n_jobs, NULL, &sum)) != SL_OK ||
                sum.completed != n_jobs) {
                fprintf(stderr, "switchcost: %s: %s\n", cases[c].name, sl_strerror(rc));
                return 1;
            }
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
    sl_eval_config cfg = sl_eval_config_default("fifo", true, 1, gpu->capacity);
    cfg.spread_set = true;
    sl_eval_summary sum;
    if (sl_eval_run(&cfg, jobs, n_jobs, NULL, &sum) != SL_OK)
        return 1;
    fifo_avg = sum.avg_jct_ns / 6e10;
    printf("strict fifo (paper variant, no switch cost): avg_jct_min %.1f; srtf/fifo ratio per "
           "case (paper variant):",
           fifo_avg);
    for (int c = 0; c < N_CASES; c++)
        printf(" %s %.2f", cases[c].name, fifo_avg / avg[c][0]);
    printf("\n");
    if (jf) {
        fprintf(jf,
                "  {\"switch\": \"fifo-reference\", \"variant\": \"paper\", "
                "\"avg_jct_min\": %.3f}\n]}\n",
                fifo_avg);
        fclose(jf);
    }
    static const double sweep_ms[] = {0, 0.1, 1, 2, 5, 10, 20, 35, 50};
    for (size_t k = 0; sweep && k < sizeof sweep_ms / sizeof sweep_ms[0]; k++) {
        double a[2];
        for (int p = 0; p < 2; p++) {
            sl_eval_config sc = sl_eval_config_default(p ? "fifo" : "srtf", true, 1, gpu->capacity);
            sc.spread_set = true;
            sc.switch_cost_ns = (uint64_t) (sweep_ms[k] * 1e6);
            if (sl_eval_run(&sc, jobs, n_jobs, NULL, &sum) != SL_OK)
                return 1;
            a[p] = sum.avg_jct_ns / 6e10;
        }
        printf("sweep: %5.1f ms per switch: srtf avg_jct_min %.2f, fifo %.2f, ratio %.3f\n",
               sweep_ms[k], a[0], a[1], a[1] / a[0]);
    }
    printf("BENCH eval_switch");
    for (int c = 0; c < N_CASES; c++)
        printf(" %s_avg_min=%.2f", cases[c].name, avg[c][0]);
    for (int c = 0; c < N_CASES; c++)
        printf(" default_%s_avg_min=%.2f", cases[c].name, avg[c][1]);
    printf("\n");
    sl_free(jobs);
    sl_free(w);
    return 0;
}
