/* bench/soak: a long run of many hostile and well-behaved clients against
 * one salusd, watching its memory.
 *
 *   soak --salusd PATH [--seconds 600] [--clients 64] [--kill-every-ms 500]
 *        [--json FILE] [--server-log error|warn|info (salusd's --log-level)]
 *
 * salusd (cpu device, 512 MiB, ipc:// in a temp folder) and every client are
 * child processes; this supervisor only spawns them (fork + exec, so no child
 * inherits NNG state), samples salusd's RSS (/proc/PID/status VmRSS) and
 * SIGKILLs a random client every --kill-every-ms, replacing it at once. Each
 * client loops: sometimes reconnects; opens a session (hints, waiting for
 * admission); creates tensors, writes and reads them back (checked); registers
 * a graph (relu(x @ W)) and runs it with random x (every output checked
 * against a local computation); sends bad requests whose errors are expected
 * (unknown tensor, wrong token, wrong feed size, invalid shape, unknown op,
 * freeing a tensor a graph uses); asks for the status; frees and closes, or
 * drops the connection with everything open. Counters live in a shared file
 * so a killed client's requests still count. An error that was not expected,
 * or a wrong result, counts in errors_unexpected; so does a salusd that stops
 * answering (a status probe on a fresh connection every 5 s fails twice):
 * the run then ends at once.
 *
 * RSS is "flat" when the value at the end is within 10 % or 2 MiB (whichever
 * is larger) of the value after warm-up (a fifth of the run, at most 30 s):
 * caches, arenas and maps have grown by then. The last line is
 *   BENCH soak requests=N errors_unexpected=N rss_start_kib=N rss_end_kib=N ...
 * and the exit status is 0 only with no unexpected error, a flat RSS, the
 * server back to no session and no persistent byte, and a clean exit. */
#include "bench_util.h"
#include "client_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdatomic.h>
#include <sys/mman.h>

#define MAX_CLIENTS 256

typedef struct slot_stats {
    atomic_ullong requests, unexpected, cycles, reconnects;
} slot_stats;

/* ---- a client ---- */

typedef struct worker {
    salus_client *c;
    slot_stats *st;
    uint64_t rng;
    int slot;
} worker;

static uint32_t rnd(worker *w)
{
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    return (uint32_t) (w->rng >> 11);
}

static float frnd(worker *w)
{
    return (float) (rnd(w) % 2001) / 1000.0f - 1.0f;
}

/* Counts one request; rc must be `want`, else it is unexpected. */
static bool expect(worker *w, int rc, int want, const char *what)
{
    atomic_fetch_add(&w->st->requests, 1);
    if (rc == want)
        return true;
    atomic_fetch_add(&w->st->unexpected, 1);
    fprintf(stderr, "soak client %d: %s returned %s, expected %s: %s\n", w->slot, what,
            salus_strerror(rc), salus_strerror(want), w->c ? salus_last_error(w->c) : "");
    return false;
}

static void unexpected(worker *w, const char *what)
{
    atomic_fetch_add(&w->st->unexpected, 1);
    fprintf(stderr, "soak client %d: %s\n", w->slot, what);
}

static int raw_call(salus_session *s, Salus__Request *req)
{
    Salus__Reply *rep;
    int rc = sl_client_session_call(s, req, &rep);
    if (rc == SL_OK)
        salus__reply__free_unpacked(rep, NULL);
    return rc;
}

enum { B = 8, K = 16, N = 8 };

