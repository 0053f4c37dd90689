/* bench/gpu_train: training steps through salusd on a GPU, f32 against bf16
 * mixed precision (salus_optimizer.precision), and salus against PyTorch on
 * the same device at PyTorch's best (bench/torch_gpu.py: its defaults,
 * bf16 autocast, and bf16 autocast with the whole step captured as a CUDA
 * graph).
 *
 * Models: "mlp" (784-256-128-10), "cnn" (the Fashion-MNIST CNN of
 * examples/fashion_train.c) and "resnet50" (ResNet-50 v1.5 built with
 * salus_model, torch_gpu.py builds the same layers), SGD with momentum 0.9,
 * cross-entropy, synthetic batches uploaded every step. salusd runs on
 * $SALUS_BENCH_DEVICE (cuda on a GPU host); PyTorch on cuda when that is a
 * cuda device, else on the cpu (a check that the script runs, not a
 * figure). With --predict DEVICE (default sim:h200 when the bench device is
 * cuda), a second salusd on that simulated device runs the same salus steps:
 * the simulator's prediction beside each measured figure.
 *
 * A round is `steps` steps of each side in turn (salus f32, salus bf16,
 * PyTorch f32, bf16, bf16 with CUDA graphs, then the prediction), for
 * --rounds rounds, after warm-up steps that are not timed. Figures are
 * medians over rounds of samples/s as each client sees them (salus: the
 * loss of every step back at the client; PyTorch: the last step's loss).
 * Prints per-round figures, then per model
 *   BENCH gpu_precision model=M ratio=BF16/F32 f32_sps=... bf16_sps=... ...
 *   BENCH gpu_vs_torch model=M ratio=SALUS_BEST/TORCH_BEST salus_sps=...
 *         torch_sps=... torch_best=VARIANT torch_f32_sps=... ...
 *
 *   gpu_train --salusd PATH --script bench/torch_gpu.py [--python python3]
 *             [--models mlp,cnn,resnet50] [--rounds 5] [--steps N]
 *             [--image 224] [--resnet-batch 64] [--predict DEVICE|none]
 *             [--quick] [--json FILE]
 * --script none leaves PyTorch out (salus and the prediction only).
 * --quick: a 64-pixel ResNet-50 at batch 4, 2 steps a round: for checking
 * the script end to end without a GPU. */
#include "gpu_jobs.h"

#include <salus/salus.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_MODELS 3
#define MAX_ROUNDS 64

typedef struct model_cfg {
    const char *name;
    int64_t batch;
    int steps; /* a round's steps on a GPU */
} model_cfg;

static model_cfg known[MAX_MODELS] = {
    {"mlp", 512, 200},
    {"cnn", 256, 100},
    {"resnet50", 64, 20},
};

/* The PyTorch process of one model. */
typedef bench_peer torch_proc;

static int torch_start(torch_proc *t, const char *python, const char *script, const char *device,
                       const char *model, int64_t batch, int64_t image)
{
    char b[24], im[24];
    snprintf(b, sizeof b, "%lld", (long long) batch);
    snprintf(im, sizeof im, "%lld", (long long) image);
    return bench_peer_start(t, (const char *[]){python, script, device, model, b, im, NULL});
}

/* "warm" or "run" of a variant: samples/s for run, 1 for warm, -1 when
 * the variant does not apply to the device (na), 0 on failure. */
static double torch_cmd(torch_proc *t, const char *cmd, const char *variant, int steps)
{
    char line[256];
    double sps;
    fprintf(t->in, "%s %s %d\n", cmd, variant, steps);
    fflush(t->in);
    if (!fgets(line, sizeof line, t->out)) {
        fprintf(stderr, "gpu_train: PyTorch stopped (%s %s)\n", cmd, variant);
        return 0;
    }
    if (strncmp(line, "na", 2) == 0)
        return -1;
    if (strcmp(cmd, "warm") == 0)
        return strncmp(line, "ok", 2) == 0 ? 1 : 0;
    if (sscanf(line, "sps %lf", &sps) != 1) {
        fprintf(stderr, "gpu_train: bad answer from PyTorch: %s", line);
        return 0;
    }
    return sps;
}

