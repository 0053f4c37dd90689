/* Private to kernels/: the in-order command queue behind the cpu and sim
 * streams. One worker thread per queue runs commands strictly in order.
 * Submitters append under the queue's lock and wake the worker only when it
 * sleeps; the worker runs each command outside the lock. Command nodes are
 * recycled through a free list, so a steady stream of submissions allocates
 * nothing.
 *
 * Three kinds of command: backend work (a payload of cfg->payload_size
 * bytes handed to cfg->exec), host callbacks and injected failures. Errors
 * are sticky until the next host callback (device.h): after a command
 * fails, later work up to the callback is skipped and the callback receives
 * the first error. */
#ifndef SL_WORKQ_H
#define SL_WORKQ_H

#include "device.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct sl_workq sl_workq;

typedef struct sl_workq_config {
    size_t payload_size; /* bytes of backend payload per work command */
    /* Runs one work command on the worker thread without the lock; returns
     * SL_OK or the error that becomes sticky. */
    int (*exec)(void *ctx, void *payload);
    /* Optional: a work command skipped after a sticky error, in place of
     * exec (to release what its payload holds). */
    void (*skip)(void *ctx, void *payload);
    /* Optional: on the worker thread as it starts, before any command. */
    void (*worker_start)(void *ctx);
    /* Optional: on the worker thread after each host callback returned. */
    void (*after_callback)(void *ctx);
    /* Optional: on the worker thread as it exits (the queue drained). */
    void (*worker_exit)(void *ctx);
    /* Optional: whether a work command may run on a thread other than the
     * worker (sl_workq_release); NULL = all may. */
    bool (*runs_anywhere)(void *ctx, const void *payload);
    const char *log_id;      /* e.g. "cpu.stream": the worker failed to start */
    const char *lost_log_id; /* e.g. "cpu.stream.lost": destroyed with an error */
} sl_workq_config;

/* Starts a queue whose callbacks get ctx; the worker thread is named
 * thread_name (at most 15 characters). cfg must outlive the queue.
 * Errors: SL_ENOMEM (memory or the thread). */
int sl_workq_create(const sl_workq_config *cfg, void *ctx, const char *thread_name, sl_workq **out);
/* Waits for every queued command (callbacks included) to run, then frees the
 * queue. Logs an error that no callback or synchronize reported. NULL is fine. */
void sl_workq_destroy(sl_workq *q);

/* Starts enqueuing work: returns the command's payload (not zeroed) with the
 * queue's lock held, or NULL (lock not held) with SL_ESHUTDOWN or SL_ENOMEM
 * in *rc. The caller fills the payload and calls sl_workq_commit. */
void *sl_workq_begin(sl_workq *q, int *rc);
/* Appends the command begun with sl_workq_begin and drops the lock. Returns SL_OK. */
int sl_workq_commit(sl_workq *q, void *payload);

/* Enqueues fn(arg, status) after all prior commands (device.h). */
int sl_workq_host_callback(sl_workq *q, sl_host_fn fn, void *arg);
/* Enqueues a command that fails with `code` when it executes (not checked). */
int sl_workq_inject_error(sl_workq *q, int code);
/* Blocks until every command submitted before the call has finished; returns
 * the sticky error (and clears it), or SL_OK. */
int sl_workq_synchronize(sl_workq *q);

/* Holds the queue: once the command running now (if any) is done, nothing
 * starts until the matching sl_workq_release. Holds nest. Every hold must
 * be released, or the queue stalls. */
void sl_workq_hold(sl_workq *q);
/* Drops a hold. When it was the last, run_here is set and the worker sleeps
 * idle, the calling thread runs the commands queued so far itself (callbacks
 * included, so it must hold no lock they take), stopping at the first one
 * cfg->runs_anywhere refuses; whatever remains goes to the worker. A thread
 * already running commands this way never starts a second queue. */
void sl_workq_release(sl_workq *q, bool run_here);

/* Takes and drops the queue's lock (to read worker state after synchronize). */
void sl_workq_lock(sl_workq *q);
void sl_workq_unlock(sl_workq *q);

#endif
