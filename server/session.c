/* Sessions (session.h): the table, admission, and each session's queue of
 * work, run strictly in order through the handlers. */
#include "session.h"
#include "decode.h"
#include "handlers.h"
#include "replay.h"
#include "sl_alloc.h"
#include "sl_cgroup.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_text.h"
#include "sl_time.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static uint64_t random_u64(void)
{
    uint64_t t = 0;
    if (getrandom(&t, sizeof t, 0) != (ssize_t) sizeof t)
        t = sl_now_ns() * 0x9E3779B97F4A7C15ull; /* getrandom cannot fail for 8 bytes */
    return t;
}

void sl_sessions_init(sl_sessions *ss, const sl_config *cfg, sl_exec *ex, sl_fault *fault,
                      sl_mem_mgr *mem, sl_shm_plane *shm)
{
    ss->shm = shm;
    ss->cfg = cfg;
    ss->ex = ex;
    ss->fault = fault;
    ss->mem = mem;
    ss->next_id = ((random_u64() & 0x7fffff) | (1u << 23)) << 16;
    ss->tenants.defaults = &cfg->tenant_limits;
    ss->tenants.rules = cfg->limit_rules;
    ss->tenants.n_rules = cfg->n_limit_rules;
    ss->tenants.default_sessions = sl_tenant_default_sessions(
        cfg->max_sessions ? cfg->max_sessions : SL_DEFAULT_MAX_SESSIONS, cfg->expected_tenants);
    ss->tenants.jobs = &ss->jobs;
    /* a quarter of the memory salusd may use: its cgroup's limit where one
     * is set, so that graphs tenants pin cannot get it OOM-killed */
    uint64_t host = sl_host_memory();
    ss->host_limit = cfg->max_metadata ? cfg->max_metadata
                     : host            ? host / 4
                                       : SL_DEFAULT_SESSION_METADATA * 16;
}

/* The request a lost connection's sessions are closed with. */
static Salus__Request lost_close = {
    .base = PROTOBUF_C_MESSAGE_INIT(&salus__request__descriptor),
    .body_case = SALUS__REQUEST__BODY_CLOSE_SESSION,
};

static void work_free(sl_work *w)
{
    sl_graph_free(w->graph); /* a registration that never got its lane */
    if (w->msg && w->msg != &lost_close)
        sl_request_free(w->msg);
    sl_reply_free(w->reply);
    sl_free(w);
}

/* Pops the session's head work, queues its reply and frees it. */
static void finish_head(sl_sessions *ss, sl_session *s, sl_outbox *box)
{
    sl_work *w = s->head;
    s->head = w->next;
    if (!s->head)
        s->tail = NULL;
    s->busy = false;
    if (s->blocked)
        ss->n_blocked--;
    s->blocked = false;
    sl_outbox_put(box, w->req, w->reply);
    w->reply = NULL;
    work_free(w);
}

/* Fails every piece of work still queued on s (the head included). */
static void fail_pending(sl_sessions *ss, sl_session *s, int code, const char *why, sl_outbox *box)
{
    while (s->head) {
        sl_reply_error(s->head->reply, code, "%s", why);
        finish_head(ss, s, box);
    }
}

static void session_free(sl_sessions *ss, sl_session *s)
{
    size_t i = 0;
    void *v;
    while (s->head) {
        sl_work *w = s->head;
        s->head = w->next;
        work_free(w);
    }
    while (sl_map_next(&s->graphs, &i, NULL, &v))
        sl_graph_free(v);
    /* the blocks themselves go back with sl_mem_release */
    i = 0;
    while (sl_map_next(&s->tensors, &i, NULL, &v))
        sl_free(v);
    sl_map_fini(&s->graphs);
    sl_map_fini(&s->tensors);
    sl_shm_retire(ss->shm, s->shm);
    sl_shm_retire(ss->shm, s->shm_staged);
    sl_reply_free(s->admit_reply);
    sl_free(s);
}

void sl_sessions_fini(sl_sessions *ss)
{
    size_t i = 0;
    void *v;
    while (sl_map_next(&ss->table, &i, NULL, &v))
        session_free(ss, v);
    sl_map_fini(&ss->table);
    sl_tenants_fini(&ss->tenants);
    sl_jobs_fini(&ss->jobs);
}

/* s leaves the table: its tenant holds it no longer, nor its recordings. */
static void tenant_release(sl_sessions *ss, const sl_session *s)
{
    uint64_t held = s->tenant_charge + s->recording_charge;
    sl_tenants_remove(&ss->tenants, s->tenant, held < s->tenant_charge ? UINT64_MAX : held);
}

