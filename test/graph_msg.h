/* A graph message (salus.proto Graph) built in place, for tests that hand a
 * graph to sl_graph_build, or to the fuzz corpus, without the client
 * library. Add inputs first, then params, then ops: value numbers (inputs,
 * params, then op outputs) then follow the order of the calls. Holds up to
 * 4 inputs, 8 params and 16 ops. Header only. */
#ifndef SL_TEST_GRAPH_MSG_H
#define SL_TEST_GRAPH_MSG_H

#include "ops.h"
#include "salus.pb-c.h"

#include <stdint.h>
#include <string.h>

typedef struct sl_test_gb {
    Salus__Graph g;
    Salus__TensorDesc descs[4], *inputs[4];
    int64_t dims[4][SL_MAX_DIMS];
    uint64_t params[8];
    Salus__Op ops[16], *opp[16];
    uint32_t in[16][SL_OP_MAX_IN];
    int64_t iattrs[16][SL_OP_MAX_IATTRS];
    float fattrs[16][SL_OP_MAX_FATTRS];
    uint32_t n_values; /* the next value's number */
} sl_test_gb;

/* An empty graph. */
static inline void sl_test_gb_init(sl_test_gb *b)
{
    memset(b, 0, sizeof *b);
    salus__graph__init(&b->g);
    b->g.inputs = b->inputs;
    b->g.params = b->params;
    b->g.ops = b->opp;
}

/* Adds an input of dtype (an sl_dtype) and ndim dims; returns its value. */
static inline uint32_t sl_test_gb_input(sl_test_gb *b, int dtype, int ndim, const int64_t *dims)
{
    size_t i = b->g.n_inputs++;
    salus__tensor_desc__init(&b->descs[i]);
    b->descs[i].dtype = (Salus__DType) dtype;
    b->descs[i].n_dims = (size_t) ndim;
    memcpy(b->dims[i], dims, (size_t) ndim * sizeof *dims);
    b->descs[i].dims = b->dims[i];
    b->inputs[i] = &b->descs[i];
    return b->n_values++;
}

/* Adds tensor id as a param; returns its value. */
static inline uint32_t sl_test_gb_param(sl_test_gb *b, uint64_t id)
{
    b->params[b->g.n_params++] = id;
    return b->n_values++;
}

/* Adds op type reading the n_in values in, with no attributes: the caller
 * sets n_iattrs / n_fattrs and fills iattrs / fattrs of the op returned.
 * Its (first) output is value b->n_values - 1. */
static inline Salus__Op *sl_test_gb_op(sl_test_gb *b, const char *type, int n_in,
                                       const uint32_t *in)
{
    size_t k = b->g.n_ops++;
    Salus__Op *o = &b->ops[k];
    salus__op__init(o);
    o->type = (char *) type;
    o->n_inputs = (size_t) n_in;
    memcpy(b->in[k], in, (size_t) n_in * sizeof *in);
    o->inputs = b->in[k];
    o->iattrs = b->iattrs[k];
    o->fattrs = b->fattrs[k];
    b->opp[k] = o;
    b->n_values++;
    return o;
}

#endif
