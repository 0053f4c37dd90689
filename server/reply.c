/* Replies: an envelope plus a chunked arena, so a reply of any shape (a
 * status table, fetched tensors) is built without per-field bookkeeping and
 * freed in one call; outboxes are plain lists of them. */
#include "reply.h"
#include "sl_text.h"
#include "sl_alloc.h"
#include "sl_time.h"

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
    bool tracked; /* answers a request the gate tracks for repeats */
    uint32_t pipe_id;
    uint64_t session_id;
    uint64_t born_ns; /* when the request it answers was taken in */
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
    r->born_ns = sl_now_ns();
    return r;
}

uint64_t sl_reply_born_ns(const sl_reply *r)
{
    return r->born_ns;
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
    char text[SL_REPLY_MAX_MESSAGE];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t) n < sizeof text ? (size_t) n : sizeof text - 1;
    if (!sl_text_is_clean(text, len, 0)) {
        /* a client's words in the message (a graph's op name, a policy
         * name) reach a terminal through salusctl or a log */
        char raw[SL_REPLY_MAX_MESSAGE];
        memcpy(raw, text, len);
        len = sl_escape(text, sizeof text, raw, len, 0);
    }
    /* short messages (all but a few) live in the reply itself */
    char *to = r->message;
    if (len >= sizeof r->message && !(to = sl_reply_alloc(r, len + 1))) {
        to = r->message;
        len = sizeof r->message - 1;
    }
    memcpy(to, text, len);
    to[len] = '\0';
    r->msg.message = to;
    r->msg.code = (Salus__Code) code;
    r->msg.body_case = SALUS__REPLY__BODY__NOT_SET;
}

Salus__Reply *sl_reply_msg(sl_reply *r)
{
    return &r->msg;
}

Salus__TensorDesc *sl_reply_desc(sl_reply *r, const sl_shape *s)
{
    Salus__TensorDesc *d = sl_reply_alloc(r, sizeof *d);
    int64_t *dims = sl_reply_alloc(r, SL_MAX_DIMS * sizeof *dims);
    if (!d || !dims)
        return NULL;
    salus__tensor_desc__init(d);
    d->dtype = (Salus__DType) s->dtype;
    d->n_dims = s->ndim;
    d->dims = dims;
    memcpy(dims, s->dims, s->ndim * sizeof *dims);
    return d;
}

void sl_reply_track(sl_reply *r, uint32_t pipe_id, uint64_t session_id)
{
    r->tracked = true;
    r->pipe_id = pipe_id;
    r->session_id = session_id;
}

bool sl_reply_tracked(const sl_reply *r, uint32_t *pipe_id, uint64_t *session_id)
{
    if (!r->tracked)
        return false;
    *pipe_id = r->pipe_id;
    *session_id = r->session_id;
    return true;
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

sl_reply *sl_outbox_take(sl_outbox *box, sl_req **req)
{
    sl_reply *r = box->head;
    if (!r)
        return NULL;
    box->head = r->next;
    if (!box->head)
        box->tail = NULL;
    r->next = NULL;
    *req = r->req;
    return r;
}

void sl_outbox_move(sl_outbox *to, sl_outbox *from)
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
