/* Compute partitions: the sim model against hand-computed figures, and the
 * cpu backend's core sets (granularity, accounting, streams moved onto
 * their cores and sized to them). */
#include "kt.h"

#include <math.h>
#include "sim/sim.h"
#include "sl_time.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

/* ---- sim: wave quantisation, bandwidth sharing ---- */

/* A kernel filling a quarter of an H100's slots (33 SM-waves): 66 SMs run
 * it in one wave, as 132 do; 16 SMs need ceil(33/16) = 3 waves. */
static void test_sim_small_kernel(void **state)
{
    (void) state;
    double o;
    uint64_t b;
    assert_int_equal(sl_sim_part_work_ns(132, 1000, 100, 0.25, 132, 1.0, &o, &b), 1000);
    assert_true(o > 0.2499 && o < 0.2501);
    assert_int_equal(sl_sim_part_work_ns(132, 1000, 100, 0.25, 66, 1.0, &o, &b), 1000);
    assert_true(o > 0.4999 && o < 0.5001);
    assert_int_equal(b, 1000);
    assert_int_equal(sl_sim_part_work_ns(132, 1000, 100, 0.25, 33, 1.0, &o, NULL), 1000);
    assert_true(o > 0.9999);
    assert_int_equal(sl_sim_part_work_ns(132, 1000, 100, 0.25, 16, 1.0, &o, &b), 3000);
    assert_int_equal(b, 1000);
}

/* One full wave on 132 SMs: half the SMs take two waves; 100 SMs also two
 * (the tail wave); 2.5 waves (330 SM-waves, 3 whole waves) on 66 SMs take
 * 5 waves: 1000 x 5 / 3 = 1666.7, rounded up. */
static void test_sim_big_kernel(void **state)
{
    (void) state;
    uint64_t b;
    assert_int_equal(sl_sim_part_work_ns(132, 1000, 0, 1.0, 132, 1.0, NULL, NULL), 1000);
    assert_int_equal(sl_sim_part_work_ns(132, 1000, 0, 1.0, 66, 1.0, NULL, NULL), 2000);
    assert_int_equal(sl_sim_part_work_ns(132, 1000, 0, 1.0, 100, 1.0, NULL, NULL), 2000);
    assert_int_equal(sl_sim_part_work_ns(132, 1000, 0, 2.5, 66, 1.0, NULL, &b), 1667);
    assert_int_equal(b, 333);
    /* out of range: the whole device */
    assert_int_equal(sl_sim_part_work_ns(132, 1000, 0, 1.0, 0, 1.0, NULL, NULL), 1000);
    assert_int_equal(sl_sim_part_work_ns(132, 1000, 0, 1.0, 500, 1.0, NULL, NULL), 1000);
}

/* Memory time does not depend on the SMs but on the bandwidth left. */
static void test_sim_bandwidth(void **state)
{
    (void) state;
    assert_int_equal(sl_sim_part_work_ns(132, 100, 1000, 0.25, 16, 1.0, NULL, NULL), 1000);
    assert_int_equal(sl_sim_part_work_ns(132, 100, 1000, 0.25, 16, 0.5, NULL, NULL), 2000);
    /* compute-bound on a small partition stays compute-bound */
    assert_int_equal(sl_sim_part_work_ns(132, 1000, 900, 1.0, 66, 0.5, NULL, NULL), 2000);
    assert_true(sl_sim_part_bw_share(0.0, 3) == 1.0);
    double s = sl_sim_part_bw_share(0.3, 1);
    assert_true(s > 0.6999 && s < 0.7001);
    s = sl_sim_part_bw_share(0.9, 1);
    assert_true(s == 0.5); /* the even split */
    s = sl_sim_part_bw_share(0.9, 3);
    assert_true(s == 0.25);
}

/* sl_sim_part_timing on the whole device is the op's own timing, and a
 * real matmul's compute follows its waves. */
