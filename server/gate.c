/* The request gate (gate.h). */
#include "gate.h"
#include "decode.h"
#include "job_requests.h"
#include "server.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "operator.h"
#include "status.h"

#include <string.h>

static void answer_hello(sl_server *srv, const Salus__Hello *m, sl_reply *r)
{
    if (m->protocol_version != SL_PROTOCOL_VERSION) {
        sl_reply_error(r, SL_EPROTO, "protocol version %u is not supported (server speaks %u)",
                       m->protocol_version, SL_PROTOCOL_VERSION);
        return;
    }
    Salus__HelloReply *body = sl_reply_alloc(r, sizeof *body);
    if (!body) {
        sl_reply_error(r, SL_ENOMEM, "out of host memory");
        return;
    }
    salus__hello_reply__init(body);
    body->protocol_version = SL_PROTOCOL_VERSION;
    body->server_version = (char *) SL_SERVER_VERSION;
    body->device = srv->dev->description;
    body->policy = (char *) sl_sched_policy(srv->exec.sched)->name;
    body->max_message = srv->cfg.max_message;
    sl_reply_msg(r)->body_case = SALUS__REPLY__BODY_HELLO;
    sl_reply_msg(r)->hello = body;
}

/* SetPolicy with partitions: the compute partitions instead of the policy. */
static void set_partitions(sl_server *srv, const char *text, sl_reply *r)
{
    enum sl_parts_mode mode;
    unsigned units;
    if (sl_parts_parse(text, &mode, &units) != SL_OK) {
        sl_reply_error(r, SL_EINVAL, "partitions take off, demand, auto, auto:N or N");
        return;
    }
    int rc = sl_exec_set_partitions(&srv->exec, mode, units);
    if (rc == SL_EUNSUPPORTED)
        sl_reply_error(r, rc, "this device has no compute partitions (see status)");
    else if (rc == SL_EBUSY)
        sl_reply_error(r, rc, "partitions change here only while no lane runs: try again");
    else if (rc == SL_EINVAL)
        sl_reply_error(r, rc, "%u units leave no room for the other lanes", units);
    else if (rc != SL_OK)
        sl_reply_error(r, rc, "cannot change the partitions");
}

static void set_policy(sl_server *srv, const Salus__SetPolicy *m, sl_reply *r, sl_outbox *box)
{
    if (m->partitions && m->partitions[0]) {
        set_partitions(srv, m->partitions, r);
        return;
    }
    const sl_policy_ops *p = m->policy ? sl_sched_policy_find(m->policy) : NULL;
    if (!p) {
        sl_reply_error(r, SL_EINVAL, "unknown policy '%s' (known: %s)", m->policy ? m->policy : "",
                       sl_sched_policy_names());
        return;
    }
    sl_exec_set_policy(&srv->exec, p, m->strict, box);
    /* waiting sessions take their places in the new order, and what may go
     * in now does */
    sl_sessions_rerank(&srv->sessions);
    sl_sessions_memory_changed(&srv->sessions, box);
    sl_log_info("sch.policy", "policy set to %s%s", p->name, m->strict ? " (strict)" : "");
}

/* Who sent req (over connection pipe_id). */
static void peer_of(const sl_req *req, uint32_t pipe_id, sl_peer *out)
{
    *out = (sl_peer){.pipe_id = pipe_id, .is_operator = sl_req_is_operator(req)};
    out->has_uid = sl_req_peer_uid(req, &out->uid);
}

/* Operators change any session; an owner changes its own, within its
 * tenant's limits. Asking for more is refused, not clamped: the caller
 * asked for a change, and a silent partial one would mislead it. */
