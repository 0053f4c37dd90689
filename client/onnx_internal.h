/* Internals of the ONNX importer (onnx.c: model, initialisers, inputs and
 * outputs, the public API; onnx_fold.c: constants evaluated on the host;
 * onnx_ops.c: nodes mapped to salus ops).
 *
 * Every ONNX value name maps to an entry: a constant known at import (an
 * initialiser, a Constant node, or shape arithmetic folded on the host), or
 * a value of the salus graph. A constant that a salus op needs becomes a
 * persistent tensor of the session (uploaded once, on first use).
 *
 * The model file is untrusted input: every count, index, axis and size read
 * from it is checked before use, and constants are held within a budget. */
#ifndef SL_CLIENT_ONNX_INTERNAL_H
#define SL_CLIENT_ONNX_INTERNAL_H

#include "client_internal.h"
#include "onnx.pb-c.h"
#include "ops_axes.h"

#include <stdbool.h>
#include <stdint.h>

/* Largest model file read, and most elements held as host constants in all
 * (initialisers included; they are kept as double while importing). */
#define SL_ONNX_MAX_FILE (1ull << 31)
#define SL_ONNX_MAX_CONST_ELEMS (1ull << 28)
/* Deepest nesting of messages accepted (onnx_wire.c): a graph inside a
 * node's attribute costs 4 levels. */
#define SL_ONNX_MAX_DEPTH 64
/* Most value names one model may define. */
#define SL_ONNX_MAX_ENTS (1u << 20)

enum ent_kind { ENT_CONST, ENT_VALUE };
/* A constant's element type: floats (float, double, f16 and bf16 read as
 * float) or integers (any width, bool). */
enum const_type { CT_FLOAT, CT_INT };

struct ent {
    const char *name; /* owned by the decoded model */
    uint8_t kind;
    /* ENT_CONST */
    uint8_t ctype;
    /* CT_FLOAT: the dtype it is uploaded in, enum sl_dtype + 1, where the
     * model says it (an initialiser, a Cast, what is folded from them); 0
     * where it follows the node using it (constants made while importing:
     * f32 beside f32 values, f16 beside f16 ones), sl_onnx_imp.fdtype */
    uint8_t fdtype;
    uint8_t ndim;
    int64_t dims[SL_MAX_DIMS];
    uint64_t n;    /* elements */
    double *d;     /* n values, owned */
    bool uploaded; /* v is its persistent tensor */
    /* ENT_VALUE: its ONNX type is bool (carried as an i32 of 0s and 1s) */
    bool boolean;
    salus_value v; /* ENT_VALUE, or an uploaded constant */
};

struct onnx_io {
    char *name;
    int dtype, ndim;
    int64_t dims[SL_MAX_DIMS];
    salus_value v;
};

struct salus_onnx_model {
    salus_session *session;
    salus_graph *graph;
    uint64_t *tensors; /* persistent tensors made for constants */
    size_t n_tensors;
    struct onnx_io *in, *out;
    unsigned n_in, n_out;
};

typedef struct sl_onnx_imp {
    salus_session *s;
    salus_graph *g;
    salus_onnx_model *model;
    int64_t opset; /* of the default domain */
    int64_t batch; /* for a symbolic leading input dim; 0: refuse */
    /* the float dtype of the node being mapped (its first float graph
     * value's, else SL_F32): constants without a dtype of their own take it */
    uint8_t fdtype;
    /* Autocast of the node being mapped: set once one of its ops computes
     * in f32 only and was given the half dtype `down`; from then on its ops
     * get f32 inputs, and its float outputs are cast back to the dtype the
     * graph declares for them (else `down`). ups[] caches the f32 casts of
     * its half values. */
    bool up;
    uint8_t down;
    unsigned n_ups;
    salus_value ups[2][8]; /* [0]: half value, [1]: its f32 cast */
    struct ent *ents;
    size_t n_ents, cap_ents;
    uint32_t *slots; /* open-addressing hash of names: entry index + 1, 0 empty */
    size_t n_slots;
    uint64_t const_elems;
    size_t cap_tensors;
    int code;      /* first error's code */
    char err[512]; /* first error */
    /* per node of the graph: already imported, in a pattern fused with an
     * earlier node (onnx_fuse.c); NULL when the graph is not fused */
    bool *skip;
    const Onnx__NodeProto *node;   /* the node being imported (for messages) */
    const Onnx__GraphProto *graph; /* the graph being imported (uses of a name) */
} sl_onnx_imp;

/* Walks the wire format of a serialised ModelProto along the paths where
 * onnx.proto nests without bound, before protobuf-c (which recurses) decodes
 * it. SL_OK; SL_EINVAL (malformed) or SL_EUNSUPPORTED (nested deeper than
 * SL_ONNX_MAX_DEPTH) with the reason in err. Never allocates. */
int sl_onnx_wire_check(const void *data, size_t len, char *err, size_t errlen);

