/* bench/onnx_infer: inference latency at batch 1 (or --batch N) of a
 * PyTorch model (--model: resnet18, the default, resnet50, efficientnet_b0,
 * mobilenet_v3_small, convnext_tiny, bert or gpt as torch_infer.py builds
 * them; random weights, the same in every process) exported to ONNX and
 * served through salusd, against PyTorch running the same model in-process:
 *   salus   salus_onnx_run through salusd over ipc:// (a separate process):
 *           what a client sees, the input sent and the output fetched;
 *   torch1  PyTorch (Debian's python3-torch) with torch.set_num_threads(1),
 *   torch2  and with 2 threads, each in a process of its own, timing only
 *           model(x) under torch.no_grad() (no transport at all).
 * A round is salus, torch1, salus, torch2, each ITERS inferences; per-round
 * medians, then the median over rounds, and the p99 over every inference.
 * PyTorch's best is the thread count with the lower median. The outputs are
 * compared once: max_abs_err against PyTorch's output for the same input.
 * Every process runs with OMP_WAIT_POLICY=PASSIVE. Prints per-round
 * figures, then
 *   BENCH onnx_infer model=M batch=B salus_ms=... torch_ms=... torch_threads=...
 *         max_abs_err=... rel_err=... salus_p99_ms=... torch_p99_ms=... ...
 *   BENCH torch_infer model=M batch=B ratio=SALUS_MS/TORCH_MS ...
 *
 *   onnx_infer --salusd PATH --script bench/torch_infer.py [--python /usr/bin/python3]
 *              [--model resnet18] [--batch 1] [--rounds 5] [--iters 20] [--json FILE] */
#include "bench_util.h"

#include <salus/salus.h>

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *model = "resnet18";
static const char *batch = "1";

/* One PyTorch process and its thread count. */
typedef struct torch_proc {
    int threads;
    bench_peer peer;
} torch_proc;

static int torch_start(torch_proc *t, const char *python, const char *script,
                       const char *export_dir)
{
    char threads[16];
    snprintf(threads, sizeof threads, "%d", t->threads);
    return bench_peer_start(&t->peer,
                            (const char *[]){python, script, threads, export_dir ? export_dir : "-",
                                             model, batch, NULL});
}

/* n timed inferences on the PyTorch side, in ms, into ms[0..n). */
static int torch_run(torch_proc *t, int n, double *ms)
{
    static char line[1 << 16];
    fprintf(t->peer.in, "run %d\n", n);
    fflush(t->peer.in);
    if (!fgets(line, sizeof line, t->peer.out) || strncmp(line, "ms ", 3) != 0)
        return -1;
    char *p = line + 3;
    for (int i = 0; i < n; i++) {
        char *end;
        ms[i] = strtod(p, &end);
        if (end == p)
            return -1;
        p = end;
    }
    return 0;
}

/* n elements of 4 bytes (float32 or int32, both as torch_infer.py writes
 * them) from path. */
