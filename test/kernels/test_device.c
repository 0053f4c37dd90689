/* Device specs, device memory and stream semantics on the cpu backend:
 * ordering, sticky errors, host callbacks, concurrency, draining. */
#include "kt.h"

#include "cpu/cpu.h"
#include "guard.h"
#include "sl_alloc.h"
#include "sl_time.h"
#include "workq.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void test_specs(void **state)
{
    (void) state;
    static const struct {
        const char *spec;
        int rc;
    } specs[] = {
        {"cpu", SL_OK},
        {"cpu:0", SL_OK},
        {"cpu:1", SL_ENODEV},
        {"cpu:fast", SL_EINVAL},
        {"", SL_EINVAL},
        {":", SL_EINVAL},
        {"cpu:", SL_EINVAL},
        {":0", SL_EINVAL},
        {"gpu", SL_EINVAL},
        /* sim specs that open are test_sim's; malformed ones fail here too */
        {"sim:v100:x", SL_EINVAL},
        {"sim::0", SL_EINVAL},
        {"sim:v100:0:1", SL_EINVAL},
        {"cuda:99999", SL_EINVAL},
        {"cpu:00000000000000000000000000000000000000000000000000000000000000000", SL_EINVAL},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        sl_device *dev = NULL;
        int rc = sl_dev_open(specs[i].spec, &dev);
        if (rc != specs[i].rc)
            fail_msg("spec \"%s\": got %s, want %s", specs[i].spec, sl_errname(rc),
                     sl_errname(specs[i].rc));
        if (rc == SL_OK) {
            assert_string_equal(dev->ops->name, "cpu");
            assert_true(dev->total_bytes > 0);
            assert_non_null(strstr(dev->description, "cpu"));
        }
        sl_dev_close(dev);
    }
    sl_device *dev;
    assert_sl_err(sl_dev_open(NULL, &dev), SL_EINVAL);
    assert_sl_err(sl_dev_open("cpu", NULL), SL_EINVAL);
    /* cuda: not built, or built and (on a machine without a GPU) no device. */
    int rc = sl_dev_open("cuda", &dev);
    if (rc == SL_OK)
        sl_dev_close(dev);
    else if (!sl_cuda_device_ops_ptr)
        assert_sl_err(rc, SL_EUNSUPPORTED);
    else
        assert_sl_err(rc, SL_ENODEV);
    sl_dev_close(NULL);
}

static void test_memory(void **state)
{
    (void) state;
    sl_device *dev;
    assert_sl_ok(sl_dev_open("cpu", &dev));
    const sl_device_ops *ops = dev->ops;
    void *p, *q;
    assert_sl_err(ops->mem_alloc(dev, 0, &p), SL_EINVAL);
    assert_sl_err(ops->mem_alloc(dev, dev->total_bytes + 1, &p), SL_EEXHAUSTED);
    /* A big arena costs nothing until touched. */
    size_t big = (size_t) (dev->total_bytes / 2);
    assert_sl_ok(ops->mem_alloc(dev, big, &p));
    assert_int_equal((uintptr_t) p % 256, 0);
    ((char *) p)[0] = 1;
    ((char *) p)[big - 1] = 2;
    /* The capacity is shared: the rest is less than another half. */
    assert_sl_err(ops->mem_alloc(dev, big + 4096, &q), SL_EEXHAUSTED);
    assert_sl_ok(ops->mem_alloc(dev, 1000, &q));
    ops->mem_free(dev, p);
    ops->mem_free(dev, q);
    ops->mem_free(dev, NULL);
    /* Freed capacity is available again. */
    assert_sl_ok(ops->mem_alloc(dev, big, &p));
    ops->mem_free(dev, p);

    /* Host allocation failures are reported, never crash. */
    sl_alloc_fail_after(1);
    assert_sl_err(ops->mem_alloc(dev, 4096, &p), SL_ENOMEM);
    sl_alloc_fail_after(0);
    sl_dev_close(dev);
    sl_alloc_fail_after(1);
    assert_sl_err(sl_dev_open("cpu", &dev), SL_ENOMEM);
    sl_alloc_fail_after(0);
}

/* ---- streams ---- */

struct seq {
    pthread_mutex_t lock;
    int order[64];
    int n;
    int status[64];
    float seen[64]; /* value of a host buffer when the callback ran */
    const float *watch;
};

struct seq_arg {
    struct seq *seq;
    int id;
};