static void test_sim_op_timing(void **state)
{
    (void) state;
    const sl_sim_profile *p;
    assert_sl_ok(sl_sim_profile_find("h100", &p));
    sl_shape in[2] = {KT_F32(2, 4096, 4096), KT_F32(2, 4096, 4096)};
    sl_shape out[1] = {KT_F32(2, 4096, 4096)};
    sl_sim_timing whole, same, half;
    assert_sl_ok(sl_sim_op_timing(p, SL_OP_MATMUL, NULL, in, out, &whole));
    assert_true(whole.waves >= 1.0);
    assert_sl_ok(sl_sim_part_timing(p, &whole, p->sm_count, 1.0, &same));
    assert_int_equal(same.work_ns, whole.work_ns);
    assert_int_equal(same.launch_ns, whole.launch_ns);
    assert_sl_ok(sl_sim_part_timing(p, &whole, p->sm_count / 2, 1.0, &half));
    double W = whole.waves * p->sm_count;
    double q_whole = ceil(W / p->sm_count - 1e-9), q_half = ceil(W / (p->sm_count / 2) - 1e-9);
    uint64_t compute = sl_sim_work_ns(p, SL_SIM_FP32, whole.flops, 0, NULL);
    assert_int_equal(half.work_ns, (uint64_t) ceil((double) compute * q_half / q_whole - 1e-9));
    assert_true(half.work_ns > whole.work_ns);
    /* a batch-1 row: far under one wave, no slower on 16 SMs */
    sl_shape in1[2] = {KT_F32(2, 1, 1024), KT_F32(2, 1024, 1024)};
    sl_shape out1[1] = {KT_F32(2, 1, 1024)};
    sl_sim_timing small, small16;
    assert_sl_ok(sl_sim_op_timing(p, SL_OP_MATMUL, NULL, in1, out1, &small));
    assert_true(small.occupancy * p->sm_count <= 16.0);
    assert_sl_ok(sl_sim_part_timing(p, &small, 16, 1.0, &small16));
    assert_int_equal(small16.work_ns, small.work_ns);
    assert_sl_err(sl_sim_part_timing(NULL, &small, 16, 1.0, &small16), SL_EINVAL);
}

/* The real-time sim device: H100 granularity, and an op on a partition
 * takes the modelled time for its SMs (sl_sim_part_timing). */
static void test_sim_device(void **state)
{
    (void) state;
    kt_env e;
    assert_sl_ok(kt_env_open(&e, "sim:h100"));
    const sl_device_ops *ops = e.dev->ops;
    sl_partition_caps caps;
    assert_sl_ok(ops->partition_caps(e.dev, &caps));
    assert_int_equal(caps.units, 132);
    assert_int_equal(caps.min_units, 8);
    assert_int_equal(caps.align, 8);
    sl_partition *a, *b;
    assert_sl_ok(ops->partition_create(e.dev, 1, &a));
    assert_int_equal(ops->partition_units(e.dev, a), 8);
    assert_sl_ok(ops->partition_resize(e.dev, a, 60)); /* rounds to 64 */
    assert_int_equal(ops->partition_units(e.dev, a), 64);
    assert_sl_err(ops->partition_create(e.dev, 100, &b), SL_EEXHAUSTED);
    assert_sl_ok(ops->partition_create(e.dev, 64, &b));
    ops->partition_destroy(e.dev, b);

    enum { N = 2048 };
    sl_shape sh[3] = {KT_F32(2, N, N), KT_F32(2, N, N), KT_F32(2, N, N)};
    void *x = kt_dev_alloc(&e, 4), *y = kt_dev_alloc(&e, 4);
    sl_op_call c = {.op = SL_OP_MATMUL, .n_in = 2, .n_out = 1};
    c.in[0] = (sl_tensor_ref){x, sh[0]};
    c.in[1] = (sl_tensor_ref){x, sh[1]};
    c.out[0] = (sl_tensor_ref){y, sh[2]};
    sl_sim_timing whole, half;
    assert_sl_ok(
        sl_sim_op_timing(sl_sim_device_profile(e.dev), SL_OP_MATMUL, NULL, sh, sh + 2, &whole));
    assert_sl_ok(sl_sim_part_timing(sl_sim_device_profile(e.dev), &whole, 64, 1.0, &half));
    assert_true(half.work_ns > whole.work_ns);
    assert_sl_ok(ops->stream_bind(e.dev, e.stream, a));
    uint64_t t0 = sl_now_ns();
    assert_sl_ok(ops->launch(e.dev, e.stream, &c));
    assert_sl_ok(ops->synchronize(e.dev, e.stream));
    uint64_t on_part = sl_sim_stream_modeled_ns(e.stream) - t0;
    /* at least its time on 64 SMs, more than the whole device would take
     * (no upper bound: the submission itself may be late, under valgrind) */
    assert_true(half.work_ns > whole.work_ns + whole.launch_ns);
    assert_true(on_part >= half.work_ns + half.launch_ns);
    assert_sl_ok(ops->stream_bind(e.dev, e.stream, NULL));
    ops->partition_destroy(e.dev, a);
    kt_env_close(&e);
}