/* Counts against s's tenant what the memory manager holds of s's recorded
 * graphs outside its persistent reservation (nothing once it left the
 * manager: tenant_release gives it back then). */
static void recordings_sync(sl_sessions *ss, sl_session *s)
{
    sl_mem_session_info mi;
    uint64_t outside = sl_mem_session_get(ss->mem, s->id, &mi) == SL_OK ? mi.framework_outside : 0;
    if (outside > s->recording_charge)
        sl_tenants_charge(&ss->tenants, s->tenant, outside - s->recording_charge);
    else
        sl_tenants_discharge(&ss->tenants, s->tenant, s->recording_charge - outside);
    s->recording_charge = outside;
}

bool sl_sessions_recording_room(sl_sessions *ss, const sl_exec_job *job, uint64_t outside,
                                char *why, size_t len)
{
    const sl_session *s = sl_container_of(job, const sl_session, job);
    if (!s->limited)
        return true;
    sl_peer owner = sl_session_owner(s);
    return sl_tenants_recording_room(&ss->tenants, &owner, s->tenant, outside, why, len);
}

void sl_sessions_recordings_charged(sl_sessions *ss, sl_exec_job *job)
{
    recordings_sync(ss, sl_container_of(job, sl_session, job));
}

_Static_assert(SL_MEM_FRAGMENTATION < SL_OBS_WAIT_REASONS, "a wait reason without a counter");

/* s's wait for admission ended, admitted or not: its time is counted by
 * the reason it began waiting for, and a wait that ended in admission
 * goes into that reason's histogram (metrics.c). */
static void wait_ended(sl_sessions *ss, sl_session *s, bool admitted)
{
    sl_obs *obs = ss->ex->obs;
    if (!s->wait_reason)
        return;
    uint64_t ns = sl_now_ns() - s->open_ns;
    if (obs) {
        atomic_fetch_add_explicit(&obs->admission_wait_ns[s->wait_reason], ns,
                                  memory_order_relaxed);
        if (admitted)
            sl_hist_observe(&obs->admission_wait[s->wait_reason], ns);
    }
    s->wait_reason = 0;
}

static void pump(sl_sessions *ss, sl_session *s, sl_outbox *box);

/* CLOSE_SESSION (or a lost connection): everything of s goes. */
static void session_close(sl_sessions *ss, sl_session *s, sl_outbox *box)
{
    sl_work *w = s->head;
    s->head = w->next;
    sl_outbox_put(box, w->req, w->reply);
    w->reply = NULL;
    work_free(w);
    /* work queued after a close has no session to run in */
    fail_pending(ss, s, SL_ESESSIONLOST, "session closed", box);
    sl_exec_leave(ss->ex, &s->job, box);
    if (s->admit_reply) { /* still waiting for admission: that wait ends too */
        wait_ended(ss, s, false);
        sl_reply_error(s->admit_reply, SL_ESESSIONLOST,
                       "session closed while waiting for admission");
        sl_outbox_put(box, s->admit_req, s->admit_reply);
        s->admit_req = NULL;
        s->admit_reply = NULL;
    }
    sl_mem_release(ss->mem, s->id);
    ss->host_bytes -= s->host_bytes;
    (void) sl_map_del(&ss->table, s->id);
    tenant_release(ss, s);
    sl_log_info("ses.close", "session %llu (%s) closed: %llu iterations, %.3f s on device",
                (unsigned long long) s->id, s->name,
                (unsigned long long) s->job.sched.iterations_done,
                (double) s->job.sched.attained_ns / 1e9);
    session_free(ss, s);
    sl_sessions_memory_changed(ss, box);
}

/* Runs s's queued work until something must wait for the device. May free
 * s (close). */
