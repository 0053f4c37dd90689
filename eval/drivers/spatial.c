/* Spatial sharing on the simulator: a batch-1 high-priority (hp) inference
 * job with Poisson requests beside low-priority (lp) training on one
 * simulated GPU, under time sharing and under compute partitions
 * (DESIGN.md section 13), run through salusd's own scheduler, lane
 * hand-off, step dispatcher, gap filler and partition planner.
 *
 *   spatial [--gpus P,P] [--hp-model M] [--lp-model M] [--lp-batch B]
 *           [--lp-jobs N] [--qps Q] [--requests N] [--seed S] [--json FILE]
 *           [--tiny] [--private-launches] [--no-spill]
 *
 * Configurations, per GPU profile: hp alone; lp alone; time sharing
 * (policy fair, no classes); priority with gap filling (salusd's default
 * for priority); partitions (policy priority, every lane's iterations whole
 * on its partition: hp on an online partition sized by sched/partition.h
 * from its declared need and measured load, lp on the rest); partitions
 * plus gap filling (as partitions, and an lp op may run on the idle online
 * partition when one of its blocks there is within salusd's gap margin of
 * the hp iteration).
 *
 * The hp job's declared need: the fewest SMs (at the device's green-context
 * granularity) on which its iteration runs within 2 % of its time on the
 * whole device, by kernels/sim's partition model: what a client that
 * profiled its model once would declare. Granularity per architecture:
 * CUDA Driver API, "Green Contexts" (cuda.h): 2 SMs in steps of 2 on
 * compute capability 6.x and 7.x (P100, V100), 4 in steps of 2 on 8.x
 * (A100), 8 in steps of 8 on 9.0 (H100, H200).
 *
 * Figures: hp p50/p99 against hp alone; lp iterations per second against lp
 * alone and against what the hp job leaves (lp alone x (1 - hp's busy
 * fraction alone)); device busy fraction and SM occupancy. */
#include "cli.h"
#include "graphs.h"
#include "evsim.h"
#include "workload.h"

#include "gaps.h"
#include "partition.h"
#include "sim/sim.h"
#include "sl_alloc.h"
#include "sl_error.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The goal set for this experiment and Tally's published figure (Zhao et al., "Tally:
 * Non-Intrusive Performance Isolation for Concurrent Deep Learning
 * Workloads", ASPLOS'25: +7.2 % p99 at over 80 % of TGS's throughput). */
#define GOAL_P99 1.05
#define GOAL_LP 0.80
#define NEED_SLACK 0.02

enum { C_HP_ALONE, C_LP_ALONE, C_FAIR, C_PRIO, C_PART, C_PART_GAP, N_CONFIGS };

typedef struct config {
    const char *name, *key, *policy;
    bool hp, lp, partitions, spill;
} config;

static const config configs[N_CONFIGS] = {
    {"hp alone", "hp_alone", "priority", true, false, false, false},
    {"lp alone", "lp_alone", "priority", false, true, false, false},
    {"time sharing (fair)", "fair", "fair", true, true, false, false},
    {"priority+gap filling", "prio_gap", "priority", true, true, false, false},
    {"partitions", "part", "priority", true, true, true, false},
    {"partitions+gap filling", "part_gap", "priority", true, true, true, true},
};

typedef struct result {
    double p50, p99, lp_rate, busy, occupied, x50, x99, lp_alone, lp_left;
    unsigned online;
    uint64_t spills, resizes;
} result;

