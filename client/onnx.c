/* ONNX import: the public API (salus.h), the model's initialisers, inputs
 * and outputs, the table of named values and the upload of constants.
 * Nodes are folded (onnx_fold.c) or mapped to salus ops (onnx_ops.c) in the
 * graph's order, which ONNX requires to be topological. */
#include "onnx_internal.h"
#include "half.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int sl_onnx_fail(sl_onnx_imp *m, int code, const char *fmt, ...)
{
    if (m->code)
        return m->code;
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (m->node)
        snprintf(m->err, sizeof m->err, "node '%.64s' (%.32s): %s",
                 m->node->name && m->node->name[0] ? m->node->name : "(unnamed)",
                 m->node->op_type ? m->node->op_type : "?", what);
    else
        snprintf(m->err, sizeof m->err, "%s", what);
    m->code = code;
    return code;
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char) *s) * 1099511628211ull;
    return h;
}

struct ent *sl_onnx_find(sl_onnx_imp *m, const char *name)
{
    if (!m->n_slots || !name)
        return NULL;
    for (size_t i = hash_name(name) & (m->n_slots - 1);; i = (i + 1) & (m->n_slots - 1)) {
        uint32_t s = m->slots[i];
        if (!s)
            return NULL;
        if (strcmp(m->ents[s - 1].name, name) == 0)
            return &m->ents[s - 1];
    }
}

static int rehash(sl_onnx_imp *m, size_t n_slots)
{
    uint32_t *slots = sl_calloc(n_slots, sizeof *slots);
    if (!slots)
        return SL_ENOMEM;
    for (size_t e = 0; e < m->n_ents; e++) {
        size_t i = hash_name(m->ents[e].name) & (n_slots - 1);
        while (slots[i])
            i = (i + 1) & (n_slots - 1);
        slots[i] = (uint32_t) e + 1;
    }
    sl_free(m->slots);
    m->slots = slots;
    m->n_slots = n_slots;
    return SL_OK;
}

int sl_onnx_add(sl_onnx_imp *m, const char *name, struct ent **out)
{
    if (!name || !name[0])
        return sl_onnx_fail(m, SL_EUNSUPPORTED, "an empty value name");
    if (sl_onnx_find(m, name))
        return sl_onnx_fail(m, SL_EINVAL, "value '%.64s' is defined twice", name);
    if (m->n_ents >= SL_ONNX_MAX_ENTS)
        return sl_onnx_fail(m, SL_EINVAL, "more than %u values", SL_ONNX_MAX_ENTS);
    if (m->n_ents == m->cap_ents) {
        size_t cap = m->cap_ents ? m->cap_ents * 2 : 256;
        struct ent *e = sl_reallocarray(m->ents, cap, sizeof *e);
        if (!e)
            return sl_onnx_fail(m, SL_ENOMEM, "out of memory");
        m->ents = e;
        m->cap_ents = cap;
    }
    m->ents[m->n_ents++] = (struct ent){.name = name, .v = SALUS_NO_VALUE};
    if (2 * m->n_ents > m->n_slots) {
        if (rehash(m, m->n_slots ? 2 * m->n_slots : 512) != SL_OK) {
            m->n_ents--;
            return sl_onnx_fail(m, SL_ENOMEM, "out of memory");
        }
    } else {
        size_t i = hash_name(name) & (m->n_slots - 1);
        while (m->slots[i])
            i = (i + 1) & (m->n_slots - 1);
        m->slots[i] = (uint32_t) m->n_ents;
    }
    *out = &m->ents[m->n_ents - 1];
    return SL_OK;
}