/* One of the bad requests, each with the error it must get. */
static void bad_request(worker *w, salus_session *s, salus_graph *g, uint64_t wt)
{
    float buf[4];
    switch (rnd(w) % 6) {
    case 0:
        expect(w, salus_tensor_read(s, 999999, buf, sizeof buf), SALUS_ENOTFOUND, "read unknown");
        break;
    case 1: {
        struct salus_session forged = *s;
        forged.token ^= 0x5a5a5a5a;
        Salus__Request req = SALUS__REQUEST__INIT;
        Salus__ReadTensor rd = SALUS__READ_TENSOR__INIT;
        rd.tensor_id = wt;
        req.body_case = SALUS__REQUEST__BODY_READ_TENSOR;
        req.read_tensor = &rd;
        expect(w, raw_call(&forged, &req), SALUS_EPERM, "wrong token");
        break;
    }
    case 2: {
        float x[3];
        salus_value in = 0;
        /* the builder checks sizes, so send the run raw with 12 bytes */
        ProtobufCBinaryData f = {sizeof x, (uint8_t *) x};
        Salus__Request req = SALUS__REQUEST__INIT;
        Salus__Run run = SALUS__RUN__INIT;
        run.graph_id = salus_graph_id(g);
        run.n_feeds = 1;
        run.feeds = &f;
        run.n_fetches = 1;
        run.fetches = &in;
        req.body_case = SALUS__REQUEST__BODY_RUN;
        req.run = &run;
        expect(w, raw_call(s, &req), SALUS_EINVAL, "run with a short feed");
        break;
    }
    case 3: {
        uint64_t id;
        expect(w, salus_tensor_create(s, SALUS_F32, 2, (int64_t[]){4, -1}, NULL, &id), SALUS_EINVAL,
               "negative dim");
        break;
    }
    case 4: {
        Salus__Request req = SALUS__REQUEST__INIT;
        Salus__RegisterGraph rg = SALUS__REGISTER_GRAPH__INIT;
        Salus__Graph gm = SALUS__GRAPH__INIT;
        Salus__Op op = SALUS__OP__INIT;
        Salus__Op *ops[] = {&op};
        op.type = (char *) "no_such_op";
        gm.n_ops = 1;
        gm.ops = ops;
        rg.graph = &gm;
        req.body_case = SALUS__REQUEST__BODY_REGISTER_GRAPH;
        req.register_graph = &rg;
        expect(w, raw_call(s, &req), SALUS_EINVAL, "unknown op");
        break;
    }
    default:
        expect(w, salus_tensor_free(s, wt), SALUS_EBUSY, "free a tensor in use");
        break;
    }
}

/* One session's life. Returns false when the connection is unusable. */
static bool cycle(worker *w)
{
    salus_session_opts o = {.name = "soak",
                            .persistent_bytes = 1u << 20,
                            .ephemeral_bytes = 1u << 20,
                            .wait_for_admission = 1};
    salus_session *s;
    if (!expect(w, salus_session_open(w->c, &o, &s), SALUS_OK, "open"))
        return false;
    float wdata[K * N], x[B * K], y[B * N], want[B * N];
    for (int i = 0; i < K * N; i++)
        wdata[i] = frnd(w);
    uint64_t wt, extra[4];
    const int64_t dw[] = {K, N};
    bool ok = expect(w, salus_tensor_create(s, SALUS_F32, 2, dw, wdata, &wt), SALUS_OK, "create");
    int n_extra = (int) (rnd(w) % 5);
    for (int i = 0; ok && i < n_extra; i++) {
        const int64_t d[] = {1 + rnd(w) % 4096};
        ok = expect(w, salus_tensor_create(s, SALUS_F32, 1, d, NULL, &extra[i]), SALUS_OK,
                    "create extra");
        if (ok && i == 0) { /* write and read back */
            size_t n = (size_t) d[0];
            float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
            if (a && b) {
                for (size_t j = 0; j < n; j++)
                    a[j] = frnd(w);
                if (expect(w, salus_tensor_write(s, extra[i], a, n * 4), SALUS_OK, "write") &&
                    expect(w, salus_tensor_read(s, extra[i], b, n * 4), SALUS_OK, "read") &&
                    memcmp(a, b, n * 4) != 0)
                    unexpected(w, "read back differs from what was written");
            }
            free(a);
            free(b);
        }
        if (!ok)
            n_extra = i;
    }
    salus_graph *g = salus_graph_new();
    salus_value vx = salus_graph_input(g, SALUS_F32, 2, (int64_t[]){B, K});
    salus_value vw = salus_graph_param(g, wt, SALUS_F32, 2, dw);
    salus_value mm = salus_graph_op(g, "matmul", 2, (salus_value[]){vx, vw}, 0, NULL, 0, NULL);
    salus_value vy = salus_graph_op(g, "relu", 1, &mm, 0, NULL, 0, NULL);
    ok = ok && expect(w, salus_graph_register(s, g, NULL), SALUS_OK, "register");
    int runs = ok ? 2 + (int) (rnd(w) % 12) : 0;
    for (int r = 0; ok && r < runs; r++) {
        for (int i = 0; i < B * K; i++)
            x[i] = frnd(w);
        const void *feeds[] = {x};
        void *outs[] = {y};
        ok = expect(w, salus_run(s, g, feeds, 1, &vy, outs), SALUS_OK, "run");
        for (int b = 0; ok && b < B; b++)
            for (int n = 0; n < N; n++) {
                float acc = 0;
                for (int k = 0; k < K; k++)
                    acc += x[b * K + k] * wdata[k * N + n];
                want[b * N + n] = acc > 0 ? acc : 0;
                if (fabsf(y[b * N + n] - want[b * N + n]) > 1e-4f * (1 + fabsf(acc))) {
                    unexpected(w, "a run's output differs from the local computation");
                    ok = false;
                    break;
                }
            }
        if (ok && rnd(w) % 4 == 0)
            bad_request(w, s, g, wt);
    }
    if (ok && rnd(w) % 3 == 0) {
        char *text;
        if (expect(w, salus_status_text(w->c, &text), SALUS_OK, "status"))
            salus_free(text);
    }
    if (rnd(w) % 8 == 0) { /* drop the connection with everything open */
        salus_graph_free(g);
        salus_disconnect(w->c);
        w->c = NULL;
        /* not salus_session_close: it would use the freed client (a bug in
         * libsalusclient; the header promises it only frees the handle) */
        sl_free(s);
        return false;
    }
    salus_graph_free(g); /* frees it on the server too */
    for (int i = 0; ok && i < n_extra; i++)
        ok = expect(w, salus_tensor_free(s, extra[i]), SALUS_OK, "free");
    ok = expect(w, salus_tensor_free(s, wt), SALUS_OK, "free W") && ok;
    ok = expect(w, salus_session_close(s), SALUS_OK, "close") && ok;
    atomic_fetch_add(&w->st->cycles, 1);
    return ok;
}

