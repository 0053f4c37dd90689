/* Every op on the cuda backend, against the same double-precision
 * references as the cpu tests (test_exec*.c), the cuda kernels' own code
 * paths (test_cuda_paths.c), bf16, f16 and TF32 (test_cuda_half.c), and
 * what only the cuda backend does: errors a
 * kernel finds on the device, reported at the next host callback or
 * synchronize, with the work after them skipped, and iteration graphs. Skips (exit 77) where
 * there is no GPU. */
#include "kt_nn.h"

#include "sl_alloc.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static int group_setup(void **state)
{
    return kt_group_open(state, "cuda");
}

/* Without a host callback, synchronize reports a device-raised error, once;
 * the fill after the failed op was skipped. */
static void test_bad_label_at_synchronize(void **state)
{
    kt_env *e = *state;
    enum { R = 4, C = 5 };
    float p[R * C], canary = 1;
    int32_t labels[R] = {0, 1, 77, 3};
    kt_rand(p, R * C, 500, 0, 1);
    size_t mark = e->used;
    kt_launch_then_canary(e, SL_OP_SOFTMAX_XENT_GRAD, NULL,
                          (sl_shape[]){KT_F32(2, R, C), KT_SHAPE(SL_I32, 1, R)},
                          (void *[]){p, labels}, 2, &canary);
    assert_sl_err(e->dev->ops->synchronize(e->dev, e->stream), SL_EINVAL);
    assert_true(canary == 1.0f);
    assert_sl_ok(e->dev->ops->synchronize(e->dev, e->stream));
    e->used = mark;
}

/* Adam before the first add_scalar (t = 0) divides by zero: a run-time
 * SL_EINVAL at the next host callback; the parameters are left alone. */
static void test_adam_step_zero(void **state)
{
    kt_env *e = *state;
    enum { N = 64 };
    float p[N], g[N], m[N] = {0}, v[N] = {0}, t = 0, canary = 1;
    kt_rand(p, N, 501, -1, 1);
    kt_rand(g, N, 502, -1, 1);
    sl_shape s = KT_F32(1, N);
    sl_op_attrs a = {.f = {1e-2f, 0.9f, 0.999f, 1e-8f}};
    size_t mark = e->used;
    kt_launch_then_canary(e, SL_OP_ADAM_UPDATE, &a, (sl_shape[]){s, s, s, s, KT_F32(1, 1)},
                          (void *[]){p, g, m, v, &t}, 5, &canary);
    kt_cb_record rec = {0};
    assert_sl_ok(e->dev->ops->host_callback(e->dev, e->stream, kt_record_cb, &rec));
    assert_sl_ok(e->dev->ops->synchronize(e->dev, e->stream));
    assert_int_equal(atomic_load(&rec.calls), 1);
    assert_sl_err(atomic_load(&rec.status), SL_EINVAL);
    assert_true(canary == 1.0f);
    e->used = mark;
}

/* Each callback reports the device errors of the work before it and after
 * the previous callback, however late its completion is seen: a good step
 * and a failing one are queued behind a long matmul, so both finish before
 * the first callback can run; the first reports success, the second the
 * failure, and the steps after them run again. */
static void test_error_goes_to_its_callback(void **state)
{
    kt_env *e = *state;
    const sl_device_ops *ops = e->dev->ops;
    enum { R = 4, C = 5, M = 1024 };
    float p[R * C], canary[3] = {1, 1, 1};
    int32_t good[R] = {0, 1, 2, 3}, bad[R] = {0, 1, 77, 3};
    kt_rand(p, R * C, 503, 0, 1);
    size_t mark = e->used;
    sl_op_call mm = {.op = SL_OP_MATMUL, .n_in = 2, .n_out = 1};
    float *a = kt_dev_alloc(e, sizeof(float) * M * M), *y = kt_dev_alloc(e, sizeof(float) * M * M);
    mm.in[0] = mm.in[1] = (sl_tensor_ref){a, KT_F32(2, M, M)};
    mm.out[0] = (sl_tensor_ref){y, KT_F32(2, M, M)};
    for (int i = 0; i < 8; i++)
        assert_sl_ok(ops->launch(e->dev, e->stream, &mm));
    kt_cb_record rec[3] = {0};
    sl_shape shapes[] = {KT_F32(2, R, C), KT_SHAPE(SL_I32, 1, R)};
    int32_t *labels[3] = {good, bad, good};
    for (int i = 0; i < 3; i++) {
        kt_launch_then_canary(e, SL_OP_SOFTMAX_XENT_GRAD, NULL, shapes, (void *[]){p, labels[i]}, 2,
                              &canary[i]);
        assert_sl_ok(ops->host_callback(e->dev, e->stream, kt_record_cb, &rec[i]));
    }
    assert_sl_ok(ops->synchronize(e->dev, e->stream));
    for (int i = 0; i < 3; i++)
        assert_int_equal(atomic_load(&rec[i].calls), 1);
    assert_sl_ok(atomic_load(&rec[0].status));
    assert_sl_err(atomic_load(&rec[1].status), SL_EINVAL);
    assert_sl_ok(atomic_load(&rec[2].status));
    assert_true(canary[0] == 42.0f && canary[1] == 1.0f && canary[2] == 42.0f);
    e->used = mark;
}

/* Calls the registry would never pass are refused before anything runs. */
static void test_refused(void **state)
{
    kt_env *e = *state;
    sl_op_call unknown = {.op = SL_OP_COUNT};
    assert_sl_err(e->dev->ops->launch(e->dev, e->stream, &unknown), SL_EUNSUPPORTED);
    sl_op_call wrong_arity = {.op = SL_OP_ADD, .n_in = 1, .n_out = 1};
    assert_sl_err(e->dev->ops->launch(e->dev, e->stream, &wrong_arity), SL_EINVAL);
    assert_sl_ok(e->dev->ops->synchronize(e->dev, e->stream));
}

