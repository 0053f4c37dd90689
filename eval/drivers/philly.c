/* eval/philly: a Philly-like multi-tenant cluster (Jeon et al., "Analysis of
 * Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads", USENIX
 * ATC'19) under the study's baseline scheduler and under salus packing.
 *
 *   philly [--csv FILE] [--jobs N] [--servers S] [--vcs V] [--load X]
 *          [--relax-min M] [--probe-min P] [--probe-restart-min R] [--oversub F]
 *          [--job-util U | --util-scale X] [--no-sweep] [--gpu PROFILE]
 *          [--seed S] [--json FILE] [--tiny]
 *
 * The trace (philly_trace): jobs of 1 / 2-4 / 5-8 / >8 GPUs with run times
 * drawn per size class, 30.7 % of them ending early (killed by their users
 * or failed) after a drawn time, each job in one of V virtual clusters (VCs)
 * whose GPU quotas sum to the cluster; Poisson arrivals at the rate that
 * offers --load times the cluster's GPU-hours. Every number of the study
 * and every assumption is in the table `study` below with its source.
 *
 * Schedulers, on the same trace, servers of 8 GPUs:
 * - gang (the study's baseline): a job starts when its VC's quota has room
 *   for all its GPUs and they are free on as few servers as possible
 *   (locality); after --relax-min minutes of waiting any free GPUs do. A job
 *   owns its GPUs until it ends. Jobs are considered in arrival order at
 *   every event; a job that cannot start does not block later ones.
 * - salus: one salusd per GPU, many jobs per GPU. A job is placed on the
 *   least-loaded GPUs whose salusd admits it (the real memory manager,
 *   sl_mem_admit_ex, on each GPU of the gang, configured as salusd
 *   configures itself: eval/lib/evsim.h sl_eval_gpu_memory), with the same
 *   locality rule and relaxation; a VC may hold --oversub times its quota in
 *   GPU slots (sharing halves each job's speed, so a VC at twice its quota
 *   gets about its quota's worth of device time).
 *
 * What the cluster level models, and what the per-GPU salusd decides.
 * salusd decides admission: whether a job's persistent and ephemeral memory
 * (a Salus workload drawn per job, eval/data) fit beside the ones already
 * on the GPU, with lanes shared or not as sl_mem_admit_ex chooses. The
 * cluster models time: each GPU is processor-shared (kernels/sim's
 * sl_sim_ps model, as eval/lib/evsim.c: m jobs on a GPU each progress at 1/m, no
 * gain from concurrency), a gang progresses at the rate of its most shared
 * GPU (data-parallel replicas synchronise every iteration), and a job's
 * length is its work running alone. Which iteration runs next on a GPU does
 * not change the GPU's total rate in this model, so the per-GPU scheduling
 * policy is not simulated here (eval/salus51 does that on one GPU). Failures
 * are tied to progress: a job that fails after t minutes alone fails after
 * the same work under sharing.
 *
 * Waits are split, at every instant a job waits, by the first rule it
 * fails: fair-share (its VC's quota), capacity (fewer usable GPUs in the
 * whole cluster than it needs) or fragmentation (enough GPUs, but not under
 * the locality rule; for salus also memory that admits the job nowhere
 * despite free GPUs counts as capacity).
 *
 * Early failure detection (--probe-min, the study's recommendation): a job
 * of 5 or more GPUs first runs one probe on one GPU for up to P minutes; a
 * job that fails within it (not one killed by its user: that is not a
 * fault) ends there, the others then wait for their gang as before (the
 * probe's work is not counted as progress). GPU-hours saved: of the gang
 * baseline with and without probes. Two probes: one whose work is thrown
 * away (gang+probe), and one that runs the job's own first iterations on
 * one GPU and counts as progress (gang+probe-progress): a job that passes
 * it resumes in its gang from the probe's checkpoint, with the probe's GPU
 * time (P GPU-minutes of its k x work GPU-minutes) done, plus
 * --probe-restart-min of work to restart (assumed).
 *
 * Per-job utilisation (the fraction of its GPU a job keeps busy running
 * alone; what is left, sharing can use): drawn per job from the study's
 * mean utilisation of its size class (table `study`, F_UTIL_*), uniform
 * with that mean over the widest interval inside [0, 1], floored at 0.05
 * (shape ASSUMED); --util-scale X multiplies every draw (capped at 1),
 * --job-util U gives every job U. A sweep of both (salus only: the gang
 * runs one job per GPU, at full speed whatever its utilisation) follows
 * the main table unless --no-sweep, and so does a locality sweep: both
 * schedulers with locality relaxed after 10 min to 24 h and never, each
 * size class's waits split three ways (where the study's split appears).
 *
 * Output: per scheduler, average and p95 JCT, GPU busy fraction (time with
 * at least one job on a GPU, over GPUs and the makespan), waits split three
 * ways, beside the study's; the probe's saving. Last line:
 *   BENCH eval_philly jct_ratio=... busy=... frag_wait_share=...
 * jct_ratio = gang average JCT / salus average JCT; busy and
 * frag_wait_share are salus's, with the gang's beside them; then the
 * utilisation's mean, and both probes' GPU-hours saved. */
#include "cli.h"
#include "manager.h"
#include "placement.h"
#include "evsim.h"
#include "sim/profiles.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "workload.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PER_SERVER 8u /* the study's servers have 8 GPUs (the task's setting) */
#define N_CLASSES 4

/* ---- the study's numbers and our assumptions ------------------------------
 * "paper" = Jeon et al. ATC'19, section as recalled; "assumed" = ours, chosen
 * before any run and not tuned on the results. */
typedef struct figure {
    const char *what;
    double value;
    const char *source;
} figure;

enum {
    F_SHARE_1,
    F_SHARE_2_4,
    F_SHARE_5_8,
    F_SHARE_GT8,
    F_MEDIAN_1,
    F_MEDIAN_2_4,
    F_MEDIAN_5_8,
    F_MEDIAN_GT8,
    F_SIGMA,
    F_MAX_RUN,
    F_UNSUCCESSFUL,
    F_KILLED,
    F_FAIL_MEDIAN,
    F_FAIL_SIGMA,
    F_VCS,
    F_RELAX,
    F_UTIL_1,
    F_UTIL_2_4,
    F_UTIL_5_8,
    F_UTIL_GT8,
    F_N
};