int sl_onnx_const_alloc(sl_onnx_imp *m, struct ent *e, int ctype, unsigned ndim,
                        const int64_t *dims)
{
    if (ndim > SL_MAX_DIMS)
        return sl_onnx_fail(m, SL_EUNSUPPORTED, "'%.64s': rank %u, above %d", e->name, ndim,
                            SL_MAX_DIMS);
    uint64_t n = 1;
    for (unsigned d = 0; d < ndim; d++) {
        if (dims[d] < 0 || (dims[d] > 0 && n > SL_ONNX_MAX_CONST_ELEMS / (uint64_t) dims[d]))
            return sl_onnx_fail(m, SL_EINVAL, "'%.64s': bad or too large dims", e->name);
        n *= (uint64_t) dims[d];
        e->dims[d] = dims[d];
    }
    if (m->const_elems + n > SL_ONNX_MAX_CONST_ELEMS)
        return sl_onnx_fail(m, SL_EINVAL, "constants above %llu elements in all",
                            (unsigned long long) SL_ONNX_MAX_CONST_ELEMS);
    e->d = sl_calloc(n ? n : 1, sizeof *e->d);
    if (!e->d)
        return sl_onnx_fail(m, SL_ENOMEM, "out of memory");
    m->const_elems += n;
    e->kind = ENT_CONST;
    e->ctype = (uint8_t) ctype;
    e->ndim = (uint8_t) ndim;
    e->n = n;
    return SL_OK;
}

void sl_onnx_shape(sl_onnx_imp *m, const struct ent *e, sl_shape *s)
{
    if (e->kind == ENT_CONST) {
        *s = (sl_shape){.dtype =
                            (uint8_t) (e->ctype == CT_INT ? SL_I32 : sl_onnx_const_fdtype(m, e)),
                        .ndim = e->ndim};
        memcpy(s->dims, e->dims, sizeof s->dims);
        return;
    }
    int dtype, ndim;
    *s = (sl_shape){0};
    if (salus_graph_shape(m->g, e->v, &dtype, &ndim, s->dims) == SL_OK) {
        s->dtype = (uint8_t) dtype;
        s->ndim = (uint8_t) ndim;
    }
}

salus_value sl_onnx_value(sl_onnx_imp *m, struct ent *e)
{
    if (e->kind == ENT_VALUE || e->uploaded)
        return e->v;
    if (e->n == 0)
        return sl_onnx_fail(m, SL_EUNSUPPORTED,
                            "'%.64s' has no elements (salus has no empty "
                            "tensors)",
                            e->name),
               SALUS_NO_VALUE;
    uint32_t *buf = sl_reallocarray(NULL, e->n, 4);
    if (!buf)
        return sl_onnx_fail(m, SL_ENOMEM, "out of memory"), SALUS_NO_VALUE;
    unsigned fdtype = e->ctype == CT_INT ? SL_I32 : sl_onnx_const_fdtype(m, e);
    uint16_t *half = (uint16_t *) buf; /* narrowed in place: element i after i's bytes */
    for (uint64_t i = 0; i < e->n; i++) {
        if (e->ctype == CT_INT) {
            if (!(e->d[i] >= INT32_MIN && e->d[i] <= INT32_MAX)) {
                sl_free(buf);
                return sl_onnx_fail(m, SL_EUNSUPPORTED,
                                    "integer constant '%.64s' does not fit in i32", e->name),
                       SALUS_NO_VALUE;
            }
            int32_t v = (int32_t) e->d[i];
            memcpy(&buf[i], &v, 4);
        } else if (fdtype == SL_BF16) {
            half[i] = sl_bf16_from_f32((float) e->d[i]);
        } else if (fdtype == SL_F16) {
            half[i] = sl_f16_from_f32((float) e->d[i]);
        } else {
            float v = (float) e->d[i];
            memcpy(&buf[i], &v, 4);
        }
    }
    int dtype = (int) fdtype;
    salus_onnx_model *mm = m->model;
    uint64_t id;
    if (mm->n_tensors == m->cap_tensors) {
        size_t cap = m->cap_tensors ? 2 * m->cap_tensors : 64;
        uint64_t *t = sl_reallocarray(mm->tensors, cap, sizeof *t);
        if (!t) {
            sl_free(buf);
            return sl_onnx_fail(m, SL_ENOMEM, "out of memory"), SALUS_NO_VALUE;
        }
        mm->tensors = t;
        m->cap_tensors = cap;
    }
    int rc = m->s ? salus_tensor_create(m->s, dtype, e->ndim, e->dims, buf, &id) : SALUS_OK;
    if (!m->s)
        id = mm->n_tensors + 1; /* validation only: a placeholder */
    sl_free(buf);
    if (rc != SALUS_OK)
        return sl_onnx_fail(m, rc, "uploading '%.64s': %s", e->name,
                            m->s && m->s->client ? salus_last_error(m->s->client)
                                                 : salus_strerror(rc)),
               SALUS_NO_VALUE;
    mm->tensors[mm->n_tensors++] = id;
    e->v = salus_graph_param(m->g, id, dtype, e->ndim, e->dims);
    if (e->v == SALUS_NO_VALUE)
        return sl_onnx_fail(m, SL_EINVAL, "%s", salus_graph_error(m->g)), SALUS_NO_VALUE;
    e->uploaded = true;
    return e->v;
}

