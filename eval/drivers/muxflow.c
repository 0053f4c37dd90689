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
 * --partitions auto with no need declared (salusd searches for it on the
 * device at its default objective, 20 %; --partitions demand is the same
 * here, the offline job joined throughout, but for its guard:
 * --partitions demand then shares the device again wherever the requests
 * fare as well without partitions), and without that search
 * (--partition-objective 0: the partition follows the measured load
 * alone); and --partitions auto:N with N declared at the paper's latency
 * objective (the fewest SMs within 20 % of the request's whole-device
 * time, computed from the op shapes) instead of within 2 %.
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
 * (the matching policy's under salusd's defaults: graph replays,
 * --partitions demand, the offline job in concurrent segments; the same
 * with partitions off follows as off_*, the serial dispatch of one op per
 * step as serial_*, the other rows' figures as nofill_*, part_*,
 * partgap_*, partauto_*, partload_*, partslo_*; the paper: utilisation
 * 26 % -> 76 %, online latency up by less than 20 %). */
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
#include "sl_time.h"
#include "workload.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
     * auto or demand, sessions without compute units): salusd searches
     * for it at its default latency objective (sched/partition.h), then
     * the measured load sizes the partition above it */
    bool undeclared;
    /* undeclared, and no search (salusd --partition-objective 0): the
     * online partition starts at the smallest and follows the load alone */
    bool load_only;
    /* undeclared and searched, then guarded (salusd --partitions demand):
     * the device shared while the requests fare as well without
     * partitions (sched/partition.h) */
    bool guard;
    /* with partitions: the service declares its need at the latency
     * objective (SLO_SLACK) instead of NEED_SLACK */
    bool slo_need;
    /* the serial dispatch of one op per step (salusd --lp-serial
     * --lp-segment-us 1), salusd's before segments; else salusd's default
     * (sched/steps.h: concurrent segments of SL_STEPS_SEGMENT_NS) */
    bool serial_ops;
} gpu_mode;

/* A model's batch-1 request: its ops, time alone and memory. */
typedef struct svc_model {
    sl_eval_op_list ops;
    uint64_t request_ns;
    double u; /* utilisation alone (graphs.h) */
    uint64_t p, e;
    unsigned need;     /* declared SMs (NEED_SLACK) */
    unsigned need_slo; /* the same at the latency objective (SLO_SLACK) */
} svc_model;

/* An offline training job's computed iteration. */
typedef struct train_model {
    sl_eval_op_list ops;
    uint64_t iteration_ns; /* alone, whole iterations, launched as `launch` says */
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

/* How an iteration reaches the device (cli.h: one graph replay unless
 * --op-launch or --serial-launch), and every solo time, utilisation and
 * declared need computed the same way */
static enum sl_eval_launch launch = SL_EVAL_LAUNCH_GRAPH;

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
                                            .ops = sm->ops.ops,
                                            .op_shapes = sm->ops.shapes,
                                            .n_ops = sm->ops.n,
                                            .request_ns = dealt + first};
    }
    uint64_t T_ns = (uint64_t) (T * 1e9);
    sl_eval_config cfg = sl_eval_config_default("priority", false, 1, gpu->capacity);
    cfg.until_ns = T_ns;
    cfg.no_gap_fill = mode->no_gap_fill;
    sl_cli_common lc = {.launch = launch, .gpu = gpu};
    sl_cli_launch_config(&lc, &cfg);
    cfg.lp_serial = mode->serial_ops;
    cfg.segment_ns = mode->serial_ops ? 1000 : 0;
    sl_part_plan_config plan;
    if (mode->partitions) {
        unsigned min_sms, align;
        sl_eval_part_granularity(gpu, &min_sms, &align);
        plan = sl_part_plan_config_default(gpu->sm_count, min_sms, align);
        if (mode->load_only)
            plan.objective = 0;
        plan.guard = mode->guard;
        cfg.part_sms = gpu->sm_count;
        cfg.part_online = mode->load_only    ? min_sms
                          : mode->undeclared ? 0
                          : mode->slo_need   ? sm->need_slo
                                             : sm->need;
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
            .ops = tm->ops.ops,
            .op_shapes = tm->ops.shapes,
            .n_ops = tm->ops.n,
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
    double t0 = sl_now_s(), best = 0, gr = 0;
    int rc = sl_place_match(w, n, n, out, &best);
    double ms = (sl_now_s() - t0) * 1e3;
    if (rc == SL_OK && sl_place_greedy(w, n, n, out, &gr) == SL_OK && greedy_ratio)
        *greedy_ratio = gr / best;
    sl_free(w);
    sl_free(out);
    return rc == SL_OK ? ms : -1;
}