static void seq_cb(void *arg, int status)
{
    struct seq_arg *a = arg;
    struct seq *s = a->seq;
    pthread_mutex_lock(&s->lock);
    s->order[s->n++] = a->id;
    s->status[a->id] = status;
    s->seen[a->id] = s->watch ? *s->watch : 0;
    pthread_mutex_unlock(&s->lock);
}

static sl_op_call call1(unsigned op, float *x, float *y, sl_shape s)
{
    sl_op_call c = {.op = (uint16_t) op, .n_in = 1, .n_out = 1};
    c.in[0] = (sl_tensor_ref){x, s};
    c.out[0] = (sl_tensor_ref){y, s};
    return c;
}

/* In-order execution: each step scales x in place and copies it out before
 * a callback looks at the copy. */
static void test_ordering(void **state)
{
    kt_env e;
    (void) state;
    assert_sl_ok(kt_env_open(&e, "cpu"));
    const sl_device_ops *ops = e.dev->ops;
    sl_shape s = KT_F32(1, 1000);
    float *x = kt_dev_alloc(&e, 4000), one = 1.0f, host = 0;
    struct seq seq = {.lock = PTHREAD_MUTEX_INITIALIZER, .watch = &host};
    enum { STEPS = 20 };
    struct seq_arg args[STEPS];

    sl_op_call fill = call1(SL_OP_FILL, x, x, s);
    fill.attrs.f[0] = one;
    assert_sl_ok(ops->launch(e.dev, e.stream, &fill));
    sl_op_call twice = call1(SL_OP_SCALE, x, x, s);
    twice.attrs.f[0] = 2.0f;
    for (int i = 0; i < STEPS; i++) {
        assert_sl_ok(ops->launch(e.dev, e.stream, &twice));
        assert_sl_ok(ops->memcpy_d2h(e.dev, e.stream, &host, x + 999, sizeof host));
        args[i] = (struct seq_arg){&seq, i};
        assert_sl_ok(ops->host_callback(e.dev, e.stream, seq_cb, &args[i]));
    }
    assert_sl_ok(ops->synchronize(e.dev, e.stream));
    assert_int_equal(seq.n, STEPS);
    for (int i = 0; i < STEPS; i++) {
        assert_int_equal(seq.order[i], i);
        assert_sl_ok(seq.status[i]);
        assert_true(seq.seen[i] == (float) (1u << (i + 1)));
    }
    kt_env_close(&e);
}

/* An execution error skips the stream's work up to the next callback, which
 * receives it; work after that callback runs again. */