static int value_dtype(sl_onnx_imp *m, salus_value v)
{
    int dtype, ndim;
    int64_t dims[SL_MAX_DIMS];
    return salus_graph_shape(m->g, v, &dtype, &ndim, dims) == SL_OK ? dtype : -1;
}

static bool is_half(int dtype)
{
    return dtype == SL_BF16 || dtype == SL_F16;
}

/* v (a half value) as f32, one cast per value within a node. */
static salus_value upcast(sl_onnx_imp *m, salus_value v)
{
    for (unsigned i = 0; i < m->n_ups; i++)
        if (m->ups[0][i] == v)
            return m->ups[1][i];
    const int64_t to = SL_F32;
    salus_value c = salus_graph_op(m->g, "cast", 1, &v, 1, &to, 0, NULL);
    if (c != SALUS_NO_VALUE && m->n_ups < sizeof m->ups[0] / sizeof m->ups[0][0]) {
        m->ups[0][m->n_ups] = v;
        m->ups[1][m->n_ups++] = c;
    }
    return c;
}

salus_value sl_onnx_op(sl_onnx_imp *m, const char *type, unsigned n_in, const salus_value *in,
                       unsigned n_i, const int64_t *iattrs, unsigned n_f, const float *fattrs)
{
    for (unsigned i = 0; i < n_in; i++)
        if (in[i] == SALUS_NO_VALUE)
            return SALUS_NO_VALUE;
    /* PyTorch autocast's rule for ops without a half kernel: they compute
     * in f32 from f32 casts of their inputs. Inputs written in place keep
     * their dtype: a cast would update a copy. */
    unsigned id;
    salus_value cin[SL_OP_MAX_IN];
    const sl_op_def *d =
        n_in <= SL_OP_MAX_IN && sl_op_lookup(type, &id) == SL_OK ? sl_op_get(id) : NULL;
    if (d && !d->converts) {
        unsigned dts = d->dtypes ? d->dtypes : SL_DTS(SL_F32);
        for (unsigned i = 0; i < n_in && !m->up; i++) {
            int dt = value_dtype(m, in[i]);
            if (is_half(dt) && !((d->mutates >> i) & 1) && !(SL_DTS(dt) & dts)) {
                m->up = true;
                m->down = (uint8_t) dt;
                m->fdtype = SL_F32; /* constants made for the node from here on */
            }
        }
        for (unsigned i = 0; i < n_in; i++)
            cin[i] = m->up && !((d->mutates >> i) & 1) && is_half(value_dtype(m, in[i]))
                         ? upcast(m, in[i])
                         : in[i];
        in = cin;
    }
    salus_value v = salus_graph_op(m->g, type, n_in, in, n_i, iattrs, n_f, fattrs);
    if (v == SALUS_NO_VALUE)
        sl_onnx_fail(m, SL_EUNSUPPORTED, "as salus op %s: %s", type, salus_graph_error(m->g));
    return v;
}

/* The float dtype the graph declares for value `name` (value_info, graph
 * outputs), or -1. */
static int declared_dtype(const sl_onnx_imp *m, const char *name)
{
    const Onnx__GraphProto *g = m->graph;
    for (int pass = 0; g && pass < 2; pass++) {
        size_t n = pass ? g->n_output : g->n_value_info;
        Onnx__ValueInfoProto *const *vi = pass ? g->output : g->value_info;
        for (size_t i = 0; i < n; i++) {
            const Onnx__TypeProto *t = vi[i]->type;
            if (vi[i]->name && !strcmp(vi[i]->name, name) && t && t->tensor_type &&
                t->tensor_type->has_elem_type)
                return sl_onnx_float_dtype(t->tensor_type->elem_type);
        }
    }
    return -1;
}