static const char usage[] =
    "usage: %s [--csv FILE] [--gpus N] [--offline M] [--day-s T] [--gpu PROFILE] "
    "[--seed S] [--json FILE] [--tiny] [--no-timing] [--no-gap-fill] "
    "[--serial-launch]\n"
    "defaults: 32 GPUs, 32 offline jobs, a 120 s day, p100, seed 1; --tiny: 4 GPUs, "
    "4 jobs, a 10 s day\n";

enum { P_ONE, P_GREEDY, P_MATCH, N_POL };

/* The table's rows: a placement and how its GPUs run. */
enum {
    R_ONE,
    R_GREEDY,
    R_MATCH,
    R_SHIPPED,
    R_NOFILL,
    R_PART,
    R_PART_GAP,
    R_PART_AUTO,
    R_PART_DEMAND,
    R_PART_LOAD,
    R_PART_SLO,
    N_ROWS
};
typedef struct row {
    const char *name;
    int policy; /* P_* */
    gpu_mode mode;
} row;

typedef struct row_res {
    bool ran;
    double util, sm, infl, worst, tput;
} row_res;

typedef struct options {
    sl_cli_common c;
    size_t n_gpus, n_off;
    double T;
    bool timing, tiny, no_gap_fill;
} options;

/* The cluster: its services and offline jobs, their profiles, the
 * placements, and the services' runs alone. */
typedef struct cluster {
    const options *o;
    sl_eval_workload *w, *cw; /* the CSV; its rows graphs.c computes */
    size_t n_w, n_cw;
    svc_model sm[N_SVC_MODELS];
    uint64_t need_ns[N_SVC_MODELS]; /* a request on its declared need */
    train_model *tm;                /* the distinct offline timelines */
    int *tl_of;                     /* computed row -> timeline */
    size_t n_tm;
    online *on;
    offline *off;
    double *wt; /* offline job x GPU weights */
    int *assign[N_POL];
    double wtot[N_POL], place_ms[N_POL];
    size_t forbidden;
    unsigned replicas_total;
    sl_eval_config mcfg; /* salusd's, for admission and the client gap */
    gpu_out *alone;
    double alone_busy, alone_sm; /* sums over the GPUs */
    /* a GPU given the same offline job by two rows of the same mode runs
     * once */
    int *done_o;
    gpu_out *done_r;
} cluster;

/* Every model's batch-1 request. */
static int build_services(cluster *cl)
{
    const sl_sim_profile *gpu = cl->o->c.gpu;
    for (size_t m = 0; m < N_SVC_MODELS; m++) {
        sl_eval_timeline t;
        int rc = sl_eval_timeline_build_ex(svc_models[m], 1, gpu, true, &t);
        if (rc != SL_OK)
            return sl_cli_fail(rc, "%s", svc_models[m]);
        unsigned min_sms, align;
        sl_eval_part_granularity(gpu, &min_sms, &align);
        svc_model *sm = &cl->sm[m];
        rc = sl_eval_op_list_from(&t, t.n_ops, &sm->ops);
        sm->request_ns = sl_eval_timeline_solo_ns(&t, launch);
        sm->u = sl_eval_timeline_utilisation_ex(&t, launch);
        sm->p = t.params * 4;
        sm->need = sl_eval_timeline_need_sms_ex(&t, gpu, min_sms, align, NEED_SLACK, launch);
        sm->need_slo = sl_eval_timeline_need_sms_ex(&t, gpu, min_sms, align, SLO_SLACK, launch);
        /* batch-1 activations: the CSV's smallest-batch training peak less
         * weights and gradients, per sample (as eval/drivers/inference.c: an
         * over-statement, since inference keeps only live activations),
         * at least 16 MiB */
        const sl_eval_workload *best = NULL;
        for (size_t i = 0; i < cl->n_w; i++)
            if (!strcmp(cl->w[i].model, svc_models[m]) && (!best || cl->w[i].batch < best->batch))
                best = &cl->w[i];
        sm->e = 16 * MIB;
        if (best && best->peak_bytes > 2 * sm->p && best->batch)
            sm->e = fmax(16.0 * MIB, (double) (best->peak_bytes - 2 * sm->p) / best->batch);
        cl->need_ns[m] = sl_eval_timeline_ns_on_ex(&t, gpu, sm->need, launch);
        sl_eval_timeline_fini(&t);
        if (rc != SL_OK)
            return 1;
    }
    return -1;
}

