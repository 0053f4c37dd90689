/* eval/muxflow: online inference services co-located with offline training
 * (MuxFlow: Zhao et al., "MuxFlow: Efficient and Safe GPU Sharing in
 * Large-Scale Production Deep Learning Clusters", 2023), placed by
 * maximum-weight matching against greedy and against one job per GPU.
 *
 *   muxflow [--csv FILE] [--gpus N] [--offline M] [--day-s T] [--gpu PROFILE]
 *           [--seed S] [--json FILE] [--tiny] [--no-timing] [--no-gap-fill]
 *
 * The cluster: N GPUs, each serving one online inference service whose load
 * follows a diurnal curve from 20 to 190 and back to 20 requests per second
 * (the paper's production range) over one "day" compressed to T seconds
 * (default 120: latency and utilisation ratios do not depend on T while T
 * is far above a request's service time), scaled per service. M offline
 * training jobs wait to be co-located, at most one per GPU. Policies
 * (eval/lib/placement.h):
 * - one-per-gpu: no co-location (the offline jobs need GPUs of their own);
 * - greedy: pairs by descending predicted weight;
 * - matching: maximum-weight bipartite matching (Hungarian).
 * The weight of (offline job, GPU) is the pair's predicted normalised
 * throughput, online plus offline, as MuxFlow's scheduler uses, computed
 * from the profiles (pair_weight); a pair whose memory salusd does not
 * admit (eval/lib/evsim.h sl_eval_gpu_memory: the service's sessions, then the
 * offline job, through sl_mem_admit_ex) is forbidden.
 *
 * Each GPU is one sl_eval_run (eval/lib/evsim.h), salusd's code on a virtual
 * clock, policy priority with salusd's defaults (stepwise dispatch and gap
 * filling: sched/steps.h and sched/gaps.h decide when an offline op goes):
 * - a service is K sessions (replicas) of priority 10, each an inference
 *   job (request_ns) whose requests go op by op (the model's batch-1
 *   forward pass, eval/lib/graphs.c, each op at its occupancy, kernels/sim).
 *   A session runs one request at a time, so the service's requests are
 *   dealt round-robin to its K replicas and wait at their replica when it
 *   is busy (latency counts from the request's arrival). K = the smallest
 *   number that keeps each replica's load at the service's peak at most
 *   REPLICA_LOAD (an ASSUMPTION, below);
 * - the offline job is a training session of priority 0 whose iterations
 *   go op by op (its computed timeline at the CSV row's batch);
 * - the run stops at T (sl_eval_config.until_ns).
 * --no-gap-fill is salusd's ablation: offline ops go whenever no request
 * is pending, not only into predicted gaps.
 * Then the matching placement again under other salusd flags, whatever
 * the command line says: --no-gap-fill (unless it is the command line's);
 * compute partitions (pdev.h, sched/partition.h; gpu_mode below):
 * --partitions auto:N --no-stepwise, --partitions auto:N (salusd's
 * defaults otherwise: the offline job op by op beside the service and
 * spilled into its idle partition), N the service's declared need (graphs.h
 * sl_eval_timeline_need_sms on its request's op shapes); and
 * --partitions auto with no need declared (the partition follows the
 * measured load alone); and --partitions auto:N with N declared at the
 * paper's latency objective (the fewest SMs within 20 % of the request's
 * whole-device time) instead of within 2 %.
 * The services alone are the same runs without the offline job.
 *
 * Figures: GPU utilisation as nvidia-smi reports it (the fraction of time
 * at least one kernel runs: summary.gpu_busy_ns / T) and SM occupancy (the
 * time average of the share of the SMs in use, summary.gpu_occupied_ns /
 * T); online p99 inflation = a service's p99 latency (its replicas' requests
 * pooled) co-located / alone on the same arrivals (mean and worst over
 * services); offline normalised throughput = iterations completed in the
 * day / iterations the job completes alone in a day (T / (iteration +
 * client gap): ops back to back, what sl_eval_run gives it alone), over the
 * M jobs (an unplaced job counts 0). Matching time at n = 100, 500, 2000 on
 * random weights. Last lines:
 *   BENCH eval_matching n100_ms=... n500_ms=... n2000_ms=...
 *   BENCH eval_muxflow util=... online_p99_inflation=... offline_tput=...
 * (the matching policy's under salusd's defaults, which ship without
 * partitions; the other rows' figures follow as nofill_*, part_*,
 * partgap_*, partauto_*, partslo_*; the paper: utilisation 26 % -> 76 %, online
 * latency up by less than 20 %). */
#include "cli.h"
#include "gaps.h"
#include "graphs.h"
#include "manager.h"
#include "partition.h"
#include "placement.h"
#include "evsim.h"
#include "sim/profiles.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "workload.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef SL_EVAL_CSV
#define SL_EVAL_CSV "eval/data/salus-workloads.csv"
#endif

#define MIB (1ull << 20)

/* The paper's load range (requests per second, trough and peak). */
#define QPS_LOW 20.0
#define QPS_PEAK 190.0

/* Assumptions, chosen before any run and not tuned on the results: */
/* a service's peak as a fraction of the paper's 190 QPS, uniform: services
 * differ in popularity */
#define PEAK_MIN 0.3
#define PEAK_MAX 1.0
/* replicas are provisioned so that each is at most half busy at the
 * service's peak (request rate x request time alone): headroom for a
 * latency objective, the usual provisioning rule of thumb */
