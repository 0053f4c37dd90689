/* sim streams in real time: one worker thread per stream executing an
 * in-order command queue (workq.h), like the cpu backend, except that an op or copy
 * computes nothing and instead occupies its modeled time on the device.
 *
 * Timing. Each command is priced at submission (sl_sim_op_timing_math,
 * with the call's dtypes and math mode /
 * sl_sim_copy_timing). The worker submits its work to the device's
 * processor-sharing resource, capped at the op's occupancy (sl_sim_psc:
 * a small kernel leaves the SMs it cannot fill to other streams; with
 * every op at occupancy 1 this is plain processor sharing, sl_sim_ps, to
 * the bit) in its stream's priority class (a higher-priority stream's
 * blocks take the SMs first, after the running blocks of lower ones), with
 * the arrival time max(its launch's end, the stream's previous completion).
 * The launch is reserved when the command is submitted, as a host thread
 * launches asynchronously:
 *     launch end = max(submission, the stream's previous launch end,
 *                      the device's launch server free) + launch_ns
 * (the launch path is one FIFO server per device, shared by all its
 * streams: salusd's one context issues every tenant's kernels through one
 * driver and one front end, so N streams cannot launch N times as fast).
 * So the ops of a whole iteration, submitted together, launch back to back
 * while earlier ones run, and an op submitted only after the previous one
 * completed (salusd's stepwise ops, from a completion callback) pays its
 * launch after it, as eval/'s simulator models both. With host-launch
 * (sim.h) the submitting thread also spends that time, as it does in a GPU
 * driver: it returns when its launch ends, so launches reserve the path one
 * by one and several submitting threads interleave on it. A change of the
 * injected slowdown or a reset frees the path from then on; a launch
 * reserved before it is reserved again when its command runs. The worker then
 * sleeps on the device's condition variable until the model says the
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
#include "guard.h"
#include "sim_dev.h"

#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"
#include "workq.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* The payload of a work command (workq.h): an op or a copy. */
struct cmd {
    uint64_t launched_ns;  /* when its launch ends (reserved at submission) */
    uint64_t launch_epoch; /* the device's launch epoch it was reserved in */
    sl_sim_timing timing;
    void *zero_dst; /* d2h: host bytes to clear once the copy is done */
    size_t zero_n;
    bool is_op;          /* an op, not a copy (sl_sim_fail_next_ops counts ops) */
    sl_dev_graph *graph; /* a replay: its nodes, one after another (a reference) */
};

struct sl_stream {
    struct sl_sim_dev *dev;
    sl_workq *q;
    uint64_t clock_ns;      /* modeled completion of the last work; worker thread only */
    uint64_t launch_end_ns; /* its last launch's end; under the device's model_lock */
    uint64_t launch_epoch;  /* the device's launch epoch of launch_end_ns; likewise */
    int priority;           /* stream_create's: its ops' class on the SMs (sim.h, sl_sim_psc) */
    /* stream_set_workspace: accounted, never touched (outputs are not
     * computed); the submitting thread's alone */
    void *workspace;
    size_t workspace_bytes;
    /* the partition it runs on (stream_bind, while idle), NULL = the
     * whole device; read by the worker */
    _Atomic(sl_partition *) part;
    /* graph_begin .. graph_end: the ops recorded instead of run; the
     * submitting thread's alone */
    sl_dev_graph *recording;
};

/* A recorded iteration: each op's modeled timing, replayed as the nodes
 * of one launch. */
struct sl_dev_graph {
    sl_sim_timing *nodes;
    size_t n, cap;
    atomic_uint refs; /* graph_end's, and one per replay queued */
};

static void graph_unref(sl_dev_graph *g)
{
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) {
        sl_free(g->nodes);
        sl_free(g);
    }
}

static struct timespec to_timespec(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t) (ns / 1000000000ull),
                          .tv_nsec = (long) (ns % 1000000000ull)};
    return ts;
}

/* An injected slow device's factor (>= 1): factor <= 10^6 and modeled
 * times are far below 2^44 ns, so the products cannot overflow. */
