/* eval/muxflow: online inference services co-located with offline training
 * (MuxFlow: Zhao et al., "MuxFlow: Efficient and Safe GPU Sharing in
 * Large-Scale Production Deep Learning Clusters", 2023), placed by
 * maximum-weight matching against greedy and against one job per GPU.
 *
 *   muxflow [--csv FILE] [--gpus N] [--offline M] [--day-s T] [--gpu PROFILE]
 *           [--seed S] [--json FILE] [--tiny] [--no-timing]
 *
 * The cluster: N GPUs, each serving one online inference service whose load
 * follows a diurnal curve from 20 to 190 and back to 20 requests per second
 * (the paper's production range) over one "day" compressed to T seconds
 * (default 600: latency and utilisation ratios do not depend on T while T
 * is far above a request's service time), scaled per service. M offline
 * training jobs (Salus workloads, eval/data) wait to be co-located, at most
 * one per GPU. Policies (eval/placement.h):
 * - one-per-gpu: no co-location (the offline jobs need GPUs of their own);
 * - greedy: pairs by descending predicted weight;
 * - matching: maximum-weight bipartite matching (Hungarian).
 * The weight of (offline job, GPU) is the pair's predicted normalised
 * throughput, online plus offline, as MuxFlow's scheduler uses, computed
 * from the profiles (below); a pair whose memory salusd does not admit
 * (eval/sim.h sl_eval_gpu_memory: the online service, then the offline job,
 * through sl_mem_admit_ex) is forbidden.
 *
 * The per-GPU model (what is modeled; sl_eval_run has request-driven
 * inference jobs, the utilisation-capped device and op-level priority, but
 * runs each op at cap 1, not at an SM share as below, so it does not
 * replace this yet, eval/README.md): a GPU runs the service's requests one at a time (batch 1,
 * FIFO), each needing t_s seconds alone and occupying a fraction u_s of the
 * SMs; the offline job runs its iteration as ops of op_s seconds, occupying
 * u_o. salus runs the service at high priority and the training job op by
 * op (salusd's priority scheduling with stepwise dispatch): no offline op is
 * dispatched while a request waits or runs, and an op already on the device
 * is not preempted, so it overlaps the request that arrived during it.
 * While both are on the device they share it as a fluid: each progresses at
 * min(1, 1 / (u_s + u_o)) (kernels/sim's processor sharing when both fill
 * the GPU, no slowdown when their SMs fit side by side). Offline ops run back
 * to back whenever no request is pending, iterations separated by the
 * client's round trip (124 us); nothing else idles the device, so the
 * utilisation here is an upper bound (eval/README.md).
 *
 * Figures: GPU utilisation = the fraction of time a kernel is on the device
 * (nvidia-smi's "GPU util", MuxFlow's metric), and SM occupancy = the time
 * average of sum(rate x u); online p99 inflation = a service's p99 latency
 * co-located / alone on the same arrivals (mean and worst over services);
 * offline normalised throughput = work done / time, over the M jobs (an
 * unplaced job counts 0). Matching time at n = 100, 500, 2000 on random
 * weights. Last lines:
 *   BENCH eval_matching n100_ms=... n500_ms=... n2000_ms=...
 *   BENCH eval_muxflow util=... online_p99_inflation=... offline_tput=...
 * (the matching policy's; the paper: utilisation 26 % -> 76 %, online
 * latency up by less than 20 %). */
#include "manager.h"
#include "placement.h"
#include "sim.h"
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

/* The paper's load range (requests per second, trough and peak). */
#define QPS_LOW 20.0
#define QPS_PEAK 190.0

/* Assumptions, chosen before any run and not tuned on the results: */
/* batch-1 inference service time alone, uniform in [min, max] ms: small
 * CNNs to ResNet-50-class models at batch 1 on a datacenter GPU */
#define TS_MIN_MS 2.0
#define TS_MAX_MS 8.0
/* fraction of the SMs a batch-1 request keeps busy, uniform */
#define US_MIN 0.3
#define US_MAX 0.7
/* a service's peak as a fraction of the paper's 190 QPS, uniform: services
 * differ in popularity */
