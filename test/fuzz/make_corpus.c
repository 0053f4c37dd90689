/* Writes the fuzz targets' seed corpus: valid encoded graphs (for
 * fuzz_graph, naming the tensors of fuzz_common.h) and request sequences
 * (for fuzz_request, in its record format, against its prelude's sessions).
 * Usage: make_corpus CORPUS_DIR   (writes CORPUS_DIR/{graph,request}/NAME).
 * Run after a protocol change and commit the output. */
#include "fuzz_common.h"
#include "graph_msg.h"
#include "ops.h"
#include "salus.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *root;

static void write_file(const char *sub, const char *name, const uint8_t *buf, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, sub);
    (void) mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", root, sub, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "make_corpus: %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

/* ---- graphs ---- */

static void gb_write(sl_test_gb *b, const char *name)
{
    uint8_t buf[4096];
    size_t n = salus__graph__get_packed_size(&b->g);
    if (n > sizeof buf)
        exit(1);
    salus__graph__pack(&b->g, buf);
    write_file("graph", name, buf, n);
}

static void graphs(void)
{
    sl_test_gb b;
    const int64_t d23[] = {2, 3}, d4[] = {4}, d2[] = {2};
    /* x @ t3 -> relu -> reduce_sum */
    sl_test_gb_init(&b);
    sl_test_gb_input(&b, SL_F32, 2, d23);
    sl_test_gb_param(&b, 3);
    sl_test_gb_op(&b, "matmul", 2, (uint32_t[]){0, 1});
    sl_test_gb_op(&b, "relu", 1, (uint32_t[]){2});
    sl_test_gb_op(&b, "reduce_sum", 1, (uint32_t[]){3});
    gb_write(&b, "matmul_relu_sum");

    /* a dense layer with bias and an MSE loss, its gradients and SGD */
    sl_test_gb_init(&b);
    sl_test_gb_input(&b, SL_F32, 2, d23);
    sl_test_gb_input(&b, SL_F32, 2, (int64_t[]){2, 2});
    sl_test_gb_param(&b, 3);
    sl_test_gb_param(&b, 7);
    sl_test_gb_op(&b, "matmul", 2, (uint32_t[]){0, 2});                /* 4 [2,2] */
    sl_test_gb_op(&b, "bias_add", 2, (uint32_t[]){4, 3});              /* 5 */
    sl_test_gb_op(&b, "sigmoid", 1, (uint32_t[]){5});                  /* 6 */
    sl_test_gb_op(&b, "mse_loss", 2, (uint32_t[]){6, 1});              /* 7 */
    sl_test_gb_op(&b, "mse_grad", 2, (uint32_t[]){6, 1});              /* 8 */
    sl_test_gb_op(&b, "sigmoid_grad", 2, (uint32_t[]){8, 6});          /* 9 */
    sl_test_gb_op(&b, "bias_grad", 1, (uint32_t[]){9});                /* 10 [2] */
    Salus__Op *o = sl_test_gb_op(&b, "matmul", 2, (uint32_t[]){0, 9}); /* 11 [3,2] */
    o->n_iattrs = 1;
    o->iattrs[0] = 1; /* transA */
    o = sl_test_gb_op(&b, "sgd_update", 2, (uint32_t[]){2, 11});
    o->n_fattrs = 1;
    o->fattrs[0] = 0.05f;
    o = sl_test_gb_op(&b, "momentum_update", 3, (uint32_t[]){3, 10, 3});
    o->n_fattrs = 3;
    o->fattrs[0] = 0.1f;
    o->fattrs[1] = 0.9f;
    gb_write(&b, "dense_mse_sgd");

    /* convolution, pooling, batch norm on the NCHW tensor 5 */
    sl_test_gb_init(&b);
    sl_test_gb_param(&b, 5);                                /* 0 [1,2,4,4] */
    sl_test_gb_param(&b, 6);                                /* 1 [3,2,3,3] */
    sl_test_gb_param(&b, 7);                                /* 2 [2] */
    o = sl_test_gb_op(&b, "conv2d", 2, (uint32_t[]){0, 1}); /* 3 [1,3,4,4] */
    o->n_iattrs = 6;
    o->iattrs[2] = o->iattrs[3] = o->iattrs[4] = o->iattrs[5] = 1;
    sl_test_gb_op(&b, "relu", 1, (uint32_t[]){3});        /* 4 */
    o = sl_test_gb_op(&b, "maxpool", 1, (uint32_t[]){4}); /* 5 [1,3,2,2] */
    o->n_iattrs = 4;
    o->iattrs[0] = o->iattrs[1] = o->iattrs[2] = o->iattrs[3] = 2;
    o = sl_test_gb_op(&b, "avgpool", 1, (uint32_t[]){0}); /* 6 [1,2,2,2] */
    o->n_iattrs = 4;
    o->iattrs[0] = o->iattrs[1] = o->iattrs[2] = o->iattrs[3] = 2;
    o = sl_test_gb_op(&b, "batchnorm", 5, (uint32_t[]){0, 2, 2, 2, 2}); /* 7, 8, 9 */
    o->n_fattrs = 2;
    o->fattrs[0] = 1e-5f;
    o->fattrs[1] = 0.9f;
    o = sl_test_gb_op(&b, "conv2d_grad_input", 3, (uint32_t[]){3, 1, 0});
    o->n_iattrs = 6;
    o->iattrs[2] = o->iattrs[3] = o->iattrs[4] = o->iattrs[5] = 1;
    gb_write(&b, "conv_pool_batchnorm");

    /* softmax cross-entropy with i32 labels, argmax, reshape views */
    sl_test_gb_init(&b);
    sl_test_gb_param(&b, 2);                                       /* 0 [2,3] */
    sl_test_gb_param(&b, 4);                                       /* 1 i32[2] */
    sl_test_gb_op(&b, "softmax_xent", 2, (uint32_t[]){0, 1});      /* 2 [], 3 [2,3] */
    sl_test_gb_op(&b, "softmax_xent_grad", 2, (uint32_t[]){3, 1}); /* 4 */
    sl_test_gb_op(&b, "argmax", 1, (uint32_t[]){0});               /* 5 i32[2] */
    o = sl_test_gb_op(&b, "reshape", 1, (uint32_t[]){4});          /* 6 [3,2] */
    o->n_iattrs = 2;
    o->iattrs[0] = 3;
    o->iattrs[1] = -1;
    o = sl_test_gb_op(&b, "reshape", 1, (uint32_t[]){0}); /* 7 [6], a param view */
    o->n_iattrs = 1;
    o->iattrs[0] = 6;
    sl_test_gb_op(&b, "reduce_mean", 1, (uint32_t[]){7}); /* 8 */
    gb_write(&b, "softmax_xent_reshape");

    /* adam on the vector tensor, with the scalar step count */
    sl_test_gb_init(&b);
    sl_test_gb_input(&b, SL_F32, 1, d4);
    sl_test_gb_param(&b, 1);
    sl_test_gb_param(&b, 8);
    o = sl_test_gb_op(&b, "add_scalar", 1, (uint32_t[]){2});
    o->n_fattrs = 1;
    o->fattrs[0] = 1;
    sl_test_gb_op(&b, "copy", 1, (uint32_t[]){0});   /* 3 */
    sl_test_gb_op(&b, "mul", 2, (uint32_t[]){0, 3}); /* 4 */
    o = sl_test_gb_op(&b, "adam_update", 5, (uint32_t[]){1, 4, 3, 4, 2});
    o->n_fattrs = 4;
    o->fattrs[0] = 1e-3f;
    o->fattrs[1] = 0.9f;
    o->fattrs[2] = 0.999f;
    o->fattrs[3] = 1e-8f;
    gb_write(&b, "adam");

    /* refusals: a value used before it is defined, an unknown op, a
     * missing tensor, a huge input */
    sl_test_gb_init(&b);
    sl_test_gb_input(&b, SL_F32, 1, d2);
    sl_test_gb_op(&b, "relu", 1, (uint32_t[]){1});
    gb_write(&b, "bad_dangling");
    sl_test_gb_init(&b);
    sl_test_gb_param(&b, 99);
    sl_test_gb_op(&b, "frobnicate", 1, (uint32_t[]){0});
    gb_write(&b, "bad_unknown");
    sl_test_gb_init(&b);
    sl_test_gb_input(&b, SL_F32, 3, (int64_t[]){1ll << 40, 1ll << 40, 4});
    sl_test_gb_op(&b, "tanh", 1, (uint32_t[]){0});
    gb_write(&b, "bad_huge");
}