static uint64_t slowdown(struct sl_sim_dev *d)
{
    uint64_t slow = atomic_load(&d->slowdown);
    return slow < 1 ? 1 : slow;
}

/* Reserves a launch of launch_ns, issued now, on the device's launch path
 * after the stream's previous launch (one of the current epoch); returns
 * when it ends. Called with model_lock held. */
static uint64_t reserve_launch_locked(sl_stream *s, uint64_t now, uint64_t launch_ns)
{
    struct sl_sim_dev *d = s->dev;
    if (s->launch_epoch != d->launch_epoch) {
        s->launch_epoch = d->launch_epoch;
        s->launch_end_ns = 0;
    }
    uint64_t at = now > s->launch_end_ns ? now : s->launch_end_ns;
    at = at > d->launch_free_ns ? at : d->launch_free_ns;
    at += launch_ns * slowdown(d);
    d->launch_free_ns = s->launch_end_ns = at;
    return at;
}

/* Occupies the modeled time of one op or copy on its resource. Called on the
 * worker thread without the stream lock. */
static int run_work(sl_stream *s, const struct cmd *c)
{
    struct sl_sim_dev *d = s->dev;
    const sl_sim_timing *t = &c->timing;
    sl_sim_psc *ps = &d->res[t->resource];
    sl_partition *part = atomic_load(&s->part);
    sl_sim_timing on_part;
    if (part && t->resource == SL_SIM_RES_DEVICE) {
        /* its SMs' share of the op (sim.h), on its own resource */
        pthread_mutex_lock(&d->model_lock);
        unsigned sms = part->sms;
        pthread_mutex_unlock(&d->model_lock);
        (void) sl_sim_part_timing(d->profile, t, sms, 1.0, &on_part);
        t = &on_part;
        ps = &part->ps;
    }
    sl_sim_psc_job job = {.user = s};
    uint64_t slow = slowdown(d);

    pthread_mutex_lock(&d->model_lock);
    uint64_t launched = c->launched_ns;
    if (c->launch_epoch != d->launch_epoch) /* reserved before a rebase: again, now */
        launched = reserve_launch_locked(s, sl_now_ns(), t->launch_ns);
    uint64_t start = s->clock_ns > launched ? s->clock_ns : launched;
    /* stream priorities order block dispatch on the SMs; the copy engines
     * of the host link serve streams alike */
    int prio = t->resource == SL_SIM_RES_DEVICE ? s->priority : 0;
    sl_sim_psc_submit_prio(ps, &job, start, t->work_ns * slow, t->occupancy, 0.0, prio,
                           t->block_ns * slow);
    /* Others' departure times move when this job joins: let them recompute. */
    pthread_cond_broadcast(&d->model_cv);
    for (;;) {
        if (sl_sim_psc_advance(ps, sl_now_ns(), NULL, NULL) > 0)
            pthread_cond_broadcast(&d->model_cv);
        if (job.done)
            break;
        struct timespec until = to_timespec(sl_sim_psc_next_event_ns(ps));
        int err = pthread_cond_timedwait(&d->model_cv, &d->model_lock, &until);
        if (err != 0 && err != ETIMEDOUT)
            sl_log_err("sim.wait", "timed wait failed: %s", strerror(err));
    }
    pthread_mutex_unlock(&d->model_lock);
    s->clock_ns = job.done_ns;
    /* the destination may be a client's shared memory */
    return sl_guarded_zero(c->zero_dst, c->zero_n);
}

/* Runs one work command on the worker thread: an injected fault, or its
 * modeled time. */
/* A replay (sim.h): its launch was reserved when it was queued; then each
 * node's work with graph_node_ns ahead of it, one after another, as one
 * command: the host launches nothing per node. */
static int replay(sl_stream *s, const struct cmd *c)
{
    const sl_dev_graph *g = c->graph;
    int rc = SL_OK;
    for (size_t i = 0; i < g->n && rc == SL_OK; i++) {
        struct cmd node = {.launch_epoch = c->launch_epoch, .timing = g->nodes[i], .is_op = true};
        node.timing.launch_ns = 0;
        node.timing.work_ns += s->dev->profile->graph_node_ns;
        node.launched_ns = i == 0 ? c->launched_ns : 0;
        rc = sl_sim_take_fault(s->dev, true);
        if (rc == SL_OK)
            rc = run_work(s, &node);
    }
    graph_unref(c->graph);
    return rc;
}

