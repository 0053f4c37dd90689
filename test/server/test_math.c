/* A session's math choice (salus_session_opts.math_matmul / math_conv)
 * reaches every op call of its iterations: the cpu device of an embedded
 * server is wrapped so that each launch records the call's math bits, for
 * whole iterations (policy fair) and for iterations run op by op beside a
 * high-priority session, their matmuls split in parts (policy priority). */
#include "served.h"
#include "sl_test.h"

#include <salus/salus.h>

#include <pthread.h>
#include <string.h>

/* What the wrapped launch saw since the last reset. */
static struct {
    pthread_mutex_t lock;
    unsigned calls, matmuls;
    unsigned math_or, math_and; /* of every call's math bits */
} seen = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const sl_device_ops *real_ops;
static sl_device_ops wrapped_ops;

static int recording_launch(sl_device *dev, sl_stream *s, const sl_op_call *call)
{
    pthread_mutex_lock(&seen.lock);
    seen.calls++;
    seen.matmuls += call->op == SL_OP_MATMUL;
    seen.math_or |= call->math;
    seen.math_and &= call->math;
    pthread_mutex_unlock(&seen.lock);
    return real_ops->launch(dev, s, call);
}

static void reset_seen(void)
{
    pthread_mutex_lock(&seen.lock);
    seen.calls = seen.matmuls = seen.math_or = 0;
    seen.math_and = ~0u;
    pthread_mutex_unlock(&seen.lock);
}

/* Records every launch: the device's ops, wrapped before any request (the
 * executor reads the table only for work that reaches it through the
 * server's lock afterwards). */
static void wrap_launches(sl_served *sv)
{
    real_ops = sv->srv.dev->ops;
    wrapped_ops = *real_ops;
    wrapped_ops.launch = recording_launch;
    sv->srv.dev->ops = &wrapped_ops;
}

/* Runs y = relu(x w) twice in a session opened with the given choices and
 * checks that every launch carried want (enum sl_math bits). */
static void runs_carry(salus_client *c, int matmul, int conv, unsigned want)
{
    salus_session_opts o = {.name = "math", .math_matmul = matmul, .math_conv = conv};
    salus_session *s;
    assert_sl_ok(salus_session_open(c, &o, &s));
    enum { N = 64, K = 96, M = 80 };
    static float x[N * K], w[K * M], y[N * M];
    for (unsigned i = 0; i < N * K; i++)
        x[i] = (float) (i % 7) - 3.0f;
    for (unsigned i = 0; i < K * M; i++)
        w[i] = (float) (i % 5) * 0.25f;
    uint64_t wt;
    assert_sl_ok(salus_tensor_create(s, SALUS_F32, 2, (int64_t[]){K, M}, w, &wt));
    salus_graph *g = salus_graph_new();
    salus_value xv = salus_graph_input(g, SALUS_F32, 2, (int64_t[]){N, K});
    salus_value wv = salus_graph_param(g, wt, SALUS_F32, 2, (int64_t[]){K, M});
    salus_value mm = salus_graph_op(g, "matmul", 2, (salus_value[]){xv, wv}, 0, NULL, 0, NULL);
    salus_value yv = salus_graph_op(g, "relu", 1, &mm, 0, NULL, 0, NULL);
    assert_sl_ok(salus_graph_register(s, g, NULL));
    reset_seen();
    for (int r = 0; r < 2; r++)
        assert_sl_ok(salus_run(s, g, (const void *const[]){x}, 1, &yv, (void *const[]){y}));
    pthread_mutex_lock(&seen.lock);
    assert_true(seen.calls >= 4);
    assert_true(seen.matmuls >= 2);
    assert_int_equal(seen.math_or, want);
    assert_int_equal(seen.math_and, want);
    pthread_mutex_unlock(&seen.lock);
    salus_graph_free(g);
    assert_sl_ok(salus_session_close(s));
}

static void each_choice(salus_client *c)
{
    runs_carry(c, SALUS_MATH_DEFAULT, SALUS_MATH_DEFAULT, SL_MATH_DEFAULT);
    runs_carry(c, SALUS_MATH_EXACT, SALUS_MATH_EXACT, 0);
    runs_carry(c, SALUS_MATH_TF32, SALUS_MATH_DEFAULT, SL_MATH_MATMUL_TF32 | SL_MATH_CONV_TF32);
    runs_carry(c, SALUS_MATH_TF32, SALUS_MATH_EXACT, SL_MATH_MATMUL_TF32);
    runs_carry(c, SALUS_MATH_DEFAULT, SALUS_MATH_EXACT, 0);
}

static void whole_iterations_carry_the_session_math(void **state)
{
    (void) state;
    sl_served sv;
    sl_served_start(&sv, "inproc://salus-test-math-whole", "fair", 0, wrap_launches);
    each_choice(sv.client);
    /* a mode salusd does not know is refused, naming the field */
    salus_session_opts bad = {.math_conv = 7};
    salus_session *s;
    assert_sl_err(salus_session_open(sv.client, &bad, &s), SALUS_EINVAL);
    assert_non_null(strstr(salus_last_error(sv.client), "math_conv 7"));
    sl_served_stop(&sv);
}

/* Beside an idle high-priority session the others run op by op, their
 * matmuls split into parts of about 1 us (sl_op_split): every part too. */
static void op_by_op_parts_carry_the_session_math(void **state)
{
    (void) state;
    sl_served sv;
    sl_served_start(&sv, "inproc://salus-test-math-parts", "priority", 1000, wrap_launches);
    salus_session_opts hp_opts = {.name = "hp", .priority = 10};
    salus_session *hp;
    assert_sl_ok(salus_session_open(sv.client, &hp_opts, &hp));
    each_choice(sv.client);
    assert_sl_ok(salus_session_close(hp));
    sl_served_stop(&sv);
}

SL_TEST_MAIN("session math", NULL, NULL, cmocka_unit_test(whole_iterations_carry_the_session_math),
             cmocka_unit_test(op_by_op_parts_carry_the_session_math))
