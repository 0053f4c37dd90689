/* bench/gpu_pack: Salus sections 5.2 (hyper-parameter exploration) and 5.3
 * (inference services) with real jobs against a real salusd on the bench
 * device ($SALUS_BENCH_DEVICE: cuda on a GPU host), the simulator's
 * prediction beside each figure (the same jobs against a salusd on
 * --predict, default sim:h200 when the bench device is cuda), and, with
 * --procs, the same jobs as separate processes: one salusd per job (each
 * its own CUDA context on salus's cuda backend), which is how the jobs run
 * under MPS when the caller has started nvidia-cuda-mps-control (scripts/run
 * gpu does where it exists), and how they time-slice without it.
 *
 * hparam (5.2): --jobs identical training jobs of each of --models (cnn at
 * batch 128, resnet50 at batch 25, the paper's; mlp at 512), each
 * --iters iterations. One at a time: the jobs run one after another on
 * the salusd (the makespan of a FIFO queue); packed: all submitted
 * together, each from its own client thread, salusd's defaults deciding
 * how they share the device. Ratio: one-at-a-time makespan / packed.
 *
 * inference (5.3): --instances sessions of each of --inference-models at
 * batch 1, each sending requests on its own Poisson schedule (mean gap
 * --gap-ms) for --duration-s. Solo: each model's session alone for the
 * same time; packed: all sessions at once. Latency: request to answer at
 * the client. Ratio: packed p99 / solo p99 (the mean over models).
 *
 * Rounds alternate the arrangements (A B A B); figures are medians over
 * --rounds. Prints per-round lines, then
 *   BENCH gpu_hparam model=M jobs=N ratio=... serial_s=... packed_s=...
 *         sim_ratio=... [procs_s=... procs_ratio=SERIAL/PROCS]
 *   BENCH gpu_inference sessions=K p99_ratio=... solo_p99_ms=...
 *         packed_p99_ms=... sim_p99_ratio=... [procs_p99_ms=...]
 *   BENCH gpu_mps experiment=... salus_s|salus_p99_ms=... procs_...=...
 *         ratio=PROCS/SALUS mps=0|1   (with --procs; mps=1 from --mps)
 *
 *   gpu_pack --salusd PATH [--what hparam,inference] [--models cnn,resnet50]
 *            [--jobs 4] [--iters N] [--inference-models mlp,cnn,resnet50]
 *            [--instances 2] [--duration-s 2] [--gap-ms 20] [--rounds 3]
 *            [--image 224] [--procs] [--mps] [--proc-memory 8G]
 *            [--predict DEVICE|none] [--quick] [--json FILE]
 * --proc-memory: each per-job salusd's --memory-limit (they share one
 * device; one salusd alone takes what the device reports).
 * --quick: 64-pixel images, small batches, 3 iterations, 1 s of requests:
 * for checking the script end to end without a GPU. */
#include "gpu_jobs.h"

#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <time.h>

#define MAX_JOBS 16
#define MAX_KINDS 3
#define MAX_ROUNDS 16
#define MAX_LAT 4096

static const char *const kind_names[MAX_KINDS] = {"mlp", "cnn", "resnet50"};
static int64_t train_batch[MAX_KINDS] = {512, 128, 25};
static int train_iters[MAX_KINDS] = {200, 100, 30};

static int kind_index(const char *name)
{
    for (int k = 0; k < MAX_KINDS; k++)
        if (strcmp(kind_names[k], name) == 0)
            return k;
    return -1;
}

/* A comma-separated list of model names into kinds[]; their count, or -1. */
static int parse_kinds(const char *list, int *kinds)
{
    char buf[128];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int k = kind_index(tok);
        if (k < 0 || n == MAX_KINDS) {
            fprintf(stderr, "gpu_pack: unknown model '%s' (mlp, cnn, resnet50)\n", tok);
            return -1;
        }
        kinds[n++] = k;
    }
    return n;
}

/* The salusds one arrangement runs on: one shared, or one per job. */
typedef struct servers {
    sl_ts_salusd d[MAX_JOBS];
    int n;
} servers;

/* n salusds on device (NULL: the bench device); with a memory limit each
 * when limit is not NULL (processes that share the device). */
