/* FIKIT on the simulator: a batch-1 high-priority (hp) inference job with
 * Poisson request arrivals beside low-priority (lp) training jobs on one
 * simulated GPU, run op by op through salusd's own lane hand-off, step
 * dispatcher and gap filler (sched/lanes.h, steps.h, gaps.h).
 *
 *   fikit [--gpu PROFILE] [--hp-model M] [--lp-model M] [--lp-batch B]
 *         [--lp-jobs N] [--qps Q] [--requests N] [--seed S] [--json FILE]
 *         [--tiny]
 *
 * Configurations: hp alone; lp alone (the throughput baseline); plain
 * sharing (policy fair: no classes, every job in its own lane, the device
 * shared); priority without filling (policy priority --no-gap-fill: lp
 * ops only while no hp work is pending); salus's gap filling (policy
 * priority) with fit margins 0, 5 and 10 %; and, beside FIKIT's set,
 * compute partitions with gap filling (salusd --partitions auto:N, the
 * rest of salusd's defaults, as eval/drivers/spatial.c runs it: hp on an online
 * partition sized by sched/partition.h from its declared need N, the
 * fewest SMs on which its request runs within NEED_SLACK of its time on
 * the whole device; lp op by op on the rest and, while hp is idle, into
 * the online partition when one of its blocks there is within the default
 * margin of a request).
 *
 * Profiles (computed, eval/lib/graphs.h, on --gpu): hp = the forward part of
 * the model's batch-1 training iteration (every op before the loss), lp =
 * the model's training iteration at --lp-batch. Memory: hp persistent =
 * its parameters x 4 B, ephemeral salusd's default (assumption: a batch-1
 * forward needs far less than capacity/8); lp from the Salus CSV's peak
 * for that model and batch when it has the row, else salusd's default. */
#include "cli.h"
#include "graphs.h"
#include "evsim.h"
#include "workload.h"

#include "gaps.h"
#include "partition.h"
#include "sl_alloc.h"
#include "sl_error.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* FIKIT's published figures (FIKIT paper, abstract and evaluation): hp
 * jobs 1.32-16.41x faster than under plain sharing, lp throughput 0.86-1x
 * of running alone, scheduling overhead under 5 %. */
#define PAPER_HP_MIN 1.32
#define PAPER_HP_MAX 16.41
#define PAPER_LP_MIN 0.86
#define PAPER_OVERHEAD_PCT 5.0
/* the declared need's slack (eval/drivers/spatial.c's and eval/drivers/muxflow.c's) */
#define NEED_SLACK 0.02

enum { C_HP_ALONE, C_LP_ALONE, C_SHARE, C_PRIO, C_FILL0, C_FILL5, C_FILL10, C_PART_GAP, N_CONFIGS };

typedef struct config {
    const char *name, *policy;
    bool hp, lp, no_gap_fill;
    double margin;
    bool partitions;
} config;

static const config configs[N_CONFIGS] = {
    {"hp alone", "priority", true, false, false, 0, false},
    {"lp alone", "priority", false, true, false, 0, false},
    {"plain sharing", "fair", true, true, false, 0, false},
    {"priority, no filling", "priority", true, true, true, 0, false},
    {"gap filling 0%", "priority", true, true, false, 0, false},
    {"gap filling 5%", "priority", true, true, false, 0.05, false},
    {"gap filling 10%", "priority", true, true, false, 0.10, false},
    {"partitions+gap fill", "priority", true, true, false, 0.05, true},
};

/* The hp job's latencies are in its result (evsim.h request_ns); what the
 * results do not hold is how many lp iterations completed inside the hp
 * job's window, counted here. */
typedef struct run_state {
    uint64_t window_end; /* lp iterations are counted up to here */
    uint64_t lp_iters;
} run_state;

static void on_done(void *arg, unsigned gpu, uint64_t job_id, uint64_t iteration,
                    uint64_t request_ns, uint64_t now_ns)
{
    (void) gpu;
    (void) iteration;
    (void) request_ns;
    run_state *r = arg;
    if (job_id != 1 && now_ns <= r->window_end)
        r->lp_iters++;
}

/* Op timeline of ops[from, to) as the simulator's ops, with their shapes
 * for the partition model in *shapes (sl_free; NULL on failure). */