static void set_session(sl_server *srv, const sl_peer *peer, const Salus__SetSession *m,
                        sl_reply *r, sl_outbox *box)
{
    sl_session *t = sl_sessions_find(&srv->sessions, m->target_session);
    if (!t || (!peer->is_operator && !sl_session_owned_by(t, peer))) {
        if (t)
            sl_log_warn("ses.foreign", "pipe %u tried to change session %llu of another tenant",
                        peer->pipe_id, (unsigned long long) t->id);
        /* another tenant's session and a missing one get the same answer:
         * a tenant learns nothing about ids it does not own */
        if (peer->is_operator)
            sl_reply_error(r, SL_ENOTFOUND, "no open session %llu",
                           (unsigned long long) m->target_session);
        else
            sl_reply_error(r, SL_EPERM, SL_NOT_YOURS_SESSION,
                           (unsigned long long) m->target_session);
        return;
    }
    if (m->set_weight && !(m->weight > 0 && m->weight < 1e6)) {
        sl_reply_error(r, SL_EINVAL, "weight must be in (0, 1e6)");
        return;
    }
    if (!peer->is_operator) {
        sl_limits lim;
        sl_sessions_limits_of(&srv->sessions, t, &lim);
        if (m->set_priority && m->priority > lim.max_priority) {
            sl_reply_error(r, SL_EPERM,
                           "priority %d is above your limit %d (salusd --tenant-limits / "
                           "--user-limits priority=, or ask an operator)",
                           m->priority, lim.max_priority);
            return;
        }
        if (m->set_weight && m->weight > lim.max_weight) {
            sl_reply_error(r, SL_EPERM,
                           "weight %.3g is above your limit %.3g (salusd --tenant-limits / "
                           "--user-limits weight=, or ask an operator)",
                           m->weight, lim.max_weight);
            return;
        }
    }
    int priority = m->priority;
    double weight = m->weight;
    sl_exec_set_share(&srv->exec, &t->job, m->set_priority ? &priority : NULL,
                      m->set_weight ? &weight : NULL, box);
    sl_log_info("sch.session", "session %llu: priority %d, weight %.3g", (unsigned long long) t->id,
                t->job.sched.priority, t->job.sched.weight);
}

/* Whether req may use session s: s was not opened over ipc://, or req
 * comes from a peer with the same uid. */
static bool same_user(const sl_req *req, const sl_session *s)
{
    uint64_t uid;
    return !s->has_uid || (sl_req_peer_uid(req, &uid) && uid == s->uid);
}

/* SetPolicy is for operators only (tenants.h says who they are). */
static bool operator_allowed(const sl_peer *peer, sl_reply *r)
{
    if (peer->is_operator)
        return true;
    sl_log_warn("net.operator", "operator request refused to pipe %u (%s)", peer->pipe_id,
                peer->has_uid ? "not root or salusd's user" : "not an operator listener");
    sl_reply_error(r, SL_EPERM,
                   "operator requests are for root and salusd's own user over ipc://, and for "
                   "clients of an --operator-listen listener");
    return false;
}

/* Requests that read or write no device memory. */
static bool touches_no_device(const Salus__Request *msg)
{
    return msg->body_case == SALUS__REQUEST__BODY_CLOSE_SESSION ||
           msg->body_case == SALUS__REQUEST__BODY_FREE_TENSOR ||
           msg->body_case == SALUS__REQUEST__BODY_FREE_GRAPH;
}

/* The session a request names, checked; NULL with the refusal in r. */
static sl_session *session_of(sl_server *srv, const sl_req *req, const Salus__Request *msg,
                              uint32_t pipe_id, sl_reply *r)
{
    if (msg->session_id == 0) {
        sl_reply_error(r, SL_EINVAL,
                       "this request needs a session: set session_id and token from "
                       "OpenSession's reply (only Hello, OpenSession, Status, SetPolicy and "
                       "SetSession go without)");
        return NULL;
    }
    sl_session *s = sl_sessions_find(&srv->sessions, msg->session_id);
    if (s && msg->token != s->token)
        sl_log_warn("ses.token", "wrong token for session %llu from pipe %u",
                    (unsigned long long) s->id, pipe_id);
    /* a wrong token is answered as a missing session, word for word: the
     * answer never tells whether an id is in use */
    if (!s || msg->token != s->token) {
        sl_reply_error(r, SL_ESESSIONLOST, SL_NO_SESSION, (unsigned long long) msg->session_id);
        return NULL;
    }
    if (!same_user(req, s)) {
        sl_log_warn("ses.uid", "session %llu refused to pipe %u: another user",
                    (unsigned long long) s->id, pipe_id);
        sl_reply_error(r, SL_EPERM, "session %llu belongs to another user",
                       (unsigned long long) s->id);
        return NULL;
    }
    return s;
}