static const figure study[F_N] = {
    [F_SHARE_1] = {"share of 1-GPU jobs", 0.70,
                   "assumed: the study's size classes (section 3.1, Table 2 rows); the study "
                   "reports most jobs use one GPU, the shares are ours"},
    [F_SHARE_2_4] = {"share of 2-4-GPU jobs", 0.17, "assumed, as above"},
    [F_SHARE_5_8] = {"share of 5-8-GPU jobs", 0.10, "assumed, as above"},
    [F_SHARE_GT8] = {"share of >8-GPU jobs (16 or 32 GPUs)", 0.03, "assumed, as above"},
    [F_MEDIAN_1] = {"median run time, 1 GPU (min)", 30,
                    "assumed: log-normal per class; the study's run-time CDF (section 2, "
                    "Figure 2 as recalled) spans minutes to weeks, larger jobs run longer"},
    [F_MEDIAN_2_4] = {"median run time, 2-4 GPUs (min)", 60, "assumed, as above"},
    [F_MEDIAN_5_8] = {"median run time, 5-8 GPUs (min)", 120, "assumed, as above"},
    [F_MEDIAN_GT8] = {"median run time, >8 GPUs (min)", 240, "assumed, as above"},
    [F_SIGMA] = {"log-normal sigma of run times", 1.5,
                 "assumed: spreads the 10-90 % range over ~ 45x"},
    [F_MAX_RUN] = {"longest run time (min)", 7 * 24 * 60,
                   "assumed cap (the study's longest jobs run for weeks)"},
    [F_UNSUCCESSFUL] = {"share of jobs that fail (unsuccessful)", 0.172,
                        "assumed split of the study's 30.7 % killed or unsuccessful "
                        "(section 4, Table 5 as recalled: 30.7 % of jobs did not pass)"},
    [F_KILLED] = {"share of jobs killed by their user", 0.135,
                  "assumed split; 0.172 + 0.135 = the study's 30.7 %"},
    [F_FAIL_MEDIAN] = {"median time to failure (min)", 8,
                       "assumed: the study finds most failures early (section 4, time-to-"
                       "failure CDF as recalled); log-normal"},
    [F_FAIL_SIGMA] = {"log-normal sigma of time to failure", 1.5, "assumed"},
    [F_VCS] = {"virtual clusters", 14,
               "paper as recalled (section 2: the trace's VCs); quotas drawn, see below"},
    [F_RELAX] = {"locality relaxed after (min)", 10,
                 "assumed: the study's scheduler relaxes locality after a wait (section "
                 "3.1) without giving the wait in a form we have"},
    /* The study's mean GPU utilisation per job size, as recalled: Table 3
     * ("mean GPU utilization for different job sizes", section 3.2), from
     * the per-minute nvidia-smi utilisation of the GPUs of each job. The
     * study's sizes are 1, 4, 8 and 16 GPUs; we give each of our classes
     * the nearest. nvidia-smi's figure is the share of time a kernel runs,
     * not of the SMs kept busy, so it OVER-states what a job uses (packing
     * gains less than 1 - u suggests); --util-scale sweeps that. */
    [F_UTIL_1] = {"mean GPU utilisation, 1-GPU jobs", 0.5238,
                  "paper as recalled (Table 3, section 3.2: 52.38 % for 1 GPU); the per-job "
                  "spread around it (uniform, widest inside [0, 1]) is assumed"},
    [F_UTIL_2_4] = {"mean GPU utilisation, 2-4-GPU jobs", 0.4518,
                    "paper as recalled (Table 3: 45.18 % for 4 GPUs)"},
    [F_UTIL_5_8] = {"mean GPU utilisation, 5-8-GPU jobs", 0.5822,
                    "paper as recalled (Table 3: 58.22 % for 8 GPUs)"},
    [F_UTIL_GT8] = {"mean GPU utilisation, >8-GPU jobs", 0.4025,
                    "paper as recalled (Table 3: 40.25 % for 16 GPUs)"},
};

/* A job's utilisation alone: uniform with the class's mean m over the
 * widest interval inside [0, 1] ([max(0, 2m - 1), min(1, 2m)]), floored at
 * 0.05 (a job always uses some of its GPU), times `scale`, capped at 1.
 * Shape, floor and scale are assumptions (the study gives per-class means
 * and wide CDFs, Figure 5 as recalled). */
static double draw_util(sl_eval_rng *r, int size_class, double scale)
{
    double m = study[F_UTIL_1 + size_class].value;
    double lo = fmax(0.0, 2 * m - 1), hi = fmin(1.0, 2 * m);
    double u = fmax(0.05, lo + (hi - lo) * sl_eval_rng_uniform(r)) * scale;
    return u > 1.0 ? 1.0 : u;
}

/* ---- the trace ------------------------------------------------------------ */

enum outcome { PASSED, UNSUCCESSFUL, KILLED };

typedef struct pjob {
    uint32_t id, vc, k;
    int size_class;
    enum outcome outcome;
    double arrival_s;
    double work_s;    /* time it runs alone before it ends (passes, fails or is killed) */
    double planned_s; /* its full run time had it passed */
    uint64_t persistent_bytes, ephemeral_bytes;
    double util; /* fraction of a GPU the job keeps busy running alone */
} pjob;

static int size_class_of(unsigned k)
{
    return k == 1 ? 0 : k <= 4 ? 1 : k <= 8 ? 2 : 3;
}

static const char *const class_names[N_CLASSES] = {"1", "2-4", "5-8", ">8"};

/* Quotas: VC v's share is drawn log-normal (sigma 0.5, assumed) and the
 * shares are scaled to the cluster; every VC gets at least 32 GPUs so that
 * the largest jobs fit its quota. Demand: each job's VC is drawn with
 * probability proportional to the quota times a second log-normal factor
 * (sigma 0.5, assumed), so some VCs ask more than their share (fair-share
 * waits) and others less (idle quota, which the study's scheduler does not
 * lend). */
static void make_vcs(sl_eval_rng *r, unsigned n_vcs, unsigned n_gpus, unsigned *quota,
                     double *demand)
{
    double *w = sl_calloc(n_vcs, sizeof *w), sum = 0, dsum = 0;
    for (unsigned v = 0; v < n_vcs; v++)
        sum += (w[v] = sl_eval_rng_lognormal(r, 1.0, 0.5));
    unsigned left = n_gpus;
    for (unsigned v = 0; v < n_vcs; v++) {
        unsigned q = (unsigned) floor((double) n_gpus * w[v] / sum);
        quota[v] = q < 16 ? 16 : q;
        left = left > quota[v] ? left - quota[v] : 0;
    }
    quota[0] += left; /* the rounding's remainder */
    for (unsigned v = 0; v < n_vcs; v++)
        dsum += (demand[v] = (double) quota[v] * sl_eval_rng_lognormal(r, 1.0, 0.5));
    for (unsigned v = 0; v < n_vcs; v++)
        demand[v] /= dsum;
    sl_free(w);
}

