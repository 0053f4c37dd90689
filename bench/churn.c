/* bench/churn: how much memory the manager holds beyond what the admitted
 * jobs use, over a randomised churn of sessions.
 *
 *   churn [--jobs 2000] [--seed 1] [--capacity-gib 16] [--framework-mib 32]
 *         [--gap 80] [--json FILE]
 *
 * Jobs (bench_models.h: six models, inference at batch 1 or 8, training at
 * a per-model batch) arrive at random (geometric inter-arrival times, tuned
 * to keep the device saturated and the queue busy) and ask to be admitted,
 * waiting if needed. Declarations are drawn too: 60% declare their exact
 * persistent bytes (40% declare 0), 75% declare their exact planned
 * ephemeral peak (25% declare 0 and get the default until they register).
 * Once admitted a job allocates its parameter tensors (and momentum when
 * training) one by one, registers its graph (sl_mem_set_ephemeral with the
 * planned peak), then runs: every tick, each lane runs one iteration of one
 * of its jobs (the one with the fewest iterations done: jobs in a lane take
 * turns) between sl_mem_lane_busy and sl_mem_lane_idle. A job leaves
 * (sl_mem_release) right after its last iteration, while its lane is still
 * busy; queued jobs are admitted as memory frees up.
 *
 * After every manager call:
 *   reserved = persistent memory held (the region of each job that declared
 *              P, the blocks of each job that declared 0) + lane sizes +
 *              framework (lanes x workspace): every byte the manager holds,
 *              capacity - free;
 *   live     = persistent bytes in the jobs' tensors + for every lane, the
 *              largest planned peak among the lane's jobs that have
 *              registered a graph: the ephemeral memory in use, since jobs
 *              in a lane take turns and a job that has not registered uses
 *              none.
 * Result: peak_reserved / peak_live, the maxima over the whole run (goal
 * <= 1.05), and the same without the framework workspaces. Last line
 *   BENCH churn peak_reserved=... peak_live=... ratio=... */
#include "bench_models.h"
#include "bench_util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "manager.h"
#include "sl_error.h"

#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * MIB)

struct job_type {
    bm_net *net;
    int model;
    bool training;
    uint64_t batch;
    uint64_t persistent, peak;
    double weight;
};

enum { WAITING, RUNNING, DONE, FAILED };

struct job {
    uint64_t id;
    const struct job_type *type;
    uint64_t declared_p, declared_e;
    int state;
    uint32_t lane;
    bool registered;
    uint64_t total, done;
    uint64_t *blocks;
    size_t n_blocks;
    size_t active_slot; /* index in sim.active while RUNNING */
    bool retried;
};

struct sim {
    sl_mem_mgr *m;
    struct job *jobs;
    size_t n_jobs;
    struct job **active; /* RUNNING jobs */
    size_t n_active;
    uint64_t rng;
    uint64_t framework;
    uint64_t peak_reserved, peak_live, peak_reserved_no_fw;
    double sum_reserved, sum_live;
    uint64_t samples;
    uint32_t max_queue, max_lanes;
    uint64_t failed_setup, retried, waited;
    uint64_t setup_failures[2][SL_MEM_FRAGMENTATION + 1]; /* [alloc, register][reason] */
    sl_mem_lane_info *lanes;
    size_t lanes_cap;
    /* sum over lanes of the largest registered peak: recomputed only after
     * a job registered, left or changed lane */
    uint64_t lane_live;
    bool lane_live_dirty;
};

static uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *state)
{
    return (double) (rng_next(state) >> 11) / 9007199254740992.0;
}

static uint64_t rng_range(uint64_t *state, uint64_t lo, uint64_t hi)
{
    return lo + rng_next(state) % (hi - lo + 1);
}

static size_t load_lanes(struct sim *s)
{
    size_t n = sl_mem_lanes(s->m, s->lanes, s->lanes_cap);
    while (n > s->lanes_cap) {
        s->lanes_cap = 2 * n;
        s->lanes = realloc(s->lanes, s->lanes_cap * sizeof(*s->lanes));
        if (!s->lanes)
            exit(1);
        n = sl_mem_lanes(s->m, s->lanes, s->lanes_cap);
    }
    return n;
}