static int worker_main(int slot, const char *url, const char *shm, uint64_t seed, uint64_t end_ns)
{
    int fd = open(shm, O_RDWR);
    if (fd < 0)
        return 3;
    slot_stats *all =
        mmap(NULL, MAX_CLIENTS * sizeof *all, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (all == MAP_FAILED)
        return 3;
    worker w = {.st = &all[slot], .rng = seed | 1, .slot = slot};
    while (sl_ts_now_ns() < end_ns) {
        if (!w.c || rnd(&w) % 20 == 0) {
            salus_disconnect(w.c);
            w.c = NULL;
            if (!expect(&w, salus_connect(url, &w.c), SALUS_OK, "connect"))
                return 4;
            atomic_fetch_add(&w.st->reconnects, 1);
        }
        if (!cycle(&w) && w.c) {
            salus_disconnect(w.c);
            w.c = NULL;
        }
    }
    salus_disconnect(w.c);
    return 0;
}

/* ---- the supervisor ---- */

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int) pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

/* A status request on a fresh connection (dialled without waiting, 5 s to be
 * sent and 5 s to be answered): false when salusd does not answer. */
static bool server_answers(const char *url)
{
    nng_socket sock;
    if (nng_req0_open(&sock) != 0)
        return false;
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__Status st = SALUS__STATUS__INIT;
    req.body_case = SALUS__REQUEST__BODY_STATUS;
    req.status = &st;
    uint8_t buf[64];
    size_t n = salus__request__pack(&req, buf);
    char *reply;
    size_t len;
    bool ok = nng_socket_set_ms(sock, NNG_OPT_SENDTIMEO, 5000) == 0 &&
              nng_socket_set_ms(sock, NNG_OPT_RECVTIMEO, 5000) == 0 &&
              nng_dial(sock, url, NULL, NNG_FLAG_NONBLOCK) == 0 && nng_send(sock, buf, n, 0) == 0 &&
              nng_recv(sock, &reply, &len, NNG_FLAG_ALLOC) == 0;
    if (ok)
        nng_free(reply, len);
    nng_close(sock);
    return ok;
}

static pid_t spawn_worker(const char *self, int slot, const char *url, const char *shm,
                          uint64_t seed, uint64_t end_ns)
{
    char s_slot[16], s_seed[32], s_end[32];
    snprintf(s_slot, sizeof s_slot, "%d", slot);
    snprintf(s_seed, sizeof s_seed, "%llu", (unsigned long long) seed);
    snprintf(s_end, sizeof s_end, "%llu", (unsigned long long) end_ns);
    const char *argv[] = {self, "--worker", s_slot, url, shm, s_seed, s_end, NULL};
    return bench_spawn(argv);
}