static void test_sticky(void **state)
{
    kt_env e;
    (void) state;
    assert_sl_ok(kt_env_open(&e, "cpu"));
    const sl_device_ops *ops = e.dev->ops;
    sl_shape s = KT_F32(1, 4);
    float *y = kt_dev_alloc(&e, 16), host[4] = {0}, src[4] = {9, 9, 9, 9};
    struct seq seq = {.lock = PTHREAD_MUTEX_INITIALIZER};
    struct seq_arg a0 = {&seq, 0}, a1 = {&seq, 1}, a2 = {&seq, 2};

    sl_op_call fill = call1(SL_OP_FILL, y, y, s);
    fill.attrs.f[0] = 1.0f;
    assert_sl_ok(ops->launch(e.dev, e.stream, &fill));
    assert_sl_ok(sl_cpu_inject_error(e.stream, SL_EDEVICE));
    fill.attrs.f[0] = 7.0f; /* skipped */
    assert_sl_ok(ops->launch(e.dev, e.stream, &fill));
    assert_sl_ok(sl_cpu_inject_error(e.stream, SL_EEXHAUSTED)); /* skipped: first error wins */
    assert_sl_ok(ops->memcpy_h2d(e.dev, e.stream, y, src, sizeof src)); /* skipped */
    assert_sl_ok(ops->host_callback(e.dev, e.stream, seq_cb, &a0));
    assert_sl_ok(ops->memcpy_d2h(e.dev, e.stream, host, y, sizeof host));
    assert_sl_ok(ops->host_callback(e.dev, e.stream, seq_cb, &a1));
    assert_sl_ok(ops->synchronize(e.dev, e.stream));
    assert_int_equal(seq.n, 2);
    assert_sl_err(seq.status[0], SL_EDEVICE);
    assert_sl_ok(seq.status[1]);
    for (int i = 0; i < 4; i++)
        assert_true(host[i] == 1.0f);

    /* Without a callback, synchronize reports the error once and clears it. */
    assert_sl_ok(sl_cpu_inject_error(e.stream, SL_EINTERNAL));
    assert_sl_err(ops->synchronize(e.dev, e.stream), SL_EINTERNAL);
    assert_sl_ok(ops->synchronize(e.dev, e.stream));
    assert_sl_ok(ops->host_callback(e.dev, e.stream, seq_cb, &a2));
    assert_sl_ok(ops->synchronize(e.dev, e.stream));
    assert_sl_ok(seq.status[2]);

    /* Submission errors are synchronous and do not poison the stream. */
    assert_sl_err(sl_cpu_inject_error(e.stream, SL_OK), SL_EINVAL);
    sl_op_call bad = call1(SL_OP_COUNT, y, y, s);
    assert_sl_err(ops->launch(e.dev, e.stream, &bad), SL_EUNSUPPORTED);
    bad = call1(SL_OP_ADD, y, y, s); /* add takes 2 inputs */
    assert_sl_err(ops->launch(e.dev, e.stream, &bad), SL_EINVAL);
    /* cblas takes int dimensions: K = 2^31 is beyond this backend. */
    sl_op_call mm = {.op = SL_OP_MATMUL, .n_in = 2, .n_out = 1};
    mm.in[0] = (sl_tensor_ref){y, KT_F32(2, 1, 1ll << 31)};
    mm.in[1] = (sl_tensor_ref){y, KT_F32(2, 1ll << 31, 1)};
    mm.out[0] = (sl_tensor_ref){y, KT_F32(2, 1, 1)};
    assert_sl_err(ops->launch(e.dev, e.stream, &mm), SL_EUNSUPPORTED);
    assert_sl_err(ops->host_callback(e.dev, e.stream, NULL, NULL), SL_EINVAL);
    assert_sl_err(ops->memcpy_h2d(e.dev, e.stream, NULL, src, 4), SL_EINVAL);
    assert_sl_ok(ops->memcpy_h2d(e.dev, e.stream, NULL, NULL, 0));
    assert_sl_ok(ops->synchronize(e.dev, e.stream));
    kt_env_close(&e);
}

/* ---- guarded copies of client memory ---- */

/* Host memory whose pages are gone: a mapping of a memfd truncated under
 * it, as a client's segment would be without its seal (every access is
 * SIGBUS). */
static void *vanished_pages(size_t bytes)
{
    int fd = memfd_create("vanished", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t) bytes), 0);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(p != MAP_FAILED);
    assert_int_equal(ftruncate(fd, 0), 0);
    close(fd);
    return p;
}

/* A copy in or out whose host side faults fails that copy (sticky up to
 * the next callback, like any stream error) and the process lives on; a
 * fault anywhere else still kills. */
static void test_guarded_copies(void **state)
{
    kt_env e;
    (void) state;
    assert_sl_ok(kt_env_open(&e, "cpu"));
    assert_sl_ok(sl_guard_init()); /* in front of cmocka's own handlers */
    const sl_device_ops *ops = e.dev->ops;
    const size_t bytes = 2 * 4096;
    float *y = kt_dev_alloc(&e, bytes), host[4] = {1, 2, 3, 4}, back[4] = {0};
    char *gone = vanished_pages(bytes);
    assert_sl_ok(ops->memcpy_h2d(e.dev, e.stream, y, gone + 4096, 4096));
    assert_sl_err(ops->synchronize(e.dev, e.stream), SL_EINVAL);
    assert_sl_ok(ops->memcpy_d2h(e.dev, e.stream, gone, y, 4096));
    assert_sl_err(ops->synchronize(e.dev, e.stream), SL_EINVAL);
    /* the stream goes on */
    assert_sl_ok(ops->memcpy_h2d(e.dev, e.stream, y, host, sizeof host));
    assert_sl_ok(ops->memcpy_d2h(e.dev, e.stream, back, y, sizeof back));
    assert_sl_ok(ops->synchronize(e.dev, e.stream));
    assert_memory_equal(back, host, sizeof host);
    /* not inside a guarded copy: the default action, as before */
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGBUS, SIG_DFL); /* no cmocka handler behind the guard */
        (void) sl_guard_init();
        volatile char c = gone[0];
        (void) c;
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS);
    munmap(gone, bytes);
    kt_env_close(&e);
}