/* Offline jobs: the CSV rows whose training iteration eval/lib/graphs.c
 * computes (memory measured, time and ops computed on this GPU), and
 * every distinct timeline among them. */
static int build_offline(cluster *cl)
{
    const sl_sim_profile *gpu = cl->o->c.gpu;
    cl->n_cw = cl->n_w;
    if (!(cl->cw = sl_calloc(cl->n_w, sizeof *cl->cw)))
        return 1;
    memcpy(cl->cw, cl->w, cl->n_w * sizeof *cl->cw);
    int rc = sl_eval_workloads_compute(cl->cw, &cl->n_cw, gpu);
    if (rc != SL_OK)
        return sl_cli_fail(rc, "computed profiles");
    cl->tm = sl_calloc(cl->n_cw, sizeof *cl->tm);
    cl->tl_of = sl_calloc(cl->n_cw, sizeof *cl->tl_of);
    if (!cl->tm || !cl->tl_of)
        return 1;
    const sl_eval_workload *cw = cl->cw;
    for (size_t i = 0; i < cl->n_cw; i++) {
        cl->tl_of[i] = -1;
        for (size_t k = 0; k < i && cl->tl_of[i] < 0; k++)
            if (!strcmp(cw[k].model, cw[i].model) && cw[k].batch == cw[i].batch)
                cl->tl_of[i] = cl->tl_of[k];
        if (cl->tl_of[i] >= 0)
            continue;
        sl_eval_timeline t;
        if ((rc = sl_eval_timeline_build(cw[i].model, cw[i].batch, gpu, &t)) != SL_OK)
            return sl_cli_fail(rc, "%s", cw[i].name);
        train_model *tm = &cl->tm[cl->n_tm];
        rc = sl_eval_op_list_from(&t, t.n_ops, &tm->ops);
        tm->iteration_ns = sl_eval_timeline_solo_ns(&t, launch);
        tm->op_ns = t.n_ops ? t.iteration_ns / t.n_ops : 0;
        tm->u = sl_eval_timeline_utilisation_ex(&t, launch);
        sl_eval_timeline_fini(&t);
        if (rc != SL_OK)
            return 1;
        cl->tl_of[i] = (int) cl->n_tm++;
    }
    return -1;
}

/* The services (a model, a peak, replicas) and the offline jobs, drawn. */
static int draw(cluster *cl)
{
    size_t n_gpus = cl->o->n_gpus, n_off = cl->o->n_off;
    cl->on = sl_calloc(n_gpus, sizeof *cl->on);
    cl->off = sl_calloc(n_off, sizeof *cl->off);
    cl->wt = sl_calloc(n_off * n_gpus, sizeof *cl->wt);
    for (int p = 0; p < N_POL; p++)
        cl->assign[p] = sl_calloc(n_off, sizeof(int));
    cl->alone = sl_calloc(n_gpus, sizeof *cl->alone);
    cl->done_o = sl_calloc(n_gpus, sizeof *cl->done_o);
    cl->done_r = sl_calloc(n_gpus, sizeof *cl->done_r);
    if (!cl->on || !cl->off || !cl->wt || !cl->assign[0] || !cl->assign[1] || !cl->assign[2] ||
        !cl->alone || !cl->done_o || !cl->done_r) {
        fprintf(stderr, "muxflow: out of memory\n");
        return 1;
    }
    sl_eval_rng r;
    sl_eval_rng_seed(&r, cl->o->c.seed);
    for (size_t g = 0; g < n_gpus; g++) {
        online *on = &cl->on[g];
        on->model = (int) (sl_eval_rng_next(&r) % N_SVC_MODELS);
        on->peak = PEAK_MIN + (PEAK_MAX - PEAK_MIN) * sl_eval_rng_uniform(&r);
        double peak_load = QPS_PEAK * on->peak * (double) cl->sm[on->model].request_ns / 1e9;
        on->replicas = (unsigned) ceil(peak_load / REPLICA_LOAD);
        if (on->replicas < 1)
            on->replicas = 1;
        cl->replicas_total += on->replicas;
    }
    for (size_t o = 0; o < n_off; o++) {
        cl->off[o].workload = (int) (sl_eval_rng_next(&r) % cl->n_cw);
        cl->off[o].timeline = cl->tl_of[cl->off[o].workload];
    }
    return -1;
}

