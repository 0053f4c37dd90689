/* The ONNX importer through a real salusd, on models built here with the
 * protobuf-c structs of onnx.proto: shape arithmetic folded as PyTorch's
 * exporter emits it, the queries of inputs and outputs, and refusals that
 * name the node, the op and what is missing, for unsupported content and
 * for malformed (hostile) files. */
#include "../integration/harness.h"
#include "client_internal.h"
#include "onnx.pb-c.h"
#include "sl_test.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sl_test_server server;
static salus_client *client;
static salus_session *session;

static int start(void **state)
{
    (void) state;
    sl_test_server_start(&server, NULL);
    client = sl_test_connect(&server);
    salus_session_opts so = {0};
    return salus_session_open(client, &so, &session) == SALUS_OK ? 0 : -1;
}

static int stop(void **state)
{
    (void) state;
    (void) salus_session_close(session);
    salus_disconnect(client);
    return sl_test_server_stop(&server) == 0 ? 0 : -1;
}

/* ---- a small model builder over the generated structs (static storage,
 * one model at a time) ---- */

#define MAXN 16
static Onnx__ModelProto model;
static Onnx__GraphProto graph;
static Onnx__OperatorSetIdProto opset, *opsets[1] = {&opset};
static Onnx__NodeProto nodes[MAXN], *node_ptrs[MAXN];
static Onnx__AttributeProto attrs[MAXN], *attr_ptrs[MAXN];
static Onnx__TensorProto inits[MAXN], *init_ptrs[MAXN];
static Onnx__ValueInfoProto vis[MAXN], *in_ptrs[MAXN], *out_ptrs[MAXN];
static Onnx__TypeProto types[MAXN];
static Onnx__TypeProto__Tensor ttypes[MAXN];
static Onnx__TensorShapeProto shapes[MAXN];
static Onnx__TensorShapeProto__Dimension dimv[MAXN][4], *dimp[MAXN][4];
static unsigned n_vis, n_attrs;

static void model_begin(int64_t version)
{
    onnx__model_proto__init(&model);
    onnx__graph_proto__init(&graph);
    onnx__operator_set_id_proto__init(&opset);
    opset.has_version = true;
    opset.version = version;
    opset.domain = (char *) "";
    model.n_opset_import = 1;
    model.opset_import = opsets;
    model.graph = &graph;
    graph.node = node_ptrs;
    graph.initializer = init_ptrs;
    graph.input = in_ptrs;
    graph.output = out_ptrs;
    n_vis = n_attrs = 0;
}