/* ---- concurrency ---- */

struct rendezvous {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    bool b_ran;
    bool a_saw_b;
};

/* Stream A's callback waits (bounded) for stream B's: it can only succeed if
 * the two streams execute at the same time. */
static void wait_for_b(void *arg, int status)
{
    struct rendezvous *r = arg;
    (void) status;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    pthread_mutex_lock(&r->lock);
    while (!r->b_ran)
        if (pthread_cond_timedwait(&r->cv, &r->lock, &deadline) != 0)
            break;
    r->a_saw_b = r->b_ran;
    pthread_mutex_unlock(&r->lock);
}

static void signal_b(void *arg, int status)
{
    struct rendezvous *r = arg;
    (void) status;
    pthread_mutex_lock(&r->lock);
    r->b_ran = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->lock);
}

struct lane {
    sl_device *dev;
    sl_stream *stream;
    float *x, *y, *two_i; /* [16,16] each; two_i = 2 * identity */
    int steps;
};

/* Each step: y = x @ (2I) through BLAS, then copy y back into x. */
static void *lane_main(void *arg)
{
    struct lane *l = arg;
    sl_shape s = KT_F32(2, 16, 16);
    sl_op_call mm = {.op = SL_OP_MATMUL, .n_in = 2, .n_out = 1};
    mm.in[0] = (sl_tensor_ref){l->x, s};
    mm.in[1] = (sl_tensor_ref){l->two_i, s};
    mm.out[0] = (sl_tensor_ref){l->y, s};
    sl_op_call copy = {.op = SL_OP_COPY, .n_in = 1, .n_out = 1};
    copy.in[0] = mm.out[0];
    copy.out[0] = mm.in[0];
    for (int i = 0; i < l->steps; i++)
        if (l->dev->ops->launch(l->dev, l->stream, &mm) != SL_OK ||
            l->dev->ops->launch(l->dev, l->stream, &copy) != SL_OK)
            return "launch failed";
    return NULL;
}

static void test_concurrent_streams(void **state)
{
    (void) state;
    sl_device *dev;
    assert_sl_ok(sl_dev_open("cpu", &dev));
    const sl_device_ops *ops = dev->ops;
    sl_stream *a, *b;
    assert_sl_ok(ops->stream_create(dev, 0, &a));
    assert_sl_ok(ops->stream_create(dev, 1, &b));
    struct rendezvous r = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false};
    assert_sl_ok(ops->host_callback(dev, a, wait_for_b, &r));
    assert_sl_ok(ops->host_callback(dev, b, signal_b, &r));
    assert_sl_ok(ops->synchronize(dev, a));
    assert_sl_ok(ops->synchronize(dev, b));
    assert_true(r.a_saw_b);
    ops->stream_destroy(dev, a);
    ops->stream_destroy(dev, b);

    /* Four submitting threads, four streams, concurrent GEMMs: x doubles
     * `steps` times on each. */
    enum { LANES = 4, STEPS = 20 };
    void *mem;
    assert_sl_ok(ops->mem_alloc(dev, LANES * 3 * 1024, &mem));
    struct lane lanes[LANES];
    pthread_t threads[LANES];
    for (int i = 0; i < LANES; i++) {
        float *base = (float *) mem + 3 * 256 * i;
        lanes[i] = (struct lane){dev, NULL, base, base + 256, base + 512, STEPS};
        for (int j = 0; j < 256; j++) {
            lanes[i].x[j] = (float) (i + 1);
            lanes[i].two_i[j] = j % 17 == 0 ? 2.0f : 0.0f;
        }
        assert_sl_ok(ops->stream_create(dev, 0, &lanes[i].stream));
        assert_int_equal(pthread_create(&threads[i], NULL, lane_main, &lanes[i]), 0);
    }
    for (int i = 0; i < LANES; i++) {
        void *ret;
        assert_int_equal(pthread_join(threads[i], &ret), 0);
        assert_null(ret);
        assert_sl_ok(ops->synchronize(dev, lanes[i].stream));
        for (int j = 0; j < 256; j++)
            assert_true(lanes[i].x[j] == (float) (i + 1) * (float) (1 << STEPS));
        ops->stream_destroy(dev, lanes[i].stream);
    }
    ops->mem_free(dev, mem);
    sl_dev_close(dev);
}

