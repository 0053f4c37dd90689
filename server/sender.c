/* The sender (sender.h). */
#include "sender.h"
#include "sl_error.h"
#include "sl_time.h"

int sl_sender_init(sl_sender *s, pthread_mutex_t *lock, sl_device *dev, sl_repeats *repeats)
{
    s->lock = lock;
    s->dev = dev;
    s->repeats = repeats;
    return pthread_cond_init(&s->idle, NULL) == 0 ? SL_OK : SL_ENOMEM;
}

void sl_sender_fini(sl_sender *s)
{
    if (s->lock)
        pthread_cond_destroy(&s->idle);
}

/* Replies produced while this thread runs a held stream's work for an
 * outbox: sent once that work is done. */
static __thread sl_outbox *deferred;

void sl_sender_send(sl_sender *s, sl_outbox *box)
{
    if (box->run_here) {
        /* The iteration runs here; its reply waits until the stream is
         * released and every lock dropped. Sent from inside, it would wake
         * the client, whose next request would find the stream still
         * borrowed (and go to the stream's thread) or a lock still held. */
        sl_stream *st = box->run_here;
        box->run_here = NULL;
        sl_outbox later = {0}, *outer = deferred;
        deferred = &later;
        s->dev->ops->stream_release(s->dev, st, true);
        deferred = outer;
        sl_outbox_move(box, &later);
    }
    if (deferred) {
        sl_outbox_move(deferred, box);
        return;
    }
    sl_req *req;
    sl_reply *r;
    while ((r = sl_outbox_take(box, &req))) {
        atomic_fetch_add(&s->replies, 1);
        if (sl_reply_msg(r)->code != SALUS__CODE__OK)
            atomic_fetch_add(&s->errors, 1);
        if (s->latency && req)
            sl_hist_observe(s->latency, sl_now_ns() - sl_reply_born_ns(r));
        sl_transport_send(req, r, sl_repeats_answered, s->repeats);
    }
    if (box->completing) {
        atomic_fetch_sub(&s->completing, box->completing);
        box->completing = 0;
        if (atomic_load(&s->draining)) { /* it waits for completing under the lock */
            pthread_mutex_lock(s->lock);
            pthread_cond_broadcast(&s->idle);
            pthread_mutex_unlock(s->lock);
        }
    }
}

void sl_sender_unlock_send(sl_sender *s, sl_outbox *box)
{
    atomic_fetch_add(&s->completing, 1);
    box->completing++;
    pthread_mutex_unlock(s->lock);
    sl_sender_send(s, box);
}

bool sl_sender_quiet(const sl_sender *s)
{
    return atomic_load(&s->completing) == 0;
}