static void pump(sl_sessions *ss, sl_session *s, sl_outbox *box)
{
    while (s->head && !s->busy) {
        sl_work *w = s->head;
        bool freed = false;
        int h = SL_HANDLED;
        s->busy = true;
        switch (w->msg->body_case) {
        case SALUS__REQUEST__BODY_CLOSE_SESSION:
            session_close(ss, s, box);
            return;
        case SALUS__REQUEST__BODY_CREATE_TENSOR:
            h = sl_handle_create_tensor(ss, s, w);
            break;
        case SALUS__REQUEST__BODY_WRITE_TENSOR:
            h = sl_handle_write_tensor(ss, s, w);
            break;
        case SALUS__REQUEST__BODY_READ_TENSOR:
            h = sl_handle_read_tensor(ss, s, w);
            break;
        case SALUS__REQUEST__BODY_FREE_TENSOR:
            h = sl_handle_free_tensor(ss, s, w, &freed);
            break;
        case SALUS__REQUEST__BODY_REGISTER_GRAPH:
            h = sl_handle_register_graph(ss, s, w);
            break;
        case SALUS__REQUEST__BODY_FREE_GRAPH:
            h = sl_handle_free_graph(ss, s, w);
            freed = true; /* its recordings' memory */
            break;
        case SALUS__REQUEST__BODY_RUN:
            h = sl_handle_run(ss, s, w, box);
            break;
        case SALUS__REQUEST__BODY_ATTACH_SHM:
            h = sl_handle_attach_shm(ss, s, w);
            break;
        case SALUS__REQUEST__BODY_STAGE_SHM:
            sl_reply_error(w->reply, SL_EINVAL,
                           "StageShm goes over the descriptor socket (ipc path + \".fd\") with "
                           "the memfd attached, not over NNG");
            break;
        default:
            sl_reply_error(w->reply, SL_EINVAL,
                           "request type %d does not name a session's object (Hello, Status, "
                           "SetPolicy and SetSession carry no session)",
                           (int) w->msg->body_case);
            break;
        }
        if (h == SL_HANDLED_WAIT && !s->blocked) {
            s->blocked = true;
            ss->n_blocked++;
        }
        if (h != SL_HANDLED)
            return;
        finish_head(ss, s, box);
        if (freed)
            sl_sessions_memory_changed(ss, box); /* may close, but not free s */
    }
}

void sl_sessions_submit(sl_sessions *ss, sl_session *s, sl_req *req, Salus__Request *msg,
                        sl_reply *r, sl_outbox *box)
{
    sl_work *w = sl_calloc(1, sizeof *w);
    if (!w) {
        sl_reply_error(r, SL_ENOMEM, "out of host memory");
        sl_request_free(msg);
        sl_outbox_put(box, req, r);
        return;
    }
    w->req = req;
    w->msg = msg;
    w->reply = r;
    w->task.arrival_ns = sl_now_ns();
    w->session = s;
    if (msg->body_case == SALUS__REQUEST__BODY_CLOSE_SESSION)
        s->closing = true;
    if (s->tail)
        s->tail->next = w;
    else
        s->head = w;
    s->tail = w;
    pump(ss, s, box);
}

void sl_sessions_task_done(sl_sessions *ss, sl_exec_task *t, int status, bool lane_idle,
                           sl_outbox *box)
{
    sl_work *w = sl_container_of(t, sl_work, task);
    sl_session *s = w->session;
    bool run = w->msg->body_case == SALUS__REQUEST__BODY_RUN;
    if (status == SL_EDEVICERESET) {
        sl_reply_error(w->reply, status,
                       "the device failed (sticky device error) and is being reset; this "
                       "request did not complete; " SL_RESET_NOTICE);
        if (sl_fault_lost(ss->fault))
            sl_sessions_device_lost(ss);
        s->reset_pending = false; /* told by this reply */
    } else if (status != SL_OK) {
        sl_log_warn("exe.fail", "%s of session %llu failed: %s", run ? "iteration" : "copy",
                    (unsigned long long) s->id, sl_strerror(status));
        bool shm = run && (w->msg->run->n_shm_feeds || w->msg->run->n_shm_fetches);
        const char *why = run ? t->failure : "";
        sl_reply_error(w->reply, status, "%s failed on the device: %s%s%s%s",
                       run ? "the iteration" : "the copy", sl_strerror(status), why[0] ? ": " : "",
                       why,
                       shm && status == SL_EINVAL
                           ? " (an op's input outside its domain, or the session's shared memory "
                             "could not be read or written: its segment faulted)"
                           : "");
    } else if (run) {
        sl_handle_run_done(w);
    }
    finish_head(ss, s, box);
    pump(ss, s, box);
    if (status == SL_EDEVICERESET)
        sl_sessions_fail_queued_runs(ss, box);
    if (lane_idle)
        sl_sessions_memory_changed(ss, box);
}

