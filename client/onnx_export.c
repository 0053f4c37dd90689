/* Export of an nn model to ONNX (opset 13, IR version 8): its inference
 * forward pass with the weights as initialisers, read from the server at
 * the time of the call. The graph's input "input" is [N, sample...] and
 * its output "logits" [N, classes], N symbolic. Layers map one to one:
 * dense -> Gemm (B is the [in, out] weight as it is, no transB), conv2d ->
 * Conv (with its bias, when it has one), maxpool -> MaxPool, avgpool -> AveragePool
 * (count_include_pad 0), batchnorm -> BatchNormalization (running
 * statistics, epsilon 1e-5, momentum 0.9 in ONNX's form), relu, sigmoid,
 * tanh, flatten -> Flatten(axis 1); a residual block's begin and shortcut
 * markers emit nothing and its end an Add(main path, shortcut). The ReLU
 * that the nn helpers run after
 * a max pool is written where the layer was added: both orders compute the
 * same function.
 *
 * onnx.proto is Debian libonnx-dev's, compiled by protoc-c at build time. */
#include "nn_internal.h"

#include "onnx.pb-c.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define OPSET 13
#define IR_VERSION 8
#define MAX_NODES (MAX_LAYERS)
#define MAX_INITS (MAX_LAYERS * 4)

/* Everything the model proto points at, freed together. */
typedef struct ex {
    salus_model *m;
    Onnx__NodeProto nodes[MAX_NODES], *node_ptrs[MAX_NODES];
    Onnx__AttributeProto attrs[MAX_NODES * 4], *attr_ptrs[MAX_NODES * 4];
    char *node_io[MAX_NODES * 6];
    char names[MAX_NODES * 8][64];
    Onnx__TensorProto inits[MAX_INITS], *init_ptrs[MAX_INITS];
    int64_t init_dims[MAX_INITS][4];
    float *init_data[MAX_INITS];
    int64_t ints[MAX_NODES * 4][4];
    unsigned n_nodes, n_attrs, n_io, n_names, n_inits, n_ints;
    char err[256];
} ex;

static char *name(ex *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *name(ex *e, const char *fmt, ...)
{
    char *n = e->names[e->n_names++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n, sizeof e->names[0], fmt, ap);
    va_end(ap);
    return n;
}

static Onnx__NodeProto *node(ex *e, const char *op, unsigned n_in, char **in, char *out)
{
    Onnx__NodeProto *n = &e->nodes[e->n_nodes];
    onnx__node_proto__init(n);
    e->node_ptrs[e->n_nodes++] = n;
    n->op_type = (char *) op;
    n->name = name(e, "%s_%u", op, e->n_nodes);
    n->n_input = n_in;
    n->input = &e->node_io[e->n_io];
    for (unsigned i = 0; i < n_in; i++)
        e->node_io[e->n_io++] = in[i];
    n->n_output = 1;
    n->output = &e->node_io[e->n_io];
    e->node_io[e->n_io++] = out;
    n->attribute = &e->attr_ptrs[e->n_attrs];
    return n;
}

static Onnx__AttributeProto *attr(ex *e, Onnx__NodeProto *n, const char *nm)
{
    Onnx__AttributeProto *a = &e->attrs[e->n_attrs];
    onnx__attribute_proto__init(a);
    e->attr_ptrs[e->n_attrs++] = a;
    n->n_attribute++;
    a->name = (char *) nm;
    return a;
}

static void attr_ints(ex *e, Onnx__NodeProto *n, const char *nm, int count, int64_t v0, int64_t v1,
                      int64_t v2, int64_t v3)
{
    Onnx__AttributeProto *a = attr(e, n, nm);
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    int64_t *v = e->ints[e->n_ints++];
    v[0] = v0, v[1] = v1, v[2] = v2, v[3] = v3;
    a->n_ints = (size_t) count;
    a->ints = v;
}

static void attr_int(ex *e, Onnx__NodeProto *n, const char *nm, int64_t v)
{
    Onnx__AttributeProto *a = attr(e, n, nm);
    a->has_type = a->has_i = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->i = v;
}

static void attr_float(ex *e, Onnx__NodeProto *n, const char *nm, float v)
{
    Onnx__AttributeProto *a = attr(e, n, nm);
    a->has_type = a->has_f = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    a->f = v;
}

/* An initialiser named nm holding session tensor `tensor` of shape
 * dims[0..ndim). */
static char *init(ex *e, const char *nm, uint64_t tensor, int ndim, const int64_t *dims)
{
    Onnx__TensorProto *t = &e->inits[e->n_inits];
    onnx__tensor_proto__init(t);
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        e->init_dims[e->n_inits][d] = dims[d];
        n *= (size_t) dims[d];
    }
    float *data = sl_calloc(n, sizeof *data);
    e->init_data[e->n_inits] = data;
    e->init_ptrs[e->n_inits++] = t;
    if (!data) {
        snprintf(e->err, sizeof e->err, "out of memory");
        return NULL;
    }
    int rc = salus_tensor_read(e->m->session, tensor, data, n * sizeof *data);
    if (rc) {
        snprintf(e->err, sizeof e->err, "reading %s: %s", nm,
                 salus_last_error(e->m->session->client));
        return NULL;
    }
    t->name = (char *) nm; /* in e->names already */
    t->n_dims = (size_t) ndim;
    t->dims = e->init_dims[e->n_inits - 1];
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t->n_float_data = n;
    t->float_data = data;
    return t->name;
}

