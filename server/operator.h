/* Operator tools behind salusctl: Trace (the timeline), Drain and
 * KillSession (proto/salus.proto OPERATOR TOOLS). The gate checks rights
 * first (operators; KillSession also a session's owner); these build the
 * replies. Called with the server lock held; never block. */
#ifndef SL_OPERATOR_H
#define SL_OPERATOR_H

#include "reply.h"
#include "salus.pb-c.h"
#include "tenants.h"

typedef struct sl_server sl_server;

/* Trace start (clears the ring) or stop (the events into r). The reply
 * holds at most SL_TRACE_EVENTS events and one record per open session. */
void sl_op_trace(sl_server *srv, const Salus__Trace *m, sl_reply *r);
/* Asks salusd to drain (cfg.drain), replying first. */
void sl_op_drain(sl_server *srv, sl_reply *r);
/* Closes a session for an operator or its owner. */
void sl_op_kill_session(sl_server *srv, const sl_peer *peer, const Salus__KillSession *m,
                        sl_reply *r, sl_outbox *box);

#endif
