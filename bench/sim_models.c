/* bench/sim_models: validates the sim backend's timing model against
 * published, measured training iterations of ResNet-50 and VGG-16.
 *
 *   sim_models [--json FILE]
 *
 * For each case it builds the op list of one fp32 training iteration
 * (forward, backward and the SGD update of every parameter) from the op
 * registry, validating every op's shapes with sl_op_infer, and sums the
 * virtual-time model (sl_sim_op_timing) on the case's device profile: one
 * stream, ops back to back, which is how TensorFlow 1.x runs these models on
 * one GPU. The modeled iteration time is compared with the measured one side
 * by side; ratio = modeled / published (1.0 is perfect, the goal is within
 * 0.7..1.3). Each profile's eff_compute was fitted on its VGG-16 row (see
 * kernels/sim/profiles.c); every other row is out of sample. The last line is
 *   BENCH sim_models resnet50_ratio=... vgg16_ratio=... (V100) and the P100
 * ratios against the Salus artifact and TensorFlow's published benchmarks.
 * --eff-compute X / --eff-mem Y override every profile's factors, to explore
 * the calibration.
 *
 * Not modeled (each a few % at most): dropout in VGG-16's classifier, L2
 * weight decay, the framework's own per-op overhead beyond launch_ns, and the
 * input pipeline (the published figures use synthetic data, none of them
 * copies images per iteration). */
#include "sim/sim.h"
#include "sl_error.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind { K_CONV_FWD, K_CONV_BWD, K_BN, K_ELEMWISE, K_POOL, K_FC, K_LOSS, K_SGD, K_COUNT };
static const char *const kind_names[K_COUNT] = {"conv_fwd", "conv_bwd", "batchnorm", "elementwise",
                                                "pool",     "fc",       "loss",      "sgd"};

/* One iteration under construction: the model's running sums. */
typedef struct net {
    const sl_sim_profile *p;
    int64_t batch;
    uint64_t ns, kind_ns[K_COUNT], mem_bound_ns;
    double flops;
    unsigned ops;
    uint64_t params;
} net;

static sl_shape shp(unsigned ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    sl_shape s = {.dtype = SL_F32, .ndim = (uint8_t) ndim, .dims = {d0, d1, d2, d3}};
    return s;
}

static sl_shape vec(int64_t n)
{
    return shp(1, n, 0, 0, 0);
}

/* Validates and models one op; returns its first output's shape (or in[0]'s
 * for ops without outputs). Exits on a shape error: that is a bug here. */
static sl_shape emit(net *n, enum kind k, unsigned op, const sl_op_attrs *a, const sl_shape *in,
                     unsigned n_in)
{
    sl_shape out[SL_OP_MAX_OUT];
    char err[256];
    if (sl_op_infer(op, a, in, n_in, out, err, sizeof err) != SL_OK) {
        fprintf(stderr, "sim_models: %s\n", err);
        exit(2);
    }
    sl_sim_timing t;
    int rc = sl_sim_op_timing(n->p, op, a, in, out, &t);
    if (rc != SL_OK) {
        fprintf(stderr, "sim_models: cannot model op %s (error %d)\n", sl_op_get(op)->name, rc);
        exit(2);
    }
    uint64_t ns = t.launch_ns + t.work_ns;
    n->ns += ns;
    n->kind_ns[k] += ns;
    n->mem_bound_ns += t.memory_bound ? ns : 0;
    n->flops += (double) t.flops;
    n->ops++;
    return sl_op_get(op)->n_out ? out[0] : in[0];
}

static void sgd(net *n, sl_shape param)
{
    sl_op_attrs a = {.f = {0.1f}};
    sl_shape in[2] = {param, param};
    (void) emit(n, K_SGD, SL_OP_SGD_UPDATE, &a, in, 2);
    n->params += sl_shape_elems(&param);
}

/* Each layer below emits its forward op, its backward ops and the update of
 * its parameters: the iteration's total is a sum, so order does not matter. */

static sl_shape conv(net *n, sl_shape x, int64_t k, int64_t r, int64_t stride, int64_t pad,
                     bool need_dx, bool bias)
{
    sl_op_attrs a = {.i = {stride, stride, pad, pad, pad, pad, 1, 1, 1}};
    sl_shape w = shp(4, k, x.dims[1], r, r);
    sl_shape in[3] = {x, w};
    sl_shape y = emit(n, K_CONV_FWD, SL_OP_CONV2D, &a, in, 2);
    sl_shape gf[3] = {y, x, w};
    (void) emit(n, K_CONV_BWD, SL_OP_CONV2D_GRAD_FILTER, &a, gf, 3);
    if (need_dx) { /* the first layer's input gradient is never needed */
        sl_shape gi[3] = {y, w, x};
        (void) emit(n, K_CONV_BWD, SL_OP_CONV2D_GRAD_INPUT, &a, gi, 3);
    }
    sgd(n, w);
    if (bias) {
        sl_shape bin[2] = {y, vec(k)};
        (void) emit(n, K_ELEMWISE, SL_OP_CHANNEL_BIAS_ADD, NULL, bin, 2);
        (void) emit(n, K_ELEMWISE, SL_OP_CHANNEL_BIAS_GRAD, NULL, &y, 1);
        sgd(n, vec(k));
    }
    return y;
}

