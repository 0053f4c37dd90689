/* eval/inference: Salus section 5.3 ("inference") in the simulator: 14
 * models x 3 instances served at batch 1 on one 16 GiB P100, each instance
 * a session whose requests arrive on their own (Poisson) schedule. How many
 * sessions salusd admits at once (its memory admission decides: weights
 * resident, ephemeral memory per request in lanes) and the latency they add
 * to each other; beside it, how many separate processes MPS would fit, with
 * and without the per-process costs salus does not pay.
 *
 *   inference [--instances K] [--gap-s G] [--spread F] [--duration-s D]
 *             [--seed S] [--gpu PROFILE] [--csv FILE] [--json FILE] [--tiny]
 *
 * Requests: job j's mean gap is G * F^U (U uniform in [-1, 1], drawn per
 * job: "a request every ~10 s, times or divided by 3"), exponential gaps,
 * from t = 1 s to D. Latency: request time to completion in salusd; solo:
 * the same requests with the job alone on the GPU. Profiles: see the table
 * below and eval/README.md; every number not computed is printed with its
 * source. Last line:
 *   BENCH eval_inference salus_jobs=... mps_jobs=... added_ms=... */
#include "cli.h"
#include "graphs.h"
#include "evsim.h"
#include "sim/profiles.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "workload.h"
#include "zoo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1ull << 20)

/* The 14 models: the 11 CNNs of the Salus CSV, and the artifact's vae,
 * superres and seq2seq (PTB word LM, small config). How each is timed:
 * - graph: a forward pass at batch 1 from the op list (eval/lib/graphs.c),
 *   its launches pipelined (a request is submitted whole);
 * - estimate: ops launched back to back at launch_ns each, beside forward
 *   FLOPs at the profile's effective rate split evenly over the ops (the
 *   sim cost model applied to whole-network totals), with the
 *   FLOPs published for the network (approximate; cited) and the op count
 *   an ASSUMPTION (its forward layers' kernels, roughly counted). */
typedef struct inf_model {
    const char *name;
    bool graph;
    double gmac;     /* estimate: forward multiply-adds per sample, 1e9 */
    unsigned n_ops;  /* estimate: forward kernels per request */
    uint64_t params; /* when neither the CSV nor the op list has it */
    const char *source;
    /* filled in */
    uint64_t request_ns, persistent, ephemeral;
    double util;
    double launch; /* launch share (graphs.h), the GPU's launch path it needs */
} inf_model;

#define M(name, graph, gmac, n_ops, params, source)                                                \
    {                                                                                              \
        name, graph, gmac, n_ops, params, source, 0, 0, 0, 0, 0                                    \
    }
static inf_model models[] = {
    M("alexnet", false, 0.72, 25, 0, "Krizhevsky et al. 2012: ~0.72 GMAC"),
    M("googlenet", false, 1.5, 150, 0, "Szegedy et al. 2015: 1.5 G multiply-adds"),
    M("inception3", false, 5.7, 300, 0, "Szegedy et al. 2016: ~5.7 G multiply-adds"),
    M("inception4", false, 12.3, 450, 0, "Szegedy et al. 2017: ~12.3 G multiply-adds"),
    M("overfeat", false, 2.8, 30, 0, "Sermanet et al. 2014, fast: ~2.8 G multiply-adds"),
    M("resnet50", true, 0, 0, 0, "op list"),
    M("resnet101", true, 0, 0, 0, "op list"),
    M("resnet152", true, 0, 0, 0, "op list"),
    M("vgg11", true, 0, 0, 0, "op list"),
    M("vgg16", true, 0, 0, 0, "op list"),
    M("vgg19", true, 0, 0, 0, "op list"),
    M("vae", true, 0, 0, 0, "op list"),
    M("superres", true, 0, 0, 0, "op list"),
    /* PTB small (Zaremba et al. 2014 config in the artifact's
     * ptb_word_lm.py): vocabulary 10000, 2 LSTM layers of 200, 20 steps:
     * embedding 2.0M + LSTMs 0.64M + softmax 2.0M parameters; per step the
     * LSTMs and the softmax layer: 2.64M multiply-adds, x 20 steps */
    M("seq2seq", false, 0.0528, 250, 4650000, "PTB small LM: 2.64M MAC x 20 steps"),
};
#undef M
#define N_MODELS (sizeof models / sizeof models[0])