/* Whether GPU g's service and offline job o fit together: salusd's
 * admission on that GPU decides. */
static int fits(const cluster *cl, size_t g, size_t o, bool *ok)
{
    sl_mem_mgr *m;
    int rc = sl_eval_gpu_memory(&cl->mcfg, &m);
    if (rc != SL_OK)
        return rc;
    const svc_model *s = &cl->sm[cl->on[g].model];
    int reason;
    uint32_t lane;
    *ok = true;
    for (unsigned k = 0; k < cl->on[g].replicas && *ok; k++)
        *ok = sl_mem_admit_ex(m, k + 1, s->p, s->e, 0, &reason, &lane) == SL_OK;
    const sl_eval_workload *ow = &cl->cw[cl->off[o].workload];
    *ok = *ok && sl_mem_admit_ex(m, 1000, ow->persistent_bytes, ow->ephemeral_bytes, 0, &reason,
                                 &lane) == SL_OK;
    sl_mem_mgr_destroy(m);
    return SL_OK;
}

/* The weights and the three placements. */
static int place(cluster *cl)
{
    size_t n_gpus = cl->o->n_gpus, n_off = cl->o->n_off;
    cl->mcfg = sl_eval_config_default("priority", false, 1, cl->o->c.gpu->capacity);
    for (size_t g = 0; g < n_gpus; g++) {
        /* the mean rate of the raised cosine is the midpoint of its range */
        double mean_qps = 0.5 * (QPS_LOW + QPS_PEAK) * cl->on[g].peak;
        for (size_t o = 0; o < n_off; o++) {
            bool ok;
            int rc = fits(cl, g, o, &ok);
            if (rc != SL_OK)
                return sl_cli_fail(rc, "admission");
            cl->wt[o * n_gpus + g] =
                ok ? pair_weight(&cl->sm[cl->on[g].model], &cl->tm[cl->off[o].timeline], mean_qps)
                   : SL_PLACE_FORBIDDEN;
            cl->forbidden += !ok;
        }
    }
    bool *gfree = sl_calloc(n_gpus, sizeof *gfree);
    if (!gfree)
        return 1;
    /* one-per-gpu: every GPU already runs its service, none is free */
    int rc = sl_place_one_per_gpu(n_off, gfree, n_gpus, cl->assign[P_ONE]);
    sl_free(gfree);
    double t0 = sl_now_s();
    if (rc == SL_OK)
        rc = sl_place_greedy(cl->wt, n_off, n_gpus, cl->assign[P_GREEDY], &cl->wtot[P_GREEDY]);
    cl->place_ms[P_GREEDY] = (sl_now_s() - t0) * 1e3;
    t0 = sl_now_s();
    if (rc == SL_OK)
        rc = sl_place_match(cl->wt, n_off, n_gpus, cl->assign[P_MATCH], &cl->wtot[P_MATCH]);
    cl->place_ms[P_MATCH] = (sl_now_s() - t0) * 1e3;
    return rc == SL_OK ? -1 : sl_cli_fail(rc, "placement");
}

static void print_cluster(const cluster *cl)
{
    const options *o = cl->o;
    const sl_sim_profile *gpu = o->c.gpu;
    printf("cluster: %zu GPUs (%s), one online service each (batch-1 %s..., %.0f -> %.0f -> "
           "%.0f QPS diurnal x a per-service peak in [%.1f, %.1f], a %.0f s day; %u replicas in "
           "all), %zu offline training jobs (computed, %zu distinct); %zu of %zu pairs do not fit "
           "in memory (salusd admission)\n",
           o->n_gpus, gpu->name, svc_models[0], QPS_LOW, QPS_PEAK, QPS_LOW, PEAK_MIN, PEAK_MAX,
           o->T, cl->replicas_total, o->n_off, cl->n_tm, cl->forbidden, o->n_off * o->n_gpus);
    for (size_t m = 0; m < N_SVC_MODELS; m++) {
        const svc_model *sm = &cl->sm[m];
        printf("service %-10s request %.3f ms alone, %u ops, utilisation %.3f, P %.0f MiB, E %.0f "
               "MiB, declared need %u of %u SMs (%.3f ms there), %u at the latency objective\n",
               svc_models[m], (double) sm->request_ns / 1e6, sm->ops.n, sm->u, (double) sm->p / MIB,
               (double) sm->e / MIB, sm->need, gpu->sm_count, (double) cl->need_ns[m] / 1e6,
               sm->need_slo);
    }
}