salus_value sl_onnx_autocast_out(sl_onnx_imp *m, const char *name, salus_value v)
{
    if (!m->up || v == SALUS_NO_VALUE || value_dtype(m, v) != SL_F32)
        return v;
    int want = declared_dtype(m, name);
    if (want < 0)
        want = m->down;
    if (want == SL_F32)
        return v;
    const int64_t to = want;
    return sl_onnx_op(m, "cast", 1, &v, 1, &to, 0, NULL);
}

const Onnx__AttributeProto *sl_onnx_attr(const Onnx__NodeProto *n, const char *name)
{
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && strcmp(n->attribute[i]->name, name) == 0)
            return n->attribute[i];
    return NULL;
}

int64_t sl_onnx_attr_i(const Onnx__NodeProto *n, const char *name, int64_t dflt)
{
    const Onnx__AttributeProto *a = sl_onnx_attr(n, name);
    return a && a->has_i ? a->i : dflt;
}

float sl_onnx_attr_f(const Onnx__NodeProto *n, const char *name, float dflt)
{
    const Onnx__AttributeProto *a = sl_onnx_attr(n, name);
    return a && a->has_f ? a->f : dflt;
}

int sl_onnx_known_attrs(sl_onnx_imp *m, const Onnx__NodeProto *n, const char *const *known)
{
    for (size_t i = 0; i < n->n_attribute; i++) {
        const char *name = n->attribute[i]->name ? n->attribute[i]->name : "";
        bool ok = false;
        for (const char *const *k = known; *k && !ok; k++)
            ok = strcmp(*k, name) == 0;
        if (!ok)
            return sl_onnx_fail(m, SL_EUNSUPPORTED, "attribute '%.32s' is not supported", name);
    }
    return SL_OK;
}

int sl_onnx_axis(sl_onnx_imp *m, int64_t axis, unsigned rank, unsigned *out)
{
    if (axis < -(int64_t) rank || axis >= (int64_t) rank)
        return sl_onnx_fail(m, SL_EUNSUPPORTED, "axis %lld out of range for rank %u",
                            (long long) axis, rank);
    *out = (unsigned) (axis < 0 ? axis + rank : axis);
    return SL_OK;
}

int sl_onnx_float_dtype(int64_t onnx_type)
{
    switch (onnx_type) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
        return SL_F32;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
        return SL_F16;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
        return SL_BF16;
    default:
        return -1;
    }
}

