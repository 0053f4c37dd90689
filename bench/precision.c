/* bench/precision: bf16 mixed-precision training (salus_optimizer.precision,
 * PyTorch autocast's rules on f32 master weights) against f32 training, on
 * this machine's cpu device, for the two Fashion-MNIST models of
 * examples/fashion_train.c (the MLP 784-256-128-10 and the CNN conv 16,
 * pool, conv 32, pool, dense 128, dense 10), batch 128, SGD with momentum
 * 0.9, lr 0.02, the same seed and the same batches in order.
 *
 * Per model, one salusd serves two sessions, an f32 model and a bf16
 * model, trained side by side: a round is `steps` steps of f32, then
 * `steps` of bf16 (A B A B ...), for as many rounds as the epochs take
 * (and at least --rounds). Throughput is samples/s of whole steps as the
 * client sees them (feeding the batch, the step, the loss); the ratio is
 * the median over rounds of bf16's samples/s over the median of f32's.
 * Step latencies give p50 and p99. After training, both models classify
 * the 10000 test images (each in its own precision): accuracy in points.
 * Prints per-round figures, then
 *   BENCH precision_cpu model=mlp ratio=... f32_sps=... bf16_sps=... ...
 *   BENCH precision_accuracy model=mlp f32=... bf16=... diff=...
 *   BENCH precision_cpu model=cnn ratio=... ...
 *   BENCH precision_accuracy model=cnn f32=... bf16=... diff=...   (last)
 *
 *   precision --salusd PATH [--epochs 1] [--rounds 5] [--steps 40]
 *             [--train-limit N] [--json FILE] */
#include "bench_util.h"
#include "fashion_mnist.h"
#include "sl_error.h"

#include <salus/salus.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BATCH 128
#define INFER_BATCH 500
#define LR 0.02f
#define WARMUP_STEPS 10

enum variant { F32, BF16, N_VARIANTS };
static const char *const variant_name[N_VARIANTS] = {"f32", "bf16"};

typedef struct job {
    salus_client *client;
    salus_session *session;
    salus_model *model;
    int64_t pos;
    double *step_ms; /* every timed step's latency */
    int n_steps;
    double *sps; /* per round */
} job;

static int job_open(job *j, const char *url, const char *kind, enum variant v, int cap_steps,
                    int cap_rounds)
{
    salus_optimizer opt = {.kind = SALUS_MOMENTUM,
                           .lr = LR,
                           .momentum = 0.9f,
                           .precision = v == BF16 ? SALUS_BF16 : SALUS_F32};
    int rc;
    j->step_ms = calloc((size_t) cap_steps, sizeof *j->step_ms);
    j->sps = calloc((size_t) cap_rounds, sizeof *j->sps);
    j->model = fmnist_model(kind);
    if (!j->model || !j->step_ms || !j->sps)
        return SL_ENOMEM;
    if ((rc = salus_connect(url, &j->client)) ||
        (rc = salus_session_open(j->client, NULL, &j->session)) ||
        (rc = salus_model_compile(j->model, j->session, &opt, BATCH, INFER_BATCH, 1))) {
        fprintf(stderr, "precision: %s %s: %s %s %s\n", kind, variant_name[v], salus_strerror(rc),
                salus_model_error(j->model) ? salus_model_error(j->model) : "",
                j->client ? salus_last_error(j->client) : "");
        return rc;
    }
    return 0;
}

static void job_close(job *j)
{
    salus_model_free(j->model);
    if (j->session)
        (void) salus_session_close(j->session);
    salus_disconnect(j->client);
    free(j->step_ms);
    free(j->sps);
    memset(j, 0, sizeof *j);
}

/* `steps` steps over the next batches (wrapping around); with `timed`,
 * records each step's latency and returns samples/s, else 1; 0 on failure. */
