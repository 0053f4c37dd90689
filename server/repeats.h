/* Repeated requests. NNG's REQ sockets re-send a request whose reply is
 * late (every NNG client's default resend time is 60 s): without care a
 * long iteration would run twice. A request is a repeat when its
 * connection, session and nonzero sequence number are those of one in
 * flight or of the last one answered on that connection. A repeat of one
 * in flight is not run: the first one's reply answers it (the client takes
 * the first reply with its request's id). A repeat of the last answered
 * one gets a copy of that reply when it was small (SL_REPEATS_KEEP bytes),
 * otherwise it is told that the request was answered already. Sequence
 * number 0 opts out.
 *
 * Thread-safe: one lock of its own, never held across anything else.
 * Memory: a record per connection (dropped when it closes) holding its
 * requests in flight (at most the server's contexts) and a buffer of
 * SL_REPEATS_KEEP bytes for its last reply. */
#ifndef SL_REPEATS_H
#define SL_REPEATS_H

#include "reply.h"
#include "sl_map.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_REPEATS_KEEP 4096

typedef struct sl_repeats {
    pthread_mutex_t lock;
    sl_map pipes;       /* connection id -> struct pipe_rec */
    uint32_t gone[256]; /* recently closed connections: never tracked again */
    uint32_t gone_next;
    _Atomic uint64_t seen; /* repeats recognised */
} sl_repeats;

int sl_repeats_init(sl_repeats *rp);
void sl_repeats_fini(sl_repeats *rp);

enum sl_repeat {
    SL_REPEAT_NEW,       /* not a repeat: run it (now tracked when seq != 0) */
    SL_REPEAT_IN_FLIGHT, /* the first one is still running: do not answer */
    SL_REPEAT_ANSWERED,  /* answered already: *copy is its reply (or NULL) */
};

/* Classifies request (pipe_id, session_id, seq). For SL_REPEAT_ANSWERED,
 * *copy receives a malloc'd copy of the encoded reply (*len bytes; the
 * caller frees it), or NULL when it was too large to keep. */
int sl_repeats_check(sl_repeats *rp, uint32_t pipe_id, uint64_t session_id, uint64_t seq,
                     void **copy, size_t *len);
/* Reply r is leaving (a transport tap, transport.h: bytes is its encoded
 * form, or NULL): when it answers a tracked request, that request is no
 * longer in flight and r becomes its connection's last answer. */
void sl_repeats_answered(void *rp, sl_reply *r, const void *bytes, size_t len);
/* Connection pipe_id closed: its record goes. */
void sl_repeats_pipe_gone(sl_repeats *rp, uint32_t pipe_id);

#endif
