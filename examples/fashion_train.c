/* Trains an MLP or a small CNN on Fashion-MNIST through salusd, with the
 * client's nn helpers, and reports test accuracy and throughput. Its last
 * line is machine-readable:
 *   RESULT model=mlp test_accuracy=0.8876 samples_per_s=12345 */
#include "fashion_mnist.h"

#include <salus/salus.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct opts {
    const char *url, *model, *optimizer, *data, *name;
    int epochs;
    int64_t batch, train_limit, test_limit;
    float lr;
    unsigned seed;
    int quiet;
} opts;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: fashion_train [--url URL] [--model mlp|cnn] [--epochs N] [--batch B]\n"
               "         [--optimizer sgd|momentum|adam] [--lr LR] [--seed S]\n"
               "         [--train-limit N] [--test-limit N] [--data DIR] [--name NAME] [--quiet]\n"
               "Trains on Fashion-MNIST through salusd; the last line is\n"
               "RESULT model=... test_accuracy=... samples_per_s=...\n");
}

static int parse(int argc, char **argv, opts *o)
{
    static const struct option lo[] = {
        {"url", 1, NULL, 'u'},        {"model", 1, NULL, 'm'},
        {"epochs", 1, NULL, 'e'},     {"batch", 1, NULL, 'b'},
        {"optimizer", 1, NULL, 'o'},  {"lr", 1, NULL, 'l'},
        {"seed", 1, NULL, 's'},       {"train-limit", 1, NULL, 't'},
        {"test-limit", 1, NULL, 'T'}, {"data", 1, NULL, 'd'},
        {"name", 1, NULL, 'n'},       {"quiet", 0, NULL, 'q'},
        {"help", 0, NULL, 'h'},       {0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'u':
            o->url = optarg;
            break;
        case 'm':
            o->model = optarg;
            break;
        case 'e':
            o->epochs = atoi(optarg);
            break;
        case 'b':
            o->batch = atoll(optarg);
            break;
        case 'o':
            o->optimizer = optarg;
            break;
        case 'l':
            o->lr = strtof(optarg, NULL);
            break;
        case 's':
            o->seed = (unsigned) strtoul(optarg, NULL, 10);
            break;
        case 't':
            o->train_limit = atoll(optarg);
            break;
        case 'T':
            o->test_limit = atoll(optarg);
            break;
        case 'd':
            o->data = optarg;
            break;
        case 'n':
            o->name = optarg;
            break;
        case 'q':
            o->quiet = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (o->epochs < 1 || o->batch < 1 || (strcmp(o->model, "mlp") && strcmp(o->model, "cnn"))) {
        usage(stderr);
        return 2;
    }
    return -1;
}

static int parse_optimizer(const opts *o, salus_optimizer *opt)
{
    memset(opt, 0, sizeof *opt);
    if (strcmp(o->optimizer, "sgd") == 0) {
        opt->kind = SALUS_SGD;
        opt->lr = o->lr > 0 ? o->lr : 0.1f;
    } else if (strcmp(o->optimizer, "momentum") == 0) {
        opt->kind = SALUS_MOMENTUM;
        opt->lr = o->lr > 0 ? o->lr : 0.02f;
        opt->momentum = 0.9f;
    } else if (strcmp(o->optimizer, "adam") == 0) {
        opt->kind = SALUS_ADAM;
        opt->lr = o->lr > 0 ? o->lr : 1e-3f;
    } else {
        return -1;
    }
    return 0;
}

/* Test accuracy, in batches of infer_batch (the last one zero-padded). */
static int evaluate(salus_model *m, const fmnist *test, int64_t ib, float *x, int32_t *pred,
                    double *accuracy)
{
    int64_t correct = 0;
    for (int64_t i = 0; i < test->n; i += ib) {
        int64_t n = test->n - i < ib ? test->n - i : ib;
        memset(x, 0, sizeof(float) * (size_t) ib * FMNIST_PIXELS);
        memcpy(x, test->images + i * FMNIST_PIXELS, sizeof(float) * (size_t) n * FMNIST_PIXELS);
        int rc = salus_model_predict(m, x, pred);
        if (rc)
            return rc;
        for (int64_t k = 0; k < n; k++)
            correct += pred[k] == test->labels[i + k];
    }
    *accuracy = (double) correct / (double) test->n;
    return 0;
}

int main(int argc, char **argv)
{
    opts o = {.model = "mlp",
              .optimizer = "momentum",
              .epochs = 10,
              .batch = 128,
              .seed = 1,
              .name = NULL};
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    salus_optimizer opt;
    if (parse_optimizer(&o, &opt)) {
        fprintf(stderr, "fashion_train: unknown optimizer '%s'\n", o.optimizer);
        return 2;
    }
    fmnist train = {0}, test = {0};
    if (fmnist_load(o.data, "train", o.train_limit, &train) ||
        fmnist_load(o.data, "t10k", o.test_limit, &test))
        return 1;
    const char *name = o.name ? o.name : o.model;
    int status = 1;
    salus_client *c = NULL;
    salus_session *s = NULL;
    salus_model *m = fmnist_model(o.model);
    int64_t ib = test.n < 500 ? test.n : 500, B = o.batch;
    float *x = malloc(sizeof(float) * (size_t) (B > ib ? B : ib) * FMNIST_PIXELS);
    int32_t *y = malloc(sizeof(int32_t) * (size_t) (B > ib ? B : ib));
    int64_t *order = malloc(sizeof(int64_t) * (size_t) train.n);
    if (!m || !x || !y || !order) {
        fprintf(stderr, "fashion_train: out of memory\n");
        goto out;
    }
    if ((rc = salus_connect(o.url, &c)) != SALUS_OK) {
        fprintf(stderr, "fashion_train: cannot reach salusd: %s\n", salus_strerror(rc));
        goto out;
    }
    salus_session_opts so = {.name = name,
                             .expected_iterations = (uint64_t) (o.epochs * (train.n / B))};
    if ((rc = salus_session_open(c, &so, &s)) ||
        (rc = salus_model_compile(m, s, &opt, B, ib, o.seed))) {
        fprintf(stderr, "fashion_train: %s: %s\n", salus_strerror(rc),
                salus_model_error(m) ? salus_model_error(m) : salus_last_error(c));
        goto out;
    }
    if (!o.quiet)
        printf("[%s] %s, %lld parameters, %lld training / %lld test samples, batch %lld, %s\n",
               name, o.model, (long long) salus_model_param_count(m), (long long) train.n,
               (long long) test.n, (long long) B, o.optimizer);
    uint64_t rng = 0x9E3779B97F4A7C15ull ^ o.seed;
    for (int64_t i = 0; i < train.n; i++)
        order[i] = i;
    double train_time = 0, accuracy = 0;
    int64_t samples = 0;
    for (int e = 0; e < o.epochs; e++) {
        for (int64_t i = train.n - 1; i > 0; i--) { /* Fisher-Yates */
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            int64_t j = (int64_t) (rng % (uint64_t) (i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        double t0 = now_s(), loss_sum = 0, shown = t0;
        int64_t steps = 0;
        for (int64_t i = 0; i + B <= train.n; i += B, steps++) {
            for (int64_t k = 0; k < B; k++) {
                memcpy(x + k * FMNIST_PIXELS, train.images + order[i + k] * FMNIST_PIXELS,
                       sizeof(float) * FMNIST_PIXELS);
                y[k] = train.labels[order[i + k]];
            }
            float loss;
            if ((rc = salus_model_train_step(m, x, y, &loss)) != SALUS_OK) {
                fprintf(stderr, "[%s] train step: %s: %s\n", name, salus_strerror(rc),
                        salus_last_error(c));
                goto out;
            }
            loss_sum += loss;
            /* progress within a long epoch, on stderr so that stdout stays
             * one line per epoch */
            if (!o.quiet && now_s() - shown >= 2) {
                shown = now_s();
                fprintf(stderr, "[%s] epoch %d/%d: %lld%% (%lld of %lld steps), loss %.4f\n", name,
                        e + 1, o.epochs, (long long) (100 * (i + B) / train.n),
                        (long long) steps + 1, (long long) (train.n / B),
                        loss_sum / (double) (steps + 1));
            }
        }
        double dt = now_s() - t0;
        train_time += dt;
        samples += steps * B;
        if ((rc = evaluate(m, &test, ib, x, y, &accuracy)) != 0) {
            fprintf(stderr, "[%s] evaluate: %s: %s\n", name, salus_strerror(rc),
                    salus_last_error(c));
            goto out;
        }
        if (!o.quiet)
            printf("[%s] epoch %2d/%d  loss %.4f  test_accuracy %.4f  %.0f samples/s\n", name,
                   e + 1, o.epochs, steps ? loss_sum / (double) steps : 0, accuracy,
                   dt > 0 ? (double) (steps * B) / dt : 0);
        fflush(stdout);
    }
    printf("RESULT model=%s test_accuracy=%.4f samples_per_s=%.0f\n", o.model, accuracy,
           train_time > 0 ? (double) samples / train_time : 0);
    status = 0;
out:
    salus_model_free(m);
    if (s)
        (void) salus_session_close(s);
    salus_disconnect(c);
    free(x);
    free(y);
    free(order);
    fmnist_free(&train);
    fmnist_free(&test);
    return status;
}