/* ---- callbacks that submit, draining, queue growth ---- */

struct chain {
    sl_device *dev;
    sl_stream *other;
    struct seq_arg next;
    int rc;
};

static void submit_from_callback(void *arg, int status)
{
    struct chain *c = arg;
    (void) status;
    c->rc = c->dev->ops->host_callback(c->dev, c->other, seq_cb, &c->next);
}

struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    bool open;
};

static void wait_gate(void *arg, int status)
{
    struct gate *g = arg;
    (void) status;
    pthread_mutex_lock(&g->lock);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

static void open_gate(struct gate *g)
{
    pthread_mutex_lock(&g->lock);
    g->open = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->lock);
}

static void test_callbacks_and_drain(void **state)
{
    (void) state;
    sl_device *dev;
    assert_sl_ok(sl_dev_open("cpu", &dev));
    const sl_device_ops *ops = dev->ops;
    sl_stream *a, *b;
    assert_sl_ok(ops->stream_create(dev, 0, &a));
    assert_sl_ok(ops->stream_create(dev, 0, &b));

    /* A callback submits a callback to another stream. */
    struct seq seq = {.lock = PTHREAD_MUTEX_INITIALIZER};
    struct chain chain = {dev, b, {&seq, 5}, -1};
    assert_sl_ok(ops->host_callback(dev, a, submit_from_callback, &chain));
    assert_sl_ok(ops->synchronize(dev, a));
    assert_sl_ok(chain.rc);
    assert_sl_ok(ops->synchronize(dev, b));
    assert_int_equal(seq.n, 1);
    assert_int_equal(seq.order[0], 5);
    /* ... and to its own stream. */
    struct chain self = {dev, a, {&seq, 7}, -1};
    assert_sl_ok(ops->host_callback(dev, a, submit_from_callback, &self));
    assert_sl_ok(ops->synchronize(dev, a));
    assert_sl_ok(self.rc);
    assert_sl_ok(ops->synchronize(dev, a));
    assert_int_equal(seq.n, 2);
    assert_int_equal(seq.order[1], 7);

    /* Hold the worker, queue more commands than were preallocated, and make
     * the node allocation fail: launch reports SL_ENOMEM. */
    struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
    void *mem;
    assert_sl_ok(ops->mem_alloc(dev, 4096, &mem));
    sl_op_call relu = call1(SL_OP_RELU, mem, mem, KT_F32(1, 8));
    assert_sl_ok(ops->host_callback(dev, a, wait_gate, &g));
    for (int i = 0; i < 100; i++)
        assert_sl_ok(ops->launch(dev, a, &relu));
    sl_alloc_fail_after(1);
    int rc = SL_OK;
    for (int i = 0; i < 1000 && rc == SL_OK; i++)
        rc = ops->launch(dev, a, &relu);
    sl_alloc_fail_after(0);
    assert_sl_err(rc, SL_ENOMEM);
    open_gate(&g);

    /* stream_destroy runs what is queued before returning. */
    struct seq_arg last = {&seq, 6};
    for (int i = 0; i < 100; i++)
        assert_sl_ok(ops->launch(dev, a, &relu));
    assert_sl_ok(ops->host_callback(dev, a, seq_cb, &last));
    ops->stream_destroy(dev, a);
    assert_int_equal(seq.n, 3);
    assert_int_equal(seq.order[2], 6);

    ops->stream_destroy(dev, b);
    ops->mem_free(dev, mem);
    sl_alloc_fail_after(1);
    assert_sl_err(ops->stream_create(dev, 0, &a), SL_ENOMEM);
    sl_alloc_fail_after(3);
    assert_sl_err(ops->stream_create(dev, 0, &a), SL_ENOMEM);
    sl_alloc_fail_after(0);
    sl_dev_close(dev);
}

/* Cost of one launch of a tiny op: submission while the worker is busy (no
 * wake-up; batches of BATCH so the nodes stay in cache), back-to-back
 * launches (the worker keeps falling asleep and is woken), and a launch +
 * synchronize round trip. Printed, not asserted. */