/* Server status after every client is gone: sessions and persistent bytes. */
static int server_empty(const char *url, size_t *sessions, uint64_t *persistent)
{
    salus_client *c;
    int rc = salus_connect(url, &c);
    if (rc)
        return rc;
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__Status st = SALUS__STATUS__INIT;
    req.body_case = SALUS__REQUEST__BODY_STATUS;
    req.status = &st;
    Salus__Reply *rep;
    for (int i = 0; i < 500 && rc == SL_OK; i++) {
        if ((rc = sl_client_call(c, &req, &rep)) != SL_OK)
            break;
        *sessions = rep->status->n_sessions + rep->status->n_queue;
        *persistent = rep->status->memory->persistent_used;
        salus__reply__free_unpacked(rep, NULL);
        if (!*sessions && !*persistent)
            break;
        usleep(10000);
    }
    salus_disconnect(c);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 7 && strcmp(argv[1], "--worker") == 0)
        return worker_main(atoi(argv[2]), argv[3], argv[4], strtoull(argv[5], NULL, 10),
                           strtoull(argv[6], NULL, 10));
    const char *salusd = NULL, *json = NULL, *server_log = "error";
    int seconds = 600, clients = 64, kill_ms = 500;
    static const struct option opts[] = {{"salusd", required_argument, NULL, 's'},
                                         {"seconds", required_argument, NULL, 't'},
                                         {"clients", required_argument, NULL, 'c'},
                                         {"kill-every-ms", required_argument, NULL, 'k'},
                                         {"json", required_argument, NULL, 'j'},
                                         {"server-log", required_argument, NULL, 'l'},
                                         {0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 's')
            salusd = optarg;
        else if (o == 't')
            seconds = atoi(optarg);
        else if (o == 'c')
            clients = atoi(optarg);
        else if (o == 'k')
            kill_ms = atoi(optarg);
        else if (o == 'j')
            json = optarg;
        else if (o == 'l')
            server_log = optarg;
        else
            return 2;
    }
    if (!salusd || seconds < 5 || clients < 1 || clients > MAX_CLIENTS || kill_ms < 10) {
        fprintf(stderr,
                "usage: soak --salusd PATH [--seconds N>=5] [--clients 1..%d] "
                "[--kill-every-ms N>=10] [--json FILE] [--server-log LEVEL]\n",
                MAX_CLIENTS);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    char shm[300], self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    sl_ts_salusd srv;
    bench_salusd_start(&srv, salusd, "soak",
                       (const char *[]){"--device", "cpu", "--memory-limit", "512M", "--log-level",
                                        server_log, NULL});
    const char *url = srv.url;
    pid_t server = srv.pid;
    snprintf(shm, sizeof shm, "%s/stats", srv.dir);
    int fd = open(shm, O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, MAX_CLIENTS * sizeof(slot_stats)) != 0)
        return 1;
    slot_stats *st =
        mmap(NULL, MAX_CLIENTS * sizeof *st, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (st == MAP_FAILED)
        return 1;

    uint64_t t0 = sl_ts_now_ns(), end = t0 + (uint64_t) seconds * 1000000000ull;
    uint64_t warm_ns = (uint64_t) (seconds / 5 < 30 ? seconds / 5 : 30) * 1000000000ull;
    pid_t pids[MAX_CLIENTS];
    uint64_t seed = 0x5eed;
    for (int i = 0; i < clients; i++)
        pids[i] = spawn_worker(self, i, url, shm, seed++, end);
    long rss_warm = -1, rss_min = -1, rss_max = 0, rss_end = -1;
    unsigned kills = 0, crashed = 0, hung = 0, probes_failed = 0;
    bool deaf = false;
    uint64_t next_probe = t0 + 5000000000ull;
    uint64_t next_kill = t0 + (uint64_t) kill_ms * 1000000ull, rng = 88172645463325252ull;
    while (sl_ts_now_ns() < end) {
        usleep(20000);
        uint64_t now = sl_ts_now_ns();
        long rss = rss_kib(server);
        if (rss < 0 || waitpid(server, NULL, WNOHANG) == server) {
            fprintf(stderr, "soak: salusd died\n");
            server = -1;
            break;
        }
        if (now >= next_probe) { /* alive is not enough: it must answer */
            probes_failed = server_answers(url) ? 0 : probes_failed + 1;
            next_probe = sl_ts_now_ns() + 5000000000ull;
            if (probes_failed == 2) {
                fprintf(stderr, "soak: salusd is alive but answers nobody (%.0f s in)\n",
                        (double) (now - t0) / 1e9);
                deaf = true;
                break;
            }
        }
        if (now - t0 >= warm_ns) {
            if (rss_warm < 0)
                rss_warm = rss;
            rss_min = rss_min < 0 || rss < rss_min ? rss : rss_min;
            rss_max = rss > rss_max ? rss : rss_max;
        }
        rss_end = rss;
        if (now >= next_kill && now + 2000000000ull < end) {
            next_kill += (uint64_t) kill_ms * 1000000ull;
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            int k = (int) (rng % (uint64_t) clients);
            if (pids[k] > 0) {
                kill(pids[k], SIGKILL);
                (void) waitpid(pids[k], NULL, 0);
                kills++;
                pids[k] = spawn_worker(self, k, url, shm, seed++, end);
            }
        }
        for (int i = 0; i < clients; i++) { /* a client that died on its own */
            int ws;
            if (pids[i] > 0 && waitpid(pids[i], &ws, WNOHANG) == pids[i]) {
                if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) {
                    pids[i] = -1; /* reached the deadline just before this loop */
                    continue;
                }
                crashed++;
                fprintf(stderr, "soak: client %d exited early (status %d)\n", i, ws);
                pids[i] = spawn_worker(self, i, url, shm, seed++, end);
            }
        }
    }
    uint64_t give_up = sl_ts_now_ns() + (deaf ? 0 : 20000000000ull);
    for (int i = 0; i < clients; i++) { /* they stop at the deadline */
        int ws = 0;
        pid_t r = 0;
        if (pids[i] <= 0)
            continue;
        while ((r = waitpid(pids[i], &ws, WNOHANG)) == 0 && sl_ts_now_ns() < give_up)
            usleep(10000);
        if (r == 0) {
            hung++;
            kill(pids[i], SIGKILL);
            (void) waitpid(pids[i], &ws, 0);
            crashed++;
        } else if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
            crashed++;
        }
    }
    size_t sessions = 1;
    uint64_t persistent = 1;
    int drained = -1;
    if (hung)
        fprintf(stderr, "soak: %u clients hung at the end\n", hung);
    if (!deaf && server > 0 && !server_answers(url)) {
        fprintf(stderr, "soak: salusd is alive but answers nobody at the end\n");
        deaf = true;
    }
    if (deaf) {
        kill(server, SIGKILL);
        (void) waitpid(server, NULL, 0);
        server = -1;
    }
    if (server > 0 && server_empty(url, &sessions, &persistent) == SALUS_OK)
        drained = sl_ts_salusd_stop(&srv, -1);
    unsigned long long requests = 0, bad = 0, cycles = 0, reconnects = 0;
    for (int i = 0; i < clients; i++) {
        requests += st[i].requests;
        bad += st[i].unexpected;
        cycles += st[i].cycles;
        reconnects += st[i].reconnects;
    }
    bad += crashed + (deaf ? 1u : 0u);
    long slack = rss_warm / 10 > 2048 ? rss_warm / 10 : 2048;
    int flat = rss_warm > 0 && rss_end <= rss_warm + slack && rss_end >= rss_warm - slack;
    double secs = (double) (sl_ts_now_ns() - t0) / 1e9;
    printf("%d clients for %.0f s: %llu requests (%.0f/s), %llu session cycles, %u kills, %llu "
           "connects; salusd RSS %ld KiB after warm-up, %ld..%ld KiB since, %ld KiB at the end "
           "(flat: within max(10%%, 2 MiB)); at the end %zu sessions, %llu persistent bytes, "
           "exit %d\n",
           clients, secs, requests, (double) requests / secs, cycles, kills, reconnects, rss_warm,
           rss_min, rss_max, rss_end, sessions, (unsigned long long) persistent, drained);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"seconds\":%.1f,\"clients\":%d,\"requests\":%llu,\"errors_unexpected\":%llu,"
                    "\"kills\":%u,\"connects\":%llu,\"rss_start_kib\":%ld,\"rss_end_kib\":%ld,"
                    "\"rss_min_kib\":%ld,\"rss_max_kib\":%ld,\"flat\":%d,\"sessions_left\":%zu,"
                    "\"persistent_left\":%llu,\"exit\":%d,\"answering\":%d}\n",
                    secs, clients, requests, bad, kills, reconnects, rss_warm, rss_end, rss_min,
                    rss_max, flat, sessions, (unsigned long long) persistent, drained, !deaf);
            fclose(f);
        }
    }
    printf("BENCH soak requests=%llu errors_unexpected=%llu rss_start_kib=%ld rss_end_kib=%ld "
           "flat=%d kills=%u seconds=%.0f clients=%d answering=%d\n",
           requests, bad, rss_warm, rss_end, flat, kills, secs, clients, !deaf);
    sl_ts_tempdir_remove(srv.dir);
    return bad == 0 && flat && sessions == 0 && persistent == 0 && drained == 0 ? 0 : 1;
}
