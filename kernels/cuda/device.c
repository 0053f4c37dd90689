/* The cuda device: cudaMalloc memory, one CUDA stream (with its own
 * execution context: cuBLAS and cuDNN handles, workspace, error flag; see
 * exec.c) per salus stream, and host callbacks.
 *
 * Sticky errors. A CUDA stream has no per-stream error state, so the contract
 * of device.h is kept here: a failure detected while enqueueing (a kernel
 * launch or cuBLAS call refused, an asynchronous fault surfacing in a later
 * call) becomes the stream's sticky error and the submission still returns
 * SL_OK; later submissions are skipped until a host callback takes the error.
 * Only contract errors (SL_EUNSUPPORTED, SL_EINVAL, SL_ENOMEM) come back
 * synchronously. A context fault (SL_EDEVICERESET) leaves CUDA unable to run
 * any host function: host_callback then fails synchronously, and a callback
 * already enqueued before the fault never runs.
 *
 * Errors found by a kernel (a label out of range, Adam before its first
 * step) cannot be seen at submission: the kernel raises the stream's device
 * flag, every later custom kernel of the stream skips its work while it is
 * set, and the next host callback (or synchronize) collects it as SL_EINVAL
 * and clears it (exec.c). cuBLAS, cuDNN and copies after the failure still
 * run, on void data: their results are void with the error.
 *
 * Host callbacks. A callback is an event recorded on the stream; the
 * device's dispatcher thread polls the oldest pending event of every stream
 * and runs the callbacks whose events have completed, in each stream's
 * order. It polls without sleeping for SPIN_NS after anything was submitted
 * or completed, then naps NAP_NS between polls until a submission wakes it:
 * a short step is seen done within a microsecond or two, a long one costs
 * one event query per stream every NAP_NS. cudaLaunchHostFunc, the obvious
 * tool, was measured on an H200 at twice the round trip of a synchronize
 * for a small step (74 against 35 us, bench/device_rtt): its function runs
 * on a CUDA thread that wakes late, must hand the callback to a thread
 * allowed to call CUDA, and holds the stream until it returns.
 *
 * Device loss and reset (device.h error classes). A context fault
 * (SL_EDEVICERESET: illegal address, launch failure, ECC; see status.c)
 * leaves events that never complete, yet the contract promises every
 * callback runs. So each callback is kept on the device's pending list until
 * its event completes; when a fault is seen (a submission or synchronisation
 * reports it, or the dispatcher's event query does), the device is marked
 * lost and every pending callback is handed to the dispatcher with
 * SL_EDEVICERESET; later callbacks go straight to it. reset() is
 * cudaDeviceReset: it
 * destroys every allocation and stream, which is why the contract has the
 * caller destroy and free them first, then opens a fresh primary context
 * and probes it. CUDA documents its sticky errors as leaving the process in
 * an inconsistent state that only a new process clears: when the probe
 * still fails, reset() returns SL_ENODEV and salusd exits (status 3) for
 * its supervisor to restart it; its clients then reconnect (salus.h).
 *
 * Clients' shared memory. The host side of a copy in or out may be a
 * client's segment (device.h). cudaMemcpyAsync on pageable memory has the
 * driver copy it through its own staging buffer on the CPU, where a fault
 * on a client's page would be a signal inside the driver that nothing can
 * recover from. Segments are therefore pinned when they are attached
 * (host_register): copies of them are DMA, and the pinned pages stay with
 * salusd whatever the client does to its file. */
#include "cuda.h"

#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>

struct cb_node {
    struct cb_node *next;                  /* dispatcher queue, or the free list */
    struct cb_node *pend_prev, *pend_next; /* in cuda_dev.pending until its event completes */
    struct cb_node *s_prev, *s_next;       /* in its stream's queue, in submission order */
    sl_stream *stream;
    sl_host_fn fn;
    void *arg;
    int status;
    bool pending;
    cudaEvent_t ev;          /* recorded after the work the callback follows */
    int *flag, *flag_mapped; /* the stream's device flag as of the event (host, device address) */
    unsigned ev_gen;         /* the cuda_dev.gen ev and flag were made in (a reset destroys both) */
};

/* A stream's oldest pending callback, and its status once its event completed. */
struct poll_slot {
    struct cb_node *n;
    int status;
    bool done;
};

/* The dispatcher polls pending events without sleeping for SPIN_NS after
 * the last submission or completion, then sleeps NAP_NS between polls. */
#define SPIN_NS 200000L
#define NAP_NS 50000L