/* A session the memory manager admitted: it joins the executor on its lane. */
static int admit(sl_sessions *ss, sl_session *s, uint32_t lane)
{
    s->job.sched.lane = lane;
    int rc = sl_exec_join(ss->ex, &s->job, sl_now_ns());
    if (rc)
        return rc;
    s->admitted = true;
    if (sl_obs_tracing(ss->ex->obs)) {
        uint64_t now = sl_now_ns();
        sl_trace_event e = {.kind = SL_TRACE_ADMISSION,
                            .ts_ns = s->open_ns,
                            .dur_ns = now - s->open_ns,
                            .lane = lane,
                            .session = s->id,
                            .priority = s->job.sched.priority};
        sl_obs_record(ss->ex->obs, &e);
    }
    sl_log_info("ses.admit", "session %llu (%s) admitted on lane %u after %.3f s",
                (unsigned long long) s->id, s->name, lane,
                (double) (sl_now_ns() - s->open_ns) / 1e9);
    return SL_OK;
}

/* The refusal of a session that does not fit, with what counted. */
static void refuse_admission(sl_sessions *ss, const sl_session *s, int rc, int reason, sl_reply *r)
{
    sl_mem_stats st;
    sl_mem_get_stats(ss->mem, &st);
    uint64_t e = s->declared_ephemeral ? s->declared_ephemeral : ss->default_ephemeral;
    const char *why = rc == SL_EEXHAUSTED ? sl_mem_reason_name(reason) : sl_strerror(rc);
    if (rc == SL_EEXHAUSTED && reason == SL_MEM_QUOTA)
        sl_reply_error(r, rc,
                       "cannot admit the session: quota: it needs %llu persistent + %llu "
                       "ephemeral bytes%s + %llu of lane workspace, more than the session quota "
                       "(%llu) or the device (%llu) allows; declare a smaller ephemeral_bytes "
                       "or ask for a larger --session-quota / --memory-limit",
                       (unsigned long long) s->declared_persistent, (unsigned long long) e,
                       s->declared_ephemeral ? "" : " (undeclared: the default lane, --lane-size)",
                       (unsigned long long) ss->framework_per_lane, (unsigned long long) ss->quota,
                       (unsigned long long) ss->capacity);
    else
        sl_reply_error(r, rc,
                       "cannot admit the session (persistent %llu, ephemeral %llu bytes%s): %s; "
                       "%llu bytes free, largest block %llu",
                       (unsigned long long) s->declared_persistent, (unsigned long long) e,
                       s->declared_ephemeral ? "" : " by default", why,
                       (unsigned long long) st.free, (unsigned long long) st.largest_free);
}

bool sl_session_owned_by(const sl_session *s, const sl_peer *peer)
{
    return s->has_uid ? peer->has_uid && peer->uid == s->uid : peer->pipe_id == s->pipe_id;
}

void sl_sessions_limits(const sl_sessions *ss, const sl_peer *peer, sl_limits *out)
{
    const sl_tenants *t = &ss->tenants;
    sl_limits_for(t, peer, out);
}

void sl_sessions_limits_of(const sl_sessions *ss, const sl_session *s, sl_limits *out)
{
    sl_peer owner = sl_session_owner(s);
    (void) sl_tenants_limits(&ss->tenants, &owner, s->tenant, out);
}

/* The job step a session opened by peer belongs to (*out NULL: none): the
 * step m names, which must be registered for peer's uid. A session that
 * names none is its user's own, whatever steps the user runs: a process
 * outside the job must not get the step's quota, priority and end.
 * Operators' sessions belong to no step: no limits hold for them anyway.
 * False with the refusal (PERMISSION_DENIED) in r. */
static bool step_of(const sl_sessions *ss, const Salus__OpenSession *m, const sl_peer *peer,
                    const sl_job **out, sl_reply *r)
{
    *out = NULL;
    if (peer->is_operator || !peer->has_uid || !m->has_job)
        return true;
    const sl_job *job = sl_jobs_find(&ss->jobs, m->job_id, m->step_id);
    if (!job || job->uid != peer->uid) {
        sl_reply_error(r, SL_EPERM,
                       job ? "job step %u.%u is not yours"
                           : "job step %u.%u is not running here (it ended, or salusd was not "
                             "told about it)",
                       m->job_id, m->step_id);
        return false;
    }
    *out = job;
    return true;
}

/* The math bits (enum sl_math) a session asks for: each choice left at
 * MATH_DEFAULT takes SL_MATH_DEFAULT's. False (r set) for a value that is
 * no MathMode (a newer client's). */