static double job_steps(job *j, const fmnist *d, int steps, bool timed)
{
    uint64_t t0 = sl_ts_now_ns();
    for (int s = 0; s < steps; s++) {
        if (j->pos + BATCH > d->n)
            j->pos = 0;
        uint64_t s0 = sl_ts_now_ns();
        float loss;
        if (salus_model_train_step(j->model, d->images + j->pos * FMNIST_PIXELS, d->labels + j->pos,
                                   &loss) != SALUS_OK) {
            fprintf(stderr, "precision: step failed: %s\n", salus_last_error(j->client));
            return 0;
        }
        if (timed)
            j->step_ms[j->n_steps++] = (double) (sl_ts_now_ns() - s0) / 1e6;
        j->pos += BATCH;
    }
    return timed ? (double) steps * BATCH / ((double) (sl_ts_now_ns() - t0) / 1e9) : 1;
}

/* Test accuracy in percent; -1 on failure. */
static double job_accuracy(job *j, const fmnist *test)
{
    int32_t pred[INFER_BATCH];
    int64_t correct = 0, seen = 0;
    for (int64_t at = 0; at + INFER_BATCH <= test->n; at += INFER_BATCH) {
        if (salus_model_predict(j->model, test->images + at * FMNIST_PIXELS, pred) != SALUS_OK) {
            fprintf(stderr, "precision: predict failed: %s\n", salus_last_error(j->client));
            return -1;
        }
        for (int i = 0; i < INFER_BATCH; i++)
            correct += pred[i] == test->labels[at + i];
        seen += INFER_BATCH;
    }
    return seen ? 100.0 * (double) correct / (double) seen : -1;
}

typedef struct result {
    int rounds, steps;
    double sps[N_VARIANTS], sps_lo[N_VARIANTS], sps_hi[N_VARIANTS];
    double p50_ms[N_VARIANTS], p99_ms[N_VARIANTS];
    double ratio, accuracy[N_VARIANTS];
} result;

static int run_model(const char *url, const char *kind, const fmnist *train, const fmnist *test,
                     int epochs, int min_rounds, int steps, result *r)
{
    int64_t total = (int64_t) epochs * (train->n / BATCH);
    int rounds = (int) ((total + steps - 1) / steps);
    if (rounds < min_rounds)
        rounds = min_rounds;
    job j[N_VARIANTS] = {0};
    int rc = 1;
    for (int v = 0; v < N_VARIANTS; v++)
        if (job_open(&j[v], url, kind, (enum variant) v, rounds * steps, rounds))
            goto out;
    /* first steps pay for first touches and oneDNN's primitive creation;
     * they count for training, not for throughput */
    for (int v = 0; v < N_VARIANTS; v++)
        if (!job_steps(&j[v], train, WARMUP_STEPS, false))
            goto out;
    for (int k = 0; k < rounds; k++) {
        for (int v = 0; v < N_VARIANTS; v++)
            if (!(j[v].sps[k] = job_steps(&j[v], train, steps, true)))
                goto out;
        printf("%s round %d: f32 %.0f samples/s, bf16 %.0f samples/s (%.2fx)\n", kind, k + 1,
               j[F32].sps[k], j[BF16].sps[k], j[BF16].sps[k] / j[F32].sps[k]);
        fflush(stdout);
    }
    r->rounds = rounds;
    r->steps = steps;
    for (int v = 0; v < N_VARIANTS; v++) {
        r->sps[v] = sl_ts_median(j[v].sps, rounds);
        r->sps_lo[v] = sl_ts_percentile(j[v].sps, rounds, 0);
        r->sps_hi[v] = sl_ts_percentile(j[v].sps, rounds, 100);
        r->p50_ms[v] = sl_ts_percentile(j[v].step_ms, j[v].n_steps, 50);
        r->p99_ms[v] = sl_ts_percentile(j[v].step_ms, j[v].n_steps, 99);
        if ((r->accuracy[v] = job_accuracy(&j[v], test)) < 0)
            goto out;
    }
    r->ratio = r->sps[BF16] / r->sps[F32];
    rc = 0;
out:
    for (int v = 0; v < N_VARIANTS; v++)
        job_close(&j[v]);
    return rc;
}