static void servers_start(servers *s, const char *salusd, const char *device, int n,
                          const char *tag, const char *limit)
{
    const char *const args[] = {"--log-level", "warn", limit ? "--memory-limit" : NULL, limit,
                                NULL};
    char *saved = getenv("SALUS_BENCH_DEVICE") ? strdup(getenv("SALUS_BENCH_DEVICE")) : NULL;
    char *memory = getenv("SALUS_BENCH_MEMORY") ? strdup(getenv("SALUS_BENCH_MEMORY")) : NULL;
    if (device)
        setenv("SALUS_BENCH_DEVICE", device, 1);
    if (limit) /* this limit, not the bench's */
        unsetenv("SALUS_BENCH_MEMORY");
    memset(s, 0, sizeof *s);
    for (int i = 0; i < n; i++)
        bench_salusd_spawn(&s->d[i], salusd, tag, args);
    s->n = n;
    if (saved)
        setenv("SALUS_BENCH_DEVICE", saved, 1);
    else
        unsetenv("SALUS_BENCH_DEVICE");
    if (memory)
        setenv("SALUS_BENCH_MEMORY", memory, 1);
    free(saved);
    free(memory);
    for (int i = 0; i < n; i++)
        bench_salusd_ready(&s->d[i]);
}

static void servers_stop(servers *s)
{
    for (int i = 0; i < s->n; i++)
        bench_salusd_stop(&s->d[i]);
    s->n = 0;
}

/* ---- hparam ---- */

typedef struct train_arg {
    job *j;
    int iters;
    int ok;
} train_arg;

static void *train_thread(void *p)
{
    train_arg *a = p;
    a->ok = job_steps(a->j, a->iters) > 0;
    return NULL;
}

/* Runs every job's iters at once, each from a thread; the makespan in
 * seconds, or -1 on failure. */