static bool session_math(const Salus__SessionHints *h, uint8_t *math, sl_reply *r)
{
    *math = SL_MATH_DEFAULT;
    if (!h)
        return true;
    const struct {
        int mode;
        uint8_t bit;
        const char *field;
    } choice[] = {{h->math_matmul, SL_MATH_MATMUL_TF32, "math_matmul"},
                  {h->math_conv, SL_MATH_CONV_TF32, "math_conv"}};
    for (unsigned i = 0; i < 2; i++) {
        if (choice[i].mode == SALUS__MATH_MODE__MATH_EXACT) {
            *math &= (uint8_t) ~choice[i].bit;
        } else if (choice[i].mode == SALUS__MATH_MODE__MATH_TF32) {
            *math |= choice[i].bit;
        } else if (choice[i].mode != SALUS__MATH_MODE__MATH_DEFAULT) {
            sl_reply_error(r, SL_EINVAL, "%s %d is no math mode (0 default, 1 exact, 2 tf32)",
                           choice[i].field, choice[i].mode);
            return false;
        }
    }
    return true;
}

/* A limited session's hints within its limits (sl_tenants_admit): priority
 * and weight clamped, memory sized and checked against its quota. Returns
 * false with the refusal in r. */
static bool within_limits(sl_sessions *ss, sl_session *s, const sl_peer *peer, sl_reply *r)
{
    sl_tenant_ask ask = {.priority = s->job.sched.priority,
                         .weight = s->job.sched.weight,
                         .persistent = s->declared_persistent,
                         .ephemeral = s->declared_ephemeral};
    if (!sl_tenants_admit(&ss->tenants, peer, s->tenant, ss->default_ephemeral, ss->quota, &ask, r))
        return false;
    s->job.sched.priority = ask.priority;
    s->job.sched.weight = ask.weight;
    s->declared_persistent = ask.persistent;
    s->tenant_charge = ask.charge;
    return true;
}