#define REPLICA_LOAD 0.5
/* the services' models: the CNNs eval/lib/graphs.c builds, batch-1 forward
 * passes (as eval/drivers/inference.c) */
static const char *const svc_models[] = {"resnet50", "resnet101", "resnet152",
                                         "vgg11",    "vgg16",     "vgg19"};
#define N_SVC_MODELS (sizeof svc_models / sizeof svc_models[0])
#define SVC_PRIORITY 10

/* A service's declared need for an online partition: the fewest SMs on
 * which its request runs within this slack of its time on the whole device
 * (graphs.h sl_eval_timeline_need_sms; eval/drivers/spatial.c declares the same) */
#define NEED_SLACK 0.02
/* MuxFlow's online latency objective (+< 20 %): a need sized to it, the
 * fewest SMs on which a request runs within 20 % of its whole-device time
 * (the matching-part-slo row; the objective is the paper's, not fitted) */
#define SLO_SLACK 0.20

/* How a GPU runs its service and its offline job: salusd's priority policy
 * with its defaults, or with some of its flags. */
typedef struct gpu_mode {
    bool no_gap_fill; /* salusd --no-gap-fill */
    /* salusd --partitions auto:N, N the service's declared need: the
     * replicas on an online partition sized by sched/partition.h from N
     * and its measured load, the offline job on the rest */
    bool partitions;
    /* with partitions: the offline job op by op beside the service (the
     * isolated step dispatch of sched/steps.h) and, while the service is
     * idle, into its partition when one of its blocks there is within the
     * gap filler's margin of a request (evsim.h part_spill_block_ns); without
     * it the offline job's iterations go whole on their partition */
    bool spill;
    /* with partitions: the service declares no need (salusd --partitions
     * auto, sessions without compute units): the online partition starts
     * at the smallest and follows the measured load alone */
    bool undeclared;
    /* with partitions: the service declares its need at the latency
     * objective (SLO_SLACK) instead of NEED_SLACK */
    bool slo_need;
} gpu_mode;

/* A model's batch-1 request: its ops, time alone and memory. */
typedef struct svc_model {
    sl_eval_op *ops;
    sl_eval_op_shape *shapes;
    uint32_t n_ops;
    uint64_t request_ns;
    double u; /* utilisation alone (graphs.h) */
    uint64_t p, e;
    unsigned need;     /* declared SMs (NEED_SLACK) */
    unsigned need_slo; /* the same at the latency objective (SLO_SLACK) */
} svc_model;

/* An offline training job's computed iteration. */
typedef struct train_model {
    sl_eval_op *ops;
    sl_eval_op_shape *shapes;
    uint32_t n_ops;
    uint64_t iteration_ns; /* alone, whole iterations (pipelined unless --serial-launch) */
    uint64_t op_ns;        /* its mean op, launch and work: what a stepwise op takes */
    double u;
} train_model;

typedef struct online {
    int model; /* into svc_models */
    double peak;
    unsigned replicas;
} online;

typedef struct offline {
    int workload; /* into the computed workloads */
    int timeline; /* into the offline timelines */
} offline;

typedef struct gpu_out {
    double busy_s, sm_s, p99_s, off_iters;
    size_t requests;
    uint64_t spills, resizes; /* partitions: offline ops on the online one, its resizes */
} gpu_out;

/* Diurnal rate at time t of a day of length T: a raised cosine from the
 * trough to the peak and back. */
static double rate_at(const online *on, double t, double T)
{
    double low = QPS_LOW * on->peak, high = QPS_PEAK * on->peak;
    return low + (high - low) * 0.5 * (1.0 - cos(6.283185307179586 * t / T));
}

/* A timeline's ops as the simulator takes them (each with its occupancy). */
static sl_eval_op *to_ops(const sl_eval_timeline *t)
{
    sl_eval_op *o = sl_calloc(t->n_ops ? t->n_ops : 1, sizeof *o);
    for (size_t i = 0; o && i < t->n_ops; i++)
        o[i] = (sl_eval_op){.launch_ns = t->ops[i].launch_ns,
                            .work_ns = t->ops[i].ns - t->ops[i].launch_ns,
                            .split_max = t->ops[i].split_max,
                            .occupancy = t->ops[i].occupancy,
                            .block_ns = t->ops[i].block_ns};
    return o;
}

/* The timeline's op shapes for the partition model (kernels/sim's
 * compute/memory split and waves, as graphs.c timed them). */
static sl_eval_op_shape *to_shapes(const sl_eval_timeline *t)
{
    sl_eval_op_shape *o = sl_calloc(t->n_ops ? t->n_ops : 1, sizeof *o);
    for (size_t i = 0; o && i < t->n_ops; i++)
        o[i] = (sl_eval_op_shape){.compute_ns = t->ops[i].compute_ns,
                                  .memory_ns = t->ops[i].memory_ns,
                                  .waves = t->ops[i].waves};
    return o;
}

/* The service's request times in [0, T) (ns): a Poisson process at the
 * diurnal rate, by thinning one at the peak rate. From the seed alone, so
 * the alone and co-located runs see the same requests. Returns the count;
 * *out (sl_free) holds them, NULL on allocation failure. */