static void test_launch_overhead(void **state)
{
    (void) state;
    kt_env e;
    assert_sl_ok(kt_env_open(&e, "cpu"));
    const sl_device_ops *ops = e.dev->ops;
    float *x = kt_dev_alloc(&e, 64);
    sl_op_call relu = call1(SL_OP_RELU, x, x, KT_F32(1, 1));
    enum { BATCH = 256, BATCHES = 80, N = BATCH * BATCHES, RT = 1000 };

    uint64_t submit_ns = 0;
    for (int b = 0; b < BATCHES; b++) {
        struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
        assert_sl_ok(ops->host_callback(e.dev, e.stream, wait_gate, &g));
        uint64_t t0 = sl_now_ns();
        for (int i = 0; i < BATCH; i++)
            assert_sl_ok(ops->launch(e.dev, e.stream, &relu));
        if (b > 0) /* the first batch grows the free list */
            submit_ns += sl_now_ns() - t0;
        open_gate(&g);
        assert_sl_ok(ops->synchronize(e.dev, e.stream));
    }
    uint64_t t0 = sl_now_ns();
    for (int i = 0; i < N; i++)
        assert_sl_ok(ops->launch(e.dev, e.stream, &relu));
    assert_sl_ok(ops->synchronize(e.dev, e.stream));
    uint64_t t1 = sl_now_ns();
    for (int i = 0; i < RT; i++) {
        assert_sl_ok(ops->launch(e.dev, e.stream, &relu));
        assert_sl_ok(ops->synchronize(e.dev, e.stream));
    }
    uint64_t t2 = sl_now_ns();
    printf("cpu stream launch overhead: %.0f ns/op submitting behind a busy worker, %.0f ns/op "
           "back to back (worker woken), %.0f ns launch+synchronize round trip\n",
           (double) submit_ns / (N - BATCH), (double) (t1 - t0) / N, (double) (t2 - t1) / RT);
    kt_env_close(&e);
}

/* ---- stream priorities ---- */

struct sched_seen {
    int policy;
    cpu_set_t cores;
};

static void note_sched(void *arg, int status)
{
    struct sched_seen *seen = arg;
    assert_sl_ok(status);
    seen->policy = sched_getscheduler(0);
    assert_int_equal(sched_getaffinity(0, sizeof seen->cores, &seen->cores), 0);
}

/* A cpu stream created below normal priority runs its work on a SCHED_IDLE
 * thread kept off the first core (and the OpenMP threads it starts inherit
 * both); normal and higher ones run as normal threads on every core. */
static void test_stream_priority(void **state)
{
    (void) state;
    sl_device *dev;
    assert_sl_ok(sl_dev_open("cpu", &dev));
    const sl_device_ops *ops = dev->ops;
    cpu_set_t all;
    assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
    int first = 0;
    while (!CPU_ISSET(first, &all))
        first++;
    const int priorities[] = {-1, 0, 1}, expect[] = {SCHED_IDLE, SCHED_OTHER, SCHED_OTHER};
    for (int i = 0; i < 3; i++) {
        sl_stream *st;
        struct sched_seen seen = {.policy = -1};
        assert_sl_ok(ops->stream_create(dev, priorities[i], &st));
        assert_sl_ok(ops->host_callback(dev, st, note_sched, &seen));
        assert_sl_ok(ops->synchronize(dev, st));
        assert_int_equal(seen.policy, expect[i]);
        bool low_off_first = priorities[i] < 0 && CPU_COUNT(&all) > 1;
        assert_int_equal(CPU_COUNT(&seen.cores), CPU_COUNT(&all) - low_off_first);
        assert_int_equal(!CPU_ISSET(first, &seen.cores), low_off_first);
        ops->stream_destroy(dev, st);
    }
    sl_dev_close(dev);
}

/* ---- holding a stream and running it on the submitting thread ---- */

struct where {
    pthread_t thread;
    int ran;
};

static void note_thread(void *arg, int status)
{
    struct where *w = arg;
    assert_sl_ok(status);
    w->thread = pthread_self();
    w->ran++;
}

/* A held cpu stream's copies, element-wise ops and callbacks run on the
 * releasing thread when it asks (and before release returns); otherwise on
 * the stream's own thread. */