bool sl_sessions_open(sl_sessions *ss, const Salus__OpenSession *m, sl_req *req,
                      const sl_peer *peer, sl_reply *r)
{
    uint32_t pipe_id = peer->pipe_id;
    if (ss->draining) {
        sl_reply_error(r, SL_ESHUTDOWN, "server is shutting down");
        return false;
    }
    for (unsigned i = 0; pipe_id && i < sizeof ss->gone_pipes / sizeof ss->gone_pipes[0]; i++) {
        if (ss->gone_pipes[i] == pipe_id) {
            sl_reply_error(r, SL_ECONN, "the connection closed before the session was opened");
            return false;
        }
    }
    uint32_t max_sessions = ss->cfg->max_sessions ? ss->cfg->max_sessions : SL_DEFAULT_MAX_SESSIONS;
    if (ss->table.count >= max_sessions) {
        sl_reply_error(r, SL_EEXHAUSTED,
                       "too many sessions: %zu open (limit %u, salusd --max-sessions); close some",
                       ss->table.count, max_sessions);
        return false;
    }
    const sl_job *job;
    if (!step_of(ss, m, peer, &job, r))
        return false;
    uint64_t tenant = job ? job->tenant : sl_tenant_key(peer);
    const Salus__SessionHints *h = m->hints;
    uint8_t math;
    if (!session_math(h, &math, r))
        return false;
    sl_session *s = sl_calloc(1, sizeof *s);
    Salus__OpenSessionReply *body = sl_reply_alloc(r, sizeof *body);
    if (!s || !body)
        goto out_oom;
    s->id = ++ss->next_id;
    do
        s->token = random_u64();
    while (!s->token);
    s->pipe_id = pipe_id;
    s->has_uid = peer->has_uid; /* over ipc://, the session is its user's */
    s->uid = peer->uid;
    s->tenant = tenant;
    s->limited = !peer->is_operator;
    s->open_ns = sl_now_ns();
    s->job.sched.weight = 1.0;
    s->job.math = math;
    if (h) {
        /* a client's name reaches logs and terminals (salusctl status) */
        if (h->name)
            sl_escape(s->name, sizeof s->name, h->name, strlen(h->name), SL_ESCAPE_BACKSLASH);
        s->declared_persistent = h->persistent_bytes;
        s->declared_ephemeral = h->ephemeral_bytes;
        if (h->weight > 0 && h->weight < 1e6)
            s->job.sched.weight = h->weight;
        s->job.sched.priority = h->priority;
        s->job.sched.expected_iterations = h->expected_iterations;
        s->job.compute_units = h->compute_units <= 1000000 ? h->compute_units : 1000000;
        if (h->expected_total_s > 0 && h->expected_total_s < 1e9)
            s->job.sched.expected_total_ns = (uint64_t) (h->expected_total_s * 1e9);
    }
    if (job && (!h || !h->priority))
        s->job.sched.priority = job->priority; /* the step's class unless it asks for less */
    if (s->limited && !within_limits(ss, s, peer, r)) {
        sl_free(s);
        return false;
    }
    if (!s->limited) { /* counted, never limited */
        uint64_t e = s->declared_ephemeral ? s->declared_ephemeral : ss->default_ephemeral;
        s->tenant_charge = s->declared_persistent + e < e ? UINT64_MAX : s->declared_persistent + e;
    }
    s->job.sched.id = s->id;
    /* device time is shared between tenants by their weight first, then
     * between a tenant's sessions by theirs */
    sl_limits tenant_limits;
    (void) sl_tenants_limits(&ss->tenants, peer, tenant, &tenant_limits);
    s->job.sched.tenant_key = tenant;
    s->job.sched.tenant_weight = tenant_limits.max_weight;
    salus__open_session_reply__init(body);
    body->session_id = s->id;
    body->token = s->token;
    body->priority = s->job.sched.priority;
    body->weight = s->job.sched.weight;
    body->persistent_bytes = s->declared_persistent;
    sl_reply_msg(r)->body_case = SALUS__REPLY__BODY_OPEN_SESSION;
    sl_reply_msg(r)->open_session = body;

    bool wait = h && h->wait_for_admission;
    int reason = SL_MEM_FITS;
    uint32_t lane = 0;
    unsigned flags =
        (wait ? SL_MEM_ADMIT_WAIT : 0) |
        (sl_exec_wants_exclusive(ss->ex, s->job.sched.priority) ? SL_MEM_ADMIT_EXCLUSIVE : 0);
    int rc = sl_mem_admit_ranked(ss->mem, s->id, s->declared_persistent, s->declared_ephemeral,
                                 flags, sl_exec_wait_rank(ss->ex, &s->job), &reason, &lane);
    if (rc == SL_EEXHAUSTED && wait && reason != SL_MEM_QUOTA) {
        if (sl_tenants_add(&ss->tenants, s->tenant, s->tenant_charge) != SL_OK) {
            sl_mem_release(ss->mem, s->id);
            goto out_oom;
        }
        if (sl_map_put(&ss->table, s->id, s) != SL_OK) {
            tenant_release(ss, s);
            sl_mem_release(ss->mem, s->id);
            goto out_oom;
        }
        s->admit_req = req;
        s->admit_reply = r;
        s->wait_reason =
            reason > SL_MEM_FITS && reason < SL_OBS_WAIT_REASONS ? reason : SL_MEM_CAPACITY;
        sl_log_info("ses.wait", "session %llu (%s) waits for admission: %s",
                    (unsigned long long) s->id, s->name, sl_mem_reason_name(reason));
        return true;
    }
    if (rc) {
        refuse_admission(ss, s, rc, reason, r);
        sl_free(s);
        return false;
    }
    if (sl_tenants_add(&ss->tenants, s->tenant, s->tenant_charge) != SL_OK) {
        sl_mem_release(ss->mem, s->id);
        goto out_oom;
    }
    if (sl_map_put(&ss->table, s->id, s) != SL_OK || admit(ss, s, lane) != SL_OK) {
        (void) sl_map_del(&ss->table, s->id);
        tenant_release(ss, s);
        sl_mem_release(ss->mem, s->id);
        goto out_oom;
    }
    sl_log_info("ses.open", "session %llu (%s) opened on pipe %u", (unsigned long long) s->id,
                s->name, pipe_id);
    return false;

out_oom:
    sl_free(s);
    sl_reply_error(r, SL_ENOMEM, "out of host memory");
    return false;
}

sl_session *sl_sessions_find(sl_sessions *ss, uint64_t id)
{
    sl_session *s = sl_map_get(&ss->table, id);
    return s && !s->closing && s->admitted ? s : NULL;
}

void sl_sessions_rerank(sl_sessions *ss)
{
    size_t i = 0;
    void *v;
    while (sl_map_next(&ss->table, &i, NULL, &v)) {
        sl_session *s = v;
        if (s->admit_req) /* waiting for admission */
            (void) sl_mem_set_rank(ss->mem, s->id, sl_exec_wait_rank(ss->ex, &s->job));
    }
}

