/* Node patterns that PyTorch's exporter emits for one PyTorch op, imported
 * as that one salus op. Below opset 17 ONNX has no LayerNormalization and
 * below 20 no Gelu, so torch.onnx.export writes layer norm as nine nodes
 * (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add) and exact
 * GELU as five (Div by sqrt 2, Erf, Add 1, Mul by x, Mul by 0.5). Imported
 * node by node, each is as many passes over the activations, most of a
 * transformer's or ConvNeXt's time outside its matmuls; imported whole,
 * they are salus's layer_norm (one pass per row, statistics in double) and
 * ew_unary's GELU.
 *
 * A pattern is taken only when it is exactly that: the same value names
 * wired the same way, the constants it needs (sqrt 2, 1, 0.5, 2, epsilon;
 * a weight and bias of the normalised dims' shape), and every value inside
 * it read by the pattern alone and not a graph output, so nothing else can
 * see that the intermediates are gone. Anything else is imported node by
 * node as before. The results differ from the node-by-node ones by
 * roundings only (layer_norm rounds its statistics once, from double). */
#include "onnx_ops.h"

#include <math.h>
#include <string.h>

/* The matchers compare names and op types of nodes not yet imported, so
 * a graph with a nameless output, node or attribute (which the importer
 * refuses when it reaches it) is imported node by node. */
bool sl_onnx_fusable(const Onnx__GraphProto *g)
{
    for (size_t i = 0; i < g->n_output; i++)
        if (!g->output[i]->name)
            return false;
    for (size_t i = 0; i < g->n_node; i++) {
        const Onnx__NodeProto *n = g->node[i];
        if (!n->op_type)
            return false;
        for (size_t a = 0; a < n->n_attribute; a++)
            if (!n->attribute[a]->name || n->attribute[a]->g || n->attribute[a]->n_graphs)
                return false;
    }
    return true;
}

/* The nodes not yet imported that read value `name`, into r[0..max)
 * (each node once) with their indices; how many there are, or -1 when
 * the graph outputs the value or more than max read it. */
static int readers(const sl_onnx_imp *m, const char *name, const Onnx__NodeProto **r, size_t *idx,
                   int max)
{
    const Onnx__GraphProto *g = m->graph;
    for (size_t i = 0; i < g->n_output; i++)
        if (!strcmp(g->output[i]->name, name))
            return -1;
    int n = 0;
    for (size_t i = 0; i < g->n_node; i++) {
        const Onnx__NodeProto *node = g->node[i];
        for (size_t k = 0; k < node->n_input; k++) {
            if (strcmp(node->input[k], name) != 0)
                continue;
            if (n == max)
                return -1;
            r[n] = node;
            idx[n++] = i;
            break;
        }
    }
    return n;
}

/* The one node reading value `name` when it is of type op with n_in
 * inputs, one output and no attributes; else NULL. */
static const Onnx__NodeProto *only_reader(const sl_onnx_imp *m, const char *name, const char *op,
                                          size_t n_in, size_t *idx)
{
    const Onnx__NodeProto *r;
    if (readers(m, name, &r, idx, 1) != 1 || strcmp(r->op_type, op) != 0 || r->n_input != n_in ||
        r->n_output != 1 || !r->output[0][0])
        return NULL;
    return r;
}

/* The float constant named name: an entry already, or the Constant node
 * that defines it further on, folded now (a Constant reads nothing, so
 * folding it early changes nothing; the loop then skips it). NULL when
 * it is neither, or on an error (recorded in m). */
static struct ent *constant(sl_onnx_imp *m, const char *name)
{
    struct ent *e = sl_onnx_find(m, name);
    const Onnx__GraphProto *g = m->graph;
    for (size_t i = 0; !e && i < g->n_node; i++) {
        const Onnx__NodeProto *p = g->node[i];
        if (m->skip[i] || strcmp(p->op_type, "Constant") != 0 || p->n_output != 1 ||
            strcmp(p->output[0], name) != 0)
            continue;
        const Onnx__NodeProto *node = m->node;
        bool folded = false;
        m->node = p;
        int rc = sl_onnx_fold(m, p, &folded);
        m->node = node;
        if (rc || !folded)
            return NULL;
        m->skip[i] = true;
        e = sl_onnx_find(m, name);
    }
    return e && e->kind == ENT_CONST && e->ctype == CT_FLOAT ? e : NULL;
}

/* Whether name is a scalar (or one-element) float constant equal to v
 * within tol; NULL-safe. */
