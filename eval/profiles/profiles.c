/* eval/profiles: job profiles from graphs built with the client's nn
 * helpers, on a simulated GPU, set beside the simulator's own op lists
 * (eval/lib/graphs.c) and the Salus artifact's measurements.
 *
 *   profiles [--gpu PROFILE] [--iters N] [--csv FILE] [--json FILE] [--tiny]
 *
 * Each VGG and ResNet row of the CSV (VGG-11/16/19, ResNet-50/101/152 at
 * their batch sizes: the networks the nn helpers' layers and residual
 * blocks build) is compiled with
 * salus_model_compile (plain SGD, as tf_cnn_benchmarks trains by default)
 * against a salusd embedded in this process (inproc://) on `--device
 * sim:PROFILE`, and trained for --iters steps on synthetic data. Per row:
 *   iteration  the device time salusd charges per iteration (its
 *              sessions' attained time, from an iteration's launch to its
 *              completion on the sim device's real-time model: the batch's
 *              upload, upload_ms of it on the profile's host link, then
 *              the ops), over the counted steps, after a first step that
 *              is not counted; and the median step as the client sees it
 *              (salus_model_train_step: that, plus the batch through the
 *              transport and the loss back);
 *   persistent the model's parameters x 4 bytes (plain SGD keeps no slots);
 *   ephemeral  the planned peak of the training graph (memory/planner.h,
 *              what salusd reserves per iteration: salus_graph_memory).
 * Beside them: graphs.c's op list at the same batch on the same profile
 * (iteration alone with its launches pipelined, as salusd submits it and
 * the sim device times it; parameters) and the CSV (measured iteration time,
 * measured peak minus the published parameters). --out FILE writes the
 * profiles (model, batch, iteration_ns, persistent and ephemeral bytes)
 * for salus51 --profiles. Last line:
 *   BENCH eval_profiles rows=... time_vs_graph_min=... time_vs_graph_max=...
 *     time_vs_measured_min=... time_vs_measured_max=... params_diff_pct=...
 *     eph_vs_measured_min=... eph_vs_measured_max=...
 * (ratios: nn helpers over the other). */
#include "cli.h"
#include "graphs.h"
#include "sim/sim.h"
#include "server.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"
#include "workload.h"
#include "zoo.h"

#include <salus/salus.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define URL "inproc://salus-profiles"
#define MAX_ROWS 32
#define MAX_ITERS 64

/* The networks the nn helpers' layers and residual blocks build: the
 * zoo's VGG and ResNet (v1) families (eval/lib/zoo.h), which eval/lib/graphs.c
 * times too. */
static bool nn_builds(const char *model)
{
    enum sl_zoo_family f = sl_zoo_family(model);
    return (f == SL_ZOO_VGG || f == SL_ZOO_RESNET) && strcmp(model, "resnet50_v1.5") != 0;
}

/* The zoo's layers through the nn helpers. A layer error stays in the
 * model: compile reports it. The helpers' pools have no padding: ResNet's
 * stem pool gives 55 x 55 where graphs.c's padded one gives 56 x 56 (the
 * first strided block brings both to 28 x 28), so the spatial size is
 * followed here for the global average pool. */
typedef struct nn {
    salus_model *m;
    int64_t h, in_h, main_h; /* spatial size; a residual block's input's, main path's */
    bool flat;
    bool shortcut; /* the projection's first layer calls residual_shortcut */
} nn;

static void nn_input(void *ctx, int64_t c, int64_t h, int64_t w)
{
    nn *b = ctx;
    const int64_t sample[3] = {c, h, w};
    b->m = salus_model_new(3, sample);
    b->h = h;
}

static void nn_conv(void *ctx, const sl_zoo_conv *c)
{
    nn *b = ctx;
    if (b->shortcut)
        salus_model_residual_shortcut(b->m);
    b->shortcut = false;
    if (c->bn) {
        salus_model_conv2d_ex(b->m, c->out, c->k, c->stride, c->pad, SALUS_CONV_NO_BIAS);
        salus_model_batchnorm(b->m);
    } else {
        salus_model_conv2d(b->m, c->out, c->k, c->stride, c->pad);
    }
    if (c->relu)
        salus_model_relu(b->m);
    b->h = (b->h + 2 * c->pad - c->k) / c->stride + 1;
}

