/* Job requests: RegisterJob and CloseJob from a cluster manager, and how a
 * new session finds the job step it belongs to (jobs.h has the table,
 * proto/salus.proto the wire contract).
 *
 * Called with the server lock held; nothing here blocks. Operator rights
 * are the gate's to check before these run. */
#ifndef SL_JOB_REQUESTS_H
#define SL_JOB_REQUESTS_H

#include "session.h"

/* REGISTER_JOB (operator): registers or replaces the step. Refusals go
 * into r: INVALID_ARGUMENT (the step belongs to another uid),
 * RESOURCE_EXHAUSTED (SL_JOBS_MAX steps), HOST_OUT_OF_MEMORY. */
void sl_job_request_register(sl_sessions *ss, const Salus__RegisterJob *m, sl_reply *r);
/* CLOSE_JOB (operator): closes the sessions of the step (or of every step
 * of the job) and forgets it; the reply says how many of each. Closing
 * replies to the sessions' own queued requests go into box. */
void sl_job_request_close(sl_sessions *ss, const Salus__CloseJob *m, sl_reply *r, sl_outbox *box);

/* A job step's figures over its user's limits: the step's priority is the
 * cap, its memory (when set) the quota. */
void sl_job_limits(const sl_job *job, sl_limits *lim);
/* The step a session that peer opens with m belongs to (*out NULL: none):
 * the step m names, which must be registered for peer's uid, else the
 * uid's only registered step. Operators' sessions belong to no step. False
 * with the refusal (PERMISSION_DENIED) in r. */
bool sl_sessions_job_of(const sl_sessions *ss, const Salus__OpenSession *m, const sl_peer *peer,
                        const sl_job **out, sl_reply *r);

#endif
