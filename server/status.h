/* The status reply: memory per class, lanes, sessions, the admission queue
 * and counters, read from every part (never written). */
#ifndef SL_STATUS_H
#define SL_STATUS_H

#include "reply.h"

typedef struct sl_server sl_server;

/* Builds the status reply body inside r. Lock held. Errors: SL_ENOMEM. */
int sl_status_build(sl_server *srv, sl_reply *r);

#endif