static float *read_floats(const char *path, size_t n)
{
    FILE *f = fopen(path, "rb");
    float *v = f ? malloc(n * sizeof *v) : NULL;
    if (v && fread(v, sizeof *v, n, f) != n) {
        free(v);
        v = NULL;
    }
    if (f)
        fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    const char *salusd = NULL, *script = NULL, *python = "/usr/bin/python3", *json = NULL;
    int rounds = 5, iters = 20;
    static const struct option opts[] = {
        {"salusd", 1, NULL, 's'}, {"script", 1, NULL, 'S'}, {"python", 1, NULL, 'p'},
        {"rounds", 1, NULL, 'r'}, {"iters", 1, NULL, 'i'},  {"json", 1, NULL, 'j'},
        {"model", 1, NULL, 'm'},  {"batch", 1, NULL, 'b'},  {NULL, 0, NULL, 0}};
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
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
        case 'r':
            rounds = atoi(optarg);
            break;
        case 'i':
            iters = atoi(optarg);
            break;
        case 'j':
            json = optarg;
            break;
        case 'm':
            model = optarg;
            break;
        case 'b':
            batch = optarg;
            break;
        default:
            return 2;
        }
    }
    if (!salusd || !script || rounds < 1 || iters < 1 || iters > 2000 || atoi(batch) < 1) {
        fprintf(stderr, "usage: onnx_infer --salusd PATH --script torch_infer.py [--python PY] "
                        "[--model NAME] [--batch N] [--rounds N] [--iters N] [--json FILE]\n");
        return 2;
    }
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);

    /* children first: NNG must not be initialised in a process that forks */
    sl_ts_salusd srv;
    bench_salusd_spawn(&srv, salusd, "onnx-infer",
                       (const char *[]){"--memory-limit", "1G", "--log-level", "warn", NULL});
    const char *dir = srv.dir;
    char path[400];
    torch_proc torch[2] = {{.threads = 1}, {.threads = 2}};
    char line[256];
    for (int t = 0; t < 2; t++) {
        if (torch_start(&torch[t], python, script, t == 0 ? dir : NULL) ||
            !fgets(line, sizeof line, torch[t].peer.out) || strncmp(line, "ready", 5) != 0) {
            fprintf(stderr, "onnx_infer: the PyTorch side did not start (python3-torch, "
                            "python3-torchvision?)\n");
            sl_ts_salusd_cleanup(&srv);
            return 1;
        }
    }
    bench_salusd_ready(&srv);
    salus_client *c = NULL;
    (void) salus_connect(srv.url, &c);
    salus_session *s;
    salus_session_opts so = {0};
    salus_onnx_model *m;
    snprintf(path, sizeof path, "%s/%s.onnx", dir, model);
    if (!c || salus_session_open(c, &so, &s) != SALUS_OK ||
        salus_onnx_load(s, path, NULL, &m) != SALUS_OK) {
        fprintf(stderr, "onnx_infer: %s\n", c ? salus_last_error(c) : "cannot connect");
        sl_ts_salusd_cleanup(&srv);
        return 1;
    }
    /* one input (float32 images or int32 token ids) and one float32 output */
    int dtype, ndim;
    int64_t dims[8];
    size_t in_elems = 1, out_elems = 1;
    if (salus_onnx_n_inputs(m) != 1 || salus_onnx_n_outputs(m) != 1 ||
        salus_onnx_input(m, 0, NULL, &dtype, &ndim, dims) != SALUS_OK) {
        fprintf(stderr, "onnx_infer: expected one input and one output\n");
        return 1;
    }
    for (int d = 0; d < ndim; d++)
        in_elems *= (size_t) dims[d];
    (void) salus_onnx_output(m, 0, NULL, &dtype, &ndim, dims);
    for (int d = 0; d < ndim; d++)
        out_elems *= (size_t) dims[d];
    snprintf(path, sizeof path, "%s/%s.in", dir, model);
    float *x = read_floats(path, in_elems);
    snprintf(path, sizeof path, "%s/%s.out", dir, model);
    float *want = read_floats(path, out_elems);
    float *y = calloc(out_elems, sizeof *y);
    if (!x || !want || !y) {
        fprintf(stderr, "onnx_infer: cannot read PyTorch's input or output\n");
        return 1;
    }

    /* correctness first: the same weights and input as PyTorch's */
    if (salus_onnx_run(m, (const void *[]){x}, (void *[]){y}) != SALUS_OK) {
        fprintf(stderr, "onnx_infer: run: %s\n", salus_last_error(c));
        return 1;
    }
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < out_elems; i++) {
        max_err = fmax(max_err, fabs((double) y[i] - want[i]));
        max_ref = fmax(max_ref, fabs((double) want[i]));
    }

    double load0[3] = {-1, -1, -1}, load1[3] = {-1, -1, -1};
    (void) getloadavg(load0, 3);
    size_t per = (size_t) iters;
    double *all_salus = calloc(2 * (size_t) rounds * per, sizeof(double));
    double *all_torch[2] = {calloc((size_t) rounds * per, sizeof(double)),
                            calloc((size_t) rounds * per, sizeof(double))};
    double *med_salus = calloc(2 * (size_t) rounds, sizeof(double));
    double *med_torch[2] = {calloc((size_t) rounds, sizeof(double)),
                            calloc((size_t) rounds, sizeof(double))};
    size_t n_salus = 0;
    for (int r = 0; r < rounds; r++) {
        for (int t = 0; t < 2; t++) {
            double *ms = all_salus + n_salus;
            for (int i = 0; i < iters; i++) {
                uint64_t t0 = sl_ts_now_ns();
                if (salus_onnx_run(m, (const void *[]){x}, (void *[]){y}) != SALUS_OK) {
                    fprintf(stderr, "onnx_infer: run: %s\n", salus_last_error(c));
                    return 1;
                }
                ms[i] = (double) (sl_ts_now_ns() - t0) / 1e6;
            }
            med_salus[2 * r + t] = sl_ts_median(ms, per);
            n_salus += per;
            double *tm = all_torch[t] + (size_t) r * per;
            if (torch_run(&torch[t], iters, tm)) {
                fprintf(stderr, "onnx_infer: the PyTorch side failed\n");
                return 1;
            }
            med_torch[t][r] = sl_ts_median(tm, per);
            printf("round %d: salus %.2f ms  torch%d %.2f ms\n", r, med_salus[2 * r + t], t + 1,
                   med_torch[t][r]);
            fflush(stdout);
        }
    }
    (void) getloadavg(load1, 3);
    double salus_ms = sl_ts_median(med_salus, 2 * (size_t) rounds);
    double torch_ms[2] = {sl_ts_median(med_torch[0], (size_t) rounds),
                          sl_ts_median(med_torch[1], (size_t) rounds)};
    int best = torch_ms[1] < torch_ms[0] ? 1 : 0;
    double salus_p99 = sl_ts_percentile(all_salus, n_salus, 99);
    double torch_p99 = sl_ts_percentile(all_torch[best], (size_t) rounds * per, 99);
    double rel = max_ref > 0 ? max_err / max_ref : max_err;

    for (int t = 0; t < 2; t++) {
        bench_peer_stop(&torch[t].peer);
    }
    salus_onnx_free(m);
    (void) salus_session_close(s);
    salus_disconnect(c);
    bench_salusd_stop(&srv);

    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"model\": \"%s\", \"batch\": %s, \"salus_ms\": %.4f, \"torch1_ms\": %.4f, "
                    "\"torch2_ms\": %.4f, \"torch_threads\": %d, \"salus_p99_ms\": %.4f, "
                    "\"torch_p99_ms\": %.4f, \"max_abs_err\": %.3g, \"rel_err\": %.3g, "
                    "\"rounds\": %d, \"iters\": %d, \"load_before\": %.2f, \"load_after\": "
                    "%.2f}\n",
                    model, batch, salus_ms, torch_ms[0], torch_ms[1], best + 1, salus_p99,
                    torch_p99, max_err, rel, rounds, iters, load0[0], load1[0]);
            fclose(f);
        }
    }
    printf("load average %.2f before, %.2f after (other users of the machine move every figure)\n",
           load0[0], load1[0]);
    printf("BENCH onnx_infer model=%s batch=%s salus_ms=%.3f torch_ms=%.3f torch_threads=%d "
           "torch1_ms=%.3f torch2_ms=%.3f ratio=%.3f salus_p99_ms=%.3f torch_p99_ms=%.3f "
           "max_abs_err=%.3g rel_err=%.3g\n",
           model, batch, salus_ms, torch_ms[best], best + 1, torch_ms[0], torch_ms[1],
           salus_ms / torch_ms[best], salus_p99, torch_p99, max_err, rel);
    /* the issue-facing name: salus's latency over PyTorch's best */
    printf("BENCH torch_infer model=%s batch=%s ratio=%.3f salus_ms=%.3f torch_ms=%.3f "
           "torch_threads=%d\n",
           model, batch, salus_ms / torch_ms[best], salus_ms, torch_ms[best], best + 1);
    free(x), free(want), free(y), free(all_salus), free(all_torch[0]), free(all_torch[1]);
    free(med_salus), free(med_torch[0]), free(med_torch[1]);
    return 0;
}
