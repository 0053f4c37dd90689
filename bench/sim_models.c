/* bench/sim_models: validates the sim backend's timing model against
 * published, measured training iterations of ResNet-50 and VGG-16.
 *
 *   sim_models [--json FILE]
 *
 * For each case it builds the op list of one fp32 training iteration
 * (eval/lib/graphs.c, shared with the simulator's computed profiles)
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
#include "graphs.h"
#include "sim/sim.h"
#include "sl_error.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
     "Salus artifact tests/workloads.csv (eval/data/salus-workloads.csv), resnet50_50_10min: "
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

/* Times case c on its profile, with the overrides applied; exits on an
 * error (a bug in the model tables). */
static sl_eval_timeline model_case(const bench_case *c, sl_sim_profile *storage,
                                   const sl_sim_profile **used)
{
    const sl_sim_profile *p;
    if (sl_sim_profile_find(c->profile, &p) != SL_OK) {
        fprintf(stderr, "sim_models: no profile %s\n", c->profile);
        exit(2);
    }
    *storage = *p;
    if (override_compute > 0)
        storage->eff_compute = override_compute;
    if (override_mem > 0)
        storage->eff_mem = override_mem;
    *used = storage;
    sl_eval_timeline t;
    int rc = sl_eval_timeline_build(c->model, c->batch, storage, &t);
    if (rc != SL_OK) {
        fprintf(stderr, "sim_models: cannot model %s: %s\n", c->model, sl_strerror(rc));
        exit(2);
    }
    return t;
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
        const sl_sim_profile *used;
        sl_eval_timeline n = model_case(c, &prof, &used);
        modeled_ms[i] = (double) n.iteration_ns / 1e6;
        ratio[i] = modeled_ms[i] / c->published_ms;
        printf("%-14s %-5s batch %3lld: modeled %7.1f ms/iter, published %7.1f ms/iter, "
               "ratio %.2f%s\n",
               c->model, used->name, (long long) c->batch, modeled_ms[i], c->published_ms, ratio[i],
               c->fitted ? " (eff_compute fitted on this row)" : " (out of sample)");
        printf("    %u ops, %.1f GFLOP charged/image, %.1f M params, memory-bound %.0f%% of "
               "time;",
               (unsigned) n.n_ops, n.flops / 1e9 / (double) c->batch, (double) n.params / 1e6,
               100.0 * (double) n.mem_bound_ns / (double) n.iteration_ns);
        for (unsigned k = 0; k < SL_EVAL_KIND_COUNT; k++)
            if (n.kind_ns[k])
                printf(" %s %.1f", sl_eval_op_kind_name(k), (double) n.kind_ns[k] / 1e6);
        printf(" (ms)\n    source: %s\n", c->source);
        sl_eval_timeline_fini(&n);
    }
    /* The common configuration (fp32, batch 64) on V100, for reference. */
    static const bench_case b64[] = {{"", "resnet50", "v100", 64, 0, false, ""},
                                     {"", "vgg16", "v100", 64, 0, false, ""}};
    for (unsigned i = 0; i < 2; i++) {
        sl_sim_profile prof;
        const sl_sim_profile *used;
        sl_eval_timeline n = model_case(&b64[i], &prof, &used);
        printf("%-14s v100  batch  64: modeled %7.1f ms/iter = %.0f images/s\n", b64[i].model,
               (double) n.iteration_ns / 1e6, 64e9 / (double) n.iteration_ns);
        sl_eval_timeline_fini(&n);
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
