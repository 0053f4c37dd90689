/* eval/hparam: Salus section 5.2 ("hyper-parameter exploration") in the
 * simulator: N identical training jobs of one model, submitted together,
 * run one at a time against packed on one GPU; makespan ratio per model.
 *
 *   hparam [--jobs N] [--job-s S] [--submit-s X] [--seed S] [--gpu PROFILE]
 *          [--csv FILE] [--json FILE] [--tiny] [--launch-ns N] [--private-launches]
 *          [--op-launch | --serial-launch] [--graph-launch-ns N] [--graph-node-ns N]
 *
 * --launch-ns: the profile's per-op launch cost (an ASSUMPTION of 5 us in
 * kernels/sim/profiles.c) replaced, to show how the computed utilisations,
 * and so the ratios, depend on it. --private-launches: every stream
 * launches on its own, as if the GPU had no shared launch path (evsim.h
 * private_launches), to show what that path costs packed jobs.
 * Launches: by default an iteration is one replay of a captured CUDA Graph,
 * as salusd's cuda backend submits it: the profile's graph_launch_ns on
 * the GPU's launch path, then graph_node_ns before each op's work
 * (graphs.h sl_eval_timeline_graph_ns; --graph-launch-ns and
 * --graph-node-ns replace the profile's ASSUMED costs). --op-launch: op by
 * op, every launch issued without waiting (one host thread submitting the
 * iteration, sl_eval_timeline_pipelined_ns), for comparison.
 * --serial-launch: an op's launch charged after the previous op's work, as
 * kernels/sim's streams charge it.
 *
 * One at a time: salusd --strict --spread-limit 0 under fifo (every session
 * shares one lane, and strict fifo holds it for the oldest job until it
 * ends). Packed: salusd's defaults under pack (lanes of their own while half
 * the memory is free, work-conserving). The device model is evevsim.h's: a job
 * whose solo utilisation is u leaves 1 - u of the device to others, and
 * one whose iterations spend the share l of their time launching needs
 * that share of the GPU's one launch path (evsim.h launch_share): packed
 * jobs together cannot launch faster than one op per launch_ns.
 *
 * Profiles (every number's source is printed and in eval/README.md):
 * - resnet50 (batch 25): iteration time and memory measured (Salus artifact
 *   CSV); utilisation computed from its op list on the GPU profile;
 * - vae (batch 128) and superres (batch 64): not in the CSV. Iteration time,
 *   utilisation and persistent bytes (weights + Adam's two slots) computed
 *   from the op lists (eval/lib/graphs.c, the artifact's model code); ephemeral
 *   bytes an assumption (128 MiB: two orders of magnitude above their
 *   activations, so memory never decides the packing).
 * Last line: BENCH eval_hparam model=<best> ratio=<best> <model>_ratio=... */
#include "cli.h"
#include "graphs.h"
#include "evsim.h"
#include "sim/profiles.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1ull << 20)

typedef struct model_case {
    const char *model;
    int64_t batch;
    bool measured; /* timing and memory from the CSV */
    /* filled in */
    uint64_t iteration_ns, persistent, ephemeral;
    double util;
    double launch; /* launch share (graphs.h) */
    const char *source;
} model_case;