struct cuda_dev {
    int ordinal;
    bool bf16;                     /* sm_80 or later: ops run in bf16 too */
    int prio_least, prio_greatest; /* numerically: greatest <= least */
    bool cb_ready;                 /* lock and condvars initialised */
    bool cb_thread_running;
    pthread_mutex_t cb_lock;   /* guards the queue, cb_stop and every stream's cb counters */
    pthread_cond_t cb_work_cv; /* dispatcher: callbacks submitted or ready, or stopping */
    pthread_cond_t cb_done_cv; /* synchronize: a callback finished */
    struct cb_node *cb_head, *cb_tail;
    bool cb_stop;
    pthread_t cb_thread;
    /* callbacks whose events have not completed, oldest first */
    struct cb_node *pending, *pending_tail;
    /* nodes a failed submission's flag kernel may still write: kept until a
     * reset or close */
    struct cb_node *retired;
    bool kicked;                /* a submission since the dispatcher last looked */
    struct cb_node *free_nodes; /* spare nodes, with their events */
    struct poll_slot *polled;   /* the dispatcher's: stream heads of one poll */
    size_t polled_cap;
    bool napping; /* the dispatcher sleeps: a submission signals it */
    unsigned gen; /* resets so far: events of an older one are gone */
    bool lost;    /* a context fault: see the header comment */
    /* host memory pinned for copies (host_register), pinned again after a
     * reset (which drops every registration); reg_lock serialises pinning,
     * never taken with cb_lock */
    bool reg_ready;
    pthread_mutex_t reg_lock;
    struct host_reg *regs;
    sl_cuda_green green; /* compute partitions (green.c) */
    /* injected faults (inject_fault): graph instantiations left to refuse */
    atomic_uint fail_graphs;
};

struct host_reg {
    struct host_reg *next;
    void *ptr;
    size_t bytes;
};

struct sl_stream {
    cudaStream_t stream;
    pthread_mutex_t launch_lock; /* guards exec: handles, workspace, plan caches */
    sl_cuda_exec exec;
    atomic_int sticky;              /* first error since the last callback */
    uint64_t cb_submitted, cb_done; /* under cuda_dev.cb_lock */
    struct cb_node *pend_tail;      /* its newest pending callback, under cb_lock */
    int cuda_prio;                  /* CUDA priority, as created */
    bool recording;                 /* graph_begin .. graph_end; launch_lock held */
    sl_partition *part;             /* green.c's: the partition it runs in */
};

/* ---- callback dispatch ---- */

/* Queues n for the dispatcher. cb_lock held. */
static void dispatch_locked(struct cuda_dev *d, struct cb_node *n)
{
    n->next = NULL;
    if (d->cb_tail)
        d->cb_tail->next = n;
    else
        d->cb_head = n;
    d->cb_tail = n;
    pthread_cond_signal(&d->cb_work_cv);
}

static void pending_add(struct cuda_dev *d, struct cb_node *n)
{
    n->pending = true;
    n->pend_next = NULL;
    n->pend_prev = d->pending_tail;
    if (d->pending_tail)
        d->pending_tail->pend_next = n;
    else
        d->pending = n;
    d->pending_tail = n;
    sl_stream *s = n->stream;
    n->s_next = NULL;
    n->s_prev = s->pend_tail;
    if (s->pend_tail)
        s->pend_tail->s_next = n;
    s->pend_tail = n;
}

static void pending_remove(struct cuda_dev *d, struct cb_node *n)
{
    if (n->pend_prev)
        n->pend_prev->pend_next = n->pend_next;
    else
        d->pending = n->pend_next;
    if (n->pend_next)
        n->pend_next->pend_prev = n->pend_prev;
    else
        d->pending_tail = n->pend_prev;
    sl_stream *s = n->stream;
    if (n->s_prev)
        n->s_prev->s_next = n->s_next;
    if (n->s_next)
        n->s_next->s_prev = n->s_prev;
    else
        s->pend_tail = n->s_prev;
    n->pending = false;
}

/* A node for a callback, with an event of the current context when the
 * device is not lost. cb_lock not held. */
static struct cb_node *node_get(struct cuda_dev *d)
{
    pthread_mutex_lock(&d->cb_lock);
    struct cb_node *n = d->free_nodes;
    if (n)
        d->free_nodes = n->next;
    unsigned gen = d->gen;
    bool lost = d->lost;
    pthread_mutex_unlock(&d->cb_lock);
    if (!n && !(n = sl_calloc(1, sizeof *n)))
        return NULL;
    if (!lost && (!n->ev || n->ev_gen != gen)) {
        void *host = NULL, *mapped = NULL;
        n->ev = NULL;
        if (cudaEventCreateWithFlags(&n->ev, cudaEventDisableTiming) != cudaSuccess ||
            cudaHostAlloc(&host, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable) !=
                cudaSuccess ||
            cudaHostGetDevicePointer(&mapped, host, 0) != cudaSuccess) {
            if (n->ev)
                (void) cudaEventDestroy(n->ev);
            if (host)
                (void) cudaFreeHost(host);
            sl_free(n);
            return NULL;
        }
        n->flag = host;
        *n->flag = 0;
        n->flag_mapped = mapped;
        n->ev_gen = gen;
    }
    return n;
}

/* Keeps a finished node for the next callback (node_get remakes what a
 * reset destroyed since). cb_lock held. */
static void node_put(struct cuda_dev *d, struct cb_node *n)
{
    n->next = d->free_nodes;
    d->free_nodes = n;
}

/* Frees the spare nodes; their events too when `destroy` (else a reset
 * already destroyed them). cb_lock held or the dispatcher stopped. */
