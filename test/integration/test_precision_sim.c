/* Reduced precision on the sim device through a real salusd: a half-precision
 * graph registers and runs on sim:h100, and the device time salusd charges
 * for it follows the model (matmuls at the tensor-core rate, a memory-bound
 * iteration at half the bytes); sim:v100, which has no bf16, refuses a bf16
 * graph at registration, naming the op and the dtype. */
#include "harness.h"
#include "sl_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 2^28 elements: a cast moves 2 GiB in f32 (0.8 ms on the modeled H100),
 * far above the launch (5 us) and what a loaded host adds. */
#define ROWS 16384
#define COLS 16384
#define PAIRS 20 /* cast pairs per iteration */
#define ITERS 3

/* The device time salusd has charged session id so far (its attained time,
 * from salus_status_json, whose session objects are flat and start with
 * their id); fails the test when it is missing. */
static double attained_ns(salus_client *c, uint64_t id)
{
    static const char field[] = "\"attained_ns\":";
    char *json, key[48];
    assert_sl_ok(salus_status_json(c, &json));
    snprintf(key, sizeof key, "{\"id\":%llu,", (unsigned long long) id);
    const char *at = strstr(json, key), *end = at ? strchr(at, '}') : NULL;
    const char *v = at ? strstr(at, field) : NULL;
    double ns = v && v < end ? strtod(v + strlen(field), NULL) : -1;
    if (!(ns >= 0))
        fail_msg("session %llu's attained time is not in the status:\n%s", (unsigned long long) id,
                 json);
    salus_free(json);
    return ns;
}

/* A graph of PAIRS casts from dtype a to b and back, over a persistent
 * tensor of dtype a. */
static salus_graph *cast_chain(salus_session *s, int a, int b, uint64_t *tensor)
{
    const int64_t dims[] = {ROWS, COLS};
    assert_sl_ok(salus_tensor_create(s, a, 2, dims, NULL, tensor));
    salus_graph *g = salus_graph_new();
    salus_value y = salus_graph_param(g, *tensor, a, 2, dims);
    for (int k = 0; k < PAIRS; k++) {
        y = salus_graph_op(g, "cast", 1, &y, 1, (const int64_t[]){b}, 0, NULL);
        y = salus_graph_op(g, "cast", 1, &y, 1, (const int64_t[]){a}, 0, NULL);
    }
    return g;
}

/* MATMULS square matmuls of size N in dtype, each on the last one's
 * result: compute-bound on the modeled H100 in every precision. */
#define N 8192
#define MATMULS 4
static salus_graph *matmul_chain(salus_session *s, int dtype, uint64_t *tensor)
{
    const int64_t dims[] = {N, N};
    assert_sl_ok(salus_tensor_create(s, dtype, 2, dims, NULL, tensor));
    salus_graph *g = salus_graph_new();
    salus_value w = salus_graph_param(g, *tensor, dtype, 2, dims), y = w;
    for (int k = 0; k < MATMULS; k++)
        y = salus_graph_op(g, "matmul", 2, (salus_value[]){y, w}, 0, NULL, 0, NULL);
    return g;
}

/* The median device time of one iteration of the cast chain a -> b -> a,
 * or (b < 0) of the matmul chain in a. */
static double iteration_ns(salus_client *c, int a, int b)
{
    salus_session *s;
    uint64_t tensor;
    assert_sl_ok(salus_session_open(c, NULL, &s));
    salus_graph *g = b < 0 ? matmul_chain(s, a, &tensor) : cast_chain(s, a, b, &tensor);
    if (salus_graph_register(s, g, NULL) != SALUS_OK)
        fail_msg("register %d -> %d: %s", a, b, salus_last_error(c));
    assert_sl_ok(salus_run(s, g, NULL, 0, NULL, NULL)); /* first run: not counted */
    double ns[ITERS];
    for (int i = 0; i < ITERS; i++) {
        double before = attained_ns(c, salus_session_id(s));
        assert_sl_ok(salus_run(s, g, NULL, 0, NULL, NULL));
        ns[i] = attained_ns(c, salus_session_id(s)) - before;
    }
    salus_graph_free(g);
    assert_sl_ok(salus_session_close(s));
    double lo = ns[0], hi = ns[0];
    for (int i = 1; i < ITERS; i++) {
        lo = ns[i] < lo ? ns[i] : lo;
        hi = ns[i] > hi ? ns[i] : hi;
    }
    return ns[0] + ns[1] + ns[2] - lo - hi;
}