int sl_onnx_tensor(sl_onnx_imp *m, const Onnx__TensorProto *t, struct ent *e)
{
    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return sl_onnx_fail(m, SL_EUNSUPPORTED, "tensor '%.64s': external data", e->name);
    int dt = t->has_data_type ? t->data_type : 0;
    size_t esize;
    int ctype = CT_INT;
    switch (dt) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
        esize = 4, ctype = CT_FLOAT;
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
        esize = 8, ctype = CT_FLOAT;
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
        esize = 2, ctype = CT_FLOAT;
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
        esize = 8;
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
        esize = 4;
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
        esize = 1;
        break;
    default:
        return sl_onnx_fail(m, SL_EUNSUPPORTED, "tensor '%.64s': data type %d", e->name, dt);
    }
    if (t->n_dims > SL_MAX_DIMS)
        return sl_onnx_fail(m, SL_EUNSUPPORTED, "tensor '%.64s': rank %zu, above %d", e->name,
                            t->n_dims, SL_MAX_DIMS);
    int rc = sl_onnx_const_alloc(m, e, ctype, (unsigned) t->n_dims, t->dims);
    if (rc)
        return rc;
    /* f32 and double are computed in f32; the half types keep theirs */
    int fdtype = sl_onnx_float_dtype(dt);
    if (ctype == CT_FLOAT)
        e->fdtype = (uint8_t) ((fdtype >= 0 ? fdtype : SL_F32) + 1);
    uint64_t n = e->n;
    if (t->has_raw_data) {
        if (t->raw_data.len != n * esize)
            return sl_onnx_fail(m, SL_EINVAL, "tensor '%.64s': %zu raw bytes for %llu elements",
                                e->name, t->raw_data.len, (unsigned long long) n);
        const uint8_t *p = t->raw_data.data;
        for (uint64_t i = 0; i < n; i++, p += esize) {
            switch (dt) {
            case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: {
                float v;
                memcpy(&v, p, 4);
                e->d[i] = v;
                break;
            }
            case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
                memcpy(&e->d[i], p, 8);
                break;
            case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
            case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: {
                uint16_t h;
                memcpy(&h, p, 2);
                e->d[i] = dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16 ? sl_f32_from_f16(h)
                                                                       : sl_f32_from_bf16(h);
                break;
            }
            case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: {
                int64_t v;
                memcpy(&v, p, 8);
                e->d[i] = (double) v;
                break;
            }
            case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: {
                int32_t v;
                memcpy(&v, p, 4);
                e->d[i] = v;
                break;
            }
            case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
                e->d[i] = (int8_t) *p;
                break;
            default:
                e->d[i] = *p;
            }
        }
        return SL_OK;
    }
    /* typed fields: float_data (float), double_data, int64_data, int32_data
     * (int32, f16 and bf16 bits, bool, int8, uint8) */
    size_t have;
    switch (dt) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
        have = t->n_float_data;
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
        have = t->n_double_data;
        break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
        have = t->n_int64_data;
        break;
    default:
        have = t->n_int32_data;
    }
    if (have != n)
        return sl_onnx_fail(m, SL_EINVAL, "tensor '%.64s': %zu values for %llu elements", e->name,
                            have, (unsigned long long) n);
    for (uint64_t i = 0; i < n; i++)
        switch (dt) {
        case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
            e->d[i] = t->float_data[i];
            break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
            e->d[i] = t->double_data[i];
            break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
            e->d[i] = (double) t->int64_data[i];
            break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
            e->d[i] = sl_f32_from_f16((uint16_t) t->int32_data[i]);
            break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
            e->d[i] = sl_f32_from_bf16((uint16_t) t->int32_data[i]);
            break;
        default:
            e->d[i] = t->int32_data[i];
        }
    return SL_OK;
}

/* A graph input: its element type and static shape (a symbolic leading dim
 * takes opts->batch). */
static int add_input(sl_onnx_imp *m, const Onnx__ValueInfoProto *vi)
{
    const char *name = vi->name ? vi->name : "";
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return sl_onnx_fail(m, SL_EUNSUPPORTED, "input '%.64s': not a tensor", name);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    int et = tt->has_elem_type ? tt->elem_type : 0, dtype = sl_onnx_float_dtype(et);
    bool boolean = et == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
    if (dtype < 0 && (et == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 ||
                      et == ONNX__TENSOR_PROTO__DATA_TYPE__INT32 || boolean))
        dtype = SALUS_I32; /* fed as i32: indices, and bools as 0 and 1 */
    else if (dtype < 0)
        return sl_onnx_fail(m, SL_EUNSUPPORTED,
                            "input '%.64s': element type %d (salus has float, float16, "
                            "bfloat16, and int32/int64/bool as i32)",
                            name, et);
    if (!tt->shape)
        return sl_onnx_fail(m, SL_EUNSUPPORTED, "input '%.64s': no shape (dynamic)", name);
    size_t nd = tt->shape->n_dim;
    if (nd > SL_MAX_DIMS)
        return sl_onnx_fail(m, SL_EUNSUPPORTED, "input '%.64s': rank %zu, above %d", name, nd,
                            SL_MAX_DIMS);
    int64_t dims[SL_MAX_DIMS];
    for (size_t d = 0; d < nd; d++) {
        const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[d];
        if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
            dim->dim_value >= 1)
            dims[d] = dim->dim_value;
        else if (d == 0 && m->batch > 0)
            dims[d] = m->batch;
        else
            return sl_onnx_fail(m, SL_EUNSUPPORTED,
                                "input '%.64s': dim %zu is dynamic or empty (give a batch in "
                                "the options for a symbolic leading dim)",
                                name, d);
    }
    struct ent *e;
    int rc = sl_onnx_add(m, name, &e);
    if (rc)
        return rc;
    e->kind = ENT_VALUE;
    e->boolean = boolean;
    e->v = salus_graph_input(m->g, dtype, (int) nd, dims);
    if (e->v == SALUS_NO_VALUE)
        return sl_onnx_fail(m, SL_EUNSUPPORTED, "input '%.64s': %s", name, salus_graph_error(m->g));
    salus_onnx_model *mm = m->model;
    struct onnx_io *io = &mm->in[mm->n_in++];
    io->name = sl_strdup(name);
    if (!io->name)
        return sl_onnx_fail(m, SL_ENOMEM, "out of memory");
    io->dtype = dtype;
    io->ndim = (int) nd;
    memcpy(io->dims, dims, nd * sizeof *dims);
    io->v = e->v;
    return SL_OK;
}