typedef struct run_state {
    uint64_t window_end;
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

typedef struct model {
    sl_eval_op *ops;
    sl_eval_op_shape *shapes;
    uint32_t n;
    uint64_t ns;
} model;

static int to_model(const sl_eval_timeline *t, size_t n_ops, model *m)
{
    m->ops = sl_calloc(n_ops, sizeof *m->ops);
    m->shapes = sl_calloc(n_ops, sizeof *m->shapes);
    if (!m->ops || !m->shapes)
        return SL_ENOMEM;
    m->n = (uint32_t) n_ops;
    m->ns = 0;
    for (size_t i = 0; i < n_ops; i++) {
        const sl_eval_op_time *o = &t->ops[i];
        m->ops[i] = (sl_eval_op){.launch_ns = o->launch_ns,
                                 .work_ns = o->ns - o->launch_ns,
                                 .split_max = o->split_max,
                                 .occupancy = o->occupancy,
                                 .block_ns = o->block_ns};
        m->shapes[i] = (sl_eval_op_shape){
            .compute_ns = o->compute_ns, .memory_ns = o->memory_ns, .waves = o->waves};
        m->ns += o->ns;
    }
    return SL_OK;
}

static void free_model(model *m)
{
    sl_free(m->ops);
    sl_free(m->shapes);
}

typedef struct setup {
    const char *hp_model, *lp_model;
    unsigned lp_batch, lp_jobs;
    size_t n_req;
    double qps;
    uint64_t seed;
    /* partitions with a launch path each (green contexts are contexts of
     * their own); default: the one shared path the simulator assumes */
    bool private_launches;
    /* no lp op borrows the online partition: what salusd's executor does
     * today (the borrowing is the simulator's, evsim.h part_spill_block_ns) */
    bool no_spill;
    /* a whole iteration's launches all at its start (evsim.h pipelined_launches);
     * --serial-launch: each after the op before it */
    bool pipelined;
} setup;

/* Runs every configuration on one profile; fills res[N_CONFIGS]. */
static int run_profile(const sl_sim_profile *gpu, const setup *su, result *res, FILE *jf,
                       bool last_profile)
{
    sl_eval_timeline ht = {0}, lt = {0};
    int rc = sl_eval_timeline_build(su->hp_model, 1, gpu, &ht);
    if (rc == SL_OK)
        rc = sl_eval_timeline_build(su->lp_model, su->lp_batch, gpu, &lt);
    if (rc != SL_OK) {
        fprintf(stderr, "spatial: cannot build %s/%s on %s: %s\n", su->hp_model, su->lp_model,
                gpu->name, sl_strerror(rc));
        return rc;
    }
    size_t fwd = 0;
    while (fwd < ht.n_ops && ht.ops[fwd].kind != SL_EVAL_LOSS)
        fwd++;
    model hp = {0}, lp = {0};
    if ((rc = to_model(&ht, fwd, &hp)) != SL_OK || (rc = to_model(&lt, lt.n_ops, &lp)) != SL_OK)
        return rc;
    uint64_t lp_p = lt.params * 4, lp_e = 0;
    sl_eval_workload *w;
    size_t n_w;
    if (sl_eval_workloads_load(SL_EVAL_CSV, &w, &n_w) == SL_OK) {
        for (size_t i = 0; i < n_w; i++)
            if (!strcmp(w[i].model, su->lp_model) && w[i].batch == su->lp_batch &&
                w[i].peak_bytes > lp_p)
                lp_e = w[i].peak_bytes - lp_p;
        sl_free(w);
    }
    uint64_t *req = sl_calloc(su->n_req, sizeof *req);
    if (!req)
        return SL_ENOMEM;
    sl_eval_rng rng;
    sl_eval_rng_seed(&rng, su->seed);
    double t = 0;
    for (size_t i = 0; i < su->n_req; i++) {
        t += sl_eval_rng_exp(&rng, 1e9 / su->qps);
        req[i] = (uint64_t) t;
    }
    uint64_t window = req[su->n_req - 1];
    uint64_t lp_iters = window / lp.ns * 2 + 8;

    unsigned min_sms, align;
    sl_eval_part_granularity(gpu, &min_sms, &align);
    /* hp's forward ops: a view of the timeline's first fwd ops */
    sl_eval_timeline hp_view = ht;
    hp_view.n_ops = fwd;
    unsigned need =
        sl_eval_timeline_need_sms_ex(&hp_view, gpu, min_sms, align, NEED_SLACK, su->pipelined);
    if (su->pipelined) { /* the solo times the jobs declare and print */
        hp.ns = sl_eval_timeline_pipelined_ns(&hp_view);
        lp.ns = sl_eval_timeline_pipelined_ns(&lt);
    }
    sl_part_plan_config plan = sl_part_plan_config_default(gpu->sm_count, min_sms, align);

    sl_eval_job_spec jobs[1 + 16];
    jobs[0] = (sl_eval_job_spec){.id = 1,
                                 .iterations = su->n_req,
                                 .iteration_ns = hp.ns,
                                 .persistent_bytes = ht.params * 4,
                                 .priority = 10,
                                 .ops = hp.ops,
                                 .op_shapes = hp.shapes,
                                 .n_ops = hp.n,
                                 .request_ns = req};
    for (unsigned k = 0; k < su->lp_jobs; k++)
        jobs[1 + k] = (sl_eval_job_spec){.id = 2 + k,
                                         .iterations = lp_iters,
                                         .iteration_ns = lp.ns,
                                         .persistent_bytes = lp_p,
                                         .ephemeral_bytes = lp_e,
                                         .ops = lp.ops,
                                         .op_shapes = lp.shapes,
                                         .n_ops = lp.n};
    printf("\nspatial: %s (%u SMs, partitions of %u + %u k); hp %s batch 1 (%u ops, %.3f ms "
           "alone, declared need %u SMs: %.3f ms there), %.0f requests/s, %zu requests; lp %u x "
           "%s batch %u (%.1f ms per iteration alone)\n",
           gpu->name, gpu->sm_count, min_sms, align, su->hp_model, hp.n, (double) hp.ns / 1e6, need,
           (double) sl_eval_timeline_ns_on_ex(&hp_view, gpu, need, su->pipelined) / 1e6, su->qps,
           su->n_req, su->lp_jobs, su->lp_model, su->lp_batch, (double) lp.ns / 1e6);
    printf("%-24s %9s %9s %7s %7s %9s %8s %8s %6s %6s %7s %7s\n", "config", "hp_p50_ms",
           "hp_p99_ms", "p50_x", "p99_x", "lp_it/s", "lp/alone", "lp/left", "busy", "occ", "online",
           "spills");
    sl_gaps_config gc = sl_gaps_config_default();
    for (int c = 0; c < N_CONFIGS; c++) {
        const config *cf = &configs[c];
        sl_eval_config cfg = sl_eval_config_default(cf->policy, false, 1, gpu->capacity);
        cfg.gaps = &gc;
        run_state st = {.window_end = window};
        cfg.on_done = on_done;
        cfg.arg = &st;
        cfg.until_ns = window + window / 4;
        cfg.pipelined_launches = su->pipelined;
        if (cf->partitions) {
            cfg.part_sms = gpu->sm_count;
            cfg.part_online = need;
            cfg.part_plan = &plan;
            /* partitions alone isolate the SMs: lp runs whole iterations;
             * with gap filling lp goes op by op beside pending hp work as
             * under priority (one lp op in flight, into predicted gaps),
             * on its own SMs, and spills into the idle online partition */
            cfg.no_stepwise = !cf->spill;
            cfg.private_launches = su->private_launches;
            if (cf->spill && !su->no_spill)
                cfg.part_spill_block_ns = (uint64_t) (gc.fit_margin * (double) hp.ns);
        }
        const sl_eval_job_spec *js = cf->hp ? jobs : jobs + 1;
        size_t nj = (cf->hp ? 1 : 0) + (cf->lp ? su->lp_jobs : 0);
        sl_eval_summary sum;
        sl_eval_job_result jr[1 + 16];
        if ((rc = sl_eval_run(&cfg, js, nj, jr, &sum)) != SL_OK) {
            fprintf(stderr, "spatial: %s: %s\n", cf->name, sl_strerror(rc));
            return rc;
        }
        result *r = &res[c];
        r->p50 = cf->hp ? (double) jr[0].lat_p50_ns : 0;
        r->p99 = cf->hp ? (double) jr[0].lat_p99_ns : 0;
        r->lp_rate = (double) st.lp_iters / ((double) window / 1e9);
        uint64_t span = cfg.until_ns; /* lp never finishes: every run stops there */
        r->busy = (double) sum.gpu_busy_ns / (double) span;
        r->occupied = sum.gpu_occupied_ns / (double) span;
        r->online = cf->partitions ? need : 0;
        r->spills = sum.part_spills;
        r->resizes = sum.part_resizes;
        r->x50 = cf->hp ? r->p50 / res[C_HP_ALONE].p50 : 0;
        r->x99 = cf->hp ? r->p99 / res[C_HP_ALONE].p99 : 0;
        r->lp_alone = cf->lp ? r->lp_rate / res[C_LP_ALONE].lp_rate : 0;
        double left = res[C_LP_ALONE].lp_rate * (1.0 - res[C_HP_ALONE].busy);
        r->lp_left = cf->lp && left > 0 ? r->lp_rate / left : 0;
        printf("%-24s %9.3f %9.3f %7.3f %7.3f %9.2f %8.3f %8.3f %6.3f %6.3f %7u %7llu\n", cf->name,
               r->p50 / 1e6, r->p99 / 1e6, r->x50, r->x99, r->lp_rate, r->lp_alone, r->lp_left,
               r->busy, r->occupied, r->online, (unsigned long long) r->spills);
        if (jf)
            fprintf(jf,
                    "    {\"gpu\": \"%s\", \"config\": \"%s\", \"hp_p50_ms\": %.4f, "
                    "\"hp_p99_ms\": %.4f, \"hp_p50_inflation\": %.4f, \"hp_p99_inflation\": "
                    "%.4f, \"lp_iter_per_s\": %.4f, \"lp_vs_alone\": %.4f, \"lp_retained\": "
                    "%.4f, \"busy\": %.4f, \"occupied\": %.4f, \"online_sms\": %u, "
                    "\"need_sms\": %u, \"spills\": %llu, \"resizes\": %llu}%s\n",
                    gpu->name, cf->key, r->p50 / 1e6, r->p99 / 1e6, r->x50, r->x99, r->lp_rate,
                    r->lp_alone, r->lp_left, r->busy, r->occupied, r->online, need,
                    (unsigned long long) r->spills, (unsigned long long) r->resizes,
                    last_profile && c + 1 == N_CONFIGS ? "" : ",");
    }
    sl_free(req);
    free_model(&hp);
    free_model(&lp);
    sl_eval_timeline_fini(&ht);
    sl_eval_timeline_fini(&lt);
    return SL_OK;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--gpus P,P] [--hp-model M] [--lp-model M] [--lp-batch B] [--lp-jobs N] "
            "[--qps Q] [--requests N] [--seed S] [--json FILE] [--tiny] [--private-launches] "
            "[--no-spill] [--serial-launch]\n"
            "  hp batch-1 inference (Poisson) beside lp training: time sharing, priority with "
            "gap filling, partitions, partitions with gap filling\n",
            argv0);
}