static int philly_trace(const sl_eval_workload *w, size_t n_w, size_t n, unsigned n_gpus,
                        unsigned n_vcs, double load, uint64_t seed, pjob *out, unsigned *quota)
{
    sl_eval_rng r;
    sl_eval_rng_seed(&r, seed);
    double *demand = sl_calloc(n_vcs, sizeof *demand);
    if (!demand)
        return SL_ENOMEM;
    make_vcs(&r, n_vcs, n_gpus, quota, demand);
    double gpu_s = 0;
    for (size_t i = 0; i < n; i++) {
        pjob *j = &out[i];
        j->id = (uint32_t) i + 1;
        double u = sl_eval_rng_uniform(&r);
        unsigned k;
        if (u < study[F_SHARE_1].value)
            k = 1;
        else if ((u -= study[F_SHARE_1].value) < study[F_SHARE_2_4].value)
            k = 2 + (unsigned) (sl_eval_rng_next(&r) % 3);
        else if ((u -= study[F_SHARE_2_4].value) < study[F_SHARE_5_8].value)
            k = 5 + (unsigned) (sl_eval_rng_next(&r) % 4);
        else
            k = sl_eval_rng_next(&r) % 2 ? 32 : 16;
        double d = sl_eval_rng_uniform(&r), acc = 0;
        j->vc = n_vcs - 1;
        for (unsigned v = 0; v < n_vcs; v++)
            if (d < (acc += demand[v])) {
                j->vc = v;
                break;
            }
        if (k > quota[j->vc])
            k = quota[j->vc];
        j->k = k;
        j->size_class = size_class_of(k);
        double run = sl_eval_rng_lognormal(&r, study[F_MEDIAN_1 + j->size_class].value,
                                           study[F_SIGMA].value);
        run = fmin(fmax(run, 1.0), study[F_MAX_RUN].value) * 60.0;
        j->planned_s = run;
        double o = sl_eval_rng_uniform(&r);
        if (o < study[F_UNSUCCESSFUL].value) {
            j->outcome = UNSUCCESSFUL;
            double f =
                sl_eval_rng_lognormal(&r, study[F_FAIL_MEDIAN].value, study[F_FAIL_SIGMA].value) *
                60.0;
            j->work_s = fmin(f, run);
        } else if (o < study[F_UNSUCCESSFUL].value + study[F_KILLED].value) {
            j->outcome = KILLED;
            j->work_s = run * sl_eval_rng_uniform(&r); /* assumed: uniform in the run */
        } else {
            j->outcome = PASSED;
            j->work_s = run;
        }
        if (j->work_s < 1.0)
            j->work_s = 1.0;
        const sl_eval_workload *m = &w[sl_eval_rng_next(&r) % n_w];
        j->persistent_bytes = m->persistent_bytes;
        j->ephemeral_bytes = m->ephemeral_bytes;
        gpu_s += (double) k * j->work_s;
    }
    /* Poisson arrivals offering `load` of the cluster's GPU time */
    double mean_gap = gpu_s / (double) n / ((double) n_gpus * load), t = 0;
    for (size_t i = 0; i < n; i++) {
        out[i].arrival_s = t;
        t += sl_eval_rng_exp(&r, mean_gap);
    }
    sl_free(demand);
    return SL_OK;
}

/* Gives every job its utilisation: `fixed` when > 0, else the study's draw
 * times `scale`. A generator of its own (the seed's), so that the rest of
 * the trace is the same whatever the utilisation. */
static double set_utils(pjob *jobs, size_t n, double fixed, double scale, uint64_t seed)
{
    sl_eval_rng r;
    sl_eval_rng_seed(&r, seed ^ 0x5ca1ab1eull);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += jobs[i].util = fixed > 0 ? fixed : draw_util(&r, jobs[i].size_class, scale);
    return sum / (double) n;
}

/* ---- the cluster simulator ------------------------------------------------ */

enum mode { GANG, SALUS };
enum reason { R_NONE, R_QUOTA, R_CAPACITY, R_FRAG, R_N };
enum state { WAITING, PROBING, RUNNING, DONE };

typedef struct cjob {
    const pjob *p;
    enum state state;
    bool probe_pending; /* waits for its probe (one GPU) before its gang */
    double wait_since;  /* when it began waiting for what it waits for now */
    double remaining;   /* work left of the current phase, seconds alone */
    double credit;      /* gang-seconds of work a counted probe did */
    double rate;
    double start_s, finish_s;
    double wait[R_N];
    int reason;
    bool frozen;     /* set_rates' scratch */
    unsigned n_gpus; /* held now */
    uint32_t *gpus;
} cjob;

typedef struct cluster {
    enum mode mode;
    unsigned n_servers, n_gpus, n_vcs;
    const unsigned *quota;
    double oversub, relax_s, probe_s;
    bool probe_progress; /* a probe's work counts, the gang then pays restart_s */
    double restart_s;
    unsigned pack_limit; /* most jobs on one GPU: 1 (gang), oversub (salus) */
    unsigned *residents; /* jobs on each GPU */
    unsigned *vc_used;   /* GPU slots held per VC */
    sl_mem_mgr **mem;    /* salus: one salusd's memory manager per GPU */
    unsigned *free_per_server;
    unsigned *take;
    double *cap;      /* set_rates' scratch, per GPU */
    double *unfrozen; /* set_rates' scratch, per GPU: utilisation still rising */
    double busy_gpu_s, gpu_hours_s;
    double used_gpu_s; /* GPU time kept busy: rate x utilisation x GPUs, summed */
} cluster;

typedef struct run_result {
    double avg_jct_s, p95_jct_s, busy, makespan_s;
    double device_util; /* GPU time kept busy by jobs over GPUs x makespan */
    double wait[R_N];   /* summed over jobs, seconds */
    double wait_class[N_CLASSES][R_N];
    double gpu_s;  /* GPU time held by jobs (slots x time; the gang's GPU-hours) */
    size_t caught; /* failures caught by the probe */
} run_result;

static unsigned quota_of(const cluster *c, unsigned vc)
{
    return (unsigned) floor((double) c->quota[vc] * (c->mode == SALUS ? c->oversub : 1.0));
}

/* The fair-share rule, as a lender: a VC whose jobs hold less than its
 * quota (in GPU slots: GPUs, or for salus oversub x GPUs) plus this job is
 * within its share; beyond it, it may still borrow whatever is free (no
 * job is preempted here, so lending is all a quota can do without
 * idling GPUs). A job that cannot start is waiting for fair share when it
 * is beyond its VC's share, for capacity when within it. Assumed: the
 * study describes quotas and fair-share waits, not the lending rule. */
static bool within_share(const cluster *c, unsigned vc, unsigned k)
{
    return c->vc_used[vc] + k <= quota_of(c, vc);
}

/* Whether GPU g could take one more job of j (salus: salusd admits it;
 * the trial admission is released at once). */
static bool gpu_usable(cluster *c, unsigned g, const cjob *j, uint64_t mem_id)
{
    if (c->mode == GANG)
        return c->residents[g] == 0;
    sl_mem_stats st;
    sl_mem_get_stats(c->mem[g], &st);
    if (st.free < j->p->persistent_bytes)
        return false; /* the persistent region alone does not fit */
    int reason;
    uint32_t lane;
    int arc = sl_mem_admit_ex(c->mem[g], mem_id, j->p->persistent_bytes, j->p->ephemeral_bytes, 0,
                              &reason, &lane);
    if (arc != SL_OK) {
        return false;
    }
    sl_mem_release(c->mem[g], mem_id);
    return true;
}

static void release_gpus(cluster *c, cjob *j)
{
    for (unsigned i = 0; i < j->n_gpus; i++) {
        unsigned g = j->gpus[i];
        c->residents[g]--;
        if (c->mode == SALUS)
            sl_mem_release(c->mem[g], j->p->id);
    }
    c->vc_used[j->p->vc] -= j->n_gpus;
    j->n_gpus = 0;
}

/* Tries to start j's current phase (k GPUs) now; returns R_NONE when it
 * started, else the reason it waits. */