int main(int argc, char **argv)
{
    const char *salusd = NULL, *json = NULL;
    int epochs = 1, rounds = 5, steps = 40;
    int64_t train_limit = 0;
    static const struct option lo[] = {
        {"salusd", 1, NULL, 's'},
        {"epochs", 1, NULL, 'e'},
        {"rounds", 1, NULL, 'r'},
        {"steps", 1, NULL, 'n'},
        {"train-limit", 1, NULL, 't'},
        {"json", 1, NULL, 'j'},
        {0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (c == 's')
            salusd = optarg;
        else if (c == 'e')
            epochs = atoi(optarg);
        else if (c == 'r')
            rounds = atoi(optarg);
        else if (c == 'n')
            steps = atoi(optarg);
        else if (c == 't')
            train_limit = atoll(optarg);
        else if (c == 'j')
            json = optarg;
        else
            return 2;
    }
    if (!salusd || epochs < 0 || rounds < 1 || steps < 1) {
        fprintf(stderr, "usage: precision --salusd PATH [--epochs N] [--rounds N] [--steps N] "
                        "[--train-limit N] [--json FILE]\n");
        return 2;
    }
    fmnist train, test;
    if (fmnist_load(NULL, "train", train_limit, &train))
        return 1;
    if (fmnist_load(NULL, "t10k", 0, &test))
        return 1;
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);

    /* the child first: NNG must not be initialised in a process that forks */
    char dir[200], url[256];
    if (sl_ts_tempdir("prec", dir, sizeof dir) != SL_OK)
        return 1;
    snprintf(url, sizeof url, "ipc://%s/salus.sock", dir);
    pid_t spid = bench_spawn((const char *[]){salusd, "--listen", url, "--memory-limit", "2G",
                                              "--log-level", "warn", NULL});
    salus_client *probe = NULL;
    for (int i = 0; i < 500 && salus_connect(url, &probe) != SALUS_OK; i++)
        usleep(10000);
    salus_disconnect(probe);

    static const char *const models[] = {"mlp", "cnn"};
    result res[2] = {0};
    int status = 1;
    for (int k = 0; k < 2; k++)
        if (run_model(url, models[k], &train, &test, epochs, rounds, steps, &res[k]))
            goto out;
    status = 0;
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f, "{\"bench\":\"precision_cpu\",\"batch\":%d,\"epochs\":%d,\"models\":{",
                    BATCH, epochs);
            for (int k = 0; k < 2; k++) {
                const result *r = &res[k];
                fprintf(f, "%s\"%s\":{\"rounds\":%d,\"steps\":%d,\"ratio\":%.3f", k ? "," : "",
                        models[k], r->rounds, r->steps, r->ratio);
                for (int v = 0; v < N_VARIANTS; v++)
                    fprintf(f,
                            ",\"%s\":{\"sps\":%.1f,\"sps_min\":%.1f,\"sps_max\":%.1f,"
                            "\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"accuracy\":%.2f}",
                            variant_name[v], r->sps[v], r->sps_lo[v], r->sps_hi[v], r->p50_ms[v],
                            r->p99_ms[v], r->accuracy[v]);
                fprintf(f, "}");
            }
            fprintf(f, "}}\n");
            fclose(f);
        }
    }
    for (int k = 0; k < 2; k++) {
        const result *r = &res[k];
        printf("BENCH precision_cpu model=%s ratio=%.3f f32_sps=%.0f bf16_sps=%.0f "
               "f32_p50_ms=%.2f f32_p99_ms=%.2f bf16_p50_ms=%.2f bf16_p99_ms=%.2f "
               "f32_range=%.0f-%.0f bf16_range=%.0f-%.0f rounds=%d\n",
               models[k], r->ratio, r->sps[F32], r->sps[BF16], r->p50_ms[F32], r->p99_ms[F32],
               r->p50_ms[BF16], r->p99_ms[BF16], r->sps_lo[F32], r->sps_hi[F32], r->sps_lo[BF16],
               r->sps_hi[BF16], r->rounds);
        printf("BENCH precision_accuracy model=%s f32=%.2f bf16=%.2f diff=%.2f epochs=%d\n",
               models[k], r->accuracy[F32], r->accuracy[BF16], r->accuracy[BF16] - r->accuracy[F32],
               epochs);
    }
out:
    bench_stop(spid);
    sl_ts_tempdir_remove(dir);
    fmnist_free(&train);
    fmnist_free(&test);
    return status;
}