static double run_together(job *jobs, int n, int iters)
{
    pthread_t th[MAX_JOBS];
    train_arg a[MAX_JOBS];
    double t0 = sl_ts_now_s(), out = 0;
    int started = 0;
    for (int i = 0; i < n; i++) {
        a[i] = (train_arg){&jobs[i], iters, 0};
        if (pthread_create(&th[i], NULL, train_thread, &a[i]) != 0)
            break;
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    out = sl_ts_now_s() - t0;
    for (int i = 0; i < n; i++)
        if (i >= started || !a[i].ok)
            return -1;
    return out;
}

static double run_one_at_a_time(job *jobs, int n, int iters)
{
    double t0 = sl_ts_now_s();
    for (int i = 0; i < n; i++)
        if (job_steps(&jobs[i], iters) <= 0)
            return -1;
    return sl_ts_now_s() - t0;
}

/* n jobs of kind k, on one url or one each. */
static int open_jobs(job *jobs, int n, servers *s, int k, int64_t batch, int64_t image)
{
    for (int i = 0; i < n; i++)
        if (job_open(&jobs[i], s->d[s->n > 1 ? i : 0].url, kind_names[k], SALUS_F32,
                     SALUS_MATH_DEFAULT, batch, image) ||
            job_steps(&jobs[i], 2) <= 0) /* warm-up: first launches, autotuning */
            return -1;
    return 0;
}

static void close_jobs(job *jobs, int n)
{
    for (int i = 0; i < n; i++)
        job_close(&jobs[i]);
}

typedef struct cfg {
    const char *salusd, *device, *predict, *proc_memory;
    int jobs, iters, rounds, instances;
    double duration_s, gap_ms;
    int64_t image;
    bool procs, mps, quick;
    FILE *json;
} cfg;

static int hparam(const cfg *c, int k)
{
    job main_j[MAX_JOBS] = {0}, sim_j[MAX_JOBS] = {0}, proc_j[MAX_JOBS] = {0};
    servers main_s = {0}, sim_s = {0}, proc_s = {0};
    double serial[MAX_ROUNDS], packed[MAX_ROUNDS], p_serial[MAX_ROUNDS], p_packed[MAX_ROUNDS],
        procs[MAX_ROUNDS];
    int iters = c->iters ? c->iters : train_iters[k], rc = 1;
    int64_t batch = train_batch[k];
    servers_start(&main_s, c->salusd, NULL, 1, "packmain", NULL);
    if (c->predict)
        servers_start(&sim_s, c->salusd, c->predict, 1, "packsim", NULL);
    if (c->procs)
        servers_start(&proc_s, c->salusd, NULL, c->jobs, "packproc", c->proc_memory);
    if (open_jobs(main_j, c->jobs, &main_s, k, batch, c->image) ||
        (c->predict && open_jobs(sim_j, c->jobs, &sim_s, k, batch, c->image)) ||
        (c->procs && open_jobs(proc_j, c->jobs, &proc_s, k, batch, c->image))) {
        fprintf(stderr, "gpu_pack: hparam %s: cannot open the jobs\n", kind_names[k]);
        goto out;
    }
    for (int r = 0; r < c->rounds; r++) {
        bool even = r % 2 == 0; /* A B, then B A */
        double a =
            even ? run_one_at_a_time(main_j, c->jobs, iters) : run_together(main_j, c->jobs, iters);
        double b =
            even ? run_together(main_j, c->jobs, iters) : run_one_at_a_time(main_j, c->jobs, iters);
        serial[r] = even ? a : b;
        packed[r] = even ? b : a;
        if (c->predict) {
            p_serial[r] = run_one_at_a_time(sim_j, c->jobs, iters);
            p_packed[r] = run_together(sim_j, c->jobs, iters);
        }
        if (c->procs)
            procs[r] = run_together(proc_j, c->jobs, iters);
        if (serial[r] < 0 || packed[r] < 0 ||
            (c->predict && (p_serial[r] < 0 || p_packed[r] < 0)) || (c->procs && procs[r] < 0))
            goto out;
        printf("hparam %s round %d: one_at_a_time %.3f s packed %.3f s", kind_names[k], r + 1,
               serial[r], packed[r]);
        if (c->predict)
            printf(" sim one_at_a_time %.3f s sim packed %.3f s", p_serial[r], p_packed[r]);
        if (c->procs)
            printf(" processes %.3f s", procs[r]);
        printf("\n");
        fflush(stdout);
    }
    size_t n = (size_t) c->rounds;
    double s = sl_ts_median(serial, n), p = sl_ts_median(packed, n);
    printf("BENCH gpu_hparam model=%s jobs=%d iters=%d batch=%lld ratio=%.3f serial_s=%.3f "
           "packed_s=%.3f",
           kind_names[k], c->jobs, iters, (long long) batch, s / p, s, p);
    if (c->predict)
        printf(" sim_ratio=%.3f sim_serial_s=%.3f sim_packed_s=%.3f",
               sl_ts_median(p_serial, n) / sl_ts_median(p_packed, n), sl_ts_median(p_serial, n),
               sl_ts_median(p_packed, n));
    if (c->procs)
        printf(" procs_s=%.3f procs_ratio=%.3f", sl_ts_median(procs, n),
               s / sl_ts_median(procs, n));
    printf("\n");
    if (c->procs)
        printf("BENCH gpu_mps experiment=hparam model=%s jobs=%d mps=%d salus_s=%.3f procs_s=%.3f "
               "ratio=%.3f\n",
               kind_names[k], c->jobs, c->mps, p, sl_ts_median(procs, n),
               sl_ts_median(procs, n) / p);
    if (c->json)
        fprintf(c->json, "%s{\"experiment\":\"hparam\",\"model\":\"%s\",\"ratio\":%.4f}",
                ftell(c->json) > 1 ? "," : "", kind_names[k], s / p);
    rc = 0;
out:
    close_jobs(main_j, c->jobs);
    close_jobs(sim_j, c->jobs);
    close_jobs(proc_j, c->jobs);
    servers_stop(&main_s);
    servers_stop(&sim_s);
    servers_stop(&proc_s);
    return rc;
}

/* ---- inference ---- */

typedef struct infer_arg {
    job *j;
    double duration_s, gap_ms;
    uint64_t seed;
    double lat_ms[MAX_LAT];
    int n, ok;
} infer_arg;

static void *infer_thread(void *p)
{
    infer_arg *a = p;
    int32_t cls;
    uint64_t r = a->seed | 1;
    double end = sl_ts_now_s() + a->duration_s;
    a->n = 0;
    a->ok = 1;
    while (a->n < MAX_LAT) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        double u = ((double) (r >> 11) + 0.5) / 9007199254740992.0;
        double gap = -log(u) * a->gap_ms / 1e3;
        if (sl_ts_now_s() + gap >= end)
            break;
        struct timespec ts = {(time_t) gap, (long) ((gap - floor(gap)) * 1e9)};
        nanosleep(&ts, NULL);
        int k = a->n % HOST_BATCHES;
        double t0 = sl_ts_now_s();
        if (salus_model_predict(a->j->model, a->j->x + (int64_t) k * a->j->sample, &cls) !=
            SALUS_OK) {
            fprintf(stderr, "gpu_pack: inference failed: %s\n", salus_last_error(a->j->client));
            a->ok = 0;
            return NULL;
        }
        a->lat_ms[a->n++] = (sl_ts_now_s() - t0) * 1e3;
    }
    return NULL;
}