/* The services alone: the whole device, no partitions. */
static int run_alone(cluster *cl)
{
    const options *o = cl->o;
    const gpu_mode plain = {.no_gap_fill = o->no_gap_fill};
    for (size_t g = 0; g < o->n_gpus; g++) {
        fprintf(stderr, "\rmuxflow: services alone %zu/%zu", g + 1, o->n_gpus);
        int rc = run_gpu(o->c.gpu, &plain, &cl->on[g], &cl->sm[cl->on[g].model], NULL, NULL, NULL,
                         o->c.seed * 1000003u + g, o->T, &cl->alone[g]);
        if (rc != SL_OK)
            return sl_cli_fail(rc, "service %zu", g);
        cl->alone_busy += cl->alone[g].busy_s / o->T;
        cl->alone_sm += cl->alone[g].sm_s / o->T;
    }
    fprintf(stderr, "\n");
    return -1;
}

/* What one row's GPUs did, summed. */
typedef struct row_sum {
    double busy, smo, infl, worst, tput;
    /* per service model: what the partitions' sizing depends on */
    double m_infl[N_SVC_MODELS], m_tput[N_SVC_MODELS];
    unsigned m_gpus[N_SVC_MODELS], m_placed[N_SVC_MODELS];
    size_t placed;
    uint64_t spills, resizes;
} row_sum;

/* GPU g under row rw: its service and the offline job placed there. */
static int run_row_gpu(cluster *cl, const row *rw, size_t g, row_sum *rs)
{
    const options *o = cl->o;
    int ok = -1;
    for (size_t k = 0; k < o->n_off; k++)
        if (cl->assign[rw->policy][k] == (int) g)
            ok = (int) k;
    gpu_out go = cl->alone[g];
    const online *on = &cl->on[g];
    if (ok >= 0 && cl->done_o[g] == ok) {
        go = cl->done_r[g];
    } else if (ok >= 0) {
        const offline *of = &cl->off[ok];
        int rc = run_gpu(o->c.gpu, &rw->mode, on, &cl->sm[on->model], of, &cl->cw[of->workload],
                         &cl->tm[of->timeline], o->c.seed * 1000003u + g, o->T, &go);
        if (rc != SL_OK)
            return sl_cli_fail(rc, "GPU %zu", g);
        cl->done_o[g] = ok;
        cl->done_r[g] = go;
    }
    rs->busy += go.busy_s / o->T;
    rs->smo += go.sm_s / o->T;
    double ratio = cl->alone[g].p99_s > 0 ? go.p99_s / cl->alone[g].p99_s : 1;
    rs->infl += ratio;
    rs->worst = fmax(rs->worst, ratio);
    rs->m_infl[on->model] += ratio;
    rs->m_gpus[on->model]++;
    if (ok >= 0) {
        const train_model *t = &cl->tm[cl->off[ok].timeline];
        double solo = o->T * 1e9 / (double) (t->iteration_ns + cl->mcfg.client_gap_ns);
        rs->tput += go.off_iters / solo;
        rs->m_tput[on->model] += go.off_iters / solo;
        rs->m_placed[on->model]++;
        rs->spills += go.spills;
        rs->resizes += go.resizes;
    }
    rs->placed += ok >= 0;
    return -1;
}

