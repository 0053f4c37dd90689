/* bf16 and f16 where users and operators see them, through a real salusd:
 * the C API's conversions and half-precision tensors (bit for bit, two
 * bytes an element), checkpoints that keep each tensor's dtype, status
 * (persistent bytes by dtype, the session's math choice, as the Status
 * reply, its text and salusctl sessions) and the trace's op events (the
 * dtype the op ran in, the math of an f32 matmul). */
#include "checkpoint.h"
#include "harness.h"
#include "status_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sl_test_server server;

static void conversions_round_to_nearest_even(void **state)
{
    (void) state;
    assert_int_equal(salus_bf16_from_f32(1.0f), 0x3f80);
    assert_int_equal(salus_f16_from_f32(1.0f), 0x3c00);
    assert_true(salus_f32_from_bf16(0xc040) == -3.0f);
    assert_true(salus_f32_from_f16(0x3555) == 0x1.554p-2f);
    /* halfway between two bf16 values: to the even one (mantissa ends 0) */
    assert_int_equal(salus_bf16_from_f32(0x1.01p0f), 0x3f80);
    assert_int_equal(salus_bf16_from_f32(0x1.03p0f), 0x3f82);
    /* f16: 65504 is the largest; from 65520 on, infinity */
    assert_int_equal(salus_f16_from_f32(65504.0f), 0x7bff);
    assert_int_equal(salus_f16_from_f32(65520.0f), 0x7c00);
    assert_int_equal(salus_f16_from_f32(0x1p-24f), 0x0001); /* smallest subnormal */
    float src[5] = {0.1f, -2.5f, 3e38f, 1e-9f, 7.0f}, back[5];
    uint16_t h[5];
    for (int dt = SALUS_BF16; dt <= SALUS_F16; dt++) {
        assert_sl_ok(salus_half_from_f32(dt, src, h, 5));
        assert_sl_ok(salus_half_to_f32(dt, h, back, 5));
        for (int i = 0; i < 5; i++) {
            uint16_t one =
                dt == SALUS_BF16 ? salus_bf16_from_f32(src[i]) : salus_f16_from_f32(src[i]);
            assert_int_equal(h[i], one);
            assert_true(back[i] ==
                        (dt == SALUS_BF16 ? salus_f32_from_bf16(one) : salus_f32_from_f16(one)));
        }
    }
    assert_sl_err(salus_half_from_f32(SALUS_F32, src, h, 5), SALUS_EINVAL);
    assert_sl_err(salus_half_to_f32(SALUS_I32, h, back, 5), SALUS_EINVAL);
}

/* n values as dtype's elements (f32 or a half type's bit patterns). */
static void *values(int dtype, size_t n, float scale)
{
    float *f = malloc(n * sizeof *f);
    assert_non_null(f);
    for (size_t i = 0; i < n; i++)
        f[i] = scale * ((float) (i % 13) - 6.0f) / 3.0f;
    if (dtype == SALUS_F32)
        return f;
    uint16_t *h = malloc(n * sizeof *h);
    assert_non_null(h);
    assert_sl_ok(salus_half_from_f32(dtype, f, h, n));
    free(f);
    return h;
}

