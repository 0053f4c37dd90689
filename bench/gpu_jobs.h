/* Training and inference jobs of the models bench/gpu_train and
 * bench/gpu_pack run through salusd, built with salus_model: "mlp"
 * (784-256-128-10), "cnn" (the Fashion-MNIST CNN of
 * examples/fashion_train.c) and "resnet50" (ResNet-50 v1.5; the layers
 * bench/torch_gpu.py builds for PyTorch), SGD with momentum 0.9,
 * cross-entropy, synthetic host batches. */
#ifndef SALUS_BENCH_GPU_JOBS_H
#define SALUS_BENCH_GPU_JOBS_H

#include "bench_util.h"
#include "sl_error.h"

#include <salus/salus.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOST_BATCHES 4

/* Adds ResNet-50 v1.5's layers for image x image inputs (see torch_gpu.py). */
static inline int build_resnet50(salus_model *m)
{
    int rc = salus_model_conv2d_ex(m, 64, 7, 2, 3, SALUS_CONV_NO_BIAS);
    rc = rc ? rc : salus_model_batchnorm(m);
    rc = rc ? rc : salus_model_relu(m);
    rc = rc ? rc : salus_model_maxpool(m, 3, 2);
    static const int stage[4][3] = {{64, 3, 1}, {128, 4, 2}, {256, 6, 2}, {512, 3, 2}};
    int64_t cin = 64;
    for (int s = 0; s < 4 && !rc; s++)
        for (int b = 0; b < stage[s][1] && !rc; b++) {
            int64_t width = stage[s][0], out = 4 * width;
            int stride = b == 0 ? stage[s][2] : 1;
            rc = salus_model_residual_begin(m);
            rc = rc ? rc : salus_model_conv2d_ex(m, width, 1, 1, 0, SALUS_CONV_NO_BIAS);
            rc = rc ? rc : salus_model_batchnorm(m);
            rc = rc ? rc : salus_model_relu(m);
            rc = rc ? rc : salus_model_conv2d_ex(m, width, 3, stride, 1, SALUS_CONV_NO_BIAS);
            rc = rc ? rc : salus_model_batchnorm(m);
            rc = rc ? rc : salus_model_relu(m);
            rc = rc ? rc : salus_model_conv2d_ex(m, out, 1, 1, 0, SALUS_CONV_NO_BIAS);
            rc = rc ? rc : salus_model_batchnorm(m);
            if (!rc && (stride != 1 || cin != out)) {
                rc = salus_model_residual_shortcut(m);
                rc = rc ? rc : salus_model_conv2d_ex(m, out, 1, stride, 0, SALUS_CONV_NO_BIAS);
                rc = rc ? rc : salus_model_batchnorm(m);
            }
            rc = rc ? rc : salus_model_residual_end(m);
            rc = rc ? rc : salus_model_relu(m);
            cin = out;
        }
    return rc;
}

/* Side of the final feature map for the stem and three strided stages. */
static inline int64_t resnet_side(int64_t image)
{
    int64_t side = (image + 2 * 3 - 7) / 2 + 1;
    side = (side - 3) / 2 + 1;
    for (int i = 0; i < 3; i++)
        side = (side + 2 - 3) / 2 + 1;
    return side;
}

