/* bf16 through a real salusd on the cpu device: a graph with a bf16
 * parameter, casts and a bf16 matmul + relu, fetched in f32 and in bf16
 * and checked against a reference computed here; an op that has no bf16
 * form refused at registration with the op, the input and the dtype; and
 * a bf16 persistent tensor counted at half the bytes of an f32 one. */
#include "harness.h"
#include "status_call.h"

#include "half.h"

#include <math.h>
#include <string.h>

static sl_test_server server;

enum { M = 8, K = 64, N = 16 };

/* x [M,K] f32 (fed), W [K,N] bf16 (persistent): y = f32(relu(bf16(x) @ W)),
 * also fetched as bf16. The cpu device sums in f32 and rounds each output
 * once to bf16, so against the exact product of the rounded operands an
 * output may be off by one bf16 rounding (2^-8 relative, in the product's
 * unit roundoff) plus f32 summation noise (2^-20 of the sum of |terms| over
 * 64 terms is ample). */
static void bf16_matmul_relu(void **state)
{
    (void) state;
    salus_client *c;
    salus_session *s = sl_test_session(&server, &c);
    static float x[M * K], w[K * N];
    static uint16_t wb[K * N];
    for (int i = 0; i < M * K; i++)
        x[i] = (float) sin(0.37 * i) * 1.5f;
    for (int i = 0; i < K * N; i++) {
        wb[i] = sl_bf16_from_f32((float) cos(0.11 * i) * 0.25f);
        w[i] = sl_f32_from_bf16(wb[i]);
    }
    const int64_t xd[2] = {M, K}, wd[2] = {K, N};
    uint64_t wid;
    assert_sl_ok(salus_tensor_create(s, SALUS_BF16, 2, wd, wb, &wid));

    salus_graph *g = salus_graph_new();
    salus_value xin = salus_graph_input(g, SALUS_F32, 2, xd);
    salus_value wp = salus_graph_param(g, wid, SALUS_BF16, 2, wd);
    salus_value xb = salus_graph_op(g, "cast", 1, &xin, 1, (int64_t[]){SALUS_BF16}, 0, NULL);
    salus_value y = salus_graph_op(g, "matmul", 2, (salus_value[]){xb, wp}, 0, NULL, 0, NULL);
    salus_value r = salus_graph_op(g, "relu", 1, &y, 0, NULL, 0, NULL);
    salus_value out = salus_graph_op(g, "cast", 1, &r, 1, (int64_t[]){SALUS_F32}, 0, NULL);
    if (salus_graph_error(g))
        fail_msg("builder: %s", salus_graph_error(g));
    int dt, nd;
    int64_t dims[SALUS_MAX_DIMS];
    assert_sl_ok(salus_graph_shape(g, r, &dt, &nd, dims));
    assert_int_equal(dt, SALUS_BF16);
    assert_int_equal(salus_graph_bytes(g, r), (size_t) M * N * 2);
    assert_int_equal(salus_graph_bytes(g, out), (size_t) M * N * 4);
    assert_sl_ok(salus_graph_register(s, g, NULL));

    float got[M * N];
    uint16_t got_b[M * N];
    const void *feeds[1] = {x};
    void *outs[2] = {got, got_b};
    assert_sl_ok(salus_run(s, g, feeds, 2, (salus_value[]){out, r}, outs));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double sum = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double t = (double) sl_f32_from_bf16(sl_bf16_from_f32(x[i * K + k])) * w[k * N + j];
                sum += t;
                mag += fabs(t);
            }
            double want = sum > 0 ? sum : 0, tol = 0x1p-8 * fabs(want) + 0x1p-20 * mag;
            float g32 = got[i * N + j];
            if (!(fabs(g32 - want) <= tol))
                fail_msg("y[%d,%d] = %.9g, want %.9g (tolerance %g)", i, j, (double) g32, want,
                         tol);
            /* the bf16 fetch is the same values: cast to f32 is exact */
            assert_int_equal(sl_bf16_from_f32(g32), got_b[i * N + j]);
            assert_true(sl_f32_from_bf16(got_b[i * N + j]) == g32);
        }
    salus_graph_free(g);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
}

/* An op whose registry entry is f32 only (softmax: PyTorch's autocast runs
 * it in f32) is refused: by the client's builder, and by salusd for a
 * graph sent without it, naming the op, the input and the dtype. */
static void bf16_softmax_refused(void **state)
{
    (void) state;
    const int64_t d[2] = {2, 4};
    salus_graph *g = salus_graph_new();
    salus_value xin = salus_graph_input(g, SALUS_BF16, 2, d);
    assert_int_equal(salus_graph_op(g, "softmax", 1, &xin, 0, NULL, 0, NULL), SALUS_NO_VALUE);
    const char *why = salus_graph_error(g);
    assert_non_null(why);
    assert_non_null(strstr(why, "softmax"));
    assert_non_null(strstr(why, "bf16"));
    salus_graph_free(g);

    salus_client *c;
    salus_session *s = sl_test_session(&server, &c);
    Salus__TensorDesc in = SALUS__TENSOR_DESC__INIT, *inp[1] = {&in};
    in.dtype = SALUS__DTYPE__BF16;
    in.n_dims = 2;
    in.dims = (int64_t *) d;
    Salus__Op op = SALUS__OP__INIT, *opp[1] = {&op};
    op.type = "softmax";
    op.n_inputs = 1;
    op.inputs = (uint32_t[]){0};
    Salus__Graph graph = SALUS__GRAPH__INIT;
    graph.n_inputs = 1;
    graph.inputs = inp;
    graph.n_ops = 1;
    graph.ops = opp;
    Salus__RegisterGraph rg = SALUS__REGISTER_GRAPH__INIT;
    rg.graph = &graph;
    Salus__Request req = SALUS__REQUEST__INIT;
    req.body_case = SALUS__REQUEST__BODY_REGISTER_GRAPH;
    req.register_graph = &rg;
    Salus__Reply *rep = NULL;
    assert_int_equal(sl_client_session_call(s, &req, &rep), SL_EINVAL);
    const char *text = salus_last_error(c);
    if (!strstr(text, "softmax") || !strstr(text, "in0 (x)") || !strstr(text, "bf16"))
        fail_msg("refusal names op, input and dtype: '%s'", text);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
}