static sl_shape batchnorm(net *n, sl_shape x)
{
    sl_shape c = vec(x.dims[1]);
    sl_op_attrs a = {.f = {1e-5f, 0.9f}};
    sl_shape in[5] = {x, c, c, c, c};
    sl_shape y = emit(n, K_BN, SL_OP_BATCHNORM, &a, in, 5);
    sl_shape gin[5] = {y, x, c, c, c};
    (void) emit(n, K_BN, SL_OP_BATCHNORM_GRAD, NULL, gin, 5);
    sgd(n, c); /* scale */
    sgd(n, c); /* bias */
    return y;
}

static sl_shape relu(net *n, sl_shape x)
{
    sl_shape y = emit(n, K_ELEMWISE, SL_OP_RELU, NULL, &x, 1);
    sl_shape g[2] = {y, x};
    (void) emit(n, K_ELEMWISE, SL_OP_RELU_GRAD, NULL, g, 2);
    return y;
}

static sl_shape maxpool(net *n, sl_shape x, int64_t k, int64_t stride, int64_t pad)
{
    sl_op_attrs a = {.i = {k, k, stride, stride, pad, pad, pad, pad}};
    sl_shape y = emit(n, K_POOL, SL_OP_MAXPOOL, &a, &x, 1);
    sl_shape g[3] = {y, x, y};
    (void) emit(n, K_POOL, SL_OP_MAXPOOL_GRAD, &a, g, 3);
    return y;
}

static sl_shape global_avgpool(net *n, sl_shape x)
{
    sl_op_attrs a = {.i = {x.dims[2], x.dims[3], 1, 1}};
    sl_shape y = emit(n, K_POOL, SL_OP_AVGPOOL, &a, &x, 1);
    sl_shape g[2] = {y, x};
    (void) emit(n, K_POOL, SL_OP_AVGPOOL_GRAD, &a, g, 2);
    return shp(2, x.dims[0], x.dims[1], 0, 0); /* [N,C,1,1] viewed as [N,C] */
}

/* Fully connected: y = x W + b, with dW = x^T dy, dx = dy W^T, db. */
static sl_shape fc(net *n, sl_shape x, int64_t out)
{
    sl_shape w = shp(2, x.dims[1], out, 0, 0);
    sl_shape in[2] = {x, w};
    sl_shape y = emit(n, K_FC, SL_OP_MATMUL, NULL, in, 2);
    sl_shape bin[2] = {y, vec(out)};
    (void) emit(n, K_FC, SL_OP_BIAS_ADD, NULL, bin, 2);
    (void) emit(n, K_FC, SL_OP_BIAS_GRAD, NULL, &y, 1);
    sl_op_attrs ta = {.i = {1, 0}}, tb = {.i = {0, 1}};
    sl_shape dw[2] = {x, y}, dx[2] = {y, w};
    (void) emit(n, K_FC, SL_OP_MATMUL, &ta, dw, 2);
    (void) emit(n, K_FC, SL_OP_MATMUL, &tb, dx, 2);
    sgd(n, w);
    sgd(n, vec(out));
    return y;
}

static void softmax_xent(net *n, sl_shape logits)
{
    sl_shape labels = {.dtype = SL_I32, .ndim = 1, .dims = {logits.dims[0]}};
    sl_shape in[2] = {logits, labels};
    (void) emit(n, K_LOSS, SL_OP_SOFTMAX_XENT, NULL, in, 2);
    (void) emit(n, K_LOSS, SL_OP_SOFTMAX_XENT_GRAD, NULL, in, 2);
}

/* ResNet-50 bottleneck. v1 (tf_cnn_benchmarks "resnet50") strides the first
 * 1x1 convolution, v1.5 (NVIDIA's) the 3x3 one. The residual add runs once
 * forward and once backward (summing the two branches' input gradients). */
static sl_shape bottleneck(net *n, sl_shape x, int64_t mid, int64_t out, int64_t stride, bool v15)
{
    sl_shape y = relu(n, batchnorm(n, conv(n, x, mid, 1, v15 ? 1 : stride, 0, true, false)));
    y = relu(n, batchnorm(n, conv(n, y, mid, 3, v15 ? stride : 1, 1, true, false)));
    y = batchnorm(n, conv(n, y, out, 1, 1, 0, true, false));
    if (x.dims[1] != out || stride != 1)
        (void) batchnorm(n, conv(n, x, out, 1, stride, 0, true, false));
    sl_shape add[2] = {y, y};
    (void) emit(n, K_ELEMWISE, SL_OP_ADD, NULL, add, 2);
    (void) emit(n, K_ELEMWISE, SL_OP_ADD, NULL, add, 2);
    return relu(n, y);
}