/* The model, its sample shape (dims, ndim) and its class count. */
static inline salus_model *build(const char *kind, int64_t image, int64_t *sample, int *classes)
{
    salus_model *m = NULL;
    int rc = 0;
    if (strcmp(kind, "mlp") == 0) {
        int64_t dims[] = {784};
        m = salus_model_new(1, dims);
        rc = !m || salus_model_dense(m, 256) || salus_model_relu(m) || salus_model_dense(m, 128) ||
             salus_model_relu(m) || salus_model_dense(m, 10);
        *sample = 784, *classes = 10;
    } else if (strcmp(kind, "cnn") == 0) {
        int64_t dims[] = {1, 28, 28};
        m = salus_model_new(3, dims);
        rc = !m || salus_model_conv2d(m, 16, 3, 1, 1) || salus_model_relu(m) ||
             salus_model_maxpool(m, 2, 2) || salus_model_conv2d(m, 32, 3, 1, 1) ||
             salus_model_relu(m) || salus_model_maxpool(m, 2, 2) || salus_model_flatten(m) ||
             salus_model_dense(m, 128) || salus_model_relu(m) || salus_model_dense(m, 10);
        *sample = 784, *classes = 10;
    } else {
        int64_t dims[] = {3, image, image}, side = resnet_side(image);
        m = salus_model_new(3, dims);
        rc = !m || build_resnet50(m) || salus_model_avgpool(m, side, side) ||
             salus_model_flatten(m) || salus_model_dense(m, 1000);
        *sample = 3 * image * image, *classes = 1000;
    }
    if (rc) {
        fprintf(stderr, "gpu bench: building %s: %s\n", kind,
                m && salus_model_error(m) ? salus_model_error(m) : "out of memory");
        salus_model_free(m);
        return NULL;
    }
    return m;
}

/* One salus training job: a session of its own and host batches. */
typedef struct job {
    salus_client *client;
    salus_session *session;
    salus_model *model;
    int64_t batch, sample;
    float *x;
    int32_t *y;
    int next;
} job;

static inline int job_open(job *j, const char *url, const char *kind, int precision, int math,
                           int64_t batch, int64_t image)
{
    salus_session_opts so = {.math_matmul = math, .math_conv = math};
    salus_optimizer opt = {
        .kind = SALUS_MOMENTUM, .lr = 0.01f, .momentum = 0.9f, .precision = precision};
    int classes, rc;
    memset(j, 0, sizeof *j);
    j->batch = batch;
    if (!(j->model = build(kind, image, &j->sample, &classes)))
        return SL_EINVAL;
    j->x = malloc((size_t) (HOST_BATCHES * batch * j->sample) * sizeof *j->x);
    j->y = malloc((size_t) (HOST_BATCHES * batch) * sizeof *j->y);
    if (!j->x || !j->y)
        return SL_ENOMEM;
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < HOST_BATCHES * batch * j->sample; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        j->x[i] = (float) (r >> 40) / (float) (1u << 24);
    }
    for (int64_t i = 0; i < HOST_BATCHES * batch; i++)
        j->y[i] = (int32_t) (i * 7919 % classes);
    if ((rc = salus_connect(url, &j->client)) ||
        (rc = salus_session_open(j->client, &so, &j->session)) ||
        (rc = salus_model_compile(j->model, j->session, &opt, batch, batch, 1))) {
        fprintf(stderr, "gpu bench: %s on %s: %s %s %s\n", kind, url, salus_strerror(rc),
                salus_model_error(j->model) ? salus_model_error(j->model) : "",
                j->client ? salus_last_error(j->client) : "");
        return rc;
    }
    return SL_OK;
}

static inline void job_close(job *j)
{
    salus_model_free(j->model);
    if (j->session)
        (void) salus_session_close(j->session);
    salus_disconnect(j->client);
    free(j->x);
    free(j->y);
    memset(j, 0, sizeof *j);
}

/* `steps` steps; samples/s, or 0 on failure. */
static inline double job_steps(job *j, int steps)
{
    uint64_t t0 = sl_ts_now_ns();
    for (int s = 0; s < steps; s++) {
        int k = j->next++ % HOST_BATCHES;
        float loss;
        if (salus_model_train_step(j->model, j->x + (int64_t) k * j->batch * j->sample,
                                   j->y + (int64_t) k * j->batch, &loss) != SALUS_OK) {
            fprintf(stderr, "gpu bench: step failed: %s\n", salus_last_error(j->client));
            return 0;
        }
    }
    return (double) steps * (double) j->batch / ((double) (sl_ts_now_ns() - t0) / 1e9);
}

#endif