/* Ephemeral bytes of one request at batch 1 for the CSV models: the
 * training peak of the smallest-batch row less weights and gradients, per
 * sample. Training keeps every activation for the backward pass and
 * inference only the live ones, so this over-states the request's memory:
 * conservative for salus, and the same figure is used for MPS. Floor 16 MiB.
 * vae, superres, seq2seq: 16 MiB (ASSUMPTION; their activations at batch 1
 * are well under 1 MiB). */
static uint64_t ephemeral_from_csv(const sl_eval_workload *w, size_t n_w, const char *model,
                                   uint64_t persistent)
{
    const sl_eval_workload *best = NULL;
    for (size_t i = 0; i < n_w; i++)
        if (strcmp(w[i].model, model) == 0 && (!best || w[i].batch < best->batch))
            best = &w[i];
    uint64_t e = 16 * MIB;
    if (best && best->peak_bytes > 2 * persistent) {
        uint64_t per = (best->peak_bytes - 2 * persistent) / best->batch;
        e = per > e ? per : e;
    }
    return e;
}

static int profile_models(const sl_sim_profile *gpu, const sl_eval_workload *w, size_t n_w)
{
    for (size_t m = 0; m < N_MODELS; m++) {
        inf_model *im = &models[m];
        uint64_t params = sl_zoo_published_params(im->name);
        if (im->graph) {
            sl_eval_timeline t;
            int rc = sl_eval_timeline_build_ex(im->name, 1, gpu, true, &t);
            if (rc != SL_OK)
                return rc;
            /* launched as salusd submits a request: all at once (graphs.h) */
            im->request_ns = sl_eval_timeline_pipelined_ns(&t);
            im->util = sl_eval_timeline_utilisation_ex(&t, true);
            im->launch = (double) (t.iteration_ns - t.work_ns) / (double) im->request_ns;
            if (!params)
                params = t.params;
            sl_eval_timeline_fini(&t);
        } else {
            double work = 2 * im->gmac * 1e9 / (gpu->peak_flops[SL_SIM_FP32] * gpu->eff_compute);
            uint64_t work_ns = (uint64_t) ceil(work * 1e9);
            /* launched all at once, its ops taken as equal in work w:
             * the first launch, then each later op after its launch or
             * the op before it, whichever ends later, then the last work */
            uint64_t n = im->n_ops, l = gpu->launch_ns, w = work_ns / (n ? n : 1);
            w = w ? w : 1; /* some work after the last launch: a launch share below 1 */
            im->request_ns = n ? l + (n - 1) * (l > w ? l : w) + w : work_ns;
            /* occupancy 1: no layer shapes to estimate it from (so these
             * batch-1 requests are taken to fill the SMs while their work
             * runs; the op-list models' u counts their occupancy) */
            im->util = (double) work_ns / (double) im->request_ns;
            im->launch = (double) (n * l) / (double) im->request_ns;
        }
        if (!params)
            params = im->params;
        im->persistent = params * 4; /* fp32 weights only: inference keeps no slots */
        im->ephemeral = ephemeral_from_csv(w, n_w, im->name, im->persistent);
    }
    return SL_OK;
}

/* Job i of n: model i % 14, instance i / 14 (every model's first instance
 * first, as a deployment would add replicas). */
static void make_jobs(size_t n, sl_eval_job_spec *jobs, uint64_t **req, double gap_s, double spread,
                      double duration_s, uint64_t seed)
{
    sl_eval_rng rng;
    sl_eval_rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++) {
        inf_model *im = &models[i % N_MODELS];
        double mean = gap_s * pow(spread, 2 * sl_eval_rng_uniform(&rng) - 1);
        size_t k = 0;
        double t = 1.0 + sl_eval_rng_exp(&rng, mean);
        while (t < duration_s && req && req[i]) {
            req[i][k++] = (uint64_t) (t * 1e9);
            t += sl_eval_rng_exp(&rng, mean);
        }
        if (req && req[i] && k == 0) /* at least one request */
            req[i][k++] = (uint64_t) (1e9 * (1.0 + duration_s) / 2);
        jobs[i] = (sl_eval_job_spec){
            .id = i + 1,
            .iterations = req ? k : 1,
            .iteration_ns = im->request_ns,
            .persistent_bytes = im->persistent,
            .ephemeral_bytes = im->ephemeral,
            .workload = (int) (i % N_MODELS),
            .utilisation = im->util,
            .launch_share = im->launch,
            .request_ns = req ? req[i] : NULL,
        };
    }
}

/* How many of the first n jobs salusd admits at their arrival (all at
 * t = 0), one request each. */