static void half_tensors_move_bit_for_bit(void **state)
{
    (void) state;
    salus_client *c;
    salus_session *s = sl_test_session(&server, &c);
    enum { N = 3000 };
    for (int dt = SALUS_BF16; dt <= SALUS_F16; dt++) {
        uint16_t *a = values(dt, N, 1.0f), *b = values(dt, N, -0.5f), back[N];
        uint64_t t;
        assert_sl_ok(salus_tensor_create(s, dt, 2, (int64_t[]){30, 100}, a, &t));
        assert_sl_ok(salus_tensor_read(s, t, back, sizeof back));
        assert_memory_equal(a, back, sizeof back);
        assert_sl_ok(salus_tensor_write(s, t, b, sizeof back));
        assert_sl_ok(salus_tensor_read(s, t, back, sizeof back));
        assert_memory_equal(b, back, sizeof back);
        /* two bytes an element: the f32 size is refused */
        assert_sl_err(salus_tensor_read(s, t, back, 2 * sizeof back), SALUS_EINVAL);
        free(a);
        free(b);
    }
    /* graph values of a half type have half the bytes */
    salus_graph *g = salus_graph_new();
    salus_value x = salus_graph_input(g, SALUS_BF16, 2, (int64_t[]){4, 8});
    int dtype, ndim;
    int64_t dims[SALUS_MAX_DIMS];
    assert_sl_ok(salus_graph_shape(g, x, &dtype, &ndim, dims));
    assert_int_equal(dtype, SALUS_BF16);
    assert_int_equal(salus_graph_bytes(g, x), 64);
    salus_graph_free(g);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
}

static void checkpoints_keep_dtypes(void **state)
{
    (void) state;
    salus_client *c;
    salus_session *s = sl_test_session(&server, &c);
    enum { N = 240 };
    sl_named t[3] = {{.name = "w32", .kind = SALUS_TENSOR_PARAM},
                     {.name = "wbf", .kind = SALUS_TENSOR_PARAM},
                     {.name = "m16", .kind = SALUS_TENSOR_OPTIMIZER}};
    const int dts[3] = {SALUS_F32, SALUS_BF16, SALUS_F16};
    void *data[3];
    for (int i = 0; i < 3; i++) {
        t[i].shape = (sl_shape){.dtype = (uint8_t) dts[i], .ndim = 2, .dims = {12, 20}};
        data[i] = values(dts[i], N, 1.0f + (float) i);
        assert_sl_ok(salus_tensor_create(s, dts[i], 2, t[i].shape.dims, data[i], &t[i].tensor));
    }
    char path[] = "/tmp/salus-ckpt-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[256] = "";
    /* only f32: the first format, which older readers take */
    assert_sl_ok(sl_ckpt_save(s, t, 1, path, err, sizeof err));
    char magic[9] = "";
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(magic, 1, 8, f), 8);
    fclose(f);
    assert_string_equal(magic, "SALUSCK1");
    assert_sl_ok(sl_ckpt_load(s, t, 1, path, err, sizeof err));

    assert_sl_ok(sl_ckpt_save(s, t, 3, path, err, sizeof err));
    f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(magic, 1, 8, f), 8);
    fclose(f);
    assert_string_equal(magic, "SALUSCK2");
    /* overwrite, load, and every tensor is back bit for bit */
    for (int i = 0; i < 3; i++) {
        void *other = values(dts[i], N, -7.0f);
        assert_sl_ok(salus_tensor_write(s, t[i].tensor, other, sl_shape_bytes(&t[i].shape)));
        free(other);
    }
    assert_sl_ok(sl_ckpt_load(s, t, 3, path, err, sizeof err));
    for (int i = 0; i < 3; i++) {
        size_t bytes = sl_shape_bytes(&t[i].shape);
        void *back = malloc(bytes);
        assert_non_null(back);
        assert_sl_ok(salus_tensor_read(s, t[i].tensor, back, bytes));
        assert_memory_equal(back, data[i], bytes);
        free(back);
        free(data[i]);
    }
    /* a model whose tensor has another dtype is refused, naming both */
    sl_named as_f32 = t[1];
    as_f32.shape.dtype = SL_F32;
    uint64_t other;
    assert_sl_ok(salus_tensor_create(s, SALUS_F32, 2, as_f32.shape.dims, NULL, &other));
    as_f32.tensor = other;
    sl_named mixed[3] = {t[0], as_f32, t[2]};
    assert_sl_err(sl_ckpt_load(s, mixed, 3, path, err, sizeof err), SALUS_EINVAL);
    assert_non_null(strstr(err, "wbf is bf16[12,20] in the file, f32[12,20] in the model"));
    unlink(path);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
}

