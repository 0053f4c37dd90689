#include "kt.h"

#include "sl_alloc.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define ARENA_BYTES (64u << 20)

void kt_rand(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = lo + (hi - lo) * (float) ((s >> 40) * (1.0 / (1u << 24)));
    }
}

int kt_env_open(kt_env *e, const char *spec)
{
    memset(e, 0, sizeof *e);
    int rc = sl_dev_open(spec, &e->dev);
    if (rc != SL_OK)
        return rc;
    void *arena;
    assert_sl_ok(e->dev->ops->mem_alloc(e->dev, ARENA_BYTES, &arena));
    e->arena = arena;
    e->arena_bytes = ARENA_BYTES;
    assert_sl_ok(e->dev->ops->stream_create(e->dev, 0, &e->stream));
    return SL_OK;
}

void kt_env_close(kt_env *e)
{
    if (!e->dev)
        return;
    if (e->stream)
        e->dev->ops->stream_destroy(e->dev, e->stream);
    if (e->arena)
        e->dev->ops->mem_free(e->dev, e->arena);
    sl_dev_close(e->dev);
    memset(e, 0, sizeof *e);
}

int kt_group_open(void **state, const char *spec)
{
    kt_env *e = sl_calloc(1, sizeof *e);
    if (!e || kt_env_open(e, spec) != SL_OK) {
        sl_free(e);
        return -1;
    }
    *state = e;
    return 0;
}

int kt_group_close(void **state)
{
    kt_env_close(*state);
    sl_free(*state);
    return 0;
}

void *kt_dev_alloc(kt_env *e, size_t bytes)
{
    size_t at = (e->used + 255) & ~(size_t) 255;
    assert_true(bytes <= e->arena_bytes && at <= e->arena_bytes - bytes);
    e->used = at + bytes;
    return e->arena + at;
}

void kt_record_cb(void *arg, int status)
{
    kt_cb_record *r = arg;
    atomic_store(&r->status, status);
    atomic_fetch_add(&r->calls, 1);
}

void kt_call_prepare(kt_env *e, unsigned op, const sl_op_attrs *a, const sl_shape *shapes,
                     void *const *in, unsigned n_in, sl_op_call *call, sl_shape *out_shapes)
{
    const sl_op_def *def = sl_op_get(op);
    assert_non_null(def);
    sl_shape out[SL_OP_MAX_OUT];
    char err[256] = "";
    if (sl_op_infer(op, a, shapes, n_in, out, err, sizeof err) != SL_OK)
        fail_msg("sl_op_infer: %s", err);
    const sl_device_ops *ops = e->dev->ops;
    *call = (sl_op_call){.op = (uint16_t) op, .n_in = (uint8_t) n_in, .n_out = def->n_out};
    if (a)
        call->attrs = *a;
    for (unsigned i = 0; i < n_in; i++) {
        size_t bytes = sl_shape_bytes(&shapes[i]);
        call->in[i] = (sl_tensor_ref){kt_dev_alloc(e, bytes), shapes[i]};
        assert_sl_ok(ops->memcpy_h2d(e->dev, e->stream, call->in[i].data, in[i], bytes));
    }
    for (unsigned i = 0; i < def->n_out; i++) {
        call->out[i] = (sl_tensor_ref){kt_dev_alloc(e, sl_shape_bytes(&out[i])), out[i]};
        if (out_shapes)
            out_shapes[i] = out[i];
    }
}

void kt_launch_then_canary(kt_env *e, unsigned op, const sl_op_attrs *a, const sl_shape *shapes,
                           void *const *in, unsigned n_in, float *canary)
{
    const sl_device_ops *ops = e->dev->ops;
    sl_op_call call;
    kt_call_prepare(e, op, a, shapes, in, n_in, &call, NULL);
    float *dev_canary = kt_dev_alloc(e, sizeof *canary);
    assert_sl_ok(ops->memcpy_h2d(e->dev, e->stream, dev_canary, canary, sizeof *canary));
    assert_sl_ok(ops->launch(e->dev, e->stream, &call));
    sl_op_call fill = {.op = SL_OP_FILL, .n_in = 1, .n_out = 1, .attrs = {.f = {42}}};
    fill.in[0] = fill.out[0] = (sl_tensor_ref){dev_canary, KT_F32(1, 1)};
    assert_sl_ok(ops->launch(e->dev, e->stream, &fill));
    assert_sl_ok(ops->memcpy_d2h(e->dev, e->stream, canary, dev_canary, sizeof *canary));
}

float *kt_matmul_ones(kt_env *e, sl_stream *s, int m, float *host)
{
    const sl_device_ops *ops = e->dev->ops;
    size_t n = (size_t) m * (size_t) m;
    float *x = kt_dev_alloc(e, n * sizeof *x), *y = kt_dev_alloc(e, n * sizeof *y);
    for (size_t i = 0; i < n; i++)
        host[i] = 1.0f;
    assert_sl_ok(ops->memcpy_h2d(e->dev, s, x, host, n * sizeof *host));
    sl_op_call c = {.op = SL_OP_MATMUL, .n_in = 2, .n_out = 1};
    c.in[0] = (sl_tensor_ref){x, KT_F32(2, m, m)};
    c.in[1] = (sl_tensor_ref){x, KT_F32(2, m, m)};
    c.out[0] = (sl_tensor_ref){y, KT_F32(2, m, m)};
    assert_sl_ok(ops->launch(e->dev, s, &c));
    return y;
}

int kt_cuda_open(sl_device **dev)
{
    int rc = sl_dev_open("cuda", dev);
    if (rc == SL_ENODEV) {
        printf("no CUDA device: skipping\n");
        return 77;
    }
    if (rc != SL_OK) {
        fprintf(stderr, "sl_dev_open(\"cuda\"): %s\n", sl_strerror(rc));
        return 1;
    }
    return 0;
}

void kt_run_op(kt_env *e, unsigned op, const sl_op_attrs *a, const sl_shape *shapes,
               float *const *in, unsigned n_in, float *const *out)
{
    const sl_op_def *def = sl_op_get(op);
    assert_non_null(def);
    const sl_device_ops *ops = e->dev->ops;
    size_t mark = e->used;
    sl_shape out_shapes[SL_OP_MAX_OUT];
    sl_op_call call;
    kt_call_prepare(e, op, a, shapes, (void *const *) in, n_in, &call, out_shapes);
    assert_sl_ok(ops->launch(e->dev, e->stream, &call));
    for (unsigned i = 0; i < def->n_out; i++)
        assert_sl_ok(ops->memcpy_d2h(e->dev, e->stream, out[i], call.out[i].data,
                                     sl_shape_bytes(&out_shapes[i])));
    for (unsigned i = 0; i < n_in; i++)
        if (def->mutates & (1u << i))
            assert_sl_ok(ops->memcpy_d2h(e->dev, e->stream, in[i], call.in[i].data,
                                         sl_shape_bytes(&shapes[i])));
    kt_cb_record rec = {0};
    atomic_store(&rec.status, -1);
    assert_sl_ok(ops->host_callback(e->dev, e->stream, kt_record_cb, &rec));
    assert_sl_ok(ops->synchronize(e->dev, e->stream));
    assert_int_equal(atomic_load(&rec.calls), 1);
    assert_sl_ok(atomic_load(&rec.status));
    e->used = mark;
}
