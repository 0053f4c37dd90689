/* libFuzzer target: bytes -> Salus__Graph -> sl_graph_build -> sl_graph_free.
 *
 * The graph is registered against a session that holds a few real tensors
 * (ids 1..FG_N_TENSORS, shapes in fg_tensors), so params resolve and the op
 * registry, shape inference and the ephemeral planner all run. Every
 * accepted graph is checked against what the executor relies on (values
 * defined before use, shapes the registry accepts, ephemeral values that are
 * live together never overlapping, everything inside the planned peak), and
 * every outcome must leave the tensors' graph references at zero. Accepted
 * graphs are then rebuilt with the k-th host allocation failing, for every
 * k, to exercise the out-of-memory paths. Any violation aborts. */
#include "fuzz_common.h"
#include "server.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sl_session *fg_session;
static sl_tensor fg_store[FG_N_TENSORS];

static void setup(void)
{
    sl_log_set_level("error");
    fg_session = calloc(1, sizeof *fg_session);
    if (!fg_session)
        abort();
    fg_session->id = 1;
    for (int i = 0; i < FG_N_TENSORS; i++) {
        sl_tensor *t = &fg_store[i];
        t->id = (uint64_t) i + 1;
        t->shape = fg_tensors[i];
        t->bytes = sl_align_up(sl_shape_bytes(&t->shape), 256);
        t->addr = (uint64_t) i << 20;
        if (!sl_shape_valid(&t->shape) || sl_map_put(&fg_session->tensors, t->id, t) != SL_OK)
            abort();
    }
    fg_session->next_object_id = FG_N_TENSORS;
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_graph: invariant broken: " __VA_ARGS__);                         \
            fprintf(stderr, "\n");                                                                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void check_refs_zero(void)
{
    for (int i = 0; i < FG_N_TENSORS; i++)
        CHECK(fg_store[i].graph_refs == 0, "tensor %d keeps %u graph references", i + 1,
              fg_store[i].graph_refs);
}

/* The last step of the memory rooted at r: of any value sharing it (views
 * and in-place outputs). */
static uint32_t memory_last(const sl_graph *g, uint32_t r)
{
    uint32_t last = 0;
    for (uint32_t v = r; v < g->n_values; v++)
        if (g->values[v].root == r && g->values[v].last_step > last)
            last = g->values[v].last_step;
    return last;
}

/* The step that writes value v: 0 for inputs (the feed copies), k + 1 for
 * an output of op k. */
static uint32_t first_step(const sl_graph *g, uint32_t v)
{
    for (uint32_t k = 0; k < g->n_ops; k++)
        for (unsigned o = 0; o < g->ops[k].n_out; o++)
            if (g->ops[k].out[o] == v)
                return k + 1;
    return 0;
}

static void check_graph(const sl_graph *g)
{
    uint32_t nv = g->n_inputs + g->n_params;
    CHECK(g->n_values >= nv, "%u values < %u inputs and params", g->n_values, nv);
    for (uint32_t v = 0; v < g->n_values; v++) {
        const sl_value *val = &g->values[v];
        CHECK(sl_shape_valid(&val->shape), "value %u has an invalid shape", v);
        CHECK(val->root <= v, "value %u views a later value %u", v, val->root);
        const sl_value *root = &g->values[val->root];
        CHECK(root->root == val->root, "value %u views a view", v);
        CHECK(sl_shape_bytes(&val->shape) == sl_shape_bytes(&root->shape),
              "view %u and its root differ in size", v);
        if (val->kind == SL_VALUE_PARAM) {
            CHECK(val->tensor && sl_shape_bytes(&val->shape) <= val->tensor->bytes,
                  "param value %u outside its tensor", v);
        } else {
            CHECK(val->addr == root->addr, "view %u not at its root's address", v);
            CHECK(val->addr + sl_shape_bytes(&val->shape) <= g->plan.peak,
                  "value %u [%llu, +%llu) beyond the planned peak %llu", v,
                  (unsigned long long) val->addr, (unsigned long long) sl_shape_bytes(&val->shape),
                  (unsigned long long) g->plan.peak);
        }
    }
    for (uint32_t k = 0; k < g->n_ops; k++) {
        const sl_graph_op *op = &g->ops[k];
        const sl_op_def *def = sl_op_get(op->op);
        CHECK(def && op->n_in == def->n_in && op->n_out == def->n_out, "op %u arity", k);
        if (op->inplace_in >= 0) {
            uint32_t r = g->values[op->in[op->inplace_in]].root;
            CHECK(op->inplace_in < op->n_in && (def->inplace >> op->inplace_in) & 1,
                  "op %u (%s) in place over an input it may not share", k, def->name);
            CHECK(g->values[r].kind != SL_VALUE_PARAM, "op %u writes over a param", k);
            CHECK(g->values[op->out[0]].root == r, "op %u in place but its output elsewhere", k);
            for (uint32_t v = 0; v < op->out[0]; v++)
                CHECK(g->values[v].root != r || g->values[v].last_step <= k + 1,
                      "op %u writes over value %u, read later", k, v);
        }
        sl_shape in[SL_OP_MAX_IN], out[SL_OP_MAX_OUT];
        for (unsigned i = 0; i < op->n_in; i++) {
            CHECK(op->in[i] < nv, "op %u reads value %u defined after it", k, op->in[i]);
            in[i] = g->values[op->in[i]].shape;
            CHECK(g->values[op->in[i]].last_step >= k + 1, "op %u reads a dead value", k);
        }
        for (unsigned o = 0; o < op->n_out; o++)
            CHECK(op->out[o] == nv + o, "op %u output numbering", k);
        char why[160];
        CHECK(sl_op_infer(op->op, &op->attrs, in, op->n_in, out, why, sizeof why) == SL_OK,
              "op %u (%s) no longer validates: %s", k, def->name, why);
        for (unsigned o = 0; o < op->n_out; o++)
            CHECK(sl_shape_equal(&out[o], &g->values[nv + o].shape), "op %u output %u shape", k, o);
        nv += op->n_out;
    }
    CHECK(nv == g->n_values, "%u values numbered, %u recorded", nv, g->n_values);
    /* ephemeral roots that are live at the same step never share bytes */
    if (g->n_values > 1500)
        return;
    for (uint32_t a = 0; a < g->n_values; a++) {
        const sl_value *va = &g->values[a];
        if (va->kind == SL_VALUE_PARAM || va->root != a)
            continue;
        uint32_t fa = first_step(g, a), la = memory_last(g, a);
        for (uint32_t b = a + 1; b < g->n_values; b++) {
            const sl_value *vb = &g->values[b];
            if (vb->kind == SL_VALUE_PARAM || vb->root != b)
                continue;
            uint32_t fb = first_step(g, b), lb = memory_last(g, b);
            if (!(fa <= lb && fb <= la))
                continue;
            uint64_t ea = va->addr + sl_shape_bytes(&va->shape);
            uint64_t eb = vb->addr + sl_shape_bytes(&vb->shape);
            CHECK(ea <= vb->addr || eb <= va->addr,
                  "values %u and %u are live together and overlap", a, b);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fg_session)
        setup();
    Salus__Graph *m = salus__graph__unpack(NULL, size, data);
    if (!m)
        return 0;
    char err[256];
    sl_graph *g = NULL;
    int rc = sl_graph_build(&fg_session->tensors, m, true, &g, err, sizeof err);
    if (rc == SL_OK) {
        CHECK(g != NULL, "success without a graph");
        check_graph(g);
        sl_graph_free(g);
        check_refs_zero();
        /* the same graph with the k-th allocation failing: a clean ENOMEM */
        for (long k = 1; k < 64; k++) {
            sl_alloc_fail_after(k);
            g = NULL;
            rc = sl_graph_build(&fg_session->tensors, m, true, &g, err, sizeof err);
            sl_alloc_fail_after(0);
            if (rc == SL_OK) {
                sl_graph_free(g);
                check_refs_zero();
                break;
            }
            CHECK(rc == SL_ENOMEM && g == NULL, "allocation %ld failing gave %s", k,
                  sl_errname(rc));
            check_refs_zero();
        }
    } else {
        CHECK(rc == SL_EINVAL || rc == SL_ENOTFOUND || rc == SL_ENOMEM, "unexpected error %s",
              sl_errname(rc));
        CHECK(memchr(err, '\0', sizeof err) && err[0], "refusal without a reason");
        check_refs_zero();
    }
    salus__graph__free_unpacked(m, NULL);
    return 0;
}
