/* The shared-memory data plane against a real salusd on ipc://: runs through
 * shared memory give exactly what inline runs give (and the math is right),
 * segments grow when a run needs more, and every malformed descriptor,
 * attach or slice is refused with a clear error while the server keeps
 * serving. */
#include "client_internal.h"
#include "harness.h"
#include "shm_stage.h"
#include "sl_test.h"

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define K 256
#define N 64

static sl_test_server server;

/* A session with W [K, N] and the graph relu(x W) for x [rows, K]. */
typedef struct job {
    salus_client *c;
    salus_session *s;
    salus_graph *g;
    salus_value x, z;
    float w[K * N];
} job;

static void job_open_on(job *j, const sl_test_server *srv, int64_t rows)
{
    j->c = sl_test_connect(srv);
    assert_sl_ok(salus_session_open(j->c, NULL, &j->s));
    for (int i = 0; i < K * N; i++)
        j->w[i] = (float) ((i * 7919) % 201 - 100) / 1000.0f;
    uint64_t wid;
    int64_t wd[] = {K, N}, xd[] = {rows, K};
    assert_sl_ok(salus_tensor_create(j->s, SALUS_F32, 2, wd, j->w, &wid));
    j->g = sl_test_relu_graph(j->s, "matmul", 2, xd, wid, 2, wd, &j->x, &j->z);
}

static void job_open(job *j, int64_t rows)
{
    job_open_on(j, &server, rows);
}

static void job_close(job *j)
{
    salus_graph_free(j->g);
    assert_sl_ok(salus_session_close(j->s));
    salus_disconnect(j->c);
}

/* Runs one iteration on x, fetching z and x itself; checks z against a
 * double-precision reference and the echoed x bit for bit. */
static void run_and_check(job *j, const float *x, int64_t rows, float *z)
{
    float *echo = malloc(sizeof(float) * (size_t) (rows * K));
    assert_non_null(echo);
    const void *feeds[] = {x};
    void *out[] = {z, echo};
    assert_sl_ok(salus_run(j->s, j->g, feeds, 2, (salus_value[]){j->z, j->x}, out));
    assert_memory_equal(echo, x, sizeof(float) * (size_t) (rows * K));
    for (int64_t r = 0; r < rows; r++)
        for (int n = 0; n < N; n++) {
            double acc = 0;
            for (int k = 0; k < K; k++)
                acc += (double) x[r * K + k] * j->w[k * N + n];
            double want = acc > 0 ? acc : 0;
            if (fabs(z[r * N + n] - want) > 1e-4 * (1 + fabs(want)))
                fail_msg("z[%lld][%d] = %g, reference %g", (long long) r, n, z[r * N + n], want);
        }
    free(echo);
}

static float *random_input(int64_t rows, unsigned seed)
{
    float *x = malloc(sizeof(float) * (size_t) (rows * K));
    assert_non_null(x);
    for (int64_t i = 0; i < rows * K; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = (float) ((seed >> 8) % 2001) / 1000.0f - 1.0f;
    }
    return x;
}

static void shared_memory_runs_match_inline_runs(void **state)
{
    (void) state;
    const int64_t rows = 64; /* 64 KiB in, 16 KiB out: over the threshold */
    job shm, inl;
    job_open(&shm, rows);
    setenv("SALUS_SHM", "0", 1);
    job_open(&inl, rows);
    unsetenv("SALUS_SHM");
    assert_int_equal(salus_session_shm_bytes(shm.s), 0); /* attached on first use */
    float *za = malloc(sizeof(float) * rows * N), *zb = malloc(sizeof(float) * rows * N);
    assert_true(za && zb);
    for (unsigned it = 0; it < 5; it++) {
        float *x = random_input(rows, it + 1);
        run_and_check(&shm, x, rows, za);
        run_and_check(&inl, x, rows, zb);
        assert_memory_equal(za, zb, sizeof(float) * rows * N);
        free(x);
    }
    assert_true(salus_session_shm_bytes(shm.s) >= (size_t) (rows * (K + N) * 4 + rows * K * 4));
    assert_int_equal(salus_session_shm_bytes(inl.s), 0);
    free(za);
    free(zb);
    job_close(&shm);
    job_close(&inl);
}

static void segments_grow_with_the_run(void **state)
{
    (void) state;
    job small, big;
    job_open(&small, 64);
    float *x = random_input(64, 7), *z = malloc(sizeof(float) * 4096 * N);
    assert_non_null(z);
    run_and_check(&small, x, 64, z);
    size_t first = salus_session_shm_bytes(small.s);
    assert_true(first > 0);
    free(x);
    /* a second graph in the same session needing 4 MiB in, 1 MiB out */
    big.c = small.c;
    big.s = small.s;
    memcpy(big.w, small.w, sizeof big.w);
    uint64_t wid;
    int64_t wd[] = {K, N}, xd[] = {4096, K};
    assert_sl_ok(salus_tensor_create(big.s, SALUS_F32, 2, wd, big.w, &wid));
    big.g = sl_test_relu_graph(big.s, "matmul", 2, xd, wid, 2, wd, &big.x, &big.z);
    x = random_input(4096, 9);
    run_and_check(&big, x, 4096, z);
    assert_true(salus_session_shm_bytes(big.s) > first);
    free(x);
    x = random_input(64, 11); /* the small graph still works in the new segment */
    run_and_check(&small, x, 64, z);
    free(x);
    free(z);
    salus_graph_free(big.g);
    job_close(&small);
}