static void resnet50(net *n, bool v15)
{
    sl_shape x = shp(4, n->batch, 3, 224, 224);
    x = relu(n, batchnorm(n, conv(n, x, 64, 7, 2, 3, false, false)));
    x = maxpool(n, x, 3, 2, 1);
    static const struct {
        int blocks;
        int64_t mid, out, stride;
    } stages[] = {{3, 64, 256, 1}, {4, 128, 512, 2}, {6, 256, 1024, 2}, {3, 512, 2048, 2}};
    for (unsigned s = 0; s < 4; s++)
        for (int b = 0; b < stages[s].blocks; b++)
            x = bottleneck(n, x, stages[s].mid, stages[s].out, b == 0 ? stages[s].stride : 1, v15);
    softmax_xent(n, fc(n, global_avgpool(n, x), 1000));
}

static void vgg16(net *n)
{
    static const int64_t cfg[] = {64, 64,  0,   128, 128, 0,   256, 256, 256,
                                  0,  512, 512, 512, 0,   512, 512, 512, 0}; /* 0 = maxpool */
    sl_shape x = shp(4, n->batch, 3, 224, 224);
    bool first = true;
    for (unsigned i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        if (cfg[i] == 0) {
            x = maxpool(n, x, 2, 2, 0);
            continue;
        }
        x = relu(n, conv(n, x, cfg[i], 3, 1, 1, !first, true));
        first = false;
    }
    sl_shape flat = shp(2, n->batch, x.dims[1] * x.dims[2] * x.dims[3], 0, 0);
    sl_shape h = relu(n, fc(n, flat, 4096));
    h = relu(n, fc(n, h, 4096));
    softmax_xent(n, fc(n, h, 1000));
}

/* One comparison: a model on a profile at the published run's batch size. */
typedef struct bench_case {
    const char *key; /* BENCH key stem */
    const char *model, *profile;
    int64_t batch;
    double published_ms; /* measured time of one iteration at that batch */
    bool fitted;         /* the profile's eff_compute was fitted on this row */
    const char *source;
} bench_case;

/* Published measurements. ms per iteration = batch / (images/s), or
 * jct_s / iterations for the Salus artifact (10-minute variants: the least
 * start-up cost per iteration). */
static const bench_case cases[] = {
    {"resnet50", "resnet50_v1.5", "v100", 128, 128.0 / 364.9 * 1e3, false,
     "NVIDIA DeepLearningExamples TensorFlow/Classification/RN50v1.5 README (TF 19.05, DGX-1 "
     "V100 16GB, 1 GPU, FP32, no XLA): 364.9 img/s; batch 128 per DGX1V_trainbench_fp32.sh"},
    {"vgg16", "vgg16", "v100", 16, 71.7, true,
     "u39kun/deep-learning-benchmark README (TensorFlow 1.5, Tesla V100, FP32, batch 16): "
     "71.7 ms per forward+backward"},
    {"p100_salus_resnet50", "resnet50", "p100", 50, 622.487 / 2665 * 1e3, false,
     "Salus artifact tests/workloads.csv (shared/data/salus-workloads.csv), resnet50_50_10min: "
     "622.487 s / 2665 iterations, TF 1.x tf_cnn_benchmarks on a P100-class GPU"},
    {"p100_salus_vgg16", "vgg16", "p100", 50, 610.119 / 1693 * 1e3, true,
     "Salus artifact, vgg16_50_10min: 610.119 s / 1693 iterations"},
    {"p100_tf_resnet50", "resnet50", "p100", 64, 64.0 / 219 * 1e3, false,
     "tensorflow.org/performance/benchmarks (May 2017), DGX-1 P100, 1 GPU, synthetic data, "
     "batch 64: ResNet-50 219 img/s"},
    {"p100_tf_vgg16", "vgg16", "p100", 64, 64.0 / 154 * 1e3, false,
     "tensorflow.org/performance/benchmarks (May 2017), DGX-1 P100, 1 GPU, synthetic data, "
     "batch 64: VGG16 154 img/s"},
};
#define N_CASES (sizeof cases / sizeof cases[0])

/* --eff-compute / --eff-mem: override every profile's factors (0 = keep), to
 * explore the calibration. */
static double override_compute, override_mem;

