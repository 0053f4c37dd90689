/* sim streams in real time: one worker thread per stream executing an
 * in-order command queue, like the cpu backend's, except that an op or copy
 * computes nothing and instead occupies its modeled time on the device.
 *
 * Timing. Each command is priced at submission (sl_sim_op_timing /
 * sl_sim_copy_timing). The worker submits its work to the device's
 * processor-sharing resource with the arrival time
 *     max(the stream's previous completion, submission time) + launch_ns
 * and sleeps on the device's condition variable until the model says the
 * work departed. Departure times come from the model, not from when a thread
 * woke up: back-to-back ops on one stream follow each other at the modeled
 * times, and wake-up latency (tens of us on a loaded 2-core machine) does not
 * add up over an iteration of hundreds of ops. The stream then continues from
 * the modeled completion time. Host callbacks run on the worker thread and
 * take real time; work after a callback starts when it has returned.
 *
 * Device to host copies write zeros into the host destination: the host
 * side is real memory that salusd hands to clients, so it must not keep
 * stale or uninitialised bytes. Device addresses are never touched. */
#include "sim_dev.h"

#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Nodes made at stream creation; more are allocated only if the queue ever
 * grows deeper. */
#define PREALLOC_NODES 32

enum cmd_kind { CMD_WORK, CMD_CALLBACK, CMD_FAIL };

struct cmd {
    struct cmd *next;
    enum cmd_kind kind;
    uint64_t submit_ns;
    union {
        struct {
            sl_sim_timing timing;
            void *zero_dst; /* d2h: host bytes to clear once the copy is done */
            size_t zero_n;
            bool is_op; /* an op, not a copy (sl_sim_fail_next_ops counts ops) */
        } work;
        struct {
            sl_host_fn fn;
            void *arg;
        } cb;
        int fail;
    } u;
};

struct sl_stream {
    struct sl_sim_dev *dev;
    pthread_mutex_t lock;   /* guards every field below except clock_ns */
    pthread_cond_t work_cv; /* worker: commands arrived or stopping */
    pthread_cond_t done_cv; /* synchronize: a command finished */
    struct cmd *head, *tail;
    struct cmd *free_nodes;
    uint64_t submitted, completed; /* commands ever enqueued / finished */
    int sticky;                    /* first error since the last callback */
    unsigned sync_waiters;
    bool worker_asleep, stopping;
    uint64_t clock_ns; /* modeled completion of the last work; worker thread only */
    pthread_t worker;
};

static void free_list(struct cmd *c)
{
    while (c) {
        struct cmd *next = c->next;
        sl_free(c);
        c = next;
    }
}

static struct timespec to_timespec(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t) (ns / 1000000000ull),
                          .tv_nsec = (long) (ns % 1000000000ull)};
    return ts;
}

/* Occupies the modeled time of one op or copy on its resource. Called on the
 * worker thread without the stream lock. */
static void run_work(sl_stream *s, const struct cmd *c)
{
    struct sl_sim_dev *d = s->dev;
    const sl_sim_timing *t = &c->u.work.timing;
    sl_sim_ps *ps = &d->res[t->resource];
    uint64_t start = s->clock_ns > c->submit_ns ? s->clock_ns : c->submit_ns;
    sl_sim_ps_job job = {.user = s};
    /* an injected slow device: factor <= 10^6 and modeled times are far
     * below 2^44 ns, so the products cannot overflow */
    uint64_t slow = atomic_load(&d->slowdown);
    if (slow < 1)
        slow = 1;

    pthread_mutex_lock(&d->model_lock);
    sl_sim_ps_submit(ps, &job, start + t->launch_ns * slow, t->work_ns * slow);
    /* Others' departure times move when this job joins: let them recompute. */
    pthread_cond_broadcast(&d->model_cv);
    for (;;) {
        if (sl_sim_ps_advance(ps, sl_now_ns(), NULL, NULL) > 0)
            pthread_cond_broadcast(&d->model_cv);
        if (job.done)
            break;
        struct timespec until = to_timespec(sl_sim_ps_next_event_ns(ps));
        int err = pthread_cond_timedwait(&d->model_cv, &d->model_lock, &until);
        if (err != 0 && err != ETIMEDOUT)
            sl_log_err("sim.wait", "timed wait failed: %s", strerror(err));
    }
    pthread_mutex_unlock(&d->model_lock);
    s->clock_ns = job.done_ns;
    if (c->u.work.zero_n)
        memset(c->u.work.zero_dst, 0, c->u.work.zero_n);
}

