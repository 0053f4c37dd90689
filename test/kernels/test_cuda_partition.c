/* cuda compute partitions on a real GPU: green contexts with the device's
 * granularity, a matmul on two partitions' streams with exact results, a
 * resize and a return to the primary context. Where the driver predates
 * green-context streams it checks the fallback instead: no partitions,
 * said in the caps' note, and plain streams still work. Skips (77) without
 * a device. */
#include "kt.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

enum { M = 128 };

static void count_cb(void *arg, int status)
{
    atomic_fetch_add((atomic_int *) arg, status == SL_OK ? 1 : 1000);
}

/* A matmul of ones on s: every result is M; a host callback after it runs
 * once, with success (callbacks wait on events recorded on s, which may
 * belong to a green context). */
static void matmul_on(kt_env *e, sl_stream *s)
{
    const sl_device_ops *ops = e->dev->ops;
    static float host[M * M];
    float *y = kt_matmul_ones(e, s, M, host);
    memset(host, 0, sizeof host);
    assert_sl_ok(ops->memcpy_d2h(e->dev, s, host, y, sizeof host));
    atomic_int calls = 0;
    assert_sl_ok(ops->host_callback(e->dev, s, count_cb, &calls));
    assert_sl_ok(ops->synchronize(e->dev, s));
    assert_int_equal(atomic_load(&calls), 1);
    for (int i = 0; i < M * M; i++)
        assert_true(host[i] == (float) M);
    e->used = 0;
}

static void test_green(void **state)
{
    (void) state;
    kt_env e;
    assert_sl_ok(kt_env_open(&e, "cuda"));
    const sl_device_ops *ops = e.dev->ops;
    sl_partition_caps caps;
    int rc = ops->partition_caps(e.dev, &caps);
    printf("partitions: %s\n", caps.note);
    sl_partition *a, *b;
    if (rc == SL_EUNSUPPORTED) {
        assert_true(strstr(caps.note, "priority streams") != NULL);
        assert_sl_err(ops->partition_create(e.dev, 8, &a), SL_EUNSUPPORTED);
        matmul_on(&e, e.stream);
        kt_env_close(&e);
        return;
    }
    assert_sl_ok(rc);
    assert_string_equal(caps.unit, "SM");
    assert_true(caps.min_units >= 1 && caps.align >= 1 && caps.units >= 2 * caps.min_units);
    /* below the minimum rounds up to it */
    assert_sl_ok(ops->partition_create(e.dev, 1, &a));
    assert_true(ops->partition_units(e.dev, a) >= caps.min_units);
    assert_sl_ok(ops->partition_create(e.dev, caps.min_units, &b));
    assert_sl_err(ops->partition_create(e.dev, caps.units, &a), SL_EEXHAUSTED);
    sl_stream *other;
    assert_sl_ok(ops->stream_create(e.dev, 1, &other));
    assert_sl_ok(ops->stream_bind(e.dev, e.stream, a));
    assert_sl_ok(ops->stream_bind(e.dev, other, b));
    matmul_on(&e, e.stream);
    matmul_on(&e, other);
    /* a grows by one alignment step; b's context is re-split after it */
    unsigned grown = ops->partition_units(e.dev, a) + caps.align;
    if (grown + ops->partition_units(e.dev, b) <= caps.units) {
        assert_sl_ok(ops->partition_resize(e.dev, a, grown));
        assert_true(ops->partition_units(e.dev, a) >= grown);
        matmul_on(&e, e.stream);
        matmul_on(&e, other);
    }
    assert_sl_ok(ops->stream_bind(e.dev, other, NULL));
    matmul_on(&e, other);
    ops->partition_destroy(e.dev, b);
    matmul_on(&e, e.stream);
    assert_sl_ok(ops->stream_bind(e.dev, e.stream, NULL));
    ops->partition_destroy(e.dev, a);
    ops->stream_destroy(e.dev, other);
    kt_env_close(&e);
}

int main(void)
{
    sl_device *dev;
    int rc = kt_cuda_open(&dev);
    if (rc != 0)
        return rc;
    sl_dev_close(dev);
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_green)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