/* A graph output: an op's output of the graph, so that salus_run can fetch
 * it; constants and inputs get a copy op. */
static int add_output(sl_onnx_imp *m, const Onnx__ValueInfoProto *vi)
{
    const char *name = vi->name ? vi->name : "";
    struct ent *e = sl_onnx_find(m, name);
    if (!e)
        return sl_onnx_fail(m, SL_EINVAL, "output '%.64s' is never computed", name);
    /* a constant output without a dtype of its own takes the declared one */
    const Onnx__TypeProto *tp = vi->type;
    int declared = tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && tp->tensor_type &&
                           tp->tensor_type->has_elem_type
                       ? sl_onnx_float_dtype(tp->tensor_type->elem_type)
                       : -1;
    m->fdtype = (uint8_t) (declared >= 0 ? declared : SL_F32);
    salus_value v = sl_onnx_value(m, e);
    if (v == SALUS_NO_VALUE)
        return m->code ? m->code : SL_EINVAL;
    bool is_input = e->kind == ENT_CONST;
    for (unsigned i = 0; i < m->model->n_in; i++)
        is_input |= m->model->in[i].v == v;
    for (unsigned i = 0; i < m->model->n_out; i++)
        is_input |= m->model->out[i].v == v; /* the same value twice */
    if (is_input && (v = sl_onnx_op(m, "copy", 1, &v, 0, NULL, 0, NULL)) == SALUS_NO_VALUE)
        return m->code;
    salus_onnx_model *mm = m->model;
    struct onnx_io *io = &mm->out[mm->n_out++];
    io->name = sl_strdup(name);
    if (!io->name)
        return sl_onnx_fail(m, SL_ENOMEM, "out of memory");
    io->v = v;
    if (salus_graph_shape(m->g, v, &io->dtype, &io->ndim, io->dims) != SL_OK)
        return sl_onnx_fail(m, SL_EINTERNAL, "output '%.64s' has no shape", name);
    return SL_OK;
}

static int import_graph(sl_onnx_imp *m, const Onnx__ModelProto *model)
{
    for (size_t i = 0; i < model->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = model->opset_import[i];
        if (!o->domain || !o->domain[0] || strcmp(o->domain, "ai.onnx") == 0)
            m->opset = o->has_version ? o->version : 0;
    }
    if (m->opset < 1 || m->opset > 17)
        return sl_onnx_fail(m, SL_EUNSUPPORTED,
                            "opset %lld of the default domain (salus reads "
                            "opsets 1 to 17)",
                            (long long) m->opset);
    const Onnx__GraphProto *g = model->graph;
    if (!g)
        return sl_onnx_fail(m, SL_EINVAL, "the model has no graph");
    m->graph = g;
    int rc;
    for (size_t i = 0; i < g->n_initializer; i++) {
        struct ent *e;
        if ((rc = sl_onnx_add(m, g->initializer[i]->name, &e)) ||
            (rc = sl_onnx_tensor(m, g->initializer[i], e)))
            return rc;
    }
    salus_onnx_model *mm = m->model;
    mm->in = sl_calloc(g->n_input + 1, sizeof *mm->in);
    mm->out = sl_calloc(g->n_output + 1, sizeof *mm->out);
    if (!mm->in || !mm->out)
        return sl_onnx_fail(m, SL_ENOMEM, "out of memory");
    for (size_t i = 0; i < g->n_input; i++) {
        /* an input with an initialiser of the same name is a constant with
         * a default (IR < 4): the initialiser is used */
        if (sl_onnx_find(m, g->input[i]->name))
            continue;
        if ((rc = add_input(m, g->input[i])))
            return rc;
    }
    if (g->n_node && sl_onnx_fusable(g) && !(m->skip = sl_calloc(g->n_node, sizeof *m->skip)))
        return sl_onnx_fail(m, SL_ENOMEM, "out of memory");
    for (size_t i = 0; i < g->n_node; i++) {
        const Onnx__NodeProto *n = g->node[i];
        if (m->skip && m->skip[i])
            continue;
        m->node = n;
        if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx") != 0)
            return sl_onnx_fail(m, SL_EUNSUPPORTED, "domain '%.32s' is not supported", n->domain);
        if (!n->op_type)
            return sl_onnx_fail(m, SL_EINVAL, "no op type");
        bool folded = false;
        if ((rc = sl_onnx_fold(m, n, &folded)))
            return rc;
        if (!folded && (rc = sl_onnx_map(m, n)))
            return rc;
    }
    m->node = NULL;
    if (g->n_output == 0)
        return sl_onnx_fail(m, SL_EINVAL, "the graph has no outputs");
    for (size_t i = 0; i < g->n_output; i++)
        if ((rc = add_output(m, g->output[i])))
            return rc;
    return SL_OK;
}