static int admitted_at_once(size_t n, uint64_t gpu_bytes, size_t *admitted)
{
    sl_eval_job_spec *jobs = sl_calloc(n, sizeof *jobs);
    sl_eval_job_result *res = sl_calloc(n, sizeof *res);
    if (!jobs || !res) {
        sl_free(jobs);
        sl_free(res);
        return SL_ENOMEM;
    }
    make_jobs(n, jobs, NULL, 10, 1, 2, 1);
    sl_eval_config cfg = sl_eval_config_default("fair", false, 1, gpu_bytes);
    sl_eval_summary sum;
    int rc = sl_eval_run(&cfg, jobs, n, res, &sum);
    *admitted = 0;
    for (size_t i = 0; rc == SL_OK && i < n; i++)
        *admitted += !res[i].refused && res[i].admitted_ns == 0;
    sl_free(jobs);
    sl_free(res);
    return rc;
}

/* MPS: one process per job, each holding its weights, its own ephemeral
 * memory (no sharing across processes) and `overhead` bytes; first fit in
 * job order into the whole device. */
static size_t mps_fit(size_t n, uint64_t capacity, uint64_t overhead)
{
    uint64_t used = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const inf_model *im = &models[i % N_MODELS];
        uint64_t need = im->persistent + im->ephemeral + overhead;
        if (used + need > capacity)
            break;
        used += need;
        k++;
    }
    return k;
}

/* MPS: per-process costs salus pays once (in its reserved 5 %), MPS per
 * process. ASSUMPTIONS: a CUDA context with cuDNN and cuBLAS loaded is
 * 300-500 MiB on Pascal (the range commonly reported for CUDA 9-10 with
 * cuDNN; not measured here); library workspaces and handles 64 MiB, the
 * per-lane framework memory salusd reserves on the sim device
 * (server/server.c), so both sides pay it once per executing context. */
static const struct {
    const char *what;
    uint64_t overhead;
} mps_cases[] = {
    {"weights + ephemeral only", 0},
    {"+ 300 MiB context + 64 MiB workspaces", 364 * MIB},
    {"+ 500 MiB context + 64 MiB workspaces", 564 * MIB},
};

static const char usage[] = "usage: %s [--instances K (3)] [--gap-s G (10)] [--spread F (3)] "
                            "[--duration-s D (600)] [--seed S] [--gpu PROFILE (p100)] [--csv FILE] "
                            "[--json FILE] [--tiny]\n";

typedef struct options {
    sl_cli_common c;
    size_t instances;
    double gap_s, spread, duration_s;
} options;

/* What the experiment found. */
typedef struct figures {
    size_t n, salus_jobs, cap_jobs, mps[3];
    sl_eval_summary sum;            /* the admitted jobs together */
    sl_eval_job_result *res, *solo; /* each job together, alone */
    double solo_mean, added_ms, max_added_p99;
} figures;

/* salusd's admission: of the n jobs, how many at once; and how far it goes
 * with more instances. MPS's fits beside it. */
static int admission(const options *o, figures *f)
{
    uint64_t capacity = o->c.gpu->capacity;
    f->n = o->instances * N_MODELS;
    f->cap_jobs = 0;
    int rc = admitted_at_once(f->n, capacity, &f->salus_jobs);
    for (size_t k = f->n; rc == SL_OK && k <= 20 * N_MODELS; k++) {
        size_t a;
        if ((rc = admitted_at_once(k, capacity, &a)) != SL_OK || a < k)
            break;
        f->cap_jobs = k;
    }
    fprintf(stderr, "inference: admission done\n");
    for (int c = 0; c < 3; c++)
        f->mps[c] = mps_fit(f->n, capacity, mps_cases[c].overhead);
    return rc;
}

/* The admitted jobs with their request schedules, together and each
 * alone. */
