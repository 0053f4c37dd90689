/* bench/switch: what switching jobs costs salusd, side by side in one run.
 *
 *   A  one session, its iterations back to back (two connections keep one
 *      iteration always queued behind the running one);
 *   B  two sessions on one lane, alternating iterations (fair policy).
 * Both phases run against a fresh salusd, interleaved A B A B... Each reads
 * salusd's own measure of the lane's idle gap between two iterations while
 * the next one was already waiting (status: same-session and other-session
 * percentiles). Then C, a checkpoint-style switch of the same jobs: at every
 * switch the outgoing job's persistent state is copied out and back in
 * (read + write of all its tensors), what a server without resident state
 * must do.
 *   switch --salusd PATH [--rounds 5] [--iters 400] [--weights-mib 4] [--json FILE]
 * Last lines:
 *   BENCH switch same_job_us=... other_job_us=... ratio=... (p99 too)
 *   BENCH switch_vs_checkpoint checkpoint_us=... salus_us=... ratio=... */
#include "bench_util.h"
#include "client_internal.h"

#include <getopt.h>
#include <pthread.h>

typedef struct job {
    salus_session *s;
    salus_graph *g;
    uint64_t weights;
    int64_t weight_elems;
    int iters;
    int failures;
} job;

static int job_make(salus_client *c, job *j, int64_t weight_elems)
{
    const int64_t d[] = {128, 256}, w[] = {256, 256};
    uint64_t t;
    /* declaring the ephemeral need puts both jobs on one lane from the start */
    salus_session_opts o = {.ephemeral_bytes = 1 << 20};
    if (salus_session_open(c, &o, &j->s) || salus_tensor_create(j->s, SALUS_F32, 2, w, NULL, &t) ||
        salus_tensor_create(j->s, SALUS_F32, 1, (int64_t[]){weight_elems}, NULL, &j->weights))
        return -1;
    j->weight_elems = weight_elems;
    j->g = salus_graph_new();
    salus_value x = salus_graph_input(j->g, SALUS_F32, 2, d);
    salus_value p = salus_graph_param(j->g, t, SALUS_F32, 2, w);
    salus_value y = salus_graph_op(j->g, "matmul", 2, (salus_value[]){x, p}, 0, NULL, 0, NULL);
    (void) salus_graph_op(j->g, "relu", 1, &y, 0, NULL, 0, NULL);
    return salus_graph_register(j->s, j->g, NULL);
}

static void *run_iters(void *arg)
{
    job *j = arg;
    static float x[128 * 256];
    const void *feeds[] = {x};
    for (int i = 0; i < j->iters; i++)
        j->failures += salus_run(j->s, j->g, feeds, 0, NULL, NULL) != SALUS_OK;
    return NULL;
}

/* Parses the gap percentiles (us) from salusctl-style status text. */
static int gaps(salus_client *c, double *same50, double *same99, double *other50, double *other99)
{
    char *text;
    if (salus_status_text(c, &text))
        return -1;
    const char *p = strstr(text, "same session p50");
    int n = p ? sscanf(p, "same session p50 %lf us p99 %lf us, other session p50 %lf us p99 %lf us",
                       same50, same99, other50, other99)
              : 0;
    if (getenv("SWITCH_DEBUG"))
        fputs(text, stderr);
    salus_free(text);
    return n == 4 ? 0 : -1;
}

/* Starts salusd on a fresh socket; connects. */
static pid_t start(const char *salusd, const char *dir, char *url, size_t len, salus_client **c)
{
    static int n;
    snprintf(url, len, "ipc://%s/s%d.sock", dir, n++);
    /* --spread-limit 0: the jobs share one lane and take turns, the case
     * whose switching this measures */
    pid_t pid = bench_spawn((const char *[]){salusd, "--listen", url, "--memory-limit", "512M",
                                             "--spread-limit", "0", "--log-level", "warn", NULL});
    for (int i = 0; i < 500 && salus_connect(url, c) != SALUS_OK; i++)
        usleep(10000);
    return pid;
}