static int try_start(cluster *c, cjob *j, unsigned k, double now, int *err)
{
    bool relaxed = now - j->wait_since >= c->relax_s;
    /* which GPUs may take the job: the gang scheduler's free ones; salus's
     * whose salusd admits it, tried by load level (empty GPUs first, then
     * GPUs with one job, ...) so that jobs share a GPU only when no
     * emptier placement exists under the locality rule */
    unsigned max_res = 0;
    for (unsigned g = 0; g < c->n_gpus; g++)
        if (c->residents[g] > max_res)
            max_res = c->residents[g];
    unsigned top = c->mode == GANG ? 1 : max_res + 1;
    if (top > c->pack_limit)
        top = c->pack_limit;
    bool placed = false, frag = false;
    unsigned usable = 0;
    for (unsigned level = 1; level <= top && !placed; level++) {
        usable = 0;
        for (unsigned s = 0; s < c->n_servers; s++) {
            c->free_per_server[s] = 0;
            for (unsigned i = 0; i < PER_SERVER; i++) {
                unsigned g = s * PER_SERVER + i;
                if (c->residents[g] < level && gpu_usable(c, g, j, j->p->id))
                    c->free_per_server[s]++;
            }
            usable += c->free_per_server[s];
        }
        if (usable < k)
            continue;
        int rc = sl_place_gang(c->free_per_server, c->n_servers, PER_SERVER, k,
                               relaxed ? SL_PLACE_RELAXED : SL_PLACE_PACKED, c->take, &frag);
        if (rc == SL_OK)
            placed = true;
        else if (rc != SL_EEXHAUSTED) {
            *err = rc;
            return R_CAPACITY;
        }
    }
    if (!placed) {
        if (usable >= k && frag)
            return R_FRAG;
        return within_share(c, j->p->vc, k) ? R_CAPACITY : R_QUOTA;
    }
    /* within each server, the least-loaded GPUs first (lowest index on ties)
     * whose salusd admits the job for real; a trial admission above is not
     * a promise (the manager's layout may have moved since), so a GPU that
     * now refuses is skipped, and if a server runs short the whole gang is
     * rolled back and waits (memory: counted as capacity) */
    j->n_gpus = 0;
    for (unsigned s = 0; s < c->n_servers; s++) {
        unsigned want = c->take[s];
        bool tried[PER_SERVER] = {false};
        while (want) {
            unsigned best = UINT32_MAX;
            for (unsigned i = 0; i < PER_SERVER; i++) {
                unsigned g = s * PER_SERVER + i;
                if (tried[i] || (c->mode == GANG && c->residents[g]))
                    continue;
                if (best == UINT32_MAX || c->residents[g] < c->residents[best])
                    best = g;
            }
            if (best == UINT32_MAX) {
                c->vc_used[j->p->vc] += j->n_gpus; /* release_gpus takes them back */
                release_gpus(c, j);
                return R_CAPACITY;
            }
            tried[best - s * PER_SERVER] = true;
            if (c->mode == SALUS) {
                int reason;
                uint32_t lane;
                int arc = sl_mem_admit_ex(c->mem[best], j->p->id, j->p->persistent_bytes,
                                          j->p->ephemeral_bytes, 0, &reason, &lane);
                if (arc == SL_EEXHAUSTED)
                    continue;
                if (arc != SL_OK) {
                    *err = arc;
                    return R_CAPACITY;
                }
            }
            c->residents[best]++;
            j->gpus[j->n_gpus++] = best;
            want--;
        }
    }
    c->vc_used[j->p->vc] += k;
    return R_NONE;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

/* Rates: max-min fair shares of the GPUs (progressive filling). Every
 * running job's rate rises at the same pace until a GPU it is on is full
 * (the rates of its residents sum to 1) or the job runs at full speed; a
 * gang's rate is one number for all its GPUs (its replicas synchronise
 * every iteration), and what a slowed gang leaves of a GPU goes to the
 * GPU's other jobs: the fluid form of kernels/sim's processor sharing with
 * work conservation. A job of utilisation u at rate r keeps r u of its GPU
 * busy (--job-util; u = 1 is kernels/sim's model: no gain from sharing).
 * One job per GPU (the gang scheduler) gives rate 1. */
static void set_rates(cluster *c, cjob *cj, const bool *arrived, size_t n)
{
    double *cap = c->cap, *unfrozen = c->unfrozen;
    for (unsigned g = 0; g < c->n_gpus; g++)
        cap[g] = 1.0;
    size_t left = 0;
    for (size_t i = 0; i < n; i++) {
        cjob *j = &cj[i];
        j->frozen = !arrived[i] || (j->state != RUNNING && j->state != PROBING);
        j->rate = 0;
        left += !j->frozen;
    }
    double level = 0;
    while (left) {
        memset(unfrozen, 0, c->n_gpus * sizeof *unfrozen);
        for (size_t i = 0; i < n; i++)
            for (unsigned x = 0; !cj[i].frozen && x < cj[i].n_gpus; x++)
                unfrozen[cj[i].gpus[x]] += cj[i].p->util;
        double delta = 1.0 - level;
        for (unsigned g = 0; g < c->n_gpus; g++)
            if (unfrozen[g] > 0 && cap[g] / unfrozen[g] < delta)
                delta = cap[g] / unfrozen[g];
        level += delta;
        for (unsigned g = 0; g < c->n_gpus; g++)
            cap[g] -= delta * unfrozen[g];
        for (size_t i = 0; i < n; i++) {
            cjob *j = &cj[i];
            if (j->frozen)
                continue;
            j->rate = level;
            bool full = level >= 1.0 - 1e-12;
            for (unsigned x = 0; !full && x < j->n_gpus; x++)
                full = cap[j->gpus[x]] <= 1e-12;
            if (full) {
                j->frozen = true;
                left--;
            }
        }
    }
}

/* Runs the trace under one scheduler. */
static int run_cluster(enum mode mode, const pjob *jobs, size_t n, unsigned n_servers,
                       unsigned n_vcs, const unsigned *quota, double oversub, double relax_s,
                       double probe_s, bool probe_progress, double restart_s,
                       const sl_eval_config *mcfg, run_result *out)
{
    cluster c = {.mode = mode,
                 .n_servers = n_servers,
                 .n_gpus = n_servers * PER_SERVER,
                 .n_vcs = n_vcs,
                 .quota = quota,
                 .oversub = oversub,
                 .relax_s = relax_s,
                 .probe_s = probe_s,
                 .probe_progress = probe_progress,
                 .restart_s = restart_s,
                 .pack_limit = mode == SALUS ? (unsigned) oversub : 1};
    int err = SL_OK;
    memset(out, 0, sizeof *out);
    c.residents = sl_calloc(c.n_gpus, sizeof *c.residents);
    c.vc_used = sl_calloc(n_vcs, sizeof *c.vc_used);
    c.free_per_server = sl_calloc(n_servers, sizeof *c.free_per_server);
    c.take = sl_calloc(n_servers, sizeof *c.take);
    c.mem = sl_calloc(c.n_gpus, sizeof *c.mem);
    c.cap = sl_calloc(c.n_gpus, sizeof *c.cap);
    c.unfrozen = sl_calloc(c.n_gpus, sizeof *c.unfrozen);
    cjob *cj = sl_calloc(n, sizeof *cj);
    uint32_t *gpu_store = sl_calloc(n * 32 + 1, sizeof *gpu_store);
    double *jct = sl_calloc(n + 1, sizeof *jct);
    if (!c.residents || !c.vc_used || !c.free_per_server || !c.take || !c.mem || !c.cap ||
        !c.unfrozen || !cj || !gpu_store || !jct) {
        err = SL_ENOMEM;
        goto out;
    }
    for (unsigned g = 0; mode == SALUS && g < c.n_gpus && err == SL_OK; g++)
        err = sl_eval_gpu_memory(mcfg, &c.mem[g]);
    if (err != SL_OK)
        goto out;
    for (size_t i = 0; i < n; i++) {
        cj[i].p = &jobs[i];
        cj[i].gpus = gpu_store + i * 32;
        cj[i].state = DONE; /* not arrived yet: becomes WAITING at arrival */
        cj[i].probe_pending = probe_s > 0 && jobs[i].k >= 5;
    }
    size_t next_arrival = 0, done = 0;
    double now = 0, first = jobs[0].arrival_s, last = 0;
    bool *arrived = sl_calloc(n, sizeof *arrived);
    if (!arrived) {
        err = SL_ENOMEM;
        goto out;
    }
    while (done < n && err == SL_OK) {
        /* the next instant: an arrival, a completion or a relaxation */
        double t = INFINITY;
        if (next_arrival < n)
            t = jobs[next_arrival].arrival_s;
        for (size_t i = 0; i < n; i++) {
            cjob *j = &cj[i];
            if (!arrived[i] || j->state == DONE)
                continue;
            if ((j->state == RUNNING || j->state == PROBING) && j->rate > 0)
                t = fmin(t, now + j->remaining / j->rate);
            else if (j->state == WAITING && j->wait_since + relax_s > now)
                t = fmin(t, j->wait_since + relax_s);
        }
        double dt = t - now;
        /* advance: work, busy GPUs, waits by reason */
        if (dt > 0) {
            unsigned busy = 0;
            for (unsigned g = 0; g < c.n_gpus; g++)
                busy += c.residents[g] > 0;
            c.busy_gpu_s += dt * busy;
            for (size_t i = 0; i < n; i++) {
                cjob *j = &cj[i];
                if (!arrived[i] || j->state == DONE)
                    continue;
                if (j->state == WAITING)
                    j->wait[j->reason] += dt;
                else {
                    j->remaining -= j->rate * dt;
                    out->gpu_s += dt * j->n_gpus;
                    c.used_gpu_s += dt * j->rate * j->p->util * j->n_gpus;
                }
            }
        }
        now = t;
        /* completions: a phase ends when its work is done (within rounding) */
        for (size_t i = 0; i < n; i++) {
            cjob *j = &cj[i];
            if (!arrived[i] || (j->state != RUNNING && j->state != PROBING))
                continue;
            if (j->remaining > 1e-6 * fmax(1.0, j->p->work_s))
                continue;
            release_gpus(&c, j);
            if (j->state == PROBING) {
                bool caught = j->p->outcome == UNSUCCESSFUL && j->p->work_s <= probe_s;
                if (caught) {
                    out->caught++;
                    j->state = DONE;
                    j->finish_s = now;
                    done++;
                    last = fmax(last, now);
                } else {
                    j->state = WAITING;
                    j->probe_pending = false;
                    j->wait_since = now;
                    /* the probe's P GPU-seconds are P / k of the gang's time */
                    if (c.probe_progress)
                        j->credit = fmin(probe_s, j->p->work_s) / (double) j->p->k;
                }
            } else {
                j->state = DONE;
                j->finish_s = now;
                done++;
                last = fmax(last, now);
            }
        }
        while (next_arrival < n && jobs[next_arrival].arrival_s <= now) {
            cjob *j = &cj[next_arrival];
            arrived[next_arrival++] = true;
            j->state = WAITING;
            j->wait_since = now;
            j->start_s = -1;
        }
        /* one scheduling pass, in arrival order */
        for (size_t i = 0; i < n && err == SL_OK; i++) {
            cjob *j = &cj[i];
            if (!arrived[i] || j->state != WAITING)
                continue;
            unsigned k = j->probe_pending ? 1 : j->p->k;
            int r = try_start(&c, j, k, now, &err);
            if (r != R_NONE) {
                j->reason = r;
                continue;
            }
            if (j->start_s < 0)
                j->start_s = now;
            if (j->probe_pending) {
                j->state = PROBING;
                j->remaining = fmin(probe_s, j->p->work_s);
            } else {
                j->state = RUNNING;
                j->remaining = j->p->work_s - j->credit + (j->credit > 0 ? c.restart_s : 0);
            }
        }
        set_rates(&c, cj, arrived, n);
    }
    sl_free(arrived);
    if (err != SL_OK)
        goto out;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        jct[i] = cj[i].finish_s - jobs[i].arrival_s;
        sum += jct[i];
        for (int r = 1; r < R_N; r++) {
            out->wait[r] += cj[i].wait[r];
            out->wait_class[jobs[i].size_class][r] += cj[i].wait[r];
        }
    }
    out->avg_jct_s = sum / (double) n;
    qsort(jct, n, sizeof *jct, cmp_double);
    out->p95_jct_s = jct[(size_t) ceil(0.95 * (double) n) - 1];
    out->makespan_s = last - first;
    out->busy = c.busy_gpu_s / ((double) c.n_gpus * out->makespan_s);
    out->device_util = c.used_gpu_s / ((double) c.n_gpus * out->makespan_s);
out:
    if (c.mem)
        for (unsigned g = 0; g < c.n_gpus; g++)
            sl_mem_mgr_destroy(c.mem[g]);
    sl_free(c.mem);
    sl_free(c.cap);
    sl_free(c.unfrozen);
    sl_free(c.residents);
    sl_free(c.vc_used);
    sl_free(c.free_per_server);
    sl_free(c.take);
    sl_free(cj);
    sl_free(gpu_store);
    sl_free(jct);
    return err;
}