/* ---- request sequences ---- */

typedef struct rb {
    uint8_t buf[8192];
    size_t len;
} rb;

static void rb_add(rb *r, unsigned kind, unsigned arg, const Salus__Request *m)
{
    size_t n = m ? salus__request__get_packed_size(m) : 0;
    if (r->len + 4 + n > sizeof r->buf || n > 0xffff)
        exit(1);
    uint8_t *p = r->buf + r->len;
    p[0] = (uint8_t) kind;
    p[1] = (uint8_t) arg;
    p[2] = (uint8_t) (n & 0xff);
    p[3] = (uint8_t) (n >> 8);
    if (m)
        salus__request__pack(m, p + 4);
    r->len += 4 + n;
}

#define REQ(body_case_, field, value)                                                              \
    ((Salus__Request){.base = PROTOBUF_C_MESSAGE_INIT(&salus__request__descriptor),                \
                      .body_case = (body_case_),                                                   \
                      .field = (value)})

static void requests(void)
{
    rb r;
    uint8_t f24[24] = {0}, f16[16] = {0};
    ProtobufCBinaryData feed24 = {sizeof f24, f24}, feed16 = {sizeof f16, f16};
    uint32_t fetch[] = {4, 2, 3};

    /* run both prelude graphs, read back, write, free */
    Salus__Run run = SALUS__RUN__INIT;
    run.graph_id = 9;
    run.n_feeds = 1;
    run.feeds = &feed24;
    run.n_fetches = 3;
    run.fetches = fetch;
    Salus__Request run_a = REQ(SALUS__REQUEST__BODY_RUN, run, &run);
    Salus__Run run2 = SALUS__RUN__INIT;
    run2.graph_id = 2;
    run2.n_feeds = 1;
    run2.feeds = &feed16;
    run2.n_fetches = 2;
    run2.fetches = (uint32_t[]){1, 2};
    Salus__Request run_b = REQ(SALUS__REQUEST__BODY_RUN, run, &run2);
    Salus__ReadTensor rd = SALUS__READ_TENSOR__INIT;
    rd.tensor_id = 1;
    Salus__Request read = REQ(SALUS__REQUEST__BODY_READ_TENSOR, read_tensor, &rd);
    Salus__WriteTensor wr = SALUS__WRITE_TENSOR__INIT;
    wr.tensor_id = 1;
    wr.data = feed16;
    Salus__Request write = REQ(SALUS__REQUEST__BODY_WRITE_TENSOR, write_tensor, &wr);
    Salus__FreeTensor ft = SALUS__FREE_TENSOR__INIT;
    ft.tensor_id = 8;
    Salus__Request free_t = REQ(SALUS__REQUEST__BODY_FREE_TENSOR, free_tensor, &ft);
    Salus__FreeGraph fg = SALUS__FREE_GRAPH__INIT;
    fg.graph_id = 9;
    Salus__Request free_g = REQ(SALUS__REQUEST__BODY_FREE_GRAPH, free_graph, &fg);
    Salus__CloseSession cs = SALUS__CLOSE_SESSION__INIT;
    Salus__Request close = REQ(SALUS__REQUEST__BODY_CLOSE_SESSION, close_session, &cs);
    Salus__Status st = SALUS__STATUS__INIT;
    Salus__Request status = REQ(SALUS__REQUEST__BODY_STATUS, status, &st);
    Salus__Hello he = SALUS__HELLO__INIT;
    he.protocol_version = 1;
    Salus__Request hello = REQ(SALUS__REQUEST__BODY_HELLO, hello, &he);

    r.len = 0;
    rb_add(&r, FR_STAMP, 0, &run_a);
    rb_add(&r, FR_STAMP, 0, &read);
    rb_add(&r, FR_STAMP, 0, &write);
    rb_add(&r, FR_STAMP, 0, &free_t);
    rb_add(&r, FR_STAMP | FR_PIPE_BIT, 1, &run_b);
    rb_add(&r, FR_STAMP | FR_PIPE_BIT, 1, &read);
    rb_add(&r, FR_RAW, 0, &status);
    write_file("request", "run_read_write_free", r.buf, r.len);

    /* another session's ids, tokens, and a closed session's token */
    r.len = 0;
    rd.tensor_id = 3;
    rb_add(&r, FR_STAMP | FR_PIPE_BIT, 1, &read); /* B has no tensor 3 */
    rb_add(&r, FR_CROSS, 0 | 1 << 2, &read);      /* A's id, B's token */
    rb_add(&r, FR_BAD_TOKEN, 0, &read);
    rb_add(&r, FR_STAMP, 0, &close);
    rb_add(&r, FR_STAMP, 0, &read); /* replayed token of a closed session */
    rb_add(&r, FR_STAMP | FR_PIPE_BIT, 1, &run_a);
    write_file("request", "isolation_tokens", r.buf, r.len);

    /* sessions opened by the input, admission waits, connection drops */
    r.len = 0;
    Salus__SessionHints h = SALUS__SESSION_HINTS__INIT;
    h.name = (char *) "big";
    h.persistent_bytes = 48u << 20;
    h.ephemeral_bytes = 8u << 20;
    Salus__OpenSession os = SALUS__OPEN_SESSION__INIT;
    os.hints = &h;
    Salus__Request open = REQ(SALUS__REQUEST__BODY_OPEN_SESSION, open_session, &os);
    rb_add(&r, FR_RAW, 0, &open);
    Salus__TensorDesc d = SALUS__TENSOR_DESC__INIT;
    d.n_dims = 1;
    d.dims = (int64_t[]){1 << 20};
    Salus__CreateTensor ct = SALUS__CREATE_TENSOR__INIT;
    ct.desc = &d;
    Salus__Request create = REQ(SALUS__REQUEST__BODY_CREATE_TENSOR, create_tensor, &ct);
    rb_add(&r, FR_STAMP, 2, &create);
    h.wait_for_admission = 1;
    rb_add(&r, FR_RAW | FR_PIPE_BIT, 0, &open); /* waits: does not fit */
    rb_add(&r, FR_RAW, 0, &status);
    rb_add(&r, FR_STAMP, 2, &close); /* the waiter gets in */
    rb_add(&r, FR_STAMP, 3, &create);
    rb_add(&r, FR_PIPE_GONE, 1, NULL);
    rb_add(&r, FR_STAMP, 0, &run_a);
    write_file("request", "admission_and_drops", r.buf, r.len);

    /* a graph registered by the input, then freed while its tensor is busy */
    r.len = 0;
    int64_t d4[] = {4};
    Salus__TensorDesc x = SALUS__TENSOR_DESC__INIT;
    x.n_dims = 1;
    x.dims = d4;
    Salus__TensorDesc *xs[] = {&x};
    Salus__Op relu = SALUS__OP__INIT;
    relu.type = (char *) "relu";
    relu.n_inputs = 1;
    relu.inputs = (uint32_t[]){1};
    Salus__Op *ops[] = {&relu};
    Salus__Graph g = SALUS__GRAPH__INIT;
    g.n_inputs = 1;
    g.inputs = xs;
    g.n_params = 1;
    g.params = (uint64_t[]){1};
    g.n_ops = 1;
    g.ops = ops;
    Salus__RegisterGraph rg = SALUS__REGISTER_GRAPH__INIT;
    rg.graph = &g;
    Salus__Request reg = REQ(SALUS__REQUEST__BODY_REGISTER_GRAPH, register_graph, &rg);
    rb_add(&r, FR_STAMP, 0, &reg); /* graph 10 */
    ft.tensor_id = 1;
    rb_add(&r, FR_STAMP, 0, &free_t); /* busy */
    run.graph_id = 10;
    run.feeds = &feed16;
    run.n_fetches = 1;
    fetch[0] = 2;
    rb_add(&r, FR_STAMP, 0, &run_a);
    rb_add(&r, FR_STAMP, 0, &free_g);
    fg.graph_id = 10;
    rb_add(&r, FR_STAMP, 0, &free_g);
    rb_add(&r, FR_STAMP, 0, &free_t);
    rb_add(&r, FR_OOM, 0 | 3 << 2, &reg);
    rb_add(&r, FR_OOM, 0 | 1 << 2, &create);
    write_file("request", "register_free_oom", r.buf, r.len);

    /* operator requests and the session-less ones */
    r.len = 0;
    rb_add(&r, FR_RAW, 0, &hello);
    Salus__SetPolicy sp = SALUS__SET_POLICY__INIT;
    sp.policy = (char *) "fifo";
    sp.strict = 1;
    Salus__Request setp = REQ(SALUS__REQUEST__BODY_SET_POLICY, set_policy, &sp);
    rb_add(&r, FR_RAW, 0, &setp);
    Salus__SetSession ss = SALUS__SET_SESSION__INIT;
    ss.target_session = 1;
    ss.set_priority = 1;
    ss.priority = 5;
    ss.set_weight = 1;
    ss.weight = 2;
    Salus__Request sets = REQ(SALUS__REQUEST__BODY_SET_SESSION, set_session, &ss);
    rb_add(&r, FR_RAW, 0, &sets);
    rb_add(&r, FR_STAMP | FR_PIPE_BIT, 1, &run_b);
    rb_add(&r, FR_STAMP, 0, &run_a);
    sp.policy = (char *) "priority";
    sp.strict = 0;
    rb_add(&r, FR_RAW, 0, &setp);
    rb_add(&r, FR_STAMP, 0, &run_a);
    rb_add(&r, FR_RAW, 0, &status);
    write_file("request", "operator", r.buf, r.len);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_corpus CORPUS_DIR\n");
        return 2;
    }
    root = argv[1];
    (void) mkdir(root, 0755);
    graphs();
    requests();
    return 0;
}