/* Row ri on every GPU: *rr, its line(s) and JSON object. */
static int run_row(cluster *cl, const row *rows, int ri, row_res *rr, FILE *jf)
{
    const options *o = cl->o;
    const row *rw = &rows[ri];
    if (ri > R_MATCH) /* a mode of its own: its own runs */
        for (size_t g = 0; g < o->n_gpus; g++)
            cl->done_o[g] = -1;
    row_sum rs = {.worst = 1};
    for (size_t g = 0; g < o->n_gpus; g++) {
        fprintf(stderr, "\rmuxflow: %s %zu/%zu", rw->name, g + 1, o->n_gpus);
        int st = run_row_gpu(cl, rw, g, &rs);
        if (st >= 0)
            return st;
    }
    fprintf(stderr, "\n");
    rr->ran = true;
    rr->util = rs.busy / (double) o->n_gpus;
    rr->sm = rs.smo / (double) o->n_gpus;
    rr->infl = rs.infl / (double) o->n_gpus;
    rr->worst = rs.worst;
    rr->tput = rs.tput / (double) o->n_off;
    double wtot = cl->wtot[rw->policy];
    printf("%-18s %8.3f %8.3f %10.3f %10.3f %12.3f %10.2f %8zu %8llu %8llu\n", rw->name, rr->util,
           rr->sm, rr->infl, rr->worst, rr->tput, wtot, rs.placed, (unsigned long long) rs.spills,
           (unsigned long long) rs.resizes);
    if (ri >= R_MATCH) {
        printf("%-18s by service model (GPUs: p99 x mean, offline mean):", "");
        for (size_t m = 0; m < N_SVC_MODELS; m++)
            if (rs.m_gpus[m])
                printf(" %s (%u: x%.3f, %.3f)", svc_models[m], rs.m_gpus[m],
                       rs.m_infl[m] / rs.m_gpus[m],
                       rs.m_placed[m] ? rs.m_tput[m] / rs.m_placed[m] : 0.0);
        printf("\n");
    }
    if (jf)
        fprintf(jf,
                "%s{\"policy\": \"%s\", \"util\": %.4f, \"sm_occupancy\": %.4f, "
                "\"p99_inflation\": %.4f, \"p99_inflation_worst\": %.4f, \"offline_tput\": "
                "%.4f, \"weight\": %.3f, \"placed\": %zu, \"part_spills\": %llu, "
                "\"part_resizes\": %llu}",
                ri ? ", " : "", rw->name, rr->util, rr->sm, rr->infl, rr->worst, rr->tput, wtot,
                rs.placed, (unsigned long long) rs.spills, (unsigned long long) rs.resizes);
    return -1;
}

/* rows: the three placements under the command line's gap filling; then
 * the matching placement under salusd's --no-gap-fill (unless that is the
 * command line's already), with partitions, and with partitions and gap
 * filling (both whatever the command line says). */
static int run_rows(cluster *cl, row_res res[N_ROWS], FILE *jf)
{
    const options *o = cl->o;
    /* salusd's dispatch with partitions off (unless --no-gap-fill asks for
     * its ablation): the placements compared, and the mechanism beneath the
     * default's partitions */
    const gpu_mode plain = {.no_gap_fill = o->no_gap_fill};
    const row rows[N_ROWS] = {
        [R_ONE] = {"one-per-gpu", P_ONE, plain},
        [R_GREEDY] = {"greedy", P_GREEDY, plain},
        [R_MATCH] = {"matching-off", P_MATCH, plain},
        [R_SHIPPED] = {"matching-serial", P_MATCH, {.serial_ops = true}},
        [R_NOFILL] = {"matching-nofill", P_MATCH, {.no_gap_fill = true}},
        [R_PART] = {"matching-part", P_MATCH, {.partitions = true}},
        [R_PART_GAP] = {"matching-part-gap", P_MATCH, {.partitions = true, .spill = true}},
        [R_PART_AUTO] = {"matching-part-auto",
                         P_MATCH,
                         {.partitions = true, .spill = true, .undeclared = true}},
        [R_PART_DEMAND] = {"matching-demand",
                           P_MATCH,
                           {.partitions = true, .spill = true, .undeclared = true, .guard = true}},
        [R_PART_LOAD] = {"matching-part-load",
                         P_MATCH,
                         {.partitions = true, .spill = true, .load_only = true}},
        [R_PART_SLO] = {"matching-part-slo",
                        P_MATCH,
                        {.partitions = true, .spill = true, .slo_need = true}},
    };
    for (size_t g = 0; g < o->n_gpus; g++)
        cl->done_o[g] = -1;
    printf("%-18s %8s %8s %10s %10s %12s %10s %8s %8s %8s\n", "configuration", "util", "sm_occ",
           "p99_infl", "p99_worst", "offline_tput", "weight", "placed", "spills", "resizes");
    if (jf)
        fprintf(jf,
                "{\"bench\": \"eval_muxflow\", \"gpus\": %zu, \"offline\": %zu, \"seed\": %llu, "
                "\"day_s\": %.1f, \"alone_util\": %.4f, \"alone_sm_occupancy\": %.4f, \"runs\": [",
                o->n_gpus, o->n_off, (unsigned long long) o->c.seed, o->T,
                cl->alone_busy / (double) o->n_gpus, cl->alone_sm / (double) o->n_gpus);
    for (int ri = 0; ri < N_ROWS; ri++) {
        if (ri == R_NOFILL && o->no_gap_fill)
            continue;
        int st = run_row(cl, rows, ri, &res[ri], jf);
        if (st >= 0)
            return st;
    }
    if (jf)
        fprintf(jf, "]}\n");
    return -1;
}