/* Past --shm-session-bytes a run goes inline (and computes the same); runs
 * that fit still get a segment. */
static void runs_past_the_budget_stay_inline(void **state)
{
    (void) state;
    sl_test_server small;
    const char *const args[] = {"--shm-session-bytes", "2M", NULL};
    sl_test_server_start(&small, args);
    job big, little;
    job_open_on(&big, &small, 4096); /* 4 MiB in, 1 MiB out: an 8 MiB segment */
    float *x = random_input(4096, 3), *z = malloc(sizeof(float) * 4096 * N);
    assert_non_null(z);
    run_and_check(&big, x, 4096, z);
    assert_int_equal(salus_session_shm_bytes(big.s), 0);
    run_and_check(&big, x, 4096, z); /* not asked again, still right */
    free(x);
    job_open_on(&little, &small, 64);
    x = random_input(64, 4);
    run_and_check(&little, x, 64, z);
    assert_int_equal(salus_session_shm_bytes(little.s), 1 << 20);
    free(x);
    free(z);
    job_close(&big);
    job_close(&little);
    assert_int_equal(sl_test_server_stop(&small), 0);
}

/* Sends an AttachShm naming ticket (and descriptor number fd, which salusd
 * must refuse, when not 0);
 * expects code and a message containing msg. */
static void expect_attach(salus_session *s, int fd, uint64_t ticket, uint64_t size, int code,
                          const char *msg)
{
    assert_sl_err(sl_test_attach_shm(s, fd, ticket, size), code);
    if (msg && !strstr(salus_last_error(s->client), msg))
        fail_msg("attach: message \"%s\" lacks \"%s\"", salus_last_error(s->client), msg);
}

/* Stages fd for s over the descriptor socket; expects code and a message
 * containing msg; returns the ticket. */
static uint64_t expect_stage(salus_session *s, int fd, uint64_t size, int code, const char *msg)
{
    char text[300];
    uint64_t ticket = 0;
    int rc = sl_test_stage_shm(server.url + strlen("ipc://"), s->id, s->token, fd, size, &ticket,
                               text, sizeof text);
    assert_sl_err(rc, code);
    if (msg && !strstr(text, msg))
        fail_msg("stage: message \"%s\" lacks \"%s\"", text, msg);
    return ticket;
}

/* A run of j's graph whose feed and first fetch are the given slices. */
static void expect_slice_run(job *j, Salus__ShmSlice feed, Salus__ShmSlice fetch, int code)
{
    /* z is value 3: inputs, params, then op outputs: x W y z */
    assert_sl_err(sl_test_shm_run(j->s, salus_graph_id(j->g), feed, 3, fetch), code);
}

