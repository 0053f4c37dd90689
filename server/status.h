/* The status reply: memory per class, lanes, sessions, the admission queue
 * and counters, read from every part (never written). */
#ifndef SL_STATUS_H
#define SL_STATUS_H

#include "reply.h"
#include "tenants.h"

typedef struct sl_server sl_server;

/* Builds the status reply body for peer inside r: an operator sees every
 * session, anyone else only its own (sl_session_owned_by) and the
 * device-wide figures; both see their own rights and limits. Lock held.
 * Errors: SL_ENOMEM. */
int sl_status_build(sl_server *srv, const sl_peer *peer, sl_reply *r);

#endif
