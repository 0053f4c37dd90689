/* The request gate: where every request enters the server. It decodes the
 * bytes, recognises repeats (repeats.h), answers what needs no session
 * (Hello, Status, SetPolicy, SetSession, and OpenSession through the
 * session layer), checks a session request's session, token and owner,
 * holds it while the device is being reset (fault.h), and hands it to its
 * session. Every reply's words for these refusals are written here. */
#ifndef SL_GATE_H
#define SL_GATE_H

#include "reply.h"
#include "salus.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_server sl_server;

/* The transport's request hook (transport.h): arg is the server. */
void sl_gate_request(void *arg, sl_req *req, const void *body, size_t len);
/* The transport's pipe-gone hook: arg is the server. */
void sl_gate_pipe_gone(void *arg, uint32_t pipe_id);
/* A decoded request from connection pipe_id goes through the gate (req
 * NULL: nobody to answer; tests). Takes msg. Lock not held. */
void sl_gate_dispatch(sl_server *srv, sl_req *req, Salus__Request *msg, uint32_t pipe_id);
/* A request held during a device reset goes on (it was checked for
 * repeats when it first came), or is refused (dropping: salusd stops).
 * The fault part's release hook; arg is the server. */
void sl_gate_release(void *arg, sl_req *req, Salus__Request *msg, bool dropping);

#endif