static bool scalar_is(sl_onnx_imp *m, const char *name, double v, double tol)
{
    struct ent *e = constant(m, name);
    return e && e->n == 1 && e->ndim <= 1 && fabs(e->d[0] - v) <= tol;
}

/* The input of binary node n other than `name` (n reads name once). */
static const char *other_input(const Onnx__NodeProto *n, const char *name)
{
    return !strcmp(n->input[0], name) ? n->input[1] : n->input[0];
}

/* Defines value `name` as v (cast back under the node's autocast). */
static int define(sl_onnx_imp *m, const char *name, salus_value v)
{
    salus_value out = sl_onnx_autocast_out(m, name, v);
    if (out == SALUS_NO_VALUE)
        return m->code ? m->code : UNSUP("no value");
    struct ent *e;
    int rc = sl_onnx_add(m, name, &e);
    if (rc)
        return rc;
    e->kind = ENT_VALUE;
    e->v = out;
    return SL_OK;
}

/* x's entry when it is a float graph value, else NULL. */
static struct ent *float_value(sl_onnx_imp *m, const char *name)
{
    struct ent *x = sl_onnx_find(m, name);
    if (!x || x->kind != ENT_VALUE)
        return NULL;
    sl_shape s;
    sl_onnx_shape(m, x, &s);
    return sl_dtype_is_float(s.dtype) && s.ndim >= 1 ? x : NULL;
}

/* GELU from its Div node n: Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x ->
 * Mul 0.5. */
static int fuse_gelu(sl_onnx_imp *m, const Onnx__NodeProto *n, bool *fused)
{
    if (n->n_input != 2 || n->n_output != 1 || n->n_attribute)
        return SL_OK;
    struct ent *x = float_value(m, n->input[0]);
    size_t at[4];
    const Onnx__NodeProto *erf = only_reader(m, n->output[0], "Erf", 1, &at[0]);
    const Onnx__NodeProto *add = erf ? only_reader(m, erf->output[0], "Add", 2, &at[1]) : NULL;
    const Onnx__NodeProto *mul = add ? only_reader(m, add->output[0], "Mul", 2, &at[2]) : NULL;
    const Onnx__NodeProto *half = mul ? only_reader(m, mul->output[0], "Mul", 2, &at[3]) : NULL;
    if (!x || !half || erf->n_attribute || add->n_attribute || mul->n_attribute ||
        half->n_attribute || strcmp(other_input(mul, add->output[0]), n->input[0]) != 0 ||
        !scalar_is(m, n->input[1], 1.4142135623730951, 1e-6) ||
        !scalar_is(m, other_input(add, erf->output[0]), 1.0, 0) ||
        !scalar_is(m, other_input(half, mul->output[0]), 0.5, 0))
        return m->code;
    int rc = define(m, half->output[0], sl_onnx_unary(m, SL_EW_GELU, x->v, 0, 0));
    if (rc)
        return rc;
    for (int i = 0; i < 4; i++)
        m->skip[at[i]] = true;
    *fused = true;
    return SL_OK;
}

/* The normalised axes of a ReduceMean with keepdims 1 as the first of
 * them when they are the innermost ones of a rank-nd input, else -1. */
static int suffix_axis(const Onnx__NodeProto *r, unsigned nd)
{
    const Onnx__AttributeProto *axes = sl_onnx_attr(r, "axes");
    if (!axes || axes->n_ints == 0 || axes->n_ints > nd || sl_onnx_attr_i(r, "keepdims", 1) != 1)
        return -1;
    for (size_t k = 0; k < r->n_attribute; k++)
        if (strcmp(r->attribute[k]->name, "axes") && strcmp(r->attribute[k]->name, "keepdims"))
            return -1;
    bool seen[SL_MAX_DIMS] = {false};
    for (size_t k = 0; k < axes->n_ints; k++) {
        int64_t a = axes->ints[k] < 0 ? axes->ints[k] + nd : axes->ints[k];
        if (a < 0 || a >= (int64_t) nd || seen[a])
            return -1;
        seen[a] = true;
    }
    unsigned first = nd - (unsigned) axes->n_ints;
    for (unsigned d = first; d < nd; d++)
        if (!seen[d])
            return -1;
    return (int) first;
}

/* Whether constant e has exactly dims dims[0..nd). */
static bool const_shaped(const struct ent *e, unsigned nd, const int64_t *dims)
{
    if (!e || e->ndim != nd)
        return false;
    for (unsigned d = 0; d < nd; d++)
        if (e->dims[d] != dims[d])
            return false;
    return true;
}