static int latency(const options *o, figures *f)
{
    size_t n_run = f->salus_jobs;
    size_t max_req = (size_t) (o->duration_s / (o->gap_s / o->spread) * 4 + 64);
    sl_eval_job_spec *jobs = sl_calloc(n_run, sizeof *jobs);
    uint64_t *req = sl_calloc(n_run * max_req, sizeof *req);
    f->res = sl_calloc(n_run, sizeof *f->res);
    f->solo = sl_calloc(n_run, sizeof *f->solo);
    uint64_t **reqs = sl_calloc(n_run, sizeof *reqs);
    int rc = jobs && req && f->res && f->solo && reqs ? SL_OK : SL_ENOMEM;
    for (size_t i = 0; rc == SL_OK && i < n_run; i++)
        reqs[i] = req + i * max_req;
    if (rc == SL_OK)
        make_jobs(n_run, jobs, reqs, o->gap_s, o->spread, o->duration_s, o->c.seed);
    for (size_t i = 0; rc == SL_OK && i < n_run; i++) /* an overflowing Poisson draw: a bug */
        if (jobs[i].iterations >= max_req)
            rc = SL_EINVAL;
    sl_eval_config cfg = sl_eval_config_default("fair", false, 1, o->c.gpu->capacity);
    if (rc == SL_OK)
        rc = sl_eval_run(&cfg, jobs, n_run, f->res, &f->sum);
    double solo_total = 0;
    f->max_added_p99 = 0;
    for (size_t i = 0; rc == SL_OK && i < n_run; i++) {
        sl_eval_summary one;
        if ((rc = sl_eval_run(&cfg, &jobs[i], 1, &f->solo[i], &one)) != SL_OK)
            break;
        solo_total += one.lat_mean_ns * (double) one.requests;
        double d = (double) f->res[i].lat_p99_ns - (double) f->solo[i].lat_p99_ns;
        f->max_added_p99 = d > f->max_added_p99 ? d : f->max_added_p99;
    }
    f->solo_mean = solo_total / (double) f->sum.requests;
    f->added_ms = (f->sum.lat_mean_ns - f->solo_mean) / 1e6;
    fprintf(stderr, "inference: latency runs done\n");
    sl_free(reqs);
    sl_free(req);
    sl_free(jobs);
    return rc;
}

static void print_models(void)
{
    printf("%-10s %10s %6s %9s %9s  %s\n", "model", "request_ms", "util", "P_MiB", "E_MiB",
           "timing source");
    for (size_t m = 0; m < N_MODELS; m++)
        printf("%-10s %10.3f %6.3f %9.1f %9.1f  %s\n", models[m].name,
               (double) models[m].request_ns / 1e6, models[m].util,
               (double) models[m].persistent / MIB, (double) models[m].ephemeral / MIB,
               models[m].graph ? "op list, forward at batch 1" : models[m].source);
}

static void print_figures(const options *o, const figures *f)
{
    const sl_sim_profile *gpu = o->c.gpu;
    const sl_eval_summary *sum = &f->sum;
    printf("\n%zu sessions (%zu models x %zu instances) on one %s (%.0f GiB), requests every "
           "%.0f s times %.0f^U, U uniform in [-1, 1] per job, Poisson, for %.0f s, seed %llu\n",
           f->n, N_MODELS, o->instances, gpu->name, (double) gpu->capacity / (1u << 30), o->gap_s,
           o->spread, o->duration_s, (unsigned long long) o->c.seed);
    printf("salus: %zu of %zu admitted at once (admission goes on to %zu sessions with more "
           "instances); %u lanes; memory held %.1f of %.1f GiB\n",
           f->salus_jobs, f->n, f->cap_jobs, sum->max_lanes,
           (double) sum->max_held_bytes / (1u << 30), (double) sum->capacity_bytes / (1u << 30));
    printf("salus latency: %llu requests, mean %.3f ms (solo %.3f ms, added %.3f ms), p50 %.3f "
           "ms, p99 %.3f ms; worst per-job p99 increase %.3f ms\n",
           (unsigned long long) sum->requests, sum->lat_mean_ns / 1e6, f->solo_mean / 1e6,
           f->added_ms, (double) sum->lat_p50_ns / 1e6, (double) sum->lat_p99_ns / 1e6,
           f->max_added_p99 / 1e6);
    for (int c = 0; c < 3; c++)
        printf("mps (%s): %zu of %zu processes fit in %.0f GiB\n", mps_cases[c].what, f->mps[c],
               f->n, (double) gpu->capacity / (1u << 30));
    printf("paper (Salus 5.3): 42 jobs on one P100, added latency < 5 ms\n");
}

