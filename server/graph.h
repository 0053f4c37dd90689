/* Graphs and the persistent tensors they use: what a session registers.
 * Registration validates every op through the op registry, infers every
 * value's shape and plans the ephemeral memory once; after that, nothing a
 * client sends at run time can make a kernel touch memory outside the
 * session's own tensors and the iteration's block. */
#ifndef SL_GRAPH_H
#define SL_GRAPH_H

#include "gaps.h"
#include "ops.h"
#include "planner.h"
#include "salus.pb-c.h"
#include "sl_map.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A persistent tensor of a session. */
typedef struct sl_tensor {
    uint64_t id;
    sl_shape shape;
    uint64_t addr;       /* offset in the device arena */
    uint64_t bytes;      /* as allocated (rounded) */
    uint32_t graph_refs; /* registered graphs that use it; free refused while > 0 */
} sl_tensor;

/* A value of a registered graph: where it lives during an iteration. */
typedef struct sl_value {
    sl_shape shape;
    uint8_t kind;       /* SL_VALUE_* */
    uint32_t last_step; /* last step reading or writing it (0 = the feed copies) */
    /* the value whose memory it is: itself, what it views (reshape), or the
     * dying input an in-place op wrote it over */
    uint32_t root;
    uint64_t addr;     /* ephemeral: offset inside the iteration's block */
    sl_tensor *tensor; /* params */
} sl_value;

enum { SL_VALUE_INPUT, SL_VALUE_PARAM, SL_VALUE_OUTPUT };

typedef struct sl_graph_op {
    uint16_t op;
    uint8_t n_in, n_out;
    uint32_t in[SL_OP_MAX_IN];
    uint32_t out[SL_OP_MAX_OUT];
    sl_op_attrs attrs;
    /* in-place execution: the input whose memory out[0] is written over, or
     * -1. Values sharing that memory whose last step is this op are fetched
     * before it runs (executor.c). */
    int8_t inplace_in;
} sl_graph_op;

/* A validated, planned graph. Its structure is immutable once registered;
 * the measurements at the end are the executor's. */
typedef struct sl_graph {
    uint64_t id;
    uint32_t n_inputs, n_params, n_values, n_ops;
    sl_value *values;
    sl_graph_op *ops;
    sl_plan_result plan;
    uint64_t flops;
    uint64_t host_bytes; /* host memory it holds while registered (its session's budget) */
    /* executor.c: per-op duration predictions (gap filling) and the
     * iterations' device time, smoothed (0: none yet) */
    sl_gaps_lp lp;
    sl_gaps_ewma *op_ewma; /* n_ops of them */
    uint64_t iter_ewma_ns;
    /* the value an amp_scale_update op reads as `found` (nonzero: the step
     * found an inf or NaN gradient and was skipped), fetched with every run
     * to count skipped steps; UINT32_MAX when the graph has none */
    uint32_t amp_found;
    struct sl_replay *replay; /* its recorded iterations (replay.h); NULL without memory */
} sl_graph;

/* Validates msg against tensors (a session's: id -> sl_tensor), infers
 * shapes and plans the ephemeral memory; with inplace, element-wise ops
 * write their output over an ephemeral input that dies at them
 * (sl_graph_op.inplace_in). On success *out is owned by the caller
 * (sl_graph_free), (*out)->host_bytes says what it holds, and param
 * tensors' graph_refs are incremented. Errors:
 * SL_EINVAL (reason in err), SL_ENOTFOUND (unknown param tensor, reason in
 * err), SL_ENOMEM. Runs in O(values^2) at most: bounded by its limits. */
int sl_graph_build(sl_map *tensors, const Salus__Graph *msg, bool inplace, sl_graph **out,
                   char *err, size_t errlen);
struct sl_device;

/* Whether dev runs every op of g in the dtype g gives it (sl_dev_op_dtypes):
 * a graph of bf16 ops is refused on a backend that has no bf16 kernels for
 * them, before anything runs. Returns SL_OK, or SL_EUNSUPPORTED with a reason
 * naming the first such op, its dtype and what the device runs it in. */
int sl_graph_check_device(const sl_graph *g, struct sl_device *dev, char *err, size_t errlen);
/* Host memory one tensor's bookkeeping holds (its struct and its id table
 * slot), counted against its session's metadata budget like graphs. */
#define SL_TENSOR_HOST_BYTES (sizeof(sl_tensor) + 2 * (sizeof(uint64_t) + sizeof(void *)))

/* Drops the graph's references on its tensors and frees it (NULL is fine). */
void sl_graph_free(sl_graph *g);

/* The shape a wire descriptor names. Errors: SL_EINVAL with what is wrong
 * in why (unknown dtype, too many dims, a dim below 1, too many elements). */
int sl_shape_from_desc(const Salus__TensorDesc *d, sl_shape *out, char *why, size_t whylen);

#endif
