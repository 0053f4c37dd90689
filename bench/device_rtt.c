/* bench/device_rtt: how long the device layer takes to hand a finished
 * step back to its submitter, on any backend. One step is what salusd does
 * for a small inference request: a feed copied in, one op, the fetch copied
 * out. Its completion is seen two ways, interleaved round by round on the
 * same stream:
 *   callback  the way salusd waits: host_callback, the submitter woken by
 *             the callback (on cuda: cudaLaunchHostFunc, then the device's
 *             dispatcher thread)
 *   sync      synchronize (on cuda: cudaStreamSynchronize), the floor
 * ratio = callback / sync of the medians; p99 of each beside it.
 *
 * Then the launch path: back-to-back launches of a one-element op, one
 * callback per 1000, from 1 and from 4 threads with a stream each: launches
 * per second of the device, and its inverse, the time one launch holds the
 * path (the sim backend ASSUMES 5 us per launch and one path per device:
 * kernels/sim/profiles.c, eval/README.md "The launch path").
 *   device_rtt [--device cpu|cuda|sim:P] [--rounds 5] [--steps 2000]
 *              [--elems 8192] [--json FILE]
 * Lines: BENCH device_rtt device=... callback_us=... sync_us=...
 *        callback_p99_us=... sync_p99_us=... ratio=...
 *        BENCH device_launch device=... threads=T launches_per_s=... ns_per_launch=... */
#include "bench_util.h"

#include "device.h"
#include "ops.h"
#include "sl_error.h"

#include <getopt.h>
#include <pthread.h>

typedef struct waiter {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int done, status;
} waiter;

static void wake(void *arg, int status)
{
    waiter *w = arg;
    pthread_mutex_lock(&w->lock);
    w->done = 1;
    w->status = status;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->lock);
}

/* Enqueues a host callback on s and waits until it has run: the way salusd
 * learns that a stream's work is done. Returns the callback's status. */