static void nn_maxpool(void *ctx, int64_t k, int64_t stride, int64_t pad)
{
    (void) pad; /* the helpers' pools have none */
    nn *b = ctx;
    salus_model_maxpool(b->m, k, stride);
    b->h = (b->h - k) / stride + 1;
}

static void nn_global_avgpool(void *ctx)
{
    nn *b = ctx;
    salus_model_avgpool(b->m, b->h, b->h);
    b->h = 1;
}

static void nn_fc(void *ctx, int64_t out, bool relu)
{
    nn *b = ctx;
    if (!b->flat)
        salus_model_flatten(b->m);
    b->flat = true;
    salus_model_dense(b->m, out);
    if (relu)
        salus_model_relu(b->m);
}

static void nn_residual_begin(void *ctx)
{
    nn *b = ctx;
    salus_model_residual_begin(b->m);
    b->in_h = b->h;
}

static void nn_residual_shortcut(void *ctx)
{
    nn *b = ctx;
    b->shortcut = true;
    b->main_h = b->h;
    b->h = b->in_h;
}

static void nn_residual_end(void *ctx)
{
    nn *b = ctx;
    b->shortcut = false;
    salus_model_residual_end(b->m);
    salus_model_relu(b->m);
    b->h = b->main_h;
}

static void nn_loss(void *ctx)
{
    (void) ctx; /* salus_model_compile adds it */
}

/* The zoo's network model as an nn model (NULL out of memory). An identity
 * shortcut is a residual block without residual_shortcut. */
static salus_model *build_nn(const char *model)
{
    nn b = {0};
    const sl_zoo_builder zb = {.ctx = &b,
                               .input = nn_input,
                               .conv = nn_conv,
                               .maxpool = nn_maxpool,
                               .global_avgpool = nn_global_avgpool,
                               .fc = nn_fc,
                               .residual_begin = nn_residual_begin,
                               .residual_shortcut = nn_residual_shortcut,
                               .residual_end = nn_residual_end,
                               .loss = nn_loss};
    if (sl_zoo_build(model, &zb) != SL_OK)
        return NULL;
    return b.m;
}

typedef struct row {
    char model[24];
    unsigned batch;
    /* the profile: salusd's device time per iteration, parameter bytes,
     * planned ephemeral peak */
    uint64_t nn_iteration_ns, nn_persistent, nn_ephemeral;
    double step_ms;   /* the client's step, median */
    double upload_ms; /* the batch's upload alone, modeled (of the iteration) */
    double graph_ms, graph_param_mib, measured_ms, measured_eph_mib;
} row;

static double ms(uint64_t ns)
{
    return (double) ns / 1e6;
}