static sl_eval_op *to_ops(const sl_eval_timeline *t, size_t from, size_t to, uint64_t *sum,
                          sl_eval_op_shape **shapes)
{
    sl_eval_op *o = sl_calloc(to - from, sizeof *o);
    sl_eval_op_shape *sh = sl_calloc(to - from, sizeof *sh);
    *shapes = sh;
    if (!sh) {
        sl_free(o);
        return NULL;
    }
    for (size_t i = from; i < to; i++)
        sh[i - from] = (sl_eval_op_shape){.compute_ns = t->ops[i].compute_ns,
                                          .memory_ns = t->ops[i].memory_ns,
                                          .waves = t->ops[i].waves};
    *sum = 0;
    for (size_t i = from; o && i < to; i++) {
        o[i - from] = (sl_eval_op){.launch_ns = t->ops[i].launch_ns,
                                   .work_ns = t->ops[i].ns - t->ops[i].launch_ns,
                                   .split_max = t->ops[i].split_max,
                                   .occupancy = t->ops[i].occupancy,
                                   .block_ns = t->ops[i].block_ns};
        *sum += t->ops[i].ns;
    }
    return o;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--gpu PROFILE] [--hp-model M] [--lp-model M] [--lp-batch B] "
            "[--lp-jobs N] [--qps Q] [--requests N] [--seed S] [--json FILE] [--tiny] "
            "[--serial-launch]\n"
            "  a batch-1 hp inference job (Poisson requests) beside lp training on one GPU:\n"
            "  hp alone, plain sharing, priority without filling, gap filling 0/5/10 %%\n"
            "  --serial-launch: each op launched after the one before it completed (the\n"
            "  default launches a whole iteration's ops back to back, as salusd submits it)\n",
            argv0);
}