/* Lock held. Returns true when req and msg were taken (held for a device
 * reset, queued on a session, or kept for admission); r is then taken too. */
static bool route(sl_server *srv, sl_req *req, Salus__Request *msg, uint32_t pipe_id, sl_reply *r,
                  sl_outbox *box)
{
    sl_peer peer;
    peer_of(req, pipe_id, &peer);
    switch (msg->body_case) {
    case SALUS__REQUEST__BODY_HELLO:
        answer_hello(srv, msg->hello, r);
        return false;
    case SALUS__REQUEST__BODY_STATUS:
        if (sl_status_build(srv, &peer, r) != SL_OK)
            sl_reply_error(r, SL_ENOMEM, "out of host memory");
        return false;
    case SALUS__REQUEST__BODY_OPEN_SESSION:
        if (sl_sessions_open(&srv->sessions, msg->open_session, req, &peer, r)) {
            sl_request_free(msg);
            return true; /* answered at admission */
        }
        return false;
    case SALUS__REQUEST__BODY_SET_POLICY:
        if (operator_allowed(&peer, r))
            set_policy(srv, msg->set_policy, r, box);
        return false;
    case SALUS__REQUEST__BODY_SET_SESSION:
        set_session(srv, &peer, msg->set_session, r, box);
        return false;
    case SALUS__REQUEST__BODY_REGISTER_JOB:
        if (operator_allowed(&peer, r))
            sl_job_request_register(&srv->sessions, msg->register_job, r);
        return false;
    case SALUS__REQUEST__BODY_CLOSE_JOB:
        if (operator_allowed(&peer, r))
            sl_job_request_close(&srv->sessions, msg->close_job, r, box);
        return false;
    case SALUS__REQUEST__BODY_TRACE:
        if (operator_allowed(&peer, r))
            sl_op_trace(srv, msg->trace, r);
        return false;
    case SALUS__REQUEST__BODY_DRAIN:
        if (operator_allowed(&peer, r))
            sl_op_drain(srv, r);
        return false;
    case SALUS__REQUEST__BODY_KILL_SESSION:
        sl_op_kill_session(srv, &peer, msg->kill_session, r, box);
        return false;
    case SALUS__REQUEST__BODY__NOT_SET:
        sl_reply_error(r, SL_EINVAL, "empty request: set one of the request bodies");
        return false;
    default:
        break;
    }
    sl_session *s = session_of(srv, req, msg, pipe_id, r);
    if (!s)
        return false;
    sl_fault *f = &srv->fault;
    if (f->dead && !touches_no_device(msg)) {
        sl_reply_error(r, SL_ENODEV, "the device was lost and could not be reset; restart salusd");
        return false;
    }
    if (f->lost) {
        /* even a close or a free waits: what it sets off (admissions,
         * waiting registrations) must not reach a stream being replaced */
        if (sl_fault_hold(f, req, msg)) {
            sl_reply_free(r);
            return true;
        }
        sl_reply_error(r, SL_EDEVICERESET, "the device is being reset; " SL_RESET_NOTICE);
        s->reset_pending = false;
        return false;
    }
    if (s->reset_pending && !touches_no_device(msg)) {
        s->reset_pending = false;
        sl_reply_error(r, SL_EDEVICERESET,
                       "the device was reset after a fault (session %llu); " SL_RESET_NOTICE,
                       (unsigned long long) s->id);
        return false;
    }
    sl_sessions_submit(&srv->sessions, s, req, msg, r, box);
    return true;
}

/* Answers req with r alone, through the sender; r NULL (no memory for a
 * reply) re-arms req's context unanswered. */
static void answer(sl_server *srv, sl_req *req, sl_reply *r)
{
    if (!r) {
        sl_transport_send(req, NULL, NULL, NULL);
        return;
    }
    sl_outbox box = {0};
    sl_outbox_put(&box, req, r);
    sl_sender_send(&srv->sender, &box);
}