static void print_ours(const cluster *cl, const row_res res[N_ROWS])
{
    static const char *const what[N_ROWS] = {
        [R_MATCH] = "--partitions off (concurrent segments)",
        [R_SHIPPED] = "--lp-serial --lp-segment-us 1 (one op in flight, into gaps)",
        [R_NOFILL] = "--no-gap-fill",
        [R_PART] = "--partitions auto:need --no-stepwise",
        [R_PART_GAP] = "--partitions auto:need",
        [R_PART_AUTO] = "--partitions auto, no need declared: searched at +20 %",
        [R_PART_DEMAND] = "salusd's defaults, --partitions demand: searched, then shared where "
                          "requests fare as well",
        [R_PART_LOAD] = "--partitions auto --partition-objective 0, sized by load alone",
        [R_PART_SLO] = "--partitions auto:need at the latency objective",
    };
    double n_gpus = (double) cl->o->n_gpus;
    printf("services alone: util %.3f, SM occupancy %.3f\n", cl->alone_busy / n_gpus,
           cl->alone_sm / n_gpus);
    printf("paper (MuxFlow): GPU utilisation (nvidia-smi's: time with a kernel running) 26 %% -> "
           "76 %%, SM activity 16 %% -> 33 %%, online latency up < 20 %%\n");
    for (int ri = R_MATCH; ri < N_ROWS; ri++) {
        if (!res[ri].ran)
            continue;
        printf("ours (matching, %s): util %.0f %% -> %.0f %%, SM occupancy %.0f %% -> %.0f %%, p99 "
               "x%.3f (worst x%.3f), offline %.3f of alone\n",
               ri == R_MATCH && cl->o->no_gap_fill ? "--no-gap-fill" : what[ri],
               100 * cl->alone_busy / n_gpus, 100 * res[ri].util, 100 * cl->alone_sm / n_gpus,
               100 * res[ri].sm, res[ri].infl, res[ri].worst, res[ri].tput);
    }
    printf("placement time on this cluster: greedy %.3f ms, matching %.3f ms\n",
           cl->place_ms[P_GREEDY], cl->place_ms[P_MATCH]);
}

/* sl_place_match's wall time on random matrices (BENCH eval_matching). */
static void print_matching(const options *o)
{
    const size_t sizes[3] = {100, 500, 2000};
    double ms[3] = {0}, gr[3] = {0};
    for (int i = 0; i < 3; i++) {
        if (o->tiny && sizes[i] > 100)
            break;
        fprintf(stderr, "muxflow: matching n=%zu ...\n", sizes[i]);
        ms[i] = time_matching(sizes[i], o->c.seed, &gr[i]);
        printf("matching n=%zu: %.2f ms (greedy reaches %.4f of the optimum)\n", sizes[i], ms[i],
               gr[i]);
    }
    printf("BENCH eval_matching n100_ms=%.2f n500_ms=%.2f n2000_ms=%.2f\n", ms[0], ms[1], ms[2]);
}

/* The headline is salusd's defaults with matching placement (partitions
 * on demand); the other configurations beside it, partitions off as off_,
 * the serial one-op dispatch as serial_. */