static const Salus__SessionStatus *find_session(const Salus__Reply *rep, uint64_t id)
{
    for (size_t i = 0; i < rep->status->n_sessions; i++)
        if (rep->status->sessions[i]->id == id)
            return rep->status->sessions[i];
    fail_msg("session %llu is not in status", (unsigned long long) id);
    return NULL;
}

static void status_shows_math_and_dtypes(void **state)
{
    (void) state;
    salus_client *c = sl_test_connect(&server);
    const struct {
        int matmul, conv;
        Salus__MathMode want_matmul, want_conv;
        const char *text;
    } cases[] = {
        {SALUS_MATH_DEFAULT, SALUS_MATH_DEFAULT, SALUS__MATH_MODE__MATH_EXACT,
         SALUS__MATH_MODE__MATH_TF32, "math: matmul exact, conv tf32"},
        {SALUS_MATH_TF32, SALUS_MATH_EXACT, SALUS__MATH_MODE__MATH_TF32,
         SALUS__MATH_MODE__MATH_EXACT, "math: matmul tf32, conv exact"},
        {SALUS_MATH_EXACT, SALUS_MATH_EXACT, SALUS__MATH_MODE__MATH_EXACT,
         SALUS__MATH_MODE__MATH_EXACT, "math: matmul exact, conv exact"},
        {SALUS_MATH_TF32, SALUS_MATH_TF32, SALUS__MATH_MODE__MATH_TF32, SALUS__MATH_MODE__MATH_TF32,
         "math: matmul tf32, conv tf32"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        salus_session_opts o = {.math_matmul = cases[k].matmul, .math_conv = cases[k].conv};
        salus_session *s;
        assert_sl_ok(salus_session_open(c, &o, &s));
        uint64_t t;
        assert_sl_ok(salus_tensor_create(s, SALUS_F32, 1, (int64_t[]){1000}, NULL, &t));
        assert_sl_ok(salus_tensor_create(s, SALUS_BF16, 1, (int64_t[]){1000}, NULL, &t));
        assert_sl_ok(salus_tensor_create(s, SALUS_BF16, 1, (int64_t[]){24}, NULL, &t));
        Salus__Reply *rep = sl_test_status(c);
        const Salus__SessionStatus *x = find_session(rep, salus_session_id(s));
        assert_int_equal(x->math_matmul, cases[k].want_matmul);
        assert_int_equal(x->math_conv, cases[k].want_conv);
        /* allocations are rounded to 256 bytes; f16 holds none */
        assert_int_equal(x->n_persistent_by_dtype, 2);
        assert_int_equal(x->persistent_by_dtype[0]->dtype, SALUS__DTYPE__F32);
        assert_int_equal(x->persistent_by_dtype[0]->bytes, 4096);
        assert_int_equal(x->persistent_by_dtype[1]->dtype, SALUS__DTYPE__BF16);
        assert_int_equal(x->persistent_by_dtype[1]->bytes, 2048 + 256);
        assert_int_equal(x->persistent_bytes, 4096 + 2048 + 256);
        salus__reply__free_unpacked(rep, NULL);
        /* freeing takes its dtype's bytes back */
        assert_sl_ok(salus_tensor_free(s, t));
        rep = sl_test_status(c);
        x = find_session(rep, salus_session_id(s));
        assert_int_equal(x->persistent_by_dtype[1]->bytes, 2048);
        salus__reply__free_unpacked(rep, NULL);

        char *text;
        assert_sl_ok(salus_status_text(c, &text));
        char line[128];
        snprintf(line, sizeof line, "%s; persistent f32 4.0 KiB, bf16 2.0 KiB", cases[k].text);
        assert_non_null(strstr(text, line));
        salus_free(text);
        assert_sl_ok(salus_sessions_text(c, &text));
        snprintf(line, sizeof line, "%s/%s",
                 cases[k].want_matmul == SALUS__MATH_MODE__MATH_TF32 ? "tf32" : "exact",
                 cases[k].want_conv == SALUS__MATH_MODE__MATH_TF32 ? "tf32" : "exact");
        assert_non_null(strstr(text, line));
        assert_non_null(strstr(text, "f32,bf16"));
        salus_free(text);
        assert_sl_ok(salus_session_close(s));
    }
    salus_disconnect(c);
}

static void trace_names_dtype_and_math(void **state)
{
    (void) state;
    salus_client *c = sl_test_connect(&server);
    salus_session_opts o = {.math_matmul = SALUS_MATH_TF32};
    salus_session *s;
    assert_sl_ok(salus_session_open(c, &o, &s));
    enum { N = 8, K = 16, M = 4 };
    float x[N * K], y[N * M];
    for (int i = 0; i < N * K; i++)
        x[i] = (float) i / 100.0f;
    uint64_t w;
    assert_sl_ok(salus_tensor_create(s, SALUS_F32, 2, (int64_t[]){K, M}, NULL, &w));
    salus_value xv, yv;
    salus_graph *g =
        sl_test_relu_graph(s, "matmul", 2, (int64_t[]){N, K}, w, 2, (int64_t[]){K, M}, &xv, &yv);
    /* the same in bf16: x cast, the weights kept in bf16 */
    uint64_t wb;
    assert_sl_ok(salus_tensor_create(s, SALUS_BF16, 2, (int64_t[]){K, M}, NULL, &wb));
    salus_graph *h = salus_graph_new();
    salus_value hx = salus_graph_input(h, SALUS_F32, 2, (int64_t[]){N, K});
    salus_value hb = salus_graph_op(h, "cast", 1, &hx, 1, (int64_t[]){SALUS_BF16}, 0, NULL);
    salus_value hw = salus_graph_param(h, wb, SALUS_BF16, 2, (int64_t[]){K, M});
    salus_value hm = salus_graph_op(h, "matmul", 2, (salus_value[]){hb, hw}, 0, NULL, 0, NULL);
    assert_sl_ok(salus_graph_register(s, h, NULL));
    uint16_t hy[N * M];
    assert_sl_ok(salus_trace_start(c));
    assert_sl_ok(salus_run(s, g, (const void *const[]){x}, 1, &yv, (void *const[]){y}));
    usleep(20 * 1000); /* the next iteration of the lane is timed op by op too */
    assert_sl_ok(salus_run(s, h, (const void *const[]){x}, 1, &hm, (void *const[]){hy}));
    char *json;
    size_t n;
    assert_sl_ok(salus_trace_stop_json(c, &json, &n));
    /* the first iteration of a lane is timed op by op */
    assert_non_null(strstr(json, "\"name\":\"matmul\""));
    assert_non_null(strstr(json, "\"index\":0,\"dtype\":\"f32\",\"math\":\"tf32\""));
    assert_non_null(strstr(json, "\"index\":1,\"dtype\":\"f32\"}"));
    /* the cast names the dtype it makes; a bf16 matmul has no f32 math */
    assert_non_null(strstr(json, "\"name\":\"cast\""));
    assert_non_null(strstr(json, "\"index\":0,\"dtype\":\"bf16\"}"));
    assert_non_null(strstr(json, "\"index\":1,\"dtype\":\"bf16\"}"));
    salus_free(json);
    salus_graph_free(h);
    salus_graph_free(g);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
}

SL_TEST_SERVER_MAIN(server, "dtypes", sl_test_group_start,
                    cmocka_unit_test(conversions_round_to_nearest_even),
                    cmocka_unit_test(half_tensors_move_bit_for_bit),
                    cmocka_unit_test(checkpoints_keep_dtypes),
                    cmocka_unit_test(status_shows_math_and_dtypes),
                    cmocka_unit_test(trace_names_dtype_and_math))