/* Runs sessions [first, first + n) at once for the duration; their
 * latencies in args. 0, or -1 on failure. */
static int serve(job *jobs, int first, int n, const cfg *c, infer_arg *args, uint64_t seed)
{
    pthread_t th[MAX_JOBS];
    int started = 0, rc = 0;
    for (int i = 0; i < n; i++) {
        args[i].j = &jobs[first + i];
        args[i].duration_s = c->duration_s;
        args[i].gap_ms = c->gap_ms;
        args[i].seed = seed * 7919 + (uint64_t) (first + i) * 104729;
        if (pthread_create(&th[i], NULL, infer_thread, &args[i]) != 0)
            break;
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < n; i++)
        if (i >= started || !args[i].ok || args[i].n == 0)
            rc = -1;
    return rc;
}

/* p99 of the latencies of the sessions of kind slot m (every instances-th). */
static double kind_p99(const infer_arg *args, int m, int instances, double *scratch)
{
    size_t n = 0;
    for (int i = 0; i < instances; i++)
        for (int q = 0; q < args[m * instances + i].n; q++)
            scratch[n++] = args[m * instances + i].lat_ms[q];
    return n ? sl_ts_percentile(scratch, n, 99) : 0;
}

typedef struct infer_result {
    double solo[MAX_KINDS], packed[MAX_KINDS];
    int requests;
} infer_result;

/* One round on jobs (nkinds x instances sessions): solo, then packed. */
static int infer_round(job *jobs, int nkinds, const cfg *c, uint64_t seed, infer_result *res,
                       bool solo)
{
    static infer_arg args[MAX_JOBS];
    static double scratch[MAX_JOBS * MAX_LAT];
    int inst = c->instances, total = nkinds * inst;
    memset(res, 0, sizeof *res);
    for (int m = 0; m < nkinds && solo; m++) {
        if (serve(jobs, m * inst, 1, c, &args[m * inst], seed))
            return -1;
        res->solo[m] = kind_p99(&args[m * inst], 0, 1, scratch);
    }
    if (serve(jobs, 0, total, c, args, seed + 1))
        return -1;
    for (int m = 0; m < nkinds; m++)
        res->packed[m] = kind_p99(args, m, inst, scratch);
    for (int i = 0; i < total; i++)
        res->requests += args[i].n;
    return 0;
}

static double mean_ratio(const double *num, const double *den, int n)
{
    double s = 0;
    for (int m = 0; m < n; m++)
        s += num[m] / den[m];
    return s / n;
}

static double mean_of(const double *v, int n)
{
    double s = 0;
    for (int m = 0; m < n; m++)
        s += v[m];
    return s / n;
}