static void write_json(FILE *jf, const options *o, const figures *f)
{
    const sl_eval_summary *sum = &f->sum;
    fprintf(jf,
            "{\"bench\": \"eval_inference\", \"seed\": %llu, \"sessions\": %zu, "
            "\"salus_jobs\": %zu, \"salus_capacity\": %zu, \"mps_jobs_bare\": %zu, "
            "\"mps_jobs_300\": %zu, \"mps_jobs_500\": %zu, \"requests\": %llu, "
            "\"lat_mean_ms\": %.4f, \"solo_mean_ms\": %.4f, \"added_ms\": %.4f, "
            "\"lat_p99_ms\": %.4f,\n",
            (unsigned long long) o->c.seed, f->n, f->salus_jobs, f->cap_jobs, f->mps[0], f->mps[1],
            f->mps[2], (unsigned long long) sum->requests, sum->lat_mean_ns / 1e6,
            f->solo_mean / 1e6, f->added_ms, (double) sum->lat_p99_ns / 1e6);
    /* for the plot: jobs per system, and every job's latency shared and
     * alone */
    fprintf(jf,
            " \"fit\": [{\"system\": \"salus\", \"jobs\": %zu, \"capacity\": %zu}, "
            "{\"system\": \"mps_bare\", \"jobs\": %zu, \"capacity\": %zu}, "
            "{\"system\": \"mps_300MiB\", \"jobs\": %zu, \"capacity\": %zu}, "
            "{\"system\": \"mps_500MiB\", \"jobs\": %zu, \"capacity\": %zu}],\n",
            f->salus_jobs, f->cap_jobs, f->mps[0], f->mps[0], f->mps[1], f->mps[1], f->mps[2],
            f->mps[2]);
    fprintf(jf, " \"per_job\": [");
    for (size_t i = 0; i < f->salus_jobs; i++)
        fprintf(jf,
                "%s{\"job\": %zu, \"model\": \"%s\", \"shared_mean_ms\": %.4f, "
                "\"solo_mean_ms\": %.4f, \"shared_p99_ms\": %.4f, \"solo_p99_ms\": %.4f}",
                i ? ",\n  " : "", i + 1, models[i % N_MODELS].name, f->res[i].lat_mean_ns / 1e6,
                f->solo[i].lat_mean_ns / 1e6, (double) f->res[i].lat_p99_ns / 1e6,
                (double) f->solo[i].lat_p99_ns / 1e6);
    fprintf(jf, "]}\n");
}

static bool tiny(void *dst, const char *arg)
{
    (void) arg;
    ((options *) dst)->duration_s = 30;
    return true;
}

int main(int argc, char **argv)
{
    options o = {.c = sl_cli_common_default(SL_CLI_WANT_SEED | SL_CLI_WANT_JSON | SL_CLI_WANT_GPU |
                                            SL_CLI_WANT_CSV),
                 .instances = 3,
                 .gap_s = 10,
                 .spread = 3,
                 .duration_s = 600};
    const sl_cli_opt opts[] = {
        {"instances", SL_CLI_SIZE, &o.instances, 1, 1000, NULL},
        {"gap-s", SL_CLI_DOUBLE, &o.gap_s, 1e-3, 1e5, NULL},
        {"spread", SL_CLI_DOUBLE, &o.spread, 1, 1000, NULL},
        {"duration-s", SL_CLI_ABOVE, &o.duration_s, 1, 1e7, NULL},
        {"tiny", SL_CLI_CALL, &o, 0, 0, tiny},
    };
    int st = sl_cli_parse(argc, argv, usage, &o.c, opts, sizeof opts / sizeof opts[0]);
    if (st != SL_CLI_RUN)
        return st;
    sl_eval_workload *w;
    size_t n_w;
    if (!sl_cli_workloads(&o.c, &w, &n_w))
        return 1;
    int rc = profile_models(o.c.gpu, w, n_w);
    if (rc != SL_OK)
        return sl_cli_fail(rc, "profiles");
    print_models();
    figures f = {0};
    if ((rc = admission(&o, &f)) != SL_OK)
        return sl_cli_fail(rc, "admission run");
    if ((rc = latency(&o, &f)) != SL_OK)
        return sl_cli_fail(rc, "latency run");
    print_figures(&o, &f);
    FILE *jf;
    if (!sl_cli_create(o.c.json, &jf))
        return 1;
    if (jf)
        write_json(jf, &o, &f);
    if (!sl_cli_close(jf, o.c.json))
        return 1;
    printf("BENCH eval_inference salus_jobs=%zu mps_jobs=%zu added_ms=%.3f salus_capacity=%zu "
           "mps_jobs_bare=%zu mps_jobs_500=%zu\n",
           f.salus_jobs, f.mps[1], f.added_ms, f.cap_jobs, f.mps[0], f.mps[2]);
    sl_free(f.solo);
    sl_free(f.res);
    sl_free(w);
    return 0;
}