static int callback_wait(sl_device *dev, sl_stream *s)
{
    waiter w = {.lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    int rc = dev->ops->host_callback(dev, s, wake, &w);
    if (rc != SL_OK)
        return rc;
    pthread_mutex_lock(&w.lock);
    while (!w.done)
        pthread_cond_wait(&w.cv, &w.lock);
    pthread_mutex_unlock(&w.lock);
    return w.status;
}

typedef struct step {
    sl_device *dev;
    sl_stream *s;
    sl_op_call call;
    float *host_in, *host_out;
    size_t bytes;
} step;

static int submit(step *t)
{
    const sl_device_ops *o = t->dev->ops;
    int rc = o->memcpy_h2d(t->dev, t->s, t->call.in[0].data, t->host_in, t->bytes);
    if (rc == SL_OK)
        rc = o->launch(t->dev, t->s, &t->call);
    if (rc == SL_OK)
        rc = o->memcpy_d2h(t->dev, t->s, t->host_out, t->call.out[0].data, t->bytes);
    return rc;
}

/* One step's round trip in us, completion by callback or by synchronize. */
static double one(step *t, int by_callback)
{
    uint64_t t0 = sl_ts_now_ns();
    if (submit(t) != SL_OK)
        return -1;
    int rc = by_callback ? callback_wait(t->dev, t->s) : t->dev->ops->synchronize(t->dev, t->s);
    if (rc != SL_OK)
        return -1;
    return (double) (sl_ts_now_ns() - t0) / 1e3;
}

/* ---- launch path ---- */

enum { LAUNCH_BATCH = 1000, LAUNCH_MAX_THREADS = 4 };

typedef struct launcher {
    sl_device *dev;
    sl_stream *s;
    sl_op_call call;
    long launches;
    double seconds;
    int failed;
    pthread_barrier_t *start;
} launcher;

static void *launch_loop(void *arg)
{
    launcher *l = arg;
    pthread_barrier_wait(l->start);
    uint64_t t0 = sl_ts_now_ns(), end = t0 + 500000000ull; /* 0.5 s */
    while (sl_ts_now_ns() < end && !l->failed) {
        for (int i = 0; i < LAUNCH_BATCH; i++)
            if (l->dev->ops->launch(l->dev, l->s, &l->call) != SL_OK)
                l->failed = 1;
        if (callback_wait(l->dev, l->s) != SL_OK) {
            l->failed = 1;
            break;
        }
        l->launches += LAUNCH_BATCH;
    }
    l->seconds = (double) (sl_ts_now_ns() - t0) / 1e9;
    return NULL;
}

/* Launches per second with `threads` threads, a stream each; 0 on failure. */
static double launch_rate(sl_device *dev, void *mem, int threads)
{
    launcher l[LAUNCH_MAX_THREADS] = {{0}};
    pthread_t tid[LAUNCH_MAX_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned) threads);
    sl_shape one = {.dtype = SL_F32, .ndim = 1, .dims = {1}};
    int ok = 1;
    for (int i = 0; i < threads; i++) {
        l[i].dev = dev;
        l[i].start = &start;
        l[i].call = (sl_op_call){.op = SL_OP_RELU, .n_in = 1, .n_out = 1};
        l[i].call.in[0] = l[i].call.out[0] = (sl_tensor_ref){(char *) mem + 256 * i, one};
        if (dev->ops->stream_create(dev, 0, &l[i].s) != SL_OK)
            ok = 0;
    }
    for (int i = 0; ok && i < threads; i++)
        pthread_create(&tid[i], NULL, launch_loop, &l[i]);
    double rate = 0, seconds = 0;
    for (int i = 0; ok && i < threads; i++) {
        pthread_join(tid[i], NULL);
        ok = ok && !l[i].failed;
        rate += (double) l[i].launches;
        seconds = l[i].seconds > seconds ? l[i].seconds : seconds;
    }
    for (int i = 0; i < threads; i++)
        if (l[i].s)
            dev->ops->stream_destroy(dev, l[i].s);
    pthread_barrier_destroy(&start);
    return ok && seconds > 0 ? rate / seconds : 0;
}

