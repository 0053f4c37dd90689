#include "sl_nng.h"
#include "sl_alloc.h"

#include <pthread.h>
#include <time.h>

/* Shared by the caller and the closing thread; the last one out frees it. */
struct closer {
    nng_socket sock;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    int refs;
};

static void release(struct closer *c)
{
    pthread_mutex_lock(&c->lock);
    bool last = --c->refs == 0;
    pthread_mutex_unlock(&c->lock);
    if (last) {
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->lock);
        sl_free(c);
    }
}

static void *close_socket(void *arg)
{
    struct closer *c = arg;
    nng_close(c->sock);
    pthread_mutex_lock(&c->lock);
    c->done = true;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
    release(c);
    return NULL;
}

bool sl_nng_close_bounded(nng_socket sock, int seconds)
{
    struct closer *c = sl_calloc(1, sizeof *c);
    pthread_t th;
    if (!c) {
        nng_close(sock);
        return true;
    }
    c->sock = sock;
    c->refs = 2;
    pthread_mutex_init(&c->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&th, NULL, close_socket, c) != 0) {
        nng_close(sock);
        c->refs = 1;
        release(c);
        return true;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += seconds;
    pthread_mutex_lock(&c->lock);
    while (!c->done && pthread_cond_timedwait(&c->cond, &c->lock, &deadline) == 0) {
    }
    bool done = c->done;
    pthread_mutex_unlock(&c->lock);
    /* a closer that finished is joined, not left exiting: a process that
     * exits next (salusctl, a client) has no thread of ours still running,
     * which LeakSanitizer could not stop to scan */
    if (done)
        pthread_join(th, NULL);
    else
        pthread_detach(th);
    release(c);
    return done;
}