static uint64_t persistent_used(salus_client *c, uint64_t *session_bytes)
{
    Salus__Reply *rep = sl_test_status(c);
    uint64_t used = rep->status->memory->persistent_used;
    *session_bytes = 0;
    for (size_t i = 0; i < rep->status->n_sessions; i++)
        *session_bytes += rep->status->sessions[i]->persistent_bytes;
    salus__reply__free_unpacked(rep, NULL);
    return used;
}

/* A bf16 tensor takes half the device bytes of an f32 one of its shape,
 * in the server's memory and in its session's persistent bytes. */
static void bf16_counts_half(void **state)
{
    (void) state;
    salus_client *c;
    salus_session *s = sl_test_session(&server, &c);
    const int64_t d[2] = {256, 128};
    uint64_t sess0, sess1, sess2;
    uint64_t base = persistent_used(c, &sess0), id;
    assert_sl_ok(salus_tensor_create(s, SALUS_F32, 2, d, NULL, &id));
    uint64_t f32_used = persistent_used(c, &sess1) - base;
    uint64_t f32_sess = sess1 - sess0;
    assert_sl_ok(salus_tensor_free(s, id));
    assert_sl_ok(salus_tensor_create(s, SALUS_BF16, 2, d, NULL, &id));
    uint64_t bf16_used = persistent_used(c, &sess2) - base;
    uint64_t bf16_sess = sess2 - sess0;
    assert_int_equal(f32_used, 256 * 128 * 4);
    assert_int_equal(bf16_used, 256 * 128 * 2);
    assert_int_equal(f32_sess, 256 * 128 * 4);
    assert_int_equal(bf16_sess, 256 * 128 * 2);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
}

/* Two bf16 convolutions in a row, each with a weight tensor of its own:
 * the cpu backend computes them in f32 on copies that sit at the same
 * workspace address, and must not take the second for the first (it kept
 * reordered weights by address and version). Compared with the same graph
 * in f32 on the same rounded values. */
static void bf16_convolutions_in_a_row(void **state)
{
    (void) state;
    enum { N = 2, C = 8, H = 8, K = 3 }; /* padded: the output is N x C x H x H */
    const int64_t xd[4] = {N, C, H, H}, wd[4] = {C, C, K, K};
    static float x[N * C * H * H], w[2][C * C * K * K];
    static uint16_t xb[N * C * H * H], wb[2][C * C * K * K];
    uint32_t seed = 5;
    for (int i = 0; i < N * C * H * H; i++)
        xb[i] = sl_bf16_from_f32(
            (float) ((seed = seed * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < C * C * K * K; i++)
            wb[k][i] = sl_bf16_from_f32(
                (float) ((seed = seed * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f);
    for (int i = 0; i < N * C * H * H; i++)
        x[i] = sl_f32_from_bf16(xb[i]);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < C * C * K * K; i++)
            w[k][i] = sl_f32_from_bf16(wb[k][i]);
    salus_client *c;
    salus_session *s = sl_test_session(&server, &c);
    static float got[2][N * C * H * H];
    for (int half = 0; half < 2; half++) {
        int dt = half ? SALUS_BF16 : SALUS_F32;
        uint64_t t[2];
        for (int k = 0; k < 2; k++)
            assert_sl_ok(
                salus_tensor_create(s, dt, 4, wd, half ? (void *) wb[k] : (void *) w[k], &t[k]));
        salus_graph *g = salus_graph_new();
        salus_value v = salus_graph_input(g, dt, 4, xd);
        for (int k = 0; k < 2; k++) {
            salus_value wv = salus_graph_param(g, t[k], dt, 4, wd);
            v = salus_graph_op(g, "conv2d", 2, (salus_value[]){v, wv}, 6,
                               (int64_t[]){1, 1, 1, 1, 1, 1}, 0, NULL);
        }
        salus_value y =
            half ? salus_graph_op(g, "cast", 1, &v, 1, (int64_t[]){SALUS_F32}, 0, NULL) : v;
        assert_sl_ok(salus_graph_register(s, g, NULL));
        assert_sl_ok(salus_run(s, g, (const void *const[]){half ? (void *) xb : (void *) x}, 1, &y,
                               (void *const[]){got[half]}));
        salus_graph_free(g);
    }
    float scale = 0;
    for (int i = 0; i < N * C * H * H; i++)
        scale = fmaxf(scale, fabsf(got[0][i]));
    assert_true(scale > 0);
    for (int i = 0; i < N * C * H * H; i++)
        if (fabsf(got[1][i] - got[0][i]) > 2e-2f * scale)
            fail_msg("y[%d]: bf16 %g, f32 %g", i, (double) got[1][i], (double) got[0][i]);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
}

SL_TEST_SERVER_MAIN(server, "half precision on salusd (cpu)", sl_test_group_start,
                    cmocka_unit_test(bf16_matmul_relu), cmocka_unit_test(bf16_softmax_refused),
                    cmocka_unit_test(bf16_counts_half),
                    cmocka_unit_test(bf16_convolutions_in_a_row))
