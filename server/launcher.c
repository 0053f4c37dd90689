/* The launcher pool (launcher.h). Threads are started when a job finds
 * none free and kept afterwards: a launcher costs a stack, and starting one
 * per long iteration would add its start-up to every hand-off. */
#include "launcher.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"

static void *launcher_main(void *arg)
{
    sl_launchers *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->head && !p->stop)
            pthread_cond_wait(&p->work, &p->lock);
        if (!p->head)
            break; /* stopping, and nothing left */
        sl_launch_job *job = p->head;
        p->head = job->next;
        if (!p->head)
            p->tail = NULL;
        p->n_queued--;
        p->n_idle--;
        pthread_mutex_unlock(&p->lock);
        job->run(job); /* may free job: not touched again */
        pthread_mutex_lock(&p->lock);
        p->n_idle++;
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int sl_launchers_init(sl_launchers *p, unsigned max_threads)
{
    if (max_threads == 0)
        return SL_EINVAL;
    if (pthread_mutex_init(&p->lock, NULL) != 0)
        return SL_ENOMEM;
    if (pthread_cond_init(&p->work, NULL) != 0) {
        pthread_mutex_destroy(&p->lock);
        return SL_ENOMEM;
    }
    p->threads = sl_calloc(max_threads, sizeof *p->threads);
    if (!p->threads) {
        pthread_cond_destroy(&p->work);
        pthread_mutex_destroy(&p->lock);
        return SL_ENOMEM;
    }
    p->max_threads = max_threads;
    p->ready = true;
    return SL_OK;
}

void sl_launchers_fini(sl_launchers *p)
{
    if (!p->ready)
        return;
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    unsigned n = p->n_threads;
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < n; i++)
        pthread_join(p->threads[i], NULL);
    sl_free(p->threads);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->lock);
    *p = (sl_launchers){0};
}

int sl_launchers_submit(sl_launchers *p, sl_launch_job *job)
{
    if (!p->ready)
        return SL_ENOMEM;
    pthread_mutex_lock(&p->lock);
    /* every idle launcher may already be promised to a queued job */
    if (p->n_idle <= p->n_queued && p->n_threads < p->max_threads) {
        if (pthread_create(&p->threads[p->n_threads], NULL, launcher_main, p) == 0) {
            p->n_threads++;
            p->n_idle++;
        } else {
            sl_log_warn("exe.launcher", "cannot start launcher %u; %u run", p->n_threads + 1,
                        p->n_threads);
        }
    }
    if (p->n_threads == 0) {
        pthread_mutex_unlock(&p->lock);
        return SL_ENOMEM;
    }
    job->next = NULL;
    if (p->tail)
        p->tail->next = job;
    else
        p->head = job;
    p->tail = job;
    p->n_queued++;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->lock);
    return SL_OK;
}