/* ---- cpu: core sets ---- */

static int usable_cores(void)
{
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    return CPU_COUNT(&set);
}

static void test_cpu_accounting(void **state)
{
    (void) state;
    sl_device *dev;
    assert_sl_ok(sl_dev_open("cpu", &dev));
    const sl_device_ops *ops = dev->ops;
    sl_partition_caps caps;
    assert_sl_ok(ops->partition_caps(dev, &caps));
    int n = usable_cores();
    assert_int_equal(caps.units, (unsigned) n);
    assert_int_equal(caps.min_units, 1);
    assert_int_equal(caps.align, 1);
    assert_string_equal(caps.unit, "core");

    sl_partition *a, *b;
    assert_sl_err(ops->partition_create(dev, 0, &a), SL_EINVAL);
    assert_sl_err(ops->partition_create(dev, (unsigned) n + 1, &a), SL_EINVAL);
    assert_sl_ok(ops->partition_create(dev, (unsigned) n, &a));
    assert_int_equal(ops->partition_units(dev, a), (unsigned) n);
    assert_sl_err(ops->partition_create(dev, 1, &b), SL_EEXHAUSTED);
    if (n >= 2) {
        assert_sl_ok(ops->partition_resize(dev, a, 1));
        assert_sl_ok(ops->partition_create(dev, (unsigned) n - 1, &b));
        assert_sl_err(ops->partition_resize(dev, a, 2), SL_EEXHAUSTED);
        assert_int_equal(ops->partition_units(dev, a), 1);
        ops->partition_destroy(dev, b);
        assert_sl_ok(ops->partition_resize(dev, a, (unsigned) n));
    }
    ops->partition_destroy(dev, a);
    ops->partition_destroy(dev, NULL);
    sl_dev_close(dev);
}

struct where {
    cpu_set_t cores;
    int status;
};

/* A host callback runs on the stream's worker: where the worker is. */
static void where_cb(void *arg, int status)
{
    struct where *w = arg;
    w->status = status;
    if (sched_getaffinity(0, sizeof w->cores, &w->cores) != 0)
        CPU_ZERO(&w->cores);
}

/* Runs a matmul of ones (k = 256) on s and checks every result is 256.
 * Returns where the worker ran it. */
static struct where matmul_on(kt_env *e, sl_stream *s)
{
    const sl_device_ops *ops = e->dev->ops;
    enum { M = 256 };
    static float host[M * M];
    float *y = kt_matmul_ones(e, s, M, host);
    struct where w = {.status = -1};
    assert_sl_ok(ops->host_callback(e->dev, s, where_cb, &w));
    assert_sl_ok(ops->memcpy_d2h(e->dev, s, host, y, sizeof host));
    assert_sl_ok(ops->synchronize(e->dev, s));
    assert_sl_ok(w.status);
    for (int i = 0; i < M * M; i++)
        assert_true(host[i] == (float) M);
    e->used = 0;
    return w;
}

/* Two partitions of one core each: each stream's worker runs on its own
 * core; unbinding gives the stream its cores back; resizing moves it. */
