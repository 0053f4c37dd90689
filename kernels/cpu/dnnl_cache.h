/* Private to the cpu backend: running ops through oneDNN with primitives
 * built once per distinct (op, shapes, attributes, threads) and cached per
 * stream (dnnl.c). conv.c describes each op; dnnl.c builds, caches and runs.
 * Only the stream's worker thread uses its cache, so it takes no lock. */
#ifndef SL_CPU_DNNL_CACHE_H
#define SL_CPU_DNNL_CACHE_H

#include "cpu.h"

#include <dnnl.h>

#define SL_CPU_PRIM_MAX_ARGS 4

/* One execute argument of a primitive and the salus tensor behind it. */
typedef struct sl_cpu_prim_arg {
    int arg;                 /* DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, ... */
    int tensor;              /* >= 0: input index; < 0: output -1 - tensor */
    dnnl_memory_desc_t user; /* the tensor's plain layout (NCHW, [G,]OIHW) */
} sl_cpu_prim_arg;

/* What a builder produces: a primitive descriptor and its arguments. Where
 * the descriptor wants another layout than an argument's plain one (oneDNN's
 * fast convolutions want blocked layouts), dnnl.c reorders through the
 * stream's scratch memory. */
typedef struct sl_cpu_prim_spec {
    dnnl_primitive_desc_t pd; /* ownership passes to dnnl.c */
    unsigned n_args;
    sl_cpu_prim_arg args[SL_CPU_PRIM_MAX_ARGS];
} sl_cpu_prim_spec;

/* Builds the descriptor for call c on engine eng with attr (user scratchpad
 * mode; the builder must pass it to dnnl_primitive_desc_create). Returns
 * dnnl_success or the failing call's status; on failure nothing is owned. */
typedef dnnl_status_t (*sl_cpu_prim_build)(dnnl_engine_t eng, const_dnnl_primitive_attr_t attr,
                                           const sl_op_call *c, sl_cpu_prim_spec *spec);

/* Runs call c on the worker's oneDNN stream with x->threads threads: finds
 * the cached primitive for (c's op, shapes, dtypes, attributes, x->threads) or
 * builds it with build, points its memory objects at c's tensors (no copy
 * unless a layout differs), executes and waits. Weights with a version
 * (sl_op_call.in_version) are reordered into the primitive's layout once per
 * version and kept in the stream's own memory (at most 128 MB per stream,
 * beyond which they go through the scratch each launch). Creates x->dnnl
 * on first use. Returns SL_OK, SL_ENOMEM, SL_EUNSUPPORTED (no oneDNN implementation)
 * or SL_EDEVICE (oneDNN failed; logged). */
int sl_cpu_dnnl_run(sl_cpu_exec *x, const sl_op_call *c, sl_cpu_prim_build build);

/* Scratch memory for a kernel of this stream, at least `bytes`, aligned to
 * 64 bytes, valid until the next op: the stream's workspace when it has one
 * (SL_EEXHAUSTED, logged, when bytes exceed it), else the stream's own
 * buffer, grown on demand (SL_ENOMEM). The oneDNN primitives share it. */
int sl_cpu_scratch(sl_cpu_exec *x, size_t bytes, void **out);

/* A region of `bytes` for copies call c makes of its tensors (`what` names
 * them in errors): the front of the stream's workspace when it has one
 * (the caller then moves x->workspace past it for the op's own scratch),
 * else *own, grown on demand (*own_bytes its size; 256-byte aligned).
 * SL_EEXHAUSTED (logged, x->failure set) when the workspace is smaller,
 * SL_ENOMEM. */
int sl_cpu_front_region(sl_cpu_exec *x, const sl_op_call *c, const char *what, size_t bytes,
                        void **own, size_t *own_bytes, char **out);

/* conv2d_grad_filter for inputs with fewer channels than oneDNN's blocking
 * wants and one group (sl_cpu_conv_grad_filter_by_gemm tells): im2col and
 * OpenBLAS per sample (conv_gemm.c). Returns SL_OK or sl_cpu_scratch's
 * errors. The forward pass stays with oneDNN: its kernel reads a plain
 * one-channel input directly, and measured faster than im2col + GEMM. */
bool sl_cpu_conv_grad_filter_by_gemm(const sl_op_call *c);
int sl_cpu_conv_grad_filter_gemm(sl_cpu_exec *x, const sl_op_call *c);

/* Fills md with a dense layout of dims in dtype (enum sl_dtype; ndim 4 or
 * 5; tag nchw, oihw, goihw, or any). Returns the oneDNN status. */
dnnl_status_t sl_cpu_plain_md(dnnl_memory_desc_t *md, int ndim, const int64_t *dims, unsigned dtype,
                              dnnl_format_tag_t tag);
/* oneDNN's data type for a float dtype (enum sl_dtype). */
dnnl_data_type_t sl_cpu_dnnl_dt(unsigned dtype);

#endif