static void nodes_free(struct cuda_dev *d, bool destroy)
{
    for (struct cb_node *n = d->retired, *next; n; n = next) { /* their kernels have run by now */
        next = n->next;
        n->next = d->free_nodes;
        d->free_nodes = n;
    }
    d->retired = NULL;
    for (struct cb_node *n = d->free_nodes, *next; n; n = next) {
        next = n->next;
        if (destroy && n->ev && n->ev_gen == d->gen) {
            (void) cudaEventDestroy(n->ev);
            (void) cudaFreeHost(n->flag);
        }
        sl_free(n);
    }
    d->free_nodes = NULL;
}

/* The context faulted: every pending callback runs now, with the fault. */
static void mark_lost_locked(struct cuda_dev *d)
{
    if (!d->lost)
        sl_log_err("cuda.lost", "cuda:%d: context fault; the device is lost until it is reset",
                   d->ordinal);
    d->lost = true;
    while (d->pending) { /* oldest first: each stream's callbacks stay in order */
        struct cb_node *n = d->pending;
        pending_remove(d, n);
        n->status = SL_EDEVICERESET;
        dispatch_locked(d, n);
    }
}

static void mark_lost(struct cuda_dev *d)
{
    pthread_mutex_lock(&d->cb_lock);
    mark_lost_locked(d);
    pthread_mutex_unlock(&d->cb_lock);
}

/* Polls the event of every stream's oldest pending callback, queues those
 * that completed (their kernels' device flag collected), and reports
 * whether any did. cb_lock held; dropped while CUDA is asked. A node cannot
 * be freed meanwhile: only this thread runs and frees dispatched nodes. */
static bool poll_events(struct cuda_dev *d)
{
    size_t n = 0;
    for (struct cb_node *c = d->pending; c; c = c->pend_next) {
        if (c->s_prev)
            continue; /* not its stream's oldest */
        if (n == d->polled_cap) {
            size_t cap = n ? 2 * n : 16;
            struct poll_slot *grown = sl_reallocarray(d->polled, cap, sizeof *grown);
            if (!grown)
                break; /* the rest wait for the next poll */
            d->polled = grown;
            d->polled_cap = cap;
        }
        d->polled[n++] = (struct poll_slot){.n = c};
    }
    pthread_mutex_unlock(&d->cb_lock);
    bool faulted = false;
    for (size_t i = 0; i < n; i++) {
        struct poll_slot *p = &d->polled[i];
        cudaError_t e = cudaEventQuery(p->n->ev);
        if (e == cudaErrorNotReady)
            continue;
        p->done = true;
        p->status = e == cudaSuccess ? SL_OK : SL_CUDA_RT("cuda.callback", e);
        if (p->status == SL_EDEVICERESET)
            faulted = true;
        int flag = sl_cuda_flag_take(p->n->flag);
        if (p->status == SL_OK)
            p->status = flag;
    }
    if (faulted)
        mark_lost(d); /* every pending callback, these too, runs with the fault */
    pthread_mutex_lock(&d->cb_lock);
    bool progress = faulted;
    for (size_t i = 0; i < n; i++) {
        struct poll_slot *p = &d->polled[i];
        if (p->done && p->n->pending) { /* not taken by a loss meanwhile */
            pending_remove(d, p->n);
            if (p->n->status == SL_OK)
                p->n->status = p->status;
            dispatch_locked(d, p->n);
            progress = true;
        }
    }
    return progress;
}

static void *dispatcher_main(void *arg)
{
    struct cuda_dev *d = arg;
    if (cudaSetDevice(d->ordinal) != cudaSuccess)
        sl_log_err("cuda.callback", "cuda:%d: the dispatcher cannot select the device", d->ordinal);
    uint64_t busy = sl_now_ns(); /* the last submission or completion */
    pthread_mutex_lock(&d->cb_lock);
    for (;;) {
        struct cb_node *n = d->cb_head;
        if (n) {
            d->cb_head = n->next;
            if (!d->cb_head)
                d->cb_tail = NULL;
            pthread_mutex_unlock(&d->cb_lock);
            n->fn(n->arg, n->status);
            pthread_mutex_lock(&d->cb_lock);
            n->stream->cb_done++;
            pthread_cond_broadcast(&d->cb_done_cv);
            node_put(d, n);
            busy = sl_now_ns();
            continue;
        }
        if (d->cb_stop)
            break;
        if (!d->pending || d->lost) {
            d->napping = true;
            pthread_cond_wait(&d->cb_work_cv, &d->cb_lock);
            d->napping = false;
            busy = sl_now_ns();
            continue;
        }
        if (poll_events(d) || d->kicked) {
            d->kicked = false;
            busy = sl_now_ns();
            continue;
        }
        uint64_t t = sl_now_ns();
        if (t - busy < SPIN_NS) {
            pthread_mutex_unlock(&d->cb_lock);
            sched_yield();
            pthread_mutex_lock(&d->cb_lock);
            continue;
        }
        d->napping = true;
        if (sl_cond_wait_until(&d->cb_work_cv, &d->cb_lock, t + NAP_NS) != ETIMEDOUT)
            busy = sl_now_ns(); /* woken by a submission */
        d->napping = false;
    }
    pthread_mutex_unlock(&d->cb_lock);
    return NULL;
}

/* ---- open / close / memory ---- */

static int use_device(const struct cuda_dev *d)
{
    return SL_CUDA_RT("cuda.setdev", cudaSetDevice(d->ordinal));
}

