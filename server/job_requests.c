/* Job requests (job_requests.h). */
#include "job_requests.h"
#include "sl_error.h"
#include "sl_log.h"

void sl_job_request_register(sl_sessions *ss, const Salus__RegisterJob *m, sl_reply *r)
{
    sl_job job = {.job_id = m->job_id,
                  .step_id = m->step_id,
                  .uid = m->uid,
                  .memory = m->memory,
                  .priority = m->priority};
    if (!sl_job_step_valid(m->step_id)) {
        sl_reply_error(r, SL_EINVAL,
                       "job step %u.%u: no step has that id (steps are numbered from 0, special "
                       "ones from 4294967040 up)",
                       m->job_id, m->step_id);
        return;
    }
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
 * sessions of a step forgotten earlier still match. A step id that is not
 * valid has no key and matches nothing. */
static bool step_matches(uint64_t tenant, void *arg)
{
    const struct close_match *c = arg;
    if (c->all_steps)
        return sl_job_tenant_of_job(tenant, c->job_id);
    uint64_t key = sl_job_tenant(c->job_id, c->step_id);
    return key && tenant == key;
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
