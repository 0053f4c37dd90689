/* A training job that outlives salusd restarts: linear regression on
 * generated data, one iteration per salus_run, with a checkpoint of its
 * weights on the client side every --checkpoint-every steps.
 *
 * A session lives as long as salusd does: when salusd restarts (a new
 * container, a systemd restart after a lost device), runs fail with
 * SALUS_ESESSIONLOST or SALUS_ECONN. The job then waits for salusd to come
 * back (the client library reconnects by itself), opens a new session,
 * uploads the last checkpoint, registers its graph again and goes on from
 * the checkpoint's step. The data of step N depends only on N, so the steps
 * replayed after a restart are the same ones.
 *
 *   resilient_train [--steps N] [--step-ms MS] [--checkpoint-every K]
 *                   [--wait-s S] [--name NAME]
 * Exits 0 when training finished and the loss fell at least tenfold. */
#include <salus/salus.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define D 32 /* features */
#define B 64 /* batch */

typedef struct job {
    const char *name;
    int steps, step_ms, every, wait_s;
    salus_client *client;
    salus_session *s;
    salus_graph *g;
    salus_value loss;
    uint64_t w, b;
    float ckpt_w[D], ckpt_b[1]; /* the last checkpoint */
    int ckpt_step;
} job;

static float teacher[D];