/* ---- the driver ----------------------------------------------------------- */

static void print_waits(const char *name, const run_result *r)
{
    double tot = r->wait[R_QUOTA] + r->wait[R_CAPACITY] + r->wait[R_FRAG];
    printf("%-6s waits (GPU-job hours): fair-share %.0f, capacity %.0f, fragmentation %.0f; "
           "shares %.2f / %.2f / %.2f\n",
           name, r->wait[R_QUOTA] / 3600, r->wait[R_CAPACITY] / 3600, r->wait[R_FRAG] / 3600,
           tot > 0 ? r->wait[R_QUOTA] / tot : 0, tot > 0 ? r->wait[R_CAPACITY] / tot : 0,
           tot > 0 ? r->wait[R_FRAG] / tot : 0);
    for (int k = 0; k < N_CLASSES; k++) {
        const double *w = r->wait_class[k];
        double t = w[R_QUOTA] + w[R_CAPACITY] + w[R_FRAG];
        printf("  %-6s %-4s GPUs: fair-share %.2f capacity %.2f fragmentation %.2f (of %.0f h)\n",
               name, class_names[k], t > 0 ? w[R_QUOTA] / t : 0, t > 0 ? w[R_CAPACITY] / t : 0,
               t > 0 ? w[R_FRAG] / t : 0, t / 3600);
    }
}

static double frag_share(const run_result *r)
{
    double tot = r->wait[R_QUOTA] + r->wait[R_CAPACITY] + r->wait[R_FRAG];
    return tot > 0 ? r->wait[R_FRAG] / tot : 0;
}

/* The share of the waits of size classes [from, to] that had reason why. */
static double class_share(const run_result *r, int from, int to, enum reason why)
{
    double part = 0, tot = 0;
    for (int k = from; k <= to; k++) {
        part += r->wait_class[k][why];
        tot += r->wait_class[k][R_QUOTA] + r->wait_class[k][R_CAPACITY] + r->wait_class[k][R_FRAG];
    }
    return tot > 0 ? part / tot : 0;
}

/* The locality sweep: locality relaxed after these many minutes of
 * waiting; INFINITY = never (strict locality). */
static const double relax_sweep_min[] = {10, 60, 240, 480, 1440, INFINITY};
enum { N_RELAX = sizeof relax_sweep_min / sizeof relax_sweep_min[0] };