int main(int argc, char **argv)
{
    sl_cli_init(argv[0]);
    setup su = {.hp_model = "resnet50",
                .lp_model = "resnet50",
                .lp_batch = 32,
                .lp_jobs = 2,
                .n_req = 2000,
                .qps = 40,
                .seed = 1,
                .pipelined = true};
    const char *json_path = NULL;
    char gpus[64] = "v100,h100";
    static const struct option longopts[] = {{"gpus", required_argument, NULL, 'g'},
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
                                             {"private-launches", no_argument, NULL, 'p'},
                                             {"no-spill", no_argument, NULL, 'N'},
                                             {"serial-launch", no_argument, NULL, 'P'},
                                             {NULL, 0, NULL, 0}};
    for (int ch; (ch = getopt_long(argc, argv, "", longopts, NULL)) != -1;) {
        switch (ch) {
        case 'p':
            su.private_launches = true;
            break;
        case 'N':
            su.no_spill = true;
            break;
        case 'P':
            su.pipelined = false;
            break;
        case 'g':
            snprintf(gpus, sizeof gpus, "%s", optarg);
            break;
        case 'h':
            su.hp_model = optarg;
            break;
        case 'l':
            su.lp_model = optarg;
            break;
        case 'b':
            if (!sl_cli_uint("--lp-batch", optarg, 1, 4096, &su.lp_batch))
                return 2;
            break;
        case 'n':
            if (!sl_cli_uint("--lp-jobs", optarg, 1, 16, &su.lp_jobs))
                return 2;
            break;
        case 'q':
            if (!sl_cli_double_above("--qps", optarg, 0, 1e6, &su.qps))
                return 2;
            break;
        case 'r':
            if (!sl_cli_size("--requests", optarg, 1, 10000000, &su.n_req))
                return 2;
            break;
        case 's':
            if (!sl_cli_seed("--seed", optarg, &su.seed))
                return 2;
            break;
        case 'j':
            json_path = optarg;
            break;
        case 't':
            su.n_req = 60;
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
    const sl_sim_profile *profiles[4];
    unsigned n_prof = 0;
    for (char *save = NULL, *tok = strtok_r(gpus, ",", &save); tok && n_prof < 4;
         tok = strtok_r(NULL, ",", &save))
        if (!sl_cli_gpu(tok, &profiles[n_prof++]))
            return 2;
    if (n_prof == 0) {
        usage(argv[0]);
        return 2;
    }
    FILE *jf = json_path ? fopen(json_path, "w") : NULL;
    if (jf)
        fprintf(jf,
                "{\n  \"bench\": \"spatial_sim\", \"seed\": %llu, \"qps\": %.3f, \"requests\": "
                "%zu, \"hp\": \"%s\", \"lp\": \"%s\", \"lp_batch\": %u, \"lp_jobs\": %u,\n"
                "  \"runs\": [\n",
                (unsigned long long) su.seed, su.qps, su.n_req, su.hp_model, su.lp_model,
                su.lp_batch, su.lp_jobs);
    result res[4][N_CONFIGS];
    memset(res, 0, sizeof res);
    for (unsigned i = 0; i < n_prof; i++)
        if (run_profile(profiles[i], &su, res[i], jf, i + 1 == n_prof) != SL_OK)
            return 1;
    /* the headline: the last profile (h100 by default), partitions with
     * gap filling; the other profiles and configurations beside it */
    unsigned h = n_prof - 1;
    const result *pg = &res[h][C_PART_GAP];
    printf("\ngoal: p99 inflation <= %.2f with lp >= %.2f of what hp leaves (Tally: +7.2 %% p99 "
           "at > 80 %% of TGS's throughput)\n",
           GOAL_P99, GOAL_LP);
    if (jf) {
        fprintf(jf,
                "  ],\n  \"profile\": \"%s\", \"p99_inflation\": %.4f, \"lp_retained\": %.4f\n}\n",
                profiles[h]->name, pg->x99, pg->lp_left);
        fclose(jf);
    }
    printf("BENCH spatial_sim profile=%s p99_inflation=%.3f lp_retained=%.3f p50_inflation=%.3f "
           "lp_vs_alone=%.3f busy=%.3f fair_p99=%.3f fair_lp=%.3f prio_gap_p99=%.3f "
           "prio_gap_lp=%.3f part_p99=%.3f part_lp=%.3f",
           profiles[h]->name, pg->x99, pg->lp_left, pg->x50, pg->lp_alone, pg->busy,
           res[h][C_FAIR].x99, res[h][C_FAIR].lp_left, res[h][C_PRIO].x99, res[h][C_PRIO].lp_left,
           res[h][C_PART].x99, res[h][C_PART].lp_left);
    for (unsigned i = 0; i < h; i++)
        printf(" %s_p99_inflation=%.3f %s_lp_retained=%.3f %s_prio_gap_p99=%.3f "
               "%s_prio_gap_lp=%.3f",
               profiles[i]->name, res[i][C_PART_GAP].x99, profiles[i]->name,
               res[i][C_PART_GAP].lp_left, profiles[i]->name, res[i][C_PRIO].x99, profiles[i]->name,
               res[i][C_PRIO].lp_left);
    printf("\n");
    return 0;
}
