/* bench/train_vs_torch: salus against PyTorch's best configuration on the
 * same models, batch (128), optimizer (SGD with momentum 0.9, lr 0.02) and
 * Fashion-MNIST batches (taken in order), for two models: the MLP
 * 784-256-128-10 and the CNN of examples/fashion_train.c (conv 16 3x3 pad 1,
 * relu, maxpool 2, conv 32 3x3 pad 1, relu, maxpool 2, dense 128, relu,
 * dense 10). Trained side by side:
 *   salus   through salusd over ipc:// (a separate process);
 *   torch   PyTorch (Debian's python3-torch) in four processes: 1 and 2
 *           threads (torch.set_num_threads), each with
 *           OMP_WAIT_POLICY=PASSIVE (idle OpenMP threads sleep) and with
 *           GNU OpenMP's default (they spin a while first);
 *   inproc  (MLP only) salus through a server embedded in this process over
 *           inproc://: the same graph without inter-process communication;
 *   openblas (MLP only) salus through a second salusd whose GEMMs go
 *           through OpenBLAS (SALUS_CPU_GEMM=openblas) instead of oneDNN:
 *           what the GEMM library alone is worth.
 * OpenBLAS's kernels, on both sides, are chosen from the processor's flags
 * unless OPENBLAS_CORETYPE is set (bench_openblas_coretype: a VM that
 * hides the processor's model gets Prescott's kernels otherwise), and each
 * PyTorch process gets as many OpenBLAS threads as it has OpenMP threads
 * (OPENBLAS_NUM_THREADS).
 * salusd runs with OMP_WAIT_POLICY=PASSIVE (its oneDNN ops; its GEMMs split
 * on its own thread teams, kernels/cpu/team.c). A round is salus, torch 1,
 * salus, torch 2, ... [, inproc, openblas]: both sides are measured alternately, and samples/s
 * counts whole training steps as the client sees them (feeding the batch, running the step,
 * fetching the loss). Each side trains a whole epoch of Fashion-MNIST (468 batches) per run by
 * default: PyTorch's rate over a few dozen steps is not its rate over an epoch. PyTorch's best
 * is the configuration with the higher median; the ratio is salus's median over that median.
 * After the rounds, with the other PyTorch processes gone and salusd idle, a fresh process of
 * the best configuration trains as many steps alone as all its rounds held, and its rate is
 * printed beside the in-bench median (torch_alone_sps): a gap says the rounds disturbed
 * PyTorch, and the ratio is taken over the higher of the two (ratio_bench: over the in-bench
 * median alone). Prints per-round figures, then
 *   BENCH server_overhead ipc_sps=... inproc_sps=... overhead_pct=...
 *   BENCH train_vs_torch_gemm model=mlp onednn_sps=... openblas_sps=... ratio=...
 *   BENCH train_vs_torch model=mlp ratio=... salus_sps=... torch_sps=... torch_best=... ...
 *   BENCH train_vs_torch model=cnn ratio=... ...                            (last line)
 *
 *   train_vs_torch --salusd PATH --script bench/torch_train.py [--python /usr/bin/python3]
 *                  [--rounds 5] [--steps N] [--cnn-steps N] [--json FILE]
 * (--steps: the MLP's steps per run, --cnn-steps the CNN's; an epoch by default) */
#include "bench_util.h"
#include "fashion_mnist.h"
#include "server.h"
#include "sl_error.h"
#include "sl_log.h"

#include <salus/salus.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BATCH 128
#define LR 0.02f
#define WARMUP_STEPS 20
#define EPOCH_STEPS (60000 / BATCH)

enum model { MLP, CNN, N_MODELS };
static const char *const model_name[N_MODELS] = {"mlp", "cnn"};

typedef struct job {
    salus_client *client;
    salus_session *session;
    salus_model *model;
    int64_t pos;
    float loss;
} job;