static void *worker_main(void *arg)
{
    sl_stream *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->head && !s->stopping) {
            s->worker_asleep = true;
            pthread_cond_wait(&s->work_cv, &s->lock);
            s->worker_asleep = false;
        }
        struct cmd *c = s->head;
        if (!c)
            break; /* stopping and drained */
        s->head = c->next;
        if (!s->head)
            s->tail = NULL;

        /* Sticky error: skip work until the next callback, which takes it. */
        int status = s->sticky, rc = SL_OK;
        if (c->kind == CMD_CALLBACK)
            s->sticky = SL_OK;
        pthread_mutex_unlock(&s->lock);

        if (c->kind == CMD_CALLBACK) {
            c->u.cb.fn(c->u.cb.arg, status);
            s->clock_ns = sl_now_ns();
        } else if (status == SL_OK) {
            if (c->kind == CMD_WORK) {
                rc = sl_sim_take_fault(s->dev, c->u.work.is_op);
                if (rc == SL_OK)
                    run_work(s, c);
            } else {
                rc = c->u.fail;
            }
        }

        pthread_mutex_lock(&s->lock);
        if (rc != SL_OK && s->sticky == SL_OK)
            s->sticky = rc;
        c->next = s->free_nodes;
        s->free_nodes = c;
        s->completed++;
        if (s->sync_waiters)
            pthread_cond_broadcast(&s->done_cv);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Starts an enqueue: returns a node with s->lock held, or NULL (lock not
 * held) with the error in *rc. The caller fills the node and calls commit. */
static struct cmd *begin(sl_stream *s, int *rc)
{
    pthread_mutex_lock(&s->lock);
    struct cmd *c = NULL;
    if (!s->stopping) {
        c = s->free_nodes;
        if (c)
            s->free_nodes = c->next;
        else
            c = sl_malloc(sizeof *c);
    }
    if (!c) {
        *rc = s->stopping ? SL_ESHUTDOWN : SL_ENOMEM;
        pthread_mutex_unlock(&s->lock);
        return NULL;
    }
    memset(c, 0, sizeof *c);
    return c;
}

static int commit(sl_stream *s, struct cmd *c)
{
    c->next = NULL;
    c->submit_ns = sl_now_ns();
    if (s->tail)
        s->tail->next = c;
    else
        s->head = c;
    s->tail = c;
    s->submitted++;
    if (s->worker_asleep)
        pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->lock);
    return SL_OK;
}

int sl_sim_stream_create(sl_device *dev, int priority, sl_stream **out)
{
    (void) priority; /* advisory: the sharing model gives every stream an equal share */
    sl_stream *s = sl_calloc(1, sizeof *s);
    if (!s)
        return SL_ENOMEM;
    s->dev = dev->priv;
    s->clock_ns = sl_now_ns();
    for (unsigned i = 0; i < PREALLOC_NODES; i++) {
        struct cmd *c = sl_malloc(sizeof *c);
        if (!c)
            goto out_free_nodes;
        c->next = s->free_nodes;
        s->free_nodes = c;
    }
    if (pthread_mutex_init(&s->lock, NULL) != 0)
        goto out_free_nodes;
    if (pthread_cond_init(&s->work_cv, NULL) != 0)
        goto out_destroy_lock;
    if (pthread_cond_init(&s->done_cv, NULL) != 0)
        goto out_destroy_work_cv;
    int err = pthread_create(&s->worker, NULL, worker_main, s);
    if (err != 0) {
        sl_log_err("sim.stream", "cannot start a stream worker thread: %s", strerror(err));
        goto out_destroy_done_cv;
    }
    char name[16];
    snprintf(name, sizeof name, "sl-sim%d-s", dev->index);
    (void) pthread_setname_np(s->worker, name);
    *out = s;
    return SL_OK;

out_destroy_done_cv:
    pthread_cond_destroy(&s->done_cv);
out_destroy_work_cv:
    pthread_cond_destroy(&s->work_cv);
out_destroy_lock:
    pthread_mutex_destroy(&s->lock);
out_free_nodes:
    free_list(s->free_nodes);
    sl_free(s);
    return SL_ENOMEM;
}

