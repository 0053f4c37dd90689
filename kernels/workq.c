/* The in-order command queue of the cpu and sim streams (workq.h). */
#include "workq.h"

#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Nodes made at queue creation; more are allocated only if the queue ever
 * grows deeper. */
#define PREALLOC_NODES 32

enum node_kind { NODE_WORK, NODE_CALLBACK, NODE_FAIL };

struct node {
    struct node *next;
    enum node_kind kind;
    union {
        struct {
            sl_host_fn fn;
            void *arg;
        } cb;
        int fail;
    } u;
    alignas(max_align_t) unsigned char payload[]; /* cfg->payload_size bytes */
};

struct sl_workq {
    const sl_workq_config *cfg;
    void *ctx;
    pthread_mutex_t lock;   /* guards every field below */
    pthread_cond_t work_cv; /* worker: commands arrived or stopping */
    pthread_cond_t done_cv; /* synchronize: a command finished */
    struct node *head, *tail;
    struct node *free_nodes;
    uint64_t submitted, completed; /* commands ever enqueued / finished */
    int sticky;                    /* first error since the last callback */
    unsigned sync_waiters;
    unsigned held; /* sl_workq_hold without its release: commits do not wake the worker */
    bool borrowed; /* a submitter is running commands (sl_workq_release) */
    bool worker_asleep, stopping;
    pthread_t worker;
};

static struct node *node_of(void *payload)
{
    return (struct node *) ((unsigned char *) payload - offsetof(struct node, payload));
}

static struct node *node_alloc(const sl_workq *q)
{
    return sl_malloc(sizeof(struct node) + q->cfg->payload_size);
}

static void free_list(struct node *c)
{
    while (c) {
        struct node *next = c->next;
        sl_free(c);
        c = next;
    }
}

/* Pops the head command and runs it without the lock, as the worker or a
 * borrowing submitter. Called and returns with q->lock held. */
static void run_head(sl_workq *q)
{
    const sl_workq_config *cfg = q->cfg;
    struct node *c = q->head;
    q->head = c->next;
    if (!q->head)
        q->tail = NULL;
    /* Sticky error: skip work until the next callback, which takes it. */
    int status = q->sticky, rc = SL_OK;
    if (c->kind == NODE_CALLBACK)
        q->sticky = SL_OK;
    pthread_mutex_unlock(&q->lock);
    if (c->kind == NODE_CALLBACK) {
        c->u.cb.fn(c->u.cb.arg, status);
        if (cfg->after_callback)
            cfg->after_callback(q->ctx);
    } else if (status == SL_OK) {
        rc = c->kind == NODE_FAIL ? c->u.fail : cfg->exec(q->ctx, c->payload);
    } else if (c->kind != NODE_FAIL && cfg->skip) {
        cfg->skip(q->ctx, c->payload);
    }
    pthread_mutex_lock(&q->lock);
    if (rc != SL_OK && q->sticky == SL_OK)
        q->sticky = rc;
    c->next = q->free_nodes;
    q->free_nodes = c;
    q->completed++;
    if (q->sync_waiters)
        pthread_cond_broadcast(&q->done_cv);
}

static void *worker_main(void *arg)
{
    sl_workq *q = arg;
    if (q->cfg->worker_start)
        q->cfg->worker_start(q->ctx);
    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (q->borrowed || (q->held && !q->stopping) || (!q->head && !q->stopping)) {
            q->worker_asleep = true;
            pthread_cond_wait(&q->work_cv, &q->lock);
            q->worker_asleep = false;
        }
        if (!q->head)
            break; /* stopping and drained */
        run_head(q);
    }
    pthread_mutex_unlock(&q->lock);
    if (q->cfg->worker_exit)
        q->cfg->worker_exit(q->ctx);
    return NULL;
}

int sl_workq_create(const sl_workq_config *cfg, void *ctx, const char *thread_name, sl_workq **out)
{
    sl_workq *q = sl_calloc(1, sizeof *q);
    if (!q)
        return SL_ENOMEM;
    q->cfg = cfg;
    q->ctx = ctx;
    for (unsigned i = 0; i < PREALLOC_NODES; i++) {
        struct node *c = node_alloc(q);
        if (!c)
            goto out_free_nodes;
        c->next = q->free_nodes;
        q->free_nodes = c;
    }
    if (pthread_mutex_init(&q->lock, NULL) != 0)
        goto out_free_nodes;
    if (pthread_cond_init(&q->work_cv, NULL) != 0)
        goto out_destroy_lock;
    if (pthread_cond_init(&q->done_cv, NULL) != 0)
        goto out_destroy_work_cv;
    int err = pthread_create(&q->worker, NULL, worker_main, q);
    if (err != 0) {
        sl_log_err(cfg->log_id, "cannot start a stream worker thread: %s", strerror(err));
        goto out_destroy_done_cv;
    }
    (void) pthread_setname_np(q->worker, thread_name);
    *out = q;
    return SL_OK;

out_destroy_done_cv:
    pthread_cond_destroy(&q->done_cv);
out_destroy_work_cv:
    pthread_cond_destroy(&q->work_cv);
out_destroy_lock:
    pthread_mutex_destroy(&q->lock);
out_free_nodes:
    free_list(q->free_nodes);
    sl_free(q);
    return SL_ENOMEM;
}

