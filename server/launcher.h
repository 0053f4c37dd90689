/* Launchers: threads that submit work to the device without the server
 * lock. The executor (exec.h) hands an iteration too long to submit under
 * the lock to one of them; the lock is then held only to pick it and fix
 * what it runs with, whatever its op count.
 *
 * A pool of threads started on demand, up to a maximum: a job waits only
 * when every launcher is busy with another. Jobs run in the order they were
 * handed in. The pool knows nothing of what a job does; the job's run
 * function owns its ordering and completion (executor.c).
 *
 * Threads and locking: the pool has one lock of its own, taken alone and
 * never held while a job runs, so a job may take any lock (the server
 * lock) and the caller may hand jobs in while holding one. */
#ifndef SL_LAUNCHER_H
#define SL_LAUNCHER_H

#include <pthread.h>
#include <stdbool.h>

typedef struct sl_launch_job sl_launch_job;
struct sl_launch_job {
    sl_launch_job *next;             /* the pool's */
    void (*run)(sl_launch_job *job); /* called once, on a launcher thread */
};

typedef struct sl_launchers {
    pthread_mutex_t lock; /* guards every field below */
    pthread_cond_t work;  /* a job was queued, or stop */
    sl_launch_job *head, *tail;
    unsigned n_queued;
    pthread_t *threads;
    unsigned n_threads, n_idle, max_threads;
    bool stop, ready;
} sl_launchers;

/* Prepares a pool of at most max_threads launchers (none started yet).
 * Errors: SL_EINVAL (max_threads 0), SL_ENOMEM. On failure call
 * sl_launchers_fini. */
int sl_launchers_init(sl_launchers *p, unsigned max_threads);
/* Stops and joins every launcher. Precondition: no job is queued or
 * running (the executor is idle). Safe on a zeroed or half-initialised
 * pool. Blocks until the threads have exited. */
void sl_launchers_fini(sl_launchers *p);
/* Hands job to a launcher, starting one if none is free and the maximum
 * allows. The caller keeps job alive until its run function was called.
 * Never blocks on device work. Errors: SL_ENOMEM (no launcher exists and
 * none could be started: the caller runs the job itself). */
int sl_launchers_submit(sl_launchers *p, sl_launch_job *job);

#endif