void sl_sessions_memory_changed(sl_sessions *ss, sl_outbox *box)
{
    uint64_t id;
    uint32_t lane;
    while (sl_mem_next_admitted(ss->mem, &id, &lane)) {
        sl_session *s = sl_map_get(&ss->table, id);
        if (!s || s->admitted)
            continue;
        bool failed = admit(ss, s, lane) != SL_OK;
        wait_ended(ss, s, !failed);
        if (failed)
            sl_reply_error(s->admit_reply, SL_ENOMEM, "out of host memory");
        sl_outbox_put(box, s->admit_req, s->admit_reply);
        s->admit_req = NULL;
        s->admit_reply = NULL;
        if (failed || s->closing) {
            (void) sl_map_del(&ss->table, s->id);
            tenant_release(ss, s);
            sl_mem_release(ss->mem, s->id);
            session_free(ss, s);
        }
    }
    /* registrations that waited for their lane to go idle */
    size_t i = 0;
    void *v;
    while (ss->n_blocked && sl_map_next(&ss->table, &i, NULL, &v)) {
        sl_session *s = v;
        if (s->blocked && s->head && sl_handle_place_graph(ss, s, s->head) != SL_HANDLED_WAIT) {
            finish_head(ss, s, box);
            pump(ss, s, box); /* may close, but not free other sessions */
            i = 0;            /* the table may have changed: rescan */
        }
    }
}

bool sl_sessions_pipe_holds(const sl_sessions *ss, uint32_t pipe_id)
{
    size_t i = 0;
    void *v;
    while (sl_map_next(&ss->table, &i, NULL, &v))
        if (((const sl_session *) v)->pipe_id == pipe_id)
            return true;
    return false;
}

void sl_sessions_pipe_gone(sl_sessions *ss, uint32_t pipe_id, sl_outbox *box)
{
    ss->gone_pipes[ss->gone_next++ % (sizeof ss->gone_pipes / sizeof ss->gone_pipes[0])] = pipe_id;
    sl_session *lost[64];
    int n_lost;
    /* closing frees sessions, which would disturb the iteration: collect
     * first, in rounds */
    do {
        n_lost = 0;
        size_t i = 0;
        void *v;
        while (n_lost < 64 && sl_map_next(&ss->table, &i, NULL, &v)) {
            sl_session *s = v;
            if (s->pipe_id == pipe_id && !s->closing)
                lost[n_lost++] = s;
        }
        for (int k = 0; k < n_lost; k++) {
            sl_session *s = lost[k];
            sl_reply *r = sl_reply_new(0);
            s->closing = true;
            if (!r) {
                /* cannot queue a close: leave the session to be reclaimed
                 * at shutdown rather than crash */
                sl_log_err("ses.lost", "out of memory closing session %llu",
                           (unsigned long long) s->id);
                continue;
            }
            sl_log_info("ses.lost", "connection of session %llu went away; closing it",
                        (unsigned long long) s->id);
            sl_sessions_submit(ss, s, NULL, &lost_close, r, box);
        }
    } while (n_lost == 64);
}

uint32_t sl_sessions_close_tenants(sl_sessions *ss, bool (*match)(uint64_t tenant, void *arg),
                                   void *arg, sl_outbox *box)
{
    uint32_t closed = 0;
    sl_session *doomed[64];
    int n;
    /* as for a lost connection: collect first, close in rounds */
    do {
        n = 0;
        size_t i = 0;
        void *v;
        while (n < 64 && sl_map_next(&ss->table, &i, NULL, &v)) {
            sl_session *s = v;
            if (!s->closing && match(s->tenant, arg))
                doomed[n++] = s;
        }
        for (int k = 0; k < n; k++) {
            sl_session *s = doomed[k];
            sl_reply *r = sl_reply_new(0);
            s->closing = true;
            if (!r) {
                sl_log_err("ses.job", "out of memory closing session %llu",
                           (unsigned long long) s->id);
                continue;
            }
            sl_log_info("ses.job", "session %llu (%s): its job ended; closing it",
                        (unsigned long long) s->id, s->name);
            sl_sessions_submit(ss, s, NULL, &lost_close, r, box);
            closed++;
        }
    } while (n == 64);
    return closed;
}

void sl_sessions_drain(sl_sessions *ss, sl_outbox *box)
{
    ss->draining = true;
    size_t i = 0;
    void *v;
    while (sl_map_next(&ss->table, &i, NULL, &v)) {
        sl_session *s = v;
        if (s->admit_reply) {
            wait_ended(ss, s, false);
            sl_reply_error(s->admit_reply, SL_ESHUTDOWN, "server is shutting down");
            sl_outbox_put(box, s->admit_req, s->admit_reply);
            s->admit_req = NULL;
            s->admit_reply = NULL;
            continue; /* freed with the server */
        }
        /* a queued run is the session's head: fail it, and everything
         * queued behind it */
        if (sl_exec_unqueue(ss->ex, &s->job))
            fail_pending(ss, s, SL_ESHUTDOWN, "server is shutting down: iteration not started",
                         box);
    }
    sl_exec_finish_parked(ss->ex); /* parked iterations run to their end */
}

