/* bench/train_vs_torch: the same MLP (784-256-128-10), batch (128),
 * optimizer (SGD with momentum 0.9) and Fashion-MNIST batches trained three
 * ways, interleaved round by round:
 *   A  salus through salusd over ipc:// (a separate process),
 *   B  PyTorch (Debian's python3-torch, 2 threads) in a separate process,
 *   C  salus through a server embedded in this process over inproc:// (the
 *      same graph with no inter-process communication).
 * Prints per-round samples/s, then
 *   BENCH server_overhead ipc_sps=... inproc_sps=... overhead_pct=...
 *   BENCH train_vs_torch salus_sps=... torch_sps=... ratio=...   (last line)
 *
 *   train_vs_torch --salusd PATH --script bench/torch_mlp.py [--python /usr/bin/python3]
 *                  [--rounds 5] [--steps 150] [--json FILE] */
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

typedef struct job {
    salus_client *client;
    salus_session *session;
    salus_model *model;
} job;

static int job_open(job *j, const char *url)
{
    salus_optimizer opt = {.kind = SALUS_MOMENTUM, .lr = LR, .momentum = 0.9f};
    int rc;
    j->model = salus_model_new(1, (int64_t[]){FMNIST_PIXELS});
    salus_model_dense(j->model, 256);
    salus_model_relu(j->model);
    salus_model_dense(j->model, 128);
    salus_model_relu(j->model);
    salus_model_dense(j->model, FMNIST_CLASSES);
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
}

/* Trains `steps` iterations over consecutive batches; returns samples/s. */
static double job_round(job *j, const fmnist *d, int64_t *pos, int steps, float *loss)
{
    uint64_t t0 = bench_now_ns();
    for (int s = 0; s < steps; s++) {
        if (*pos + BATCH > d->n)
            *pos = 0;
        if (salus_model_train_step(j->model, d->images + *pos * FMNIST_PIXELS, d->labels + *pos,
                                   loss) != SALUS_OK) {
            fprintf(stderr, "train_vs_torch: step failed: %s\n", salus_last_error(j->client));
            return 0;
        }
        *pos += BATCH;
    }
    return (double) steps * BATCH / ((double) (bench_now_ns() - t0) / 1e9);
}