static double mib(uint64_t bytes)
{
    return (double) bytes / (1 << 20);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

/* The device time salusd has charged session id so far (its attained
 * time, from the operator status: salus_status_json, whose session objects
 * are flat and start with their id), or -1 with the reason printed. The
 * sessions here are unnamed, so no string in the object holds a brace. */
static double attained_ns(salus_client *c, uint64_t id)
{
    static const char field[] = "\"attained_ns\":";
    char *json, key[48];
    if (salus_status_json(c, &json) != SL_OK) {
        fprintf(stderr, "profiles: status: %s\n", salus_last_error(c));
        return -1;
    }
    snprintf(key, sizeof key, "{\"id\":%llu,", (unsigned long long) id);
    const char *at = strstr(json, key), *end = at ? strchr(at, '}') : NULL;
    const char *v = at ? strstr(at, field) : NULL;
    char *stop = NULL;
    double ns = v && v < end ? strtod(v + strlen(field), &stop) : -1;
    if (!v || v >= end || stop == v + strlen(field) || !(ns >= 0)) {
        fprintf(stderr, "profiles: session %llu's attained time is not in the status\n",
                (unsigned long long) id);
        ns = -1;
    }
    salus_free(json);
    return ns;
}

/* Compiles and trains r->model at batch on the embedded salusd. */
static int profile_nn(salus_client *c, const sl_sim_profile *gpu, unsigned batch, int iters, row *r)
{
    salus_session *s; /* a session of its own, as a job has: closing it frees the model */
    int rc = salus_session_open(c, NULL, &s);
    if (rc != SL_OK) {
        fprintf(stderr, "profiles: %s: opening a session: %s\n", r->model, salus_last_error(c));
        return rc;
    }
    salus_model *m = build_nn(r->model);
    if (!m) {
        salus_session_close(s);
        return SL_ENOMEM;
    }
    salus_optimizer opt = {.kind = SALUS_SGD, .lr = 0.01f};
    rc = salus_model_compile(m, s, &opt, batch, 1, 1);
    uint64_t peak = 0, naive = 0;
    if (rc == SL_OK)
        rc = salus_graph_memory(salus_model_training_graph(m), &peak, &naive);
    size_t n_x = (size_t) batch * 3 * 224 * 224;
    float *x = rc == SL_OK ? sl_malloc(n_x * sizeof *x) : NULL;
    int32_t *labels = rc == SL_OK ? sl_malloc(batch * sizeof *labels) : NULL;
    if (rc == SL_OK && (!x || !labels))
        rc = SL_ENOMEM;
    double t[MAX_ITERS + 1];
    if (rc == SL_OK) {
        sl_eval_rng g;
        sl_eval_rng_seed(&g, batch);
        for (size_t i = 0; i < n_x; i++)
            x[i] = (float) sl_eval_rng_uniform(&g);
        for (unsigned i = 0; i < batch; i++)
            labels[i] = (int32_t) (sl_eval_rng_next(&g) % 1000);
        double a0 = -1;
        for (int i = 0; i <= iters && rc == SL_OK; i++) {
            float loss;
            double t0 = sl_now_s();
            rc = salus_model_train_step(m, x, labels, &loss);
            t[i] = sl_now_s() - t0;
            if (i == 0 && rc == SL_OK && (a0 = attained_ns(c, salus_session_id(s))) < 0)
                rc = SL_EPROTO;
        }
        double a1 = rc == SL_OK ? attained_ns(c, salus_session_id(s)) : -1;
        if (rc == SL_OK && a1 < a0)
            rc = SL_EPROTO;
        r->nn_iteration_ns = rc == SL_OK ? (uint64_t) llround((a1 - a0) / iters) : 0;
    }
    if (rc != SL_OK)
        fprintf(stderr, "profiles: %s batch %u: %s\n", r->model, batch,
                salus_model_error(m)  ? salus_model_error(m)
                : rc == SL_EPROTO     ? "no device time from the status (above)"
                : salus_last_error(c) ? salus_last_error(c)
                                      : sl_strerror(rc));
    else {
        qsort(t + 1, (size_t) iters, sizeof *t, cmp_double); /* the first is not counted */
        r->step_ms = (t[1 + (iters - 1) / 2] + t[1 + iters / 2]) / 2 * 1e3; /* the median */
        r->nn_persistent = (uint64_t) salus_model_param_count(m) * 4;
        r->nn_ephemeral = peak;
        sl_sim_timing up;
        sl_sim_copy_timing(gpu, SL_SIM_COPY_H2D, (n_x + batch) * 4, &up);
        r->upload_ms = ms(up.launch_ns + up.work_ns);
    }
    sl_free(x);
    sl_free(labels);
    salus_model_free(m);
    salus_session_close(s);
    return rc;
}

static const char usage[] =
    "usage: %s [--gpu PROFILE] [--iters N] [--csv FILE] [--json FILE] [--out FILE] "
    "[--tiny]\n"
    "  VGG and ResNet job profiles from the nn helpers on an embedded salusd --device "
    "sim:PROFILE,\n"
    "  beside eval/lib/graphs.c's op lists and the Salus CSV's measurements\n"
    "defaults: p100, 3 counted steps per row (a first one is not counted), every VGG\n"
    "and ResNet row of the CSV; --tiny: the first VGG and ResNet rows, 1 counted step\n";

typedef struct options {
    sl_cli_common c;
    const char *out;
    unsigned iters;
    bool tiny;
} options;

/* The rows: every (network, batch) of the CSV once, in file order (with
 * --tiny a VGG and a ResNet row). Returns how many. */
static size_t pick_rows(const options *o, const sl_eval_workload *w, size_t n_w, row *rows)
{
    size_t n = 0;
    bool family_seen[2] = {false, false};
    for (size_t i = 0; i < n_w && n < MAX_ROWS; i++) {
        bool built = false, seen = false;
        if (nn_builds(w[i].model)) {
            bool resnet = sl_zoo_family(w[i].model) == SL_ZOO_RESNET;
            built = !(o->tiny && family_seen[resnet]);
            family_seen[resnet] = true;
        }
        for (size_t k = 0; k < n; k++)
            seen |= strcmp(rows[k].model, w[i].model) == 0 && rows[k].batch == w[i].batch;
        if (!built || seen)
            continue;
        rows[n] = (row){.batch = w[i].batch,
                        .measured_ms = ms(w[i].iteration_ns),
                        .measured_eph_mib = mib(w[i].ephemeral_bytes)};
        snprintf(rows[n].model, sizeof rows[n].model, "%s", w[i].model);
        n++;
    }
    return n;
}

/* The ratios over the rows profiled. */
typedef struct ratios {
    double tg_min, tg_max, tm_min, tm_max, e_min, e_max;
    double params_diff; /* the largest, % of graphs.c's */
    size_t done;
} ratios;

/* Profiles every row on the embedded salusd and prints the table; false
 * when a row failed (the others still run). */
static bool profile_rows(salus_client *c, const options *o, row *rows, size_t n, ratios *q)
{
    const sl_sim_profile *gpu = o->c.gpu;
    bool ok = true;
    *q = (ratios){.tg_min = INFINITY, .tm_min = INFINITY, .e_min = INFINITY};
    for (size_t i = 0; i < n; i++) {
        row *r = &rows[i];
        fprintf(stderr, "profiles: %s batch %u ...\n", r->model, r->batch);
        if (profile_nn(c, gpu, r->batch, (int) o->iters, r) != SL_OK) {
            ok = false;
            continue;
        }
        sl_eval_timeline t;
        if (sl_eval_timeline_build(r->model, r->batch, gpu, &t) != SL_OK) {
            fprintf(stderr, "profiles: graphs.c cannot build %s\n", r->model);
            ok = false;
            continue;
        }
        r->graph_ms = ms(sl_eval_timeline_pipelined_ns(&t)); /* as the sim device runs it */
        r->graph_param_mib = mib(t.params * 4);
        sl_eval_timeline_fini(&t);
        double nn_ms = ms(r->nn_iteration_ns), nn_p = mib(r->nn_persistent),
               nn_e = mib(r->nn_ephemeral);
        double tg = nn_ms / r->graph_ms, tm = nn_ms / r->measured_ms,
               e = nn_e / r->measured_eph_mib;
        q->tg_min = fmin(q->tg_min, tg), q->tg_max = fmax(q->tg_max, tg);
        q->tm_min = fmin(q->tm_min, tm), q->tm_max = fmax(q->tm_max, tm);
        q->e_min = fmin(q->e_min, e), q->e_max = fmax(q->e_max, e);
        q->params_diff =
            fmax(q->params_diff, 100 * fabs(nn_p - r->graph_param_mib) / r->graph_param_mib);
        printf("%-9s %5u %9.2f %9.2f %9.2f %9.2f %11.2f %8.3f %8.3f %9.1f %9.1f %9.1f %8.1f\n",
               r->model, r->batch, nn_ms, r->upload_ms, r->step_ms, r->graph_ms, r->measured_ms, tg,
               tm, nn_p, r->graph_param_mib, nn_e, r->measured_eph_mib);
        q->done++;
    }
    return ok;
}

static void write_json(FILE *f, const options *o, const row *rows, size_t n)
{
    fprintf(f, "{\"bench\": \"eval_profiles\", \"gpu\": \"%s\", \"iters\": %u, \"rows\": [",
            o->c.gpu->name, o->iters);
    for (size_t i = 0, first = 1; i < n; i++) {
        const row *r = &rows[i];
        if (r->graph_ms == 0)
            continue;
        fprintf(f,
                "%s\n  {\"label\": \"%s/%u\", \"model\": \"%s\", \"batch\": %u, \"nn_ms\": "
                "%.4f, \"upload_ms\": "
                "%.4f, \"step_ms\": %.4f, \"graph_ms\": %.4f, \"measured_ms\": %.4f, "
                "\"nn_persistent_mib\": %.3f, "
                "\"graph_persistent_mib\": %.3f, \"nn_ephemeral_mib\": %.3f, "
                "\"measured_ephemeral_mib\": %.3f}",
                first ? "" : ",", r->model, r->batch, r->model, r->batch, ms(r->nn_iteration_ns),
                r->upload_ms, r->step_ms, r->graph_ms, r->measured_ms, mib(r->nn_persistent),
                r->graph_param_mib, mib(r->nn_ephemeral), r->measured_eph_mib);
        first = 0;
    }
    fprintf(f, "\n]}\n");
}

/* The profiles, for salus51 --profiles (workload.h). */
static void write_profiles(FILE *f, const row *rows, size_t n)
{
    fprintf(f, "model,batch,iteration_ns,persistent_bytes,ephemeral_bytes\n");
    for (size_t i = 0; i < n; i++)
        if (rows[i].graph_ms > 0)
            fprintf(f, "%s,%u,%llu,%llu,%llu\n", rows[i].model, rows[i].batch,
                    (unsigned long long) rows[i].nn_iteration_ns,
                    (unsigned long long) rows[i].nn_persistent,
                    (unsigned long long) rows[i].nn_ephemeral);
}

/* The report's files: the JSON and the profiles. */
static bool write_files(const options *o, const row *rows, size_t n)
{
    FILE *jf, *pf;
    if (!sl_cli_create(o->c.json, &jf))
        return false;
    if (jf)
        write_json(jf, o, rows, n);
    if (!sl_cli_close(jf, o->c.json) || !sl_cli_create(o->out, &pf))
        return false;
    if (pf)
        write_profiles(pf, rows, n);
    return sl_cli_close(pf, o->out);
}

int main(int argc, char **argv)
{
    options o = {.c = sl_cli_common_default(SL_CLI_WANT_JSON | SL_CLI_WANT_GPU | SL_CLI_WANT_CSV),
                 .iters = 3};
    const sl_cli_opt opts[] = {
        {"iters", SL_CLI_UINT, &o.iters, 1, MAX_ITERS, NULL},
        {"out", SL_CLI_STR, &o.out, 0, 0, NULL},
        {"tiny", SL_CLI_SET, &o.tiny, 0, 0, NULL},
    };
    int st = sl_cli_parse(argc, argv, usage, &o.c, opts, sizeof opts / sizeof opts[0]);
    if (st != SL_CLI_RUN)
        return st;
    if (o.tiny)
        o.iters = 1;
    const sl_sim_profile *gpu = o.c.gpu;
    sl_eval_workload *w = NULL;
    size_t n_w = 0;
    if (!sl_cli_workloads(&o.c, &w, &n_w))
        return 1;
    row rows[MAX_ROWS];
    size_t n = pick_rows(&o, w, n_w, rows);
    sl_free(w);

    char device[64];
    snprintf(device, sizeof device, "sim:%s", gpu->name);
    sl_server srv = {.cfg = SL_CONFIG_DEFAULTS};
    srv.cfg.device = device;
    srv.cfg.listen[srv.cfg.n_listen++] = URL;
    sl_log_set_level("warn");
    salus_client *c = NULL;
    int rc0 = sl_server_start(&srv);
    if (rc0 != SL_OK) {
        fprintf(stderr, "profiles: cannot start an embedded salusd on %s: %s\n", device,
                sl_strerror(rc0));
        return 1;
    }
    if ((rc0 = salus_connect(URL, &c)) != SL_OK) {
        fprintf(stderr, "profiles: cannot connect to the embedded salusd: %s\n", sl_strerror(rc0));
        sl_server_stop(&srv);
        return 1;
    }
    printf("profiles: VGG and ResNet training iterations from the nn helpers on an embedded salusd "
           "--device %s (%u counted steps each: nn_ms salusd's device time per iteration, "
           "step_ms the client's median step), beside eval/lib/graphs.c's op lists on %s and the "
           "Salus CSV (P100, measured)\n",
           device, o.iters, gpu->name);
    printf("%-9s %5s %9s %9s %9s %9s %11s %8s %8s %9s %9s %9s %8s\n", "model", "batch", "nn_ms",
           "upload_ms", "step_ms", "graph_ms", "measured_ms", "nn/graph", "nn/meas", "nn_P_MiB",
           "graph_P", "nn_E_MiB", "meas_E");
    ratios q;
    bool ok = profile_rows(c, &o, rows, n, &q);
    salus_disconnect(c);
    sl_server_stop(&srv);
    if (q.done == 0) {
        fprintf(stderr, "profiles: no row profiled\n");
        return 1;
    }
    printf("BENCH eval_profiles rows=%zu time_vs_graph_min=%.3f time_vs_graph_max=%.3f "
           "time_vs_measured_min=%.3f time_vs_measured_max=%.3f params_diff_pct=%.3f "
           "eph_vs_measured_min=%.3f eph_vs_measured_max=%.3f\n",
           q.done, q.tg_min, q.tg_max, q.tm_min, q.tm_max, q.params_diff, q.e_min, q.e_max);
    return write_files(&o, rows, n) && ok ? 0 : 1;
}
