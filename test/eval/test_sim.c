/* Tests of the simulator (eval/lib/evsim.h) at a tiny scale: the Salus section
 * 5.1 experiment with its iterations cut 100-fold, checked for the
 * invariants the experiment's figures rest on. */
#include "sl_test.h"

#include "graphs.h"
#include "gaps.h"
#include "evsim.h"
#include "sim/profiles.h"
#include "sl_alloc.h"
#include "workload.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_JOBS 24

static sl_eval_workload *workloads;
static size_t n_workloads;
static uint64_t p100_bytes;

static int setup(void **state)
{
    (void) state;
    const sl_sim_profile *p;
    if (sl_sim_profile_find("p100", &p) != SL_OK)
        return -1;
    p100_bytes = p->capacity;
    return sl_eval_workloads_load(SL_EVAL_CSV, &workloads, &n_workloads) == SL_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void) state;
    sl_free(workloads);
    return 0;
}

/* The trace, shortened: every job keeps its profile but runs 1/100 of its
 * iterations (at least 2), arriving 100 times as fast. */
static void tiny_trace(uint64_t seed, sl_eval_job_spec *jobs)
{
    assert_sl_ok(sl_eval_trace_salus(workloads, n_workloads, N_JOBS, 3.0, seed, jobs));
    for (size_t i = 0; i < N_JOBS; i++)
        jobs[i].iterations = jobs[i].iterations / 100 > 2 ? jobs[i].iterations / 100 : 2;
}

static void test_profiles(void **state)
{
    (void) state;
    assert_int_equal(n_workloads, 99);
    unsigned classes[11] = {0};
    for (size_t i = 0; i < n_workloads; i++) {
        const sl_eval_workload *w = &workloads[i];
        classes[w->length_min]++;
        /* a job's length running alone is what its class says, within the
         * start-up the shorter classes include (up to half a 1-minute job),
         * or the measurements' noise */
        double solo_s = (double) (w->iterations * w->iteration_ns) / 1e9;
        assert_true(solo_s <= 1.01 * w->jct_s); /* overfeat_50_5min: 1.002 */
        assert_true(solo_s > 0.45 * w->jct_s);  /* inception4_75_1min: 0.496 */
        assert_true(w->persistent_bytes > 0 && w->ephemeral_bytes > 0);
    }
    /* the upstream mislabel (vgg16_100_1min twice) lands in the 10 class */
    assert_int_equal(classes[1], 33);
    assert_int_equal(classes[5], 33);
    assert_int_equal(classes[10], 33);
}

/* Computed profiles: the rows the op lists cover, each within the sim
 * model's goal (0.7..1.3, bench/sim_models) of the measured P100 time, and
 * parameters that match the published counts within 2 %. */
static void test_computed_profiles(void **state)
{
    (void) state;
    const sl_sim_profile *p;
    assert_sl_ok(sl_sim_profile_find("p100", &p));
    sl_eval_workload *c = sl_calloc(n_workloads, sizeof *c);
    assert_non_null(c);
    memcpy(c, workloads, n_workloads * sizeof *c);
    size_t n = n_workloads;
    assert_sl_ok(sl_eval_workloads_compute(c, &n, p));
    assert_int_equal(n, 54);
    for (size_t i = 0; i < n; i++) {
        assert_true(c[i].computed);
        const sl_eval_workload *m = NULL;
        for (size_t k = 0; k < n_workloads && !m; k++)
            if (strcmp(workloads[k].name, c[i].name) == 0 && workloads[k].jct_s == c[i].jct_s)
                m = &workloads[k];
        assert_non_null(m);
        double ratio = (double) c[i].iteration_ns / (double) m->iteration_ns;
        assert_true(ratio > 0.7 && ratio < 1.3);
        double params = (double) c[i].persistent_bytes / (double) m->persistent_bytes;
        assert_true(params > 0.98 && params < 1.02);
        assert_int_equal(c[i].persistent_bytes + c[i].ephemeral_bytes, c[i].peak_bytes);
        assert_int_equal(c[i].iterations, m->iterations);
        /* big-batch training mostly fills the device: launches are a few
         * %, and only the late 7 x 7 layers of a ResNet at batch 25 have
         * too few output tiles (u 0.75-0.81 there, 0.89 at batch 50) */
        assert_true(c[i].utilisation > 0.7 && c[i].utilisation <= 1.0);
        if (strncmp(c[i].name, "vgg", 3) == 0)
            assert_true(c[i].utilisation > 0.9);
    }
    sl_free(c);
}

/* Profiles from a file (eval/profiles --out): the rows it names keep their
 * iterations and take its timing and memory, the others go; a malformed
 * line, a zero field or a file that names no row is refused. */
static void test_nn_profiles(void **state)
{
    (void) state;
    char path[] = "/tmp/sl_test_profilesXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    static const char *const files[] = {
        "model,batch,iteration_ns,persistent_bytes,ephemeral_bytes\n"
        "vgg16,25,178000000,553430176,1964790784\nresnet50,50,194000000,102000000,4000000000\n",
        "model,batch,iteration_ns,persistent_bytes,ephemeral_bytes\nvgg16,25,178000000,5,x\n",
        "model,batch,iteration_ns,persistent_bytes,ephemeral_bytes\nvgg16,25,0,5,5\n",
        "model,batch,iteration_ns,persistent_bytes,ephemeral_bytes\nvgg16,26,1,5,5\n",
    };
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        assert_int_equal(ftruncate(fd, 0), 0);
        assert_int_equal(pwrite(fd, files[f], strlen(files[f]), 0), (ssize_t) strlen(files[f]));
        sl_eval_workload *c = sl_calloc(n_workloads, sizeof *c);
        assert_non_null(c);
        memcpy(c, workloads, n_workloads * sizeof *c);
        size_t n = n_workloads;
        int rc = sl_eval_workloads_profiles(c, &n, path);
        if (f > 0) {
            assert_int_equal(rc, SL_EINVAL);
            assert_int_equal(n, n_workloads);
            sl_free(c);
            continue;
        }
        assert_sl_ok(rc);
        assert_int_equal(n, 6); /* vgg16 at 25 and resnet50 at 50, 1/5/10 minutes each */
        for (size_t i = 0; i < n; i++) {
            assert_true(c[i].computed);
            bool vgg = strcmp(c[i].model, "vgg16") == 0;
            assert_int_equal(c[i].batch, vgg ? 25 : 50);
            assert_int_equal(c[i].iteration_ns, vgg ? 178000000u : 194000000u);
            assert_int_equal(c[i].ephemeral_bytes, vgg ? 1964790784u : 4000000000u);
            const sl_eval_workload *m = NULL;
            for (size_t k = 0; k < n_workloads && !m; k++)
                if (strcmp(workloads[k].name, c[i].name) == 0 && workloads[k].jct_s == c[i].jct_s)
                    m = &workloads[k];
            assert_non_null(m);
            assert_int_equal(c[i].iterations, m->iterations);
        }
        sl_free(c);
    }
    close(fd);
    unlink(path);
    size_t n = n_workloads;
    assert_int_equal(sl_eval_workloads_profiles(workloads, &n, "/nonexistent/profiles.csv"),
                     SL_ENOTFOUND);
}