static int execute(void *ctx, void *payload)
{
    sl_stream *s = ctx;
    const struct cmd *c = payload;
    if (c->graph)
        return replay(s, c);
    int rc = sl_sim_take_fault(s->dev, c->is_op);
    return rc == SL_OK ? run_work(s, c) : rc;
}

static void skip(void *ctx, void *payload)
{
    (void) ctx;
    graph_unref(((struct cmd *) payload)->graph);
}

/* Host callbacks take real time: work after one starts when it returned. */
static void after_callback(void *ctx)
{
    sl_stream *s = ctx;
    s->clock_ns = sl_now_ns();
}

static const sl_workq_config sim_workq = {
    .payload_size = sizeof(struct cmd),
    .exec = execute,
    .skip = skip,
    .after_callback = after_callback,
    .log_id = "sim.stream",
    .lost_log_id = "sim.stream.lost",
};

/* Starts enqueuing work: a zeroed command with the queue's lock held, or
 * NULL with the error in *rc. */
static struct cmd *begin(sl_stream *s, int *rc)
{
    struct cmd *c = sl_workq_begin(s->q, rc);
    if (c)
        memset(c, 0, sizeof *c);
    return c;
}

static int commit(sl_stream *s, struct cmd *c)
{
    struct sl_sim_dev *d = s->dev;
    pthread_mutex_lock(&d->model_lock);
    uint64_t launched = reserve_launch_locked(s, sl_now_ns(), c->timing.launch_ns);
    c->launched_ns = launched;
    c->launch_epoch = d->launch_epoch;
    pthread_mutex_unlock(&d->model_lock);
    int rc = sl_workq_commit(s->q, c);
    /* a driver's launch call returns once the launch went through: the
     * submitting thread spends the launch path's time, spinning as the
     * driver does (a sleep would take tens of microseconds to wake) */
    if (d->host_launch)
        while (sl_now_ns() < launched)
            ;
    return rc;
}

int sl_sim_stream_create(sl_device *dev, int priority, sl_stream **out)
{
    sl_stream *s = sl_calloc(1, sizeof *s);
    if (!s)
        return SL_ENOMEM;
    s->priority = priority;
    atomic_init(&s->part, NULL);
    s->dev = dev->priv;
    s->clock_ns = sl_now_ns();
    char name[16];
    snprintf(name, sizeof name, "sl-sim%d-s", dev->index);
    int rc = sl_workq_create(&sim_workq, s, name, &s->q);
    if (rc != SL_OK) {
        sl_free(s);
        return rc;
    }
    *out = s;
    return SL_OK;
}

void sl_sim_stream_destroy(sl_device *dev, sl_stream *s)
{
    if (!s)
        return;
    sl_sim_graph_destroy(dev, s->recording);
    sl_workq_destroy(s->q);
    sl_free(s);
}