static model_case cases[] = {
    {.model = "vae", .batch = 128},
    {.model = "superres", .batch = 64},
    {.model = "resnet50", .batch = 25, .measured = true},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static int profile_case(model_case *c, const sl_sim_profile *gpu, enum sl_eval_launch mode,
                        const sl_eval_workload *w, size_t n_w)
{
    sl_eval_timeline t;
    int rc = sl_eval_timeline_build(c->model, c->batch, gpu, &t);
    if (rc != SL_OK)
        return rc;
    /* the solo iteration and its time on the launch path: every op
     * launched after the previous one's work, every op launched without
     * waiting (the same launches and SM-time in less wall time), or one
     * replay for the whole iteration (its nodes' cost is on the stream,
     * not on the shared path) */
    double launches = (double) (t.iteration_ns - t.work_ns);
    double solo = (double) sl_eval_timeline_solo_ns(&t, mode);
    if (mode == SL_EVAL_LAUNCH_GRAPH)
        launches = (double) t.graph_launch_ns;
    c->util = t.occupied_ns / solo;
    c->launch = launches / solo;
    if (c->measured) {
        rc = SL_ENOTFOUND;
        for (size_t i = 0; i < n_w; i++)
            if (strcmp(w[i].model, c->model) == 0 && w[i].batch == c->batch) {
                c->iteration_ns = w[i].iteration_ns;
                c->persistent = w[i].persistent_bytes;
                c->ephemeral = w[i].ephemeral_bytes;
                rc = SL_OK;
                break;
            }
        c->source = "time, memory: measured P100 (CSV); utilisation: op list";
    } else {
        c->iteration_ns = (uint64_t) solo;
        c->persistent = t.params * 4 * 3; /* fp32 weights, Adam's m and v */
        c->ephemeral = 128 * MIB;         /* assumption, see the header */
        c->source = "time, utilisation, persistent: op list; ephemeral: assumed 128 MiB";
    }
    sl_eval_timeline_fini(&t);
    return rc;
}

static const char usage[] =
    "usage: %s [--jobs N (300)] [--job-s S: each job's length alone (60)] "
    "[--submit-s X: arrivals uniform in [0, X) s (0)] [--seed S] "
    "[--gpu PROFILE (p100)] [--csv FILE] [--json FILE] [--tiny] [--launch-ns N] "
    "[--private-launches] [--op-launch | --serial-launch] [--graph-launch-ns N] "
    "[--graph-node-ns N]\n";

typedef struct options {
    sl_cli_common c;
    size_t n_jobs;
    double job_s, submit_s;
    bool tiny, private_launches;
    /* UINT64_MAX: the profile's */
    uint64_t launch_ns, graph_launch_ns, graph_node_ns;
} options;

/* n_jobs identical jobs of case m: their lengths, arrivals and profile. */
static void make_jobs(const options *o, const model_case *c, size_t m, sl_eval_job_spec *jobs)
{
    uint64_t iters = (uint64_t) (o->job_s * 1e9 / (double) c->iteration_ns + 0.5);
    sl_eval_rng rng;
    sl_eval_rng_seed(&rng, o->c.seed);
    for (size_t i = 0; i < o->n_jobs; i++)
        jobs[i] = (sl_eval_job_spec){
            .id = i + 1,
            .arrival_ns = (uint64_t) (sl_eval_rng_uniform(&rng) * o->submit_s * 1e9),
            .iterations = iters ? iters : 1,
            .iteration_ns = c->iteration_ns,
            .persistent_bytes = c->persistent,
            .ephemeral_bytes = c->ephemeral,
            .declare_length = true,
            .workload = (int) m,
            .utilisation = c->util,
            .launch_share = c->launch,
        };
}

/* The jobs one at a time (v 0) and packed (v 1): makespan[v] in minutes,
 * the most lanes packed. */
static int run_both(const options *o, const model_case *c, const sl_eval_job_spec *jobs,
                    double makespan[2], uint32_t *lanes)
{
    sl_eval_job_result *res = sl_calloc(o->n_jobs, sizeof *res);
    int rc = res ? SL_OK : SL_ENOMEM;
    for (int v = 0; v < 2 && rc == SL_OK; v++) {
        sl_eval_config cfg =
            sl_eval_config_default(v == 0 ? "fifo" : "pack", v == 0, 1, o->c.gpu->capacity);
        cfg.spread_set = v == 0; /* --spread-limit 0: one shared lane */
        cfg.private_launches = o->private_launches;
        sl_eval_summary sum;
        if ((rc = sl_eval_run(&cfg, jobs, o->n_jobs, res, &sum)) != SL_OK)
            break;
        if (sum.completed != o->n_jobs) {
            fprintf(stderr, "hparam: %s: %zu of %zu jobs completed\n", c->model, sum.completed,
                    o->n_jobs);
            rc = SL_EINVAL;
            break;
        }
        makespan[v] = (double) sum.makespan_ns / 6e10;
        if (v == 1)
            *lanes = sum.max_lanes;
        fprintf(stderr, "hparam: %s %s done\n", c->model, v == 0 ? "one-at-a-time" : "packed");
    }
    sl_free(res);
    return rc;
}

/* Case m's row of the table and of the JSON; *ratio its makespans'. */
static int run_case(const options *o, size_t m, const sl_eval_workload *w, size_t n_w,
                    sl_eval_job_spec *jobs, FILE *jf, double *ratio)
{
    model_case *c = &cases[m];
    const sl_sim_profile *gpu = o->c.gpu;
    int rc = profile_case(c, gpu, o->c.launch, w, n_w);
    if (rc != SL_OK)
        return rc;
    make_jobs(o, c, m, jobs);
    double makespan[2];
    uint32_t lanes = 0;
    if ((rc = run_both(o, c, jobs, makespan, &lanes)) != SL_OK)
        return rc;
    *ratio = makespan[0] / makespan[1];
    /* the fluid limit: one at a time pays the client gap after every
     * iteration; packed, a saturated device (SMs or launch path,
     * whichever saturates first) does only the work */
    double gap = (double) sl_eval_config_default("fifo", true, 1, gpu->capacity).client_gap_ns;
    double busiest = c->util;
    if (!o->private_launches && c->launch > busiest)
        busiest = c->launch;
    double bound = ((double) c->iteration_ns + gap) / ((double) c->iteration_ns * busiest);
    printf("%-9s %5lld %8.2f %6.3f %6.3f %9.1f %9.1f %14.1f %12.1f %6.2f %6.2f %6u  %s\n", c->model,
           (long long) c->batch, (double) c->iteration_ns / 1e6, c->util, c->launch,
           (double) c->persistent / MIB, (double) c->ephemeral / MIB, makespan[0], makespan[1],
           *ratio, bound, lanes, c->source);
    if (jf)
        fprintf(jf,
                "    {\"model\": \"%s\", \"batch\": %lld, \"iteration_ms\": %.4f, "
                "\"utilisation\": %.4f, \"launch_share\": %.4f, \"one_at_a_time_min\": %.3f, "
                "\"packed_min\": %.3f, \"ratio\": %.4f, \"lanes\": %u}%s\n",
                c->model, (long long) c->batch, (double) c->iteration_ns / 1e6, c->util, c->launch,
                makespan[0], makespan[1], *ratio, lanes, m + 1 == N_CASES ? "" : ",");
    return SL_OK;
}

static void print_head(const options *o, FILE *jf)
{
    const sl_sim_profile *gpu = o->c.gpu;
    if (jf)
        fprintf(jf,
                "{\n  \"bench\": \"eval_hparam\", \"jobs\": %zu, \"job_s\": %.3f, \"seed\": %llu, "
                "\"gpu\": \"%s\", \"launch\": \"%s\",\n  \"models\": [\n",
                o->n_jobs, o->job_s, (unsigned long long) o->c.seed, gpu->name,
                sl_eval_launch_name(o->c.launch));
    printf("%zu identical jobs per model, %.0f s each alone, on one %s (launch %llu ns per op; "
           "graph replay %llu ns + %llu ns per node; %s, launch path %s); one at a time (strict "
           "fifo, one lane) vs packed (pack, salusd defaults)\n",
           o->n_jobs, o->job_s, gpu->name, (unsigned long long) gpu->launch_ns,
           (unsigned long long) gpu->graph_launch_ns, (unsigned long long) gpu->graph_node_ns,
           o->c.launch == SL_EVAL_LAUNCH_SERIAL  ? "op by op, each after the previous op"
           : o->c.launch == SL_EVAL_LAUNCH_GRAPH ? "one graph replay per iteration"
                                                 : "op by op, asynchronous",
           o->private_launches ? "per stream" : "shared per GPU");
    printf("%-9s %5s %8s %6s %6s %9s %9s %14s %12s %6s %6s %6s  %s\n", "model", "batch", "iter_ms",
           "util", "launch", "P_MiB", "E_MiB", "one_at_a_time", "packed_min", "ratio", "bound",
           "lanes", "source");
}

int main(int argc, char **argv)
{
    options o = {.c = sl_cli_common_default(SL_CLI_WANT_SEED | SL_CLI_WANT_JSON | SL_CLI_WANT_GPU |
                                            SL_CLI_WANT_CSV | SL_CLI_WANT_LAUNCH),
                 .n_jobs = 300,
                 .job_s = 60,
                 .launch_ns = UINT64_MAX,
                 .graph_launch_ns = UINT64_MAX,
                 .graph_node_ns = UINT64_MAX};
    const sl_cli_opt opts[] = {
        {"jobs", SL_CLI_SIZE, &o.n_jobs, 1, 1000000, NULL},
        {"job-s", SL_CLI_ABOVE, &o.job_s, 0, 1e7, NULL},
        {"submit-s", SL_CLI_DOUBLE, &o.submit_s, 0, 1e7, NULL},
        {"tiny", SL_CLI_SET, &o.tiny, 0, 0, NULL},
        {"launch-ns", SL_CLI_U64, &o.launch_ns, 0, 1e9, NULL},
        {"private-launches", SL_CLI_SET, &o.private_launches, 0, 0, NULL},
        {"graph-launch-ns", SL_CLI_U64, &o.graph_launch_ns, 0, 1e9, NULL},
        {"graph-node-ns", SL_CLI_U64, &o.graph_node_ns, 0, 1e9, NULL},
    };
    int st = sl_cli_parse(argc, argv, usage, &o.c, opts, sizeof opts / sizeof opts[0]);
    if (st != SL_CLI_RUN)
        return st;
    if (o.tiny) {
        o.n_jobs = 12;
        o.job_s = 2;
    }
    sl_sim_profile custom = *o.c.gpu;
    if (o.launch_ns != UINT64_MAX)
        custom.launch_ns = o.launch_ns;
    if (o.graph_launch_ns != UINT64_MAX)
        custom.graph_launch_ns = o.graph_launch_ns;
    if (o.graph_node_ns != UINT64_MAX)
        custom.graph_node_ns = o.graph_node_ns;
    o.c.gpu = &custom;
    sl_eval_workload *w;
    size_t n_w;
    if (!sl_cli_workloads(&o.c, &w, &n_w))
        return 1;
    sl_eval_job_spec *jobs = sl_calloc(o.n_jobs, sizeof *jobs);
    FILE *jf;
    if (!jobs || !sl_cli_create(o.c.json, &jf))
        return 1;
    print_head(&o, jf);
    double best = 0, ratio[N_CASES];
    size_t best_i = 0;
    for (size_t m = 0; m < N_CASES; m++) {
        int rc = run_case(&o, m, w, n_w, jobs, jf, &ratio[m]);
        if (rc != SL_OK)
            return sl_cli_fail(rc, "%s", cases[m].model);
        if (ratio[m] > best) {
            best = ratio[m];
            best_i = m;
        }
    }
    if (jf)
        fprintf(jf, "  ]\n}\n");
    if (!sl_cli_close(jf, o.c.json))
        return 1;
    printf("paper (Salus 5.2): 2.38x best makespan improvement\n");
    printf("BENCH eval_hparam model=%s ratio=%.2f launch=%s", cases[best_i].model, best,
           sl_eval_launch_name(o.c.launch));
    for (size_t m = 0; m < N_CASES; m++)
        printf(" %s_ratio=%.2f", cases[m].model, ratio[m]);
    printf("\n");
    sl_free(jobs);
    sl_free(w);
    return 0;
}