static void test_hold_runs_here(void **state)
{
    kt_env e;
    (void) state;
    assert_sl_ok(kt_env_open(&e, "cpu"));
    const sl_device_ops *ops = e.dev->ops;
    sl_shape s = KT_F32(1, 256);
    float *x = kt_dev_alloc(&e, 1024), host[256];
    sl_op_call fill = call1(SL_OP_FILL, x, x, s);
    fill.attrs.f[0] = 3.0f;
    struct where w = {0};
    struct timespec nap = {0, 2 * 1000 * 1000};

    /* the stream's thread must be asleep to be bypassed: on a loaded
     * machine (valgrind) it may take a few naps to get there */
    for (int attempt = 0; attempt < 100; attempt++) {
        assert_sl_ok(ops->synchronize(e.dev, e.stream));
        nanosleep(&nap, NULL);
        ops->stream_hold(e.dev, e.stream);
        assert_sl_ok(ops->launch(e.dev, e.stream, &fill));
        assert_sl_ok(ops->memcpy_d2h(e.dev, e.stream, host, x, sizeof host));
        assert_sl_ok(ops->host_callback(e.dev, e.stream, note_thread, &w));
        assert_int_equal(w.ran, attempt); /* held: nothing started */
        ops->stream_release(e.dev, e.stream, true);
        assert_sl_ok(ops->synchronize(e.dev, e.stream));
        assert_int_equal(w.ran, attempt + 1);
        if (pthread_equal(w.thread, pthread_self()))
            break;
    }
    assert_true(pthread_equal(w.thread, pthread_self()));
    w.ran = 1;
    for (int i = 0; i < 256; i++)
        assert_true(host[i] == 3.0f);

    ops->stream_hold(e.dev, e.stream);
    assert_sl_ok(ops->host_callback(e.dev, e.stream, note_thread, &w));
    ops->stream_release(e.dev, e.stream, false);
    assert_sl_ok(ops->synchronize(e.dev, e.stream));
    assert_int_equal(w.ran, 2);
    assert_false(pthread_equal(w.thread, pthread_self()));
    kt_env_close(&e);
}

/* The queue mechanism itself: a borrowing thread stops at the first command
 * the backend keeps to its worker and leaves the rest to it, in order. */
struct pin_cmd {
    int id;
    bool pinned;
};
struct pin_log {
    pthread_t thread[8];
    int order[8];
    int n;
};

static int pin_exec(void *ctx, void *payload)
{
    struct pin_log *log = ctx;
    const struct pin_cmd *c = payload;
    log->thread[log->n] = pthread_self();
    log->order[log->n++] = c->id;
    return SL_OK;
}

static bool pin_anywhere(void *ctx, const void *payload)
{
    (void) ctx;
    return !((const struct pin_cmd *) payload)->pinned;
}

static const sl_workq_config pin_cfg = {
    .payload_size = sizeof(struct pin_cmd),
    .exec = pin_exec,
    .runs_anywhere = pin_anywhere,
    .log_id = "test.workq",
    .lost_log_id = "test.workq.lost",
};

static void test_borrow_stops_at_pinned_work(void **state)
{
    (void) state;
    struct pin_log log = {0};
    sl_workq *q;
    assert_sl_ok(sl_workq_create(&pin_cfg, &log, "test-workq", &q));
    struct timespec nap = {0, 2 * 1000 * 1000};
    for (int attempt = 0; attempt < 100; attempt++) {
        assert_sl_ok(sl_workq_synchronize(q));
        nanosleep(&nap, NULL); /* let the worker go to sleep */
        log.n = 0;
        sl_workq_hold(q);
        for (int i = 0; i < 4; i++) {
            int rc;
            struct pin_cmd *c = sl_workq_begin(q, &rc);
            assert_non_null(c);
            *c = (struct pin_cmd){i, i == 2};
            assert_sl_ok(sl_workq_commit(q, c));
        }
        sl_workq_release(q, true);
        assert_sl_ok(sl_workq_synchronize(q));
        assert_int_equal(log.n, 4);
        if (pthread_equal(log.thread[0], pthread_self()))
            break;
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(log.order[i], i);
        assert_int_equal(pthread_equal(log.thread[i], pthread_self()) != 0, i < 2);
    }
    sl_workq_destroy(q);
}

int kt_run_device_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_specs),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_ordering),
        cmocka_unit_test(test_sticky),
        cmocka_unit_test(test_guarded_copies),
        cmocka_unit_test(test_concurrent_streams),
        cmocka_unit_test(test_callbacks_and_drain),
        cmocka_unit_test(test_launch_overhead),
        cmocka_unit_test(test_stream_priority),
        cmocka_unit_test(test_hold_runs_here),
        cmocka_unit_test(test_borrow_stops_at_pinned_work),
    };
    return cmocka_run_group_tests_name("cpu device", tests, NULL, NULL);
}
