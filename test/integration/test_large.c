/* Large data under salusd's default message limit (64 MiB): a tensor larger
 * than one message is created, written and read in chunks by the client
 * library, bit for bit; a run whose inline feeds or fetches pass the limit
 * is refused with an error naming shared memory and nothing else breaks;
 * the same run through shared memory works; and the largest graph allowed
 * decodes within its request's budget. */
#include "client_internal.h"
#include "harness.h"
#include "sl_test.h"

#include <stdlib.h>
#include <string.h>

/* 80 MiB: more than one message of salusd's default --max-message */
#define BIG_ELEMS (20u << 20)
#define BIG_BYTES ((size_t) BIG_ELEMS * sizeof(float))

static sl_test_server server;

static float *filled(unsigned seed)
{
    float *p = malloc(BIG_BYTES);
    assert_non_null(p);
    for (size_t i = 0; i < BIG_ELEMS; i++)
        p[i] = (float) ((i * 2654435761u + seed) % 1000003u) - 500000.0f;
    return p;
}

static void tensor_in_chunks(void **state)
{
    (void) state;
    salus_client *c = sl_test_connect(&server);
    assert_true(c->max_message == 64u << 20);
    salus_session *s;
    assert_sl_ok(salus_session_open(c, NULL, &s));
    float *a = filled(1), *b = filled(2), *back = malloc(BIG_BYTES);
    assert_non_null(back);
    uint64_t t;
    const int64_t dims[] = {BIG_ELEMS / 1024, 1024};
    assert_sl_ok(salus_tensor_create(s, SALUS_F32, 2, dims, a, &t));
    assert_sl_ok(salus_tensor_read(s, t, back, BIG_BYTES));
    assert_memory_equal(a, back, BIG_BYTES);
    assert_sl_ok(salus_tensor_write(s, t, b, BIG_BYTES));
    memset(back, 0, BIG_BYTES);
    assert_sl_ok(salus_tensor_read(s, t, back, BIG_BYTES));
    assert_memory_equal(b, back, BIG_BYTES);
    /* a size the tensor does not have is refused at the first chunk, and
     * the tensor is untouched */
    assert_sl_err(salus_tensor_write(s, t, a, BIG_BYTES - 4096), SALUS_EINVAL);
    assert_non_null(strstr(salus_last_error(c), "says it has"));
    assert_sl_err(salus_tensor_read(s, t, back, BIG_BYTES + 4096), SALUS_EINVAL);
    assert_sl_ok(salus_tensor_read(s, t, back, BIG_BYTES));
    assert_memory_equal(b, back, BIG_BYTES);
    free(a);
    free(b);
    free(back);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
}

/* A session with graph y = relu(x + p), x fed and p a param of BIG_ELEMS. */
typedef struct big_run {
    salus_client *c;
    salus_session *s;
    salus_graph *g;
    salus_value x, y;
} big_run;

static void big_run_open(big_run *r, bool shm)
{
    if (!shm)
        setenv("SALUS_SHM", "0", 1);
    r->c = sl_test_connect(&server);
    unsetenv("SALUS_SHM");
    assert_sl_ok(salus_session_open(r->c, NULL, &r->s));
    uint64_t p;
    const int64_t dims[] = {BIG_ELEMS};
    assert_sl_ok(salus_tensor_create(r->s, SALUS_F32, 1, dims, NULL, &p));
    r->g = sl_test_relu_graph(r->s, "add", 1, dims, p, 1, dims, &r->x, &r->y);
}

static void big_run_close(big_run *r)
{
    salus_graph_free(r->g);
    assert_sl_ok(salus_session_close(r->s));
    salus_disconnect(r->c);
}

static void inline_runs_at_the_limit(void **state)
{
    (void) state;
    big_run r;
    big_run_open(&r, false);
    float *x = filled(3), *y = malloc(BIG_BYTES);
    assert_non_null(y);
    const void *feeds[] = {x};
    void *outs[] = {y};
    /* the feed alone passes the limit: refused by the client, which keeps
     * its connection and its session */
    assert_sl_err(salus_run(r.s, r.g, feeds, 1, &r.y, outs), SALUS_EINVAL);
    assert_non_null(strstr(salus_last_error(r.c), "shared memory"));
    /* a fetch past the limit: refused by salusd before it runs */
    salus_graph *g2 = salus_graph_new();
    uint64_t p2;
    const int64_t dims[] = {BIG_ELEMS};
    assert_sl_ok(salus_tensor_create(r.s, SALUS_F32, 1, dims, NULL, &p2));
    salus_value pv = salus_graph_param(g2, p2, SALUS_F32, 1, dims);
    salus_value z = salus_graph_op(g2, "relu", 1, &pv, 0, NULL, 0, NULL);
    assert_sl_ok(salus_graph_register(r.s, g2, NULL));
    assert_sl_err(salus_run(r.s, g2, NULL, 1, &z, outs), SALUS_EINVAL);
    assert_non_null(strstr(salus_last_error(r.c), "shared memory"));
    /* still serving this session */
    assert_sl_ok(salus_tensor_read(r.s, p2, y, BIG_BYTES));
    salus_graph_free(g2);
    free(x);
    free(y);
    big_run_close(&r);
}