static int sealed_memfd(size_t size, unsigned seals)
{
    int fd = memfd_create("salus-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t) size), 0);
    assert_int_equal(fallocate(fd, 0, 0, (off_t) size), 0); /* salusd takes no sparse one */
    if (seals)
        assert_int_equal(fcntl(fd, F_ADD_SEALS, seals), 0);
    return fd;
}

static void malformed_attaches_and_slices_are_refused(void **state)
{
    (void) state;
    job j;
    job_open(&j, 64);
    const uint64_t in = 64 * K * 4, out = 64 * N * 4;
    Salus__ShmSlice feed = SALUS__SHM_SLICE__INIT, fetch = SALUS__SHM_SLICE__INIT;
    feed.length = in;
    fetch.offset = in;
    fetch.length = out;

    expect_slice_run(&j, feed, fetch, SALUS_EINVAL); /* nothing attached yet */
    int unsealed = sealed_memfd(1 << 20, 0);
    expect_stage(j.s, unsealed, 1 << 20, SALUS_EPERM, "sealed");
    char path[] = "/tmp/salus-shm-XXXXXX";
    int file = mkstemp(path);
    assert_true(file >= 0);
    assert_int_equal(ftruncate(file, 1 << 20), 0);
    unlink(path);
    expect_stage(j.s, file, 1 << 20, SALUS_EPERM, "sealed");
    expect_stage(j.s, -1, 1 << 20, SALUS_EINVAL, "exactly one descriptor");
    int fd = sealed_memfd(1 << 20, F_SEAL_SHRINK);
    expect_stage(j.s, fd, 2 << 20, SALUS_EINVAL, "smaller");
    expect_stage(j.s, fd, 0, SALUS_EINVAL, "size");
    /* a sparse segment: salusd's copies would allocate its pages, charged
     * to salusd for as long as the client keeps the file */
    int sparse = memfd_create("salus-sparse", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(sparse >= 0);
    assert_int_equal(ftruncate(sparse, 1 << 20), 0);
    assert_int_equal(fcntl(sparse, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    expect_stage(j.s, sparse, 1 << 20, SALUS_EINVAL, "fallocate(fd, 0, 0, size)");
    /* allocated only past what would be mapped: still refused */
    int tail = memfd_create("salus-tail", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(tail >= 0);
    assert_int_equal(ftruncate(tail, 2 << 20), 0);
    assert_int_equal(fallocate(tail, 0, 1 << 20, 1 << 20), 0);
    assert_int_equal(fcntl(tail, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    expect_stage(j.s, tail, 1 << 20, SALUS_EINVAL, "not allocated");
    close(tail);
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    int opath = open(self, O_PATH | O_CLOEXEC), rdonly = open(self, O_RDONLY | O_CLOEXEC);
    assert_true(opath >= 0 && rdonly >= 0);
    expect_stage(j.s, opath, 1 << 20, SALUS_EPERM, "O_PATH");
    expect_stage(j.s, rdonly, 1 << 20, SALUS_EPERM, "read-write");
    close(opath);
    close(rdonly);
    {
        char text[300];
        uint64_t ticket;
        /* a wrong token: answered as a missing session would be */
        assert_sl_err(sl_test_stage_shm(server.url + strlen("ipc://"), j.s->id, j.s->token ^ 1, fd,
                                        1 << 20, &ticket, text, sizeof text),
                      SALUS_ESESSIONLOST);
    }
    /* the seal is what keeps the server safe from SIGBUS: it holds */
    assert_int_not_equal(ftruncate(fd, 4096), 0);
    /* naming a descriptor number (salusd would have to open it) is over */
    expect_attach(j.s, fd, 0, 1 << 20, SALUS_EINVAL, "no longer supported");
    expect_attach(j.s, 0, 12345, 1 << 20, SALUS_EINVAL, "ticket");

    uint64_t ticket = expect_stage(j.s, fd, 1 << 20, SALUS_OK, NULL);
    assert_true(ticket != 0);
    expect_attach(j.s, 0, ticket, 2 << 20, SALUS_EINVAL, "staged");
    expect_attach(j.s, 0, ticket, 1 << 20, SALUS_OK, NULL);
    expect_attach(j.s, 0, ticket, 1 << 20, SALUS_EINVAL, "ticket"); /* used once */
    Salus__ShmSlice past = feed;
    past.offset = (1 << 20) - in + 4;
    expect_slice_run(&j, past, fetch, SALUS_EINVAL);
    Salus__ShmSlice wrap = feed;
    wrap.offset = UINT64_MAX - 8;
    expect_slice_run(&j, wrap, fetch, SALUS_EINVAL);
    Salus__ShmSlice short_feed = feed;
    short_feed.length = in - 4;
    expect_slice_run(&j, short_feed, fetch, SALUS_EINVAL);
    Salus__ShmSlice wrong_fetch = fetch;
    wrong_fetch.length = out + 4;
    expect_slice_run(&j, feed, wrong_fetch, SALUS_EINVAL);

    /* a well-formed raw run through the test's own segment computes */
    float *seg = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(seg != MAP_FAILED);
    for (int i = 0; i < 64 * K; i++)
        seg[i] = 1.0f;
    expect_slice_run(&j, feed, fetch, SALUS_OK);
    const float *z = seg + 64 * K;
    for (int n = 0; n < N; n++) {
        double acc = 0;
        for (int k = 0; k < K; k++)
            acc += j.w[k * N + n];
        assert_float_equal(z[n], acc > 0 ? acc : 0, 1e-4);
    }
    /* a hole punched after the hand-over: the next run is refused before
     * salusd copies into it; allocated again, runs go on */
    assert_int_equal(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096), 0);
    assert_sl_err(sl_test_shm_run(j.s, salus_graph_id(j.g), feed, 3, fetch), SALUS_EINVAL);
    assert_non_null(strstr(salus_last_error(j.c), "not allocated"));
    assert_int_equal(fallocate(fd, 0, 0, 1 << 20), 0);
    for (int i = 0; i < 64 * K; i++)
        seg[i] = 1.0f;
    expect_slice_run(&j, feed, fetch, SALUS_OK);
    munmap(seg, 1 << 20);
    close(sparse);
    close(fd);
    close(file);
    close(unsealed);
    job_close(&j);
}

SL_TEST_SERVER_MAIN(server, "shm", sl_test_group_start,
                    cmocka_unit_test(shared_memory_runs_match_inline_runs),
                    cmocka_unit_test(segments_grow_with_the_run),
                    cmocka_unit_test(runs_past_the_budget_stay_inline),
                    cmocka_unit_test(malformed_attaches_and_slices_are_refused))