/* The series a round measures. */
enum {
    S_EXACT, /* salus f32, products exact everywhere */
    S_F32,   /* salus f32, PyTorch's default math (convolutions TF32) */
    S_BF16,  /* salus bf16 mixed precision */
    T_F32,
    T_BF16,
    T_GRAPH,
    P_EXACT, /* the same three salus jobs on the predicting simulator */
    P_F32,
    P_BF16,
    N_SERIES,
};
#define N_SALUS 3
static const char *const series_name[N_SERIES] = {
    "salus_f32_exact",  "salus_f32",     "salus_bf16", "torch_f32", "torch_bf16",
    "torch_bf16_graph", "sim_f32_exact", "sim_f32",    "sim_bf16",
};
static const char *const torch_variant[3] = {"f32", "bf16", "bf16_graph"};

typedef struct result {
    double med[N_SERIES], lo[N_SERIES], hi[N_SERIES];
    bool have[N_SERIES];
} result;

static int run_model(const model_cfg *mc, const char *url, const char *predict_url, torch_proc *tp,
                     int rounds, int steps, int64_t image, result *res)
{
    job j[2 * N_SALUS] = {0};
    double sps[N_SERIES][MAX_ROUNDS];
    int rc = 1, warm = steps / 4 > 2 ? steps / 4 : 2;
    memset(res, 0, sizeof *res);
    static const int prec[N_SALUS] = {SALUS_F32, SALUS_F32, SALUS_BF16};
    static const int math[N_SALUS] = {SALUS_MATH_EXACT, SALUS_MATH_DEFAULT, SALUS_MATH_DEFAULT};
    for (int v = 0; v < N_SALUS; v++)
        if (job_open(&j[v], url, mc->name, prec[v], math[v], mc->batch, image) ||
            (predict_url &&
             job_open(&j[N_SALUS + v], predict_url, mc->name, prec[v], math[v], mc->batch, image)))
            goto out;
    int njobs = predict_url ? 2 * N_SALUS : N_SALUS;
    for (int v = 0; v < njobs; v++)
        if (!job_steps(&j[v], warm))
            goto out;
    for (int v = 0; v < 3 && tp->pid > 0; v++) {
        double w = torch_cmd(tp, "warm", torch_variant[v], warm);
        if (w == 0)
            goto out;
        res->have[T_F32 + v] = w > 0;
    }
    for (int v = 0; v < N_SALUS; v++) {
        res->have[S_EXACT + v] = true;
        res->have[P_EXACT + v] = predict_url != NULL;
    }
    for (int k = 0; k < rounds; k++) {
        for (int v = 0; v < N_SALUS; v++)
            if (!(sps[S_EXACT + v][k] = job_steps(&j[v], steps)))
                goto out;
        for (int v = 0; v < 3; v++)
            if (res->have[T_F32 + v] &&
                (sps[T_F32 + v][k] = torch_cmd(tp, "run", torch_variant[v], steps)) <= 0)
                goto out;
        for (int v = 0; v < N_SALUS && predict_url; v++)
            if (!(sps[P_EXACT + v][k] = job_steps(&j[N_SALUS + v], steps)))
                goto out;
        printf("%s round %d:", mc->name, k + 1);
        for (int s = 0; s < N_SERIES; s++)
            if (res->have[s])
                printf(" %s %.0f", series_name[s], sps[s][k]);
        printf(" samples/s\n");
        fflush(stdout);
    }
    for (int s = 0; s < N_SERIES; s++)
        if (res->have[s]) {
            res->med[s] = sl_ts_median(sps[s], (size_t) rounds);
            res->lo[s] = sl_ts_percentile(sps[s], (size_t) rounds, 0);
            res->hi[s] = sl_ts_percentile(sps[s], (size_t) rounds, 100);
        }
    rc = 0;
out:
    for (int v = 0; v < 2 * N_SALUS; v++)
        job_close(&j[v]);
    return rc;
}

static void usage(void)
{
    fprintf(
        stderr,
        "usage: gpu_train --salusd PATH --script bench/torch_gpu.py [--python PY]\n"
        "                 [--models mlp,cnn,resnet50] [--rounds 5] [--steps N] [--image 224]\n"
        "                 [--resnet-batch 64] [--predict DEVICE|none] [--quick] [--json FILE]\n");
}