static int cuda_open(sl_device *dev, int index, const char *arg)
{
    struct cuda_dev *d = dev->priv;
    if (arg[0] != '\0') {
        sl_log_err("cuda.open.arg", "the cuda backend takes no argument, got \"%s\"", arg);
        return SL_EINVAL;
    }
    int count = 0;
    int rc = SL_CUDA_RT("cuda.open", cudaGetDeviceCount(&count));
    if (rc != SL_OK) {
        sl_log_err(
            "cuda.nodev",
            "no usable CUDA device (driver missing or no GPU): the cuda backend is unavailable");
        return SL_ENODEV;
    }
    if (index >= count) {
        sl_log_err("cuda.nodev", "cuda:%d requested but %d CUDA device(s) present", index, count);
        return SL_ENODEV;
    }
    d->ordinal = index;
    if ((rc = use_device(d)) != SL_OK)
        return rc;

    struct cudaDeviceProp prop;
    if ((rc = SL_CUDA_RT("cuda.open", cudaGetDeviceProperties(&prop, index))) != SL_OK)
        return rc;
    if ((rc = SL_CUDA_RT("cuda.open", cudaDeviceGetStreamPriorityRange(
                                          &d->prio_least, &d->prio_greatest))) != SL_OK)
        return rc;
    dev->total_bytes = prop.totalGlobalMem;
    d->bf16 = prop.major >= 8;
    /* cuBLAS asks 32 MiB on Hopper (4 MiB before); cuDNN's fastest
     * convolution algorithms for a small CNN fit in the rest */
    dev->workspace_hint = 64ull << 20;
    snprintf(dev->description, sizeof dev->description, "cuda:%d (%.64s, %.1f GiB, sm_%d%d)", index,
             prop.name, (double) prop.totalGlobalMem / (1 << 30), prop.major, prop.minor);

    if (pthread_mutex_init(&d->reg_lock, NULL) != 0)
        return SL_ENOMEM;
    d->reg_ready = true;
    if (pthread_mutex_init(&d->cb_lock, NULL) != 0)
        return SL_ENOMEM;
    if (sl_cond_init_monotonic(&d->cb_work_cv) != 0) /* the dispatcher's naps */
        goto out_destroy_lock;
    if (pthread_cond_init(&d->cb_done_cv, NULL) != 0)
        goto out_destroy_work_cv;
    d->cb_ready = true;
    if (pthread_create(&d->cb_thread, NULL, dispatcher_main, d) != 0)
        return SL_ENOMEM; /* close() undoes the rest */
    d->cb_thread_running = true;
    sl_cuda_green_init(&d->green, index);
    sl_log_info("cuda.green", "cuda:%d compute partitions: %s", index, d->green.note);
    return SL_OK;

out_destroy_work_cv:
    pthread_cond_destroy(&d->cb_work_cv);
out_destroy_lock:
    pthread_mutex_destroy(&d->cb_lock);
    return SL_ENOMEM;
}

static void cuda_close(sl_device *dev)
{
    struct cuda_dev *d = dev->priv;
    sl_cuda_green_fini(&d->green);
    if (d->cb_thread_running) {
        pthread_mutex_lock(&d->cb_lock);
        d->cb_stop = true;
        pthread_cond_signal(&d->cb_work_cv);
        pthread_mutex_unlock(&d->cb_lock);
        pthread_join(d->cb_thread, NULL);
        d->cb_thread_running = false;
    }
    if (d->cb_ready) {
        bool live = !d->lost && use_device(d) == SL_OK;
        nodes_free(d, live);
    }
    sl_free(d->polled);
    d->polled = NULL;
    if (d->reg_ready) {
        for (struct host_reg *r = d->regs, *next; r; r = next) {
            next = r->next;
            (void) SL_CUDA_RT("cuda.unpin", cudaHostUnregister(r->ptr));
            sl_free(r);
        }
        d->regs = NULL;
        pthread_mutex_destroy(&d->reg_lock);
        d->reg_ready = false;
    }
    if (d->cb_ready) {
        pthread_cond_destroy(&d->cb_done_cv);
        pthread_cond_destroy(&d->cb_work_cv);
        pthread_mutex_destroy(&d->cb_lock);
        d->cb_ready = false;
    }
}

static int cuda_mem_alloc(sl_device *dev, size_t bytes, void **out)
{
    struct cuda_dev *d = dev->priv;
    if (bytes == 0)
        return SL_EINVAL;
    int rc = use_device(d);
    void *p = NULL;
    if (rc == SL_OK)
        rc = SL_CUDA_RT("cuda.malloc", cudaMalloc(&p, bytes));
    if (rc == SL_OK)
        *out = p;
    return rc;
}

static void cuda_mem_free(sl_device *dev, void *ptr)
{
    if (ptr && use_device(dev->priv) == SL_OK)
        (void) SL_CUDA_RT("cuda.free", cudaFree(ptr));
}

/* ---- streams ---- */

static void set_sticky(struct cuda_dev *d, sl_stream *s, int rc)
{
    int none = SL_OK;
    (void) atomic_compare_exchange_strong(&s->sticky, &none, rc);
    if (rc == SL_EDEVICERESET)
        mark_lost(d);
}

