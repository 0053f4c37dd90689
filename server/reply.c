/* Replies: an envelope plus a chunked arena, so a reply of any shape (a
 * status table, fetched tensors) is built without per-field bookkeeping and
 * freed in one call. */
#include "server.h"
#include "sl_alloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct chunk {
    struct chunk *next;
    size_t used, size;
    _Alignas(16) unsigned char data[];
};

struct sl_reply {
    Salus__Reply msg;
    sl_req *req;
    sl_reply *next; /* outbox link */
    struct chunk *chunks;
    char message[256];
};

sl_reply *sl_reply_new(uint64_t seq)
{
    sl_reply *r = sl_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    salus__reply__init(&r->msg);
    r->msg.seq = seq;
    r->msg.message = r->message;
    return r;
}

void *sl_reply_alloc(sl_reply *r, size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t) 15;
    struct chunk *c = r->chunks;
    if (!c || c->size - c->used < bytes) {
        size_t size = bytes > 4096 ? bytes : 4096;
        c = sl_malloc(sizeof *c + size);
        if (!c)
            return NULL;
        c->used = 0;
        c->size = size;
        /* a big dedicated chunk goes second so small allocations keep using
         * the current one */
        if (r->chunks && bytes > 4096) {
            c->next = r->chunks->next;
            r->chunks->next = c;
        } else {
            c->next = r->chunks;
            r->chunks = c;
        }
    }
    void *p = c->data + c->used;
    c->used += bytes;
    memset(p, 0, bytes);
    return p;
}

void sl_reply_error(sl_reply *r, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
    r->msg.code = (Salus__Code) code;
    r->msg.body_case = SALUS__REPLY__BODY__NOT_SET;
}

Salus__Reply *sl_reply_msg(sl_reply *r)
{
    return &r->msg;
}

void sl_reply_free(sl_reply *r)
{
    if (!r)
        return;
    for (struct chunk *c = r->chunks, *next; c; c = next) {
        next = c->next;
        sl_free(c);
    }
    sl_free(r);
}

void sl_outbox_put(sl_outbox *box, sl_req *req, sl_reply *reply)
{
    if (!reply)
        return;
    reply->req = req;
    reply->next = NULL;
    if (box->tail)
        box->tail->next = reply;
    else
        box->head = reply;
    box->tail = reply;
}

/* Replies produced while this thread runs a held stream's work for an
 * outbox (sl_outbox_flush below): sent once that work is done. */
static __thread sl_outbox *deferred;

/* Moves from's replies (after to's) and its completing counts into to. */
static void outbox_move(sl_outbox *to, sl_outbox *from)
{
    if (from->head) {
        if (to->tail)
            to->tail->next = from->head;
        else
            to->head = from->head;
        to->tail = from->tail;
        from->head = from->tail = NULL;
    }
    to->completing += from->completing;
    from->completing = 0;
}

void sl_outbox_flush(sl_server *srv, sl_outbox *box)
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
        srv->dev->ops->stream_release(srv->dev, st, true);
        deferred = outer;
        outbox_move(box, &later);
    }
    if (deferred) {
        outbox_move(deferred, box);
        return;
    }
    for (sl_reply *r = box->head, *next; r; r = next) {
        next = r->next;
        sl_transport_reply(srv, r->req, r);
    }
    box->head = box->tail = NULL;
    if (box->completing) {
        srv->completing -= box->completing;
        box->completing = 0;
        if (srv->draining) { /* it waits for completing under the lock */
            pthread_mutex_lock(&srv->lock);
            pthread_cond_broadcast(&srv->idle_cond);
            pthread_mutex_unlock(&srv->lock);
        }
    }
}