int main(int argc, char **argv)
{
    const char *spec = "cpu", *json = NULL;
    int rounds = 5, steps = 2000;
    long elems = 8192;
    static const struct option lo[] = {{"device", 1, NULL, 'd'}, {"rounds", 1, NULL, 'r'},
                                       {"steps", 1, NULL, 's'},  {"elems", 1, NULL, 'e'},
                                       {"json", 1, NULL, 'j'},   {0}};
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        switch (c) {
        case 'd':
            spec = optarg;
            break;
        case 'r':
            rounds = atoi(optarg);
            break;
        case 's':
            steps = atoi(optarg);
            break;
        case 'e':
            elems = atol(optarg);
            break;
        case 'j':
            json = optarg;
            break;
        default:
            fprintf(stderr, "usage: device_rtt [--device SPEC] [--rounds N] [--steps N] "
                            "[--elems N] [--json FILE]\n");
            return 2;
        }
    }
    if (rounds < 1 || steps < 10 || elems < 1 || elems > (1L << 24)) {
        fprintf(stderr, "device_rtt: rounds >= 1, steps >= 10, 1 <= elems <= 2^24\n");
        return 2;
    }
    step t = {.bytes = (size_t) elems * sizeof(float)};
    void *dev_mem;
    if (sl_dev_open(spec, &t.dev) != SL_OK) {
        fprintf(stderr, "device_rtt: cannot open device %s\n", spec);
        return 1;
    }
    const sl_device_ops *o = t.dev->ops;
    t.host_in = calloc((size_t) elems, sizeof(float));
    t.host_out = calloc((size_t) elems, sizeof(float));
    size_t slot = (t.bytes + 255) & ~(size_t) 255;
    if (!t.host_in || !t.host_out || o->mem_alloc(t.dev, 2 * slot, &dev_mem) != SL_OK ||
        o->stream_create(t.dev, 0, &t.s) != SL_OK) {
        fprintf(stderr, "device_rtt: out of memory\n");
        return 1;
    }
    for (long i = 0; i < elems; i++)
        t.host_in[i] = (float) (i % 7) - 3.0f;
    sl_shape shape = {.dtype = SL_F32, .ndim = 1, .dims = {elems}};
    t.call = (sl_op_call){.op = SL_OP_RELU, .n_in = 1, .n_out = 1};
    t.call.in[0] = (sl_tensor_ref){dev_mem, shape};
    t.call.out[0] = (sl_tensor_ref){(char *) dev_mem + slot, shape};

    double *lat[2], med[2][64] = {{0}}, p99[2][64] = {{0}};
    lat[0] = malloc((size_t) steps * sizeof(double));
    lat[1] = malloc((size_t) steps * sizeof(double));
    if (rounds > 64)
        rounds = 64;
    for (int w = 0; w < steps / 10; w++) /* warm-up: plans, first-touch, clocks */
        (void) one(&t, w & 1);
    for (int r = 0; r < rounds; r++) {
        for (int way = 0; way < 2; way++) {
            for (int i = 0; i < steps; i++) {
                lat[way][i] = one(&t, way == 0);
                if (lat[way][i] < 0) {
                    fprintf(stderr, "device_rtt: a step failed\n");
                    return 1;
                }
            }
            med[way][r] = sl_ts_median(lat[way], (size_t) steps);
            p99[way][r] = sl_ts_percentile(lat[way], (size_t) steps, 99);
        }
        if (t.host_out[3] != 0.0f || t.host_out[5] != 2.0f) {
            fprintf(stderr, "device_rtt: wrong relu output\n");
            return 1;
        }
        printf("round %d: callback p50 %.1f p99 %.1f us, sync p50 %.1f p99 %.1f us\n", r, med[0][r],
               p99[0][r], med[1][r], p99[1][r]);
    }
    double cb = sl_ts_median(med[0], (size_t) rounds), sy = sl_ts_median(med[1], (size_t) rounds);
    double cb99 = sl_ts_median(p99[0], (size_t) rounds),
           sy99 = sl_ts_median(p99[1], (size_t) rounds);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f, "{\"device\": \"%s\", \"elems\": %ld, \"steps\": %d", spec, elems, steps);
            bench_json_array(f, "callback_p50_us", med[0], rounds, "%.2f");
            bench_json_array(f, "sync_p50_us", med[1], rounds, "%.2f");
            bench_json_array(f, "callback_p99_us", p99[0], rounds, "%.2f");
            bench_json_array(f, "sync_p99_us", p99[1], rounds, "%.2f");
            fputs("}\n", f);
            fclose(f);
        }
    }
    printf("BENCH device_rtt device=%s elems=%ld callback_us=%.1f sync_us=%.1f "
           "callback_p99_us=%.1f sync_p99_us=%.1f ratio=%.3f\n",
           spec, elems, cb, sy, cb99, sy99, sy > 0 ? cb / sy : 0);
    for (int threads = 1; threads <= LAUNCH_MAX_THREADS; threads *= 4) {
        double best = 0; /* best of 3: the path's capacity, not a scheduling hiccup */
        for (int r = 0; r < 3; r++) {
            double rate = launch_rate(t.dev, dev_mem, threads);
            if (rate <= 0) {
                fprintf(stderr, "device_rtt: a launch failed\n");
                return 1;
            }
            best = rate > best ? rate : best;
        }
        printf("BENCH device_launch device=%s threads=%d launches_per_s=%.0f ns_per_launch=%.0f\n",
               spec, threads, best, 1e9 / best);
    }
    o->stream_destroy(t.dev, t.s);
    o->mem_free(t.dev, dev_mem);
    sl_dev_close(t.dev);
    free(t.host_in);
    free(t.host_out);
    free(lat[0]);
    free(lat[1]);
    return 0;
}