/* Layer norm from its first ReduceMean n over the innermost axes of x:
 * d = x - mean; var = mean(d ^ 2); y = d / sqrt(var + eps) * w + b. */
static int fuse_layer_norm(sl_onnx_imp *m, const Onnx__NodeProto *n, bool *fused)
{
    struct ent *x = n->n_input == 1 && n->n_output == 1 ? float_value(m, n->input[0]) : NULL;
    if (!x)
        return SL_OK;
    sl_shape xs;
    sl_onnx_shape(m, x, &xs);
    int axis = suffix_axis(n, xs.ndim);
    size_t at[8], two[2];
    const Onnx__NodeProto *sub = axis >= 0 ? only_reader(m, n->output[0], "Sub", 2, &at[0]) : NULL;
    if (!sub || sub->n_attribute || strcmp(sub->input[0], n->input[0]) != 0 ||
        strcmp(sub->input[1], n->output[0]) != 0)
        return SL_OK;
    /* d is read by the Pow and by the Div, in either order */
    const Onnx__NodeProto *r[2];
    if (readers(m, sub->output[0], r, two, 2) != 2)
        return SL_OK;
    int p = strcmp(r[0]->op_type, "Pow") == 0 ? 0 : 1;
    const Onnx__NodeProto *pow = r[p], *div = r[1 - p];
    at[1] = two[p];
    at[2] = two[1 - p];
    if (strcmp(pow->op_type, "Pow") || strcmp(div->op_type, "Div") || pow->n_input != 2 ||
        div->n_input != 2 || pow->n_output != 1 || div->n_output != 1 || pow->n_attribute ||
        div->n_attribute || strcmp(pow->input[0], sub->output[0]) ||
        strcmp(div->input[0], sub->output[0]))
        return SL_OK;
    const Onnx__NodeProto *var = only_reader(m, pow->output[0], "ReduceMean", 1, &at[3]);
    const Onnx__NodeProto *add = var ? only_reader(m, var->output[0], "Add", 2, &at[4]) : NULL;
    const Onnx__NodeProto *sqrt_ = add ? only_reader(m, add->output[0], "Sqrt", 1, &at[5]) : NULL;
    size_t div_at;
    if (!sqrt_ || suffix_axis(var, xs.ndim) != axis || add->n_attribute || sqrt_->n_attribute ||
        only_reader(m, sqrt_->output[0], "Div", 2, &div_at) != div ||
        strcmp(div->input[1], sqrt_->output[0]) != 0)
        return SL_OK;
    const Onnx__NodeProto *mul = only_reader(m, div->output[0], "Mul", 2, &at[6]);
    const Onnx__NodeProto *bias = mul ? only_reader(m, mul->output[0], "Add", 2, &at[7]) : NULL;
    if (!bias || mul->n_attribute || bias->n_attribute)
        return SL_OK;
    /* the constants last: finding one may fold its Constant node */
    struct ent *eps = constant(m, other_input(add, var->output[0]));
    if (!scalar_is(m, pow->input[1], 2.0, 0) || !eps || eps->n != 1 || eps->ndim > 1 ||
        !(eps->d[0] > 0) || !isfinite(eps->d[0]))
        return m->code;
    unsigned nd = xs.ndim - (unsigned) axis;
    struct ent *w = constant(m, other_input(mul, div->output[0]));
    struct ent *b = constant(m, other_input(bias, mul->output[0]));
    if (!const_shaped(w, nd, xs.dims + axis) || !const_shaped(b, nd, xs.dims + axis))
        return m->code;
    salus_value in[3] = {x->v, sl_onnx_fvalue(m, w), sl_onnx_fvalue(m, b)};
    int64_t ax = axis;
    float e = (float) eps->d[0];
    int rc = define(m, bias->output[0], sl_onnx_op(m, "layer_norm", 3, in, 1, &ax, 1, &e));
    if (rc)
        return rc;
    for (int i = 0; i < 8; i++)
        m->skip[at[i]] = true;
    *fused = true;
    return SL_OK;
}

int sl_onnx_fuse(sl_onnx_imp *m, const Onnx__NodeProto *n, bool *fused)
{
    *fused = false;
    if (!m->skip)
        return SL_OK;
    if (!strcmp(n->op_type, "Div"))
        return fuse_gelu(m, n, fused);
    if (!strcmp(n->op_type, "ReduceMean"))
        return fuse_layer_norm(m, n, fused);
    return SL_OK;
}