/* A locality sweep row's gang wait split: the share of 1-GPU jobs' waits
 * that is fair-share, and of each larger class's (and of all > 4 GPUs
 * together) that is fragmentation. */
typedef struct relax_split {
    double fair_1, frag_2_4, frag_5_8, frag_gt8, frag_gt4;
} relax_split;

static relax_split split_of(const run_result *g)
{
    return (relax_split){.fair_1 = class_share(g, 0, 0, R_QUOTA),
                         .frag_2_4 = class_share(g, 1, 1, R_FRAG),
                         .frag_5_8 = class_share(g, 2, 2, R_FRAG),
                         .frag_gt8 = class_share(g, 3, 3, R_FRAG),
                         .frag_gt4 = class_share(g, 2, 3, R_FRAG)};
}

/* "10 min" ... "never": a sweep row's name. */
static const char *relax_label(int x)
{
    static const char *const labels[] = {"10min", "1h", "4h", "8h", "24h", "never"};
    _Static_assert(sizeof labels / sizeof *labels == N_RELAX, "a label per relax_sweep_min");
    return labels[x];
}

static const char usage[] =
    "usage: %s [--csv FILE] [--jobs N] [--servers S] [--vcs V] [--load X] "
    "[--relax-min M] [--probe-min P] [--probe-restart-min R] [--oversub F] "
    "[--job-util U | --util-scale X] [--no-sweep] [--gpu PROFILE] [--seed S] "
    "[--json FILE] [--tiny]\n"
    "  --job-util U     every job keeps U of its GPU busy alone (0 < U <= 1)\n"
    "  --util-scale X   the study's per-job utilisation draws times X (capped at 1)\n"
    "  --probe-restart-min R  work a job redoes when its gang resumes a counted probe\n"
    "  --no-sweep       skip the utilisation and locality sweeps\n"
    "defaults: 3000 jobs, 64 servers x 8 GPUs, 14 VCs, load 2, relax after 10 min, "
    "probe 5 min, restart 0 min, oversub 2, utilisation from the study (scale 1), p100, "
    "seed 1\n";

/* One row of the utilisation sweep: salus on the same trace at another
 * utilisation (the gang's figures do not depend on it). */
typedef struct sweep_row {
    const char *what;
    double fixed, scale;
} sweep_row;

static const sweep_row sweep[] = {
    {"study x 1.00", 0, 1.0}, {"study x 1.25", 0, 1.25}, {"study x 1.50", 0, 1.5},
    {"study x 2.00", 0, 2.0}, {"all 0.30", 0.3, 0},      {"all 0.50", 0.5, 0},
    {"all 0.70", 0.7, 0},     {"all 0.90", 0.9, 0},      {"all 1.00", 1.0, 0},
};
enum { N_SWEEP = sizeof sweep / sizeof sweep[0] };

typedef struct options {
    sl_cli_common c;
    size_t n_jobs;
    unsigned n_servers, n_vcs;
    double load, job_util, util_scale, relax_min, probe_min, restart_min, oversub;
    bool do_sweep;
} options;

enum { N_RUNS = 4 };
static const char *const run_names[N_RUNS] = {"gang", "salus", "gang+probe", "gang+probe-progress"};
static const enum mode run_modes[N_RUNS] = {GANG, SALUS, GANG, GANG};

/* The study: its trace and every run's results. */
typedef struct study_run {
    const options *o;
    pjob *jobs;
    unsigned *quota;
    double util_mean;
    sl_eval_config mcfg;
    int n_runs;
    run_result res[N_RUNS];
    double saved_h, saved_progress_h; /* by the probes */
    run_result sw[N_SWEEP];
    double sw_mean[N_SWEEP];
    run_result rx[N_RELAX][2];
    relax_split split[N_RELAX];
} study_run;

/* One cluster run of the trace in mode, locality relaxed after relax_min,
 * with a probe of probe_s (progress: counted). */
static int run(study_run *sr, enum mode mode, double relax_min, double probe_s, bool progress,
               run_result *out)
{
    const options *o = sr->o;
    return run_cluster(mode, sr->jobs, o->n_jobs, o->n_servers, o->n_vcs, sr->quota, o->oversub,
                       relax_min * 60, probe_s, progress, progress ? o->restart_min * 60 : 0,
                       &sr->mcfg, out);
}

static void print_trace(const study_run *sr)
{
    const options *o = sr->o;
    printf("the study's figures and our assumptions:\n");
    for (int f = 0; f < F_N; f++)
        printf("  %-42s %8.3f  %s\n", study[f].what, study[f].value, study[f].source);
    size_t count[N_CLASSES] = {0}, failed = 0, killed = 0;
    double gpu_h = 0;
    for (size_t i = 0; i < o->n_jobs; i++) {
        const pjob *j = &sr->jobs[i];
        count[j->size_class]++;
        failed += j->outcome == UNSUCCESSFUL;
        killed += j->outcome == KILLED;
        gpu_h += j->k * j->work_s / 3600;
    }
    printf("trace: %zu jobs (1 GPU %zu, 2-4 %zu, 5-8 %zu, >8 %zu; %zu failed, %zu killed), "
           "%.0f GPU-hours, %u servers x %u GPUs (%s), %u VCs, load %.2f, seed %llu\n",
           o->n_jobs, count[0], count[1], count[2], count[3], failed, killed, gpu_h, o->n_servers,
           PER_SERVER, o->c.gpu->name, o->n_vcs, o->load, (unsigned long long) o->c.seed);
    if (o->job_util > 0)
        printf("job utilisation alone: every job %.2f (--job-util)%s\n", o->job_util,
               o->job_util >= 1 ? ": kernels/sim's model, sharing gains nothing" : "");
    else
        printf("job utilisation alone: the study's per-size means (Table 3 as recalled) x %.2f, "
               "drawn per job (assumed shape); mean over the trace %.3f\n",
               o->util_scale, sr->util_mean);
    printf("quotas:");
    for (unsigned v = 0; v < o->n_vcs; v++)
        printf(" %u", sr->quota[v]);
    printf("\n");
}

/* gang, salus and, with probes, gang with a probe thrown away or counted. */
static int run_schedulers(study_run *sr)
{
    const options *o = sr->o;
    sr->n_runs = o->probe_min > 0 ? N_RUNS : 2;
    for (int m = 0; m < sr->n_runs; m++) {
        fprintf(stderr, "philly: %s ...\n", run_names[m]);
        int rc = run(sr, run_modes[m], o->relax_min, m >= 2 ? o->probe_min * 60 : 0, m == 3,
                     &sr->res[m]);
        if (rc != SL_OK)
            return sl_cli_fail(rc, "%s", run_names[m]);
    }
    printf("%-20s %12s %12s %8s %8s %12s %10s\n", "scheduler", "avg_jct_min", "p95_jct_min", "busy",
           "dev_util", "makespan_h", "gpu_hours");
    for (int m = 0; m < sr->n_runs; m++) {
        const run_result *r = &sr->res[m];
        printf("%-20s %12.1f %12.1f %8.3f %8.3f %12.1f %10.0f\n", run_names[m], r->avg_jct_s / 60,
               r->p95_jct_s / 60, r->busy, r->device_util, r->makespan_s / 3600, r->gpu_s / 3600);
    }
    print_waits("gang", &sr->res[0]);
    print_waits("salus", &sr->res[1]);
    printf("study (Table 2): delays of small jobs are mostly fair-share, of jobs above 4 GPUs "
           "mostly fragmentation; its per-class counts are not available offline here, see "
           "eval/README.md\n");
    return -1;
}