/* The nodes of every layer; returns the name of the last output. */
static char *layers(ex *e)
{
    salus_model *m = e->m;
    char *x = "input";
    /* open residual blocks: their input and, past the shortcut marker, the
     * main path's output (as nn.c's forward) */
    char *block_in[MAX_RES_DEPTH], *block_main[MAX_RES_DEPTH];
    int depth = 0;
    for (int i = 0; i < m->n_layers && !e->err[0]; i++) {
        const layer *l = &m->layers[i];
        if (l->kind == L_RES_BEGIN) { /* markers emit no node */
            block_main[depth] = NULL;
            block_in[depth++] = x;
            continue;
        }
        if (l->kind == L_RES_SHORTCUT) {
            block_main[depth - 1] = x;
            x = block_in[depth - 1];
            continue;
        }
        char *y = i == m->n_layers - 1 ? "logits" : name(e, "x%d", i + 1);
        const param *w = l->param[0] >= 0 ? &m->params[l->param[0]] : NULL;
        const param *b = l->param[1] >= 0 ? &m->params[l->param[1]] : NULL;
        char *wn = w ? init(e, name(e, "%d.weight", i), w->tensor, w->ndim, w->dims) : NULL;
        char *bn = b ? init(e, name(e, "%d.bias", i), b->tensor, b->ndim, b->dims) : NULL;
        if ((w && !wn) || (b && !bn))
            return NULL;
        Onnx__NodeProto *n;
        switch (l->kind) {
        case L_DENSE:
            node(e, "Gemm", 3, (char *[]){x, wn, bn}, y);
            break;
        case L_CONV:
            n = node(e, "Conv", bn ? 3 : 2, (char *[]){x, wn, bn}, y);
            attr_ints(e, n, "kernel_shape", 2, l->kernel, l->kernel, 0, 0);
            attr_ints(e, n, "strides", 2, l->stride, l->stride, 0, 0);
            attr_ints(e, n, "pads", 4, l->pad, l->pad, l->pad, l->pad);
            break;
        case L_MAXPOOL:
        case L_AVGPOOL:
            n = node(e, l->kind == L_MAXPOOL ? "MaxPool" : "AveragePool", 1, &x, y);
            attr_ints(e, n, "kernel_shape", 2, l->kernel, l->kernel, 0, 0);
            attr_ints(e, n, "strides", 2, l->stride, l->stride, 0, 0);
            if (l->kind == L_AVGPOOL)
                attr_int(e, n, "count_include_pad", 0);
            break;
        case L_BN: {
            char *rm = init(e, name(e, "%d.running_mean", i), l->running_mean, 1, w->dims);
            char *rv = init(e, name(e, "%d.running_var", i), l->running_var, 1, w->dims);
            if (!rm || !rv)
                return NULL;
            n = node(e, "BatchNormalization", 5, (char *[]){x, wn, bn, rm, rv}, y);
            attr_float(e, n, "epsilon", BN_EPSILON);
            attr_float(e, n, "momentum", BN_MOMENTUM);
            break;
        }
        case L_RELU:
            node(e, "Relu", 1, &x, y);
            break;
        case L_SIGMOID:
            node(e, "Sigmoid", 1, &x, y);
            break;
        case L_TANH:
            node(e, "Tanh", 1, &x, y);
            break;
        case L_FLATTEN:
            n = node(e, "Flatten", 1, &x, y);
            attr_int(e, n, "axis", 1);
            break;
        case L_RES_END:
            depth--;
            node(e, "Add", 2,
                 block_main[depth] ? (char *[]){block_main[depth], x}
                                   : (char *[]){x, block_in[depth]},
                 y);
            break;
        case L_RES_BEGIN: /* handled above */
        case L_RES_SHORTCUT:
            break;
        }
        x = y;
    }
    return e->err[0] ? NULL : x;
}