void sl_sessions_device_lost(sl_sessions *ss)
{
    size_t i = 0;
    void *v;
    while (sl_map_next(&ss->table, &i, NULL, &v)) {
        sl_session *s = v;
        s->reset_pending = s->admitted;
    }
}

void sl_sessions_device_reset(sl_sessions *ss)
{
    size_t i = 0;
    void *v;
    while (sl_map_next(&ss->table, &i, NULL, &v)) {
        size_t k = 0;
        void *g;
        while (sl_map_next(&((sl_session *) v)->graphs, &k, NULL, &g))
            sl_replay_release(((sl_graph *) g)->replay);
        recordings_sync(ss, v);
    }
}

void sl_sessions_fail_queued_runs(sl_sessions *ss, sl_outbox *box)
{
    /* in rounds: finishing a run may close and free its session */
    for (;;) {
        uint64_t ids[64];
        int n = 0;
        size_t i = 0;
        void *v;
        while (n < 64 && sl_map_next(&ss->table, &i, NULL, &v)) {
            sl_session *s = v;
            if (s->reset_pending && s->head && s->job.sched.n_queued && !s->job.sched.running)
                ids[n++] = s->id;
        }
        if (!n)
            return;
        for (int k = 0; k < n; k++) {
            sl_session *s = sl_map_get(&ss->table, ids[k]);
            if (!s || !s->reset_pending || !sl_exec_unqueue(ss->ex, &s->job))
                continue;
            s->reset_pending = false;
            sl_reply_error(s->head->reply, SL_EDEVICERESET,
                           "the device was reset after a fault before this iteration "
                           "started; " SL_RESET_NOTICE);
            finish_head(ss, s, box);
            pump(ss, s, box);
        }
    }
}

/* The session a staging names, checked as the gate checks a request's. */
static sl_session *staging_session(sl_sessions *ss, uint64_t id, uint64_t token, uint64_t uid,
                                   int *rc, const char **why)
{
    sl_session *s = sl_sessions_find(ss, id);
    if (!s || token != s->token) { /* one answer: it never tells an id is in use */
        *rc = SL_ESESSIONLOST;
        *why = "no such open session with this token";
        s = NULL;
    } else if (!s->has_uid) {
        *rc = SL_EUNSUPPORTED;
        *why = "the session was not opened over ipc://";
        s = NULL;
    } else if (uid != s->uid) {
        *rc = SL_EPERM;
        *why = "the session belongs to another user";
        s = NULL;
    }
    return s;
}

int sl_sessions_stage_begin(sl_sessions *ss, uint64_t id, uint64_t token, uint64_t uid,
                            uint64_t size, const char **why)
{
    int rc = SL_OK;
    sl_session *s = staging_session(ss, id, token, uid, &rc, why);
    if (!s)
        return rc;
    /* a staged segment is replaced by this one: only the attached one counts */
    return sl_shm_reserve(ss->shm, s->shm ? s->shm->size : 0, size, why);
}

int sl_sessions_stage_end(sl_sessions *ss, uint64_t id, uint64_t token, sl_shm *seg,
                          uint64_t *ticket)
{
    sl_session *s = sl_sessions_find(ss, id);
    if (!s || token != s->token) /* closed while the segment was mapped */
        return SL_ESESSIONLOST;
    sl_shm_retire(ss->shm, s->shm_staged);
    s->shm_staged = seg;
    do
        s->shm_ticket = random_u64();
    while (!s->shm_ticket);
    *ticket = s->shm_ticket;
    return SL_OK;
}

int sl_sessions_kill(sl_sessions *ss, uint64_t id, const sl_peer *peer, sl_outbox *box)
{
    sl_session *s = sl_map_get(&ss->table, id);
    if (!s || s->closing)
        return SL_ENOTFOUND;
    if (!peer->is_operator && !sl_session_owned_by(s, peer))
        return SL_EPERM;
    sl_reply *r = sl_reply_new(0);
    if (!r)
        return SL_ENOMEM;
    s->closing = true;
    sl_log_info("ses.kill", "session %llu (%s) closed by %s", (unsigned long long) s->id, s->name,
                peer->is_operator ? "an operator" : "its owner");
    sl_sessions_submit(ss, s, NULL, &lost_close, r, box);
    return SL_OK;
}