void salus_onnx_free(salus_onnx_model *mm)
{
    if (!mm)
        return;
    salus_graph_free(mm->graph);
    for (size_t i = 0; i < mm->n_tensors; i++)
        (void) salus_tensor_free(mm->session, mm->tensors[i]);
    for (unsigned i = 0; mm->in && i < mm->n_in; i++)
        sl_free(mm->in[i].name);
    for (unsigned i = 0; mm->out && i < mm->n_out; i++)
        sl_free(mm->out[i].name);
    sl_free(mm->in);
    sl_free(mm->out);
    sl_free(mm->tensors);
    sl_free(mm);
}

static void set_error(salus_session *s, const char *msg)
{
    if (s->client)
        snprintf(s->client->last_error, sizeof s->client->last_error, "%s", msg);
}

/* Imports a model: with a session, uploads its constants and registers the
 * graph; without one (salus_onnx_check_buffer), only validates, giving
 * constants placeholder tensor ids. On failure err holds the reason. */
static int import(salus_session *s, const void *data, size_t len, const salus_onnx_options *opts,
                  salus_onnx_model **out, char *err, size_t errlen)
{
    snprintf(err, errlen, "out of memory");
    if (!data || len > SL_ONNX_MAX_FILE) {
        snprintf(err, errlen, "no data, or more than 2 GiB");
        return SALUS_EINVAL;
    }
    int wrc = sl_onnx_wire_check(data, len, err, errlen);
    if (wrc != SL_OK)
        return wrc;
    Onnx__ModelProto *model = onnx__model_proto__unpack(NULL, len, data);
    if (!model) {
        snprintf(err, errlen, "not an ONNX model (protobuf decoding failed)");
        return SALUS_EINVAL;
    }
    sl_onnx_imp m = {.s = s, .batch = opts ? opts->batch : 0};
    salus_onnx_model *mm = sl_calloc(1, sizeof *mm);
    m.g = salus_graph_new();
    int rc = SL_OK;
    if (!mm || !m.g) {
        salus_graph_free(m.g);
        sl_free(mm);
        onnx__model_proto__free_unpacked(model, NULL);
        return SALUS_ENOMEM;
    }
    mm->session = s;
    mm->graph = m.g;
    m.model = mm;
    rc = import_graph(&m, model);
    if (rc == SL_OK && salus_graph_error(m.g))
        rc = sl_onnx_fail(&m, SL_EUNSUPPORTED, "%s", salus_graph_error(m.g));
    if (rc == SL_OK && s && (rc = salus_graph_register(s, m.g, NULL)) != SALUS_OK)
        sl_onnx_fail(&m, rc, "registering the graph: %s",
                     s->client ? salus_last_error(s->client) : salus_strerror(rc));
    for (size_t i = 0; i < m.n_ents; i++)
        sl_free(m.ents[i].d);
    sl_free(m.ents);
    sl_free(m.slots);
    sl_free(m.skip);
    onnx__model_proto__free_unpacked(model, NULL);
    if (rc != SL_OK || !out) {
        snprintf(err, errlen, "%s", m.err);
        if (!s)
            mm->n_tensors = 0; /* placeholders: nothing to free in a server */
        salus_onnx_free(mm);
        return rc;
    }
    *out = mm;
    return SALUS_OK;
}

