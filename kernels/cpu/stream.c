/* cpu streams: one worker thread per stream executing an in-order command
 * queue. Submitters append under the stream's lock and wake the worker only
 * when it sleeps; the worker runs each command outside the lock. Command
 * nodes are recycled through a free list, so a steady stream of launches
 * allocates nothing. */
#include "cpu.h"

#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Nodes made at stream creation; more are allocated only if the queue ever
 * grows deeper. */
#define PREALLOC_NODES 32

enum cmd_kind { CMD_OP, CMD_COPY, CMD_CALLBACK, CMD_FAIL };

struct cmd {
    struct cmd *next;
    enum cmd_kind kind;
    union {
        sl_op_call op;
        struct {
            void *dst;
            const void *src;
            size_t n;
        } copy;
        struct {
            sl_host_fn fn;
            void *arg;
        } cb;
        int fail;
    } u;
};

struct sl_stream {
    pthread_mutex_t lock;   /* guards every field below */
    pthread_cond_t work_cv; /* worker: commands arrived or stopping */
    pthread_cond_t done_cv; /* synchronize: a command finished */
    struct cmd *head, *tail;
    struct cmd *free_nodes;
    uint64_t submitted, completed; /* commands ever enqueued / finished */
    int sticky;                    /* first error since the last callback */
    unsigned sync_waiters;
    bool worker_asleep, stopping;
    pthread_t worker;
    sl_cpu_exec exec; /* the worker's alone */
};

static void free_list(struct cmd *c)
{
    while (c) {
        struct cmd *next = c->next;
        sl_free(c);
        c = next;
    }
}

/* Runs one op with its share of the cores (see cpu.h): cores divided by
 * the streams running an op at this moment, this one included. */
static int run_op(sl_cpu_exec *x, const sl_op_call *call)
{
    sl_cpu_shared *sh = x->shared;
    int running = atomic_fetch_add(&sh->running, 1) + 1;
    int forced = atomic_load(&sh->forced_threads), share = sh->cores / running;
    x->threads = forced > 0 ? forced : share > 1 ? share : 1;
    int rc = sl_cpu_run_op(x, call);
    atomic_fetch_sub(&sh->running, 1);
    return rc;
}

/* Runs one command; returns its error. Called without the lock. */
static int execute(sl_stream *s, struct cmd *c)
{
    switch (c->kind) {
    case CMD_OP:
        return run_op(&s->exec, &c->u.op);
    case CMD_COPY:
        memmove(c->u.copy.dst, c->u.copy.src, c->u.copy.n);
        return SL_OK;
    case CMD_FAIL:
        return c->u.fail;
    case CMD_CALLBACK:
        break;
    }
    return SL_EINTERNAL;
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

        if (c->kind == CMD_CALLBACK)
            c->u.cb.fn(c->u.cb.arg, status);
        else if (status == SL_OK)
            rc = execute(s, c);

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
    /* oneDNN state is freed by the thread that made it: its OpenMP pool
     * belongs to this thread too. */
    sl_cpu_dnnl_free(s->exec.dnnl);
    s->exec.dnnl = NULL;
    return NULL;
}

/* Takes a free node (allocating one if none is left) with s->lock held. */
static struct cmd *node_get(sl_stream *s)
{
    struct cmd *c = s->free_nodes;
    if (c)
        s->free_nodes = c->next;
    else
        c = sl_malloc(sizeof *c);
    return c;
}

/* Starts an enqueue: returns a node with s->lock held, or NULL (lock not
 * held) with the error in *rc. The caller fills the node and calls commit. */
static struct cmd *begin(sl_stream *s, int *rc)
{
    pthread_mutex_lock(&s->lock);
    struct cmd *c = s->stopping ? NULL : node_get(s);
    if (!c) {
        *rc = s->stopping ? SL_ESHUTDOWN : SL_ENOMEM;
        pthread_mutex_unlock(&s->lock);
    }
    return c;
}

static int commit(sl_stream *s, struct cmd *c)
{
    c->next = NULL;
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

int sl_cpu_stream_create(sl_device *dev, int priority, sl_stream **out)
{
    (void) priority; /* advisory on cpu: lanes get equal threads */
    sl_stream *s = sl_calloc(1, sizeof *s);
    if (!s)
        return SL_ENOMEM;
    s->exec.shared = sl_cpu_shared_of(dev);
    s->exec.threads = 1;
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
        sl_log_err("cpu.stream", "cannot start a stream worker thread: %s", strerror(err));
        goto out_destroy_done_cv;
    }
    char name[16];
    snprintf(name, sizeof name, "sl-cpu%d-s", dev->index);
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

void sl_cpu_stream_destroy(sl_device *dev, sl_stream *s)
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
        sl_log_warn("cpu.stream.lost", "stream destroyed with an unreported error: %s",
                    sl_strerror(s->sticky));
    free_list(s->free_nodes);
    pthread_cond_destroy(&s->done_cv);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->lock);
    sl_free(s);
}

int sl_cpu_memcpy(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n)
{
    (void) dev;
    if (n == 0)
        return SL_OK;
    if (!dst || !src)
        return SL_EINVAL;
    int rc;
    struct cmd *c = begin(s, &rc);
    if (!c)
        return rc;
    c->kind = CMD_COPY;
    c->u.copy.dst = dst;
    c->u.copy.src = src;
    c->u.copy.n = n;
    return commit(s, c);
}

int sl_cpu_launch(sl_device *dev, sl_stream *s, const sl_op_call *call)
{
    (void) dev;
    int rc = sl_cpu_op_check(call);
    if (rc != SL_OK)
        return rc;
    struct cmd *c = begin(s, &rc);
    if (!c)
        return rc;
    /* Copy only the used tensor refs: most of an sl_op_call is spare slots. */
    sl_op_call *op = &c->u.op;
    c->kind = CMD_OP;
    op->op = call->op;
    op->n_in = call->n_in;
    op->n_out = call->n_out;
    op->attrs = call->attrs;
    memcpy(op->in, call->in, call->n_in * sizeof call->in[0]);
    memcpy(op->out, call->out, call->n_out * sizeof call->out[0]);
    return commit(s, c);
}

int sl_cpu_host_callback(sl_device *dev, sl_stream *s, sl_host_fn fn, void *arg)
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

int sl_cpu_synchronize(sl_device *dev, sl_stream *s)
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

int sl_cpu_inject_error(sl_stream *s, int code)
{
    if (code <= SL_OK || code >= SL_E_COUNT)
        return SL_EINVAL;
    int rc;
    struct cmd *c = begin(s, &rc);
    if (!c)
        return rc;
    c->kind = CMD_FAIL;
    c->u.fail = code;
    return commit(s, c);
}

unsigned sl_cpu_cached_prims(sl_stream *s)
{
    pthread_mutex_lock(&s->lock);
    unsigned n = sl_cpu_dnnl_count(s->exec.dnnl);
    pthread_mutex_unlock(&s->lock);
    return n;
}