void sl_sim_stream_destroy(sl_device *dev, sl_stream *s)
{
    (void) dev;
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->worker, NULL); /* the worker drains the queue first */
    if (s->sticky != SL_OK)
        sl_log_warn("sim.stream.lost", "stream destroyed with an unreported error: %s",
                    sl_strerror(s->sticky));
    free_list(s->free_nodes);
    pthread_cond_destroy(&s->done_cv);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->lock);
    sl_free(s);
}

static int enqueue_copy(sl_device *dev, sl_stream *s, unsigned kind, void *dst, const void *src,
                        size_t n)
{
    struct sl_sim_dev *d = dev->priv;
    if (n == 0)
        return SL_OK;
    if (!dst || !src)
        return SL_EINVAL;
    int rc;
    struct cmd *c = begin(s, &rc);
    if (!c)
        return rc;
    c->kind = CMD_WORK;
    sl_sim_copy_timing(d->profile, kind, n, &c->u.work.timing);
    if (kind == SL_SIM_COPY_D2H) {
        c->u.work.zero_dst = dst;
        c->u.work.zero_n = n;
    }
    return commit(s, c);
}

int sl_sim_memcpy_h2d(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n)
{
    return enqueue_copy(dev, s, SL_SIM_COPY_H2D, dst, src, n);
}

int sl_sim_memcpy_d2h(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n)
{
    return enqueue_copy(dev, s, SL_SIM_COPY_D2H, dst, src, n);
}

int sl_sim_memcpy_d2d(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n)
{
    return enqueue_copy(dev, s, SL_SIM_COPY_D2D, dst, src, n);
}

int sl_sim_launch(sl_device *dev, sl_stream *s, const sl_op_call *call)
{
    struct sl_sim_dev *d = dev->priv;
    if (!call)
        return SL_EINVAL;
    const sl_op_def *def = sl_op_get(call->op);
    if (!def || !def->name || !def->cost)
        return SL_EUNSUPPORTED;
    if (call->n_in != def->n_in || call->n_out != def->n_out)
        return SL_EINVAL;
    sl_shape in[SL_OP_MAX_IN], out[SL_OP_MAX_OUT];
    for (unsigned i = 0; i < call->n_in; i++)
        in[i] = call->in[i].shape;
    for (unsigned i = 0; i < call->n_out; i++)
        out[i] = call->out[i].shape;
    sl_sim_timing timing;
    int rc = sl_sim_op_timing(d->profile, call->op, &call->attrs, in, out, &timing);
    if (rc != SL_OK)
        return rc;

    struct cmd *c = begin(s, &rc);
    if (!c)
        return rc;
    c->kind = CMD_WORK;
    c->u.work.timing = timing;
    c->u.work.is_op = true;
    return commit(s, c);
}

int sl_sim_host_callback(sl_device *dev, sl_stream *s, sl_host_fn fn, void *arg)
{
    (void) dev;
    if (!fn)
        return SL_EINVAL;
    int rc;
    struct cmd *c = begin(s, &rc);
    if (!c)
        return rc;
    c->kind = CMD_CALLBACK;
    c->u.cb.fn = fn;
    c->u.cb.arg = arg;
    return commit(s, c);
}

int sl_sim_synchronize(sl_device *dev, sl_stream *s)
{
    (void) dev;
    pthread_mutex_lock(&s->lock);
    /* Wait for what was submitted before this call, not for work that
     * callbacks keep adding meanwhile. */
    uint64_t target = s->submitted;
    s->sync_waiters++;
    while (s->completed < target)
        pthread_cond_wait(&s->done_cv, &s->lock);
    s->sync_waiters--;
    int rc = s->sticky;
    s->sticky = SL_OK;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sl_sim_inject_error(sl_stream *s, int code)
{
    if (!s || code <= SL_OK || code >= SL_E_COUNT)
        return SL_EINVAL;
    int rc;
    struct cmd *c = begin(s, &rc);
    if (!c)
        return rc;
    c->kind = CMD_FAIL;
    c->u.fail = code;
    return commit(s, c);
}