/* Deterministic per step: a replayed step sees the same batch. */
static void batch(int step, float *x, float *y)
{
    uint64_t r = 0x9E3779B97F4A7C15ull * (uint64_t) (step + 1);
    for (int i = 0; i < B; i++) {
        double t = 0.5;
        for (int j = 0; j < D; j++) {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            x[i * D + j] = (float) ((r >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
            t += x[i * D + j] * teacher[j];
        }
        y[i] = (float) t;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + ts.tv_nsec / 1e9;
}

static int fail(job *j, const char *what, int rc)
{
    fprintf(stderr, "[%s] %s: %s: %s\n", j->name, what, salus_strerror(rc),
            salus_last_error(j->client));
    return rc;
}

/* Drops the session (salusd already has) and what referred to it. */
static void detach(job *j)
{
    salus_graph_free(j->g);
    j->g = NULL;
    (void) salus_session_close(j->s);
    j->s = NULL;
}

/* Opens a session, uploads the checkpoint and registers the training
 * graph, waiting up to --wait-s for a salusd to answer. */
static int attach(job *j)
{
    double deadline = now_s() + j->wait_s;
    salus_session_opts o = {.name = j->name, .expected_iterations = (uint64_t) j->steps};
    int rc;
    while ((rc = salus_session_open(j->client, &o, &j->s)) != SALUS_OK) {
        if ((rc != SALUS_ECONN && rc != SALUS_ESHUTDOWN) || now_s() > deadline)
            return fail(j, "open a session", rc);
        usleep(200000); /* salusd is not back yet */
    }
    const int64_t dw[] = {D, 1}, db[] = {1}, dx[] = {B, D}, dy[] = {B, 1};
    if ((rc = salus_tensor_create(j->s, SALUS_F32, 2, dw, j->ckpt_w, &j->w)) ||
        (rc = salus_tensor_create(j->s, SALUS_F32, 1, db, j->ckpt_b, &j->b)))
        return fail(j, "upload the checkpoint", rc);
    salus_graph *g = j->g = salus_graph_new();
    if (!g)
        return SALUS_ENOMEM;
    salus_value x = salus_graph_input(g, SALUS_F32, 2, dx);
    salus_value y = salus_graph_input(g, SALUS_F32, 2, dy);
    salus_value W = salus_graph_param(g, j->w, SALUS_F32, 2, dw);
    salus_value Bv = salus_graph_param(g, j->b, SALUS_F32, 1, db);
    const int64_t nt[] = {0, 0}, tn[] = {1, 0};
    const float lr[] = {0.05f};
    salus_value p = salus_graph_op(g, "matmul", 2, (salus_value[]){x, W}, 2, nt, 0, NULL);
    p = salus_graph_op(g, "bias_add", 2, (salus_value[]){p, Bv}, 0, NULL, 0, NULL);
    j->loss = salus_graph_op(g, "mse_loss", 2, (salus_value[]){p, y}, 0, NULL, 0, NULL);
    salus_value dp = salus_graph_op(g, "mse_grad", 2, (salus_value[]){p, y}, 0, NULL, 0, NULL);
    salus_value gw = salus_graph_op(g, "matmul", 2, (salus_value[]){x, dp}, 2, tn, 0, NULL);
    salus_value gb = salus_graph_op(g, "bias_grad", 1, (salus_value[]){dp}, 0, NULL, 0, NULL);
    salus_graph_op(g, "sgd_update", 2, (salus_value[]){W, gw}, 0, NULL, 1, lr);
    salus_graph_op(g, "sgd_update", 2, (salus_value[]){Bv, gb}, 0, NULL, 1, lr);
    if (salus_graph_error(g)) {
        fprintf(stderr, "[%s] graph: %s\n", j->name, salus_graph_error(g));
        return SALUS_EINVAL;
    }
    if ((rc = salus_graph_register(j->s, g, NULL)))
        return fail(j, "register the graph", rc);
    return SALUS_OK;
}

static int checkpoint(job *j, int next_step)
{
    float w[D], b[1];
    int rc;
    if ((rc = salus_tensor_read(j->s, j->w, w, sizeof w)) ||
        (rc = salus_tensor_read(j->s, j->b, b, sizeof b)))
        return rc;
    memcpy(j->ckpt_w, w, sizeof w);
    memcpy(j->ckpt_b, b, sizeof b);
    j->ckpt_step = next_step;
    return SALUS_OK;
}

/* salusd went away (restart, drain): the job can go on in a new session. */
static int lost(int rc)
{
    return rc == SALUS_ESESSIONLOST || rc == SALUS_ECONN || rc == SALUS_ESHUTDOWN;
}

int main(int argc, char **argv)
{
    job j = {.name = "resilient", .steps = 400, .step_ms = 0, .every = 20, .wait_s = 120};
    static const struct option opts[] = {
        {"steps", required_argument, NULL, 's'},
        {"step-ms", required_argument, NULL, 'm'},
        {"checkpoint-every", required_argument, NULL, 'k'},
        {"wait-s", required_argument, NULL, 'w'},
        {"name", required_argument, NULL, 'n'},
        {0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 's':
            j.steps = atoi(optarg);
            break;
        case 'm':
            j.step_ms = atoi(optarg);
            break;
        case 'k':
            j.every = atoi(optarg);
            break;
        case 'w':
            j.wait_s = atoi(optarg);
            break;
        case 'n':
            j.name = optarg;
            break;
        default:
            fprintf(stderr, "usage: resilient_train [--steps N] [--step-ms MS] "
                            "[--checkpoint-every K] [--wait-s S] [--name NAME]\n");
            return 2;
        }
    }
    if (j.steps < 1 || j.every < 1 || j.step_ms < 0 || j.wait_s < 1) {
        fprintf(stderr, "resilient_train: bad arguments\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < D; i++)
        teacher[i] = (float) ((i * 37) % 17) / 8.0f - 1.0f;
    int rc = salus_connect(NULL, &j.client);
    if (rc) {
        fprintf(stderr, "[%s] connect: %s: %s\n", j.name, salus_strerror(rc),
                salus_last_error(NULL));
        return 1;
    }
    static float x[B * D], y[B];
    float first = -1, last = -1;
    int resumed = 0, status = 1;
    if (attach(&j))
        goto out;
    for (int step = j.ckpt_step; step < j.steps;) {
        batch(step, x, y);
        float l;
        const void *feeds[] = {x, y};
        void *outs[] = {&l};
        rc = salus_run(j.s, j.g, feeds, 1, &j.loss, outs);
        if (rc == SALUS_OK && (step + 1) % j.every == 0)
            rc = checkpoint(&j, step + 1);
        if (lost(rc)) {
            printf("[%s] salusd went away at step %d (%s): resuming from the checkpoint of "
                   "step %d\n",
                   j.name, step, salus_strerror(rc), j.ckpt_step);
            detach(&j);
            if (attach(&j))
                goto out;
            resumed++;
            step = j.ckpt_step;
            printf("[%s] resumed at step %d in a new session\n", j.name, step);
            continue;
        }
        if (rc) {
            fail(&j, "run", rc);
            goto out;
        }
        if (first < 0)
            first = l;
        last = l;
        if (step % 50 == 0 || step == j.steps - 1)
            printf("[%s] step %4d  loss %.5f\n", j.name, step, l);
        step++;
        if (j.step_ms)
            usleep((useconds_t) j.step_ms * 1000);
    }
    printf("[%s] loss %.5f -> %.5f over %d steps, resumed %d times\n", j.name, first, last, j.steps,
           resumed);
    status = last * 10 < first ? 0 : 1;
out:
    detach(&j);
    salus_disconnect(j.client);
    return status;
}