/* From the trace: the gang time a caught failure no longer burns, and the
 * probes of the gangs that pass them (the cost); with a counted probe the
 * cost is the restart, and the restart cost at which the counted probe
 * breaks even. */
static void print_probes(study_run *sr)
{
    const options *o = sr->o;
    const run_result *res = sr->res;
    double gross = 0, cost = 0, passing_gpus = 0;
    for (size_t i = 0; i < o->n_jobs; i++) {
        const pjob *p = &sr->jobs[i];
        if (p->k < 5)
            continue;
        if (p->outcome == UNSUCCESSFUL && p->work_s <= o->probe_min * 60)
            gross += (p->k - 1) * p->work_s / 3600;
        else {
            cost += fmin(o->probe_min * 60, p->work_s) / 3600;
            passing_gpus += p->k;
        }
    }
    printf("probe accounting from the trace: %.1f GPU-hours of failing gangs avoided, %.1f "
           "GPU-hours of probes for gangs that pass them (thrown away), %.1f GPU-hours of "
           "restarts with a counted probe (%.1f min each); a counted probe breaks even at a "
           "restart of %.2f min\n",
           gross, cost, passing_gpus * o->restart_min / 60, o->restart_min,
           passing_gpus > 0 ? gross * 60 / passing_gpus : 0);
    sr->saved_h = (res[0].gpu_s - res[2].gpu_s) / 3600;
    sr->saved_progress_h = (res[0].gpu_s - res[3].gpu_s) / 3600;
    printf("early failure detection (probe %.0f min on one GPU before gangs of >= 5): %zu "
           "failures caught; probe thrown away: %.0f GPU-hours saved of %.0f (%.1f %%), avg "
           "JCT %.1f -> %.1f min; probe counted as progress: %.0f GPU-hours saved (%.1f %%), "
           "avg JCT %.1f min\n",
           o->probe_min, res[2].caught, sr->saved_h, res[0].gpu_s / 3600,
           100 * sr->saved_h / (res[0].gpu_s / 3600), res[0].avg_jct_s / 60, res[2].avg_jct_s / 60,
           sr->saved_progress_h, 100 * sr->saved_progress_h / (res[0].gpu_s / 3600),
           res[3].avg_jct_s / 60);
}

/* salus on the same trace at other utilisations (the gang's figures do
 * not depend on them); the trace's own utilisations restored after. */
static int util_sweep(study_run *sr)
{
    const options *o = sr->o;
    double gang_jct = sr->res[0].avg_jct_s;
    printf("utilisation sweep (salus on the same trace; gang avg JCT %.1f min at every "
           "utilisation):\n%-14s %9s %12s %12s %9s %8s %8s\n",
           gang_jct / 60, "utilisation", "mean_u", "avg_jct_min", "p95_jct_min", "jct_ratio",
           "busy", "dev_util");
    for (int k = 0; k < N_SWEEP; k++) {
        fprintf(stderr, "philly: sweep %s ...\n", sweep[k].what);
        sr->sw_mean[k] = set_utils(sr->jobs, o->n_jobs, sweep[k].fixed, sweep[k].scale, o->c.seed);
        run_result *r = &sr->sw[k];
        int rc = run(sr, SALUS, o->relax_min, 0, false, r);
        if (rc != SL_OK)
            return sl_cli_fail(rc, "sweep");
        printf("%-14s %9.3f %12.1f %12.1f %9.2f %8.3f %8.3f\n", sweep[k].what, sr->sw_mean[k],
               r->avg_jct_s / 60, r->p95_jct_s / 60, gang_jct / r->avg_jct_s, r->busy,
               r->device_util);
    }
    set_utils(sr->jobs, o->n_jobs, o->job_util, o->util_scale, o->c.seed);
    return -1;
}

/* Both schedulers with locality relaxed after each wait of the sweep. */
static int locality_sweep(study_run *sr)
{
    printf("locality sweep (both schedulers, locality relaxed after the given wait): share of "
           "each size class's gang waits that is fragmentation (F) or fair-share (Q)\n"
           "%-9s %6s %6s %6s %6s %6s %10s %10s %9s\n",
           "relax", "1:Q", "2-4:F", "5-8:F", ">8:F", ">4:F", "gang_jct", "salus_jct", "jct_ratio");
    for (int x = 0; x < N_RELAX; x++) {
        fprintf(stderr, "philly: locality sweep %s ...\n", relax_label(x));
        for (int m = 0; m < 2; m++) {
            int rc = run(sr, run_modes[m], relax_sweep_min[x], 0, false, &sr->rx[x][m]);
            if (rc != SL_OK)
                return sl_cli_fail(rc, "locality sweep");
        }
        const run_result *g = &sr->rx[x][0];
        sr->split[x] = split_of(g);
        const relax_split *q = &sr->split[x];
        printf("%-9s %6.2f %6.2f %6.2f %6.2f %6.2f %10.1f %10.1f %9.2f\n", relax_label(x),
               q->fair_1, q->frag_2_4, q->frag_5_8, q->frag_gt8, q->frag_gt4, g->avg_jct_s / 60,
               sr->rx[x][1].avg_jct_s / 60, g->avg_jct_s / sr->rx[x][1].avg_jct_s);
    }
    return -1;
}

static void write_runs(FILE *jf, const study_run *sr)
{
    fprintf(jf, "\"runs\": [");
    for (int m = 0; m < sr->n_runs; m++) {
        const run_result *r = &sr->res[m];
        double tot = r->wait[R_QUOTA] + r->wait[R_CAPACITY] + r->wait[R_FRAG];
        fprintf(jf,
                "%s{\"scheduler\": \"%s\", \"avg_jct_min\": %.3f, \"p95_jct_min\": %.3f, "
                "\"busy\": %.4f, \"device_util\": %.4f, \"wait_quota_h\": %.2f, "
                "\"wait_capacity_h\": %.2f, \"wait_frag_h\": %.2f, \"wait_quota_share\": "
                "%.4f, \"wait_capacity_share\": %.4f, \"wait_frag_share\": %.4f, "
                "\"gpu_hours\": %.2f}",
                m ? ", " : "", run_names[m], r->avg_jct_s / 60, r->p95_jct_s / 60, r->busy,
                r->device_util, r->wait[R_QUOTA] / 3600, r->wait[R_CAPACITY] / 3600,
                r->wait[R_FRAG] / 3600, tot > 0 ? r->wait[R_QUOTA] / tot : 0,
                tot > 0 ? r->wait[R_CAPACITY] / tot : 0, tot > 0 ? r->wait[R_FRAG] / tot : 0,
                r->gpu_s / 3600);
    }
    fprintf(jf, "], ");
}