int salus_onnx_load_buffer(salus_session *s, const void *data, size_t len,
                           const salus_onnx_options *opts, salus_onnx_model **out)
{
    if (!s || !out)
        return SALUS_EINVAL;
    char err[512];
    int rc = import(s, data, len, opts, out, err, sizeof err);
    if (rc != SALUS_OK)
        set_error(s, err); /* after the import's own requests, which reset it */
    return rc;
}

int salus_onnx_check_buffer(const void *data, size_t len, const salus_onnx_options *opts, char *why,
                            size_t why_len)
{
    char err[512];
    int rc = import(NULL, data, len, opts, NULL, err, sizeof err);
    if (why && why_len)
        snprintf(why, why_len, "%s", rc == SALUS_OK ? "" : err);
    return rc;
}

int salus_onnx_load(salus_session *s, const char *path, const salus_onnx_options *opts,
                    salus_onnx_model **out)
{
    if (!s || !path || !out)
        return SALUS_EINVAL;
    FILE *f = fopen(path, "rb");
    char msg[512];
    if (!f) {
        snprintf(msg, sizeof msg, "cannot open %.400s: %s", path, strerror(errno));
        set_error(s, msg);
        return SALUS_EINVAL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (uint64_t) st.st_size > SL_ONNX_MAX_FILE) {
        fclose(f);
        snprintf(msg, sizeof msg, "%.400s: not a regular file of 1 byte to 2 GiB", path);
        set_error(s, msg);
        return SALUS_EINVAL;
    }
    void *buf = sl_malloc((size_t) st.st_size);
    if (!buf) {
        fclose(f);
        return SALUS_ENOMEM;
    }
    size_t got = fread(buf, 1, (size_t) st.st_size, f);
    fclose(f);
    int rc =
        got == (size_t) st.st_size ? salus_onnx_load_buffer(s, buf, got, opts, out) : SALUS_EINVAL;
    if (got != (size_t) st.st_size) {
        snprintf(msg, sizeof msg, "%.400s: short read", path);
        set_error(s, msg);
    }
    sl_free(buf);
    return rc;
}

unsigned salus_onnx_n_inputs(const salus_onnx_model *mm)
{
    return mm->n_in;
}

unsigned salus_onnx_n_outputs(const salus_onnx_model *mm)
{
    return mm->n_out;
}

static int io_info(const struct onnx_io *io, unsigned n, unsigned i, const char **name, int *dtype,
                   int *ndim, int64_t *dims)
{
    if (i >= n)
        return SALUS_EINVAL;
    if (name)
        *name = io[i].name;
    if (dtype)
        *dtype = io[i].dtype;
    if (ndim)
        *ndim = io[i].ndim;
    if (dims)
        memcpy(dims, io[i].dims, (size_t) io[i].ndim * sizeof *dims);
    return SALUS_OK;
}

int salus_onnx_input(const salus_onnx_model *mm, unsigned i, const char **name, int *dtype,
                     int *ndim, int64_t *dims)
{
    return io_info(mm->in, mm->n_in, i, name, dtype, ndim, dims);
}

int salus_onnx_output(const salus_onnx_model *mm, unsigned i, const char **name, int *dtype,
                      int *ndim, int64_t *dims)
{
    return io_info(mm->out, mm->n_out, i, name, dtype, ndim, dims);
}

const salus_graph *salus_onnx_graph(const salus_onnx_model *mm)
{
    return mm->graph;
}

salus_value salus_onnx_output_value(const salus_onnx_model *mm, unsigned i)
{
    return mm && i < mm->n_out ? mm->out[i].v : SALUS_NO_VALUE;
}

int salus_onnx_run(salus_onnx_model *mm, const void *const *inputs, void *const *outputs)
{
    salus_value fetch[mm->n_out ? mm->n_out : 1];
    for (unsigned i = 0; i < mm->n_out; i++)
        fetch[i] = mm->out[i].v;
    return salus_run(mm->session, mm->graph, inputs, mm->n_out, fetch, outputs);
}