static void test_cpu_streams(void **state)
{
    (void) state;
    if (usable_cores() < 2) {
        fprintf(stderr, "SKIP part of test_cpu_streams: needs 2 cores, this process has 1\n");
        return;
    }
    kt_env e;
    assert_sl_ok(kt_env_open(&e, "cpu"));
    const sl_device_ops *ops = e.dev->ops;
    sl_stream *other;
    assert_sl_ok(ops->stream_create(e.dev, 0, &other));
    sl_partition *a, *b;
    assert_sl_ok(ops->partition_create(e.dev, 1, &a));
    assert_sl_ok(ops->partition_create(e.dev, 1, &b));
    assert_sl_ok(ops->stream_bind(e.dev, e.stream, a));
    assert_sl_ok(ops->stream_bind(e.dev, other, b));

    struct where wa = matmul_on(&e, e.stream), wb = matmul_on(&e, other);
    assert_int_equal(CPU_COUNT(&wa.cores), 1);
    assert_int_equal(CPU_COUNT(&wb.cores), 1);
    assert_false(CPU_EQUAL(&wa.cores, &wb.cores));

    /* b gives its core up, a grows to both */
    assert_sl_ok(ops->stream_bind(e.dev, other, NULL));
    ops->partition_destroy(e.dev, b);
    assert_sl_ok(ops->partition_resize(e.dev, a, 2));
    wa = matmul_on(&e, e.stream);
    assert_int_equal(CPU_COUNT(&wa.cores), 2);
    wb = matmul_on(&e, other);
    assert_true(CPU_COUNT(&wb.cores) >= 2); /* back on every core */

    assert_sl_ok(ops->stream_bind(e.dev, e.stream, NULL));
    ops->partition_destroy(e.dev, a);
    ops->stream_destroy(e.dev, other);
    kt_env_close(&e);
}

/* A stream's ops may run on the thread that releases it (stream_release
 * with run_here), but not after it was unbound from a partition and before
 * its own worker went home: the op would move the releasing thread to the
 * stream's home cores. The releaser, pinned to one core, stays there. */
static void test_cpu_unbound_runs_home(void **state)
{
    (void) state;
    if (usable_cores() < 2) {
        fprintf(stderr, "SKIP test_cpu_unbound_runs_home: needs 2 cores, this process has 1\n");
        return;
    }
    kt_env e;
    assert_sl_ok(kt_env_open(&e, "cpu"));
    const sl_device_ops *ops = e.dev->ops;
    sl_partition *a;
    assert_sl_ok(ops->partition_create(e.dev, 1, &a));
    assert_sl_ok(ops->stream_bind(e.dev, e.stream, a));
    struct where bound = matmul_on(&e, e.stream);
    assert_int_equal(CPU_COUNT(&bound.cores), 1);
    assert_sl_ok(ops->stream_bind(e.dev, e.stream, NULL));
    ops->partition_destroy(e.dev, a);

    cpu_set_t all, one, after;
    assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (CPU_ISSET(c, &all)) {
            CPU_SET(c, &one);
            break;
        }
    }
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    enum { M = 64 };
    float *x = kt_dev_alloc(&e, M * M * 4), *y = kt_dev_alloc(&e, M * M * 4);
    sl_op_call c = {.op = SL_OP_MATMUL, .n_in = 2, .n_out = 1};
    c.in[0] = c.in[1] = (sl_tensor_ref){x, KT_F32(2, M, M)};
    c.out[0] = (sl_tensor_ref){y, KT_F32(2, M, M)};
    ops->stream_hold(e.dev, e.stream);
    assert_sl_ok(ops->launch(e.dev, e.stream, &c));
    struct where w = {.status = -1};
    assert_sl_ok(ops->host_callback(e.dev, e.stream, where_cb, &w));
    ops->stream_release(e.dev, e.stream, true);
    assert_sl_ok(ops->synchronize(e.dev, e.stream));
    assert_sl_ok(w.status);
    assert_int_equal(sched_getaffinity(0, sizeof after, &after), 0);
    assert_true(CPU_EQUAL(&after, &one));
    assert_true(CPU_COUNT(&w.cores) >= 2); /* the stream itself is back on every core */
    assert_int_equal(sched_setaffinity(0, sizeof all, &all), 0);
    e.used = 0;
    kt_env_close(&e);
}

/* Loans: a normal-priority stream bound to one partition also runs on the
 * cores of a lending one; that partition's own streams (below normal or
 * not) stay on its cores; the loan follows resizes and ends with lend
 * false or the lender's destruction. */