void sl_workq_destroy(sl_workq *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->lock);
    q->stopping = true;
    pthread_cond_signal(&q->work_cv);
    pthread_mutex_unlock(&q->lock);
    pthread_join(q->worker, NULL); /* the worker drains the queue first */
    if (q->sticky != SL_OK)
        sl_log_warn(q->cfg->lost_log_id, "stream destroyed with an unreported error: %s",
                    sl_strerror(q->sticky));
    free_list(q->free_nodes);
    pthread_cond_destroy(&q->done_cv);
    pthread_cond_destroy(&q->work_cv);
    pthread_mutex_destroy(&q->lock);
    sl_free(q);
}

/* Starts an enqueue: returns a node with q->lock held, or NULL (lock not
 * held) with the error in *rc. */
static struct node *begin(sl_workq *q, enum node_kind kind, int *rc)
{
    pthread_mutex_lock(&q->lock);
    struct node *c = NULL;
    if (!q->stopping) {
        c = q->free_nodes;
        if (c)
            q->free_nodes = c->next;
        else
            c = node_alloc(q);
    }
    if (!c) {
        *rc = q->stopping ? SL_ESHUTDOWN : SL_ENOMEM;
        pthread_mutex_unlock(&q->lock);
        return NULL;
    }
    c->kind = kind;
    return c;
}

static int commit(sl_workq *q, struct node *c)
{
    c->next = NULL;
    if (q->tail)
        q->tail->next = c;
    else
        q->head = c;
    q->tail = c;
    q->submitted++;
    if (q->worker_asleep && !q->held && !q->borrowed)
        pthread_cond_signal(&q->work_cv);
    pthread_mutex_unlock(&q->lock);
    return SL_OK;
}

void *sl_workq_begin(sl_workq *q, int *rc)
{
    struct node *c = begin(q, NODE_WORK, rc);
    return c ? c->payload : NULL;
}

int sl_workq_commit(sl_workq *q, void *payload)
{
    return commit(q, node_of(payload));
}

int sl_workq_host_callback(sl_workq *q, sl_host_fn fn, void *arg)
{
    int rc;
    struct node *c = begin(q, NODE_CALLBACK, &rc);
    if (!c)
        return rc;
    c->u.cb.fn = fn;
    c->u.cb.arg = arg;
    return commit(q, c);
}

int sl_workq_inject_error(sl_workq *q, int code)
{
    int rc;
    struct node *c = begin(q, NODE_FAIL, &rc);
    if (!c)
        return rc;
    c->u.fail = code;
    return commit(q, c);
}

int sl_workq_synchronize(sl_workq *q)
{
    pthread_mutex_lock(&q->lock);
    /* Wait for what was submitted before this call, not for work that
     * callbacks keep adding meanwhile. */
    uint64_t target = q->submitted;
    q->sync_waiters++;
    while (q->completed < target)
        pthread_cond_wait(&q->done_cv, &q->lock);
    q->sync_waiters--;
    int rc = q->sticky;
    q->sticky = SL_OK;
    pthread_mutex_unlock(&q->lock);
    return rc;
}

void sl_workq_lock(sl_workq *q)
{
    pthread_mutex_lock(&q->lock);
}

void sl_workq_unlock(sl_workq *q)
{
    pthread_mutex_unlock(&q->lock);
}

/* The thread is running some queue's commands in sl_workq_release: it does
 * not start borrowing another (callbacks it runs may release holds). */
static __thread bool borrowing;

void sl_workq_hold(sl_workq *q)
{
    pthread_mutex_lock(&q->lock);
    q->held++;
    pthread_mutex_unlock(&q->lock);
}

void sl_workq_release(sl_workq *q, bool run_here)
{
    const sl_workq_config *cfg = q->cfg;
    pthread_mutex_lock(&q->lock);
    q->held--;
    if (run_here && !borrowing && !q->held && q->worker_asleep && !q->borrowed) {
        /* only what is queued now: work that callbacks add meanwhile (the
         * next iteration of the lane) is the worker's */
        uint64_t target = q->submitted;
        q->borrowed = borrowing = true;
        while (q->head && q->completed < target &&
               (q->head->kind != NODE_WORK || !cfg->runs_anywhere ||
                cfg->runs_anywhere(q->ctx, q->head->payload)))
            run_head(q);
        q->borrowed = borrowing = false;
    }
    if (q->head && q->worker_asleep && !q->held)
        pthread_cond_signal(&q->work_cv);
    pthread_mutex_unlock(&q->lock);
}