/* Records the first error (code, message naming the current node). Returns
 * code. */
__attribute__((format(printf, 3, 4))) int sl_onnx_fail(sl_onnx_imp *m, int code, const char *fmt,
                                                       ...);
/* The entry named name, or NULL. */
struct ent *sl_onnx_find(sl_onnx_imp *m, const char *name);
/* Adds an entry (a name may be defined once). Errors: EINVAL (defined
 * twice), ENOMEM. On success *out points to it (valid until the next add). */
int sl_onnx_add(sl_onnx_imp *m, const char *name, struct ent **out);
/* Makes a constant entry's storage: n elements (budget-checked). */
int sl_onnx_const_alloc(sl_onnx_imp *m, struct ent *e, int ctype, unsigned ndim,
                        const int64_t *dims);
/* The graph value of an entry, uploading a constant first (i32 when it is
 * an integer constant, checked to fit). SALUS_NO_VALUE on error. */
salus_value sl_onnx_value(sl_onnx_imp *m, struct ent *e);
/* The float dtype a CT_FLOAT constant is uploaded in (ent.fdtype). */
static inline unsigned sl_onnx_const_fdtype(const sl_onnx_imp *m, const struct ent *e)
{
    return e->fdtype ? e->fdtype - 1u : m->fdtype;
}
/* The salus dtype of an ONNX TensorProto data type that salus computes
 * in (FLOAT, FLOAT16, BFLOAT16), or -1. */
int sl_onnx_float_dtype(int64_t onnx_type);
/* The shape of an entry (either kind). */
void sl_onnx_shape(sl_onnx_imp *m, const struct ent *e, sl_shape *s);
/* Adds one salus op; SALUS_NO_VALUE with the builder's error recorded.
 * An op that computes in f32 only (the registry's dtypes) given a half
 * input starts the node's autocast (sl_onnx_imp.up): its half inputs, and
 * those of the node's later ops, are cast to f32 first. */
salus_value sl_onnx_op(sl_onnx_imp *m, const char *type, unsigned n_in, const salus_value *in,
                       unsigned n_i, const int64_t *iattrs, unsigned n_f, const float *fattrs);

/* v as the node's output `name`: under the node's autocast, an f32 value
 * cast to the dtype the graph declares for name (value_info or graph
 * output), else to the node's half dtype; otherwise v itself. */
salus_value sl_onnx_autocast_out(sl_onnx_imp *m, const char *name, salus_value v);

/* The node's attribute named name, or NULL. */
const Onnx__AttributeProto *sl_onnx_attr(const Onnx__NodeProto *n, const char *name);
/* Copies the first n of a's ints into dst; n 0 copies nothing (protobuf-c
 * leaves an empty list's array NULL, which memcpy must not be given). */
static inline void sl_onnx_ints(int64_t *dst, const Onnx__AttributeProto *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = a->ints[i];
}
/* Integer attribute or dflt. */
int64_t sl_onnx_attr_i(const Onnx__NodeProto *n, const char *name, int64_t dflt);
float sl_onnx_attr_f(const Onnx__NodeProto *n, const char *name, float dflt);
/* Refuses (EUNSUPPORTED) a node carrying an attribute not in the
 * NULL-terminated list `known`. */
int sl_onnx_known_attrs(sl_onnx_imp *m, const Onnx__NodeProto *n, const char *const *known);
/* Decodes a TensorProto into a constant entry e (already added). */
int sl_onnx_tensor(sl_onnx_imp *m, const Onnx__TensorProto *t, struct ent *e);

/* Folds node n when it is shape arithmetic or all its inputs are
 * constants and its op can be evaluated on the host. *folded says whether
 * it did (its outputs then are constant entries). */
int sl_onnx_fold(sl_onnx_imp *m, const Onnx__NodeProto *n, bool *folded);
/* Whether graph g may have patterns fused (onnx_fuse.c): no node has a
 * subgraph, which could read values the pattern matcher does not see, and
 * every output, node op type and attribute has a name to compare. */
bool sl_onnx_fusable(const Onnx__GraphProto *g);
/* Imports node n together with the nodes after it when they are one of
 * the patterns PyTorch's exporter writes for layer norm and GELU, as one
 * salus op; *fused says whether it did (the pattern's last output is then
 * defined and its other nodes marked in m->skip). Errors as sl_onnx_map. */
int sl_onnx_fuse(sl_onnx_imp *m, const Onnx__NodeProto *n, bool *fused);
/* Maps node n onto salus ops (its outputs then are graph values). Errors:
 * EUNSUPPORTED naming the op and what is missing; EINVAL. */
int sl_onnx_map(sl_onnx_imp *m, const Onnx__NodeProto *n);

/* Normalises an axis in [-rank, rank) to [0, rank); EUNSUPPORTED (named)
 * when out of range. */
int sl_onnx_axis(sl_onnx_imp *m, int64_t axis, unsigned rank, unsigned *out);

#endif