static int inference(const cfg *c, const int *kinds, int nkinds)
{
    job main_j[MAX_JOBS] = {0}, sim_j[MAX_JOBS] = {0}, proc_j[MAX_JOBS] = {0};
    servers main_s = {0}, sim_s = {0}, proc_s = {0};
    int total = nkinds * c->instances, rc = 1;
    double ratio[MAX_ROUNDS], solo[MAX_ROUNDS], packed[MAX_ROUNDS], p_ratio[MAX_ROUNDS],
        procs[MAX_ROUNDS];
    if (total > MAX_JOBS) {
        fprintf(stderr, "gpu_pack: at most %d inference sessions\n", MAX_JOBS);
        return 1;
    }
    servers_start(&main_s, c->salusd, NULL, 1, "infmain", NULL);
    if (c->predict)
        servers_start(&sim_s, c->salusd, c->predict, 1, "infsim", NULL);
    if (c->procs)
        servers_start(&proc_s, c->salusd, NULL, total, "infproc", c->proc_memory);
    for (int i = 0; i < total; i++) {
        int k = kinds[i / c->instances];
        if (job_open(&main_j[i], main_s.d[0].url, kind_names[k], SALUS_F32, SALUS_MATH_DEFAULT, 1,
                     c->image) ||
            (c->predict && job_open(&sim_j[i], sim_s.d[0].url, kind_names[k], SALUS_F32,
                                    SALUS_MATH_DEFAULT, 1, c->image)) ||
            (c->procs && job_open(&proc_j[i], proc_s.d[i].url, kind_names[k], SALUS_F32,
                                  SALUS_MATH_DEFAULT, 1, c->image))) {
            fprintf(stderr, "gpu_pack: inference: cannot open session %d\n", i);
            goto out;
        }
    }
    for (int r = 0; r < c->rounds; r++) {
        infer_result m, p, q;
        if (infer_round(main_j, nkinds, c, (uint64_t) r + 1, &m, true) ||
            (c->predict && infer_round(sim_j, nkinds, c, (uint64_t) r + 1, &p, true)) ||
            (c->procs && infer_round(proc_j, nkinds, c, (uint64_t) r + 1, &q, false)))
            goto out;
        ratio[r] = mean_ratio(m.packed, m.solo, nkinds);
        solo[r] = mean_of(m.solo, nkinds);
        packed[r] = mean_of(m.packed, nkinds);
        if (c->predict)
            p_ratio[r] = mean_ratio(p.packed, p.solo, nkinds);
        if (c->procs)
            procs[r] = mean_of(q.packed, nkinds);
        printf("inference round %d: %d sessions, %d requests: solo p99 %.2f ms packed p99 %.2f ms",
               r + 1, total, m.requests, solo[r], packed[r]);
        if (c->predict)
            printf(" sim ratio %.2f", p_ratio[r]);
        if (c->procs)
            printf(" processes p99 %.2f ms", procs[r]);
        printf(" (means over models)\n");
        fflush(stdout);
    }
    size_t n = (size_t) c->rounds;
    printf("BENCH gpu_inference sessions=%d admitted=%d p99_ratio=%.3f solo_p99_ms=%.3f "
           "packed_p99_ms=%.3f added_ms=%.3f",
           total, total, sl_ts_median(ratio, n), sl_ts_median(solo, n), sl_ts_median(packed, n),
           sl_ts_median(packed, n) - sl_ts_median(solo, n));
    if (c->predict)
        printf(" sim_p99_ratio=%.3f", sl_ts_median(p_ratio, n));
    if (c->procs)
        printf(" procs_p99_ms=%.3f", sl_ts_median(procs, n));
    printf("\n");
    if (c->procs)
        printf("BENCH gpu_mps experiment=inference sessions=%d mps=%d salus_p99_ms=%.3f "
               "procs_p99_ms=%.3f ratio=%.3f\n",
               total, c->mps, sl_ts_median(packed, n), sl_ts_median(procs, n),
               sl_ts_median(procs, n) / sl_ts_median(packed, n));
    if (c->json)
        fprintf(c->json, "%s{\"experiment\":\"inference\",\"p99_ratio\":%.4f}",
                ftell(c->json) > 1 ? "," : "", sl_ts_median(ratio, n));
    rc = 0;
out:
    close_jobs(main_j, total);
    close_jobs(sim_j, total);
    close_jobs(proc_j, total);
    servers_stop(&main_s);
    servers_stop(&sim_s);
    servers_stop(&proc_s);
    return rc;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: gpu_pack --salusd PATH [--what hparam,inference] [--models cnn,resnet50]\n"
            "                [--jobs 4] [--iters N] [--inference-models mlp,cnn,resnet50]\n"
            "                [--instances 2] [--duration-s 2] [--gap-ms 20] [--rounds 3]\n"
            "                [--image 224] [--procs] [--mps] [--proc-memory 8G]\n"
            "                [--predict DEVICE|none] [--quick] [--json FILE]\n");
}