#define PEAK_MIN 0.3
#define PEAK_MAX 1.0
/* ops per training iteration: an iteration's measured time (Salus CSV) is
 * split into this many equal ops (ResNet-50's training graph has a few
 * hundred kernels; eval/graphs.c) */
#define OPS_PER_ITER 300
/* fraction of the SMs a training op keeps busy, uniform (large batches
 * fill the GPU) */
#define UO_MIN 0.8
#define UO_MAX 1.0
/* between two iterations the training client turns a reply into its next
 * request: 124 us, the measured one-op round trip of a local client
 * (README bench rtt_op; eval/sim.h's default client gap). Nothing else
 * (input pipelines, host work) leaves the device idle in this model. */
#define CLIENT_GAP_S 124e-6

typedef struct online {
    double t_s, u, peak;
    uint64_t p, e; /* memory: the model's weights, its batch-1 activations */
} online;

typedef struct offline {
    double op_s, u;
    uint64_t p, e;
    int workload;
} offline;

typedef struct gpu_out {
    double busy_s, sm_s, off_work_s, p99_s;
    size_t requests;
} gpu_out;

/* Diurnal rate at time t of a day of length T: a raised cosine from the
 * trough to the peak and back. */
static double rate_at(const online *on, double t, double T)
{
    double low = QPS_LOW * on->peak, high = QPS_PEAK * on->peak;
    return low + (high - low) * 0.5 * (1.0 - cos(6.283185307179586 * t / T));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

/* One GPU for one day: the service alone (off NULL) or with the offline
 * job. Arrivals come from the seed alone (thinning a Poisson process at the
 * peak rate), so both runs see the same requests. lat is scratch of cap
 * entries. */
static int run_gpu(const online *on, const offline *off, uint64_t seed, double T, double *lat,
                   size_t cap, gpu_out *out)
{
    sl_eval_rng r;
    sl_eval_rng_seed(&r, seed);
    double lmax = QPS_PEAK * on->peak;
    memset(out, 0, sizeof *out);
    /* requests: arrival times in a ring (FIFO; at most cap waiting) */
    double *q = sl_calloc(cap, sizeof *q);
    if (!q)
        return SL_ENOMEM;
    size_t qh = 0, qn = 0, nl = 0;
    double t = 0, next_arr = 0, req_left = 0, op_left = 0, off_ready = 0;
    bool op_on = false;
    unsigned ops_done = 0;
    /* first arrival */
    for (;;) {
        next_arr += sl_eval_rng_exp(&r, 1.0 / lmax);
        if (next_arr >= T || sl_eval_rng_uniform(&r) * lmax < rate_at(on, next_arr, T))
            break;
    }
    if (off && qn == 0) {
        op_on = true;
        op_left = off->op_s;
    }
    while (t < T) {
        bool req_on = qn > 0;
        double rate = 1.0;
        if (req_on && op_on)
            rate = fmin(1.0, 1.0 / (on->u + off->u));
        double tn = fmin(next_arr, T);
        if (off && !op_on && qn == 0 && off_ready > t)
            tn = fmin(tn, off_ready);
        if (req_on)
            tn = fmin(tn, t + req_left / rate);
        if (op_on)
            tn = fmin(tn, t + op_left / rate);
        double dt = tn - t;
        if (req_on || op_on)
            out->busy_s += dt;
        out->sm_s += dt * rate * ((req_on ? on->u : 0) + (op_on ? off->u : 0));
        if (req_on)
            req_left -= rate * dt;
        if (op_on) {
            op_left -= rate * dt;
            out->off_work_s += rate * dt;
        }
        t = tn;
        if (req_on && req_left <= 1e-12) {
            if (nl < cap)
                lat[nl++] = t - q[qh];
            qh = (qh + 1) % cap;
            qn--;
            req_left = qn ? on->t_s : 0;
        }
        if (op_on && op_left <= 1e-12) {
            op_on = false;
            if (++ops_done % OPS_PER_ITER == 0)
                off_ready = t + CLIENT_GAP_S; /* the iteration's reply, the next request */
        }
        if (t >= next_arr && next_arr < T) {
            if (qn == cap) {
                sl_free(q);
                return SL_EEXHAUSTED; /* overloaded: the service cannot keep up */
            }
            q[(qh + qn) % cap] = t;
            if (qn++ == 0)
                req_left = on->t_s;
            for (;;) {
                next_arr += sl_eval_rng_exp(&r, 1.0 / lmax);
                if (next_arr >= T || sl_eval_rng_uniform(&r) * lmax < rate_at(on, next_arr, T))
                    break;
            }
        }
        /* priority: the next op only when no request is pending */
        if (off && !op_on && qn == 0 && t >= off_ready) {
            op_on = true;
            op_left = off->op_s;
        }
    }
    sl_free(q);
    out->requests = nl;
    if (nl) {
        qsort(lat, nl, sizeof *lat, cmp_double);
        out->p99_s = lat[(size_t) ceil(0.99 * (double) nl) - 1];
    }
    return SL_OK;
}

/* MuxFlow's weight: the pair's predicted normalised throughput, offline
 * plus online, from the profiles alone. rho = the service's mean busy
 * fraction; the offline job runs when no request is pending (~ 1 - rho);
 * a request arrives during an op with probability ~ 1 - rho and then
 * overlaps half an op on average, slowed by the overlap's rate. */
static double pair_weight(const online *on, const offline *off, double mean_qps)
{
    double rho = fmin(0.99, mean_qps * on->t_s);
    double r = fmin(1.0, 1.0 / (on->u + off->u));
    double extra = (1.0 - rho) * 0.5 * off->op_s * (1.0 / r - 1.0) + (1.0 - rho) * 0.5 * off->op_s;
    return (1.0 - rho) + on->t_s / (on->t_s + extra);
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
            "[--seed S] [--json FILE] [--tiny] [--no-timing]\n"
            "defaults: 64 GPUs, 64 offline jobs, a 600 s day, p100, seed 1\n",
            argv0);
}