static void test_cpu_lend(void **state)
{
    (void) state;
    if (usable_cores() < 2) {
        fprintf(stderr, "SKIP test_cpu_lend: needs 2 cores, this process has 1\n");
        return;
    }
    int n = usable_cores();
    kt_env e;
    assert_sl_ok(kt_env_open(&e, "cpu"));
    const sl_device_ops *ops = e.dev->ops;
    assert_non_null(ops->partition_lend);
    assert_sl_err(ops->partition_lend(e.dev, NULL, true), SL_EINVAL);
    sl_stream *low, *peer;
    assert_sl_ok(ops->stream_create(e.dev, -1, &low));
    assert_sl_ok(ops->stream_create(e.dev, 0, &peer));
    sl_partition *online, *offline;
    assert_sl_ok(ops->partition_create(e.dev, 1, &online));
    assert_sl_ok(ops->partition_create(e.dev, (unsigned) n - 1, &offline));
    assert_sl_ok(ops->stream_bind(e.dev, e.stream, online));
    assert_sl_ok(ops->stream_bind(e.dev, low, offline));
    assert_sl_ok(ops->stream_bind(e.dev, peer, offline));

    /* strict: each on its own cores */
    struct where w = matmul_on(&e, e.stream);
    assert_int_equal(CPU_COUNT(&w.cores), 1);
    cpu_set_t own = w.cores;

    /* lent: the online stream reaches every core (and its matmul, above
     * the parallel threshold, fans out over them and stays right); the
     * lender's streams keep to theirs */
    assert_sl_ok(ops->partition_lend(e.dev, offline, true));
    assert_sl_ok(ops->partition_lend(e.dev, offline, true)); /* idempotent */
    w = matmul_on(&e, e.stream);
    assert_int_equal(CPU_COUNT(&w.cores), n);
    struct where wl = matmul_on(&e, low), wp = matmul_on(&e, peer);
    assert_int_equal(CPU_COUNT(&wl.cores), n - 1);
    assert_int_equal(CPU_COUNT(&wp.cores), n - 1);
    cpu_set_t both;
    CPU_AND(&both, &wl.cores, &own);
    assert_int_equal(CPU_COUNT(&both), 0);

    /* a below-normal stream on the online partition borrows nothing */
    assert_sl_ok(ops->stream_bind(e.dev, low, online));
    wl = matmul_on(&e, low);
    assert_true(CPU_EQUAL(&wl.cores, &own));
    assert_sl_ok(ops->stream_bind(e.dev, low, offline));

    if (n >= 3) { /* the loan follows the lender's size */
        assert_sl_ok(ops->partition_resize(e.dev, offline, 1));
        w = matmul_on(&e, e.stream);
        assert_int_equal(CPU_COUNT(&w.cores), 2);
        assert_sl_ok(ops->partition_resize(e.dev, offline, (unsigned) n - 1));
    }

    /* the loan ends */
    assert_sl_ok(ops->partition_lend(e.dev, offline, false));
    w = matmul_on(&e, e.stream);
    assert_true(CPU_EQUAL(&w.cores, &own));
    assert_sl_ok(ops->partition_lend(e.dev, offline, true));
    w = matmul_on(&e, e.stream);
    assert_int_equal(CPU_COUNT(&w.cores), n);
    assert_sl_ok(ops->stream_bind(e.dev, low, NULL));
    assert_sl_ok(ops->stream_bind(e.dev, peer, NULL));
    ops->partition_destroy(e.dev, offline);
    w = matmul_on(&e, e.stream);
    assert_true(CPU_EQUAL(&w.cores, &own));

    assert_sl_ok(ops->stream_bind(e.dev, e.stream, NULL));
    ops->partition_destroy(e.dev, online);
    ops->stream_destroy(e.dev, low);
    ops->stream_destroy(e.dev, peer);
    kt_env_close(&e);
}

/* The sim and cuda partitions stay strict: neither offers loans. */
static void test_sim_strict(void **state)
{
    (void) state;
    sl_device *dev;
    assert_sl_ok(sl_dev_open("sim:h100", &dev));
    assert_null(dev->ops->partition_lend);
    sl_dev_close(dev);
}

SL_TEST_MAIN("partition", NULL, NULL, cmocka_unit_test(test_sim_small_kernel),
             cmocka_unit_test(test_sim_big_kernel), cmocka_unit_test(test_sim_bandwidth),
             cmocka_unit_test(test_sim_op_timing), cmocka_unit_test(test_sim_device),
             cmocka_unit_test(test_cpu_accounting), cmocka_unit_test(test_cpu_streams),
             cmocka_unit_test(test_cpu_unbound_runs_home), cmocka_unit_test(test_cpu_lend),
             cmocka_unit_test(test_sim_strict))