int main(int argc, char **argv)
{
    cfg c = {.jobs = 4,
             .rounds = 3,
             .instances = 2,
             .duration_s = 2,
             .gap_ms = 20,
             .image = 224,
             .proc_memory = "8G"};
    const char *what = "hparam,inference", *models = "cnn,resnet50";
    const char *imodels = "mlp,cnn,resnet50", *json = NULL;
    static const struct option lo[] = {
        {"salusd", 1, NULL, 's'},
        {"what", 1, NULL, 'w'},
        {"models", 1, NULL, 'm'},
        {"jobs", 1, NULL, 'n'},
        {"iters", 1, NULL, 'i'},
        {"inference-models", 1, NULL, 'I'},
        {"instances", 1, NULL, 'k'},
        {"duration-s", 1, NULL, 'd'},
        {"gap-ms", 1, NULL, 'g'},
        {"rounds", 1, NULL, 'r'},
        {"image", 1, NULL, 'x'},
        {"procs", 0, NULL, 'p'},
        {"mps", 0, NULL, 'M'},
        {"predict", 1, NULL, 'P'},
        {"quick", 0, NULL, 'q'},
        {"json", 1, NULL, 'j'},
        {"proc-memory", 1, NULL, 'R'},
        {"help", 0, NULL, 'h'},
        {0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (o) {
        case 's':
            c.salusd = optarg;
            break;
        case 'w':
            what = optarg;
            break;
        case 'm':
            models = optarg;
            break;
        case 'n':
            c.jobs = atoi(optarg);
            break;
        case 'i':
            c.iters = atoi(optarg);
            break;
        case 'I':
            imodels = optarg;
            break;
        case 'k':
            c.instances = atoi(optarg);
            break;
        case 'd':
            c.duration_s = atof(optarg);
            break;
        case 'g':
            c.gap_ms = atof(optarg);
            break;
        case 'r':
            c.rounds = atoi(optarg);
            break;
        case 'x':
            c.image = atoll(optarg);
            break;
        case 'p':
            c.procs = true;
            break;
        case 'M':
            c.mps = c.procs = true;
            break;
        case 'P':
            c.predict = optarg;
            break;
        case 'q':
            c.quick = true;
            break;
        case 'R':
            c.proc_memory = optarg;
            break;
        case 'j':
            json = optarg;
            break;
        case 'h':
            usage();
            return 0;
        default:
            usage();
            return 2;
        }
    }
    int kinds[MAX_KINDS], ikinds[MAX_KINDS];
    int nk = parse_kinds(models, kinds), nik = parse_kinds(imodels, ikinds);
    if (!c.salusd || nk < 0 || nik < 1 || c.jobs < 1 || c.jobs > MAX_JOBS || c.rounds < 1 ||
        c.rounds > MAX_ROUNDS || c.instances < 1 || c.duration_s <= 0 || c.gap_ms <= 0 ||
        c.iters < 0 || c.image < 32) {
        usage();
        return 2;
    }
    const char *device = getenv("SALUS_BENCH_DEVICE");
    if (!c.predict && device && strncmp(device, "cuda", 4) == 0)
        c.predict = "sim:h200";
    if (c.predict && strcmp(c.predict, "none") == 0)
        c.predict = NULL;
    if (c.quick) {
        c.image = 64;
        train_batch[0] = train_batch[1] = 32;
        train_batch[2] = 4;
        if (!c.iters)
            c.iters = 3;
        c.duration_s = c.duration_s < 1 ? c.duration_s : 1;
    }
    if (json && !(c.json = fopen(json, "w"))) {
        perror(json);
        return 1;
    }
    if (c.json)
        fputc('[', c.json);
    printf("gpu_pack: salusd on %s, prediction on %s, processes %s\n",
           device ? device : "its default", c.predict ? c.predict : "none",
           c.mps     ? "under MPS"
           : c.procs ? "without MPS"
                     : "not run");
    int status = 0;
    if (strstr(what, "hparam"))
        for (int i = 0; i < nk; i++)
            status |= hparam(&c, kinds[i]);
    if (strstr(what, "inference"))
        status |= inference(&c, ikinds, nik);
    if (c.json) {
        fputs("]\n", c.json);
        fclose(c.json);
    }
    return status;
}