/* Index of lane id in s->lanes (ids ascending), or n when absent. */
static size_t lane_index(const struct sim *s, size_t n, uint32_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->lanes[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && s->lanes[lo].id == id ? lo : n;
}

/* Takes the reserved / live sample described at the top; at_tick_end
 * samples also go into the time average (one per tick, so that set-up calls
 * do not outweigh running time). */
static void sample_at(struct sim *s, bool at_tick_end)
{
    sl_mem_stats st;
    sl_mem_get_stats(s->m, &st);
    if (s->lane_live_dirty) {
        size_t n_lanes = load_lanes(s);
        uint64_t *lane_peak = calloc(n_lanes ? n_lanes : 1, sizeof(*lane_peak));
        if (!lane_peak)
            exit(1);
        for (size_t j = 0; j < s->n_active; j++) {
            const struct job *job = s->active[j];
            size_t l = job->registered ? lane_index(s, n_lanes, job->lane) : n_lanes;
            if (l < n_lanes && job->type->peak > lane_peak[l])
                lane_peak[l] = job->type->peak;
        }
        s->lane_live = 0;
        for (size_t l = 0; l < n_lanes; l++)
            s->lane_live += lane_peak[l];
        free(lane_peak);
        s->lane_live_dirty = false;
    }
    uint64_t live = st.persistent_used + s->lane_live;
    uint64_t reserved = st.persistent_reserved + st.lanes + st.framework;
    if (reserved > s->peak_reserved)
        s->peak_reserved = reserved;
    if (reserved - st.framework > s->peak_reserved_no_fw)
        s->peak_reserved_no_fw = reserved - st.framework;
    if (live > s->peak_live)
        s->peak_live = live;
    if (at_tick_end) {
        s->sum_reserved += (double) reserved;
        s->sum_live += (double) live;
    }
    s->samples++;
    if (st.n_queued > s->max_queue)
        s->max_queue = st.n_queued;
    if (st.n_lanes > s->max_lanes)
        s->max_lanes = st.n_lanes;
}

static void sample(struct sim *s)
{
    sample_at(s, false);
}

static void release(struct sim *s, struct job *job, int state)
{
    sl_mem_release(s->m, job->id);
    free(job->blocks);
    job->blocks = NULL;
    job->n_blocks = 0;
    s->lane_live_dirty = true;
    if (job->state == RUNNING) {
        s->active[job->active_slot] = s->active[--s->n_active];
        s->active[job->active_slot]->active_slot = job->active_slot;
    }
    job->state = state;
    sample(s);
}

static void arrive(struct sim *s, struct job *job);

/* A job just admitted: allocates its tensors, registers its graph. */
static void setup(struct sim *s, struct job *job, uint32_t lane)
{
    job->state = RUNNING;
    job->lane = lane;
    job->active_slot = s->n_active;
    s->active[s->n_active++] = job;
    const bm_net *n = job->type->net;
    size_t copies = job->type->training ? 2 : 1;
    job->blocks = malloc(n->n_params * copies * sizeof(*job->blocks));
    if (!job->blocks)
        exit(1);
    int reason = SL_MEM_FITS, stage = 0;
    for (size_t c = 0; c < copies; c++) {
        for (size_t t = 0; t < n->n_params; t++) {
            if (sl_mem_alloc(s->m, job->id, n->params[t], &job->blocks[job->n_blocks], &reason) !=
                SL_OK)
                goto failed;
            job->n_blocks++;
            sample(s);
        }
    }
    stage = 1;
    if (sl_mem_set_ephemeral(s->m, job->id, job->type->peak, &job->lane, &reason) != SL_OK)
        goto failed;
    job->registered = true;
    s->lane_live_dirty = true;
    sample(s);
    return;

failed:
    /* It declared less than it needs (0 for unknown) and the rest is taken
     * now: like a client that learned its sizes, it asks again, once,
     * declaring them, and waits. */
    s->failed_setup++;
    s->setup_failures[stage][reason <= SL_MEM_FRAGMENTATION ? reason : 0]++;
    release(s, job, FAILED);
    if (!job->retried) {
        job->retried = true;
        job->declared_p = job->type->persistent;
        job->declared_e = job->type->peak;
        job->state = WAITING;
        s->retried++;
        arrive(s, job);
    }
}

static void drain(struct sim *s)
{
    uint64_t id;
    uint32_t lane;
    while (sl_mem_next_admitted(s->m, &id, &lane))
        setup(s, &s->jobs[id - 1], lane);
}

static void arrive(struct sim *s, struct job *job)
{
    uint32_t lane = 0;
    int rc = sl_mem_admit(s->m, job->id, job->declared_p, job->declared_e, true, NULL, &lane);
    sample(s);
    if (rc == SL_OK) {
        setup(s, job, lane);
    } else if (rc == SL_EEXHAUSTED) {
        job->state = WAITING;
        sl_mem_session_info si;
        if (sl_mem_session_get(s->m, job->id, &si) == SL_OK && si.queued)
            s->waited++;
        else
            job->state = FAILED; /* quota: can never fit */
    } else {
        fprintf(stderr, "churn: admit failed: %s\n", sl_strerror(rc));
        exit(1);
    }
}

/* One tick: every lane runs one iteration of its least advanced job. */
static void tick(struct sim *s)
{
    size_t n_lanes = load_lanes(s);
    s->lane_live_dirty = true; /* s->lanes was reloaded */
    uint32_t *ran = malloc((n_lanes ? n_lanes : 1) * sizeof(*ran));
    struct job **next = calloc(n_lanes ? n_lanes : 1, sizeof(*next));
    struct job **runner = malloc((n_lanes ? n_lanes : 1) * sizeof(*runner));
    if (!ran || !next || !runner)
        exit(1);
    for (size_t j = 0; j < s->n_active; j++) {
        struct job *job = s->active[j];
        size_t l = job->registered ? lane_index(s, n_lanes, job->lane) : n_lanes;
        if (l == n_lanes)
            continue;
        struct job *cur = next[l];
        if (!cur || job->done < cur->done || (job->done == cur->done && job->id < cur->id))
            next[l] = job;
    }
    size_t n_ran = 0;
    for (size_t l = 0; l < n_lanes; l++) {
        if (!next[l])
            continue;
        ran[n_ran] = s->lanes[l].id;
        runner[n_ran++] = next[l];
    }
    free(next);
    for (size_t r = 0; r < n_ran; r++)
        sl_mem_lane_busy(s->m, ran[r]);
    for (size_t r = 0; r < n_ran; r++)
        if (++runner[r]->done == runner[r]->total)
            release(s, runner[r], DONE); /* its lane is still busy */
    for (size_t r = 0; r < n_ran; r++) {
        sl_mem_lane_idle(s->m, ran[r]);
        sample(s);
    }
    drain(s);
    sample_at(s, true);
    free(ran);
    free(runner);
}

static const struct job_type *pick_type(struct sim *s, const struct job_type *types, size_t n)
{
    double total = 0, x;
    for (size_t i = 0; i < n; i++)
        total += types[i].weight;
    x = rng_unit(&s->rng) * total;
    for (size_t i = 0; i < n; i++) {
        if (x < types[i].weight)
            return &types[i];
        x -= types[i].weight;
    }
    return &types[n - 1];
}

int main(int argc, char **argv)
{
    size_t n_jobs = 2000;
    uint64_t seed = 1;
    double capacity_gib = 16, framework_mib = 32, gap = 80;
    const char *json = NULL;
    static const struct option opts[] = {
        {"jobs", required_argument, NULL, 'n'},
        {"seed", required_argument, NULL, 's'},
        {"capacity-gib", required_argument, NULL, 'c'},
        {"framework-mib", required_argument, NULL, 'f'},
        {"gap", required_argument, NULL, 'g'},
        {"json", required_argument, NULL, 'j'},
        {0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'n':
            n_jobs = strtoull(optarg, NULL, 10);
            break;
        case 's':
            seed = strtoull(optarg, NULL, 10);
            break;
        case 'c':
            capacity_gib = atof(optarg);
            break;
        case 'f':
            framework_mib = atof(optarg);
            break;
        case 'g':
            gap = atof(optarg);
            break;
        case 'j':
            json = optarg;
            break;
        default:
            fprintf(stderr, "usage: churn [--jobs N] [--seed S] [--capacity-gib G] "
                            "[--framework-mib M] [--gap TICKS] [--json FILE]\n");
            return 2;
        }
    }
    if (n_jobs == 0 || gap < 1) {
        fprintf(stderr, "churn: need jobs\n");
        return 2;
    }

    /* Job types: inference at batch 1 and 8, training at a batch that
     * suits the model; small models are the common case. */
    static const uint64_t train_batch[BM_N_MODELS] = {128, 64, 64, 64, 32, 16};
    static const double model_weight[BM_N_MODELS] = {25, 15, 20, 20, 12, 8};
    struct job_type types[3 * BM_N_MODELS];
    size_t n_types = 0;
    for (int k = 0; k < BM_N_MODELS; k++) {
        for (int v = 0; v < 3; v++) {
            struct job_type *t = &types[n_types++];
            t->net = malloc(sizeof(bm_net));
            if (!t->net)
                return 1;
            t->model = k;
            t->training = v == 2;
            t->batch = v == 0 ? 1 : v == 1 ? 8 : train_batch[k];
            bm_build(t->net, k, t->batch, t->training);
            t->persistent = bm_persistent_bytes(t->net);
            t->peak = bm_ephemeral_peak(t->net, NULL);
            t->weight = model_weight[k] * (t->training ? 0.5 : 0.25);
        }
    }

    struct sim s = {0};
    s.rng = seed * 0x9E3779B97F4A7C15ull + 7;
    s.framework = ((uint64_t) (framework_mib * MIB) + 255) & ~255ull;
    sl_mem_config cfg = {.capacity = (uint64_t) (capacity_gib * GIB) & ~255ull,
                         .framework_per_lane = s.framework,
                         .default_ephemeral = 64ull << 20};
    if (sl_mem_mgr_create(&cfg, &s.m) != SL_OK) {
        fprintf(stderr, "churn: cannot create the manager\n");
        return 1;
    }
    s.n_jobs = n_jobs;
    s.jobs = calloc(n_jobs, sizeof(*s.jobs));
    s.active = calloc(n_jobs, sizeof(*s.active));
    if (!s.jobs || !s.active)
        return 1;
    for (size_t j = 0; j < n_jobs; j++) {
        struct job *job = &s.jobs[j];
        job->id = j + 1;
        job->type = pick_type(&s, types, n_types);
        job->declared_p = rng_unit(&s.rng) < 0.9 ? job->type->persistent : 0;
        job->declared_e = rng_unit(&s.rng) < 0.8 ? job->type->peak : 0;
        job->total = job->type->training ? rng_range(&s.rng, 20, 200) : rng_range(&s.rng, 10, 100);
    }

    /* Arrivals: one job every `gap` ticks on average. The lanes get through
     * about one job per 80 ticks here: at the default the device is full
     * most of the time and a queue forms now and then; much less and the
     * queue grows without bound, much more and memory is never short. */
    size_t next = 0;
    uint64_t ticks = 0;
    for (;;) {
        while (next < n_jobs && rng_unit(&s.rng) < 1.0 / gap) {
            arrive(&s, &s.jobs[next]);
            next++;
        }
        tick(&s);
        ticks++;
        sl_mem_stats st;
        sl_mem_get_stats(s.m, &st);
        if (next == n_jobs && st.n_sessions == 0 && st.n_queued == 0)
            break;
    }
    if (sl_mem_check(s.m) != SL_OK) {
        fprintf(stderr, "churn: manager invariants broken\n");
        return 1;
    }
    sl_mem_stats st;
    sl_mem_get_stats(s.m, &st);
    if (st.persistent_used || st.lanes || st.n_lanes || st.largest_free != cfg.capacity) {
        fprintf(stderr, "churn: memory not returned at the end\n");
        return 1;
    }
    size_t done = 0, failed = 0;
    for (size_t j = 0; j < n_jobs; j++) {
        done += s.jobs[j].state == DONE;
        failed += s.jobs[j].state == FAILED;
    }

    double ratio = (double) s.peak_reserved / (double) s.peak_live;
    double ratio_no_fw = (double) s.peak_reserved_no_fw / (double) s.peak_live;
    double mean_ratio = s.sum_reserved / s.sum_live;
    printf("job types (persistent incl. momentum, planned ephemeral peak):\n");
    for (size_t t = 0; t < n_types; t++)
        printf("  %-20s %-9s batch %3llu: %9.1f MiB %9.1f MiB\n", bm_model_names[types[t].model],
               types[t].training ? "training" : "inference", (unsigned long long) types[t].batch,
               types[t].persistent / MIB, types[t].peak / MIB);
    printf("%zu jobs over %llu ticks on %.0f GiB (framework %.0f MiB per lane): %zu done, %zu "
           "failed (%llu set-ups failed, %llu retried declaring their sizes), %llu waits in the "
           "queue (at most %u at once), up to %u lanes, %llu samples\n",
           n_jobs, (unsigned long long) ticks, capacity_gib, framework_mib, done, failed,
           (unsigned long long) s.failed_setup, (unsigned long long) s.retried,
           (unsigned long long) s.waited, s.max_queue, s.max_lanes, (unsigned long long) s.samples);
    printf("set-up failures: alloc quota %llu, capacity %llu, fragmentation %llu; register "
           "quota %llu, capacity %llu, fragmentation %llu\n",
           (unsigned long long) s.setup_failures[0][SL_MEM_QUOTA],
           (unsigned long long) s.setup_failures[0][SL_MEM_CAPACITY],
           (unsigned long long) s.setup_failures[0][SL_MEM_FRAGMENTATION],
           (unsigned long long) s.setup_failures[1][SL_MEM_QUOTA],
           (unsigned long long) s.setup_failures[1][SL_MEM_CAPACITY],
           (unsigned long long) s.setup_failures[1][SL_MEM_FRAGMENTATION]);
    printf("peak reserved %.1f MiB (persistent held + lanes + framework), peak live %.1f MiB "
           "(tensor bytes + per lane the largest registered peak)\n",
           s.peak_reserved / MIB, s.peak_live / MIB);
    printf("ratio %.4f (without framework %.4f; mean reserved / mean live over ticks %.4f)\n",
           ratio, ratio_no_fw, mean_ratio);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"bench\":\"churn\",\"jobs\":%zu,\"seed\":%llu,\"capacity\":%llu,"
                    "\"framework_per_lane\":%llu,\"peak_reserved\":%llu,\"peak_live\":%llu,"
                    "\"ratio\":%.4f,\"ratio_without_framework\":%.4f,\"mean_ratio\":%.4f,"
                    "\"done\":%zu,\"failed\":%zu,\"waited\":%llu,\"max_lanes\":%u}\n",
                    n_jobs, (unsigned long long) seed, (unsigned long long) cfg.capacity,
                    (unsigned long long) s.framework, (unsigned long long) s.peak_reserved,
                    (unsigned long long) s.peak_live, ratio, ratio_no_fw, mean_ratio, done, failed,
                    (unsigned long long) s.waited, s.max_lanes);
            fclose(f);
        }
    }
    sl_mem_mgr_destroy(s.m);
    for (size_t t = 0; t < n_types; t++)
        free(types[t].net);
    free(s.jobs);
    free(s.lanes);
    printf(
        "BENCH churn peak_reserved=%llu peak_live=%llu ratio=%.4f ratio_without_framework=%.4f\n",
        (unsigned long long) s.peak_reserved, (unsigned long long) s.peak_live, ratio, ratio_no_fw);
    return 0;
}