static size_t requests(const online *on, uint64_t seed, double T, uint64_t **out)
{
    sl_eval_rng r;
    sl_eval_rng_seed(&r, seed);
    double lmax = QPS_PEAK * on->peak, t = 0;
    size_t n = 0, cap = (size_t) (lmax * T) + 64;
    uint64_t *at = sl_calloc(cap, sizeof *at);
    while (at) {
        t += sl_eval_rng_exp(&r, 1.0 / lmax);
        if (t >= T)
            break;
        if (sl_eval_rng_uniform(&r) * lmax >= rate_at(on, t, T))
            continue;
        if (n == cap) {
            uint64_t *more = sl_reallocarray(at, cap * 2, sizeof *at);
            if (!more) {
                sl_free(at);
                at = NULL;
                break;
            }
            at = more;
            cap *= 2;
        }
        at[n++] = (uint64_t) (t * 1e9);
    }
    *out = at;
    return at ? n : 0;
}

/* A whole iteration's launches all at its start (evsim.h
 * pipelined_launches), and every solo time, utilisation and declared need
 * computed the same way; --serial-launch: each after the op before it */
static bool pipelined = true;

/* One GPU for one day through sl_eval_run: the service's replicas and,
 * unless off is NULL, the offline job, run as mode says. */
static int run_gpu(const sl_sim_profile *gpu, const gpu_mode *mode, const online *on,
                   const svc_model *sm, const offline *off, const sl_eval_workload *cw,
                   const train_model *tm, uint64_t seed, double T, gpu_out *out)
{
    memset(out, 0, sizeof *out);
    uint64_t *req;
    size_t n_req = requests(on, seed, T, &req);
    if (!req)
        return SL_ENOMEM;
    unsigned k = on->replicas;
    uint64_t *dealt = sl_calloc(n_req ? n_req : 1, sizeof *dealt);
    sl_eval_job_spec *jobs = sl_calloc(k + 1, sizeof *jobs);
    if (!dealt || !jobs) {
        sl_free(req);
        sl_free(dealt);
        sl_free(jobs);
        return SL_ENOMEM;
    }
    /* round-robin: replica r gets requests r, r + k, ...; dealt holds
     * them replica after replica */
    size_t n_jobs = 0, at = 0;
    for (unsigned r = 0; r < k; r++) {
        size_t first = at;
        for (size_t i = r; i < n_req; i += k)
            dealt[at++] = req[i];
        if (at == first)
            continue;
        jobs[n_jobs++] = (sl_eval_job_spec){.id = r + 1,
                                            .iterations = at - first,
                                            .iteration_ns = sm->request_ns,
                                            .persistent_bytes = sm->p,
                                            .ephemeral_bytes = sm->e,
                                            .priority = SVC_PRIORITY,
                                            .ops = sm->ops,
                                            .op_shapes = sm->shapes,
                                            .n_ops = sm->n_ops,
                                            .request_ns = dealt + first};
    }
    uint64_t T_ns = (uint64_t) (T * 1e9);
    sl_eval_config cfg = sl_eval_config_default("priority", false, 1, gpu->capacity);
    cfg.until_ns = T_ns;
    cfg.no_gap_fill = mode->no_gap_fill;
    cfg.pipelined_launches = pipelined;
    sl_part_plan_config plan;
    if (mode->partitions) {
        unsigned min_sms, align;
        sl_eval_part_granularity(gpu, &min_sms, &align);
        plan = sl_part_plan_config_default(gpu->sm_count, min_sms, align);
        cfg.part_sms = gpu->sm_count;
        cfg.part_online = mode->undeclared ? min_sms : mode->slo_need ? sm->need_slo : sm->need;
        cfg.part_plan = &plan;
        cfg.no_stepwise = !mode->spill;
        if (mode->spill) /* a request waits at most the gap margin of itself */
            cfg.part_spill_block_ns =
                (uint64_t) (sl_gaps_config_default().fit_margin * (double) sm->request_ns);
    }
    size_t off_at = n_jobs;
    if (off) {
        /* more iterations than the day holds: the horizon ends the run */
        jobs[n_jobs++] = (sl_eval_job_spec){
            .id = 1000,
            .iterations = T_ns / tm->iteration_ns + 2,
            .iteration_ns = tm->iteration_ns,
            .persistent_bytes = cw->persistent_bytes,
            .ephemeral_bytes = cw->ephemeral_bytes,
            .ops = tm->ops,
            .op_shapes = tm->shapes,
            .n_ops = tm->n_ops,
        };
    }
    sl_eval_job_result *res = sl_calloc(n_jobs ? n_jobs : 1, sizeof *res);
    sl_eval_summary sum;
    int rc = res ? sl_eval_run(&cfg, jobs, n_jobs, res, &sum) : SL_ENOMEM;
    if (rc == SL_OK) {
        out->busy_s = (double) sum.gpu_busy_ns / 1e9;
        out->sm_s = sum.gpu_occupied_ns / 1e9;
        out->p99_s = (double) sum.lat_p99_ns / 1e9;
        out->requests = sum.requests;
        out->spills = sum.part_spills;
        out->resizes = sum.part_resizes;
        if (off)
            out->off_iters = (double) res[off_at].iterations;
    }
    sl_free(res);
    sl_free(jobs);
    sl_free(dealt);
    sl_free(req);
    return rc;
}

/* MuxFlow's weight: the pair's predicted normalised throughput, offline
 * plus online, from the profiles alone. rho = the service's mean busy
 * fraction; the offline job runs when no request is pending (~ 1 - rho);
 * a request arrives during an offline op with probability ~ 1 - rho and
 * then overlaps half an op on average, slowed by the overlap's rate
 * min(1, 1 / (u_s + u_o)) (the utilisations alone, graphs.h). */
