/* Replies and outboxes: the only thing the server's parts hand back up.
 *
 * A reply is an envelope plus an arena that every part of it (bodies,
 * strings, fetched tensor data) is allocated from, so it is freed in one
 * call. An outbox is a plain list of replies with their destinations,
 * collected while the server lock is held and sent by the server once it is
 * released (server.c): no part sends anything itself. */
#ifndef SL_REPLY_H
#define SL_REPLY_H

#include "device.h"
#include "salus.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_reply sl_reply;
/* A request's way back (transport.h): where its reply goes. */
typedef struct sl_req sl_req;

/* A new reply for request seq with code OK. NULL on OOM. */
sl_reply *sl_reply_new(uint64_t seq);
/* When r was made: about when its request was taken in (request latency). */
uint64_t sl_reply_born_ns(const sl_reply *r);
/* Zeroed, 16-byte aligned memory that lives as long as r. NULL on OOM. */
void *sl_reply_alloc(sl_reply *r, size_t bytes);
/* Longest error message a reply carries (the list of known ops fits). */
#define SL_REPLY_MAX_MESSAGE 1024

/* Sets the code and a formatted message, cut at SL_REPLY_MAX_MESSAGE - 1
 * bytes (the body, if any, is dropped). */
void sl_reply_error(sl_reply *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The envelope, to fill in a body. */
Salus__Reply *sl_reply_msg(sl_reply *r);
/* A wire descriptor of shape s, allocated from r; NULL on OOM. */
Salus__TensorDesc *sl_reply_desc(sl_reply *r, const sl_shape *s);
/* Marks r as the answer to a request the gate tracks for repeats (gate.h):
 * when it is sent the gate learns that request (pipe, session, r's seq)
 * was answered. */
void sl_reply_track(sl_reply *r, uint32_t pipe_id, uint64_t session_id);
/* Whether r answers a tracked request; its pipe and session when so. */
bool sl_reply_tracked(const sl_reply *r, uint32_t *pipe_id, uint64_t *session_id);
/* Frees r (NULL is fine). */
void sl_reply_free(sl_reply *r);

/* Replies to send once the lock is released (linked through the replies,
 * so queueing never allocates). Zero-initialise. */
typedef struct sl_outbox {
    sl_reply *head, *tail;
    /* a stream held with a small iteration that the sending thread runs
     * (device.h stream_hold) before it sends: see server.c */
    sl_stream *run_here;
    /* replies counted as "being completed" (server.c) that this box holds */
    uint32_t completing;
} sl_outbox;

/* Queues reply for req; req NULL (nobody to send to) frees it when sent.
 * reply NULL is ignored. */
void sl_outbox_put(sl_outbox *box, sl_req *req, sl_reply *reply);
/* Pops the first reply and its destination; NULL when empty. */
sl_reply *sl_outbox_take(sl_outbox *box, sl_req **req);
/* Appends from's replies to to's, and moves its completing count. */
void sl_outbox_move(sl_outbox *to, sl_outbox *from);

#endif