/* Waits for the stream's device work, then for the callbacks submitted to it
 * before this call. Returns the device status (not the sticky error). */
static int drain(struct cuda_dev *d, sl_stream *s)
{
    pthread_mutex_lock(&d->cb_lock);
    uint64_t target = s->cb_submitted;
    pthread_mutex_unlock(&d->cb_lock);
    int rc = SL_CUDA_RT("cuda.sync", cudaStreamSynchronize(s->stream));
    if (rc == SL_EDEVICERESET)
        mark_lost(d); /* its callbacks now run on the dispatcher */
    /* whatever the status, the callbacks still use s: wait for them (their
     * events complete, or report the error to the dispatcher) */
    pthread_mutex_lock(&d->cb_lock);
    while (s->cb_done < target)
        pthread_cond_wait(&d->cb_done_cv, &d->cb_lock);
    pthread_mutex_unlock(&d->cb_lock);
    return rc;
}

static int cuda_stream_create(sl_device *dev, int priority, sl_stream **out)
{
    struct cuda_dev *d = dev->priv;
    int rc = use_device(d);
    if (rc != SL_OK)
        return rc;
    sl_stream *s = sl_calloc(1, sizeof *s);
    if (!s)
        return SL_ENOMEM;
    atomic_init(&s->sticky, SL_OK);
    if (pthread_mutex_init(&s->launch_lock, NULL) != 0) {
        rc = SL_ENOMEM;
        goto out_free_stream;
    }

    /* Higher salus priority = numerically lower CUDA priority, clamped. */
    int prio = d->prio_least - (priority > 0 ? priority : 0);
    if (prio < d->prio_greatest)
        prio = d->prio_greatest;
    s->cuda_prio = prio;
    rc = SL_CUDA_RT("cuda.stream",
                    cudaStreamCreateWithPriority(&s->stream, cudaStreamNonBlocking, prio));
    if (rc != SL_OK)
        goto out_destroy_lock;
    if ((rc = sl_cuda_exec_init(&s->exec, s->stream, d->ordinal)) != SL_OK)
        goto out_destroy_cuda_stream;
    *out = s;
    return SL_OK;

out_destroy_cuda_stream:
    (void) SL_CUDA_RT("cuda.stream", cudaStreamDestroy(s->stream));
out_destroy_lock:
    pthread_mutex_destroy(&s->launch_lock);
out_free_stream:
    sl_free(s);
    return rc;
}

static void cuda_stream_destroy(sl_device *dev, sl_stream *s)
{
    struct cuda_dev *d = dev->priv;
    if (!s)
        return;
    int rc = use_device(d);
    if (rc == SL_OK)
        rc = sl_cuda_exec_collect_flag(&s->exec);
    /* always: on a lost device drain still waits for the callbacks (they run
     * on the dispatcher), which use s until they return */
    int drained = drain(d, s);
    if (rc != SL_OK || drained != SL_OK)
        sl_log_err("cuda.stream.lost", "destroying a stream whose device work failed");
    int sticky = atomic_load(&s->sticky);
    if (sticky == SL_OK)
        sticky = sl_cuda_exec_take_flag(&s->exec);
    if (sticky != SL_OK)
        sl_log_warn("cuda.stream.lost", "stream destroyed with an unreported error: %s",
                    sl_strerror(sticky));
    sl_cuda_exec_fini(&s->exec);
    (void) SL_CUDA_RT("cuda.stream", cudaStreamDestroy(s->stream));
    sl_cuda_stream_unbind_dying(dev, s);
    pthread_mutex_destroy(&s->launch_lock);
    sl_free(s);
}

sl_cuda_green *sl_cuda_green_of(sl_device *dev)
{
    return &((struct cuda_dev *) dev->priv)->green;
}

int sl_cuda_stream_cuda_priority(const sl_stream *s)
{
    return s->cuda_prio;
}

sl_partition **sl_cuda_stream_partition(sl_stream *s)
{
    return &s->part;
}

/* The stream is idle (the caller's precondition), so the old CUstream has
 * nothing left to run: synchronising it returns at once and it can go. */
int sl_cuda_stream_swap(sl_device *dev, sl_stream *s, cudaStream_t fresh)
{
    struct cuda_dev *d = dev->priv;
    int rc = use_device(d);
    pthread_mutex_lock(&s->launch_lock);
    if (rc == SL_OK)
        rc = SL_CUDA_RT("cuda.bind", cudaStreamSynchronize(s->stream));
    if (rc == SL_OK)
        rc = sl_cuda_exec_set_stream(&s->exec, fresh);
    if (rc != SL_OK) {
        pthread_mutex_unlock(&s->launch_lock);
        (void) SL_CUDA_RT("cuda.bind", cudaStreamDestroy(fresh));
        return rc;
    }
    cudaStream_t old = s->stream;
    s->stream = fresh;
    pthread_mutex_unlock(&s->launch_lock);
    (void) SL_CUDA_RT("cuda.bind", cudaStreamDestroy(old));
    return SL_OK;
}