static void dispatch(sl_server *srv, sl_req *req, Salus__Request *msg, uint32_t pipe_id,
                     bool first_time)
{
    void *copy = NULL;
    size_t len = 0;
    sl_reply *r = NULL;
    switch (first_time
                ? sl_repeats_check(&srv->repeats, pipe_id, msg->session_id, msg->seq, &copy, &len)
                : SL_REPEAT_NEW) {
    case SL_REPEAT_IN_FLIGHT: /* the first one's reply answers it */
        sl_request_free(msg);
        answer(srv, req, NULL);
        return;
    case SL_REPEAT_ANSWERED:
        if (copy) {
            sl_transport_send_bytes(req, copy, len);
            sl_free(copy);
        } else if ((r = sl_reply_new(msg->seq))) {
            sl_reply_error(r, SL_EINVAL,
                           "request %llu was answered already (a repeat: disable REQ resend, "
                           "NNG_OPT_REQ_RESENDTIME = -1); its %zu-byte reply was too large to "
                           "keep",
                           (unsigned long long) msg->seq, len);
            answer(srv, req, r);
        } else {
            answer(srv, req, NULL);
        }
        sl_request_free(msg);
        return;
    default:
        break;
    }
    if (!(r = sl_reply_new(msg->seq))) {
        sl_request_free(msg);
        answer(srv, req, NULL);
        return;
    }
    sl_reply_track(r, pipe_id, msg->session_id);
    sl_outbox box = {0};
    pthread_mutex_lock(&srv->lock);
    if (!route(srv, req, msg, pipe_id, r, &box)) {
        sl_request_free(msg);
        sl_outbox_put(&box, req, r);
    }
    pthread_mutex_unlock(&srv->lock);
    sl_sender_send(&srv->sender, &box);
}

void sl_gate_dispatch(sl_server *srv, sl_req *req, Salus__Request *msg, uint32_t pipe_id)
{
    atomic_fetch_add(&srv->requests, 1);
    dispatch(srv, req, msg, pipe_id, true);
}

void sl_gate_request(void *arg, sl_req *req, const void *body, size_t len)
{
    sl_server *srv = arg;
    Salus__Request *msg = NULL;
    char why[SL_REPLY_MAX_MESSAGE];
    int rc = sl_decode_request(&srv->decoder, body, len, &msg, why, sizeof why);
    if (rc == SL_OK) {
        sl_gate_dispatch(srv, req, msg, sl_req_pipe(req));
        return;
    }
    atomic_fetch_add(&srv->requests, 1);
    sl_log_debug("net.decode", "request of %zu bytes from pipe %u refused: %s", len,
                 sl_req_pipe(req), why);
    /* an undecodable request has no seq; a refused one keeps its own so that
     * the client matches the refusal to its request */
    sl_reply *r = sl_reply_new(rc == SL_EPROTO ? 0 : sl_decode_peek_seq(body, len));
    if (r)
        sl_reply_error(r, rc, "%s", why);
    answer(srv, req, r);
}

void sl_gate_release(void *arg, sl_req *req, Salus__Request *msg, bool dropping)
{
    sl_server *srv = arg;
    if (!dropping) {
        dispatch(srv, req, msg, req ? sl_req_pipe(req) : 0, false);
        return;
    }
    sl_reply *r = sl_reply_new(msg->seq);
    if (r) {
        sl_reply_error(r, SL_ESHUTDOWN, "server is shutting down");
        sl_reply_track(r, req ? sl_req_pipe(req) : 0, msg->session_id);
    }
    sl_request_free(msg);
    answer(srv, req, r);
}

void sl_gate_pipe_gone(void *arg, uint32_t pipe_id)
{
    sl_server *srv = arg;
    sl_repeats_pipe_gone(&srv->repeats, pipe_id);
    if (atomic_load(&srv->stopping))
        return;
    sl_outbox box = {0};
    pthread_mutex_lock(&srv->lock);
    sl_sessions_pipe_gone(&srv->sessions, pipe_id, &box);
    pthread_mutex_unlock(&srv->lock);
    sl_sender_send(&srv->sender, &box);
}