int main(int argc, char **argv)
{
    sl_cli_init(argv[0]);
    const char *gpu_name = "p100", *hp_model = "resnet50", *lp_model = "resnet50",
               *json_path = NULL;
    unsigned lp_batch = 32, lp_jobs = 2;
    size_t n_req = 2000;
    double qps = 40;
    uint64_t seed = 1;
    bool pipelined = true;
    static const struct option longopts[] = {{"gpu", required_argument, NULL, 'g'},
                                             {"hp-model", required_argument, NULL, 'h'},
                                             {"lp-model", required_argument, NULL, 'l'},
                                             {"lp-batch", required_argument, NULL, 'b'},
                                             {"lp-jobs", required_argument, NULL, 'n'},
                                             {"qps", required_argument, NULL, 'q'},
                                             {"requests", required_argument, NULL, 'r'},
                                             {"seed", required_argument, NULL, 's'},
                                             {"json", required_argument, NULL, 'j'},
                                             {"tiny", no_argument, NULL, 't'},
                                             {"help", no_argument, NULL, 'H'},
                                             {"serial-launch", no_argument, NULL, 'P'},
                                             {NULL, 0, NULL, 0}};
    for (int ch; (ch = getopt_long(argc, argv, "", longopts, NULL)) != -1;) {
        switch (ch) {
        case 'g':
            gpu_name = optarg;
            break;
        case 'h':
            hp_model = optarg;
            break;
        case 'l':
            lp_model = optarg;
            break;
        case 'b':
            if (!sl_cli_uint("--lp-batch", optarg, 1, 4096, &lp_batch))
                return 2;
            break;
        case 'n':
            if (!sl_cli_uint("--lp-jobs", optarg, 1, 64, &lp_jobs))
                return 2;
            break;
        case 'q':
            if (!sl_cli_double_above("--qps", optarg, 0, 1e6, &qps))
                return 2;
            break;
        case 'r':
            if (!sl_cli_size("--requests", optarg, 1, 10000000, &n_req))
                return 2;
            break;
        case 's':
            if (!sl_cli_seed("--seed", optarg, &seed))
                return 2;
            break;
        case 'j':
            json_path = optarg;
            break;
        case 't':
            n_req = 60;
            break;
        case 'P':
            pipelined = false;
            break;
        case 'H':
            usage(argv[0]);
            return 0;
        default:
            usage(argv[0]);
            return 2;
        }
    }
    if (!sl_cli_no_operands(argc, argv, optind))
        return 2;
    const sl_sim_profile *gpu;
    if (!sl_cli_gpu(gpu_name, &gpu))
        return 2;
    sl_eval_timeline ht = {0}, lt = {0};
    int rc = sl_eval_timeline_build(hp_model, 1, gpu, &ht);
    if (rc == SL_OK)
        rc = sl_eval_timeline_build(lp_model, lp_batch, gpu, &lt);
    if (rc != SL_OK) {
        fprintf(stderr, "fikit: cannot build %s/%s on %s: %s\n", hp_model, lp_model, gpu->name,
                sl_strerror(rc));
        return 1;
    }
    /* inference: the forward ops, everything before the loss */
    size_t fwd = 0;
    while (fwd < ht.n_ops && ht.ops[fwd].kind != SL_EVAL_LOSS)
        fwd++;
    uint64_t hp_ns, lp_ns;
    sl_eval_op_shape *hp_shapes, *lp_shapes;
    sl_eval_op *hp_ops = to_ops(&ht, 0, fwd, &hp_ns, &hp_shapes);
    sl_eval_op *lp_ops = to_ops(&lt, 0, lt.n_ops, &lp_ns, &lp_shapes);
    /* the hp job's declared need: of its forward ops (a view of the
     * timeline's first fwd ops) */
    unsigned min_sms, align;
    sl_eval_part_granularity(gpu, &min_sms, &align);
    sl_eval_timeline hp_view = ht;
    hp_view.n_ops = fwd;
    unsigned need =
        sl_eval_timeline_need_sms_ex(&hp_view, gpu, min_sms, align, NEED_SLACK, pipelined);
    uint64_t lp_op_ns = lp_ns; /* serial: the sum of its ops, for the mean op */
    if (pipelined) {
        hp_ns = sl_eval_timeline_pipelined_ns(&hp_view);
        lp_ns = sl_eval_timeline_pipelined_ns(&lt);
    }
    sl_part_plan_config plan = sl_part_plan_config_default(gpu->sm_count, min_sms, align);
    /* lp memory from the Salus CSV's measured peak of that model and batch */
    uint64_t lp_p = lt.params * 4, lp_e = 0;
    sl_eval_workload *w;
    size_t n_w;
    if (sl_eval_workloads_load(SL_EVAL_CSV, &w, &n_w) == SL_OK) {
        for (size_t i = 0; i < n_w; i++)
            if (!strcmp(w[i].model, lp_model) && w[i].batch == lp_batch && w[i].peak_bytes > lp_p)
                lp_e = w[i].peak_bytes - lp_p;
        sl_free(w);
    }

    /* hp requests: Poisson at qps */
    uint64_t *req = sl_calloc(n_req, sizeof *req);
    if (!hp_ops || !lp_ops || !req)
        return 1;
    printf("fikit: compute partitions: hp declares %u of %u SMs (its request within %.0f %% of "
           "its time on the whole device)\n",
           need, gpu->sm_count, 100 * NEED_SLACK);
    printf("fikit: launches: %s\n",
           pipelined ? "a whole iteration's all at its start, back to back (pipelined)"
                     : "each op's after the one before it completed");
    sl_eval_rng rng;
    sl_eval_rng_seed(&rng, seed);
    double t = 0;
    for (size_t i = 0; i < n_req; i++) {
        t += sl_eval_rng_exp(&rng, 1e9 / qps);
        req[i] = (uint64_t) t;
    }
    uint64_t window = req[n_req - 1];
    uint64_t lp_iters = window / lp_ns * 2 + 8; /* outlasts the window even slowed 2x */

    sl_eval_job_spec jobs[1 + 64];
    if (lp_jobs > 64)
        lp_jobs = 64;
    jobs[0] = (sl_eval_job_spec){.id = 1,
                                 .iterations = n_req,
                                 .iteration_ns = hp_ns,
                                 .persistent_bytes = ht.params * 4,
                                 .priority = 10,
                                 .ops = hp_ops,
                                 .op_shapes = hp_shapes,
                                 .n_ops = (uint32_t) fwd,
                                 .request_ns = req};
    for (unsigned k = 0; k < lp_jobs; k++)
        jobs[1 + k] = (sl_eval_job_spec){.id = 2 + k,
                                         .iterations = lp_iters,
                                         .iteration_ns = lp_ns,
                                         .persistent_bytes = lp_p,
                                         .ephemeral_bytes = lp_e,
                                         .ops = lp_ops,
                                         .op_shapes = lp_shapes,
                                         .n_ops = (uint32_t) lt.n_ops};

    printf("fikit: one %s; hp %s batch 1 inference (%zu forward ops, %.3f ms alone), %.0f "
           "requests/s Poisson, %zu requests (%.1f s); lp %u x %s batch %u training (%zu ops, "
           "%.1f ms per iteration alone, mean op %.1f us); seed %llu\n",
           gpu->name, hp_model, fwd, (double) hp_ns / 1e6, qps, n_req, (double) window / 1e9,
           lp_jobs, lp_model, lp_batch, lt.n_ops, (double) lp_ns / 1e6,
           (double) lp_op_ns / (double) lt.n_ops / 1e3, (unsigned long long) seed);
    printf("%-21s %9s %9s %8s %8s %9s %9s %8s %7s %11s\n", "config", "hp_p50_ms", "hp_p99_ms",
           "p50_x", "p99_x", "lp_it/s", "lp_kept", "lp_steps", "max_lp", "us/decision");

    double p50[N_CONFIGS] = {0}, p99[N_CONFIGS] = {0}, lp_rate[N_CONFIGS] = {0};
    double per_decision_ns[N_CONFIGS] = {0};
    FILE *jf = json_path ? fopen(json_path, "w") : NULL;
    if (jf)
        fprintf(jf,
                "{\n  \"bench\": \"eval_fikit\", \"gpu\": \"%s\", \"seed\": %llu, \"qps\": %.3f, "
                "\"requests\": %zu, \"hp\": \"%s\", \"lp\": \"%s\", \"lp_batch\": %u, "
                "\"lp_jobs\": %u,\n  \"runs\": [\n",
                gpu->name, (unsigned long long) seed, qps, n_req, hp_model, lp_model, lp_batch,
                lp_jobs);
    for (int c = 0; c < N_CONFIGS; c++) {
        const config *cf = &configs[c];
        fprintf(stderr, "fikit: %s\n", cf->name);
        sl_gaps_config gc = sl_gaps_config_default();
        gc.fit_margin = cf->margin;
        sl_eval_config cfg = sl_eval_config_default(cf->policy, false, 1, gpu->capacity);
        cfg.gaps = &gc;
        cfg.no_gap_fill = cf->no_gap_fill;
        cfg.measure_decisions = true;
        cfg.pipelined_launches = pipelined;
        if (cf->partitions) {
            cfg.part_sms = gpu->sm_count;
            cfg.part_online = need;
            cfg.part_plan = &plan;
            cfg.part_spill_block_ns = (uint64_t) (gc.fit_margin * (double) hp_ns);
        }
        run_state st = {.window_end = window};
        cfg.on_done = on_done;
        cfg.arg = &st;
        const sl_eval_job_spec *js = cf->hp ? jobs : jobs + 1;
        size_t nj = (cf->hp ? 1 : 0) + (cf->lp ? lp_jobs : 0);
        sl_eval_summary sum;
        sl_eval_job_result res[1 + 64];
        rc = sl_eval_run(&cfg, js, nj, res, &sum);
        if (rc != SL_OK) {
            fprintf(stderr, "fikit: %s: %s\n", cf->name, sl_strerror(rc));
            return 1;
        }
        p50[c] = cf->hp ? (double) res[0].lat_p50_ns : 0;
        p99[c] = cf->hp ? (double) res[0].lat_p99_ns : 0;
        lp_rate[c] = (double) st.lp_iters / ((double) window / 1e9);
        per_decision_ns[c] = sum.decisions ? (double) sum.decision_wall_ns / sum.decisions : 0;
        double x50 = cf->hp ? p50[c] / p50[C_HP_ALONE] : 0,
               x99 = cf->hp ? p99[c] / p99[C_HP_ALONE] : 0;
        double kept = cf->lp && lp_rate[C_LP_ALONE] > 0 ? lp_rate[c] / lp_rate[C_LP_ALONE] : 0;
        printf("%-21s %9.3f %9.3f %8.2f %8.2f %9.2f %9.3f %8llu %7u %11.3f\n", cf->name,
               p50[c] / 1e6, p99[c] / 1e6, x50, x99, lp_rate[c], kept,
               (unsigned long long) sum.lp_steps, sum.lp_in_flight_max, per_decision_ns[c] / 1e3);
        if (jf)
            fprintf(jf,
                    "    {\"config\": \"%s\", \"hp_p50_ms\": %.4f, \"hp_p99_ms\": %.4f, "
                    "\"hp_p50_inflation\": %.4f, \"hp_p99_inflation\": %.4f, \"lp_iter_per_s\": "
                    "%.4f, \"lp_retained\": %.4f, \"lp_steps\": %llu, \"lp_in_flight_max\": %u, "
                    "\"decisions\": %llu, \"ns_per_decision\": %.1f}%s\n",
                    cf->name, p50[c] / 1e6, p99[c] / 1e6, x50, x99, lp_rate[c], kept,
                    (unsigned long long) sum.lp_steps, sum.lp_in_flight_max,
                    (unsigned long long) sum.decisions, per_decision_ns[c],
                    c + 1 < N_CONFIGS ? "," : "");
    }
    /* salus's figure: gap filling at salusd's default margin against
     * plain sharing, and the lp it keeps; the max speed-up over the three
     * margins and both quantiles, the least lp kept */
    int cdef = C_FILL0;
    for (int c = C_FILL0; c <= C_FILL10; c++)
        if (configs[c].margin == sl_gaps_config_default().fit_margin)
            cdef = c;
    double sp50 = p50[C_SHARE] / p50[cdef], spmax = 0, lp_kept = 1, dec = 0;
    double lp_def = lp_rate[cdef] / lp_rate[C_LP_ALONE], x50_def = p50[cdef] / p50[C_HP_ALONE];
    /* FIKIT's own lp figure: against lp under plain sharing, not alone */
    double lp_vs_share = lp_rate[cdef] / lp_rate[C_SHARE];
    for (int c = C_FILL0; c <= C_FILL10; c++) {
        double a = p50[C_SHARE] / p50[c], b = p99[C_SHARE] / p99[c];
        spmax = a > spmax ? a : spmax;
        spmax = b > spmax ? b : spmax;
        double kept = lp_rate[c] / lp_rate[C_LP_ALONE];
        lp_kept = kept < lp_kept ? kept : lp_kept;
        dec = per_decision_ns[c] > dec ? per_decision_ns[c] : dec;
    }
    double mean_op = (double) lp_op_ns / (double) lt.n_ops;
    double overhead = 100.0 * dec / mean_op;
    printf("paper (FIKIT): hp %.2f-%.2fx faster than plain sharing, lp %.2f-1x of its speed "
           "under plain sharing, overhead < %.0f %%\n",
           PAPER_HP_MIN, PAPER_HP_MAX, PAPER_LP_MIN, PAPER_OVERHEAD_PCT);
    printf("ours (gap filling, margins 0/5/10 %%): hp p50 %.2fx faster than plain sharing at "
           "salusd's default margin (%.0f %%), up to %.2fx; lp kept %.3f of alone there (%.3f of "
           "its speed under plain sharing), >= %.3f at any; scheduler %.3f us per decision = %.2f "
           "%% of the mean lp op (%.1f us; host "
           "wall time, simulator build)\n",
           sp50, 100 * configs[cdef].margin, spmax, lp_def, lp_vs_share, lp_kept, dec / 1e3,
           overhead, mean_op / 1e3);
    double pg_lp = lp_rate[C_PART_GAP] / lp_rate[C_LP_ALONE];
    double pg_sp = p50[C_SHARE] / p50[C_PART_GAP], pg_x99 = p99[C_PART_GAP] / p99[C_HP_ALONE];
    printf("ours (partitions + gap filling, salusd --partitions auto:%u): hp p50 %.2fx faster "
           "than plain sharing, p99 x%.3f of alone; lp kept %.3f\n",
           need, pg_sp, pg_x99, pg_lp);
    if (jf) {
        fprintf(jf,
                "  ],\n  \"hp_speedup_p50\": %.4f, \"hp_speedup_max\": %.4f, \"lp_retained\": "
                "%.4f, \"overhead_pct\": %.4f, \"lp_retained_min\": %.4f, "
                "\"part_gap_lp_retained\": %.4f, \"part_gap_speedup_p50\": %.4f, "
                "\"part_gap_p99_inflation\": %.4f, \"need_sms\": %u, \"lp_vs_sharing\": %.4f\n}\n",
                sp50, spmax, lp_def, overhead, lp_kept, pg_lp, pg_sp, pg_x99, need, lp_vs_share);
        fclose(jf);
    }
    printf("BENCH eval_fikit hp_speedup_p50=%.2f hp_speedup_max=%.2f lp_retained=%.3f "
           "overhead_pct=%.3f lp_retained_min=%.3f hp_p50_inflation=%.3f partgap_lp_retained=%.3f "
           "partgap_speedup_p50=%.2f partgap_p99_inflation=%.3f lp_vs_sharing=%.3f\n",
           sp50, spmax, lp_def, overhead, lp_kept, x50_def, pg_lp, pg_sp, pg_x99, lp_vs_share);
    sl_free(req);
    sl_free(hp_ops);
    sl_free(lp_ops);
    sl_free(hp_shapes);
    sl_free(lp_shapes);
    sl_eval_timeline_fini(&ht);
    sl_eval_timeline_fini(&lt);
    return 0;
}