static int enqueue_copy(sl_device *dev, sl_stream *s, unsigned kind, void *dst, const void *src,
                        size_t n)
{
    struct sl_sim_dev *d = dev->priv;
    if (n == 0)
        return SL_OK;
    if (!dst || !src || s->recording)
        return SL_EINVAL;
    int rc;
    struct cmd *c = begin(s, &rc);
    if (!c)
        return rc;
    sl_sim_copy_timing(d->profile, kind, n, &c->timing);
    if (kind == SL_SIM_COPY_D2H) {
        c->zero_dst = dst;
        c->zero_n = n;
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
    int rc =
        sl_sim_op_timing_math(d->profile, call->op, &call->attrs, call->math, in, out, &timing);
    if (rc != SL_OK)
        return rc;

    if (s->recording) {
        sl_dev_graph *g = s->recording;
        if (g->n == g->cap) {
            size_t cap = g->cap ? 2 * g->cap : 64;
            sl_sim_timing *grown = sl_reallocarray(g->nodes, cap, sizeof *grown);
            if (!grown)
                return SL_ENOMEM;
            g->nodes = grown, g->cap = cap;
        }
        g->nodes[g->n++] = timing;
        return SL_OK;
    }
    struct cmd *c = begin(s, &rc);
    if (!c)
        return rc;
    c->timing = timing;
    c->is_op = true;
    return commit(s, c);
}

int sl_sim_graph_begin(sl_device *dev, sl_stream *s)
{
    (void) dev;
    if (s->recording)
        return SL_EINVAL;
    s->recording = sl_calloc(1, sizeof *s->recording);
    if (!s->recording)
        return SL_ENOMEM;
    atomic_init(&s->recording->refs, 1);
    return SL_OK;
}

int sl_sim_graph_end(sl_device *dev, sl_stream *s, sl_dev_graph **out, size_t *bytes, char *reason,
                     size_t len)
{
    struct sl_sim_dev *d = dev->priv;
    sl_dev_graph *g = s->recording;
    s->recording = NULL;
    if (!g)
        return SL_EINVAL;
    unsigned left = atomic_load(&d->fail_graphs);
    while (left && !atomic_compare_exchange_weak(&d->fail_graphs, &left, left - 1))
        ;
    if (left || g->n == 0) {
        snprintf(reason, len, "%s", left ? "injected fault: instantiation failed" : "no ops");
        sl_sim_graph_destroy(dev, g);
        return left ? SL_EDEVICE : SL_EINVAL;
    }
    /* a CUDA graph's executable holds a few hundred bytes of device memory
     * per kernel node (its launch parameters) */
    *bytes = g->n * 256;
    *out = g;
    return SL_OK;
}

/* The replay: one command, its launch of graph_launch_ns on the device's
 * launch path (replay, above). */
int sl_sim_graph_launch(sl_device *dev, sl_stream *s, sl_dev_graph *g)
{
    struct sl_sim_dev *d = dev->priv;
    if (!g || s->recording)
        return SL_EINVAL;
    int rc;
    struct cmd *c = begin(s, &rc);
    if (!c)
        return rc;
    c->timing.launch_ns = d->profile->graph_launch_ns;
    c->is_op = true;
    c->graph = g;
    atomic_fetch_add(&g->refs, 1);
    return commit(s, c);
}

/* Replays still queued hold their own references. */
void sl_sim_graph_destroy(sl_device *dev, sl_dev_graph *g)
{
    (void) dev;
    graph_unref(g);
}

int sl_sim_stream_set_workspace(sl_device *dev, sl_stream *s, void *ptr, size_t bytes)
{
    (void) dev;
    if ((!ptr && bytes) || ((uintptr_t) ptr & 255))
        return SL_EINVAL;
    s->workspace = bytes ? ptr : NULL;
    s->workspace_bytes = bytes;
    return SL_OK;
}

int sl_sim_host_callback(sl_device *dev, sl_stream *s, sl_host_fn fn, void *arg)
{
    (void) dev;
    if (!fn || s->recording)
        return SL_EINVAL;
    return sl_workq_host_callback(s->q, fn, arg);
}

int sl_sim_synchronize(sl_device *dev, sl_stream *s)
{
    (void) dev;
    return sl_workq_synchronize(s->q);
}

uint64_t sl_sim_stream_modeled_ns(sl_stream *s)
{
    /* the worker wrote it before the work completed, and synchronize's
     * wait ordered that before this read */
    return s->clock_ns;
}

int sl_sim_inject_error(sl_stream *s, int code)
{
    if (!s || code <= SL_OK || code >= SL_E_COUNT)
        return SL_EINVAL;
    return sl_workq_inject_error(s->q, code);
}

/* The worker reads the binding when it runs a command; the caller's
 * stream is idle (device.h), so no command sees it change. */
int sl_sim_stream_bind(sl_device *dev, sl_stream *s, sl_partition *p)
{
    if (p && p->dev != dev->priv)
        return SL_EINVAL;
    atomic_store(&s->part, p);
    return SL_OK;
}
