/* Operator tools (operator.h). */
#include "operator.h"
#include "server.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <string.h>

/* The open sessions' names, so a trace names what it shows. */
static int trace_sessions(sl_server *srv, Salus__TraceReply *tr, sl_reply *r)
{
    size_t n = srv->sessions.table.count;
    tr->sessions = sl_reply_alloc(r, (n ? n : 1) * sizeof *tr->sessions);
    if (!tr->sessions)
        return SL_ENOMEM;
    size_t i = 0;
    void *v;
    while (tr->n_sessions < n && sl_map_next(&srv->sessions.table, &i, NULL, &v)) {
        const sl_session *s = v;
        Salus__TraceSession *x = sl_reply_alloc(r, sizeof *x);
        char *name = sl_reply_alloc(r, sizeof s->name);
        if (!x || !name)
            return SL_ENOMEM;
        salus__trace_session__init(x);
        memcpy(name, s->name, sizeof s->name);
        name[sizeof s->name - 1] = '\0';
        x->id = s->id;
        x->name = name;
        x->priority = s->job.sched.priority;
        tr->sessions[tr->n_sessions++] = x;
    }
    return SL_OK;
}

static int trace_stop(sl_server *srv, sl_reply *r)
{
    Salus__TraceReply *tr = sl_reply_alloc(r, sizeof *tr);
    sl_trace_event *ev = sl_calloc(SL_TRACE_EVENTS, sizeof *ev);
    if (!tr || !ev) {
        sl_free(ev);
        return SL_ENOMEM;
    }
    salus__trace_reply__init(tr);
    size_t n =
        sl_obs_trace_stop(&srv->obs, sl_now_ns(), ev, &tr->dropped, &tr->start_ns, &tr->end_ns);
    Salus__TraceEvent *cells = sl_reply_alloc(r, (n ? n : 1) * sizeof *cells);
    tr->events = sl_reply_alloc(r, (n ? n : 1) * sizeof *tr->events);
    if (!cells || !tr->events) {
        sl_free(ev);
        return SL_ENOMEM;
    }
    for (size_t k = 0; k < n; k++) {
        Salus__TraceEvent *e = &cells[k];
        salus__trace_event__init(e);
        e->kind = ev[k].kind;
        e->ts_ns = ev[k].ts_ns;
        e->dur_ns = ev[k].dur_ns;
        e->lane = ev[k].lane;
        e->session = ev[k].session;
        e->arg = ev[k].arg;
        e->priority = ev[k].priority;
        tr->events[k] = e;
    }
    tr->n_events = n;
    sl_free(ev);
    int rc = trace_sessions(srv, tr, r);
    if (rc != SL_OK)
        return rc;
    sl_reply_msg(r)->body_case = SALUS__REPLY__BODY_TRACE;
    sl_reply_msg(r)->trace = tr;
    sl_log_info("op.trace", "trace stopped: %zu events (%llu dropped)", n,
                (unsigned long long) tr->dropped);
    return SL_OK;
}

void sl_op_trace(sl_server *srv, const Salus__Trace *m, sl_reply *r)
{
    int rc;
    if (m->start) {
        rc = sl_obs_trace_start(&srv->obs, sl_now_ns());
        if (rc == SL_OK)
            sl_log_info("op.trace", "trace started");
    } else {
        rc = trace_stop(srv, r);
    }
    if (rc != SL_OK)
        sl_reply_error(r, rc, "out of host memory for the trace");
}

void sl_op_drain(sl_server *srv, sl_reply *r)
{
    if (!srv->cfg.drain) {
        sl_reply_error(r, SL_EUNSUPPORTED, "this server cannot be drained by request");
        return;
    }
    sl_log_info("op.drain", "an operator asked for a drain");
    srv->cfg.drain();
}

void sl_op_kill_session(sl_server *srv, const sl_peer *peer, const Salus__KillSession *m,
                        sl_reply *r, sl_outbox *box)
{
    int rc = sl_sessions_kill(&srv->sessions, m->target_session, peer, box);
    /* a tenant is told the same about another tenant's session as about a
     * missing one */
    if (!peer->is_operator && (rc == SL_ENOTFOUND || rc == SL_EPERM))
        sl_reply_error(r, SL_EPERM, SL_NOT_YOURS_SESSION, (unsigned long long) m->target_session);
    else if (rc == SL_ENOTFOUND)
        sl_reply_error(r, rc, "no open session %llu", (unsigned long long) m->target_session);
    else if (rc != SL_OK)
        sl_reply_error(r, rc, "out of host memory");
}