/* A tensor value info: f32 with dims (a negative dim is symbolic). */
static Onnx__ValueInfoProto *value_info(const char *name, int ndim, const int64_t *dims)
{
    unsigned k = n_vis++;
    onnx__value_info_proto__init(&vis[k]);
    onnx__type_proto__init(&types[k]);
    onnx__type_proto__tensor__init(&ttypes[k]);
    onnx__tensor_shape_proto__init(&shapes[k]);
    vis[k].name = (char *) name;
    vis[k].type = &types[k];
    types[k].value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    types[k].tensor_type = &ttypes[k];
    ttypes[k].has_elem_type = true;
    ttypes[k].elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    ttypes[k].shape = &shapes[k];
    shapes[k].n_dim = (size_t) ndim;
    shapes[k].dim = dimp[k];
    for (int d = 0; d < ndim; d++) {
        onnx__tensor_shape_proto__dimension__init(&dimv[k][d]);
        dimp[k][d] = &dimv[k][d];
        if (dims[d] >= 0) {
            dimv[k][d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dimv[k][d].dim_value = dims[d];
        } else {
            dimv[k][d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dimv[k][d].dim_param = (char *) "batch";
        }
    }
    return &vis[k];
}

static void add_input(const char *name, int ndim, const int64_t *dims)
{
    graph.input[graph.n_input++] = value_info(name, ndim, dims);
}

static void add_output(const char *name)
{
    graph.output[graph.n_output++] = value_info(name, 0, NULL);
}

static Onnx__NodeProto *add_node(const char *op, const char *name, size_t n_in, char **in,
                                 size_t n_out, char **out)
{
    Onnx__NodeProto *n = &nodes[graph.n_node];
    onnx__node_proto__init(n);
    n->op_type = (char *) op;
    n->name = (char *) name;
    n->n_input = n_in;
    n->input = in;
    n->n_output = n_out;
    n->output = out;
    graph.node[graph.n_node++] = n;
    return n;
}

static void attr_ints(Onnx__NodeProto *n, const char *name, size_t count, int64_t *v)
{
    Onnx__AttributeProto *a = &attrs[n_attrs];
    onnx__attribute_proto__init(a);
    a->name = (char *) name;
    a->has_type = true;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    a->n_ints = count;
    a->ints = v;
    attr_ptrs[n_attrs] = a;
    n->attribute = &attr_ptrs[n_attrs - n->n_attribute];
    n->n_attribute++;
    n_attrs++;
}

/* An initialiser of int64 values (raw_data little-endian, as exporters
 * write them). */
static void add_init_i64(const char *name, size_t n, const int64_t *v)
{
    Onnx__TensorProto *t = &inits[graph.n_initializer];
    onnx__tensor_proto__init(t);
    t->name = (char *) name;
    t->has_data_type = true;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    static int64_t dims[MAXN];
    dims[graph.n_initializer] = (int64_t) n;
    t->n_dims = 1;
    t->dims = &dims[graph.n_initializer];
    t->has_raw_data = true;
    t->raw_data.len = n * 8;
    t->raw_data.data = (uint8_t *) v;
    graph.initializer[graph.n_initializer++] = t;
}

/* The model under construction as bytes (the caller frees them). */
static uint8_t *packed(size_t *len)
{
    *len = onnx__model_proto__get_packed_size(&model);
    uint8_t *buf = malloc(*len);
    assert_non_null(buf);
    onnx__model_proto__pack(&model, buf);
    return buf;
}

/* The model under construction loaded into the session (m) or, with m
 * NULL, only checked without a server (the verdict in why). */
static int load_or_check(const salus_onnx_options *opts, salus_onnx_model **m, char *why,
                         size_t len)
{
    size_t n;
    uint8_t *buf = packed(&n);
    int rc = m ? salus_onnx_load_buffer(session, buf, n, opts, m)
               : salus_onnx_check_buffer(buf, n, NULL, why, len);
    free(buf);
    return rc;
}

static int load(const salus_onnx_options *opts, salus_onnx_model **m)
{
    return load_or_check(opts, m, NULL, 0);
}

/* ---- tests ---- */

/* y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): PyTorch's
 * x.reshape(x.shape[0], -1), folded to one reshape; then Relu. */
static void folds_shape_arithmetic(void **state)
{
    (void) state;
    model_begin(14);
    add_input("x", 3, (int64_t[]){2, 3, 4});
    static char *n0_in[] = {"x"}, *n0_out[] = {"s"};
    static char *n1_in[] = {"s", "zero"}, *n1_out[] = {"b"};
    static char *n2_in[] = {"b", "axes0"}, *n2_out[] = {"b1"};
    static char *n3_in[] = {"b1", "minus1"}, *n3_out[] = {"shape"};
    static char *n4_in[] = {"x", "shape"}, *n4_out[] = {"r"};
    static char *n5_in[] = {"r"}, *n5_out[] = {"y"};
    static int64_t zero = 0, axes0 = 0, minus1 = -1;
    add_init_i64("axes0", 1, &axes0);
    add_init_i64("minus1", 1, &minus1);
    /* a scalar index: rank 0 */
    add_init_i64("zero", 1, &zero);
    inits[2].n_dims = 0;
    add_node("Shape", "shape_of_x", 1, n0_in, 1, n0_out);
    add_node("Gather", "batch", 2, n1_in, 1, n1_out);
    add_node("Unsqueeze", "unsq", 2, n2_in, 1, n2_out);
    Onnx__NodeProto *cat = add_node("Concat", "cat", 2, n3_in, 1, n3_out);
    static int64_t axis0 = 0;
    Onnx__AttributeProto *a = &attrs[n_attrs];
    onnx__attribute_proto__init(a);
    a->name = "axis", a->has_type = true, a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_i = true, a->i = axis0;
    attr_ptrs[n_attrs++] = a;
    cat->n_attribute = 1, cat->attribute = &attr_ptrs[n_attrs - 1];
    add_node("Reshape", "reshape", 2, n4_in, 1, n4_out);
    add_node("Relu", "relu", 1, n5_in, 1, n5_out);
    add_output("y");

    salus_onnx_model *m;
    assert_sl_ok(load(NULL, &m));
    assert_int_equal(salus_onnx_n_inputs(m), 1);
    assert_int_equal(salus_onnx_n_outputs(m), 1);
    const char *name;
    int dtype, ndim;
    int64_t dims[6];
    assert_sl_ok(salus_onnx_output(m, 0, &name, &dtype, &ndim, dims));
    assert_string_equal(name, "y");
    assert_int_equal(dtype, SALUS_F32);
    assert_int_equal(ndim, 2);
    assert_int_equal(dims[0], 2);
    assert_int_equal(dims[1], 12);
    assert_int_equal(salus_onnx_output(m, 1, &name, &dtype, &ndim, dims), SALUS_EINVAL);
    float x[24], y[24];
    for (int i = 0; i < 24; i++)
        x[i] = (float) (i - 12);
    assert_sl_ok(salus_onnx_run(m, (const void *[]){x}, (void *[]){y}));
    for (int i = 0; i < 24; i++)
        assert_float_equal(y[i], x[i] > 0 ? x[i] : 0, 0);
    salus_onnx_free(m);
}

/* An initialiser of float values. */
static void add_init_f32(const char *name, unsigned ndim, const int64_t *dims, const float *v)
{
    Onnx__TensorProto *t = &inits[graph.n_initializer];
    onnx__tensor_proto__init(t);
    t->name = (char *) name;
    t->has_data_type = true;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    static int64_t fdims[MAXN][4];
    size_t n = 1;
    for (unsigned d = 0; d < ndim; d++)
        fdims[graph.n_initializer][d] = dims[d], n *= (size_t) dims[d];
    t->n_dims = ndim;
    t->dims = fdims[graph.n_initializer];
    t->n_float_data = n;
    t->float_data = (float *) v;
    graph.initializer[graph.n_initializer++] = t;
}

static void attr_int(Onnx__NodeProto *n, const char *name, int64_t v)
{
    static int64_t vals[MAXN];
    vals[n_attrs] = v;
    attr_ints(n, name, 1, &vals[n_attrs]);
    Onnx__AttributeProto *a = attr_ptrs[n_attrs - 1];
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_i = true, a->i = v, a->n_ints = 0;
}

static void attr_string(Onnx__NodeProto *n, const char *name, const char *v)
{
    attr_ints(n, name, 0, NULL);
    Onnx__AttributeProto *a = attr_ptrs[n_attrs - 1];
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    a->has_s = true;
    a->s.data = (uint8_t *) v;
    a->s.len = strlen(v);
}

/* Trilu of a graph value holding infinities: a causal mask's -inf above
 * the diagonal stays -inf where kept and becomes 0 (never NaN) where
 * zeroed, both ways round and with k. */
static void trilu_keeps_infinities(void **state)
{
    (void) state;
    for (int upper = 0; upper < 2; upper++) {
        model_begin(14);
        add_input("x", 3, (int64_t[]){2, 3, 4});
        static char *in[] = {"x", "k"}, *out[] = {"y"};
        static int64_t k = 1;
        add_init_i64("k", 1, &k);
        inits[0].n_dims = 0;
        Onnx__NodeProto *t = add_node("Trilu", "mask", 2, in, 1, out);
        attr_int(t, "upper", upper);
        add_output("y");
        salus_onnx_model *m;
        assert_sl_ok(load(NULL, &m));
        float x[24], y[24];
        for (int i = 0; i < 24; i++)
            x[i] = i % 3 == 0 ? -INFINITY : i % 3 == 1 ? INFINITY : (float) i;
        assert_sl_ok(salus_onnx_run(m, (const void *[]){x}, (void *[]){y}));
        for (int i = 0; i < 24; i++) {
            int r = i / 4 % 3, c = i % 4;
            bool keep = upper ? c - r >= 1 : c - r <= 1;
            if (keep ? y[i] != x[i] : y[i] != 0.0f)
                fail_msg("upper=%d [%d]: %g from %g", upper, i, (double) y[i], (double) x[i]);
        }
        salus_onnx_free(m);
    }
}

/* Resize by constant scales: nearest (asymmetric, floor) doubles every
 * element; linear with align_corners interpolates exactly between the
 * corners. */
static void resizes_by_constant_scales(void **state)
{
    (void) state;
    for (int linear = 0; linear < 2; linear++) {
        model_begin(13);
        add_input("x", 4, (int64_t[]){1, 1, 2, 2});
        static char *in[] = {"x", "", "scales"}, *out[] = {"y"};
        static const float scales[4] = {1, 1, 2, 2};
        add_init_f32("scales", 1, (int64_t[]){4}, scales);
        Onnx__NodeProto *r = add_node("Resize", "up", 3, in, 1, out);
        attr_string(r, "mode", linear ? "linear" : "nearest");
        attr_string(r, "coordinate_transformation_mode", linear ? "align_corners" : "asymmetric");
        if (!linear)
            attr_string(r, "nearest_mode", "floor");
        add_output("y");
        salus_onnx_model *m;
        assert_sl_ok(load(NULL, &m));
        float x[4] = {1, 2, 3, 4}, y[16];
        assert_sl_ok(salus_onnx_run(m, (const void *[]){x}, (void *[]){y}));
        for (int i = 0; i < 16; i++) {
            int row = i / 4, col = i % 4;
            double want = linear ? 1 + (col / 3.0) + 2 * (row / 3.0) : x[(row / 2) * 2 + col / 2];
            if (fabs(y[i] - want) > 1e-6)
                fail_msg("%s [%d]: %g, want %g", linear ? "linear" : "nearest", i, (double) y[i],
                         want);
        }
        salus_onnx_free(m);
    }
}

/* A refusal: the code, and a message that contains every word of want. */
static void refused(int rc, int code, const char *const *want)
{
    if (rc != code)
        fail_msg("got %s, expected %s: %s", salus_strerror(rc), salus_strerror(code),
                 salus_last_error(client));
    const char *msg = salus_last_error(client);
    for (; *want; want++)
        if (!strstr(msg, *want))
            fail_msg("message '%s' does not say '%s'", msg, *want);
}

static void refuses_with_reasons(void **state)
{
    (void) state;
    static char *in[] = {"x"}, *out[] = {"y"};
    salus_onnx_model *m;

    /* an op salus lacks: node and op named */
    model_begin(14);
    add_input("x", 2, (int64_t[]){2, 3});
    add_node("Hardmax", "the_node", 1, in, 1, out);
    add_output("y");
    refused(load(NULL, &m), SALUS_EUNSUPPORTED, (const char *[]){"the_node", "Hardmax", NULL});

    /* an attribute the mapping does not implement */
    model_begin(14);
    add_input("x", 2, (int64_t[]){2, 3});
    Onnx__NodeProto *n = add_node("Transpose", "t", 1, in, 1, out);
    static int64_t bogus[2] = {1, 0};
    attr_ints(n, "bogus", 2, bogus);
    add_output("y");
    refused(load(NULL, &m), SALUS_EUNSUPPORTED, (const char *[]){"Transpose", "bogus", NULL});

    /* an opset outside what salus reads */
    model_begin(19);
    add_input("x", 2, (int64_t[]){2, 3});
    add_node("Relu", "r", 1, in, 1, out);
    add_output("y");
    refused(load(NULL, &m), SALUS_EUNSUPPORTED, (const char *[]){"opset 19", NULL});

    /* a symbolic batch: refused, then taken from the options */
    model_begin(14);
    add_input("x", 2, (int64_t[]){-1, 3});
    add_node("Relu", "r", 1, in, 1, out);
    add_output("y");
    refused(load(NULL, &m), SALUS_EUNSUPPORTED, (const char *[]){"'x'", "dynamic", NULL});
    salus_onnx_options opts = {.batch = 5};
    assert_sl_ok(load(&opts, &m));
    int ndim;
    int64_t dims[6];
    assert_sl_ok(salus_onnx_input(m, 0, NULL, NULL, &ndim, dims));
    assert_int_equal(dims[0], 5);
    salus_onnx_free(m);

    /* ceil_mode with a partial window would be silently wrong as floor
     * mode: refused */
    model_begin(14);
    add_input("x", 4, (int64_t[]){1, 1, 5, 5});
    n = add_node("MaxPool", "pool", 1, in, 1, out);
    static int64_t k2[2] = {2, 2}, s2[2] = {2, 2}, one = 1;
    attr_ints(n, "kernel_shape", 2, k2);
    attr_ints(n, "strides", 2, s2);
    attr_ints(n, "ceil_mode", 1, &one);
    attrs[n_attrs - 1].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    attrs[n_attrs - 1].has_i = true;
    attrs[n_attrs - 1].i = 1;
    add_output("y");
    refused(load(NULL, &m), SALUS_EUNSUPPORTED, (const char *[]){"pool", "ceil_mode", NULL});
}

static void refuses_malformed_files(void **state)
{
    (void) state;
    salus_onnx_model *m;
    static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x34};
    assert_int_equal(salus_onnx_load_buffer(session, garbage, sizeof garbage, NULL, &m),
                     SALUS_EINVAL);
    assert_int_equal(salus_onnx_load(session, "/nonexistent/model.onnx", NULL, &m), SALUS_EINVAL);
    assert_non_null(strstr(salus_last_error(client), "/nonexistent/model.onnx"));

    /* raw data shorter than the dims say */
    static char *in[] = {"x", "w"}, *out[] = {"y"};
    model_begin(14);
    add_input("x", 1, (int64_t[]){3});
    static int64_t w[2] = {1, 2};
    add_init_i64("w", 3, w); /* 3 elements, 16 bytes */
    inits[0].raw_data.len = 16;
    add_node("Add", "add", 2, in, 1, out);
    add_output("y");
    refused(load(NULL, &m), SALUS_EINVAL, (const char *[]){"'w'", "raw bytes", NULL});

    /* truncated: every prefix of a valid model fails cleanly or loads */
    model_begin(14);
    add_input("x", 2, (int64_t[]){2, 3});
    static char *rin[] = {"x"}, *rout[] = {"y"};
    add_node("Relu", "r", 1, rin, 1, rout);
    add_output("y");
    size_t len = onnx__model_proto__get_packed_size(&model);
    uint8_t *buf = malloc(len);
    onnx__model_proto__pack(&model, buf);
    for (size_t cut = 0; cut < len; cut++) {
        int rc = salus_onnx_load_buffer(session, buf, cut, NULL, &m);
        if (rc == SALUS_OK)
            salus_onnx_free(m);
        else
            assert_true(rc == SALUS_EINVAL || rc == SALUS_EUNSUPPORTED);
    }
    free(buf);

    /* a constant index outside the data: refused while folding */
    model_begin(14);
    add_input("x", 1, (int64_t[]){3});
    static int64_t data[3] = {4, 5, 6}, bad = 7;
    add_init_i64("d", 3, data);
    add_init_i64("i", 1, &bad);
    static char *gin[] = {"d", "i"}, *gout[] = {"g"}, *ain[] = {"x", "g"}, *aout[] = {"y"};
    add_node("Gather", "gather", 2, gin, 1, gout);
    add_node("Add", "add", 2, ain, 1, aout);
    add_output("y");
    refused(load(NULL, &m), SALUS_EINVAL, (const char *[]){"gather", "out of range", NULL});
}

/* Gather with indices fed at run time beyond the data: the kernel's own
 * check is what protects salusd: the run fails, the session lives on. */
static void bad_runtime_index_fails_the_run(void **state)
{
    (void) state;
    model_begin(14);
    add_input("x", 2, (int64_t[]){3, 2});
    add_input("i", 1, (int64_t[]){2});
    ttypes[n_vis - 1].elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    static char *gin[] = {"x", "i"}, *gout[] = {"y"};
    add_node("Gather", "g", 2, gin, 1, gout);
    add_output("y");
    salus_onnx_model *m;
    assert_sl_ok(load(NULL, &m));
    int dtype;
    assert_sl_ok(salus_onnx_input(m, 1, NULL, &dtype, NULL, NULL));
    assert_int_equal(dtype, SALUS_I32);
    float x[6] = {1, 2, 3, 4, 5, 6}, y[4];
    int32_t good[2] = {2, -3}, bad[2] = {1, 3};
    assert_sl_ok(salus_onnx_run(m, (const void *[]){x, good}, (void *[]){y}));
    assert_float_equal(y[0], 5, 0);
    assert_float_equal(y[3], 2, 0);
    assert_int_equal(salus_onnx_run(m, (const void *[]){x, bad}, (void *[]){y}), SALUS_EINVAL);
    assert_sl_ok(salus_onnx_run(m, (const void *[]){x, good}, (void *[]){y}));
    salus_onnx_free(m);

    /* constant indices beyond run-time data: refused at import */
    model_begin(14);
    add_input("x", 2, (int64_t[]){3, 2});
    static int64_t idx[2] = {1, 9};
    add_init_i64("i", 2, idx);
    add_node("Gather", "g2", 2, gin, 1, gout);
    add_output("y");
    refused(load(NULL, &m), SALUS_EUNSUPPORTED, (const char *[]){"g2", "index 9", NULL});
}

static unsigned count_op(const salus_graph *g, const char *name)
{
    unsigned id, n = 0;
    assert_sl_ok(sl_op_lookup(name, &id));
    for (size_t i = 0; i < sl_graph_n_ops(g); i++) {
        sl_graph_op o;
        sl_graph_op_info(g, i, &o);
        n += o.id == id;
    }
    return n;
}

/* Softmax, then LayerNormalization whose Mean output the graph declares
 * float: ops the registry runs in f32 only. Given float16 or bfloat16 they
 * run in f32 between casts, as under PyTorch autocast (the Softmax node's
 * input and output, LayerNormalization's half inputs and Y; Mean stays
 * f32); an f32 graph gets no cast. */
static void autocasts_f32_only_ops(void **state)
{
    (void) state;
    static const struct {
        int onnx, dtype;
        unsigned casts;
        double tol;
    } cases[] = {{ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, SALUS_F32, 0, 1e-5},
                 {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16, SALUS_F16, 5, 1e-2},
                 {ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16, SALUS_BF16, 5, 6e-2}};
    static const float x[6] = {0.5f, -1, 2, 3, 0.25f, -0.5f}, scale[3] = {1, 2, -1};
    static char *sin[] = {"x"}, *sout[] = {"p"}, *lin[] = {"p", "s"}, *lout[] = {"y", "mean"};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        model_begin(17);
        add_input("x", 2, (int64_t[]){2, 3});
        ttypes[n_vis - 1].elem_type = cases[c].onnx;
        add_input("s", 1, (int64_t[]){3});
        ttypes[n_vis - 1].elem_type = cases[c].onnx;
        add_node("Softmax", "sm", 1, sin, 1, sout);
        add_node("LayerNormalization", "ln", 2, lin, 2, lout);
        add_output("y");
        ttypes[n_vis - 1].elem_type = cases[c].onnx;
        add_output("mean");
        salus_onnx_model *m;
        assert_sl_ok(load(NULL, &m));
        assert_int_equal(count_op(salus_onnx_graph(m), "cast"), cases[c].casts);
        int ydt, meandt;
        assert_sl_ok(salus_onnx_output(m, 0, NULL, &ydt, NULL, NULL));
        assert_sl_ok(salus_onnx_output(m, 1, NULL, &meandt, NULL, NULL));
        assert_int_equal(ydt, cases[c].dtype);
        assert_int_equal(meandt, SALUS_F32);
        float xf[6], sf[3], y[6], mean[2];
        uint16_t xh[6], sh[3], yh[6];
        bool half = cases[c].dtype != SALUS_F32;
        for (int i = 0; i < 6; i++) {
            xh[i] =
                cases[c].dtype == SALUS_F16 ? salus_f16_from_f32(x[i]) : salus_bf16_from_f32(x[i]);
            xf[i] = x[i];
            if (i < 3) {
                sh[i] = cases[c].dtype == SALUS_F16 ? salus_f16_from_f32(scale[i])
                                                    : salus_bf16_from_f32(scale[i]);
                sf[i] = scale[i];
            }
        }
        const void *in[2] = {half ? (const void *) xh : xf, half ? (const void *) sh : sf};
        assert_sl_ok(salus_onnx_run(m, in, (void *[]){half ? (void *) yh : y, mean}));
        for (int r = 0; r < 2; r++) {
            double p[3], sum = 0, mu = 0, var = 0;
            for (int j = 0; j < 3; j++)
                sum += p[j] = exp(x[r * 3 + j]);
            for (int j = 0; j < 3; j++)
                mu += (p[j] /= sum) / 3;
            for (int j = 0; j < 3; j++)
                var += (p[j] - mu) * (p[j] - mu) / 3;
            assert_float_equal(mean[r], mu, cases[c].tol);
            for (int j = 0; j < 3; j++) {
                double want = (p[j] - mu) / sqrt(var + 1e-5) * scale[j];
                float got = !half                         ? y[r * 3 + j]
                            : cases[c].dtype == SALUS_F16 ? salus_f32_from_f16(yh[r * 3 + j])
                                                          : salus_f32_from_bf16(yh[r * 3 + j]);
                assert_float_equal(got, want, cases[c].tol);
            }
        }
        salus_onnx_free(m);
    }
}