enum { P_ONE, P_GREEDY, P_MATCH, N_POL };
static const char *const pol_names[N_POL] = {"one-per-gpu", "greedy", "matching"};

int main(int argc, char **argv)
{
    const char *csv = SL_EVAL_CSV, *gpu_name = "p100", *json_path = NULL;
    size_t n_gpus = 64, n_off = 64;
    double T = 600;
    uint64_t seed = 1;
    bool timing = true, tiny = false;
    static const struct option longopts[] = {{"csv", required_argument, NULL, 'c'},
                                             {"gpus", required_argument, NULL, 'n'},
                                             {"offline", required_argument, NULL, 'm'},
                                             {"day-s", required_argument, NULL, 'd'},
                                             {"gpu", required_argument, NULL, 'g'},
                                             {"seed", required_argument, NULL, 's'},
                                             {"json", required_argument, NULL, 'j'},
                                             {"tiny", no_argument, NULL, 't'},
                                             {"no-timing", no_argument, NULL, 'T'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    for (int ch; (ch = getopt_long(argc, argv, "c:n:m:d:g:s:j:tTh", longopts, NULL)) != -1;) {
        switch (ch) {
        case 'c':
            csv = optarg;
            break;
        case 'n':
            n_gpus = strtoul(optarg, NULL, 10);
            break;
        case 'm':
            n_off = strtoul(optarg, NULL, 10);
            break;
        case 'd':
            T = atof(optarg);
            break;
        case 'g':
            gpu_name = optarg;
            break;
        case 's':
            seed = strtoull(optarg, NULL, 10);
            break;
        case 'j':
            json_path = optarg;
            break;
        case 't':
            tiny = true;
            n_gpus = n_off = 8;
            T = 60;
            break;
        case 'T':
            timing = false;
            break;
        case 'h':
            usage(argv[0]);
            return 0;
        default:
            usage(argv[0]);
            return 2;
        }
    }
    const sl_sim_profile *gpu;
    if (sl_sim_profile_find(gpu_name, &gpu) != SL_OK || n_gpus == 0 || n_off == 0 || T <= 1) {
        usage(argv[0]);
        return 2;
    }
    sl_eval_workload *w;
    size_t n_w;
    int rc = sl_eval_workloads_load(csv, &w, &n_w);
    if (rc != SL_OK) {
        fprintf(stderr, "muxflow: cannot load %s: %s\n", csv, sl_strerror(rc));
        return 1;
    }
    sl_eval_rng r;
    sl_eval_rng_seed(&r, seed);
    online *on = sl_calloc(n_gpus, sizeof *on);
    offline *off = sl_calloc(n_off, sizeof *off);
    double *wt = sl_calloc(n_off * n_gpus, sizeof *wt);
    int *assign[N_POL];
    for (int p = 0; p < N_POL; p++)
        assign[p] = sl_calloc(n_off, sizeof(int));
    size_t cap = (size_t) (QPS_PEAK * T) + 1024;
    double *lat = sl_calloc(cap, sizeof *lat);
    gpu_out *alone = sl_calloc(n_gpus, sizeof *alone);
    if (!on || !off || !wt || !assign[0] || !assign[1] || !assign[2] || !lat || !alone) {
        fprintf(stderr, "muxflow: out of memory\n");
        return 1;
    }
    for (size_t g = 0; g < n_gpus; g++) {
        const sl_eval_workload *m = &w[sl_eval_rng_next(&r) % n_w];
        on[g].t_s = (TS_MIN_MS + (TS_MAX_MS - TS_MIN_MS) * sl_eval_rng_uniform(&r)) / 1e3;
        on[g].u = US_MIN + (US_MAX - US_MIN) * sl_eval_rng_uniform(&r);
        on[g].peak = PEAK_MIN + (PEAK_MAX - PEAK_MIN) * sl_eval_rng_uniform(&r);
        on[g].p = m->persistent_bytes;
        on[g].e = m->ephemeral_bytes / (m->batch ? m->batch : 1); /* batch 1, assumed linear */
    }
    for (size_t o = 0; o < n_off; o++) {
        size_t k = sl_eval_rng_next(&r) % n_w;
        off[o].workload = (int) k;
        off[o].op_s = (double) w[k].iteration_ns / 1e9 / OPS_PER_ITER;
        off[o].u = UO_MIN + (UO_MAX - UO_MIN) * sl_eval_rng_uniform(&r);
        off[o].p = w[k].persistent_bytes;
        off[o].e = w[k].ephemeral_bytes;
    }
    /* weights, with salusd's admission on each GPU deciding what fits */
    sl_eval_config mcfg = sl_eval_config_default("priority", false, 1, gpu->capacity);
    size_t forbidden = 0;
    for (size_t g = 0; g < n_gpus; g++) {
        /* the mean rate of the raised cosine is the midpoint of its range */
        double mean_qps = 0.5 * (QPS_LOW + QPS_PEAK) * on[g].peak;
        for (size_t o = 0; o < n_off; o++) {
            sl_mem_mgr *m;
            if ((rc = sl_eval_gpu_memory(&mcfg, &m)) != SL_OK) {
                fprintf(stderr, "muxflow: %s\n", sl_strerror(rc));
                return 1;
            }
            int reason;
            uint32_t lane;
            bool fits = sl_mem_admit_ex(m, 1, on[g].p, on[g].e, 0, &reason, &lane) == SL_OK &&
                        sl_mem_admit_ex(m, 2, off[o].p, off[o].e, 0, &reason, &lane) == SL_OK;
            sl_mem_mgr_destroy(m);
            wt[o * n_gpus + g] = fits ? pair_weight(&on[g], &off[o], mean_qps) : SL_PLACE_FORBIDDEN;
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
    printf("cluster: %zu GPUs (%s), one online service each (batch 1, %.0f -> %.0f -> %.0f QPS "
           "diurnal x a per-service peak in [%.1f, %.1f], a %.0f s day), %zu offline training "
           "jobs; %zu of %zu pairs do not fit in memory (salusd admission)\n",
           n_gpus, gpu->name, QPS_LOW, QPS_PEAK, QPS_LOW, PEAK_MIN, PEAK_MAX, T, n_off, forbidden,
           n_off * n_gpus);
    /* the services alone */
    double sum_alone_busy = 0, sum_alone_sm = 0;
    for (size_t g = 0; g < n_gpus; g++) {
        rc = run_gpu(&on[g], NULL, seed * 1000003u + g, T, lat, cap, &alone[g]);
        if (rc != SL_OK) {
            fprintf(stderr, "muxflow: service %zu: %s\n", g, sl_strerror(rc));
            return 1;
        }
        sum_alone_busy += alone[g].busy_s / T;
        sum_alone_sm += alone[g].sm_s / T;
    }
    printf("%-12s %8s %8s %10s %10s %12s %10s %8s\n", "policy", "util", "sm_occ", "p99_infl",
           "p99_worst", "offline_tput", "weight", "placed");
    FILE *jf = json_path ? fopen(json_path, "w") : NULL;
    if (jf)
        fprintf(jf,
                "{\"bench\": \"eval_muxflow\", \"gpus\": %zu, \"offline\": %zu, \"seed\": %llu, "
                "\"runs\": [",
                n_gpus, n_off, (unsigned long long) seed);
    double res_util[N_POL], res_infl[N_POL], res_tput[N_POL];
    for (int p = 0; p < N_POL; p++) {
        fprintf(stderr, "muxflow: %s ...\n", pol_names[p]);
        double busy = 0, sm = 0, infl = 0, worst = 1, tput = 0;
        size_t placed = 0;
        for (size_t g = 0; g < n_gpus; g++) {
            const offline *o = NULL;
            for (size_t k = 0; k < n_off; k++)
                if (assign[p][k] == (int) g)
                    o = &off[k];
            gpu_out go;
            rc = run_gpu(&on[g], o, seed * 1000003u + g, T, lat, cap, &go);
            if (rc != SL_OK) {
                fprintf(stderr, "muxflow: GPU %zu: %s\n", g, sl_strerror(rc));
                return 1;
            }
            busy += go.busy_s / T;
            sm += go.sm_s / T;
            double ratio = alone[g].p99_s > 0 ? go.p99_s / alone[g].p99_s : 1;
            infl += ratio;
            worst = fmax(worst, ratio);
            tput += go.off_work_s / T;
            placed += o != NULL;
        }
        res_util[p] = busy / (double) n_gpus;
        res_infl[p] = infl / (double) n_gpus;
        res_tput[p] = tput / (double) n_off;
        printf("%-12s %8.3f %8.3f %10.3f %10.3f %12.3f %10.2f %8zu\n", pol_names[p], res_util[p],
               sm / (double) n_gpus, res_infl[p], worst, res_tput[p], wtot[p], placed);
        if (jf)
            fprintf(jf,
                    "%s{\"policy\": \"%s\", \"util\": %.4f, \"sm_occupancy\": %.4f, "
                    "\"p99_inflation\": %.4f, \"p99_inflation_worst\": %.4f, \"offline_tput\": "
                    "%.4f, \"weight\": %.3f, \"placed\": %zu}",
                    p ? ", " : "", pol_names[p], res_util[p], sm / (double) n_gpus, res_infl[p],
                    worst, res_tput[p], wtot[p], placed);
    }
    printf("services alone: util %.3f, SM occupancy %.3f (paper: 26 %% utilisation before, 76 %% "
           "after; online latency up < 20 %%)\n",
           sum_alone_busy / (double) n_gpus, sum_alone_sm / (double) n_gpus);
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
    printf("BENCH eval_muxflow util=%.3f online_p99_inflation=%.3f offline_tput=%.3f "
           "greedy_util=%.3f greedy_p99_inflation=%.3f greedy_offline_tput=%.3f alone_util=%.3f\n",
           res_util[P_MATCH], res_infl[P_MATCH], res_tput[P_MATCH], res_util[P_GREEDY],
           res_infl[P_GREEDY], res_tput[P_GREEDY], res_util[P_ONE]);
    sl_free(gfree);
    sl_free(on);
    sl_free(off);
    sl_free(wt);
    for (int p = 0; p < N_POL; p++)
        sl_free(assign[p]);
    sl_free(lat);
    sl_free(alone);
    sl_free(w);
    return 0;
}