int main(int argc, char **argv)
{
    const char *salusd = NULL, *json = NULL;
    int rounds = 5, iters = 400, weights_mib = 4;
    static const struct option lo[] = {{"salusd", 1, NULL, 's'}, {"rounds", 1, NULL, 'r'},
                                       {"iters", 1, NULL, 'i'},  {"weights-mib", 1, NULL, 'w'},
                                       {"json", 1, NULL, 'j'},   {0}};
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        if (c == 's')
            salusd = optarg;
        else if (c == 'r')
            rounds = atoi(optarg);
        else if (c == 'i')
            iters = atoi(optarg);
        else if (c == 'w')
            weights_mib = atoi(optarg);
        else if (c == 'j')
            json = optarg;
        else
            return 2;
    }
    if (!salusd || rounds < 1 || rounds > 64 || iters < 10 || weights_mib < 1) {
        fprintf(stderr, "usage: switch --salusd PATH [--rounds N] [--iters N] [--weights-mib N]\n");
        return 2;
    }
    char dir[] = "/tmp/salus-switch-XXXXXX", url[160];
    if (!mkdtemp(dir))
        return 1;
    int64_t welems = (int64_t) weights_mib << 18; /* f32 */
    double same50[64], same99[64], other50[64], other99[64], ckpt[64];
    int failures = 0;
    for (int r = 0; r < rounds; r++) {
        double s50, s99, o50, o99;
        /* A: one session, two connections keep an iteration queued */
        salus_client *c, *c2;
        pid_t pid = start(salusd, dir, url, sizeof url, &c);
        job a = {.iters = iters}, a2;
        if (!c || salus_connect(url, &c2) || job_make(c, &a, 1024))
            return 1;
        /* the same session over a second connection, with its own graph */
        struct salus_session twin = *a.s;
        twin.client = c2;
        a2 = (job){.s = &twin, .iters = iters, .g = salus_graph_new()};
        {
            const int64_t d[] = {128, 256};
            salus_value x = salus_graph_input(a2.g, SALUS_F32, 2, d);
            (void) salus_graph_op(a2.g, "relu", 1, &x, 0, NULL, 0, NULL);
            if (salus_graph_register(a2.s, a2.g, NULL))
                return 1;
        }
        pthread_t t1, t2;
        pthread_create(&t1, NULL, run_iters, &a);
        pthread_create(&t2, NULL, run_iters, &a2);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        failures += a.failures + a2.failures;
        if (gaps(c, &s50, &s99, &o50, &o99))
            return 1;
        same50[r] = s50;
        same99[r] = s99;
        salus_disconnect(c2);
        salus_disconnect(c);
        bench_stop(pid);

        /* B: two sessions alternate on one lane */
        pid = start(salusd, dir, url, sizeof url, &c);
        job b1 = {.iters = iters}, b2 = {.iters = iters};
        if (!c || salus_connect(url, &c2) || job_make(c, &b1, 1024) || job_make(c2, &b2, 1024))
            return 1;
        pthread_create(&t1, NULL, run_iters, &b1);
        pthread_create(&t2, NULL, run_iters, &b2);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        failures += b1.failures + b2.failures;
        if (gaps(c, &s50, &s99, &o50, &o99))
            return 1;
        other50[r] = o50;
        other99[r] = o99;

        /* C: checkpoint-style switches between the same two jobs, with
         * weights_mib of persistent state each: out, then back in */
        size_t bytes = (size_t) welems * sizeof(float);
        float *buf = malloc(bytes);
        job c1 = {0}, cj = {0};
        if (!buf || job_make(c, &c1, welems) || job_make(c2, &cj, welems))
            return 1;
        int n = 20;
        uint64_t t0 = bench_now_ns();
        for (int i = 0; i < n; i++) {
            job *out = i % 2 ? &cj : &c1;
            failures += salus_tensor_read(out->s, out->weights, buf, bytes) != SALUS_OK;
            failures += salus_tensor_write(out->s, out->weights, buf, bytes) != SALUS_OK;
        }
        ckpt[r] = (double) (bench_now_ns() - t0) / 1e3 / n;
        free(buf);
        salus_disconnect(c2);
        salus_disconnect(c);
        bench_stop(pid);
        printf("round %d: idle gap same job p50 %.1f us, other job p50 %.1f us; checkpoint "
               "switch of %d MiB %.0f us\n",
               r, same50[r], other50[r], weights_mib, ckpt[r]);
        fflush(stdout);
    }
    char path[256];
    for (int i = 0; i < 2 * rounds; i++) {
        snprintf(path, sizeof path, "%s/s%d.sock", dir, i);
        unlink(path);
    }
    rmdir(dir);
    size_t n = (size_t) rounds;
    double s = bench_median(same50, n), o = bench_median(other50, n);
    double sp = bench_median(same99, n), op = bench_median(other99, n), k = bench_median(ckpt, n);
    printf("medians over %d rounds of %d iterations per job; %d failures\n", rounds, iters,
           failures);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"bench\":\"switch\",\"same_job_us\":%.2f,\"other_job_us\":%.2f,"
                    "\"ratio\":%.3f,\"same_p99_us\":%.2f,\"other_p99_us\":%.2f,"
                    "\"checkpoint_us\":%.1f,\"checkpoint_ratio\":%.1f}\n",
                    s, o, o / s, sp, op, k, k / o);
            fclose(f);
        }
    }
    printf("BENCH switch_vs_checkpoint checkpoint_us=%.0f salus_us=%.2f ratio=%.0f\n", k, o, k / o);
    printf("BENCH switch same_job_us=%.2f other_job_us=%.2f ratio=%.3f same_p99_us=%.2f "
           "other_p99_us=%.2f\n",
           s, o, o / s, sp, op);
    return failures ? 1 : 0;
}
