/* The handlers of a session's requests: tensors, graphs and shared memory
 * (tensors.c), runs (runs.c). The session layer calls one for its head
 * request; each validates everything the client sent, fills the head's
 * reply, and says whether the request is done or waits. Lock held; never
 * blocks. */
#ifndef SL_HANDLERS_H
#define SL_HANDLERS_H

#include "config.h"
#include "reply.h"

#include <stdbool.h>

/* Defined in session.h, whose layer calls these: the handlers read and
 * change a session and its table but call nothing of that layer back, so
 * the calls between the two go one way. */
typedef struct sl_sessions sl_sessions;
typedef struct sl_session sl_session;
typedef struct sl_work sl_work;

/* Most tensor bytes one reply carries: no more than a request may carry
 * (--max-message), so that no message either way outgrows the limit, and
 * never more than a client accepts (libsalusclient: 2 GiB,
 * SL_CLIENT_MAX_MSG) less room for the envelope. Bigger reads and fetches
 * are refused before any host memory is committed to them. */
#define SL_MAX_REPLY_BYTES ((1ull << 31) - (2u << 20))
static inline uint64_t sl_max_reply_bytes(const sl_config *cfg)
{
    return cfg->max_message < SL_MAX_REPLY_BYTES ? cfg->max_message : SL_MAX_REPLY_BYTES;
}

enum sl_handled {
    SL_HANDLED,       /* the reply is complete */
    SL_HANDLED_LATER, /* device work is in flight: the executor's done hook ends it */
    SL_HANDLED_WAIT,  /* a registration waits for its lane to go idle */
};

int sl_handle_create_tensor(sl_sessions *ss, sl_session *s, sl_work *w);
int sl_handle_write_tensor(sl_sessions *ss, sl_session *s, sl_work *w);
int sl_handle_read_tensor(sl_sessions *ss, sl_session *s, sl_work *w);
/* *freed: device memory was released (waiting sessions may fit now). */
int sl_handle_free_tensor(sl_sessions *ss, sl_session *s, sl_work *w, bool *freed);
int sl_handle_register_graph(sl_sessions *ss, sl_session *s, sl_work *w);
/* A registration that waited (SL_HANDLED_WAIT): tries its lane again. */
int sl_handle_place_graph(sl_sessions *ss, sl_session *s, sl_work *w);
int sl_handle_free_graph(sl_sessions *ss, sl_session *s, sl_work *w);
/* Installs the segment staged under the request's ticket (shm_socket.c),
 * retiring the one the session had: in session order, so no run of the
 * session uses it any more. Opens and maps nothing. */
int sl_handle_attach_shm(sl_sessions *ss, sl_session *s, sl_work *w);
/* Validates a run and queues it on the executor. */
int sl_handle_run(sl_sessions *ss, sl_session *s, sl_work *w, sl_outbox *box);
/* A finished run's reply gets its timings (status OK). */
void sl_handle_run_done(sl_work *w);

#endif
