/* Cluster job steps: the operator calls a cluster manager makes, and the
 * step a session belongs to ($SALUS_JOB). */
#include "client_internal.h"

#include <errno.h>
#include <stdlib.h>

/* One number of a step name: decimal, within 32 bits. */
static bool parse_u32(const char *s, char **end, uint32_t *out)
{
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, end, 10);
    if (errno || v > UINT32_MAX)
        return false;
    *out = (uint32_t) v;
    return true;
}

int sl_client_job_from_env(protobuf_c_boolean *has, uint32_t *job_id, uint32_t *step_id)
{
    const char *env = getenv("SALUS_JOB");
    *has = 0;
    if (!env || !*env)
        return SL_OK;
    char *end;
    uint32_t job, step = 0;
    if (!parse_u32(env, &end, &job))
        return SL_EINVAL;
    if (*end == '.' && !parse_u32(end + 1, &end, &step))
        return SL_EINVAL;
    if (*end)
        return SL_EINVAL;
    *has = 1;
    *job_id = job;
    *step_id = step;
    return SL_OK;
}

int salus_job_register(salus_client *c, uint32_t job_id, uint32_t step_id, uint32_t uid,
                       uint64_t memory, int32_t priority)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__RegisterJob m = SALUS__REGISTER_JOB__INIT;
    m.job_id = job_id;
    m.step_id = step_id;
    m.uid = uid;
    m.memory = memory;
    m.priority = priority;
    req.body_case = SALUS__REQUEST__BODY_REGISTER_JOB;
    req.register_job = &m;
    Salus__Reply *rep;
    int rc = sl_client_call(c, &req, &rep);
    if (rc == SL_OK)
        salus__reply__free_unpacked(rep, NULL);
    return rc;
}

int salus_job_close(salus_client *c, uint32_t job_id, uint32_t step_id, int all_steps,
                    uint32_t *sessions_closed)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__CloseJob m = SALUS__CLOSE_JOB__INIT;
    m.job_id = job_id;
    m.step_id = step_id;
    m.all_steps = all_steps != 0;
    req.body_case = SALUS__REQUEST__BODY_CLOSE_JOB;
    req.close_job = &m;
    Salus__Reply *rep;
    int rc = sl_client_call(c, &req, &rep);
    if (rc)
        return rc;
    if (rep->body_case != SALUS__REPLY__BODY_CLOSE_JOB) {
        salus__reply__free_unpacked(rep, NULL);
        return SL_EPROTO;
    }
    if (sessions_closed)
        *sessions_closed = rep->close_job->sessions_closed;
    salus__reply__free_unpacked(rep, NULL);
    return SL_OK;
}