int main(int argc, char **argv)
{
    const char *salusd = NULL, *script = NULL, *python = "/usr/bin/python3", *json = NULL;
    int rounds = 5, steps = 150;
    static const struct option lo[] = {
        {"salusd", 1, NULL, 's'},
        {"script", 1, NULL, 'S'},
        {"python", 1, NULL, 'p'},
        {"rounds", 1, NULL, 'r'},
        {"steps", 1, NULL, 'n'},
        {"json", 1, NULL, 'j'},
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
        case 'r':
            rounds = atoi(optarg);
            break;
        case 'n':
            steps = atoi(optarg);
            break;
        case 'j':
            json = optarg;
            break;
        default:
            return 2;
        }
    }
    if (!salusd || !script || rounds < 1 || steps < 1) {
        fprintf(stderr, "usage: train_vs_torch --salusd PATH --script torch_mlp.py [--python PY] "
                        "[--rounds N] [--steps N] [--json FILE]\n");
        return 2;
    }
    fmnist data;
    if (fmnist_load(NULL, "train", 0, &data))
        return 1;

    /* children first: NNG must not be initialised in a process that forks */
    char dir[] = "/tmp/salus-tvt-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char ipc_url[128];
    snprintf(ipc_url, sizeof ipc_url, "ipc://%s/salus.sock", dir);
    pid_t spid = bench_spawn((const char *[]){salusd, "--listen", ipc_url, "--memory-limit", "1G",
                                              "--log-level", "warn", NULL});
    int to_py[2], from_py[2];
    if (pipe(to_py) || pipe(from_py))
        return 1;
    pid_t ppid = fork();
    if (ppid == 0) {
        dup2(to_py[0], 0);
        dup2(from_py[1], 1);
        close(to_py[1]);
        close(from_py[0]);
        execl(python, python, script, "2", "128", "0.02", (char *) NULL);
        perror(python);
        _exit(127);
    }
    close(to_py[0]);
    close(from_py[1]);
    FILE *py_in = fdopen(to_py[1], "w"), *py_out = fdopen(from_py[0], "r");
    char line[256];
    if (!fgets(line, sizeof line, py_out) || strncmp(line, "ready", 5) != 0) {
        fprintf(stderr, "train_vs_torch: the PyTorch side did not start (python3-torch?)\n");
        bench_stop(spid);
        return 1;
    }

    sl_server inproc = {.cfg = SL_CONFIG_DEFAULTS};
    inproc.cfg.listen[inproc.cfg.n_listen++] = "inproc://salus-bench";
    inproc.cfg.memory_limit = 1ull << 30;
    sl_log_set_level("warn");
    if (sl_server_start(&inproc) != SL_OK)
        return 1;
    job a = {0}, cjob = {0};
    for (int i = 0; i < 500 && salus_connect(ipc_url, &a.client) != SALUS_OK; i++)
        usleep(10000);
    salus_disconnect(a.client);
    a.client = NULL;
    if (job_open(&a, ipc_url) || job_open(&cjob, "inproc://salus-bench"))
        return 1;

    double *sa = calloc((size_t) rounds, sizeof *sa), *sb = calloc((size_t) rounds, sizeof *sb),
           *sc = calloc((size_t) rounds, sizeof *sc);
    int64_t pa = 0, pc = 0;
    float la = 0, lc = 0;
    (void) job_round(&a, &data, &pa, 20, &la); /* warm-up */
    (void) job_round(&cjob, &data, &pc, 20, &lc);
    for (int r = 0; r < rounds; r++) {
        sa[r] = job_round(&a, &data, &pa, steps, &la);
        fprintf(py_in, "run %d\n", steps);
        fflush(py_in);
        if (!fgets(line, sizeof line, py_out) || sscanf(line, "sps %lf", &sb[r]) != 1) {
            fprintf(stderr, "train_vs_torch: bad answer from PyTorch: %s\n", line);
            return 1;
        }
        sc[r] = job_round(&cjob, &data, &pc, steps, &lc);
        printf("round %d: salus/ipc %.0f  torch %.0f  salus/inproc %.0f samples/s  (%s)\n", r,
               sa[r], sb[r], sc[r], strtok(line, "\n"));
        fflush(stdout);
    }
    fprintf(py_in, "quit\n");
    fclose(py_in);
    fclose(py_out);
    (void) waitpid(ppid, NULL, 0);
    job_close(&a);
    job_close(&cjob);
    sl_server_stop(&inproc);
    bench_stop(spid);
    char path[256];
    snprintf(path, sizeof path, "%s/salus.sock", dir);
    unlink(path);
    rmdir(dir);

    double ma = bench_median(sa, (size_t) rounds), mb = bench_median(sb, (size_t) rounds),
           mc = bench_median(sc, (size_t) rounds);
    double overhead = 100.0 * (mc - ma) / mc;
    printf("salus (ipc) final loss %.4f; MLP 784-256-128-10, batch %d, SGD momentum 0.9, lr %.2f\n",
           la, BATCH, (double) LR);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"bench\":\"train_vs_torch\",\"salus_sps\":%.1f,\"torch_sps\":%.1f,"
                    "\"ratio\":%.3f,\"inproc_sps\":%.1f,\"overhead_pct\":%.2f,\"rounds\":%d,"
                    "\"steps\":%d}\n",
                    ma, mb, ma / mb, mc, overhead, rounds, steps);
            fclose(f);
        }
    }
    printf("BENCH server_overhead ipc_sps=%.0f inproc_sps=%.0f overhead_pct=%.2f\n", ma, mc,
           overhead);
    printf("BENCH train_vs_torch salus_sps=%.0f torch_sps=%.0f ratio=%.3f\n", ma, mb, ma / mb);
    free(sa);
    free(sb);
    free(sc);
    fmnist_free(&data);
    return 0;
}