/* Iteration graphs (device.h): a chain of 60 ops (cuBLAS matmuls, sigmoid,
 * add) recorded and replayed computes exactly what the same chain launched
 * op by op computes; recorded again over other buffers (a lane that moved)
 * it computes there; copies are refused while recording. */
enum { GM = 64, GOPS = 60 };

static sl_tensor_ref gref(float *p)
{
    return (sl_tensor_ref){p, KT_F32(2, GM, GM)};
}

/* The chain's calls over fresh buffers from the arena; returns the last
 * output. */
static float *graph_chain(kt_env *e, float *x, float *w, sl_op_call *calls)
{
    float *v = x;
    for (int k = 0; k < GOPS; k++) {
        float *y = kt_dev_alloc(e, sizeof(float) * GM * GM);
        sl_op_call c = {.n_out = 1};
        c.out[0] = gref(y);
        if (k % 3 == 0)
            c.op = SL_OP_MATMUL, c.n_in = 2, c.in[0] = gref(v), c.in[1] = gref(w);
        else if (k % 3 == 1)
            c.op = SL_OP_SIGMOID, c.n_in = 1, c.in[0] = gref(v);
        else
            c.op = SL_OP_ADD, c.n_in = 2, c.in[0] = gref(v), c.in[1] = gref(x);
        calls[k] = c;
        v = y;
    }
    return v;
}

static void graph_download(kt_env *e, const float *dev_y, float *host)
{
    const sl_device_ops *ops = e->dev->ops;
    assert_sl_ok(ops->memcpy_d2h(e->dev, e->stream, host, dev_y, sizeof(float) * GM * GM));
    assert_sl_ok(ops->synchronize(e->dev, e->stream));
}

static sl_dev_graph *graph_record(kt_env *e, const sl_op_call *calls)
{
    const sl_device_ops *ops = e->dev->ops;
    sl_dev_graph *g = NULL;
    size_t bytes = 0;
    char why[128] = "";
    assert_sl_ok(ops->graph_begin(e->dev, e->stream));
    float dummy = 0;
    assert_sl_err(ops->memcpy_h2d(e->dev, e->stream, calls[0].out[0].data, &dummy, sizeof dummy),
                  SL_EINVAL);
    for (int k = 0; k < GOPS; k++)
        assert_sl_ok(ops->launch(e->dev, e->stream, &calls[k]));
    int rc = ops->graph_end(e->dev, e->stream, &g, &bytes, why, sizeof why);
    if (rc != SL_OK)
        fprintf(stderr, "recording refused: %s\n", why);
    assert_sl_ok(rc);
    assert_non_null(g);
    assert_true(bytes > 0);
    return g;
}

static void test_graph_replay(void **state)
{
    kt_env *e = *state;
    const sl_device_ops *ops = e->dev->ops;
    size_t mark = e->used;
    static float hx[GM * GM], hw[GM * GM], want[GM * GM], got[GM * GM];
    kt_rand(hx, GM * GM, 700, -1, 1);
    kt_rand(hw, GM * GM, 701, -0.1f, 0.1f);
    float *x = kt_dev_alloc(e, sizeof hx), *w = kt_dev_alloc(e, sizeof hw);
    assert_sl_ok(ops->memcpy_h2d(e->dev, e->stream, x, hx, sizeof hx));
    assert_sl_ok(ops->memcpy_h2d(e->dev, e->stream, w, hw, sizeof hw));
    static sl_op_call calls[GOPS];
    float *y = graph_chain(e, x, w, calls);
    for (int k = 0; k < GOPS; k++)
        assert_sl_ok(ops->launch(e->dev, e->stream, &calls[k]));
    graph_download(e, y, want);

    for (int moved = 0; moved < 2; moved++) {
        y = graph_chain(e, x, w, calls); /* other buffers each time */
        sl_dev_graph *g = graph_record(e, calls);
        for (int replay = 0; replay < 3; replay++) {
            memset(got, 0, sizeof got);
            assert_sl_ok(ops->graph_launch(e->dev, e->stream, g));
            kt_cb_record rec = {0};
            assert_sl_ok(ops->host_callback(e->dev, e->stream, kt_record_cb, &rec));
            graph_download(e, y, got);
            assert_int_equal(atomic_load(&rec.calls), 1);
            assert_sl_ok(atomic_load(&rec.status));
            assert_memory_equal(got, want, sizeof got);
        }
        ops->graph_destroy(e->dev, g);
    }
    e->used = mark;
}

static int run_device_error_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_label_at_synchronize),
        cmocka_unit_test(test_adam_step_zero),
        cmocka_unit_test(test_error_goes_to_its_callback),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_graph_replay),
    };
    return _cmocka_run_group_tests("cuda device errors", tests, sizeof tests / sizeof tests[0],
                                   group_setup, kt_group_close);
}

int main(void)
{
    sl_device *dev;
    int rc = kt_cuda_open(&dev);
    if (rc != 0)
        return rc;
    printf("%s, %llu bytes\n", dev->description, (unsigned long long) dev->total_bytes);
    sl_dev_close(dev);
    int failed = kt_run_exec_tests("cuda");
    failed += kt_run_nn_tests("cuda");
    failed += kt_run_cnn_tests("cuda");
    failed += kt_run_cuda_paths_tests();
    failed += kt_run_cuda_half_tests();
    failed += kt_run_axes_tests("cuda");
    failed += kt_run_train_tests("cuda");
    failed += run_device_error_tests();
    return failed ? 1 : 0;
}