/* Starts a salusd on a sim device with that much memory; a client of it. */
static salus_client *on_sim(sl_test_server *srv, const char *device, const char *memory)
{
    sl_test_server_start(srv, (const char *[]){"--device", device, "--memory-limit", memory, NULL});
    return sl_test_connect(srv);
}

static void half_runs_at_its_rate_on_h100(void **state)
{
    (void) state;
    sl_test_server srv;
    salus_client *c = on_sim(&srv, "sim:h100", "16G");
    double f32 = iteration_ns(c, SALUS_F32, SALUS_F32);
    double half = iteration_ns(c, SALUS_BF16, SALUS_F16);
    /* 40 casts of 2 GiB at 80% of 3.35 TB/s: 32 ms in f32, 16 in half */
    printf("# sim:h100 cast chain: f32 %.2f ms, bf16/f16 %.2f ms an iteration\n", f32 / 1e6,
           half / 1e6);
    assert_true(f32 > 30e6 && f32 < 60e6);
    double ratio = f32 / half;
    if (ratio < 1.6 || ratio > 2.4)
        fail_msg("f32 / half = %.2f, the model says 2", ratio);

    /* 4 matmuls of 8192^3: 86 ms in f32 at 67 TFLOP/s x 0.76, 5.8 ms in
     * bf16 and f16 at 989.5 (14.8x) */
    double mm32 = iteration_ns(c, SALUS_F32, -1);
    double mmbf = iteration_ns(c, SALUS_BF16, -1);
    double mmf16 = iteration_ns(c, SALUS_F16, -1);
    printf("# sim:h100 matmul chain: f32 %.2f ms, bf16 %.2f ms, f16 %.2f ms an iteration\n",
           mm32 / 1e6, mmbf / 1e6, mmf16 / 1e6);
    assert_true(mm32 > 80e6 && mm32 < 160e6);
    if (mm32 / mmbf < 10 || mm32 / mmbf > 16 || mm32 / mmf16 < 10 || mm32 / mmf16 > 16)
        fail_msg("f32 / bf16 = %.2f, f32 / f16 = %.2f: the model says 14.8", mm32 / mmbf,
                 mm32 / mmf16);
    salus_disconnect(c);
    assert_int_equal(sl_test_server_stop(&srv), 0);
}

static void v100_refuses_bf16(void **state)
{
    (void) state;
    sl_test_server srv;
    salus_client *c = on_sim(&srv, "sim:v100", "8G");
    salus_session *s;
    assert_sl_ok(salus_session_open(c, NULL, &s));
    uint64_t tensor;
    salus_graph *g = cast_chain(s, SALUS_F32, SALUS_BF16, &tensor);
    assert_sl_err(salus_graph_register(s, g, NULL), SALUS_EUNSUPPORTED);
    const char *why = salus_last_error(c);
    if (!strstr(why, "op 0 (cast)") || !strstr(why, "bf16"))
        fail_msg("refusal does not name the op and the dtype: %s", why);
    salus_graph_free(g);
    /* f16 it has (tensor cores since Volta) */
    g = cast_chain(s, SALUS_F32, SALUS_F16, &tensor);
    assert_sl_ok(salus_graph_register(s, g, NULL));
    assert_sl_ok(salus_run(s, g, NULL, 0, NULL, NULL));
    salus_graph_free(g);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
    assert_int_equal(sl_test_server_stop(&srv), 0);
}

SL_TEST_MAIN("precision-sim", NULL, NULL, cmocka_unit_test(half_runs_at_its_rate_on_h100),
             cmocka_unit_test(v100_refuses_bf16))