static double pair_weight(const svc_model *sm, const train_model *tm, double mean_qps)
{
    double t_s = (double) sm->request_ns / 1e9;
    double op_s = (double) tm->op_ns / 1e9;
    double rho = fmin(0.99, mean_qps * t_s);
    double r = fmin(1.0, 1.0 / (sm->u + tm->u));
    double extra = (1.0 - rho) * 0.5 * op_s * (1.0 / r - 1.0) + (1.0 - rho) * 0.5 * op_s;
    return (1.0 - rho) + t_s / (t_s + extra);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* Wall time of sl_place_match on an n x n matrix of seeded uniform
 * weights, milliseconds. */
static double time_matching(size_t n, uint64_t seed, double *greedy_ratio)
{
    double *w = sl_calloc(n * n, sizeof *w);
    int *out = sl_calloc(n, sizeof *out);
    if (!w || !out) {
        sl_free(w);
        sl_free(out);
        return -1;
    }
    sl_eval_rng r;
    sl_eval_rng_seed(&r, seed);
    for (size_t i = 0; i < n * n; i++)
        w[i] = sl_eval_rng_uniform(&r);
    double t0 = now_s(), best = 0, gr = 0;
    int rc = sl_place_match(w, n, n, out, &best);
    double ms = (now_s() - t0) * 1e3;
    if (rc == SL_OK && sl_place_greedy(w, n, n, out, &gr) == SL_OK && greedy_ratio)
        *greedy_ratio = gr / best;
    sl_free(w);
    sl_free(out);
    return rc == SL_OK ? ms : -1;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--csv FILE] [--gpus N] [--offline M] [--day-s T] [--gpu PROFILE] "
            "[--seed S] [--json FILE] [--tiny] [--no-timing] [--no-gap-fill] "
            "[--serial-launch]\n"
            "defaults: 32 GPUs, 32 offline jobs, a 120 s day, p100, seed 1; --tiny: 4 GPUs, "
            "4 jobs, a 10 s day\n",
            argv0);
}

enum { P_ONE, P_GREEDY, P_MATCH, N_POL };

/* The table's rows: a placement and how its GPUs run. */
enum { R_ONE, R_GREEDY, R_MATCH, R_NOFILL, R_PART, R_PART_GAP, R_PART_AUTO, R_PART_SLO, N_ROWS };
typedef struct row {
    const char *name;
    int policy; /* P_* */
    gpu_mode mode;
} row;

typedef struct row_res {
    bool ran;
    double util, sm, infl, worst, tput;
} row_res;

