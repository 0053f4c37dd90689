/* The launch-bound graph of bench/launch_lock and bench/graph_replay: in a
 * new session of c named name, a counter tensor c of n floats and the graph
 *     c += 1; y = x + c; y = 1 * y, n_ops - 2 times; fetch y
 * whose ops do next to no work, so an iteration's time is its launches.
 * Exits on failure. */
#ifndef SL_BENCH_CHAIN_GRAPH_H
#define SL_BENCH_CHAIN_GRAPH_H

#include <salus/salus.h>

#include <stdio.h>
#include <stdlib.h>

typedef struct bench_chain {
    salus_session *s;
    salus_graph *g;
    salus_value y;
    int64_t n;
} bench_chain;

static inline void bench_chain_open(salus_client *c, bench_chain *t, int64_t n, int n_ops,
                                    const char *name)
{
    salus_session_opts o = {.name = name};
    uint64_t counter;
    t->n = n;
    if (salus_session_open(c, &o, &t->s) ||
        salus_tensor_create(t->s, SALUS_F32, 1, &t->n, NULL, &counter)) {
        fprintf(stderr, "cannot open %s: %s\n", name, salus_last_error(c));
        exit(1);
    }
    t->g = salus_graph_new();
    salus_value x = salus_graph_input(t->g, SALUS_F32, 1, &t->n);
    salus_value p = salus_graph_param(t->g, counter, SALUS_F32, 1, &t->n);
    const float one = 1.0f;
    (void) salus_graph_op(t->g, "add_scalar", 1, &p, 0, NULL, 1, &one);
    salus_value y = salus_graph_op(t->g, "add", 2, (salus_value[]){x, p}, 0, NULL, 0, NULL);
    for (int k = 2; k < n_ops; k++)
        y = salus_graph_op(t->g, "scale", 1, &y, 0, NULL, 1, &one);
    t->y = y;
    if (salus_graph_error(t->g) || salus_graph_register(t->s, t->g, NULL)) {
        fprintf(stderr, "cannot register %s's graph: %s\n", name, salus_last_error(c));
        exit(1);
    }
}

/* One run: x from in, y into out, each n floats. */
static inline int bench_chain_run(bench_chain *t, const float *in, float *out)
{
    return salus_run(t->s, t->g, (const void *[]){in}, 1, &t->y, (void *[]){out});
}

static inline void bench_chain_close(bench_chain *t)
{
    salus_graph_free(t->g);
    (void) salus_session_close(t->s);
}

#endif