/* A float tensor's value info [N, dims...], N symbolic. */
static void value_info(Onnx__ValueInfoProto *v, Onnx__TypeProto *tp, Onnx__TypeProto__Tensor *tt,
                       Onnx__TensorShapeProto *sp, Onnx__TensorShapeProto__Dimension *dim,
                       Onnx__TensorShapeProto__Dimension **dim_ptrs, char *nm, int ndim,
                       const int64_t *dims)
{
    onnx__value_info_proto__init(v);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sp);
    v->name = nm;
    v->type = tp;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    tt->has_elem_type = 1;
    tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tt->shape = sp;
    sp->n_dim = (size_t) ndim + 1;
    sp->dim = dim_ptrs;
    for (int d = 0; d <= ndim; d++) {
        onnx__tensor_shape_proto__dimension__init(&dim[d]);
        dim_ptrs[d] = &dim[d];
        if (d == 0) {
            dim[d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dim[d].dim_param = "N";
        } else {
            dim[d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dim[d].dim_value = dims[d - 1];
        }
    }
}

static int write_file(const char *path, const uint8_t *buf, size_t n, char *err, size_t len)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long) getpid()) >= (int) sizeof tmp) {
        snprintf(err, len, "path too long");
        return SL_EINVAL;
    }
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(buf, 1, n, f) == n;
    ok = f && fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) == 0)
        return SL_OK;
    snprintf(err, len, "writing %s failed", path);
    unlink(tmp);
    return SL_EINVAL;
}

int salus_model_export_onnx(salus_model *m, const char *path)
{
    if (!m->train || !path)
        return sl_nn_refuse(m, SL_EINVAL, "export: the model is not compiled, or no path");
    ex *e = sl_calloc(1, sizeof *e);
    if (!e)
        return SL_ENOMEM;
    e->m = m;
    int rc = SL_OK;
    char *out = layers(e);
    if (!out) {
        rc = sl_nn_refuse(m, SL_EINVAL, "export: %s", e->err);
    } else {
        const layer *last = &m->layers[m->n_layers - 1];
        Onnx__ValueInfoProto vin, vout, *vin_p = &vin, *vout_p = &vout;
        Onnx__TypeProto tin, tout;
        Onnx__TypeProto__Tensor ttin, ttout;
        Onnx__TensorShapeProto sin, sout;
        Onnx__TensorShapeProto__Dimension din[4], dout[4], *dinp[4], *doutp[4];
        value_info(&vin, &tin, &ttin, &sin, din, dinp, "input", m->sample_ndim, m->sample);
        value_info(&vout, &tout, &ttout, &sout, dout, doutp, out, last->out_ndim, last->out);
        Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
        g.name = "salus_model";
        g.n_node = e->n_nodes;
        g.node = e->node_ptrs;
        g.n_initializer = e->n_inits;
        g.initializer = e->init_ptrs;
        g.n_input = 1;
        g.input = &vin_p;
        g.n_output = 1;
        g.output = &vout_p;
        Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT, *opset_p = &opset;
        opset.domain = "";
        opset.has_version = 1;
        opset.version = OPSET;
        Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
        model.has_ir_version = 1;
        model.ir_version = IR_VERSION;
        model.n_opset_import = 1;
        model.opset_import = &opset_p;
        model.producer_name = "salus";
        model.graph = &g;
        size_t n = onnx__model_proto__get_packed_size(&model);
        uint8_t *buf = sl_calloc(n ? n : 1, 1);
        if (!buf) {
            rc = SL_ENOMEM;
        } else {
            onnx__model_proto__pack(&model, buf);
            char err[256];
            if ((rc = write_file(path, buf, n, err, sizeof err)) != SL_OK)
                sl_nn_refuse(m, rc, "export: %s", err);
            sl_free(buf);
        }
    }
    for (unsigned i = 0; i < e->n_inits; i++)
        sl_free(e->init_data[i]);
    sl_free(e);
    return rc;
}