/* The small networks, forward-only timelines and utilisation: a forward
 * pass is a part of the training iteration, and batch 1 is launch-bound. */
static void test_timelines(void **state)
{
    (void) state;
    const sl_sim_profile *p;
    assert_sl_ok(sl_sim_profile_find("p100", &p));
    static const char *const names[] = {"vae", "superres", "resnet50", "vgg16"};
    for (size_t i = 0; i < 4; i++) {
        sl_eval_timeline train, infer, one;
        assert_true(sl_eval_graph_known(names[i]));
        assert_sl_ok(sl_eval_timeline_build(names[i], 32, p, &train));
        assert_sl_ok(sl_eval_timeline_build_ex(names[i], 32, p, true, &infer));
        assert_sl_ok(sl_eval_timeline_build_ex(names[i], 1, p, true, &one));
        assert_true(infer.n_ops < train.n_ops);
        assert_true(infer.iteration_ns < train.iteration_ns / 2);
        assert_int_equal(infer.params, train.params); /* counted, not updated */
        assert_true(train.work_ns < train.iteration_ns);
        assert_int_equal(train.iteration_ns - train.work_ns, train.n_ops * p->launch_ns);
        /* batch 1 leaves most of the device idle: launch gaps, and ops
         * too small to fill the SMs */
        double u = sl_eval_timeline_utilisation(&one);
        assert_true(u > 0 && u < sl_eval_timeline_utilisation(&infer));
        double occ = 0;
        for (size_t k = 0; k < one.n_ops; k++) {
            assert_true(one.ops[k].occupancy > 0 && one.ops[k].occupancy <= 1);
            occ += (double) (one.ops[k].ns - one.ops[k].launch_ns) * one.ops[k].occupancy;
        }
        assert_true(fabs(occ - one.occupied_ns) < 1e-6 * occ + 1);
        assert_true(u < (double) one.work_ns / (double) one.iteration_ns);
        /* launched asynchronously: between the larger of the two sums and
         * the serial charge; the same on the whole device through the
         * partition model, and the utilisation over it higher */
        uint64_t piped = sl_eval_timeline_pipelined_ns(&train);
        assert_int_equal(sl_eval_timeline_ns_on_ex(&train, p, p->sm_count, true), piped);
        assert_int_equal(sl_eval_timeline_ns_on_ex(&train, p, p->sm_count, false),
                         sl_eval_timeline_ns_on(&train, p, p->sm_count));
        assert_int_equal(sl_eval_timeline_solo_ns(&train, true), piped);
        assert_int_equal(sl_eval_timeline_solo_ns(&train, false), train.iteration_ns);
        double u_piped = sl_eval_timeline_utilisation_ex(&train, true);
        assert_true(u_piped > sl_eval_timeline_utilisation(&train) && u_piped <= 1.0);
        /* a need on pipelined times keeps the request within its slack */
        unsigned need = sl_eval_timeline_need_sms_ex(&one, p, 2, 2, 0.02, true);
        assert_true(need >= 2 && need <= p->sm_count);
        assert_true((double) sl_eval_timeline_ns_on_ex(&one, p, need, true) <=
                    1.02 * (double) sl_eval_timeline_ns_on_ex(&one, p, p->sm_count, true));
        uint64_t launches = train.iteration_ns - train.work_ns;
        assert_true(piped >= (launches > train.work_ns ? launches : train.work_ns));
        assert_true(piped < train.iteration_ns);
        sl_eval_timeline_fini(&train);
        sl_eval_timeline_fini(&infer);
        sl_eval_timeline_fini(&one);
    }
    /* the artifact's VAE: 784-500-500-40 and 20-500-500-784 with biases */
    sl_eval_timeline t;
    assert_sl_ok(sl_eval_timeline_build("vae", 128, p, &t));
    assert_int_equal(t.params, 784 * 500 + 500 + 500 * 500 + 500 + 500 * 40 + 40 + 20 * 500 + 500 +
                                   500 * 500 + 500 + 500 * 784 + 784);
    sl_eval_timeline_fini(&t);
    assert_sl_err(sl_eval_timeline_build_ex("nonesuch", 1, p, true, &t), SL_EINVAL);
    sl_eval_timeline empty = {0};
    assert_true(sl_eval_timeline_utilisation(&empty) == 1.0);
    assert_int_equal(sl_eval_timeline_pipelined_ns(&empty), 0);
    /* by hand: launches of 5, works of 2, 20, 1 -> launch ends 5, 10, 15;
     * works [5, 7), [10, 30), [30, 31) */
    sl_eval_op_time ops[3] = {
        {.ns = 7, .launch_ns = 5}, {.ns = 25, .launch_ns = 5}, {.ns = 6, .launch_ns = 5}};
    sl_eval_timeline hand = {.ops = ops, .n_ops = 3};
    assert_int_equal(sl_eval_timeline_pipelined_ns(&hand), 31);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

/* Log-normal lengths: the same jobs and arrivals, the rows' mean length,
 * a heavier tail as sigma grows, nothing shorter than an iteration. */
static void test_lognormal_lengths(void **state)
{
    (void) state;
    enum { N = 4000 };
    sl_eval_job_spec *a = sl_calloc(N, sizeof *a), *b = sl_calloc(N, sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    double mean = 0;
    for (size_t i = 0; i < n_workloads; i++)
        mean += (double) workloads[i].iterations * (double) workloads[i].iteration_ns;
    mean /= (double) n_workloads;
    double top_share[2];
    for (int k = 0; k < 2; k++) {
        double sigma = k ? 1.5 : 0.5;
        assert_sl_ok(sl_eval_trace_salus(workloads, n_workloads, N, 60, 3, a));
        memcpy(b, a, N * sizeof *a);
        assert_sl_ok(sl_eval_trace_lognormal_lengths(workloads, n_workloads, sigma, 3, b, N));
        double sum = 0, *len = sl_calloc(N, sizeof *len);
        assert_non_null(len);
        for (size_t i = 0; i < N; i++) {
            assert_int_equal(b[i].arrival_ns, a[i].arrival_ns);
            assert_int_equal(b[i].workload, a[i].workload);
            assert_int_equal(b[i].iteration_ns, a[i].iteration_ns);
            assert_true(b[i].iterations >= 1);
            sum += len[i] = (double) b[i].iterations * (double) b[i].iteration_ns;
        }
        /* the mean within 10 % (sigma 1.5: the sample mean's error is
         * about 3 % at 4000 draws) */
        assert_true(fabs(sum / N / mean - 1) < 0.10);
        /* the longest 1 % carry more of the work with the heavier tail */
        qsort(len, N, sizeof len[0], cmp_double);
        double top = 0;
        for (size_t i = N - N / 100; i < N; i++)
            top += len[i];
        top_share[k] = top / sum;
        sl_free(len);
    }
    assert_true(top_share[1] > 2 * top_share[0]);
    /* sigma 0: every job the mean length, to an iteration */
    assert_sl_ok(sl_eval_trace_lognormal_lengths(workloads, n_workloads, 0, 3, b, 10));
    for (size_t i = 0; i < 10; i++)
        assert_true(fabs((double) b[i].iterations * (double) b[i].iteration_ns - mean) <=
                    (double) b[i].iteration_ns);
    assert_sl_err(sl_eval_trace_lognormal_lengths(workloads, n_workloads, -1, 3, b, 10), SL_EINVAL);
    assert_sl_err(sl_eval_trace_lognormal_lengths(workloads, 0, 1, 3, b, 10), SL_EINVAL);
    sl_free(a);
    sl_free(b);
}

static void test_deterministic(void **state)
{
    (void) state;
    sl_eval_job_spec jobs[N_JOBS];
    sl_eval_job_result a[N_JOBS], b[N_JOBS];
    sl_eval_summary sa, sb;
    tiny_trace(7, jobs);
    sl_eval_config cfg = sl_eval_config_default("srtf", false, 2, p100_bytes);
    assert_sl_ok(sl_eval_run(&cfg, jobs, N_JOBS, a, &sa));
    assert_sl_ok(sl_eval_run(&cfg, jobs, N_JOBS, b, &sb));
    assert_memory_equal(a, b, sizeof a);
    assert_memory_equal(&sa, &sb, sizeof sa);
    /* and the trace itself depends on the seed alone */
    sl_eval_job_spec again[N_JOBS], other[N_JOBS];
    tiny_trace(7, again);
    tiny_trace(8, other);
    assert_memory_equal(jobs, again, sizeof jobs);
    assert_memory_not_equal(jobs, other, sizeof jobs);
}

/* Per (gpu, lane serial): the jobs in the order they first ran there, and
 * whether a job ran again after another had taken the lane. */
#define MAX_LANES 64
typedef struct order_log {
    struct {
        unsigned gpu;
        uint64_t serial;
        uint64_t last_job;
        uint64_t seen[N_JOBS];
        size_t n_seen;
    } lanes[MAX_LANES];
    size_t n_lanes;
    bool interleaved;
} order_log;

static void log_start(void *arg, unsigned gpu, uint32_t lane, uint64_t serial, uint64_t job_id,
                      uint64_t iteration, uint64_t now)
{
    (void) lane;
    (void) iteration;
    (void) now;
    order_log *log = arg;
    size_t k = 0;
    while (k < log->n_lanes && (log->lanes[k].gpu != gpu || log->lanes[k].serial != serial))
        k++;
    if (k == log->n_lanes) {
        assert_true(log->n_lanes < MAX_LANES);
        log->n_lanes++;
        log->lanes[k].gpu = gpu;
        log->lanes[k].serial = serial;
    }
    if (log->lanes[k].last_job == job_id)
        return;
    log->lanes[k].last_job = job_id;
    for (size_t i = 0; i < log->lanes[k].n_seen; i++)
        if (log->lanes[k].seen[i] == job_id)
            log->interleaved = true;
    /* a job seen again on the lane is not recorded twice: the list holds
     * each job once, so it never outgrows the trace */
    if (!log->interleaved)
        log->lanes[k].seen[log->lanes[k].n_seen++] = job_id;
}

/* Strict fifo (the paper's): on every lane a job runs alone until it
 * leaves, and jobs take the lane in the order they were admitted. */
static void test_fifo_order(void **state)
{
    (void) state;
    sl_eval_job_spec jobs[N_JOBS];
    sl_eval_job_result res[N_JOBS];
    sl_eval_summary sum;
    tiny_trace(3, jobs);
    static order_log log;
    memset(&log, 0, sizeof log);
    sl_eval_config cfg = sl_eval_config_default("fifo", true, 1, p100_bytes);
    cfg.spread_set = true; /* --spread-limit 0: sessions share lanes */
    cfg.on_start = log_start;
    cfg.arg = &log;
    assert_sl_ok(sl_eval_run(&cfg, jobs, N_JOBS, res, &sum));
    assert_int_equal(sum.completed, N_JOBS);
    assert_false(log.interleaved);
    assert_int_equal(sum.lane_switches, 0);
    for (size_t k = 0; k < log.n_lanes; k++) {
        for (size_t i = 1; i < log.lanes[k].n_seen; i++) {
            const sl_eval_job_result *prev = &res[log.lanes[k].seen[i - 1] - 1];
            const sl_eval_job_result *cur = &res[log.lanes[k].seen[i] - 1];
            assert_true(prev->admitted_ns <= cur->admitted_ns);
            /* and it started only once the previous owner had finished */
            assert_true(cur->start_ns >= prev->finish_ns);
        }
    }
    /* work-conserving fifo (salusd's default) does interleave: the check
     * above is not vacuous */
    memset(&log, 0, sizeof log);
    cfg.strict = false;
    assert_sl_ok(sl_eval_run(&cfg, jobs, N_JOBS, res, &sum));
    assert_true(log.interleaved);
}

/* Every policy, both variants, one and several GPUs: every job completes,
 * memory is never over capacity and the manager's invariants hold after
 * every admission and release, and each job's device time is at least its
 * length running alone (sharing only ever adds time). */
static void test_all_complete(void **state)
{
    (void) state;
    static const char *const policies[] = {"fifo", "srtf", "pack", "fair", "rr", "priority"};
    sl_eval_job_spec jobs[N_JOBS];
    sl_eval_job_result res[N_JOBS];
    tiny_trace(11, jobs);
    for (size_t p = 0; p < sizeof policies / sizeof policies[0]; p++) {
        for (int variant = 0; variant < 4; variant++) {
            unsigned gpus = variant < 2 ? 1 : 3;
            sl_eval_config cfg = sl_eval_config_default(policies[p], variant & 1, gpus, p100_bytes);
            cfg.check_memory = true;
            if (variant == 3)
                cfg.placement = SL_EVAL_PLACE_FIRST_FIT;
            sl_eval_summary sum;
            assert_sl_ok(sl_eval_run(&cfg, jobs, N_JOBS, res, &sum));
            assert_int_equal(sum.completed, N_JOBS);
            assert_int_equal(sum.refused, 0);
            assert_int_equal(sum.memory_violations, 0);
            assert_true(sum.max_held_bytes <= sum.capacity_bytes);
            /* the device does every job's solo work, at one unit of work
             * per unit of busy time (processor sharing gives no speed-up),
             * and is never busy longer than the makespan allows */
            uint64_t work = 0;
            for (size_t i = 0; i < N_JOBS; i++)
                work += res[i].solo_ns;
            /* departures are rounded to whole ns: a few per iteration */
            assert_true(sum.gpu_busy_ns + 4 * sum.iterations >= work);
            assert_true(sum.gpu_busy_ns <= work + 4 * sum.iterations);
            assert_true(sum.gpu_busy_ns <= (uint64_t) gpus * sum.makespan_ns);
            for (size_t i = 0; i < N_JOBS; i++) {
                assert_true(res[i].completed);
                assert_int_equal(res[i].iterations, jobs[i].iterations);
                assert_true(res[i].gpu < gpus);
                assert_true(res[i].attained_ns >= res[i].solo_ns);
                assert_true(res[i].arrival_ns <= res[i].admitted_ns);
                assert_true(res[i].admitted_ns <= res[i].start_ns);
                assert_true(res[i].start_ns < res[i].finish_ns);
                /* completion no earlier than the job's length alone allows */
                assert_true(res[i].finish_ns - res[i].start_ns >= res[i].solo_ns);
            }
        }
    }
}

static void test_refused_and_invalid(void **state)
{
    (void) state;
    sl_eval_job_spec jobs[2] = {
        {.id = 1, .iterations = 3, .iteration_ns = 1000, .persistent_bytes = 1ull << 20},
        /* more than the whole GPU: QUOTA, refused at once */
        {.id = 2, .iterations = 3, .iteration_ns = 1000, .persistent_bytes = 64ull << 30},
    };
    sl_eval_job_result res[2];
    sl_eval_summary sum;
    sl_eval_config cfg = sl_eval_config_default("fair", false, 1, p100_bytes);
    assert_sl_ok(sl_eval_run(&cfg, jobs, 2, res, &sum));
    assert_int_equal(sum.completed, 1);
    assert_int_equal(sum.refused, 1);
    assert_true(res[1].refused);
    /* alone: three iterations back to back, a client gap between them */
    assert_int_equal(res[0].finish_ns - res[0].start_ns, 3 * 1000 + 2 * cfg.client_gap_ns);
    jobs[1].id = 1;
    assert_sl_err(sl_eval_run(&cfg, jobs, 2, res, &sum), SL_EINVAL);
    jobs[1].id = 2;
    static const sl_eval_op op = {.launch_ns = 10, .work_ns = 990};
    jobs[1].ops = &op; /* a timeline of no ops */
    assert_sl_err(sl_eval_run(&cfg, jobs, 2, res, &sum), SL_EINVAL);
    jobs[1].ops = NULL;
    cfg.policy = "nonesuch";
    assert_sl_err(sl_eval_run(&cfg, jobs, 2, res, &sum), SL_EINVAL);
}

/* Jobs that leave the device under-used run side by side at full speed
 * when their utilisations fit in 1, and share it fairly when they do not. */
static void test_utilisation(void **state)
{
    (void) state;
    sl_eval_job_spec jobs[2] = {
        {.id = 1, .iterations = 10, .iteration_ns = 1000000, .persistent_bytes = 1ull << 20},
        {.id = 2, .iterations = 10, .iteration_ns = 1000000, .persistent_bytes = 1ull << 20},
    };
    sl_eval_config cfg = sl_eval_config_default("fifo", false, 1, p100_bytes);
    cfg.client_gap_ns = 0;
    sl_eval_summary sum;
    sl_eval_job_result res[2];
    double caps[3] = {0, 0.4, 0.8};
    uint64_t want[3] = {20000000, 10000000, 16000000};
    /* the share in use over time: 1 (one at a time, full), 2 x 0.4 for
     * 10 ms, the whole device for 16 ms */
    double occupied[3] = {20e6, 8e6, 16e6};
    for (int k = 0; k < 3; k++) {
        jobs[0].utilisation = jobs[1].utilisation = caps[k];
        assert_sl_ok(sl_eval_run(&cfg, jobs, 2, res, &sum));
        assert_int_equal(sum.max_lanes, 2); /* lanes of their own: side by side */
        assert_int_equal(sum.makespan_ns, want[k]);
        /* busy time counts time with work on the device, not its share */
        assert_int_equal(sum.gpu_busy_ns, want[k]);
        assert_true(fabs(sum.gpu_occupied_ns - occupied[k]) < 1.0);
    }
    jobs[0].utilisation = 1.5;
    assert_sl_err(sl_eval_run(&cfg, jobs, 2, res, &sum), SL_EINVAL);
}

/* Inference requests arrive on their own schedule; a small one beside
 * training keeps its solo latency when its utilisation leaves room. */
static void test_inference(void **state)
{
    (void) state;
    enum { R = 20 };
    uint64_t req[R];
    for (int i = 0; i < R; i++)
        req[i] = 1000000 + (uint64_t) i * 10000000; /* every 10 ms from 1 ms */
    sl_eval_job_spec jobs[2] = {
        {.id = 1,
         .iterations = R,
         .iteration_ns = 1000000,
         .persistent_bytes = 1ull << 20,
         .utilisation = 0.2,
         .request_ns = req},
        {.id = 2, .iterations = 400, .iteration_ns = 1000000, .persistent_bytes = 1ull << 20},
    };
    sl_eval_config cfg = sl_eval_config_default("fifo", false, 1, p100_bytes);
    cfg.client_gap_ns = 0; /* training keeps the device busy without a break */
    sl_eval_summary sum;
    sl_eval_job_result res[2];
    /* alone: every request takes its iteration time */
    assert_sl_ok(sl_eval_run(&cfg, jobs, 1, res, &sum));
    assert_int_equal(sum.requests, R);
    assert_int_equal(res[0].lat_p50_ns, 1000000);
    assert_int_equal(res[0].lat_p99_ns, 1000000);
    assert_true(res[0].lat_mean_ns == 1e6);
    assert_int_equal(res[0].finish_ns, req[R - 1] + 1000000);
    /* beside training: 0.2 + 1 > 1, but the level 0.8 is above 0.2, so the
     * inference job still runs at its solo speed; training gets 0.8 */
    assert_sl_ok(sl_eval_run(&cfg, jobs, 2, res, &sum));
    assert_int_equal(sum.requests, R);
    assert_int_equal(res[0].lat_p99_ns, 1000000);
    assert_true(res[1].finish_ns - res[1].start_ns > res[1].solo_ns);
    assert_int_equal(res[1].lat_p50_ns, 0); /* training: no latencies */
    /* filling the device: both at 0.5, each request takes twice as long */
    jobs[0].utilisation = 1;
    assert_sl_ok(sl_eval_run(&cfg, jobs, 2, res, &sum));
    assert_int_equal(res[0].lat_p50_ns, 2000000);
    assert_int_equal(sum.lat_p99_ns, 2000000);
    /* a session that opens after its first request's time: that request
     * waits for it (latency 3 ms: opened at 3 ms, served by 4 ms), the
     * others keep their 1 ms; the pooled figures are those of one job */
    jobs[0].arrival_ns = 3000000;
    jobs[0].utilisation = 0.2;
    assert_sl_ok(sl_eval_run(&cfg, jobs, 1, res, &sum));
    assert_int_equal(res[0].lat_p99_ns, 3000000);
    assert_int_equal(res[0].lat_p50_ns, 1000000);
    assert_true(res[0].lat_mean_ns == (3e6 + (R - 1) * 1e6) / R);
    assert_true(sum.lat_mean_ns == res[0].lat_mean_ns);
}

/* A switch delays the incoming iteration by its cost, on the lane's
 * critical path: one lane, no client gap, the device never waits for a
 * client, so the makespan is the work plus the switch costs. */
static void test_switch_cost(void **state)
{
    (void) state;
    sl_eval_job_spec jobs[3] = {
        {.id = 1, .iterations = 6, .iteration_ns = 1000000, .persistent_bytes = 1ull << 20},
        {.id = 2, .iterations = 4, .iteration_ns = 2000000, .persistent_bytes = 2ull << 20},
        {.id = 3, .iterations = 5, .iteration_ns = 500000, .persistent_bytes = 4ull << 20},
    };
    sl_eval_config cfg = sl_eval_config_default("fair", false, 1, p100_bytes);
    cfg.spread_set = true; /* spread limit 0: one lane */
    cfg.client_gap_ns = 0;
    sl_eval_summary sum;
    sl_eval_job_result res[3];
    assert_sl_ok(sl_eval_run(&cfg, jobs, 3, res, &sum));
    assert_int_equal(sum.max_lanes, 1);
    assert_int_equal(sum.switch_ns, 0);
    uint64_t work = 6000000 + 8000000 + 2500000;
    assert_int_equal(sum.makespan_ns, work);
    cfg.switch_cost_ns = 300000;
    assert_sl_ok(sl_eval_run(&cfg, jobs, 3, res, &sum));
    assert_true(sum.lane_switches > 0);
    assert_int_equal(sum.switch_ns % 300000, 0);
    assert_true(sum.switch_ns >= 300000 * sum.lane_switches);
    assert_int_equal(sum.makespan_ns, work + sum.switch_ns);
    /* per byte: the incoming job's state, plus the outgoing one's while it
     * still runs; at 1 ns per KiB a switch costs 1-6 us plus the fixed part */
    cfg.switch_ns_per_byte = 1.0 / 1024;
    assert_sl_ok(sl_eval_run(&cfg, jobs, 3, res, &sum));
    assert_int_equal(sum.makespan_ns, work + sum.switch_ns);
    assert_true(sum.switch_ns % 300000 != 0);
    uint64_t total = 0;
    for (int i = 0; i < 3; i++)
        total += res[i].switch_ns;
    assert_int_equal(total, sum.switch_ns);
}

/* ---- op-level execution beside a high-priority job ---------------------- */

#define HP_OPS 5
#define LP_OPS 20
#define HP_REQS 60
#define N_LP 3

/* hp: 5 ops of 5 us launch + 195 us work (1 ms alone); lp: 20 ops of 5 us
 * launch + 295 us work (6 ms alone). Made up, round, so bounds are exact. */
static const sl_eval_op hp_ops[HP_OPS] = {{5000, 195000, 1, 1.0, 0},
                                          {5000, 195000, 1, 1.0, 0},
                                          {5000, 195000, 1, 1.0, 0},
                                          {5000, 195000, 1, 1.0, 0},
                                          {5000, 195000, 1, 1.0, 0}};
static sl_eval_op lp_ops[LP_OPS];
static uint64_t hp_req[HP_REQS];

typedef struct lat_log {
    uint64_t lat[HP_REQS];
    size_t n;
    uint64_t lp_done;
} lat_log;

static void log_done(void *arg, unsigned gpu, uint64_t job_id, uint64_t iteration,
                     uint64_t request_ns, uint64_t now_ns)
{
    (void) gpu;
    lat_log *l = arg;
    if (job_id == 1) {
        assert_int_equal(iteration, l->n);
        l->lat[l->n++] = now_ns - request_ns;
    } else {
        l->lp_done++;
    }
}

/* One hp job (priority 10) with requests every period_ns (jitter: +-
 * jitter_ns, deterministic) and N_LP lp jobs, under the priority policy. */
static void op_level_jobs(sl_eval_job_spec *jobs, uint64_t period_ns, uint64_t jitter_ns)
{
    for (int k = 0; k < LP_OPS; k++)
        lp_ops[k] = (sl_eval_op){5000, 295000, 4, 1.0, 0};
    for (int i = 0; i < HP_REQS; i++)
        hp_req[i] = (uint64_t) (i + 1) * period_ns + (i % 3 == 0 ? jitter_ns : 0);
    jobs[0] = (sl_eval_job_spec){.id = 1,
                                 .iterations = HP_REQS,
                                 .iteration_ns = 1000000,
                                 .persistent_bytes = 1 << 20,
                                 .priority = 10,
                                 .ops = hp_ops,
                                 .n_ops = HP_OPS,
                                 .request_ns = hp_req};
    for (int k = 0; k < N_LP; k++)
        jobs[1 + k] = (sl_eval_job_spec){.id = 2 + (uint64_t) k,
                                         .iterations = 40,
                                         .iteration_ns = 6000000,
                                         .persistent_bytes = 1 << 20,
                                         .ops = lp_ops,
                                         .n_ops = LP_OPS};
}

static void test_op_level_deterministic(void **state)
{
    (void) state;
    sl_eval_job_spec jobs[1 + N_LP];
    op_level_jobs(jobs, 7000000, 2500000);
    sl_eval_job_result r1[1 + N_LP], r2[1 + N_LP];
    sl_eval_summary s1, s2;
    lat_log l1 = {0}, l2 = {0};
    sl_eval_config cfg = sl_eval_config_default("priority", false, 1, p100_bytes);
    cfg.on_done = log_done;
    cfg.arg = &l1;
    assert_sl_ok(sl_eval_run(&cfg, jobs, 1 + N_LP, r1, &s1));
    cfg.arg = &l2;
    assert_sl_ok(sl_eval_run(&cfg, jobs, 1 + N_LP, r2, &s2));
    assert_int_equal(s1.completed, 1 + N_LP);
    assert_true(s1.lp_steps > 0); /* the lp jobs did go op by op */
    assert_memory_equal(r1, r2, sizeof r1);
    assert_memory_equal(&l1, &l2, sizeof l1);
    assert_int_equal(s1.events, s2.events);
    assert_int_equal(s1.lp_steps, s2.lp_steps);
}

/* Without gap filling (salusd --no-gap-fill), in the serial dispatch of one
 * op per step (--lp-serial --lp-segment-us 1), an hp iteration waits for
 * at most the one lp op already on the device, however many lp lanes: its
 * latency is at most its time alone plus one lp op's work. */
static void test_hp_waits_one_lp_op(void **state)
{
    (void) state;
    sl_eval_job_spec jobs[1 + N_LP];
    op_level_jobs(jobs, 5000000, 1300000);
    lat_log l = {0};
    sl_eval_config cfg = sl_eval_config_default("priority", false, 1, p100_bytes);
    cfg.no_gap_fill = true;
    cfg.lp_serial = true;
    cfg.segment_ns = 1000;
    cfg.pipelined_launches = false; /* the hp job alone: its ops' sum, 1 ms */
    cfg.on_done = log_done;
    cfg.arg = &l;
    sl_eval_summary sum;
    assert_sl_ok(sl_eval_run(&cfg, jobs, 1 + N_LP, NULL, &sum));
    assert_int_equal(l.n, HP_REQS);
    assert_int_equal(sum.lp_in_flight_max, 1);
    assert_true(sum.lp_steps > 0); /* lp iterations after the hp job left run whole */
    uint64_t worst = 0;
    bool delayed = false;
    for (size_t i = 0; i < l.n; i++) {
        assert_true(l.lat[i] >= 1000000);
        assert_true(l.lat[i] <= 1000000 + 295000);
        worst = l.lat[i] > worst ? l.lat[i] : worst;
        delayed |= l.lat[i] > 1000000;
    }
    assert_true(delayed); /* the bound is met, not vacuous */
    /* under plain sharing (fair: no classes) the same hp job waits longer */
    cfg = sl_eval_config_default("fair", false, 1, p100_bytes);
    cfg.pipelined_launches = false;
    lat_log f = {0};
    cfg.on_done = log_done;
    cfg.arg = &f;
    assert_sl_ok(sl_eval_run(&cfg, jobs, 1 + N_LP, NULL, &sum));
    uint64_t fair_worst = 0;
    for (size_t i = 0; i < f.n; i++)
        fair_worst = f.lat[i] > fair_worst ? f.lat[i] : fair_worst;
    assert_true(fair_worst > worst);
}

/* Gap filling with regular hp arrivals (the serial dispatch of one op per
 * step, salusd --lp-serial --lp-segment-us 1): once the gaps and the ops
 * are predicted, lp ops go only where they fit, so no hp request is
 * delayed at all, at every margin, while the lp jobs still progress. */
static void test_gap_fill_no_delay(void **state)
{
    (void) state;
    sl_eval_job_spec jobs[1 + N_LP];
    op_level_jobs(jobs, 10000000, 0);
    const double margins[] = {0, 0.05, 0.10};
    for (int m = 0; m < 3; m++) {
        sl_gaps_config gc = sl_gaps_config_default();
        gc.fit_margin = margins[m];
        lat_log l = {0};
        sl_eval_config cfg = sl_eval_config_default("priority", false, 1, p100_bytes);
        cfg.gaps = &gc;
        cfg.lp_serial = true;
        cfg.segment_ns = 1000;
        cfg.pipelined_launches = false; /* the hp job alone: its ops' sum, 1 ms */
        cfg.on_done = log_done;
        cfg.arg = &l;
        sl_eval_summary sum;
        assert_sl_ok(sl_eval_run(&cfg, jobs, 1 + N_LP, NULL, &sum));
        assert_int_equal(l.n, HP_REQS);
        assert_int_equal(sum.lp_in_flight_max, 1);
        for (size_t i = 10; i < l.n; i++) /* the first gaps train the predictor */
            assert_int_equal(l.lat[i], 1000000);
        /* the lp jobs ran in the gaps, before the hp job finished */
        assert_true(l.lp_done > 0);
        assert_int_equal(sum.completed, 1 + N_LP);
    }
}

/* An op-level inference job's latency figures in its result are those of
 * its requests as on_done sees them: one notion of a request's latency. */
static void test_op_level_latency(void **state)
{
    (void) state;
    sl_eval_job_spec jobs[1 + N_LP];
    op_level_jobs(jobs, 5000000, 1300000);
    lat_log l = {0};
    sl_eval_config cfg = sl_eval_config_default("priority", false, 1, p100_bytes);
    cfg.no_gap_fill = true;
    cfg.on_done = log_done;
    cfg.arg = &l;
    sl_eval_summary sum;
    sl_eval_job_result res[1 + N_LP];
    assert_sl_ok(sl_eval_run(&cfg, jobs, 1 + N_LP, res, &sum));
    assert_int_equal(l.n, HP_REQS);
    assert_int_equal(sum.requests, HP_REQS);
    double total = 0;
    uint64_t worst = 0;
    for (size_t i = 0; i < l.n; i++) {
        total += (double) l.lat[i];
        worst = l.lat[i] > worst ? l.lat[i] : worst;
    }
    assert_true(res[0].lat_mean_ns == total / HP_REQS);
    /* nearest rank 0.99 of 60 values is the largest */
    assert_int_equal(res[0].lat_p99_ns, worst);
    assert_true(res[0].lat_p50_ns >= 1000000 && res[0].lat_p50_ns <= worst);
    for (int k = 1; k <= N_LP; k++)
        assert_int_equal(res[k].lat_p99_ns, 0); /* training: no latencies */
}

/* Switch costs apply to iterations that go op by op too: one lane shared
 * by jobs with timelines, each switch delays the incoming iteration's
 * first op, on the lane's critical path. */
static void test_op_level_switch_cost(void **state)
{
    (void) state;
    static const sl_eval_op ops_a[2] = {{10000, 490000, 1, 1.0, 0}, {10000, 490000, 1, 1.0, 0}};
    static const sl_eval_op ops_b[3] = {
        {5000, 295000, 1, 1.0, 0}, {5000, 295000, 1, 1.0, 0}, {5000, 295000, 1, 1.0, 0}};
    sl_eval_job_spec jobs[2] = {
        {.id = 1,
         .iterations = 5,
         .iteration_ns = 1000000,
         .persistent_bytes = 1ull << 20,
         .ops = ops_a,
         .n_ops = 2,
         .utilisation = 0.3}, /* ignored with a timeline: ops run at their occupancy */
        {.id = 2,
         .iterations = 4,
         .iteration_ns = 900000,
         .persistent_bytes = 2ull << 20,
         .ops = ops_b,
         .n_ops = 3},
    };
    sl_eval_config cfg = sl_eval_config_default("fair", false, 1, p100_bytes);
    cfg.spread_set = true; /* spread limit 0: one lane */
    cfg.client_gap_ns = 0;
    cfg.pipelined_launches = false; /* an iteration takes its ops' sum */
    sl_eval_summary sum;
    sl_eval_job_result res[2];
    assert_sl_ok(sl_eval_run(&cfg, jobs, 2, res, &sum));
    assert_int_equal(sum.max_lanes, 1);
    uint64_t work = 5 * 1000000 + 4 * 900000; /* launches included: one lane, serial */
    assert_int_equal(sum.makespan_ns, work);
    cfg.switch_cost_ns = 200000;
    assert_sl_ok(sl_eval_run(&cfg, jobs, 2, res, &sum));
    assert_true(sum.lane_switches > 0);
    assert_true(sum.switch_ns >= 200000 * sum.lane_switches);
    assert_int_equal(sum.makespan_ns, work + sum.switch_ns);
    /* beside a high-priority job the lp iterations go through the step
     * dispatcher; their switches are charged there as well */
    sl_eval_job_spec opj[1 + N_LP];
    op_level_jobs(opj, 5000000, 1300000);
    cfg = sl_eval_config_default("priority", false, 1, p100_bytes);
    cfg.spread_set = true;
    cfg.no_gap_fill = true;
    assert_sl_ok(sl_eval_run(&cfg, opj, 1 + N_LP, NULL, &sum));
    uint64_t free_p99 = sum.lat_p99_ns;
    assert_int_equal(sum.switch_ns, 0);
    cfg.switch_cost_ns = 100000;
    assert_sl_ok(sl_eval_run(&cfg, opj, 1 + N_LP, NULL, &sum));
    assert_int_equal(sum.completed, 1 + N_LP);
    assert_true(sum.lp_steps > 0);
    assert_true(sum.switch_ns > 0);
    assert_true(sum.lat_p99_ns > free_p99);
}

/* Ops of a timeline run at their occupancy: two jobs whose ops each fill
 * 0.4 of the device run side by side as if alone, two that fill it share
 * it; the occupied share counts what they use. */
static void test_op_occupancy(void **state)
{
    (void) state;
    static sl_eval_op narrow[4], wide[4];
    for (int k = 0; k < 4; k++) {
        narrow[k] = (sl_eval_op){0, 250000, 1, 0.4, 0};
        wide[k] = (sl_eval_op){0, 250000, 1, 0, 0};
    }
    sl_eval_job_spec jobs[2];
    for (int i = 0; i < 2; i++)
        jobs[i] = (sl_eval_job_spec){.id = (uint64_t) i + 1,
                                     .iterations = 10,
                                     .iteration_ns = 1000000,
                                     .persistent_bytes = 1ull << 20,
                                     .ops = narrow,
                                     .n_ops = 4};
    sl_eval_config cfg = sl_eval_config_default("fair", false, 1, p100_bytes);
    cfg.client_gap_ns = 0;
    sl_eval_summary sum;
    assert_sl_ok(sl_eval_run(&cfg, jobs, 2, NULL, &sum));
    assert_int_equal(sum.max_lanes, 2);
    assert_int_equal(sum.makespan_ns, 10000000);
    assert_int_equal(sum.gpu_busy_ns, 10000000);
    assert_true(fabs(sum.gpu_occupied_ns - 8e6) < 1.0);
    jobs[0].ops = jobs[1].ops = wide; /* occupancy 0 = 1: they share */
    assert_sl_ok(sl_eval_run(&cfg, jobs, 2, NULL, &sum));
    assert_int_equal(sum.makespan_ns, 20000000);
    assert_true(fabs(sum.gpu_occupied_ns - 20e6) < 1.0);
    /* one narrow beside one wide: the narrow one keeps its solo speed
     * (water-filling: 0.4 is below the level 0.6 the wide one leaves) */
    jobs[0].ops = narrow;
    sl_eval_job_result res[2];
    assert_sl_ok(sl_eval_run(&cfg, jobs, 2, res, &sum));
    assert_int_equal(res[0].finish_ns - res[0].start_ns, 10000000);
    assert_true(res[1].finish_ns - res[1].start_ns > 10000000);
}

/* The launch path is one per GPU: packed launch-bound jobs cannot launch
 * faster than one op per launch_ns in all, as whole iterations (their
 * launch share) and op by op (one FIFO launch server); a job alone, or
 * one that does not launch, keeps its solo time. */
static void test_launch_path(void **state)
{
    (void) state;
    enum { N = 8, ITERS = 10 };
    sl_eval_job_spec jobs[N];
    for (int i = 0; i < N; i++)
        jobs[i] = (sl_eval_job_spec){.id = (uint64_t) i + 1,
                                     .iterations = ITERS,
                                     .iteration_ns = 1000000,
                                     .persistent_bytes = 1ull << 20,
                                     .utilisation = 0.05,
                                     .launch_share = 0.5};
    sl_eval_config cfg = sl_eval_config_default("fair", false, 1, p100_bytes);
    cfg.client_gap_ns = 0;
    sl_eval_summary sum, priv;
    /* whole iterations: the SMs would take all eight at once (0.4), the
     * launch path only two jobs' worth: N x ITERS x 1 ms x 0.5 of launches */
    assert_sl_ok(sl_eval_run(&cfg, jobs, N, NULL, &sum));
    cfg.private_launches = true;
    assert_sl_ok(sl_eval_run(&cfg, jobs, N, NULL, &priv));
    cfg.private_launches = false;
    assert_int_equal(sum.completed, N);
    assert_true(sum.max_lanes >= 2);
    double bound = (double) N * ITERS * 1000000 * 0.5;
    assert_true((double) sum.makespan_ns >= bound - 1.0);
    assert_true((double) sum.makespan_ns <= bound * 1.05);
    assert_true(priv.makespan_ns < sum.makespan_ns);
    /* alone, a launching job keeps its solo time */
    assert_sl_ok(sl_eval_run(&cfg, jobs, 1, NULL, &sum));
    assert_int_equal(sum.makespan_ns, ITERS * 1000000);
    /* launch share 0 (measured profiles): the same run, to the bit, with
     * the launch path shared or not */
    for (int i = 0; i < N; i++)
        jobs[i].launch_share = 0;
    assert_sl_ok(sl_eval_run(&cfg, jobs, N, NULL, &sum));
    cfg.private_launches = true;
    assert_sl_ok(sl_eval_run(&cfg, jobs, N, NULL, &priv));
    cfg.private_launches = false;
    assert_int_equal(sum.makespan_ns, priv.makespan_ns);
    assert_true(sum.gpu_occupied_ns == priv.gpu_occupied_ns);

    /* op by op: four ops of 5 us launch + 5 us work at occupancy 0.05 */
    static sl_eval_op ops[4];
    for (int k = 0; k < 4; k++)
        ops[k] = (sl_eval_op){5000, 5000, 1, 0.05, 0};
    for (int i = 0; i < N; i++) {
        jobs[i].ops = ops;
        jobs[i].n_ops = 4;
        jobs[i].iteration_ns = 40000;
    }
    /* alone: launches never wait for another stream's. Pipelined (a
     * whole iteration's four launches back to back at its start, each
     * op's work after its launch and the op before it): 4 x 5 + 5 us per
     * iteration; serially (each launch after the op before it), the sum */
    assert_sl_ok(sl_eval_run(&cfg, jobs, 1, NULL, &sum));
    assert_int_equal(sum.makespan_ns, ITERS * 25000);
    cfg.pipelined_launches = false;
    assert_sl_ok(sl_eval_run(&cfg, jobs, 1, NULL, &sum));
    assert_int_equal(sum.makespan_ns, ITERS * 40000);
    cfg.pipelined_launches = true;
    /* packed: N x ITERS x 4 launches of 5 us through one server; it is
     * never idle while another stream waits, so the makespan is that
     * plus the last op's work */
    assert_sl_ok(sl_eval_run(&cfg, jobs, N, NULL, &sum));
    uint64_t launches = (uint64_t) N * ITERS * 4 * 5000;
    assert_true(sum.makespan_ns >= launches);
    assert_true(sum.makespan_ns <= launches + 40000);
    assert_true(sum.max_lanes >= 2); /* several streams launching */
    /* each stream on its own: the lanes run side by side, each as if alone,
     * its launches still pipelined (4 x 5 + 5 us an iteration) */
    cfg.private_launches = true;
    assert_sl_ok(sl_eval_run(&cfg, jobs, N, NULL, &priv));
    assert_true(priv.makespan_ns < launches);
    assert_sl_ok(sl_eval_run(&cfg, jobs, 1, NULL, &priv));
    assert_int_equal(priv.makespan_ns, ITERS * 25000);
    cfg.private_launches = false;

    /* a whole iteration reserves all its launches when it starts: a job
     * arriving just after one began launches behind all four (its op's
     * work from 25 us on), where serially it would follow the first */
    static sl_eval_op one[1] = {{5000, 5000, 1, 0.05, 0}};
    sl_eval_job_spec two[2] = {jobs[0], jobs[1]};
    two[0].iterations = two[1].iterations = 1;
    two[1].arrival_ns = 1000;
    two[1].ops = one;
    two[1].n_ops = 1;
    two[1].iteration_ns = 10000;
    sl_eval_job_result res[2];
    assert_sl_ok(sl_eval_run(&cfg, two, 2, res, &sum));
    uint64_t piped = res[1].finish_ns;
    cfg.pipelined_launches = false;
    assert_sl_ok(sl_eval_run(&cfg, two, 2, res, &sum));
    uint64_t serial = res[1].finish_ns;
    assert_true(piped >= 4 * 5000 + 5000 + 5000);
    assert_true(serial < piped);
}

/* Graph launches: an iteration alone is one replay (5 us on the launch
 * path) and a node's cost before each op's work; two streams' replays
 * share only the replay's launch. Stepwise lp work replays segments: fewer
 * steps, and an hp request still waits for at most about one segment. */
static void test_graph_launches(void **state)
{
    (void) state;
    static sl_eval_op ops[4];
    for (int k = 0; k < 4; k++)
        ops[k] = (sl_eval_op){5000, 5000, 1, 0.05, 0};
    sl_eval_job_spec jobs[2];
    for (int i = 0; i < 2; i++)
        jobs[i] = (sl_eval_job_spec){.id = 1 + (uint64_t) i,
                                     .iterations = 100,
                                     .iteration_ns = 29000,
                                     .persistent_bytes = 1 << 20,
                                     .ops = ops,
                                     .n_ops = 4};
    sl_eval_config cfg = sl_eval_config_default("pack", false, 1, p100_bytes);
    cfg.client_gap_ns = 0;
    cfg.graph_launches = true;
    cfg.graph_launch_ns = 5000;
    cfg.graph_node_ns = 1000;
    sl_eval_summary sum;
    assert_sl_ok(sl_eval_run(&cfg, jobs, 1, NULL, &sum));
    assert_int_equal(sum.makespan_ns, 100 * (5000 + 4 * (1000 + 5000)));
    /* two side by side: their ops fill 5 % of the SMs each, and only the
     * replays' 5 us launches queue on the shared path */
    assert_sl_ok(sl_eval_run(&cfg, jobs, 2, NULL, &sum));
    assert_true(sum.max_lanes >= 2);
    assert_true(sum.makespan_ns <= 100 * (29000 + 5000));

    /* stepwise lp beside hp: segments of 650 us hold two 295 us ops (as
     * measured: with their replay's launch and node) */
    sl_eval_job_spec colo[1 + N_LP];
    op_level_jobs(colo, 5000000, 1300000);
    cfg = sl_eval_config_default("priority", false, 1, p100_bytes);
    cfg.no_gap_fill = true;
    cfg.graph_launches = true;
    cfg.graph_launch_ns = 5000;
    cfg.graph_node_ns = 1000;
    lat_log alone = {0}, per_op = {0}, seg = {0};
    cfg.on_done = log_done;
    cfg.arg = &alone;
    assert_sl_ok(sl_eval_run(&cfg, colo, 1, NULL, &sum));
    uint64_t solo = alone.lat[0];
    cfg.arg = &per_op;
    cfg.segment_ns = 1000; /* one op per step */
    cfg.lp_serial = true;
    assert_sl_ok(sl_eval_run(&cfg, colo, 1 + N_LP, NULL, &sum));
    uint64_t op_steps = sum.lp_steps;
    cfg.segment_ns = 650000;
    cfg.arg = &seg;
    assert_sl_ok(sl_eval_run(&cfg, colo, 1 + N_LP, NULL, &sum));
    assert_int_equal(seg.n, HP_REQS);
    assert_true(sum.lp_steps > 0);
    assert_true(sum.lp_steps < op_steps);
    assert_int_equal(sum.lp_in_flight_max, 1);
    for (size_t i = 0; i < seg.n; i++) {
        assert_true(seg.lat[i] >= solo);
        assert_true(seg.lat[i] <= solo + 650000 + 2 * (5000 + 1000));
    }
    /* the concurrent dispatch: one step per lp lane in flight */
    cfg.lp_serial = false;
    lat_log conc = {0};
    cfg.arg = &conc;
    assert_sl_ok(sl_eval_run(&cfg, colo, 1 + N_LP, NULL, &sum));
    assert_int_equal(conc.n, HP_REQS);
    assert_true(sum.lp_in_flight_max >= 2);
    /* salusd's default: the segments in flight run side by side, and an
     * hp request still waits for at most one segment's time */
    for (size_t i = 0; i < conc.n; i++) {
        assert_true(conc.lat[i] >= solo);
        assert_true(conc.lat[i] <= solo + 650000 + 2 * (5000 + 1000));
    }
}

/* A horizon stops the run: what completed by then is reported, the
 * device's busy time counts up to it. */
static void test_until(void **state)
{
    (void) state;
    sl_eval_job_spec job = {
        .id = 1, .iterations = 100, .iteration_ns = 1000000, .persistent_bytes = 1ull << 20};
    sl_eval_config cfg = sl_eval_config_default("fifo", false, 1, p100_bytes);
    cfg.client_gap_ns = 0;
    cfg.until_ns = 10500000;
    sl_eval_summary sum;
    sl_eval_job_result res;
    assert_sl_ok(sl_eval_run(&cfg, &job, 1, &res, &sum));
    assert_false(res.completed);
    assert_int_equal(res.iterations, 10);
    assert_int_equal(sum.completed, 0);
    assert_int_equal(sum.gpu_busy_ns, 10500000);
    assert_true(fabs(sum.gpu_occupied_ns - 10.5e6) < 1.0);
    cfg.until_ns = 0; /* to completion */
    assert_sl_ok(sl_eval_run(&cfg, &job, 1, &res, &sum));
    assert_true(res.completed);
    assert_int_equal(sum.gpu_busy_ns, 100000000);
}

SL_TEST_MAIN("eval simulator", setup, teardown, cmocka_unit_test(test_profiles),
             cmocka_unit_test(test_computed_profiles), cmocka_unit_test(test_nn_profiles),
             cmocka_unit_test(test_lognormal_lengths), cmocka_unit_test(test_deterministic),
             cmocka_unit_test(test_fifo_order), cmocka_unit_test(test_all_complete),
             cmocka_unit_test(test_refused_and_invalid), cmocka_unit_test(test_utilisation),
             cmocka_unit_test(test_launch_path), cmocka_unit_test(test_op_occupancy),
             cmocka_unit_test(test_until), cmocka_unit_test(test_graph_launches),
             cmocka_unit_test(test_inference), cmocka_unit_test(test_switch_cost),
             cmocka_unit_test(test_timelines), cmocka_unit_test(test_op_level_deterministic),
             cmocka_unit_test(test_hp_waits_one_lp_op), cmocka_unit_test(test_gap_fill_no_delay),
             cmocka_unit_test(test_op_level_latency), cmocka_unit_test(test_op_level_switch_cost))