int main(int argc, char **argv)
{
    sl_cli_init(argv[0]);
    const char *csv = SL_EVAL_CSV, *gpu_name = "p100", *json_path = NULL;
    size_t n_gpus = 32, n_off = 32;
    double T = 120;
    uint64_t seed = 1;
    bool timing = true, tiny = false, no_gap_fill = false;
    static const struct option longopts[] = {{"csv", required_argument, NULL, 'c'},
                                             {"gpus", required_argument, NULL, 'n'},
                                             {"offline", required_argument, NULL, 'm'},
                                             {"day-s", required_argument, NULL, 'd'},
                                             {"gpu", required_argument, NULL, 'g'},
                                             {"seed", required_argument, NULL, 's'},
                                             {"json", required_argument, NULL, 'j'},
                                             {"tiny", no_argument, NULL, 't'},
                                             {"no-timing", no_argument, NULL, 'T'},
                                             {"no-gap-fill", no_argument, NULL, 'G'},
                                             {"help", no_argument, NULL, 'h'},
                                             {"serial-launch", no_argument, NULL, 'P'},
                                             {NULL, 0, NULL, 0}};
    for (int ch; (ch = getopt_long(argc, argv, "c:n:m:d:g:s:j:tTGhP", longopts, NULL)) != -1;) {
        switch (ch) {
        case 'c':
            csv = optarg;
            break;
        case 'n':
            if (!sl_cli_size("--gpus", optarg, 1, 4096, &n_gpus))
                return 2;
            break;
        case 'm':
            if (!sl_cli_size("--offline", optarg, 1, 100000, &n_off))
                return 2;
            break;
        case 'd':
            if (!sl_cli_double_above("--day-s", optarg, 1, 1e7, &T))
                return 2;
            break;
        case 'g':
            gpu_name = optarg;
            break;
        case 's':
            if (!sl_cli_seed("--seed", optarg, &seed))
                return 2;
            break;
        case 'j':
            json_path = optarg;
            break;
        case 't':
            tiny = true;
            n_gpus = n_off = 4;
            T = 10;
            break;
        case 'T':
            timing = false;
            break;
        case 'G':
            no_gap_fill = true;
            break;
        case 'P':
            pipelined = false;
            break;
        case 'h':
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
    sl_eval_workload *w;
    size_t n_w;
    int rc = sl_eval_workloads_load(csv, &w, &n_w);
    if (rc != SL_OK) {
        fprintf(stderr, "muxflow: cannot load %s: %s\n", csv, sl_strerror(rc));
        return 1;
    }
    /* offline jobs: the CSV rows whose training iteration eval/lib/graphs.c
     * computes (memory measured, time and ops computed on this GPU) */
    size_t n_cw = n_w;
    sl_eval_workload *cw = sl_calloc(n_w, sizeof *cw);
    if (!cw)
        return 1;
    memcpy(cw, w, n_w * sizeof *cw);
    if ((rc = sl_eval_workloads_compute(cw, &n_cw, gpu)) != SL_OK) {
        fprintf(stderr, "muxflow: computed profiles: %s\n", sl_strerror(rc));
        return 1;
    }
    /* every model's batch-1 request, and every distinct offline timeline */
    svc_model sm[N_SVC_MODELS];
    uint64_t need_ns[N_SVC_MODELS];
    for (size_t m = 0; m < N_SVC_MODELS; m++) {
        sl_eval_timeline t;
        if ((rc = sl_eval_timeline_build_ex(svc_models[m], 1, gpu, true, &t)) != SL_OK) {
            fprintf(stderr, "muxflow: %s: %s\n", svc_models[m], sl_strerror(rc));
            return 1;
        }
        unsigned min_sms, align;
        sl_eval_part_granularity(gpu, &min_sms, &align);
        sm[m] = (svc_model){
            .ops = to_ops(&t),
            .shapes = to_shapes(&t),
            .n_ops = (uint32_t) t.n_ops,
            .request_ns = sl_eval_timeline_solo_ns(&t, pipelined),
            .u = sl_eval_timeline_utilisation_ex(&t, pipelined),
            .p = t.params * 4,
            .need = sl_eval_timeline_need_sms_ex(&t, gpu, min_sms, align, NEED_SLACK, pipelined),
            .need_slo =
                sl_eval_timeline_need_sms_ex(&t, gpu, min_sms, align, SLO_SLACK, pipelined)};
        /* batch-1 activations: the CSV's smallest-batch training peak less
         * weights and gradients, per sample (as eval/drivers/inference.c: an
         * over-statement, since inference keeps only live activations),
         * at least 16 MiB */
        const sl_eval_workload *best = NULL;
        for (size_t i = 0; i < n_w; i++)
            if (!strcmp(w[i].model, svc_models[m]) && (!best || w[i].batch < best->batch))
                best = &w[i];
        sm[m].e = 16 * MIB;
        if (best && best->peak_bytes > 2 * sm[m].p && best->batch)
            sm[m].e = fmax(16.0 * MIB, (double) (best->peak_bytes - 2 * sm[m].p) / best->batch);
        need_ns[m] = sl_eval_timeline_ns_on_ex(&t, gpu, sm[m].need, pipelined);
        sl_eval_timeline_fini(&t);
        if (!sm[m].ops || !sm[m].shapes)
            return 1;
    }
    train_model *tm = sl_calloc(n_cw, sizeof *tm);
    int *tl_of = sl_calloc(n_cw, sizeof *tl_of); /* computed row -> timeline */
    size_t n_tm = 0;
    if (!tm || !tl_of)
        return 1;
    for (size_t i = 0; i < n_cw; i++) {
        tl_of[i] = -1;
        for (size_t k = 0; k < i && tl_of[i] < 0; k++)
            if (!strcmp(cw[k].model, cw[i].model) && cw[k].batch == cw[i].batch)
                tl_of[i] = tl_of[k];
        if (tl_of[i] >= 0)
            continue;
        sl_eval_timeline t;
        if ((rc = sl_eval_timeline_build(cw[i].model, cw[i].batch, gpu, &t)) != SL_OK) {
            fprintf(stderr, "muxflow: %s: %s\n", cw[i].name, sl_strerror(rc));
            return 1;
        }
        tm[n_tm] = (train_model){.ops = to_ops(&t),
                                 .shapes = to_shapes(&t),
                                 .n_ops = (uint32_t) t.n_ops,
                                 .iteration_ns = sl_eval_timeline_solo_ns(&t, pipelined),
                                 .op_ns = t.n_ops ? t.iteration_ns / t.n_ops : 0,
                                 .u = sl_eval_timeline_utilisation_ex(&t, pipelined)};
        sl_eval_timeline_fini(&t);
        if (!tm[n_tm].ops || !tm[n_tm].shapes)
            return 1;
        tl_of[i] = (int) n_tm++;
    }
    sl_eval_rng r;
    sl_eval_rng_seed(&r, seed);
    online *on = sl_calloc(n_gpus, sizeof *on);
    offline *off = sl_calloc(n_off, sizeof *off);
    double *wt = sl_calloc(n_off * n_gpus, sizeof *wt);
    int *assign[N_POL];
    for (int p = 0; p < N_POL; p++)
        assign[p] = sl_calloc(n_off, sizeof(int));
    gpu_out *alone = sl_calloc(n_gpus, sizeof *alone);
    if (!on || !off || !wt || !assign[0] || !assign[1] || !assign[2] || !alone) {
        fprintf(stderr, "muxflow: out of memory\n");
        return 1;
    }
    unsigned replicas_total = 0;
    for (size_t g = 0; g < n_gpus; g++) {
        on[g].model = (int) (sl_eval_rng_next(&r) % N_SVC_MODELS);
        on[g].peak = PEAK_MIN + (PEAK_MAX - PEAK_MIN) * sl_eval_rng_uniform(&r);
        double peak_load = QPS_PEAK * on[g].peak * (double) sm[on[g].model].request_ns / 1e9;
        on[g].replicas = (unsigned) ceil(peak_load / REPLICA_LOAD);
        if (on[g].replicas < 1)
            on[g].replicas = 1;
        replicas_total += on[g].replicas;
    }
    for (size_t o = 0; o < n_off; o++) {
        off[o].workload = (int) (sl_eval_rng_next(&r) % n_cw);
        off[o].timeline = tl_of[off[o].workload];
    }
    /* weights, with salusd's admission on each GPU deciding what fits */
    sl_eval_config mcfg = sl_eval_config_default("priority", false, 1, gpu->capacity);
    size_t forbidden = 0;
    for (size_t g = 0; g < n_gpus; g++) {
        /* the mean rate of the raised cosine is the midpoint of its range */
        double mean_qps = 0.5 * (QPS_LOW + QPS_PEAK) * on[g].peak;
        const svc_model *s = &sm[on[g].model];
        for (size_t o = 0; o < n_off; o++) {
            sl_mem_mgr *m;
            if ((rc = sl_eval_gpu_memory(&mcfg, &m)) != SL_OK) {
                fprintf(stderr, "muxflow: %s\n", sl_strerror(rc));
                return 1;
            }
            int reason;
            uint32_t lane;
            bool fits = true;
            for (unsigned k = 0; k < on[g].replicas && fits; k++)
                fits = sl_mem_admit_ex(m, k + 1, s->p, s->e, 0, &reason, &lane) == SL_OK;
            const sl_eval_workload *ow = &cw[off[o].workload];
            fits = fits && sl_mem_admit_ex(m, 1000, ow->persistent_bytes, ow->ephemeral_bytes, 0,
                                           &reason, &lane) == SL_OK;
            sl_mem_mgr_destroy(m);
            wt[o * n_gpus + g] =
                fits ? pair_weight(s, &tm[off[o].timeline], mean_qps) : SL_PLACE_FORBIDDEN;
            forbidden += !fits;
        }
    }
    bool *gfree = sl_calloc(n_gpus, sizeof *gfree);
    if (!gfree)
        return 1;
    double wtot[N_POL] = {0}, place_ms[N_POL] = {0};
    /* one-per-gpu: every GPU already runs its service, none is free */
    rc = sl_place_one_per_gpu(n_off, gfree, n_gpus, assign[P_ONE]);
    double t0 = now_s();
    if (rc == SL_OK)
        rc = sl_place_greedy(wt, n_off, n_gpus, assign[P_GREEDY], &wtot[P_GREEDY]);
    place_ms[P_GREEDY] = (now_s() - t0) * 1e3;
    t0 = now_s();
    if (rc == SL_OK)
        rc = sl_place_match(wt, n_off, n_gpus, assign[P_MATCH], &wtot[P_MATCH]);
    place_ms[P_MATCH] = (now_s() - t0) * 1e3;
    if (rc != SL_OK) {
        fprintf(stderr, "muxflow: placement: %s\n", sl_strerror(rc));
        return 1;
    }
    printf("cluster: %zu GPUs (%s), one online service each (batch-1 %s..., %.0f -> %.0f -> "
           "%.0f QPS diurnal x a per-service peak in [%.1f, %.1f], a %.0f s day; %u replicas in "
           "all), %zu offline training jobs (computed, %zu distinct); %zu of %zu pairs do not fit "
           "in memory (salusd admission)\n",
           n_gpus, gpu->name, svc_models[0], QPS_LOW, QPS_PEAK, QPS_LOW, PEAK_MIN, PEAK_MAX, T,
           replicas_total, n_off, n_tm, forbidden, n_off * n_gpus);
    for (size_t m = 0; m < N_SVC_MODELS; m++)
        printf("service %-10s request %.3f ms alone, %u ops, utilisation %.3f, P %.0f MiB, E %.0f "
               "MiB, declared need %u of %u SMs (%.3f ms there), %u at the latency objective\n",
               svc_models[m], (double) sm[m].request_ns / 1e6, sm[m].n_ops, sm[m].u,
               (double) sm[m].p / MIB, (double) sm[m].e / MIB, sm[m].need, gpu->sm_count,
               (double) need_ns[m] / 1e6, sm[m].need_slo);
    /* the services alone: the whole device, no partitions */
    const gpu_mode plain = {.no_gap_fill = no_gap_fill};
    double sum_alone_busy = 0, sum_alone_sm = 0;
    for (size_t g = 0; g < n_gpus; g++) {
        fprintf(stderr, "\rmuxflow: services alone %zu/%zu", g + 1, n_gpus);
        rc = run_gpu(gpu, &plain, &on[g], &sm[on[g].model], NULL, NULL, NULL, seed * 1000003u + g,
                     T, &alone[g]);
        if (rc != SL_OK) {
            fprintf(stderr, "muxflow: service %zu: %s\n", g, sl_strerror(rc));
            return 1;
        }
        sum_alone_busy += alone[g].busy_s / T;
        sum_alone_sm += alone[g].sm_s / T;
    }
    fprintf(stderr, "\n");
    printf("%-18s %8s %8s %10s %10s %12s %10s %8s %8s %8s\n", "configuration", "util", "sm_occ",
           "p99_infl", "p99_worst", "offline_tput", "weight", "placed", "spills", "resizes");
    FILE *jf = json_path ? fopen(json_path, "w") : NULL;
    if (jf)
        fprintf(jf,
                "{\"bench\": \"eval_muxflow\", \"gpus\": %zu, \"offline\": %zu, \"seed\": %llu, "
                "\"day_s\": %.1f, \"alone_util\": %.4f, \"alone_sm_occupancy\": %.4f, \"runs\": [",
                n_gpus, n_off, (unsigned long long) seed, T, sum_alone_busy / (double) n_gpus,
                sum_alone_sm / (double) n_gpus);
    /* a GPU given the same offline job by two rows of the same mode runs
     * once */
    int *done_o = sl_calloc(n_gpus, sizeof *done_o);
    gpu_out *done_r = sl_calloc(n_gpus, sizeof *done_r);
    if (!done_o || !done_r)
        return 1;
    for (size_t g = 0; g < n_gpus; g++)
        done_o[g] = -1;
    /* rows: the three placements under the command line's gap filling;
     * then the matching placement under salusd's --no-gap-fill (unless
     * that is the command line's already), with partitions, and with
     * partitions and gap filling (both whatever the command line says) */
    const row rows[N_ROWS] = {
        [R_ONE] = {"one-per-gpu", P_ONE, plain},
        [R_GREEDY] = {"greedy", P_GREEDY, plain},
        [R_MATCH] = {"matching", P_MATCH, plain},
        [R_NOFILL] = {"matching-nofill", P_MATCH, {.no_gap_fill = true}},
        [R_PART] = {"matching-part", P_MATCH, {.partitions = true}},
        [R_PART_GAP] = {"matching-part-gap", P_MATCH, {.partitions = true, .spill = true}},
        [R_PART_AUTO] = {"matching-part-auto",
                         P_MATCH,
                         {.partitions = true, .spill = true, .undeclared = true}},
        [R_PART_SLO] = {"matching-part-slo",
                        P_MATCH,
                        {.partitions = true, .spill = true, .slo_need = true}},
    };
    row_res res[N_ROWS] = {0};
    for (int ri = 0; ri < N_ROWS; ri++) {
        const row *rw = &rows[ri];
        if (ri == R_NOFILL && no_gap_fill)
            continue;
        int p = rw->policy;
        if (ri > R_MATCH) /* a mode of its own: its own runs */
            for (size_t g = 0; g < n_gpus; g++)
                done_o[g] = -1;
        double busy = 0, smo = 0, infl = 0, worst = 1, tput = 0;
        /* per service model: what the partitions' sizing depends on */
        double m_infl[N_SVC_MODELS] = {0}, m_tput[N_SVC_MODELS] = {0};
        unsigned m_gpus[N_SVC_MODELS] = {0}, m_placed[N_SVC_MODELS] = {0};
        size_t placed = 0;
        uint64_t spills = 0, resizes = 0;
        for (size_t g = 0; g < n_gpus; g++) {
            fprintf(stderr, "\rmuxflow: %s %zu/%zu", rw->name, g + 1, n_gpus);
            int ok = -1;
            for (size_t k = 0; k < n_off; k++)
                if (assign[p][k] == (int) g)
                    ok = (int) k;
            gpu_out go = alone[g];
            if (ok >= 0 && done_o[g] == ok) {
                go = done_r[g];
            } else if (ok >= 0) {
                const offline *o = &off[ok];
                rc = run_gpu(gpu, &rw->mode, &on[g], &sm[on[g].model], o, &cw[o->workload],
                             &tm[o->timeline], seed * 1000003u + g, T, &go);
                if (rc != SL_OK) {
                    fprintf(stderr, "muxflow: GPU %zu: %s\n", g, sl_strerror(rc));
                    return 1;
                }
                done_o[g] = ok;
                done_r[g] = go;
            }
            busy += go.busy_s / T;
            smo += go.sm_s / T;
            double ratio = alone[g].p99_s > 0 ? go.p99_s / alone[g].p99_s : 1;
            infl += ratio;
            worst = fmax(worst, ratio);
            m_infl[on[g].model] += ratio;
            m_gpus[on[g].model]++;
            if (ok >= 0) {
                const train_model *t = &tm[off[ok].timeline];
                double solo = T * 1e9 / (double) (t->iteration_ns + mcfg.client_gap_ns);
                tput += go.off_iters / solo;
                m_tput[on[g].model] += go.off_iters / solo;
                m_placed[on[g].model]++;
                spills += go.spills;
                resizes += go.resizes;
            }
            placed += ok >= 0;
        }
        fprintf(stderr, "\n");
        row_res *rr = &res[ri];
        rr->ran = true;
        rr->util = busy / (double) n_gpus;
        rr->sm = smo / (double) n_gpus;
        rr->infl = infl / (double) n_gpus;
        rr->worst = worst;
        rr->tput = tput / (double) n_off;
        printf("%-18s %8.3f %8.3f %10.3f %10.3f %12.3f %10.2f %8zu %8llu %8llu\n", rw->name,
               rr->util, rr->sm, rr->infl, rr->worst, rr->tput, wtot[p], placed,
               (unsigned long long) spills, (unsigned long long) resizes);
        if (ri >= R_MATCH) {
            printf("%-18s by service model (GPUs: p99 x mean, offline mean):", "");
            for (size_t m = 0; m < N_SVC_MODELS; m++)
                if (m_gpus[m])
                    printf(" %s (%u: x%.3f, %.3f)", svc_models[m], m_gpus[m], m_infl[m] / m_gpus[m],
                           m_placed[m] ? m_tput[m] / m_placed[m] : 0.0);
            printf("\n");
        }
        if (jf)
            fprintf(jf,
                    "%s{\"policy\": \"%s\", \"util\": %.4f, \"sm_occupancy\": %.4f, "
                    "\"p99_inflation\": %.4f, \"p99_inflation_worst\": %.4f, \"offline_tput\": "
                    "%.4f, \"weight\": %.3f, \"placed\": %zu, \"part_spills\": %llu, "
                    "\"part_resizes\": %llu}",
                    ri ? ", " : "", rw->name, rr->util, rr->sm, rr->infl, rr->worst, rr->tput,
                    wtot[p], placed, (unsigned long long) spills, (unsigned long long) resizes);
    }
    printf("services alone: util %.3f, SM occupancy %.3f\n", sum_alone_busy / (double) n_gpus,
           sum_alone_sm / (double) n_gpus);
    printf("paper (MuxFlow): GPU utilisation (nvidia-smi's: time with a kernel running) 26 %% -> "
           "76 %%, SM activity 16 %% -> 33 %%, online latency up < 20 %%\n");
    for (int ri = R_MATCH; ri < N_ROWS; ri++) {
        static const char *const what[N_ROWS] = {
            [R_MATCH] = "salusd's defaults",
            [R_NOFILL] = "--no-gap-fill",
            [R_PART] = "--partitions auto:need --no-stepwise",
            [R_PART_GAP] = "--partitions auto:need",
            [R_PART_AUTO] = "--partitions auto, no need declared",
            [R_PART_SLO] = "--partitions auto:need at the latency objective",
        };
        if (!res[ri].ran)
            continue;
        printf("ours (matching, %s): util %.0f %% -> %.0f %%, SM occupancy %.0f %% -> %.0f %%, p99 "
               "x%.3f (worst x%.3f), offline %.3f of alone\n",
               ri == R_MATCH && no_gap_fill ? "--no-gap-fill" : what[ri],
               100 * sum_alone_busy / (double) n_gpus, 100 * res[ri].util,
               100 * sum_alone_sm / (double) n_gpus, 100 * res[ri].sm, res[ri].infl, res[ri].worst,
               res[ri].tput);
    }
    printf("placement time on this cluster: greedy %.3f ms, matching %.3f ms\n", place_ms[P_GREEDY],
           place_ms[P_MATCH]);
    if (jf) {
        fprintf(jf, "]}\n");
        fclose(jf);
    }
    if (timing) {
        const size_t sizes[3] = {100, 500, 2000};
        double ms[3] = {0}, gr[3] = {0};
        for (int i = 0; i < 3; i++) {
            if (tiny && sizes[i] > 100)
                break;
            fprintf(stderr, "muxflow: matching n=%zu ...\n", sizes[i]);
            ms[i] = time_matching(sizes[i], seed, &gr[i]);
            printf("matching n=%zu: %.2f ms (greedy reaches %.4f of the optimum)\n", sizes[i],
                   ms[i], gr[i]);
        }
        printf("BENCH eval_matching n100_ms=%.2f n500_ms=%.2f n2000_ms=%.2f\n", ms[0], ms[1],
               ms[2]);
    }
    /* the headline stays salusd's defaults (partitions are off unless the
     * operator asks for them); the other configurations beside it */
    printf("BENCH eval_muxflow util=%.3f online_p99_inflation=%.3f offline_tput=%.3f "
           "sm_occupancy=%.3f greedy_util=%.3f greedy_p99_inflation=%.3f greedy_offline_tput=%.3f "
           "alone_util=%.3f alone_sm_occupancy=%.3f p99_worst=%.3f",
           res[R_MATCH].util, res[R_MATCH].infl, res[R_MATCH].tput, res[R_MATCH].sm,
           res[R_GREEDY].util, res[R_GREEDY].infl, res[R_GREEDY].tput, res[R_ONE].util,
           res[R_ONE].sm, res[R_MATCH].worst);
    static const char *const key[N_ROWS] = {[R_NOFILL] = "nofill",
                                            [R_PART] = "part",
                                            [R_PART_GAP] = "partgap",
                                            [R_PART_AUTO] = "partauto",
                                            [R_PART_SLO] = "partslo"};
    for (int ri = R_NOFILL; ri < N_ROWS; ri++)
        if (res[ri].ran) {
            printf(" %s_util=%.3f %s_p99_inflation=%.3f %s_offline_tput=%.3f", key[ri],
                   res[ri].util, key[ri], res[ri].infl, key[ri], res[ri].tput);
            printf(" %s_sm_occupancy=%.3f %s_p99_worst=%.3f", key[ri], res[ri].sm, key[ri],
                   res[ri].worst);
        }
    printf("\n");
    sl_free(done_o);
    sl_free(done_r);
    sl_free(gfree);
    sl_free(on);
    sl_free(off);
    sl_free(wt);
    for (int p = 0; p < N_POL; p++)
        sl_free(assign[p]);
    sl_free(alone);
    for (size_t m = 0; m < N_SVC_MODELS; m++) {
        sl_free(sm[m].ops);
        sl_free(sm[m].shapes);
    }
    for (size_t i = 0; i < n_tm; i++) {
        sl_free(tm[i].ops);
        sl_free(tm[i].shapes);
    }
    sl_free(tm);
    sl_free(tl_of);
    sl_free(cw);
    sl_free(w);
    return 0;
}