static int copy_async(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n,
                      enum cudaMemcpyKind kind)
{
    if (n == 0)
        return SL_OK;
    if (!dst || !src || s->recording)
        return SL_EINVAL;
    if (atomic_load(&s->sticky) != SL_OK)
        return SL_OK; /* skipped until the next callback */
    int rc = use_device(dev->priv);
    if (rc == SL_OK)
        rc = SL_CUDA_RT("cuda.memcpy", cudaMemcpyAsync(dst, src, n, kind, s->stream));
    if (rc != SL_OK)
        set_sticky(dev->priv, s, rc);
    return SL_OK;
}

static int cuda_memcpy_h2d(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n)
{
    return copy_async(dev, s, dst, src, n, cudaMemcpyHostToDevice);
}

static int cuda_memcpy_d2h(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n)
{
    return copy_async(dev, s, dst, src, n, cudaMemcpyDeviceToHost);
}

static int cuda_memcpy_d2d(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n)
{
    return copy_async(dev, s, dst, src, n, cudaMemcpyDeviceToDevice);
}

/* The check and the enqueue happen under the stream's launch lock: the
 * library handles, the workspace and the plan caches of a stream are not
 * thread-safe, and salus streams may be used from any thread. */
static int cuda_launch(sl_device *dev, sl_stream *s, const sl_op_call *c)
{
    pthread_mutex_lock(&s->launch_lock);
    int rc = sl_cuda_check(&s->exec, c);
    if (rc != SL_OK || atomic_load(&s->sticky) != SL_OK)
        goto out_unlock; /* refused, or skipped until the next callback */
    int run = use_device(dev->priv);
    if (run == SL_OK)
        run = sl_cuda_run(&s->exec, c);
    if (run == SL_ENOMEM || run == SL_EUNSUPPORTED)
        rc = run; /* refused before anything was enqueued */
    else if (run != SL_OK)
        set_sticky(dev->priv, s, run);
out_unlock:
    pthread_mutex_unlock(&s->launch_lock);
    return rc;
}

/* ---- iteration graphs (device.h) ---- */

struct sl_dev_graph {
    cudaGraphExec_t exec;
    unsigned gen; /* cuda_dev.gen when made: a reset since destroyed it */
};

/* Records in the calling thread's mode: another thread's unsafe calls
 * (cudaMalloc for another stream) cannot break this capture. The caller
 * submits nothing else to s until graph_end (device.h). */
