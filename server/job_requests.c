/* Job requests (job_requests.h). */
#include "job_requests.h"
#include "sl_error.h"
#include "sl_log.h"

/* A job step's figures over its user's limits. */
void sl_job_limits(const sl_job *job, sl_limits *lim)
{
    lim->max_priority = job->priority;
    if (job->memory)
        lim->memory = job->memory;
}

void sl_sessions_limits_of(const sl_sessions *ss, const sl_session *s, sl_limits *out)
{
    sl_peer owner = {.pipe_id = s->pipe_id, .has_uid = s->has_uid, .uid = s->uid};
    sl_sessions_limits(ss, &owner, out);
    const sl_job *job = sl_jobs_by_tenant(&ss->jobs, s->tenant);
    if (job)
        sl_job_limits(job, out);
}

/* The job step a session opened by peer belongs to (*out NULL: none), or
 * false with the refusal in r. Operators' sessions belong to no step: no
 * limits hold for them anyway. */
bool sl_sessions_job_of(const sl_sessions *ss, const Salus__OpenSession *m, const sl_peer *peer,
                        const sl_job **out, sl_reply *r)
{
    *out = NULL;
    if (peer->is_operator || !peer->has_uid)
        return true;
    if (!m->has_job) {
        bool several;
        *out = sl_jobs_only_of(&ss->jobs, peer->uid, &several);
        if (several) {
            sl_reply_error(r, SL_EPERM,
                           "uid %llu runs several job steps here: name the session's step "
                           "(SALUS_JOB=JOB.STEP, which the Slurm plugin sets)",
                           (unsigned long long) peer->uid);
            return false;
        }
        return true;
    }
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

void sl_job_request_register(sl_sessions *ss, const Salus__RegisterJob *m, sl_reply *r)
{
    sl_job job = {.job_id = m->job_id,
                  .step_id = m->step_id,
                  .uid = m->uid,
                  .memory = m->memory,
                  .priority = m->priority};
    int rc = sl_jobs_register(&ss->jobs, &job);
    switch (rc) {
    case SL_OK:
        sl_log_info("job.register",
                    "job step %u.%u of uid %u: memory quota %llu bytes, priority %d", m->job_id,
                    m->step_id, m->uid, (unsigned long long) m->memory, m->priority);
        return;
    case SL_EINVAL:
        sl_reply_error(r, rc, "job step %u.%u is registered for another uid", m->job_id,
                       m->step_id);
        return;
    case SL_EEXHAUSTED:
        sl_reply_error(r, rc, "%u job steps are registered already: close ended ones (CloseJob)",
                       (unsigned) SL_JOBS_MAX);
        return;
    default:
        sl_reply_error(r, SL_ENOMEM, "out of host memory");
        return;
    }
}

struct close_match {
    uint32_t job_id, step_id;
    bool all_steps;
};

/* Whether tenant key is the step's (or, for all_steps, any step's of the
 * job): the key encodes the step, so no table lookup is needed and
 * sessions of a step forgotten earlier still match. */
static bool step_matches(uint64_t tenant, void *arg)
{
    const struct close_match *c = arg;
    return c->all_steps ? sl_job_tenant_of_job(tenant, c->job_id)
                        : tenant == sl_job_tenant(c->job_id, c->step_id);
}

void sl_job_request_close(sl_sessions *ss, const Salus__CloseJob *m, sl_reply *r, sl_outbox *box)
{
    Salus__CloseJobReply *body = sl_reply_alloc(r, sizeof *body);
    if (!body) {
        sl_reply_error(r, SL_ENOMEM, "out of host memory");
        return;
    }
    struct close_match c = {.job_id = m->job_id, .step_id = m->step_id, .all_steps = m->all_steps};
    salus__close_job_reply__init(body);
    body->steps_closed = sl_jobs_remove(&ss->jobs, m->job_id, m->step_id, m->all_steps);
    body->sessions_closed = sl_sessions_close_tenants(ss, step_matches, &c, box);
    sl_reply_msg(r)->body_case = SALUS__REPLY__BODY_CLOSE_JOB;
    sl_reply_msg(r)->close_job = body;
    if (m->all_steps)
        sl_log_info("job.close", "job %u ended: %u steps forgotten, %u sessions closed", m->job_id,
                    body->steps_closed, body->sessions_closed);
    else
        sl_log_info("job.close", "job step %u.%u ended: %u sessions closed", m->job_id, m->step_id,
                    body->sessions_closed);
}
