/* Cluster job steps: what a cluster manager (the Slurm SPANK plugin, as an
 * operator) tells salusd about the jobs on this node, so that the sessions a
 * job's processes open live under the job's memory quota and priority and
 * end with it (proto/salus.proto, RegisterJob and CloseJob).
 *
 * A step is named by (job id, step id) and belongs to one uid. Sessions of
 * a step are counted under a tenant key of their own (tenants.h), derived
 * from the step's name, so what the user holds outside the job and what
 * each step holds are apart. A session belongs to a step only when it
 * names the step (SALUS_JOB, which the Slurm plugin gives the step's
 * tasks): a process of the same user outside the job is the user's own
 * tenant, under the user's limits, and outlives the step. The table holds at most SL_JOBS_MAX
 * steps, so an operator's mistake (never closing) costs bounded memory.
 *
 * Not thread-safe: the server lock guards the table (it lives in
 * sl_sessions). Nothing here blocks. */
#ifndef SL_JOBS_H
#define SL_JOBS_H

#include "sl_map.h"

#include <stdbool.h>
#include <stdint.h>

#define SL_JOBS_MAX 4096

/* One registered step. */
typedef struct sl_job {
    uint32_t job_id, step_id;
    uint32_t uid;
    uint64_t memory;  /* quota of all its sessions together; 0 = the user's own limits */
    int32_t priority; /* default and highest priority of its sessions */
    uint64_t tenant;  /* the tenant key its sessions are counted under */
} sl_job;

typedef struct sl_jobs {
    sl_map steps; /* sl_job_key() -> sl_job */
} sl_jobs;

/* Whether step_id can be registered: every id Slurm gives a step (from 0
 * up, and its special ones at the top of 32 bits), not the 2^31 - 256 ids
 * between, which a 31-bit key cannot tell from the others. */
bool sl_job_step_valid(uint32_t step_id);
/* The tenant key of step (job_id, step_id): above every uid key and the
 * remote key, one of its own for every valid step, and telling the step's
 * name back (sl_job_tenant_name). 0 (no step's key, nor any tenant's) for a
 * step id that is not valid. */
uint64_t sl_job_tenant(uint32_t job_id, uint32_t step_id);
/* Whether key is a step's tenant key; if so, writes "job J.S" into buf. */
bool sl_job_tenant_name(uint64_t key, char *buf, size_t len);
/* Whether key is the tenant key of a step of job_id. */
bool sl_job_tenant_of_job(uint64_t key, uint32_t job_id);

/* Registers (or replaces) a step. Errors: SL_EINVAL (registered for another
 * uid, or a step id that is not valid: callers tell them apart with
 * sl_job_step_valid), SL_EEXHAUSTED (SL_JOBS_MAX steps already), SL_ENOMEM. */
int sl_jobs_register(sl_jobs *jobs, const sl_job *job);
/* The registered step whose sessions count under tenant key, or NULL. */
const sl_job *sl_jobs_by_tenant(const sl_jobs *jobs, uint64_t key);
/* The registered step, or NULL. */
const sl_job *sl_jobs_find(const sl_jobs *jobs, uint32_t job_id, uint32_t step_id);
/* Forgets step (job_id, step_id), or every step of job_id when all_steps.
 * Returns how many were forgotten. */
uint32_t sl_jobs_remove(sl_jobs *jobs, uint32_t job_id, uint32_t step_id, bool all_steps);
/* Frees the table. */
void sl_jobs_fini(sl_jobs *jobs);

#endif