int main(int argc, char **argv)
{
    const char *salusd = NULL, *script = NULL, *python = "python3", *json = NULL;
    const char *predict = NULL;
    char models[128] = "mlp,cnn,resnet50";
    int rounds = 5, steps = 0;
    int64_t image = 224;
    bool quick = false;
    static const struct option lo[] = {
        {"salusd", 1, NULL, 's'},
        {"script", 1, NULL, 'S'},
        {"python", 1, NULL, 'p'},
        {"models", 1, NULL, 'm'},
        {"rounds", 1, NULL, 'r'},
        {"steps", 1, NULL, 'n'},
        {"image", 1, NULL, 'i'},
        {"resnet-batch", 1, NULL, 'b'},
        {"predict", 1, NULL, 'P'},
        {"quick", 0, NULL, 'q'},
        {"json", 1, NULL, 'j'},
        {"help", 0, NULL, 'h'},
        {0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 's':
            salusd = optarg;
            break;
        case 'S':
            script = optarg;
            break;
        case 'p':
            python = optarg;
            break;
        case 'm':
            snprintf(models, sizeof models, "%s", optarg);
            break;
        case 'r':
            rounds = atoi(optarg);
            break;
        case 'n':
            steps = atoi(optarg);
            break;
        case 'i':
            image = atoll(optarg);
            break;
        case 'b':
            known[2].batch = atoll(optarg);
            break;
        case 'P':
            predict = optarg;
            break;
        case 'q':
            quick = true;
            break;
        case 'j':
            json = optarg;
            break;
        case 'h':
            usage();
            return 0;
        default:
            usage();
            return 2;
        }
    }
    if (!salusd || !script || rounds < 1 || rounds > MAX_ROUNDS || steps < 0 || image < 32) {
        usage();
        return 2;
    }
    const char *device = getenv("SALUS_BENCH_DEVICE");
    bool on_gpu = device && strncmp(device, "cuda", 4) == 0;
    if (!predict && on_gpu)
        predict = "sim:h200";
    if (predict && strcmp(predict, "none") == 0)
        predict = NULL;
    if (quick) {
        image = 64;
        known[0].batch = known[1].batch = 32;
        known[2].batch = 4;
        if (!steps)
            steps = 2;
    }

    const model_cfg *run[MAX_MODELS];
    int nrun = 0;
    for (char *save = NULL, *tok = strtok_r(models, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < MAX_MODELS && strcmp(known[k].name, tok) != 0)
            k++;
        if (k == MAX_MODELS || nrun == MAX_MODELS) {
            fprintf(stderr, "gpu_train: unknown model '%s' (mlp, cnn, resnet50)\n", tok);
            return 2;
        }
        run[nrun++] = &known[k];
    }

    /* every child before the first NNG call: salusd on the bench device,
     * salusd on the predicting simulator, one PyTorch process per model */
    sl_ts_salusd main_d = {0}, sim_d = {0};
    const char *const args[] = {"--log-level", "warn", NULL};
    bench_salusd_spawn(&main_d, salusd, "gputrain", args);
    if (predict) {
        char *saved = device ? strdup(device) : NULL;
        setenv("SALUS_BENCH_DEVICE", predict, 1);
        bench_salusd_spawn(&sim_d, salusd, "gpupredict", args);
        if (saved)
            setenv("SALUS_BENCH_DEVICE", saved, 1);
        else
            unsetenv("SALUS_BENCH_DEVICE");
        free(saved);
    }
    torch_proc tp[MAX_MODELS] = {0};
    bool with_torch = strcmp(script, "none") != 0;
    for (int k = 0; k < nrun && with_torch; k++)
        if (torch_start(&tp[k], python, script, on_gpu ? "cuda" : "cpu", run[k]->name,
                        run[k]->batch, image)) {
            fprintf(stderr, "gpu_train: cannot start %s %s\n", python, script);
            return 1;
        }
    bench_salusd_ready(&main_d);
    if (predict)
        bench_salusd_ready(&sim_d);
    int status = 0;
    char line[256];
    for (int k = 0; k < nrun && with_torch; k++)
        if (!fgets(line, sizeof line, tp[k].out) || strncmp(line, "ready", 5) != 0) {
            fprintf(stderr, "gpu_train: PyTorch did not start for %s (torch installed?)\n",
                    run[k]->name);
            status = 1;
        }

    printf("gpu_train: salusd on %s, PyTorch on %s%s%s\n", device ? device : "its default device",
           on_gpu ? "cuda" : "the cpu (a check of the script, not a figure)",
           predict ? ", prediction on " : "", predict ? predict : "");
    result res[MAX_MODELS];
    for (int k = 0; k < nrun && !status; k++) {
        int n = steps ? steps : run[k]->steps;
        if (run_model(run[k], main_d.url, predict ? sim_d.url : NULL, &tp[k], rounds, n, image,
                      &res[k]))
            status = 1;
    }
    FILE *jf = json && !status ? fopen(json, "w") : NULL;
    if (jf)
        fprintf(jf, "{\"bench\":\"gpu_train\",\"device\":\"%s\",\"rounds\":%d,\"models\":{",
                device ? device : "default", rounds);
    for (int k = 0; k < nrun && !status; k++) {
        const result *r = &res[k];
        const char *dev = device ? device : "default";
        /* bf16 against the slowest f32 path (exact products), and against
         * f32 under PyTorch's default math */
        printf("BENCH gpu_precision model=%s ratio=%.3f ratio_vs_default=%.3f f32_exact_sps=%.0f "
               "f32_sps=%.0f bf16_sps=%.0f bf16_range=%.0f-%.0f batch=%lld rounds=%d device=%s",
               run[k]->name, r->med[S_BF16] / r->med[S_EXACT], r->med[S_BF16] / r->med[S_F32],
               r->med[S_EXACT], r->med[S_F32], r->med[S_BF16], r->lo[S_BF16], r->hi[S_BF16],
               (long long) run[k]->batch, rounds, dev);
        if (r->have[P_F32])
            printf(" predicted_ratio=%.3f predicted_f32_exact_sps=%.0f predicted_f32_sps=%.0f "
                   "predicted_bf16_sps=%.0f",
                   r->med[P_BF16] / r->med[P_EXACT], r->med[P_EXACT], r->med[P_F32],
                   r->med[P_BF16]);
        printf("\n");
        int best_t = -1, best_s = S_EXACT;
        for (int v = T_F32; v <= T_GRAPH; v++)
            if (r->have[v] && (best_t < 0 || r->med[v] > r->med[best_t]))
                best_t = v;
        for (int v = S_F32; v <= S_BF16; v++)
            if (r->med[v] > r->med[best_s])
                best_s = v;
        if (best_t >= 0) {
            printf("BENCH gpu_vs_torch model=%s ratio=%.3f salus_sps=%.0f salus_best=%s "
                   "torch_sps=%.0f torch_best=%s",
                   run[k]->name, r->med[best_s] / r->med[best_t], r->med[best_s],
                   series_name[best_s] + 6, r->med[best_t], torch_variant[best_t - T_F32]);
            for (int v = T_F32; v <= T_GRAPH; v++)
                if (r->have[v])
                    printf(" %s_sps=%.0f", series_name[v], r->med[v]);
            printf(" batch=%lld torch_device=%s salus_device=%s\n", (long long) run[k]->batch,
                   on_gpu ? "cuda" : "cpu", dev);
        }
        if (jf) {
            fprintf(jf, "%s\"%s\":{\"batch\":%lld", k ? "," : "", run[k]->name,
                    (long long) run[k]->batch);
            for (int s = 0; s < N_SERIES; s++)
                if (r->have[s])
                    fprintf(jf, ",\"%s\":{\"sps\":%.1f,\"min\":%.1f,\"max\":%.1f}", series_name[s],
                            r->med[s], r->lo[s], r->hi[s]);
            fprintf(jf, "}");
        }
    }
    if (jf) {
        fprintf(jf, "}}\n");
        fclose(jf);
    }
    for (int k = 0; k < nrun; k++)
        bench_peer_stop(&tp[k]);
    bench_salusd_stop(&main_d);
    if (predict)
        bench_salusd_stop(&sim_d);
    return status;
}