static void write_json(FILE *jf, const study_run *sr)
{
    const options *o = sr->o;
    const run_result *res = sr->res;
    fprintf(jf,
            "{\"bench\": \"eval_philly\", \"jobs\": %zu, \"gpus\": %u, \"seed\": %llu, "
            "\"util_mean\": %.4f, ",
            o->n_jobs, o->n_servers * PER_SERVER, (unsigned long long) o->c.seed, sr->util_mean);
    write_runs(jf, sr);
    fprintf(jf, "\"sweep\": [");
    for (int k = 0; o->do_sweep && k < N_SWEEP; k++)
        fprintf(jf,
                "%s{\"utilisation\": \"%s\", \"mean_util\": %.4f, \"salus_avg_jct_min\": "
                "%.3f, \"gang_avg_jct_min\": %.3f, \"jct_ratio\": %.4f, \"busy\": %.4f, "
                "\"device_util\": %.4f}",
                k ? ", " : "", sweep[k].what, sr->sw_mean[k], sr->sw[k].avg_jct_s / 60,
                res[0].avg_jct_s / 60, res[0].avg_jct_s / sr->sw[k].avg_jct_s, sr->sw[k].busy,
                sr->sw[k].device_util);
    fprintf(jf, "], \"relax_sweep\": [");
    for (int x = 0; o->do_sweep && x < N_RELAX; x++) {
        const run_result *g = &sr->rx[x][0];
        const relax_split *q = &sr->split[x];
        fprintf(jf,
                "%s{\"relax\": \"%s\", \"fair_share_1\": %.4f, \"frag_2_4\": %.4f, "
                "\"frag_5_8\": %.4f, \"frag_gt8\": %.4f, \"frag_gt4\": %.4f, "
                "\"gang_avg_jct_min\": %.3f, \"salus_avg_jct_min\": %.3f, "
                "\"jct_ratio\": %.4f}",
                x ? ", " : "", relax_label(x), q->fair_1, q->frag_2_4, q->frag_5_8, q->frag_gt8,
                q->frag_gt4, g->avg_jct_s / 60, sr->rx[x][1].avg_jct_s / 60,
                g->avg_jct_s / sr->rx[x][1].avg_jct_s);
    }
    fprintf(jf,
            "], \"probe_saved_gpu_hours\": %.2f, \"probe_progress_saved_gpu_hours\": "
            "%.2f}\n",
            sr->saved_h, sr->saved_progress_h);
}

static void print_bench(const study_run *sr)
{
    const run_result *res = sr->res;
    printf("BENCH eval_philly jct_ratio=%.2f busy=%.3f frag_wait_share=%.3f gang_busy=%.3f "
           "gang_frag_wait_share=%.3f probe_saved_gpu_h=%.0f util_mean=%.3f "
           "probe_progress_saved_gpu_h=%.0f",
           res[0].avg_jct_s / res[1].avg_jct_s, res[1].busy, frag_share(&res[1]), res[0].busy,
           frag_share(&res[0]), sr->saved_h, sr->util_mean, sr->saved_progress_h);
    if (sr->o->do_sweep) /* strict locality: the study's split, per size class */
        printf(" strict_gang_frag_share_gt4=%.3f strict_gang_fair_share_1=%.3f "
               "strict_jct_ratio=%.2f",
               sr->split[N_RELAX - 1].frag_gt4, sr->split[N_RELAX - 1].fair_1,
               sr->rx[N_RELAX - 1][0].avg_jct_s / sr->rx[N_RELAX - 1][1].avg_jct_s);
    printf("\n");
}

static bool tiny(void *dst, const char *arg)
{
    (void) arg;
    options *o = dst;
    o->n_jobs = 150;
    o->n_servers = 8;
    o->n_vcs = 2;
    return true;
}

/* The trace and its utilisations. The exit status on error, else -1. */
static int trace(study_run *sr)
{
    const options *o = sr->o;
    if (o->n_vcs * 16 > o->n_servers * PER_SERVER) {
        fprintf(stderr, "philly: %u VCs need %u GPUs (a quota of 16 each), %u servers have %u\n",
                o->n_vcs, o->n_vcs * 16, o->n_servers, o->n_servers * PER_SERVER);
        return 2;
    }
    sl_eval_workload *w;
    size_t n_w;
    if (!sl_cli_workloads(&o->c, &w, &n_w))
        return 1;
    sr->jobs = sl_calloc(o->n_jobs, sizeof *sr->jobs);
    sr->quota = sl_calloc(o->n_vcs, sizeof *sr->quota);
    int rc = sr->jobs && sr->quota ? philly_trace(w, n_w, o->n_jobs, o->n_servers * PER_SERVER,
                                                  o->n_vcs, o->load, o->c.seed, sr->jobs, sr->quota)
                                   : SL_ENOMEM;
    sl_free(w);
    if (rc != SL_OK)
        return sl_cli_fail(rc, "cannot build the trace");
    sr->util_mean = set_utils(sr->jobs, o->n_jobs, o->job_util, o->util_scale, o->c.seed);
    sr->mcfg = sl_eval_config_default("fair", false, 1, o->c.gpu->capacity);
    return -1;
}

int main(int argc, char **argv)
{
    options o = {.c = sl_cli_common_default(SL_CLI_WANT_SEED | SL_CLI_WANT_JSON | SL_CLI_WANT_GPU |
                                            SL_CLI_WANT_CSV),
                 .n_jobs = 3000,
                 .n_servers = 64,
                 .n_vcs = (unsigned) study[F_VCS].value,
                 .load = 2.0,
                 .util_scale = 1.0,
                 .relax_min = study[F_RELAX].value,
                 .probe_min = 5,
                 .oversub = 2,
                 .do_sweep = true};
    const sl_cli_opt opts[] = {
        {"jobs", SL_CLI_SIZE, &o.n_jobs, 1, 1000000, NULL},
        {"servers", SL_CLI_UINT, &o.n_servers, 1, 10000, NULL},
        {"vcs", SL_CLI_UINT, &o.n_vcs, 1, 1000, NULL},
        {"load", SL_CLI_ABOVE, &o.load, 0, 1000, NULL},
        {"relax-min", SL_CLI_DOUBLE, &o.relax_min, 0, 1e5, NULL},
        {"probe-min", SL_CLI_DOUBLE, &o.probe_min, 0, 1e5, NULL},
        {"probe-restart-min", SL_CLI_DOUBLE, &o.restart_min, 0, 1e5, NULL},
        {"oversub", SL_CLI_DOUBLE, &o.oversub, 1, 64, NULL},
        {"tiny", SL_CLI_CALL, &o, 0, 0, tiny},
        {"job-util", SL_CLI_ABOVE, &o.job_util, 0, 1, NULL},
        {"util-scale", SL_CLI_ABOVE, &o.util_scale, 0, 100, NULL},
        {"no-sweep", SL_CLI_CLEAR, &o.do_sweep, 0, 0, NULL},
    };
    int st = sl_cli_parse(argc, argv, usage, &o.c, opts, sizeof opts / sizeof opts[0]);
    if (st != SL_CLI_RUN)
        return st;
    static study_run sr;
    sr.o = &o;
    if ((st = trace(&sr)) >= 0)
        return st;
    print_trace(&sr);
    if ((st = run_schedulers(&sr)) >= 0)
        return st;
    if (o.probe_min > 0)
        print_probes(&sr);
    if (o.do_sweep && ((st = util_sweep(&sr)) >= 0 || (st = locality_sweep(&sr)) >= 0))
        return st;
    FILE *jf;
    if (!sl_cli_create(o.c.json, &jf))
        return 1;
    if (jf)
        write_json(jf, &sr);
    if (!sl_cli_close(jf, o.c.json))
        return 1;
    print_bench(&sr);
    sl_free(sr.jobs);
    sl_free(sr.quota);
    return 0;
}