/* A BERT-style key padding mask: Equal(ids, 0), or Not of a bool input
 * (fed as i32 0/1), unsqueezed and expanded over the query axis (still a
 * bool), then Where(mask, -inf, scores) and Softmax. The padded keys get exactly 0, the others
 * the softmax over the kept keys; the -inf branch is one masked_fill. The
 * mask cast to float is 1 at the padding. */
static void masks_padding_before_softmax(void **state)
{
    (void) state;
    enum { B = 2, Q = 3, K = 4 };
    static const int32_t ids[B * K] = {5, 7, 0, 0, 3, 0, 9, 0};
    static int64_t zero = 0, axis1 = 1, full[3] = {B, Q, K};
    static const float ninf = -INFINITY;
    static char *eq_in[] = {"ids", "zero"}, *not_in[] = {"valid"}, *mask_out[] = {"pad"},
                *un_in[] = {"pad", "axes"}, *un_out[] = {"pad3"}, *ex_in[] = {"pad3", "full"},
                *ex_out[] = {"padq"}, *wh_in[] = {"padq", "ninf", "scores"}, *wh_out[] = {"masked"},
                *sm_in[] = {"masked"}, *sm_out[] = {"y"}, *ca_in[] = {"pad"}, *ca_out[] = {"padf"};
    for (int form = 0; form < 2; form++) {
        model_begin(14);
        add_input(form ? "valid" : "ids", 2, (int64_t[]){B, K});
        ttypes[n_vis - 1].elem_type =
            form ? ONNX__TENSOR_PROTO__DATA_TYPE__BOOL : ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
        add_input("scores", 3, (int64_t[]){B, Q, K});
        add_init_i64("zero", 1, &zero);
        inits[0].n_dims = 0;
        add_init_i64("axes", 1, &axis1);
        add_init_i64("full", 3, full);
        add_init_f32("ninf", 0, NULL, &ninf);
        if (form)
            add_node("Not", "not", 1, not_in, 1, mask_out);
        else
            add_node("Equal", "eq", 2, eq_in, 1, mask_out);
        add_node("Unsqueeze", "un", 2, un_in, 1, un_out);
        add_node("Expand", "ex", 2, ex_in, 1, ex_out);
        add_node("Where", "where", 3, wh_in, 1, wh_out);
        attr_int(add_node("Softmax", "sm", 1, sm_in, 1, sm_out), "axis", -1);
        attr_int(add_node("Cast", "cast", 1, ca_in, 1, ca_out), "to",
                 ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
        add_output("y");
        add_output("padf");
        salus_onnx_model *m;
        assert_sl_ok(load(NULL, &m));
        const salus_graph *g = salus_onnx_graph(m);
        assert_int_equal(count_op(g, "compare"), 2); /* the mask, the expansion */
        assert_int_equal(count_op(g, "masked_fill"), 1);
        int dtype;
        assert_sl_ok(salus_onnx_input(m, 0, NULL, &dtype, NULL, NULL));
        assert_int_equal(dtype, SALUS_I32);
        int32_t in0[B * K];
        for (int i = 0; i < B * K; i++)
            in0[i] = form ? ids[i] != 0 : ids[i];
        float scores[B * Q * K], y[B * Q * K], padf[B * K];
        for (int i = 0; i < B * Q * K; i++)
            scores[i] = (float) ((i * 7) % 11) * 0.25f - 1.0f;
        assert_sl_ok(salus_onnx_run(m, (const void *[]){in0, scores}, (void *[]){y, padf}));
        for (int i = 0; i < B * K; i++)
            if (padf[i] != (ids[i] == 0 ? 1.0f : 0.0f))
                fail_msg("form %d padf[%d] = %g", form, i, (double) padf[i]);
        for (int r = 0; r < B * Q; r++) {
            const int32_t *row_ids = ids + r / Q * K;
            double sum = 0;
            for (int k = 0; k < K; k++)
                if (row_ids[k])
                    sum += exp(scores[r * K + k]);
            for (int k = 0; k < K; k++) {
                double want = row_ids[k] ? exp(scores[r * K + k]) / sum : 0.0;
                if (!(fabs(y[r * K + k] - want) <= 1e-6))
                    fail_msg("form %d y[%d][%d] = %g, want %g", form, r, k, (double) y[r * K + k],
                             want);
            }
        }
        salus_onnx_free(m);
    }
}

/* Cast to bool is nonzero (NaN and -0 as ONNX: true and false); a bool to
 * int64 is its 0 and 1 as i32. An integer that is not a bool to a float is
 * refused, naming the Cast. */
static void casts_to_and_from_bool(void **state)
{
    (void) state;
    static char *c1_in[] = {"x"}, *c1_out[] = {"b"}, *c2_in[] = {"b"}, *c2_out[] = {"y"};
    model_begin(14);
    add_input("x", 1, (int64_t[]){6});
    attr_int(add_node("Cast", "to_bool", 1, c1_in, 1, c1_out), "to",
             ONNX__TENSOR_PROTO__DATA_TYPE__BOOL);
    attr_int(add_node("Cast", "to_int", 1, c2_in, 1, c2_out), "to",
             ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
    add_output("y");
    salus_onnx_model *m;
    assert_sl_ok(load(NULL, &m));
    int dtype;
    assert_sl_ok(salus_onnx_output(m, 0, NULL, &dtype, NULL, NULL));
    assert_int_equal(dtype, SALUS_I32);
    const float x[6] = {0.0f, -0.0f, 1.5f, NAN, -2.0f, INFINITY};
    int32_t y[6];
    assert_sl_ok(salus_onnx_run(m, (const void *[]){x}, (void *[]){y}));
    for (int i = 0; i < 6; i++)
        assert_int_equal(y[i], i >= 2);
    salus_onnx_free(m);

    static char *c3_in[] = {"ids"}, *c3_out[] = {"f"};
    model_begin(14);
    add_input("ids", 1, (int64_t[]){6});
    ttypes[n_vis - 1].elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    attr_int(add_node("Cast", "ids_to_float", 1, c3_in, 1, c3_out), "to",
             ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    add_output("f");
    refused(load(NULL, &m), SALUS_EUNSUPPORTED, (const char *[]){"ids_to_float", "integers", NULL});
}

/* salus_onnx_check_buffer: the same verdicts without a server. */
static int check(char *why, size_t len)
{
    return load_or_check(NULL, NULL, why, len);
}

static void checks_without_a_server(void **state)
{
    (void) state;
    static char *in[] = {"x"}, *out[] = {"y"};
    char why[256];
    model_begin(14);
    add_input("x", 2, (int64_t[]){2, 3});
    add_node("Hardmax", "hm", 1, in, 1, out);
    add_output("y");
    assert_int_equal(check(why, sizeof why), SALUS_EUNSUPPORTED);
    assert_non_null(strstr(why, "hm"));
    assert_non_null(strstr(why, "Hardmax"));

    model_begin(14);
    add_input("x", 2, (int64_t[]){2, 3});
    static int64_t w[3] = {1, 2, 3};
    add_init_i64("w", 3, w);
    static char *ain[] = {"x", "w"};
    add_node("Add", "add", 2, ain, 1, out);
    add_output("y");
    assert_int_equal(check(why, sizeof why), SALUS_OK);
    assert_string_equal(why, "");
    assert_int_equal(salus_onnx_check_buffer("junk", 4, NULL, why, sizeof why), SALUS_EINVAL);
    assert_non_null(strstr(why, "not an ONNX model"));

    /* a graph output with no name (fuzz_onnx's find): refused, and the
     * pattern matchers never compare the missing name */
    static const uint8_t nameless[] = {
        0x08, 0x07, 0x12, 0x0c, 0x62, 0x61, 0x63, 0x6b, 0x65, 0x6e, 0x64, 0x2d, 0x74, 0x65, 0x73,
        0x74, 0x3a, 0x67, 0x0a, 0x10, 0x0a, 0x01, 0x78, 0x0a, 0x01, 0x79, 0x12, 0x03, 0x73, 0x75,
        0x6d, 0x22, 0x03, 0x44, 0x69, 0x76, 0x12, 0x0e, 0x74, 0x65, 0x73, 0x74, 0x5f, 0x61, 0x64,
        0x64, 0x5f, 0x62, 0x63, 0x61, 0x73, 0x74, 0x5a, 0x17, 0x0a, 0x01, 0x78, 0x12, 0x12, 0x0a,
        0x10, 0x08, 0x01, 0x12, 0x0c, 0x0a, 0x02, 0x08, 0x01, 0x32, 0x02, 0x08, 0x04, 0x0a, 0x02,
        0x08, 0x05, 0x5a, 0x0f, 0x0a, 0x01, 0x79, 0x12, 0x0a, 0x0a, 0x08, 0x08, 0x01, 0x12, 0x04,
        0x0a, 0x02, 0x08, 0x05, 0x62, 0x19, 0x5d, 0x03, 0x73, 0x75, 0x6d, 0x12, 0x12, 0x0a, 0x10,
        0x08, 0x01, 0x12, 0x0c, 0x0a, 0x02, 0x08, 0x03, 0x0a, 0x02, 0x08, 0x04, 0x0a, 0x02, 0x08,
        0x05, 0x42, 0x04, 0x0a, 0x00, 0x10, 0x0e};
    assert_int_not_equal(salus_onnx_check_buffer(nameless, sizeof nameless, NULL, why, sizeof why),
                         SALUS_OK);
    assert_true(why[0] != 0);
}

/* Wraps buf[0..len) as field `field` (length-delimited) of a new message,
 * in place; returns the new length. */
static size_t wrap(uint8_t *buf, size_t len, unsigned field)
{
    uint8_t head[12];
    size_t h = 0;
    head[h++] = (uint8_t) (field << 3 | 2);
    for (size_t v = len;; v >>= 7) {
        head[h++] = (uint8_t) ((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
        if (v < 0x80)
            break;
    }
    memmove(buf + h, buf, len);
    memcpy(buf, head, h);
    return len + h;
}

/* Graphs nested in node attributes a thousand deep: protobuf-c would
 * recurse once per level; refused before it decodes. */
static void refuses_deep_nesting(void **state)
{
    (void) state;
    static uint8_t buf[1 << 16];
    size_t len = 0;
    for (int level = 0; level < 1000; level++) {
        len = wrap(buf, len, 6); /* AttributeProto.g */
        len = wrap(buf, len, 5); /* NodeProto.attribute */
        len = wrap(buf, len, 1); /* GraphProto.node */
    }
    len = wrap(buf, len, 7); /* ModelProto.graph */
    salus_onnx_model *m;
    refused(salus_onnx_load_buffer(session, buf, len, NULL, &m), SALUS_EUNSUPPORTED,
            (const char *[]){"nested deeper", NULL});
    char why[256];
    assert_int_equal(salus_onnx_check_buffer(buf, len, NULL, why, sizeof why), SALUS_EUNSUPPORTED);
    /* a length running past the end */
    static const uint8_t bad[] = {0x3a, 0x7f, 0x0a};
    assert_int_equal(salus_onnx_check_buffer(bad, sizeof bad, NULL, why, sizeof why), SALUS_EINVAL);
    assert_non_null(strstr(why, "malformed"));
}

/* The server's persistent memory in use, as salusctl status words it. */
static void persistent_now(char *out, size_t len)
{
    char *text;
    assert_sl_ok(salus_status_text(client, &text));
    const char *p = strstr(text, "persistent ");
    assert_non_null(p);
    const char *end = strstr(p, " + ");
    assert_non_null(end);
    snprintf(out, len, "%.*s", (int) (end - p), p); /* "persistent 1.8 KiB" */
    salus_free(text);
}

/* A refusal after constants were uploaded (a Conv's weights, then an op
 * salus lacks) frees them again: the server holds what it held before. */
static void refusal_frees_uploaded_tensors(void **state)
{
    (void) state;
    char before[128], after[128];
    persistent_now(before, sizeof before);
    model_begin(14);
    add_input("x", 4, (int64_t[]){1, 3, 8, 8});
    static int64_t wdims[4] = {16, 3, 3, 3};
    static float w[16 * 3 * 3 * 3];
    Onnx__TensorProto *t = &inits[graph.n_initializer];
    onnx__tensor_proto__init(t);
    t->name = "w", t->has_data_type = true, t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t->n_dims = 4, t->dims = wdims;
    t->has_raw_data = true, t->raw_data.len = sizeof w, t->raw_data.data = (uint8_t *) w;
    graph.initializer[graph.n_initializer++] = t;
    static char *cin[] = {"x", "w"}, *cout[] = {"c"}, *hin[] = {"c"}, *hout[] = {"y"};
    add_node("Conv", "conv", 2, cin, 1, cout);
    add_node("Hardmax", "hm", 1, hin, 1, hout);
    add_output("y");
    salus_onnx_model *m;
    refused(load(NULL, &m), SALUS_EUNSUPPORTED, (const char *[]){"hm", "Hardmax", NULL});
    persistent_now(after, sizeof after);
    assert_string_equal(before, after);
    /* the same model without the refused node holds the weights */
    graph.n_node = 1;
    graph.output[0] = value_info("c", 0, NULL);
    char during[128];
    assert_sl_ok(load(NULL, &m));
    persistent_now(during, sizeof during);
    assert_string_not_equal(before, during);
    salus_onnx_free(m);
    persistent_now(after, sizeof after);
    assert_string_equal(before, after);
}

/* The nodes torch.onnx.export writes for nn.LayerNorm (below opset 17) and
 * exact GELU, in its order, with the GELU's 0.5 a Constant node that comes
 * after the pattern's first node: imported as one layer_norm and one
 * ew_unary, no reductions left, and the result of the definition. When an
 * intermediate (x - mean) is also a graph output, nothing is fused and
 * the result is the same. */
static void fuses_layer_norm_and_gelu(void **state)
{
    (void) state;
    enum { R = 3, D = 5 };
    static const float w[D] = {1, 2, -1, 0.5f, 3}, b[D] = {0, 0.5f, 1, -2, 0.25f};
    static const float two = 2, eps = 1e-5f, sqrt2 = 1.41421354f, one = 1, half = 0.5f;
    float x[R * D], y[R * D], d_out[R * D];
    for (int i = 0; i < R * D; i++)
        x[i] = (float) ((i * 7) % 11) * 0.37f - 1.5f;
    for (int expose = 0; expose < 2; expose++) {
        model_begin(14);
        add_input("x", 2, (int64_t[]){R, D});
        add_init_f32("two", 0, NULL, &two);
        add_init_f32("eps", 0, NULL, &eps);
        add_init_f32("w", 1, (int64_t[]){D}, w);
        add_init_f32("b", 1, (int64_t[]){D}, b);
        add_init_f32("sqrt2", 0, NULL, &sqrt2);
        add_init_f32("one", 0, NULL, &one);
        static int64_t last = -1;
        static char *rm_in[] = {"x"}, *rm_out[] = {"m"}, *sub_in[] = {"x", "m"}, *sub_out[] = {"d"},
                    *pow_in[] = {"d", "two"}, *pow_out[] = {"p"}, *v_in[] = {"p"}, *v_out[] = {"v"},
                    *add_in[] = {"v", "eps"}, *add_out[] = {"ve"}, *sq_in[] = {"ve"},
                    *sq_out[] = {"s"}, *div_in[] = {"d", "s"}, *div_out[] = {"n"},
                    *mul_in[] = {"n", "w"}, *mul_out[] = {"nw"}, *ab_in[] = {"nw", "b"},
                    *ab_out[] = {"ln"}, *g0_in[] = {"ln", "sqrt2"}, *g0_out[] = {"ga"},
                    *erf_in[] = {"ga"}, *erf_out[] = {"ge"}, *g1_in[] = {"ge", "one"},
                    *g1_out[] = {"g1"}, *g2_in[] = {"ln", "g1"}, *g2_out[] = {"g2"},
                    *c_out[] = {"half"}, *g3_in[] = {"g2", "half"}, *g3_out[] = {"y"};
        attr_ints(add_node("ReduceMean", "mean", 1, rm_in, 1, rm_out), "axes", 1, &last);
        add_node("Sub", "sub", 2, sub_in, 1, sub_out);
        add_node("Pow", "pow", 2, pow_in, 1, pow_out);
        attr_ints(add_node("ReduceMean", "var", 1, v_in, 1, v_out), "axes", 1, &last);
        add_node("Add", "add_eps", 2, add_in, 1, add_out);
        add_node("Sqrt", "sqrt", 1, sq_in, 1, sq_out);
        add_node("Div", "div", 2, div_in, 1, div_out);
        add_node("Mul", "mul_w", 2, mul_in, 1, mul_out);
        add_node("Add", "add_b", 2, ab_in, 1, ab_out);
        add_node("Div", "gelu_div", 2, g0_in, 1, g0_out);
        add_node("Erf", "gelu_erf", 1, erf_in, 1, erf_out);
        add_node("Add", "gelu_add", 2, g1_in, 1, g1_out);
        add_node("Mul", "gelu_mul", 2, g2_in, 1, g2_out);
        /* the 0.5 as a Constant node, as the exporter places them */
        static Onnx__TensorProto ht;
        onnx__tensor_proto__init(&ht);
        ht.has_data_type = true;
        ht.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
        ht.n_float_data = 1;
        ht.float_data = (float *) &half;
        Onnx__NodeProto *c = add_node("Constant", "half", 0, NULL, 1, c_out);
        attr_ints(c, "value", 0, NULL);
        attr_ptrs[n_attrs - 1]->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
        attr_ptrs[n_attrs - 1]->t = &ht;
        add_node("Mul", "gelu_half", 2, g3_in, 1, g3_out);
        add_output("y");
        if (expose)
            add_output("d");
        salus_onnx_model *m;
        assert_sl_ok(load(NULL, &m));
        const salus_graph *g = salus_onnx_graph(m);
        assert_int_equal(count_op(g, "layer_norm"), expose ? 0 : 1);
        assert_int_equal(count_op(g, "reduce_axes"), expose ? 2 : 0);
        assert_int_equal(count_op(g, "ew_unary"), expose ? 2 : 1);
        assert_sl_ok(
            salus_onnx_run(m, (const void *[]){x}, expose ? (void *[]){y, d_out} : (void *[]){y}));
        for (int r = 0; r < R; r++) {
            double mean = 0, var = 0;
            for (int j = 0; j < D; j++)
                mean += x[r * D + j] / (double) D;
            for (int j = 0; j < D; j++)
                var += (x[r * D + j] - mean) * (x[r * D + j] - mean) / D;
            for (int j = 0; j < D; j++) {
                double l = (x[r * D + j] - mean) / sqrt(var + 1e-5) * w[j] + b[j];
                double want = 0.5 * l * (1 + erf(l / sqrt(2.0)));
                if (!(fabs(y[r * D + j] - want) <= 2e-6 * (1 + fabs(want))))
                    fail_msg("expose=%d [%d]: %.9g, want %.9g", expose, r * D + j,
                             (double) y[r * D + j], want);
            }
        }
        salus_onnx_free(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(folds_shape_arithmetic),
        cmocka_unit_test(refuses_with_reasons),
        cmocka_unit_test(refuses_malformed_files),
        cmocka_unit_test(bad_runtime_index_fails_the_run),
        cmocka_unit_test(autocasts_f32_only_ops),
        cmocka_unit_test(checks_without_a_server),
        cmocka_unit_test(refuses_deep_nesting),
        cmocka_unit_test(refusal_frees_uploaded_tensors),
        cmocka_unit_test(trilu_keeps_infinities),
        cmocka_unit_test(resizes_by_constant_scales),
        cmocka_unit_test(masks_padding_before_softmax),
        cmocka_unit_test(casts_to_and_from_bool),
        cmocka_unit_test(fuses_layer_norm_and_gelu),
    };
    return cmocka_run_group_tests_name("onnx import", tests, start, stop);
}