static net model_case(const bench_case *c, sl_sim_profile *storage)
{
    net n = {.batch = c->batch};
    if (sl_sim_profile_find(c->profile, &n.p) != SL_OK) {
        fprintf(stderr, "sim_models: no profile %s\n", c->profile);
        exit(2);
    }
    *storage = *n.p;
    if (override_compute > 0)
        storage->eff_compute = override_compute;
    if (override_mem > 0)
        storage->eff_mem = override_mem;
    n.p = storage;
    if (strcmp(c->model, "vgg16") == 0)
        vgg16(&n);
    else
        resnet50(&n, strcmp(c->model, "resnet50_v1.5") == 0);
    return n;
}

int main(int argc, char **argv)
{
    const char *json_path = NULL;
    static const struct option longopts[] = {{"json", required_argument, NULL, 'j'},
                                             {"eff-compute", required_argument, NULL, 'c'},
                                             {"eff-mem", required_argument, NULL, 'm'},
                                             {NULL, 0, NULL, 0}};
    for (int ch; (ch = getopt_long(argc, argv, "j:c:m:", longopts, NULL)) != -1;) {
        if (ch == 'j') {
            json_path = optarg;
        } else if (ch == 'c' || ch == 'm') {
            double v = atof(optarg);
            if (!(v > 0 && v <= 1)) {
                fprintf(stderr, "sim_models: efficiency must be in (0, 1]\n");
                return 2;
            }
            *(ch == 'c' ? &override_compute : &override_mem) = v;
        } else {
            fprintf(stderr, "usage: %s [--json FILE] [--eff-compute X] [--eff-mem Y]\n", argv[0]);
            return 2;
        }
    }

    double ratio[N_CASES], modeled_ms[N_CASES];
    for (unsigned i = 0; i < N_CASES; i++) {
        const bench_case *c = &cases[i];
        sl_sim_profile prof;
        net n = model_case(c, &prof);
        modeled_ms[i] = (double) n.ns / 1e6;
        ratio[i] = modeled_ms[i] / c->published_ms;
        printf("%-14s %-5s batch %3lld: modeled %7.1f ms/iter, published %7.1f ms/iter, "
               "ratio %.2f%s\n",
               c->model, n.p->name, (long long) c->batch, modeled_ms[i], c->published_ms, ratio[i],
               c->fitted ? " (eff_compute fitted on this row)" : " (out of sample)");
        printf("    %u ops, %.1f GFLOP charged/image, %.1f M params, memory-bound %.0f%% of "
               "time;",
               n.ops, n.flops / 1e9 / (double) c->batch, (double) n.params / 1e6,
               100.0 * (double) n.mem_bound_ns / (double) n.ns);
        for (unsigned k = 0; k < K_COUNT; k++)
            if (n.kind_ns[k])
                printf(" %s %.1f", kind_names[k], (double) n.kind_ns[k] / 1e6);
        printf(" (ms)\n    source: %s\n", c->source);
    }
    /* The common configuration (fp32, batch 64) on V100, for reference. */
    static const bench_case b64[] = {{"", "resnet50", "v100", 64, 0, false, ""},
                                     {"", "vgg16", "v100", 64, 0, false, ""}};
    for (unsigned i = 0; i < 2; i++) {
        sl_sim_profile prof;
        net n = model_case(&b64[i], &prof);
        printf("%-14s v100  batch  64: modeled %7.1f ms/iter = %.0f images/s\n", b64[i].model,
               (double) n.ns / 1e6, 64e9 / (double) n.ns);
    }
    for (unsigned i = 0; i < sl_sim_profile_count(); i++) {
        const sl_sim_profile *p = sl_sim_profile_at(i);
        printf("%s%s eff_compute %.2f eff_mem %.2f", i ? ", " : "profiles: ", p->name,
               override_compute > 0 ? override_compute : p->eff_compute,
               override_mem > 0 ? override_mem : p->eff_mem);
    }
    printf("%s\n", override_compute > 0 || override_mem > 0 ? " (overridden)" : "");

    if (json_path) {
        FILE *f = fopen(json_path, "w");
        if (!f) {
            perror(json_path);
            return 1;
        }
        fprintf(f, "{\n  \"bench\": \"sim_models\",\n  \"cases\": [\n");
        for (unsigned i = 0; i < N_CASES; i++)
            fprintf(f,
                    "    {\"key\": \"%s\", \"model\": \"%s\", \"profile\": \"%s\", \"batch\": "
                    "%lld, \"modeled_ms\": %.3f, \"published_ms\": %.3f, \"ratio\": %.4f}%s\n",
                    cases[i].key, cases[i].model, cases[i].profile, (long long) cases[i].batch,
                    modeled_ms[i], cases[i].published_ms, ratio[i], i + 1 < N_CASES ? "," : "");
        fprintf(f, "  ]\n}\n");
        fclose(f);
    }

    printf("BENCH sim_models");
    for (unsigned i = 0; i < N_CASES; i++)
        printf(" %s_ratio=%.2f", cases[i].key, ratio[i]);
    printf("\n");
    return 0;
}
