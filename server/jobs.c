/* Cluster job steps (jobs.h). */
#include "jobs.h"
#include "sl_alloc.h"
#include "sl_error.h"

#include <stdio.h>

/* Bit 63 marks a step; the job id takes the 32 bits below it and the step
 * id the low 31. Slurm numbers ordinary steps from 0 (bounded by its
 * MaxStepCount, far below 2^31) and gives its special ones (batch, extern,
 * interactive) the last few of 2^32: ordinary ids below ORDINARY_END keep
 * their value, special ids from SPECIAL_FIRST take the 256 values above
 * it, and the ids between, which no step of Slurm has, have no key at all
 * (rather than one shared with another step). */
#define JOB_TENANT_BIT (1ull << 63)
#define STEP_MASK 0x7fffffffu
#define ORDINARY_END 0x7fffff00u
#define SPECIAL_FIRST 0xffffff00u

bool sl_job_step_valid(uint32_t step_id)
{
    return step_id < ORDINARY_END || step_id >= SPECIAL_FIRST;
}

uint64_t sl_job_tenant(uint32_t job_id, uint32_t step_id)
{
    if (!sl_job_step_valid(step_id))
        return 0;
    return JOB_TENANT_BIT | (uint64_t) job_id << 31 | (step_id & STEP_MASK);
}

bool sl_job_tenant_name(uint64_t key, char *buf, size_t len)
{
    if (!(key & JOB_TENANT_BIT))
        return false;
    uint32_t step = (uint32_t) (key & STEP_MASK);
    if (step >= ORDINARY_END)
        step |= ~STEP_MASK;
    snprintf(buf, len, "job %u.%u", (unsigned) ((key >> 31) & 0xffffffffu), (unsigned) step);
    return true;
}

bool sl_job_tenant_of_job(uint64_t key, uint32_t job_id)
{
    return (key & JOB_TENANT_BIT) && ((key >> 31) & 0xffffffffu) == job_id;
}

int sl_jobs_register(sl_jobs *jobs, const sl_job *job)
{
    uint64_t key = sl_job_tenant(job->job_id, job->step_id);
    if (!key)
        return SL_EINVAL;
    sl_job *j = sl_map_get(&jobs->steps, key);
    if (j) {
        if (j->uid != job->uid)
            return SL_EINVAL;
        *j = *job;
        j->tenant = key;
        return SL_OK;
    }
    if (jobs->steps.count >= SL_JOBS_MAX)
        return SL_EEXHAUSTED;
    if (!(j = sl_malloc(sizeof *j)))
        return SL_ENOMEM;
    *j = *job;
    j->tenant = key;
    if (sl_map_put(&jobs->steps, key, j) != SL_OK) {
        sl_free(j);
        return SL_ENOMEM;
    }
    return SL_OK;
}

const sl_job *sl_jobs_by_tenant(const sl_jobs *jobs, uint64_t key)
{
    return (key & JOB_TENANT_BIT) ? sl_map_get(&jobs->steps, key) : NULL;
}

const sl_job *sl_jobs_find(const sl_jobs *jobs, uint32_t job_id, uint32_t step_id)
{
    uint64_t key = sl_job_tenant(job_id, step_id);
    return key ? sl_map_get(&jobs->steps, key) : NULL;
}

uint32_t sl_jobs_remove(sl_jobs *jobs, uint32_t job_id, uint32_t step_id, bool all_steps)
{
    if (!all_steps) {
        uint64_t key = sl_job_tenant(job_id, step_id);
        sl_job *j = key ? sl_map_del(&jobs->steps, key) : NULL;
        sl_free(j);
        return j ? 1 : 0;
    }
    uint32_t n = 0;
    uint64_t keys[64];
    int n_keys;
    /* deleting while iterating would skip entries: collect first, in rounds */
    do {
        n_keys = 0;
        size_t i = 0;
        uint64_t key;
        void *v;
        while (n_keys < 64 && sl_map_next(&jobs->steps, &i, &key, &v))
            if (((const sl_job *) v)->job_id == job_id)
                keys[n_keys++] = key;
        for (int k = 0; k < n_keys; k++) {
            sl_free(sl_map_del(&jobs->steps, keys[k]));
            n++;
        }
    } while (n_keys == 64);
    return n;
}

void sl_jobs_fini(sl_jobs *jobs)
{
    size_t i = 0;
    void *v;
    while (sl_map_next(&jobs->steps, &i, NULL, &v))
        sl_free(v);
    sl_map_fini(&jobs->steps);
}