static void print_bench(const row_res res[N_ROWS])
{
    printf("BENCH eval_muxflow util=%.3f online_p99_inflation=%.3f offline_tput=%.3f "
           "sm_occupancy=%.3f greedy_util=%.3f greedy_p99_inflation=%.3f greedy_offline_tput=%.3f "
           "alone_util=%.3f alone_sm_occupancy=%.3f p99_worst=%.3f",
           res[R_PART_DEMAND].util, res[R_PART_DEMAND].infl, res[R_PART_DEMAND].tput,
           res[R_PART_DEMAND].sm, res[R_GREEDY].util, res[R_GREEDY].infl, res[R_GREEDY].tput,
           res[R_ONE].util, res[R_ONE].sm, res[R_PART_DEMAND].worst);
    static const char *const key[N_ROWS] = {
        [R_MATCH] = "off",          [R_SHIPPED] = "serial",   [R_NOFILL] = "nofill",
        [R_PART] = "part",          [R_PART_GAP] = "partgap", [R_PART_AUTO] = "partauto",
        [R_PART_LOAD] = "partload", [R_PART_SLO] = "partslo"};
    for (int ri = R_MATCH; ri < N_ROWS; ri++)
        if (res[ri].ran && ri != R_PART_DEMAND) {
            printf(" %s_util=%.3f %s_p99_inflation=%.3f %s_offline_tput=%.3f", key[ri],
                   res[ri].util, key[ri], res[ri].infl, key[ri], res[ri].tput);
            printf(" %s_sm_occupancy=%.3f %s_p99_worst=%.3f", key[ri], res[ri].sm, key[ri],
                   res[ri].worst);
        }
    printf("\n");
}

static void cluster_fini(cluster *cl)
{
    sl_free(cl->done_o);
    sl_free(cl->done_r);
    sl_free(cl->on);
    sl_free(cl->off);
    sl_free(cl->wt);
    for (int p = 0; p < N_POL; p++)
        sl_free(cl->assign[p]);
    sl_free(cl->alone);
    for (size_t m = 0; m < N_SVC_MODELS; m++)
        sl_eval_op_list_fini(&cl->sm[m].ops);
    for (size_t i = 0; i < cl->n_tm; i++)
        sl_eval_op_list_fini(&cl->tm[i].ops);
    sl_free(cl->tm);
    sl_free(cl->tl_of);
    sl_free(cl->cw);
    sl_free(cl->w);
}

static bool tiny(void *dst, const char *arg)
{
    (void) arg;
    options *o = dst;
    o->tiny = true;
    o->n_gpus = o->n_off = 4;
    o->T = 10;
    return true;
}

int main(int argc, char **argv)
{
    options o = {.c = sl_cli_common_default(SL_CLI_WANT_SEED | SL_CLI_WANT_JSON | SL_CLI_WANT_GPU |
                                            SL_CLI_WANT_CSV | SL_CLI_WANT_LAUNCH),
                 .n_gpus = 32,
                 .n_off = 32,
                 .T = 120,
                 .timing = true};
    const sl_cli_opt opts[] = {
        {"gpus", SL_CLI_SIZE, &o.n_gpus, 1, 4096, NULL},
        {"offline", SL_CLI_SIZE, &o.n_off, 1, 100000, NULL},
        {"day-s", SL_CLI_ABOVE, &o.T, 1, 1e7, NULL},
        {"tiny", SL_CLI_CALL, &o, 0, 0, tiny},
        {"no-timing", SL_CLI_CLEAR, &o.timing, 0, 0, NULL},
        {"no-gap-fill", SL_CLI_SET, &o.no_gap_fill, 0, 0, NULL},
    };
    int st = sl_cli_parse(argc, argv, usage, &o.c, opts, sizeof opts / sizeof opts[0]);
    if (st != SL_CLI_RUN)
        return st;
    launch = o.c.launch;
    static cluster cl;
    cl.o = &o;
    if (!sl_cli_workloads(&o.c, &cl.w, &cl.n_w))
        return 1;
    if ((st = build_offline(&cl)) >= 0 || (st = build_services(&cl)) >= 0 ||
        (st = draw(&cl)) >= 0 || (st = place(&cl)) >= 0)
        return st;
    print_cluster(&cl);
    FILE *jf;
    row_res res[N_ROWS] = {0};
    if ((st = run_alone(&cl)) >= 0 || !sl_cli_create(o.c.json, &jf))
        return st >= 0 ? st : 1;
    if ((st = run_rows(&cl, res, jf)) >= 0)
        return st;
    print_ours(&cl, res);
    if (!sl_cli_close(jf, o.c.json))
        return 1;
    if (o.timing)
        print_matching(&o);
    print_bench(res);
    cluster_fini(&cl);
    return 0;
}