static int cuda_graph_begin(sl_device *dev, sl_stream *s)
{
    pthread_mutex_lock(&s->launch_lock);
    int rc = s->recording ? SL_EINVAL : atomic_load(&s->sticky);
    if (rc == SL_OK)
        rc = use_device(dev->priv);
    if (rc == SL_OK)
        rc = SL_CUDA_RT("cuda.graph",
                        cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
    if (rc == SL_OK)
        s->recording = s->exec.recording = true;
    pthread_mutex_unlock(&s->launch_lock);
    return rc;
}

static int cuda_graph_end(sl_device *dev, sl_stream *s, sl_dev_graph **out, size_t *bytes,
                          char *reason, size_t len)
{
    struct cuda_dev *d = dev->priv;
    pthread_mutex_lock(&s->launch_lock);
    if (!s->recording) {
        pthread_mutex_unlock(&s->launch_lock);
        return SL_EINVAL;
    }
    s->recording = s->exec.recording = false;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t err = cudaStreamEndCapture(s->stream, &graph);
    size_t nodes = 0;
    if (err == cudaSuccess && atomic_load(&s->sticky) != SL_OK)
        err = cudaErrorStreamCaptureInvalidated; /* an op failed: the graph lacks it */
    if (err == cudaSuccess)
        err = cudaGraphGetNodes(graph, NULL, &nodes);
    unsigned left = atomic_load(&d->fail_graphs);
    while (err == cudaSuccess && left &&
           !atomic_compare_exchange_weak(&d->fail_graphs, &left, left - 1))
        ;
    bool injected = err == cudaSuccess && left > 0;
    if (err == cudaSuccess && !injected)
        /* kernels keep the priority of the stream they were captured on */
        err = cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
    if (graph)
        (void) cudaGraphDestroy(graph);
    (void) cudaGetLastError(); /* a failed capture leaves no sticky error behind */
    /* Nothing recorded ran, so an error an op met while recording is not
     * the stream's: the caller launches the same ops one by one next. A
     * lost device stays lost. */
    int none = atomic_load(&s->sticky);
    if ((err != cudaSuccess || injected) && none != SL_EDEVICERESET)
        (void) atomic_compare_exchange_strong(&s->sticky, &none, SL_OK);
    pthread_mutex_unlock(&s->launch_lock);
    if (injected) {
        snprintf(reason, len, "injected fault: instantiation failed");
        return SL_EDEVICE;
    }
    if (err != cudaSuccess) {
        snprintf(reason, len, "capture: %s", cudaGetErrorString(err));
        return SL_EDEVICE;
    }
    sl_dev_graph *g = sl_calloc(1, sizeof *g);
    if (!g) {
        (void) cudaGraphExecDestroy(exec);
        snprintf(reason, len, "out of host memory");
        return SL_ENOMEM;
    }
    pthread_mutex_lock(&d->cb_lock);
    g->gen = d->gen;
    pthread_mutex_unlock(&d->cb_lock);
    g->exec = exec;
    /* the executable's launch parameters: a few hundred bytes a node */
    *bytes = nodes * 256;
    *out = g;
    return SL_OK;
}

static int cuda_graph_launch(sl_device *dev, sl_stream *s, sl_dev_graph *g)
{
    if (!g || s->recording)
        return SL_EINVAL;
    pthread_mutex_lock(&s->launch_lock);
    if (atomic_load(&s->sticky) == SL_OK) { /* else skipped until the next callback */
        int rc = use_device(dev->priv);
        if (rc == SL_OK)
            rc = SL_CUDA_RT("cuda.graph", cudaGraphLaunch(g->exec, s->stream));
        if (rc != SL_OK)
            set_sticky(dev->priv, s, rc);
    }
    pthread_mutex_unlock(&s->launch_lock);
    return SL_OK;
}

/* An executable still running is freed by the driver when it ends. */
static void cuda_graph_destroy(sl_device *dev, sl_dev_graph *g)
{
    struct cuda_dev *d = dev->priv;
    if (!g)
        return;
    pthread_mutex_lock(&d->cb_lock);
    bool live = g->gen == d->gen;
    pthread_mutex_unlock(&d->cb_lock);
    if (live && use_device(d) == SL_OK)
        (void) cudaGraphExecDestroy(g->exec);
    sl_free(g);
}

/* Only graph faults: the fallback of a refused recording on real
 * hardware (the others are sim's, which can lose a device on cue). */
static int cuda_inject_fault(sl_device *dev, int kind, unsigned n)
{
    struct cuda_dev *d = dev->priv;
    switch (kind) {
    case SL_FAULT_GRAPH:
        if (n < 1 || n > 1000000)
            return SL_EINVAL;
        atomic_store(&d->fail_graphs, n);
        return SL_OK;
    case SL_FAULT_CLEAR:
        atomic_store(&d->fail_graphs, 0);
        return SL_OK;
    default:
        return SL_EUNSUPPORTED;
    }
}

/* Under the launch lock: launches before it keep the old workspace (they
 * are already enqueued), launches after it get the new one. */
static int cuda_stream_set_workspace(sl_device *dev, sl_stream *s, void *ptr, size_t bytes)
{
    if ((!ptr && bytes) || ((uintptr_t) ptr & 255))
        return SL_EINVAL;
    pthread_mutex_lock(&s->launch_lock);
    int rc = use_device(dev->priv);
    if (rc == SL_OK)
        rc = sl_cuda_set_lane_workspace(&s->exec, bytes ? ptr : NULL, bytes);
    pthread_mutex_unlock(&s->launch_lock);
    return rc;
}

static int cuda_host_callback(sl_device *dev, sl_stream *s, sl_host_fn fn, void *arg)
{
    struct cuda_dev *d = dev->priv;
    if (!fn || s->recording)
        return SL_EINVAL;
    struct cb_node *n = node_get(d);
    if (!n)
        return SL_ENOMEM;
    n->stream = s, n->fn = fn, n->arg = arg;
    /* Under the launch lock from the flag's move to the event: another
     * thread's launch or callback on s cannot come between them, and
     * s->stream cannot be swapped meanwhile (green.c). */
    pthread_mutex_lock(&s->launch_lock);
    int rc = use_device(d);
    bool moved = false; /* the flag kernel may write n->flag */
    if (rc == SL_OK && n->ev) {
        /* the flag of the work before the callback, into the callback's own
         * word: work after it may raise the stream's flag before a poll */
        rc = sl_cuda_exec_collect_flag_into(&s->exec, n->flag_mapped);
        moved = rc == SL_OK;
    }
    n->status = atomic_exchange(&s->sticky, SL_OK); /* the callback takes the error */
    pthread_mutex_lock(&d->cb_lock);
    s->cb_submitted++;
    bool record = !d->lost && rc == SL_OK && n->ev;
    if (record)
        rc = SL_CUDA_RT("cuda.callback", cudaEventRecord(n->ev, s->stream));
    int taken = SL_OK;
    if (record && rc == SL_OK) {
        pending_add(d, n);
        d->kicked = true;
        if (d->napping)
            pthread_cond_signal(&d->cb_work_cv);
    } else if (d->lost || rc == SL_EDEVICERESET || rc == SL_OK) {
        /* no event will complete (a node made while the device was lost
         * has none): run it with the fault, after the callbacks before it */
        if (rc == SL_EDEVICERESET)
            mark_lost_locked(d);
        n->status = SL_EDEVICERESET;
        dispatch_locked(d, n);
        rc = SL_OK;
    } else {
        /* fn will never run: the error goes back to the stream. A node
         * whose flag kernel was launched is not reused before a reset or
         * close: the kernel may still write its word. */
        s->cb_submitted--;
        taken = n->status;
        if (moved) {
            n->next = d->retired;
            d->retired = n;
        } else {
            node_put(d, n);
        }
    }
    pthread_mutex_unlock(&d->cb_lock);
    if (taken != SL_OK)
        set_sticky(d, s, taken);
    pthread_mutex_unlock(&s->launch_lock);
    return rc;
}

static int cuda_synchronize(sl_device *dev, sl_stream *s)
{
    struct cuda_dev *d = dev->priv;
    int rc = use_device(d);
    if (rc == SL_OK)
        rc = sl_cuda_exec_collect_flag(&s->exec);
    if (rc == SL_OK)
        rc = drain(d, s);
    int sticky = atomic_exchange(&s->sticky, SL_OK);
    int flag = rc == SL_OK ? sl_cuda_exec_take_flag(&s->exec) : SL_OK;
    return sticky != SL_OK ? sticky : rc != SL_OK ? rc : flag;
}

/* cudaDeviceReset, then a fresh primary context (device.h reset). */
static int cuda_reset(sl_device *dev)
{
    struct cuda_dev *d = dev->priv;
    (void) cudaSetDevice(d->ordinal); /* may report the fault itself */
    int rc = SL_CUDA_RT("cuda.reset", cudaDeviceReset());
    if (rc == SL_OK)
        rc = use_device(d);
    if (rc == SL_OK)
        rc = SL_CUDA_RT("cuda.reset", cudaFree(NULL)); /* creates the context now */
    pthread_mutex_lock(&d->cb_lock);
    d->gen++; /* the reset destroyed every event */
    nodes_free(d, false);
    if (rc == SL_OK)
        d->lost = false;
    pthread_mutex_unlock(&d->cb_lock);
    if (rc != SL_OK) {
        sl_log_err("cuda.reset", "cuda:%d could not be reset: %s", d->ordinal, sl_strerror(rc));
        return SL_ENODEV;
    }
    /* the reset dropped every registration: pin the segments again, or a
     * later copy of one would be a pageable copy inside the driver */
    pthread_mutex_lock(&d->reg_lock);
    for (struct host_reg *r = d->regs; r && rc == SL_OK; r = r->next)
        rc = SL_CUDA_RT("cuda.pin", cudaHostRegister(r->ptr, r->bytes, cudaHostRegisterPortable));
    pthread_mutex_unlock(&d->reg_lock);
    if (rc != SL_OK) {
        sl_log_err("cuda.reset", "cuda:%d: clients' shared memory cannot be pinned again: %s",
                   d->ordinal, sl_strerror(rc));
        return SL_ENODEV;
    }
    sl_log_info("cuda.reset", "cuda:%d reset: fresh context", d->ordinal);
    return SL_OK;
}

static int cuda_host_register(sl_device *dev, void *ptr, size_t bytes)
{
    struct cuda_dev *d = dev->priv;
    struct host_reg *r = sl_calloc(1, sizeof *r);
    if (!r)
        return SL_ENOMEM;
    r->ptr = ptr;
    r->bytes = bytes;
    pthread_mutex_lock(&d->reg_lock);
    int rc = use_device(d);
    if (rc == SL_OK)
        rc = SL_CUDA_RT("cuda.pin", cudaHostRegister(ptr, bytes, cudaHostRegisterPortable));
    if (rc == SL_OK) {
        r->next = d->regs;
        d->regs = r;
    }
    pthread_mutex_unlock(&d->reg_lock);
    if (rc != SL_OK) {
        sl_free(r);
        return rc == SL_EDEVICERESET ? SL_EDEVICE : SL_EEXHAUSTED;
    }
    return SL_OK;
}

static void cuda_host_unregister(sl_device *dev, void *ptr)
{
    struct cuda_dev *d = dev->priv;
    pthread_mutex_lock(&d->reg_lock);
    struct host_reg **link = &d->regs;
    while (*link && (*link)->ptr != ptr)
        link = &(*link)->next;
    struct host_reg *r = *link;
    if (r) {
        *link = r->next;
        if (use_device(d) == SL_OK)
            (void) SL_CUDA_RT("cuda.unpin", cudaHostUnregister(ptr));
    }
    pthread_mutex_unlock(&d->reg_lock);
    sl_free(r);
}

static unsigned cuda_op_dtypes(sl_device *dev, unsigned op)
{
    return sl_cuda_op_dtypes(op, ((struct cuda_dev *) dev->priv)->bf16);
}

static const sl_device_ops cuda_device_ops = {
    .name = "cuda",
    .priv_size = sizeof(struct cuda_dev),
    .open = cuda_open,
    .close = cuda_close,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .memcpy_h2d = cuda_memcpy_h2d,
    .memcpy_d2h = cuda_memcpy_d2h,
    .memcpy_d2d = cuda_memcpy_d2d,
    .launch = cuda_launch,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    .inject_fault = cuda_inject_fault,
    .op_dtypes = cuda_op_dtypes,
    .stream_set_workspace = cuda_stream_set_workspace,
    .host_callback = cuda_host_callback,
    .synchronize = cuda_synchronize,
    .reset = cuda_reset,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .partition_caps = sl_cuda_partition_caps,
    .partition_create = sl_cuda_partition_create,
    .partition_resize = sl_cuda_partition_resize,
    .partition_destroy = sl_cuda_partition_destroy,
    .partition_units = sl_cuda_partition_units,
    .stream_bind = sl_cuda_stream_bind,
};

const sl_device_ops *const sl_cuda_device_ops_ptr = &cuda_device_ops;
