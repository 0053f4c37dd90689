/* A training job for salusd: a 2-layer MLP (D -> H -> 1, ReLU) learns a fixed
 * random "teacher" function from generated data, one iteration per salus_run.
 *
 * With --check it also trains the same model locally in double precision
 * with plain loops and compares every loss the server returns, and the final
 * weights, against it: the integration tests use this to prove the server
 * computes exactly what was asked, even with other jobs running beside it. */
#include <salus/salus.h>

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cfg {
    const char *url, *name;
    int steps, batch, in, hidden, every;
    unsigned seed;
    float lr;
    int check;
    int priority; /* the session's (within the caller's limits) */
} cfg;

static uint64_t rng_state;
static float frand(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float) ((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* The model's parameters, on the client side (initial values, reference). */
typedef struct model {
    int in, hidden;
    float *w1, *b1, *w2, *b2;
} model;

static int model_init(model *m, int in, int hidden)
{
    m->in = in;
    m->hidden = hidden;
    m->w1 = calloc((size_t) in * hidden, sizeof(float));
    m->b1 = calloc((size_t) hidden, sizeof(float));
    m->w2 = calloc((size_t) hidden, sizeof(float));
    m->b2 = calloc(1, sizeof(float));
    if (!m->w1 || !m->b1 || !m->w2 || !m->b2)
        return -1;
    float s1 = 1.0f / sqrtf((float) in), s2 = 1.0f / sqrtf((float) hidden);
    for (int i = 0; i < in * hidden; i++)
        m->w1[i] = frand() * s1;
    for (int i = 0; i < hidden; i++)
        m->w2[i] = frand() * s2;
    return 0;
}

static void model_fini(model *m)
{
    free(m->w1);
    free(m->b1);
    free(m->w2);
    free(m->b2);
}

/* Forward pass of m on x[B, in] into out[B] (double accumulation). */
static void forward(const model *m, const float *x, int batch, double *hid, double *out)
{
    for (int b = 0; b < batch; b++) {
        double o = m->b2[0];
        for (int h = 0; h < m->hidden; h++) {
            double z = m->b1[h];
            for (int i = 0; i < m->in; i++)
                z += (double) x[b * m->in + i] * m->w1[i * m->hidden + h];
            hid[b * m->hidden + h] = z;
            o += (z > 0 ? z : 0) * m->w2[h];
        }
        out[b] = o;
    }
}

/* One SGD step of the reference model; returns the loss before the step. */
static double reference_step(model *m, const float *x, const float *y, int batch, float lr,
                             double *hid, double *out)
{
    forward(m, x, batch, hid, out);
    double loss = 0;
    for (int b = 0; b < batch; b++)
        loss += (out[b] - y[b]) * (out[b] - y[b]);
    loss /= batch;
    /* gradients, then the update (the server's graph computes all gradients
     * from the pre-update weights too) */
    double *dw1 = calloc((size_t) m->in * m->hidden, sizeof *dw1);
    double *db1 = calloc((size_t) m->hidden, sizeof *db1);
    double *dw2 = calloc((size_t) m->hidden, sizeof *dw2);
    double db2 = 0;
    for (int b = 0; b < batch; b++) {
        double dp = 2.0 * (out[b] - y[b]) / batch;
        db2 += dp;
        for (int h = 0; h < m->hidden; h++) {
            double z = hid[b * m->hidden + h];
            dw2[h] += (z > 0 ? z : 0) * dp;
            double dz = z > 0 ? dp * m->w2[h] : 0;
            db1[h] += dz;
            for (int i = 0; i < m->in; i++)
                dw1[i * m->hidden + h] += (double) x[b * m->in + i] * dz;
        }
    }
    for (int i = 0; i < m->in * m->hidden; i++)
        m->w1[i] -= (float) (lr * dw1[i]);
    for (int h = 0; h < m->hidden; h++) {
        m->b1[h] -= (float) (lr * db1[h]);
        m->w2[h] -= (float) (lr * dw2[h]);
    }
    m->b2[0] -= (float) (lr * db2);
    free(dw1);
    free(db1);
    free(dw2);
    return loss;
}

static int parse(int argc, char **argv, cfg *c)
{
    static const struct option opts[] = {
        {"url", required_argument, NULL, 'u'},    {"name", required_argument, NULL, 'n'},
        {"steps", required_argument, NULL, 's'},  {"batch", required_argument, NULL, 'b'},
        {"hidden", required_argument, NULL, 'H'}, {"seed", required_argument, NULL, 'r'},
        {"lr", required_argument, NULL, 'l'},     {"every", required_argument, NULL, 'e'},
        {"check", no_argument, NULL, 'c'},        {"priority", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},         {0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'u':
            c->url = optarg;
            break;
        case 'n':
            c->name = optarg;
            break;
        case 's':
            c->steps = atoi(optarg);
            break;
        case 'b':
            c->batch = atoi(optarg);
            break;
        case 'H':
            c->hidden = atoi(optarg);
            break;
        case 'r':
            c->seed = (unsigned) strtoul(optarg, NULL, 10);
            break;
        case 'l':
            c->lr = strtof(optarg, NULL);
            break;
        case 'e':
            c->every = atoi(optarg);
            break;
        case 'c':
            c->check = 1;
            break;
        case 'p':
            c->priority = atoi(optarg);
            break;
        case 'h':
            printf(
                "usage: mlp_regression [--url URL] [--name NAME] [--steps N] [--batch B]\n"
                "         [--hidden H] [--lr LR] [--seed S] [--every N] [--check] [--priority P]\n"
                "Trains a 2-layer MLP regression through salusd; --check compares every\n"
                "result with a local double-precision reference.\n");
            return 0;
        default:
            return 2;
        }
    }
    if (c->steps < 1 || c->batch < 1 || c->hidden < 1 || c->every < 1 || !(c->lr > 0)) {
        fprintf(stderr, "mlp_regression: steps, batch, hidden, every and lr must be > 0\n");
        return 2;
    }
    return -1;
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != SALUS_OK) {                                                                     \
            fprintf(stderr, "[%s] %s: %s: %s\n", c.name, #call, salus_strerror(rc_),               \
                    salus_last_error(client));                                                     \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    cfg c = {.name = "mlp",
             .steps = 300,
             .batch = 64,
             .in = 16,
             .hidden = 64,
             .every = 50,
             .seed = 1,
             .lr = 0.05f};
    int rc = parse(argc, argv, &c);
    if (rc >= 0)
        return rc;
    int status = 1, mismatches = 0;
    salus_client *client = NULL;
    salus_session *s = NULL;
    salus_graph *g = NULL;
    model m = {0}, teacher = {0}, ref = {0};
    const int B = c.batch, D = c.in, H = c.hidden;
    float *x = malloc(sizeof(float) * (size_t) B * D), *y = malloc(sizeof(float) * (size_t) B);
    double *hid = malloc(sizeof(double) * (size_t) B * H), *out = malloc(sizeof(double) * B);

    rng_state = 0x9E3779B97F4A7C15ull ^ (c.seed * 0x2545F4914F6CDD1Dull);
    if (!x || !y || !hid || !out || model_init(&teacher, D, 32) || model_init(&m, D, H) ||
        model_init(&ref, D, H)) {
        fprintf(stderr, "out of memory\n");
        goto out;
    }
    memcpy(ref.w1, m.w1, sizeof(float) * (size_t) D * H);
    memcpy(ref.w2, m.w2, sizeof(float) * (size_t) H);

    CHECK(salus_connect(c.url, &client));
    salus_session_opts opts = {
        .name = c.name, .priority = c.priority, .expected_iterations = (uint64_t) c.steps};
    CHECK(salus_session_open(client, &opts, &s));

    uint64_t w1, b1, w2, b2;
    const int64_t dw1[] = {D, H}, db1[] = {H}, dw2[] = {H, 1}, db2[] = {1};
    CHECK(salus_tensor_create(s, SALUS_F32, 2, dw1, m.w1, &w1));
    CHECK(salus_tensor_create(s, SALUS_F32, 1, db1, NULL, &b1));
    CHECK(salus_tensor_create(s, SALUS_F32, 2, dw2, m.w2, &w2));
    CHECK(salus_tensor_create(s, SALUS_F32, 1, db2, NULL, &b2));

    /* the training graph: forward, backward, SGD — one iteration */
    g = salus_graph_new();
    const int64_t dx[] = {B, D}, dy[] = {B, 1};
    salus_value vx = salus_graph_input(g, SALUS_F32, 2, dx);
    salus_value vy = salus_graph_input(g, SALUS_F32, 2, dy);
    salus_value W1 = salus_graph_param(g, w1, SALUS_F32, 2, dw1);
    salus_value B1 = salus_graph_param(g, b1, SALUS_F32, 1, db1);
    salus_value W2 = salus_graph_param(g, w2, SALUS_F32, 2, dw2);
    salus_value B2 = salus_graph_param(g, b2, SALUS_F32, 1, db2);
    const int64_t nt[] = {0, 0}, tn[] = {1, 0}, nT[] = {0, 1};
#define OP(type, ni, ...)                                                                          \
    salus_graph_op(g, type, ni, (salus_value[]){__VA_ARGS__}, 0, NULL, 0, NULL)
    salus_value z = salus_graph_op(g, "matmul", 2, (salus_value[]){vx, W1}, 2, nt, 0, NULL);
    z = OP("bias_add", 2, z, B1);
    salus_value h = OP("relu", 1, z);
    salus_value p = salus_graph_op(g, "matmul", 2, (salus_value[]){h, W2}, 2, nt, 0, NULL);
    p = OP("bias_add", 2, p, B2);
    salus_value loss = OP("mse_loss", 2, p, vy);
    salus_value dp = OP("mse_grad", 2, p, vy);
    salus_value gW2 = salus_graph_op(g, "matmul", 2, (salus_value[]){h, dp}, 2, tn, 0, NULL);
    salus_value gB2 = OP("bias_grad", 1, dp);
    salus_value dh = salus_graph_op(g, "matmul", 2, (salus_value[]){dp, W2}, 2, nT, 0, NULL);
    salus_value dz = OP("relu_grad", 2, dh, z);
    salus_value gW1 = salus_graph_op(g, "matmul", 2, (salus_value[]){vx, dz}, 2, tn, 0, NULL);
    salus_value gB1 = OP("bias_grad", 1, dz);
    const float lr[] = {c.lr};
    salus_graph_op(g, "sgd_update", 2, (salus_value[]){W1, gW1}, 0, NULL, 1, lr);
    salus_graph_op(g, "sgd_update", 2, (salus_value[]){B1, gB1}, 0, NULL, 1, lr);
    salus_graph_op(g, "sgd_update", 2, (salus_value[]){W2, gW2}, 0, NULL, 1, lr);
    salus_graph_op(g, "sgd_update", 2, (salus_value[]){B2, gB2}, 0, NULL, 1, lr);
#undef OP
    if (salus_graph_error(g)) {
        fprintf(stderr, "[%s] graph: %s\n", c.name, salus_graph_error(g));
        goto out;
    }
    uint64_t peak;
    CHECK(salus_graph_register(s, g, &peak));
    printf("[%s] registered training graph: %d-%d-1 MLP, batch %d, ephemeral peak %.1f KiB\n",
           c.name, D, H, B, (double) peak / 1024);
    fflush(stdout);

    double first = 0, last = 0, max_err = 0;
    for (int step = 0; step < c.steps; step++) {
        for (int i = 0; i < B * D; i++)
            x[i] = frand();
        forward(&teacher, x, B, hid, out);
        for (int b = 0; b < B; b++)
            y[b] = (float) out[b];
        float l;
        const void *feeds[] = {x, y};
        void *outs[] = {&l};
        CHECK(salus_run(s, g, feeds, 1, &loss, outs));
        if (c.check) {
            double want = reference_step(&ref, x, y, B, c.lr, hid, out);
            double err = fabs(l - want) / fmax(1e-3, fabs(want));
            if (err > max_err)
                max_err = err;
            if (err > 2e-3 && mismatches++ < 5)
                fprintf(stderr, "[%s] step %d: server loss %.6f, reference %.6f\n", c.name, step, l,
                        want);
        }
        if (step == 0)
            first = l;
        last = l;
        if (step % c.every == 0 || step == c.steps - 1) {
            printf("[%s] step %4d/%d (%3d%%)  loss %.5f\n", c.name, step, c.steps,
                   100 * (step + 1) / c.steps, l);
            fflush(stdout);
        }
    }
    if (c.check) {
        float *w1_server = malloc(sizeof(float) * (size_t) D * H);
        if (!w1_server)
            goto out;
        CHECK(salus_tensor_read(s, w1, w1_server, sizeof(float) * (size_t) D * H));
        double werr = 0;
        for (int i = 0; i < D * H; i++)
            werr = fmax(werr, fabs(w1_server[i] - ref.w1[i]));
        free(w1_server);
        printf("[%s] check: max relative loss error %.2e, max |W1 - reference| %.2e\n", c.name,
               max_err, werr);
        if (werr > 1e-3)
            mismatches++;
    }
    printf("[%s] loss %.5f -> %.5f over %d steps%s\n", c.name, first, last, c.steps,
           c.check ? (mismatches ? "  CHECK FAILED" : "  (matches the reference)") : "");
    status = mismatches || !(last < first) ? 1 : 0;
out:
    salus_graph_free(g);
    if (s)
        (void) salus_session_close(s);
    salus_disconnect(client);
    model_fini(&m);
    model_fini(&teacher);
    model_fini(&ref);
    free(x);
    free(y);
    free(hid);
    free(out);
    return status;
}
