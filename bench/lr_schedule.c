/* bench/lr_schedule: what a learning rate settable before every step
 * (SALUS_OPT_LR_PER_STEP: the rate in a persistent tensor, read by
 * mul_scalar) costs against the rate fixed in the graph, per training step
 * of the Fashion-MNIST MLP and CNN shapes (random data: only time is
 * measured), under momentum and Adam. The two variants run side by side in
 * one salusd, interleaved A B A B over the rounds; the per-step variant
 * sets its rate before every step, as a schedule would.
 *   lr_schedule --salusd PATH [--rounds 7] [--steps 20] [--json FILE]
 * Lines: BENCH lr_schedule_case model=... opt=... fixed_ms=... per_step_ms=...
 * Last line: BENCH lr_schedule worst_overhead_pct=... rounds=... steps=... */
#include "bench_util.h"

#include <salus/salus.h>

#include <getopt.h>

enum { BATCH = 64, PIXELS = 784, CLASSES = 10, MAX_ROUNDS = 64 };

static salus_model *build(int cnn, salus_session *s, const salus_optimizer *o)
{
    salus_model *m =
        cnn ? salus_model_new(3, (int64_t[]){1, 28, 28}) : salus_model_new(1, (int64_t[]){PIXELS});
    if (cnn) {
        salus_model_conv2d(m, 16, 3, 1, 1);
        salus_model_relu(m);
        salus_model_maxpool(m, 2, 2);
        salus_model_conv2d(m, 32, 3, 1, 1);
        salus_model_relu(m);
        salus_model_maxpool(m, 2, 2);
        salus_model_flatten(m);
        salus_model_dense(m, 128);
        salus_model_relu(m);
    } else {
        salus_model_dense(m, 256);
        salus_model_relu(m);
        salus_model_dense(m, 128);
        salus_model_relu(m);
    }
    salus_model_dense(m, CLASSES);
    if (salus_model_compile(m, s, o, BATCH, BATCH, 1)) {
        fprintf(stderr, "compile: %s\n", salus_model_error(m));
        exit(1);
    }
    return m;
}

/* Seconds per step over `steps` steps; the per-step variant sets its rate
 * first each time (a decaying schedule). */
static double run(salus_model *m, int per_step, int steps, const float *x, const int32_t *y)
{
    uint64_t t0 = sl_ts_now_ns();
    for (int i = 0; i < steps; i++) {
        if (per_step && salus_model_set_lr(m, 0.01f / (1.0f + 0.01f * (float) i)) != SALUS_OK)
            exit(1);
        if (salus_model_train_step(m, x, y, NULL) != SALUS_OK)
            exit(1);
    }
    return (double) (sl_ts_now_ns() - t0) / 1e9 / steps;
}

int main(int argc, char **argv)
{
    const char *salusd = NULL, *json = NULL;
    int rounds = 7, steps = 20, help = 0, o;
    static const struct option lo[] = {{"salusd", 1, NULL, 's'}, {"rounds", 1, NULL, 'r'},
                                       {"steps", 1, NULL, 'n'},  {"json", 1, NULL, 'j'},
                                       {"help", 0, NULL, 'h'},   {0}};
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (o == 's')
            salusd = optarg;
        else if (o == 'r')
            rounds = atoi(optarg);
        else if (o == 'n')
            steps = atoi(optarg);
        else if (o == 'j')
            json = optarg;
        else
            help = 1;
    }
    if (help || !salusd || rounds < 5 || rounds > MAX_ROUNDS || steps < 1) {
        fprintf(stderr, "usage: lr_schedule --salusd PATH [--rounds 5..64] [--steps N] "
                        "[--json FILE]\n");
        return 2;
    }
    sl_ts_salusd srv;
    bench_salusd_start(&srv, salusd, "lr",
                       (const char *[]){"--memory-limit", "2G", "--log-level", "warn", NULL});
    salus_client *c = NULL;
    salus_session *s;
    if (salus_connect(srv.url, &c) || salus_session_open(c, NULL, &s)) {
        bench_salusd_stop(&srv);
        return 1;
    }
    float *x = malloc(sizeof(float) * BATCH * PIXELS);
    int32_t y[BATCH];
    uint32_t seed = 1;
    for (int i = 0; i < BATCH * PIXELS; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float) (seed >> 8) / (float) (1u << 24);
    }
    for (int i = 0; i < BATCH; i++)
        y[i] = i % CLASSES;
    FILE *jf = json ? fopen(json, "w") : NULL;
    if (jf)
        fprintf(jf, "{\"bench\": \"lr_schedule\", \"rounds\": %d, \"steps\": %d, \"cases\": [",
                rounds, steps);
    double worst = -1e9;
    int first = 1;
    for (int cnn = 0; cnn < 2; cnn++)
        for (int kind = SALUS_MOMENTUM; kind <= SALUS_ADAM; kind++) {
            salus_optimizer opt = {.kind = kind, .lr = 0.01f, .momentum = 0.9f};
            salus_model *a = build(cnn, s, &opt);
            opt.flags = SALUS_OPT_LR_PER_STEP;
            salus_model *b = build(cnn, s, &opt);
            run(a, 0, 3, x, y); /* warm-up: caches, primitives */
            run(b, 1, 3, x, y);
            double ta[MAX_ROUNDS], tb[MAX_ROUNDS];
            for (int r = 0; r < rounds; r++) { /* A B, then B A: no side always runs second */
                if (r % 2)
                    tb[r] = run(b, 1, steps, x, y) * 1e3;
                ta[r] = run(a, 0, steps, x, y) * 1e3;
                if (!(r % 2))
                    tb[r] = run(b, 1, steps, x, y) * 1e3;
            }
            double ma = sl_ts_median(ta, (size_t) rounds), mb = sl_ts_median(tb, (size_t) rounds);
            double pa = sl_ts_percentile(ta, (size_t) rounds, 99),
                   pb = sl_ts_percentile(tb, (size_t) rounds, 99);
            double over = 100.0 * (mb - ma) / ma;
            worst = over > worst ? over : worst;
            const char *model = cnn ? "cnn" : "mlp", *on = kind == SALUS_ADAM ? "adam" : "momentum";
            printf("BENCH lr_schedule_case model=%s opt=%s fixed_ms=%.3f per_step_ms=%.3f "
                   "fixed_p99_ms=%.3f per_step_p99_ms=%.3f overhead_pct=%.1f\n",
                   model, on, ma, mb, pa, pb, over);
            if (jf)
                fprintf(jf,
                        "%s{\"model\": \"%s\", \"opt\": \"%s\", \"fixed_ms\": %.4f, "
                        "\"per_step_ms\": %.4f, \"fixed_p99_ms\": %.4f, \"per_step_p99_ms\": "
                        "%.4f}",
                        first ? "" : ", ", model, on, ma, mb, pa, pb);
            first = 0;
            salus_model_free(a);
            salus_model_free(b);
        }
    if (jf) {
        fprintf(jf, "], \"worst_overhead_pct\": %.2f}\n", worst);
        fclose(jf);
    }
    (void) salus_session_close(s);
    salus_disconnect(c);
    bench_salusd_stop(&srv);
    free(x);
    printf("BENCH lr_schedule worst_overhead_pct=%.1f rounds=%d steps=%d\n", worst, rounds, steps);
    return 0;
}