static void shared_memory_runs_past_the_limit(void **state)
{
    (void) state;
    big_run r;
    big_run_open(&r, true);
    float *x = filled(4), *y = malloc(BIG_BYTES);
    assert_non_null(y);
    const void *feeds[] = {x};
    void *outs[] = {y};
    assert_sl_ok(salus_run(r.s, r.g, feeds, 1, &r.y, outs));
    for (size_t i = 0; i < BIG_ELEMS; i++) /* p is zero: y = relu(x) */
        if (y[i] != (x[i] > 0 ? x[i] : 0.0f))
            fail_msg("element %zu: %g for relu(%g)", i, (double) y[i], (double) x[i]);
    free(x);
    free(y);
    big_run_close(&r);
}

/* RegisterGraph of a chain of 8192 relus, sent again and again (each time
 * a new graph, kept until its session closes). */
#define CHAIN 8192
static Salus__Op chain_ops[CHAIN], *chain_op_ptrs[CHAIN];
static uint32_t chain_inputs[CHAIN];

static void chain_request(Salus__Request *req, Salus__RegisterGraph *rg, Salus__Graph *g,
                          Salus__TensorDesc *in, Salus__TensorDesc **ins, int64_t *dim)
{
    salus__tensor_desc__init(in);
    *dim = 1;
    in->n_dims = 1;
    in->dims = dim;
    ins[0] = in;
    for (uint32_t i = 0; i < CHAIN; i++) {
        salus__op__init(&chain_ops[i]);
        chain_ops[i].type = (char *) "relu";
        chain_inputs[i] = i;
        chain_ops[i].n_inputs = 1;
        chain_ops[i].inputs = &chain_inputs[i];
        chain_op_ptrs[i] = &chain_ops[i];
    }
    salus__graph__init(g);
    g->n_inputs = 1;
    g->inputs = ins;
    g->n_ops = CHAIN;
    g->ops = chain_op_ptrs;
    salus__register_graph__init(rg);
    rg->graph = g;
    salus__request__init(req);
    req->body_case = SALUS__REQUEST__BODY_REGISTER_GRAPH;
    req->register_graph = rg;
}

/* Registers chains on s until refused naming flag; returns how many. */
static int register_until_refused(salus_session *s, const char *flag)
{
    Salus__Request req;
    Salus__RegisterGraph rg;
    Salus__Graph g;
    Salus__TensorDesc in, *ins[1];
    int64_t dim;
    chain_request(&req, &rg, &g, &in, ins, &dim);
    Salus__Reply *rep;
    int n = 0, rc;
    while ((rc = sl_client_session_call(s, &req, &rep)) == SALUS_OK) {
        salus__reply__free_unpacked(rep, NULL);
        assert_true(++n < 64);
    }
    assert_int_equal(rc, SALUS_EEXHAUSTED);
    if (!strstr(salus_last_error(s->client), flag))
        fail_msg("refused for another reason than %s: %s", flag, salus_last_error(s->client));
    return n;
}

/* Graphs count against their session's host-memory budget and all
 * sessions' together, and a closed session gives its share back. */
static void metadata_budgets(void **state)
{
    (void) state;
    sl_test_server small;
    sl_test_server_start(
        &small, (const char *const[]){"--session-metadata", "8M", "--max-metadata", "12M", NULL});
    salus_client *c = sl_test_connect(&small);
    salus_session *a, *b;
    assert_sl_ok(salus_session_open(c, NULL, &a));
    assert_sl_ok(salus_session_open(c, NULL, &b));
    /* a chain holds about 2.2 MB: three fit in 8M, then five in 12M */
    assert_int_equal(register_until_refused(a, "--session-metadata"), 3);
    assert_int_equal(register_until_refused(b, "--max-metadata"), 2);
    assert_sl_ok(salus_session_close(a));
    assert_int_equal(register_until_refused(b, "--session-metadata"), 1);
    assert_sl_ok(salus_session_close(b));
    salus_disconnect(c);
    assert_int_equal(sl_test_server_stop(&small), 0);
}

/* 8192 one-input ops, the most a graph may have, in the fewest wire bytes
 * an op can take: its decoded form is the largest per byte sent. */
static void largest_graph_decodes(void **state)
{
    (void) state;
    salus_client *c;
    salus_session *s = sl_test_session(&server, &c);
    salus_graph *g = salus_graph_new();
    salus_value v = salus_graph_input(g, SALUS_F32, 1, (int64_t[]){1});
    for (int i = 0; i < 8192; i++)
        v = salus_graph_op(g, "relu", 1, &v, 0, NULL, 0, NULL);
    assert_null(salus_graph_error(g));
    assert_sl_ok(salus_graph_register(s, g, NULL));
    salus_graph_free(g);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
}

/* Room for a big param and a lane holding a big iteration (the harness's
 * 256M default holds neither). */
static int start(void **state)
{
    (void) state;
    sl_test_server_start(&server, (const char *const[]){"--memory-limit", "1G", NULL});
    return 0;
}

SL_TEST_SERVER_MAIN(server, "large", start, cmocka_unit_test(tensor_in_chunks),
                    cmocka_unit_test(inline_runs_at_the_limit),
                    cmocka_unit_test(shared_memory_runs_past_the_limit),
                    cmocka_unit_test(largest_graph_decodes), cmocka_unit_test(metadata_budgets))