static int job_open(job *j, const char *url, enum model kind)
{
    salus_optimizer opt = {.kind = SALUS_MOMENTUM, .lr = LR, .momentum = 0.9f};
    int rc;
    j->model = fmnist_model(kind == MLP ? "mlp" : "cnn");
    if (!j->model)
        return SL_ENOMEM;
    if ((rc = salus_connect(url, &j->client)) ||
        (rc = salus_session_open(j->client, NULL, &j->session)) ||
        (rc = salus_model_compile(j->model, j->session, &opt, BATCH, BATCH, 1))) {
        fprintf(stderr, "train_vs_torch: %s: %s %s\n", url, salus_strerror(rc),
                salus_model_error(j->model) ? salus_model_error(j->model) : "");
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
    memset(j, 0, sizeof *j);
}

/* Trains `steps` iterations over consecutive batches; returns samples/s
 * (0 on failure). */
static double job_round(job *j, const fmnist *d, int steps)
{
    uint64_t t0 = sl_ts_now_ns();
    for (int s = 0; s < steps; s++) {
        if (j->pos + BATCH > d->n)
            j->pos = 0;
        if (salus_model_train_step(j->model, d->images + j->pos * FMNIST_PIXELS, d->labels + j->pos,
                                   &j->loss) != SALUS_OK) {
            fprintf(stderr, "train_vs_torch: step failed: %s\n", salus_last_error(j->client));
            return 0;
        }
        j->pos += BATCH;
    }
    return (double) steps * BATCH / ((double) (sl_ts_now_ns() - t0) / 1e9);
}

/* One PyTorch process: its thread count and the pipes to it. */
typedef struct torch_proc {
    int threads;
    bool spin; /* OpenMP's default wait policy instead of PASSIVE */
    pid_t pid;
    FILE *in, *out;
} torch_proc;

static int torch_start(torch_proc *t, const char *python, const char *script)
{
    int to_py[2], from_py[2];
    if (pipe(to_py) || pipe(from_py))
        return -1;
    char threads[16], batch[16], lr[16];
    snprintf(threads, sizeof threads, "%d", t->threads);
    snprintf(batch, sizeof batch, "%d", BATCH);
    snprintf(lr, sizeof lr, "%g", (double) LR);
    t->pid = fork();
    if (t->pid < 0)
        return -1;
    if (t->pid == 0) {
        dup2(to_py[0], 0);
        dup2(from_py[1], 1);
        close(to_py[0]);
        close(to_py[1]);
        close(from_py[0]);
        close(from_py[1]);
        if (t->spin)
            unsetenv("OMP_WAIT_POLICY");
        setenv("OPENBLAS_NUM_THREADS", threads, 1);
        execl(python, python, script, threads, batch, lr, (char *) NULL);
        perror(python);
        _exit(127);
    }
    close(to_py[0]);
    close(from_py[1]);
    t->in = fdopen(to_py[1], "w");
    t->out = fdopen(from_py[0], "r");
    return t->in && t->out ? 0 : -1;
}

/* Sends one command and reads one answer line into line. */
static int torch_ask(torch_proc *t, char *line, size_t n, const char *fmt, const char *model,
                     int steps)
{
    fprintf(t->in, fmt, model, steps);
    fflush(t->in);
    if (!fgets(line, (int) n, t->out)) {
        fprintf(stderr, "train_vs_torch: PyTorch (%d threads%s) stopped\n", t->threads,
                t->spin ? ", spinning" : "");
        return -1;
    }
    line[strcspn(line, "\n")] = 0;
    return 0;
}

static double torch_round(torch_proc *t, enum model kind, int steps)
{
    char line[256];
    double sps;
    if (torch_ask(t, line, sizeof line, "run %s %d\n", model_name[kind], steps))
        return 0;
    if (sscanf(line, "sps %lf", &sps) != 1) {
        fprintf(stderr, "train_vs_torch: bad answer from PyTorch: %s\n", line);
        return 0;
    }
    return sps;
}

static void torch_stop(torch_proc *t)
{
    if (t->in) {
        fprintf(t->in, "quit\n");
        fclose(t->in);
    }
    if (t->out)
        fclose(t->out);
    if (t->pid > 0)
        (void) waitpid(t->pid, NULL, 0);
}

/* PyTorch's configurations, in the order a round runs them. */
#define N_TORCH 4
static const torch_proc torch_configs[N_TORCH] = {
    {.threads = 1}, {.threads = 2}, {.threads = 1, .spin = true}, {.threads = 2, .spin = true}};
static const char *const torch_names[N_TORCH] = {"torch1", "torch2", "torch1_spin", "torch2_spin"};

/* The figures of one model: salus runs before each PyTorch configuration. */
typedef struct series {
    double *salus, *torch[N_TORCH], *inproc, *openblas, *ratio; /* salus: N_TORCH per round */
} series;

typedef struct summary {
    double salus, torch[N_TORCH], inproc, openblas, best, ratio, ratio_min;
    double salus_lo, salus_hi, best_lo, best_hi, alone;
    int best_config;
} summary;

static summary summarise(const series *s, int rounds, bool with_inproc)
{
    summary m = {0};
    size_t n = (size_t) rounds;
    m.salus = sl_ts_median(s->salus, N_TORCH * n);
    m.salus_lo = sl_ts_percentile(s->salus, N_TORCH * n, 0);
    m.salus_hi = sl_ts_percentile(s->salus, N_TORCH * n, 100);
    int b = 0;
    for (int t = 0; t < N_TORCH; t++) {
        m.torch[t] = sl_ts_median(s->torch[t], n);
        if (m.torch[t] > m.torch[b])
            b = t;
    }
    m.best_config = b;
    m.best = m.torch[b];
    m.best_lo = sl_ts_percentile(s->torch[b], n, 0);
    m.best_hi = sl_ts_percentile(s->torch[b], n, 100);
    m.ratio = m.salus / m.best;
    /* per round: salus's run just before the best configuration's, over it */
    for (int r = 0; r < rounds; r++)
        s->ratio[r] = s->salus[N_TORCH * r + b] / s->torch[b][r];
    m.ratio_min = sl_ts_percentile(s->ratio, n, 0);
    if (with_inproc) {
        m.inproc = sl_ts_median(s->inproc, n);
        m.openblas = sl_ts_median(s->openblas, n);
    }
    return m;
}

int main(int argc, char **argv)
{
    const char *salusd = NULL, *script = NULL, *python = "/usr/bin/python3", *json = NULL;
    /* whole epochs: at 50 CNN steps PyTorch ran at a quarter of its rate
     * over an epoch alone, and at 150 MLP steps one scheduling hiccup of
     * this VM moved a round's figure by 2x */
    int rounds = 5, steps[N_MODELS] = {EPOCH_STEPS, EPOCH_STEPS};
    static const struct option lo[] = {
        {"salusd", 1, NULL, 's'}, {"script", 1, NULL, 'S'},
        {"python", 1, NULL, 'p'}, {"rounds", 1, NULL, 'r'},
        {"steps", 1, NULL, 'n'},  {"cnn-steps", 1, NULL, 'c'},
        {"json", 1, NULL, 'j'},   {0},
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
        case 'r':
            rounds = atoi(optarg);
            break;
        case 'n':
            steps[MLP] = atoi(optarg);
            break;
        case 'c':
            steps[CNN] = atoi(optarg);
            break;
        case 'j':
            json = optarg;
            break;
        default:
            return 2;
        }
    }
    if (!salusd || !script || rounds < 1 || steps[MLP] < 1 || steps[CNN] < 1) {
        fprintf(stderr, "usage: train_vs_torch --salusd PATH --script torch_train.py [--python PY] "
                        "[--rounds N] [--steps N] [--cnn-steps N] [--json FILE]\n");
        return 2;
    }
    fmnist data;
    if (fmnist_load(NULL, "train", 0, &data))
        return 1;
    /* the same OpenMP behaviour for salusd and both PyTorch processes */
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    const char *coretype = bench_openblas_coretype();
    printf("OpenBLAS kernels (salusd's openblas GEMMs, PyTorch): %s\n",
           coretype[0] ? coretype : "OpenBLAS's own choice");

    /* children first: NNG must not be initialised in a process that forks */
    char dir[200];
    if (sl_ts_tempdir("tvt", dir, sizeof dir) != SL_OK)
        return 1;
    char ipc_url[256], blas_url[256];
    snprintf(ipc_url, sizeof ipc_url, "ipc://%s/salus.sock", dir);
    snprintf(blas_url, sizeof blas_url, "ipc://%s/openblas.sock", dir);
    pid_t spid = bench_spawn((const char *[]){salusd, "--listen", ipc_url, "--memory-limit", "1G",
                                              "--log-level", "warn", NULL});
    setenv("SALUS_CPU_GEMM", "openblas", 1);
    pid_t bpid = bench_spawn((const char *[]){salusd, "--listen", blas_url, "--memory-limit", "1G",
                                              "--log-level", "warn", NULL});
    unsetenv("SALUS_CPU_GEMM");
    torch_proc torch[N_TORCH];
    memcpy(torch, torch_configs, sizeof torch);
    char line[256];
    for (int t = 0; t < N_TORCH; t++) {
        if (torch_start(&torch[t], python, script) || !fgets(line, sizeof line, torch[t].out) ||
            strncmp(line, "ready", 5) != 0) {
            fprintf(stderr, "train_vs_torch: the PyTorch side did not start (python3-torch?)\n");
            bench_stop(spid);
            bench_stop(bpid);
            return 1;
        }
    }

    sl_server inproc = {.cfg = SL_CONFIG_DEFAULTS};
    inproc.cfg.listen[inproc.cfg.n_listen++] = "inproc://salus-bench";
    inproc.cfg.memory_limit = 1ull << 30;
    sl_log_set_level("warn");
    if (sl_server_start(&inproc) != SL_OK)
        return 1;
    for (int u = 0; u < 2; u++) {
        salus_client *probe = NULL;
        for (int i = 0; i < 500 && salus_connect(u ? blas_url : ipc_url, &probe) != SALUS_OK; i++)
            usleep(10000);
        salus_disconnect(probe);
    }

    /* other users of the machine move every figure: say how busy it was (the
     * figure after the rounds includes this benchmark's own work, about 1) */
    double load[2][3] = {{0}};
    if (getloadavg(load[0], 3) < 1)
        load[0][0] = -1;
    series s[N_MODELS];
    summary sum[N_MODELS];
    for (int k = 0; k < N_MODELS; k++) {
        s[k].salus = calloc(N_TORCH * (size_t) rounds, sizeof(double));
        for (int t = 0; t < N_TORCH; t++)
            s[k].torch[t] = calloc((size_t) rounds, sizeof(double));
        s[k].inproc = calloc((size_t) rounds, sizeof(double));
        s[k].openblas = calloc((size_t) rounds, sizeof(double));
        s[k].ratio = calloc((size_t) rounds, sizeof(double));
    }
    int status = 1;
    for (enum model k = 0; k < N_MODELS; k++) {
        bool with_inproc = k == MLP;
        job a = {0}, cj = {0}, bj = {0};
        if (job_open(&a, ipc_url, k) || (with_inproc && (job_open(&cj, "inproc://salus-bench", k) ||
                                                         job_open(&bj, blas_url, k))))
            goto out;
        (void) job_round(&a, &data, WARMUP_STEPS);
        if (with_inproc) {
            (void) job_round(&cj, &data, WARMUP_STEPS);
            (void) job_round(&bj, &data, WARMUP_STEPS);
        }
        for (int t = 0; t < N_TORCH; t++)
            if (torch_ask(&torch[t], line, sizeof line, "warm %s %d\n", model_name[k],
                          WARMUP_STEPS))
                goto out;
        for (int r = 0; r < rounds; r++) {
            series *x = &s[k];
            printf("%s round %d:", model_name[k], r);
            for (int t = 0; t < N_TORCH; t++) {
                double *sl = &x->salus[N_TORCH * r + t];
                if (!(*sl = job_round(&a, &data, steps[k])) ||
                    !(x->torch[t][r] = torch_round(&torch[t], k, steps[k])))
                    goto out;
                printf("  salus %.0f %s %.0f", *sl, torch_names[t], x->torch[t][r]);
            }
            if (with_inproc) {
                if (!(x->inproc[r] = job_round(&cj, &data, steps[k])))
                    goto out;
                printf("  salus/inproc %.0f", x->inproc[r]);
                if (!(x->openblas[r] = job_round(&bj, &data, steps[k])))
                    goto out;
                printf("  salus/openblas %.0f", x->openblas[r]);
            }
            printf(" samples/s\n");
            fflush(stdout);
        }
        printf("%s: salus final loss %.4f, batch %d, SGD momentum 0.9, lr %.2f\n", model_name[k],
               (double) a.loss, BATCH, (double) LR);
        sum[k] = summarise(&s[k], rounds, with_inproc);
        job_close(&a);
        if (with_inproc) {
            job_close(&cj);
            job_close(&bj);
        }
    }
    /* PyTorch alone: the other processes stopped, salusd idle, a fresh
     * process of the best configuration over as many steps as its rounds */
    for (int t = 0; t < N_TORCH; t++) {
        torch_stop(&torch[t]);
        torch[t] = (torch_proc){0};
    }
    for (enum model k = 0; k < N_MODELS; k++) {
        torch_proc alone = torch_configs[sum[k].best_config];
        if (torch_start(&alone, python, script) || !fgets(line, sizeof line, alone.out) ||
            strncmp(line, "ready", 5) != 0 ||
            torch_ask(&alone, line, sizeof line, "warm %s %d\n", model_name[k], WARMUP_STEPS)) {
            torch_stop(&alone);
            goto out;
        }
        sum[k].alone = torch_round(&alone, k, steps[k] * rounds);
        torch_stop(&alone);
        if (!sum[k].alone)
            goto out;
        /* a PyTorch the rounds slowed would flatter salus */
        sum[k].ratio = sum[k].salus / (sum[k].alone > sum[k].best ? sum[k].alone : sum[k].best);
        printf("%s: PyTorch %s %.0f samples/s in the bench (median of %d runs of %d steps), "
               "%.0f alone over %d steps (%+.1f %%)\n",
               model_name[k], torch_names[sum[k].best_config], sum[k].best, rounds, steps[k],
               sum[k].alone, steps[k] * rounds, 100.0 * (sum[k].best / sum[k].alone - 1));
    }
    status = 0;
    if (getloadavg(load[1], 3) < 1)
        load[1][0] = -1;
    printf("load average (1 min) %.2f before, %.2f after\n", load[0][0], load[1][0]);

    double overhead = 100.0 * (sum[MLP].inproc - sum[MLP].salus) / sum[MLP].inproc;
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f, "{\"bench\":\"train_vs_torch\",\"rounds\":%d,\"batch\":%d,\"models\":{",
                    rounds, BATCH);
            for (int k = 0; k < N_MODELS; k++) {
                const summary *m = &sum[k];
                fprintf(f,
                        "%s\"%s\":{\"steps\":%d,\"ratio\":%.3f,\"ratio_min\":%.3f,"
                        "\"salus_sps\":%.1f,\"salus_min\":%.1f,\"salus_max\":%.1f,"
                        "\"torch_sps\":%.1f,\"torch_min\":%.1f,\"torch_max\":%.1f,"
                        "\"torch_best\":\"%s\",\"torch_alone_sps\":%.1f,\"ratio_bench\":%.3f",
                        k ? "," : "", model_name[k], steps[k], m->ratio, m->ratio_min, m->salus,
                        m->salus_lo, m->salus_hi, m->best, m->best_lo, m->best_hi,
                        torch_names[m->best_config], m->alone, m->salus / m->best);
                for (int t = 0; t < N_TORCH; t++)
                    fprintf(f, ",\"%s_sps\":%.1f", torch_names[t], m->torch[t]);
                fprintf(f, "}");
            }
            fprintf(f,
                    "},\"inproc_sps\":%.1f,\"overhead_pct\":%.2f,\"openblas_sps\":%.1f,"
                    "\"load_before\":%.2f,\"load_after\":%.2f}\n",
                    sum[MLP].inproc, overhead, sum[MLP].openblas, load[0][0], load[1][0]);
            fclose(f);
        }
    }
    printf("BENCH server_overhead ipc_sps=%.0f inproc_sps=%.0f overhead_pct=%.2f\n", sum[MLP].salus,
           sum[MLP].inproc, overhead);
    printf("BENCH train_vs_torch_gemm model=mlp onednn_sps=%.0f openblas_sps=%.0f ratio=%.3f\n",
           sum[MLP].salus, sum[MLP].openblas, sum[MLP].salus / sum[MLP].openblas);
    for (int k = 0; k < N_MODELS; k++) {
        const summary *m = &sum[k];
        printf("BENCH train_vs_torch model=%s ratio=%.3f salus_sps=%.0f torch_sps=%.0f "
               "torch_best=%s",
               model_name[k], m->ratio, m->salus, m->best, torch_names[m->best_config]);
        for (int t = 0; t < N_TORCH; t++)
            printf(" %s_sps=%.0f", torch_names[t], m->torch[t]);
        printf(" torch_alone_sps=%.0f ratio_bench=%.3f ratio_min=%.3f salus_range=%.0f-%.0f "
               "torch_range=%.0f-%.0f "
               "steps=%d rounds=%d\n",
               m->alone, m->salus / m->best, m->ratio_min, m->salus_lo, m->salus_hi, m->best_lo,
               m->best_hi, steps[k], rounds);
    }
out:
    for (int t = 0; t < N_TORCH; t++)
        torch_stop(&torch[t]);
    sl_server_stop(&inproc);
    bench_stop(spid);
    bench_stop(bpid);
    sl_ts_tempdir_remove(dir);
    for (int k = 0; k < N_MODELS; k++) {
        free(s[k].salus);
        for (int t = 0; t < N_TORCH; t++)
            free(s[k].torch[t]);
        free(s[k].inproc);
        free(s[k].openblas);
        free(s[k].ratio);
    }
    fmnist_free(&data);
    return status;
}
